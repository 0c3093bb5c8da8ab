//! The deterministic simulation of the lifecycle workers on virtual time (issue 12, part 2 of
//! the simulation): the engine's real [`Worker`] loops (claim, lease renewal, settle, idle
//! sleep until the next due command) of several processes, over one shared in-memory store and the reference
//! KnowledgeFS model of the test kit (`tenantry_testkit::knowledge_fs::state`), all on a
//! paused current-thread tokio runtime with [`ManualClock::following_tokio`] clocks.
//!
//! A seeded schedule drives the run: create and delete requests, virtual time passing, crashes
//! of a process (its worker futures are dropped) and restarts (new workers with new lease
//! owners), time jumps, steps of a process's wall clock, stalls of a process, and the fault
//! weather. Every remote
//! call draws its fate from the run's generator: answered, answer lost, connection reset
//! (before or after the request left), stall (answer delayed past the lease), timeout (no
//! answer before the call deadline), 503, and 500/502/504 from a gateway whose backend may
//! still apply the request up to 170 s later (so deliveries land out of order). Requests land
//! in their own tasks: dropping a crashed worker's call does not stop its delivery.
//!
//! A stall ([`WorkerOp::Stall`]) stands for a process that stops running between its own
//! lease check and the statement it sends (a GC pause, SIGSTOP, a descheduled thread): every
//! lease statement of the process (claim, renewal, settle) that starts during the stall reaches
//! the store only when the stall ends, while the database clock and the other processes go on.
//! The dispatcher checks its lease's local deadline before it sends and cancels a remote call
//! when the deadline passes, so without stalls no renewal or settle ever reaches the store
//! after the lease expired; a stall longer than the lease lets another process take the command
//! over first, and the late renewal or settle must be refused by the store's owner/epoch
//! compare-and-set (counted as a lease lost; [`WorkerBug::SettleWithoutEpochCheck`] lets it
//! through). The process's monotonic clock keeps running through a stall, as `CLOCK_MONOTONIC`
//! does through a GC pause or SIGSTOP, so its timers (renewal ticks, the cancellation of a call
//! at the lease's deadline) fire on time; only its lease statements are held. Remote calls are
//! not held: a request that leaves after its lease expired is out of this fault's scope (the
//! sender invariant below would report it).
//!
//! Checked after every step: at most one live lease per command (the dispatcher's local view:
//! a deadline on the holder's monotonic clock counted from before the claim or renewal was
//! sent, so from before any stall that held it, not lost, its process alive; a stalled holder's
//! statement in flight does not keep its view live, it is judged by the store when it lands);
//! every remote call is sent under the command's current lease (store owner, unexpired); no
//! settle from a stale lease is accepted; no renewal of a lease that is stale or expired in
//! database time is accepted; at most one remote space per provisioning key; a control
//! space is in a state its requests allow; a deleted control space has no remote space. After
//! the schedule the faults stop, crashed processes restart, virtual time runs until every
//! command finished, and the drained state must match what was asked.
//!
//! A run is a pure function of its seed: [`run`] returns a digest of the final state, equal
//! for equal seeds.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenantry_engine::{CommandIntake, Dispatcher, DispatcherConfig, Worker, WorkerConfig};
use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, IntakePlan, RequestDeletion};
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, CommandStatus, ControlSpace, ControlSpaceState,
    DeletionProgress, DeletionRequest, LeaseToken, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest, Settlement,
};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandFilter, CommandQueue, ControlSpaceReader, IntakeStore, IntakeStoreError,
    KnowledgeFs, RemoteError, SettleError, StoreError, Submitted,
};
use tenantry_testkit::knowledge_fs::RemoteErrorBody;
use tenantry_testkit::knowledge_fs::SpaceRecord;
use tenantry_testkit::knowledge_fs::state::{DeletionBody, KnowledgeFsModel, ProvisionBody};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::SimFailure;

/// Processes of a run, each with its own dispatcher, clock and workers.
pub const PROCESSES: usize = 3;
/// Workers per process.
pub const WORKERS: usize = 2;
/// Control spaces alive (created, not asked to be deleted) at most at once.
pub const LIVE_SPACES: usize = 4;
/// Lease length of every dispatcher (renewed every 10 s).
pub const LEASE: Duration = Duration::from_secs(30);
/// The remote call deadline: a call not answered by then ends with an unknown outcome.
pub const CALL_DEADLINE: Duration = Duration::from_secs(150);
/// Latest a request lands after it was sent (a gateway answered while the backend went on);
/// below the dispatcher's absence grace (600 s), as the protocol assumes.
pub const MAX_LANDING: Duration = Duration::from_secs(170);
/// Events kept for the failure report.
const TRACE: usize = 40;

tokio::task_local! {
    /// The lease owner of the worker whose task is running (the caller of a remote call).
    static CALLER: String;
}

/// A deliberately broken component, to show the run finds what it must (test-only switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerBug {
    /// The store accepts a settle from any lease of a processing command (no owner/epoch
    /// compare-and-set): a worker that lost its lease overwrites its successor's result.
    SettleWithoutEpochCheck,
    /// The store's claim also takes commands whose lease is still live.
    ClaimWithoutExpiryCheck,
    /// The dispatcher's absence grace is 0: a deletion completes on a lookup's absence while a
    /// provision request of an earlier attempt can still land (reordered delivery).
    NoAbsenceGrace,
}

/// One step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerOp {
    /// Intake: create a new control space (when fewer than [`LIVE_SPACES`] are alive).
    Create,
    /// Intake: request the deletion of the `n`-th alive control space (modulo their count).
    Delete(usize),
    /// Virtual time passes (seconds; 0 lets the ready tasks run once).
    Run(u64),
    /// Process `p` crashes: its workers' futures are dropped mid-flight.
    Crash(usize),
    /// Process `p` (if crashed) restarts with new workers and lease owners.
    Restart(usize),
    /// Every clock jumps forward (the whole system was suspended), after pending deliveries
    /// landed.
    Jump(u64),
    /// Process `p`'s wall clock is stepped by the given seconds (NTP, an operator).
    StepWall(usize, i64),
    /// Percentage of remote calls that meet a fault from now on.
    Weather(u32),
    /// Process `p` stalls for the given seconds of database time (a GC pause, SIGSTOP, a
    /// descheduled thread, after its lease checks): its claims, renewals and settles that
    /// start before the stall ends reach the store when it ends, while the database clock and
    /// the other processes go on. Its clock and timers keep running (see the module docs).
    Stall(usize, u64),
}

/// Draws the next step.
pub fn draw(rng: &mut StdRng) -> WorkerOp {
    match rng.random_range(0..21u8) {
        0..=2 => WorkerOp::Create,
        3 | 4 => WorkerOp::Delete(rng.random_range(0..LIVE_SPACES)),
        5..=12 => WorkerOp::Run([0, 1, 3, 10, 40][rng.random_range(0..5usize)]),
        13 => WorkerOp::Crash(rng.random_range(0..PROCESSES)),
        14 | 15 => WorkerOp::Restart(rng.random_range(0..PROCESSES)),
        16 => WorkerOp::Jump([35, 200, 700][rng.random_range(0..3usize)]),
        17 => WorkerOp::StepWall(
            rng.random_range(0..PROCESSES),
            [-3600, -20, 20, 3600][rng.random_range(0..4usize)],
        ),
        18 | 19 => WorkerOp::Weather([0, 10, 35, 70][rng.random_range(0..4usize)]),
        _ => WorkerOp::Stall(
            rng.random_range(0..PROCESSES),
            [15, 40, 90][rng.random_range(0..3usize)],
        ),
    }
}

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerRunSummary {
    /// Steps of the schedule.
    pub steps: u64,
    /// Commands at the end (all finished).
    pub commands: usize,
    /// Remote calls made.
    pub remote_calls: u64,
    /// Lease renewals the store accepted.
    pub renewals: u64,
    /// Renewals and settles refused because another worker had taken the lease over.
    pub leases_lost: u64,
    /// Requests that landed after their caller stopped waiting (lost answer, timeout, crash).
    pub late_landings: u64,
    /// Lease statements (claims, renewals, settles) a stall of their process held
    /// ([`WorkerOp::Stall`]).
    pub stalled_statements: u64,
    /// Virtual time the run covered, seconds.
    pub virtual_seconds: u64,
    /// Hash of the final state (commands, control spaces, remote spaces, trace): equal seeds
    /// give equal digests.
    pub digest: u64,
}

/// The lease as its holder sees it (mirrors the dispatcher's local lease book).
#[derive(Debug, Clone)]
struct LeaseView {
    process: usize,
    generation: u32,
    owner: String,
    deadline: Instant,
    lost: bool,
    closed: bool,
}

/// State shared by the simulated store, the remote and the driver.
struct World {
    remote: KnowledgeFsModel,
    rng: StdRng,
    fault_percent: u32,
    pending_deliveries: usize,
    trace: VecDeque<String>,
    violations: Vec<String>,
    leases: BTreeMap<(CommandId, i64), LeaseView>,
    remote_calls: u64,
    renewals: u64,
    leases_lost: u64,
    late_landings: u64,
    stalled_statements: u64,
    /// Per process: the database clock's monotonic reading until which it is stalled.
    stalled_until: [Option<Instant>; PROCESSES],
    db_clock: ManualClock,
}

impl World {
    fn event(&mut self, text: String) {
        if self.trace.len() == TRACE {
            self.trace.pop_front();
        }
        let at = self.db_clock.now().timestamp() - START;
        self.trace.push_back(format!("t={at}s {text}"));
    }
}

type Shared = Arc<Mutex<World>>;

fn world(shared: &Shared) -> MutexGuard<'_, World> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

const START: i64 = 1_900_000_000;

// ----------------------------------------------------------------------------------------
// The store of one process: the shared in-memory store, recording leases as their holders see
// them, checking settles, and planting the store bugs.

#[derive(Clone)]
struct SimStore {
    inner: InMemoryLifecycleStore,
    world: Shared,
    process: usize,
    generation: u32,
    clock: ManualClock,
    bug: Option<WorkerBug>,
}

fn holds(record: &CommandRecord, lease: &LeaseToken) -> bool {
    record.status == CommandStatus::Processing
        && record.lease_owner.as_ref() == Some(&lease.owner)
        && record.lease_epoch == lease.epoch
}

impl SimStore {
    /// Holds a lease statement of this process while the process is stalled
    /// ([`WorkerOp::Stall`]): it reaches the store when the stall ends (a stall extended
    /// meanwhile holds it longer), however long after the dispatcher checked its lease.
    async fn held_while_stalled(&self, statement: &str) {
        let mut counted = false;
        loop {
            let (until, db_clock) = {
                let w = world(&self.world);
                (w.stalled_until[self.process], w.db_clock.clone())
            };
            let Some(until) = until.filter(|until| db_clock.monotonic() < *until) else {
                return;
            };
            if !counted {
                counted = true;
                let caller = CALLER.try_with(Clone::clone).unwrap_or_default();
                let mut w = world(&self.world);
                w.stalled_statements += 1;
                w.event(format!("{caller} {statement} held by the stall"));
            }
            db_clock.sleep_until(until).await;
        }
    }
}

#[async_trait]
impl CommandQueue for SimStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        let started = self.clock.monotonic();
        self.held_while_stalled("claim").await;
        if self.bug == Some(WorkerBug::ClaimWithoutExpiryCheck) {
            let now = world(&self.world).db_clock.now();
            if let Some(mut live) = self.inner.commands().into_iter().find(|r| {
                r.status == CommandStatus::Processing
                    && r.lease_expires_at.is_some_and(|at| at > now)
            }) {
                live.lease_expires_at = Some(now);
                self.inner.put_command(live);
            }
        }
        let claimed = self.inner.claim(request).await?;
        let mut w = world(&self.world);
        for command in &claimed {
            w.leases.insert(
                (command.id().clone(), command.lease.epoch.0),
                LeaseView {
                    process: self.process,
                    generation: self.generation,
                    owner: request.owner.to_string(),
                    deadline: started + request.lease_duration,
                    lost: false,
                    closed: false,
                },
            );
            w.event(format!(
                "{} claims {} {} (epoch {}, attempt {})",
                request.owner,
                command.operation,
                command.control_space_id,
                command.lease.epoch.0,
                command.attempt_count
            ));
        }
        Ok(claimed)
    }

    async fn next_due_in(&self, include_provision: bool) -> Result<Option<Duration>, StoreError> {
        self.inner.next_due_in(include_provision).await
    }

    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: Duration,
    ) -> Result<LeaseToken, SettleError> {
        let started = self.clock.monotonic();
        self.held_while_stalled(&format!(
            "renewal of {} epoch {}",
            lease.command_id, lease.epoch.0
        ))
        .await;
        let current = self.inner.command(&lease.command_id);
        let result = self.inner.renew_lease(lease, lease_duration).await;
        let mut w = world(&self.world);
        let key = (lease.command_id.clone(), lease.epoch.0);
        match &result {
            Ok(_) => {
                let now = w.db_clock.now();
                let live = current.as_ref().is_some_and(|r| {
                    holds(r, lease) && r.lease_expires_at.is_some_and(|at| at > now)
                });
                if !live {
                    w.violations.push(format!(
                        "a renewal of a stale or expired lease was accepted: {} epoch {} of {} \
                         (command: {:?})",
                        lease.owner,
                        lease.epoch.0,
                        lease.command_id,
                        current.map(|r| (
                            r.status,
                            r.lease_owner,
                            r.lease_epoch.0,
                            r.lease_expires_at
                        ))
                    ));
                }
                w.renewals += 1;
                if let Some(view) = w.leases.get_mut(&key) {
                    view.deadline = view.deadline.max(started + lease_duration);
                }
            }
            Err(SettleError::LeaseLost { .. }) => {
                w.leases_lost += 1;
                if let Some(view) = w.leases.get_mut(&key) {
                    view.lost = true;
                }
                w.event(format!(
                    "{} renewal of {} epoch {} refused",
                    lease.owner, lease.command_id, lease.epoch.0
                ));
            }
            Err(_) => {}
        }
        result
    }

    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        self.held_while_stalled(&format!(
            "settle of {} epoch {}",
            lease.command_id, lease.epoch.0
        ))
        .await;
        let current = self.inner.command(&lease.command_id);
        let held = current.as_ref().is_some_and(|r| holds(r, lease));
        let token = match (&current, self.bug) {
            (Some(r), Some(WorkerBug::SettleWithoutEpochCheck))
                if !held && r.status == CommandStatus::Processing =>
            {
                LeaseToken {
                    owner: r.lease_owner.clone().unwrap_or_else(|| lease.owner.clone()),
                    epoch: r.lease_epoch,
                    ..lease.clone()
                }
            }
            _ => lease.clone(),
        };
        let result = self.inner.settle(&token, settlement).await;
        let mut w = world(&self.world);
        let key = (lease.command_id.clone(), lease.epoch.0);
        let status = settlement
            .status()
            .map_or_else(|| "no change".to_owned(), |s| s.to_string());
        match &result {
            Ok(()) => {
                if !held {
                    let now_epoch = current.map_or(0, |r| r.lease_epoch.0);
                    w.violations.push(format!(
                        "a settle from a stale lease was accepted: {} epoch {} settled {} as {status} \
                         while the current epoch is {now_epoch}",
                        lease.owner, lease.epoch.0, lease.command_id
                    ));
                }
                if settlement.outcome.is_some()
                    && let Some(view) = w.leases.get_mut(&key)
                {
                    view.closed = true;
                }
                w.event(format!(
                    "{} settles {} epoch {} as {status}",
                    lease.owner, lease.command_id, lease.epoch.0
                ));
            }
            Err(SettleError::LeaseLost { .. }) => {
                w.leases_lost += 1;
                if let Some(view) = w.leases.get_mut(&key) {
                    view.closed = true;
                }
                w.event(format!(
                    "{} settle of {} epoch {} refused: lease lost",
                    lease.owner, lease.command_id, lease.epoch.0
                ));
            }
            Err(other) => w.event(format!(
                "{} settle of {} refused: {other}",
                lease.owner, lease.command_id
            )),
        }
        result
    }

    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.inner
            .latest_provision(tenant_id, control_space_id)
            .await
    }

    async fn list_commands(
        &self,
        filter: &CommandFilter,
    ) -> Result<Vec<CommandRecord>, StoreError> {
        self.inner.list_commands(filter).await
    }
}

#[async_trait]
impl ControlSpaceReader for SimStore {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        self.inner.control_space(tenant_id, control_space_id).await
    }
}

#[async_trait]
impl IntakeStore for SimStore {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        self.inner.submit(plan).await
    }

    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.inner.command_by_idempotency_key(key).await
    }
}

// ----------------------------------------------------------------------------------------
// The remote: the reference KnowledgeFS model behind a faulty network.

/// What the network does to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Answered,
    AnswerLost,
    ResetBeforeSending,
    ResetAfterSending,
    Stall,
    Timeout,
    Unavailable,
    Gateway(u16),
}

#[derive(Clone)]
struct SimRemote {
    world: Shared,
    store: InMemoryLifecycleStore,
    /// The caller's process clock: the call deadline is a timer of the caller.
    clock: ManualClock,
}

fn remote_error(body: &RemoteErrorBody) -> RemoteError {
    RemoteError::answered(body.status, body.code, body.message.clone())
}

impl SimRemote {
    /// Checks that the caller sends under the command's current, unexpired lease.
    fn check_sender(w: &mut World, command: Option<CommandRecord>, call: &str) {
        let caller = CALLER.try_with(Clone::clone).unwrap_or_default();
        let now = w.db_clock.now();
        let ok = command.as_ref().is_some_and(|r| {
            r.status == CommandStatus::Processing
                && r.lease_owner.as_ref().map(LeaseOwner::as_str) == Some(caller.as_str())
                && r.lease_expires_at.is_some_and(|at| at > now)
        });
        if !ok {
            let holder = command.map(|r| {
                format!(
                    "{} under {:?} epoch {} until {:?}",
                    r.status, r.lease_owner, r.lease_epoch.0, r.lease_expires_at
                )
            });
            w.violations.push(format!(
                "remote {call} sent by {caller} without the command's current lease (command: {holder:?})"
            ));
        }
    }

    fn draw_fate(w: &mut World) -> Fate {
        if w.rng.random_range(0..100) >= w.fault_percent {
            return Fate::Answered;
        }
        match w.rng.random_range(0..8u8) {
            0 => Fate::AnswerLost,
            1 => Fate::ResetBeforeSending,
            2 => Fate::ResetAfterSending,
            3 => Fate::Stall,
            4 => Fate::Timeout,
            5 => Fate::Unavailable,
            _ => Fate::Gateway([500, 502, 504][w.rng.random_range(0..3usize)]),
        }
    }

    /// Sends one call: its effect `apply` lands (or not) in its own task, as the network
    /// decides; the caller waits for the answer until the call deadline.
    async fn call<T: Send + 'static>(
        &self,
        name: &str,
        key: &IdempotencyKey,
        apply: impl FnOnce(&mut KnowledgeFsModel, chrono::DateTime<Utc>) -> Result<T, RemoteErrorBody>
        + Send
        + 'static,
    ) -> Result<T, RemoteError> {
        // The sender: mutations carry their command's id as the key (docs/protocol.md,
        // "Idempotency"); a lookup carries its delete command's caller key.
        let command = match CommandId::parse(key.as_str())
            .ok()
            .and_then(|id| self.store.command(&id))
        {
            Some(command) => Some(command),
            None => self
                .store
                .command_by_idempotency_key(key)
                .await
                .ok()
                .flatten(),
        };
        let (fate, landing, answer_after) = {
            let mut w = world(&self.world);
            w.remote_calls += 1;
            Self::check_sender(&mut w, command, name);
            let fate = Self::draw_fate(&mut w);
            let lands = match fate {
                Fate::ResetBeforeSending | Fate::Unavailable => false,
                Fate::ResetAfterSending | Fate::Gateway(_) => w.rng.random_bool(0.5),
                _ => true,
            };
            let landing = match fate {
                _ if !lands => None,
                Fate::Timeout | Fate::Gateway(_) => Some(Duration::from_secs(
                    w.rng.random_range(0..=MAX_LANDING.as_secs()),
                )),
                _ => Some(Duration::from_millis(w.rng.random_range(0..1_500))),
            };
            let answer_after = match fate {
                Fate::Stall => Duration::from_secs(w.rng.random_range(35..140)),
                _ => Duration::from_millis(w.rng.random_range(0..1_500)),
            };
            let caller = CALLER.try_with(Clone::clone).unwrap_or_default();
            w.event(format!("{caller} {name} {key}: {fate:?}"));
            (fate, landing, answer_after)
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Some(delay) = landing {
            world(&self.world).pending_deliveries += 1;
            let shared = Arc::clone(&self.world);
            let name = name.to_owned();
            let key = key.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut w = world(&shared);
                let now = w.db_clock.now();
                let result = apply(&mut w.remote, now);
                let outcome = match &result {
                    Ok(_) => "applied".to_owned(),
                    Err(e) => format!("refused {} {}", e.status, e.code),
                };
                w.event(format!("{name} {key} lands: {outcome}"));
                w.pending_deliveries -= 1;
                drop(w);
                if tx.send(result).is_err() {
                    // The caller stopped waiting (answer lost, timeout, crash): a late landing.
                    world(&shared).late_landings += 1;
                }
            });
        }
        let answer = async {
            match fate {
                Fate::Answered | Fate::Stall => {
                    let result = rx.await.map_err(|_| {
                        RemoteError::outcome_unknown("the request was lost on the way")
                    })?;
                    tokio::time::sleep(answer_after).await;
                    result.map_err(|e| remote_error(&e))
                }
                Fate::AnswerLost => {
                    let _ = rx.await;
                    Err(RemoteError::outcome_unknown(
                        "connection closed after the request was sent",
                    ))
                }
                Fate::ResetBeforeSending => Err(RemoteError::not_dispatched(
                    "connection reset before the request was sent",
                )),
                Fate::ResetAfterSending => Err(RemoteError::outcome_unknown(
                    "connection reset after the request was sent",
                )),
                Fate::Timeout => std::future::pending().await,
                Fate::Unavailable => Err(RemoteError::answered(
                    503,
                    "KNOWLEDGE_FS_UNAVAILABLE",
                    "try again later",
                )),
                Fate::Gateway(status) => Err(RemoteError::answered(
                    status,
                    "GATEWAY_ERROR",
                    "the gateway gave up; the backend may go on",
                )),
            }
        };
        tokio::select! {
            biased;
            result = answer => result,
            () = self.clock.sleep(CALL_DEADLINE) => {
                Err(RemoteError::outcome_unknown("no answer before the call deadline"))
            }
        }
    }
}

#[async_trait]
impl KnowledgeFs for SimRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let namespace = request.namespace_id.clone();
        let body = ProvisionBody {
            control_space_id: request.control_space_id.clone(),
            operation_id: request.operation_id.clone(),
            provisioning_key: request.provisioning_key.clone(),
            name: request.name.clone(),
            slug: request.slug.clone(),
            icon: request.icon.clone(),
            description: request.description.clone(),
            model_intent: request.model_intent.clone(),
            profile_intent: request.profile_intent.clone(),
        };
        self.call("provision", &request.idempotency_key, move |model, _| {
            model.provision(&namespace, &body).map(|p| p.space)
        })
        .await
    }

    async fn find_by_provisioning_key(
        &self,
        namespace: &TenantId,
        key: &tenantry_kernel::ProvisioningKey,
        control_space: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        let (namespace, key, control_space) =
            (namespace.clone(), key.clone(), control_space.clone());
        // A lookup carries no idempotency key; the sender is checked through the delete
        // command of its control space.
        let idempotency = self::key(format!("delete-{control_space}"));
        self.call("lookup", &idempotency, move |model, _| {
            Ok(model
                .lookup(&namespace, &key, Some(&control_space))
                .into_iter()
                .next())
        })
        .await
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        let namespace = request.namespace_id.clone();
        let space = request.knowledge_space_id.clone();
        let body = DeletionBody {
            control_space_id: request.control_space_id.clone(),
            operation_id: request.operation_id.clone(),
            provisioning_key: request.provisioning_key.clone(),
            expected_revision: request.expected_revision,
        };
        self.call("deletion", &request.idempotency_key, move |model, now| {
            model.delete(&namespace, &space, &body, now)
        })
        .await
    }

    async fn revoke_grant(&self, _request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        Err(RemoteError::answered(
            501,
            "NOT_SIMULATED",
            "revocations are not simulated",
        ))
    }
}

// ----------------------------------------------------------------------------------------
// The system: processes of workers, intake, the driver.

// The literals and formatted names below are valid ids; a parse failure is a defect of the
// simulation itself.
#[allow(clippy::expect_used)]
fn key(text: String) -> IdempotencyKey {
    IdempotencyKey::parse(text).expect("valid id")
}

#[allow(clippy::expect_used)]
fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::parse(name).expect("valid id")
}

#[allow(clippy::expect_used)]
fn tenant() -> TenantId {
    TenantId::parse("tenant-1").expect("valid id")
}

#[allow(clippy::expect_used)]
fn space_id(n: usize) -> ControlSpaceId {
    ControlSpaceId::parse(format!("cs-{n}")).expect("valid id")
}

/// One process: its clock, its workers (absent while crashed), its generation.
struct Process {
    clock: ManualClock,
    generation: u32,
    workers: Vec<JoinHandle<()>>,
    alive: bool,
}

/// What a user asked for, per control space.
#[derive(Debug, Default, Clone, Copy)]
struct Asked {
    deleted: bool,
}

/// The simulated system of one run.
struct WorkerSim {
    world: Shared,
    store: InMemoryLifecycleStore,
    db_clock: ManualClock,
    intake: CommandIntake<InMemoryLifecycleStore>,
    processes: Vec<Process>,
    bug: Option<WorkerBug>,
    /// Total of the time jumps, applied to every clock (new ones too).
    jumped: Duration,
    asked: Vec<Asked>,
}

impl WorkerSim {
    /// A fresh system: [`PROCESSES`] processes of [`WORKERS`] workers each, the remote's
    /// fault rate at 10 %. Must be called inside a paused current-thread runtime.
    fn new(seed: u64, bug: Option<WorkerBug>) -> Self {
        let start = Utc
            .timestamp_opt(START, 0)
            .single()
            .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC);
        let db_clock = ManualClock::following_tokio(start);
        let store = InMemoryLifecycleStore::with_clock(Arc::new(db_clock.clone()));
        let world = Arc::new(Mutex::new(World {
            remote: KnowledgeFsModel::default(),
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_fa17),
            fault_percent: 10,
            pending_deliveries: 0,
            trace: VecDeque::new(),
            violations: Vec::new(),
            leases: BTreeMap::new(),
            remote_calls: 0,
            renewals: 0,
            leases_lost: 0,
            late_landings: 0,
            stalled_statements: 0,
            stalled_until: [None; PROCESSES],
            db_clock: db_clock.clone(),
        }));
        let counter = Arc::new(AtomicUsize::new(0));
        let intake = CommandIntake::new(store.clone(), Arc::new(db_clock.clone()))
            .with_id_source(move || format!("id-{}", counter.fetch_add(1, Ordering::Relaxed)));
        let mut sim = Self {
            world,
            store,
            db_clock,
            intake,
            processes: Vec::new(),
            bug,
            jumped: Duration::ZERO,
            asked: Vec::new(),
        };
        for p in 0..PROCESSES {
            let clock = sim.new_clock(0);
            sim.processes.push(Process {
                clock,
                generation: 0,
                workers: Vec::new(),
                alive: false,
            });
            sim.start(p);
        }
        sim
    }

    /// A process clock at the database's time plus `skew` seconds, with every jump so far.
    fn new_clock(&self, skew: i64) -> ManualClock {
        let clock = ManualClock::following_tokio(
            self.db_clock.now() - self.jumped_chrono() + chrono::Duration::seconds(skew),
        );
        clock.advance(self.jumped);
        clock
    }

    fn jumped_chrono(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.jumped).unwrap_or(chrono::Duration::zero())
    }

    /// Starts process `p`'s next generation: a new dispatcher and new workers.
    fn start(&mut self, p: usize) {
        let generation = self.processes[p].generation + 1;
        let clock = self.new_clock(0);
        let store = SimStore {
            inner: self.store.clone(),
            world: Arc::clone(&self.world),
            process: p,
            generation,
            clock: clock.clone(),
            bug: self.bug,
        };
        let remote = SimRemote {
            world: Arc::clone(&self.world),
            store: self.store.clone(),
            clock: clock.clone(),
        };
        let grace = if self.bug == Some(WorkerBug::NoAbsenceGrace) {
            Duration::ZERO
        } else {
            Duration::from_secs(600)
        };
        let config = DispatcherConfig::default()
            .with_lease_duration(LEASE)
            .with_absence_grace(grace);
        let dispatcher =
            Arc::new(Dispatcher::new(store, remote, config).with_clock(Arc::new(clock.clone())));
        let mut workers = Vec::new();
        for w in 0..WORKERS {
            let name = format!("p{p}g{generation}w{w}");
            let worker = Worker::new(
                Arc::clone(&dispatcher),
                owner(&name),
                WorkerConfig::default()
                    .with_idle_poll(Duration::from_secs(5))
                    .with_claim_batch(2),
            );
            // No `with_wakeups`: tokio's watch channel wakes its receivers in an order drawn
            // from tokio's own (unseeded) generator, which would make the run depend on more
            // than its seed. Idle workers find new commands at their idle poll instead.
            // Never stopped by the watch: a crash drops the future, the end drops the runtime.
            let (_keep, stop) = tokio::sync::watch::channel(false);
            let run = async move {
                let _keep = _keep;
                worker.run(stop).await;
            };
            workers.push(tokio::spawn(CALLER.scope(name, run)));
        }
        let process = &mut self.processes[p];
        process.clock = clock;
        process.generation = generation;
        process.workers = workers;
        process.alive = true;
        world(&self.world).event(format!("process {p} starts generation {generation}"));
    }

    fn crash(&mut self, p: usize) {
        let process = &mut self.processes[p];
        if !process.alive {
            return;
        }
        for worker in process.workers.drain(..) {
            worker.abort();
        }
        process.alive = false;
        let generation = process.generation;
        let mut w = world(&self.world);
        // Its held statements were dropped with its workers: they never land.
        w.stalled_until[p] = None;
        for view in w.leases.values_mut() {
            if view.process == p && view.generation == generation {
                view.closed = true;
            }
        }
        w.event(format!("process {p} generation {generation} crashes"));
    }

    fn alive_spaces(&self) -> Vec<usize> {
        (0..self.asked.len())
            .filter(|i| !self.asked[*i].deleted)
            .collect()
    }

    async fn apply(&mut self, op: WorkerOp) -> Result<(), String> {
        match op {
            WorkerOp::Create => {
                if self.alive_spaces().len() >= LIVE_SPACES {
                    return Ok(());
                }
                let n = self.asked.len();
                let request = CreateControlSpace::new(
                    tenant(),
                    space_id(n),
                    key(format!("create-cs-{n}")),
                    "Docs",
                    "docs",
                );
                self.intake
                    .create_control_space(&request)
                    .await
                    .map_err(|e| format!("create of cs-{n} refused: {e}"))?;
                self.asked.push(Asked::default());
                world(&self.world).event(format!("intake: create cs-{n}"));
            }
            WorkerOp::Delete(i) => {
                let alive = self.alive_spaces();
                if alive.is_empty() {
                    return Ok(());
                }
                let n = alive[i % alive.len()];
                let request =
                    RequestDeletion::new(tenant(), space_id(n), key(format!("delete-cs-{n}")));
                self.intake
                    .request_deletion(&request)
                    .await
                    .map_err(|e| format!("deletion of cs-{n} refused: {e}"))?;
                self.asked[n].deleted = true;
                world(&self.world).event(format!("intake: delete cs-{n}"));
            }
            WorkerOp::Run(0) => {
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
            }
            WorkerOp::Run(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
            WorkerOp::Crash(p) => self.crash(p),
            WorkerOp::Restart(p) => {
                if !self.processes[p].alive {
                    self.start(p);
                }
            }
            WorkerOp::Jump(secs) => {
                // Requests in flight land first: a request may land at most MAX_LANDING after
                // it was sent (the protocol's assumption), suspended or not.
                while world(&self.world).pending_deliveries > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let by = Duration::from_secs(secs);
                self.jumped += by;
                self.db_clock.advance(by);
                for process in &self.processes {
                    process.clock.advance(by);
                }
                world(&self.world).event(format!("every clock jumps {secs} s"));
                tokio::task::yield_now().await;
            }
            WorkerOp::StepWall(p, secs) => {
                let clock = &self.processes[p].clock;
                clock.set(clock.now() + chrono::Duration::seconds(secs));
                world(&self.world).event(format!("process {p} wall clock stepped {secs} s"));
            }
            WorkerOp::Weather(percent) => {
                let mut w = world(&self.world);
                w.fault_percent = percent;
                w.event(format!("{percent} % of remote calls meet a fault"));
            }
            WorkerOp::Stall(p, secs) => {
                if !self.processes[p].alive {
                    return Ok(());
                }
                let until = self.db_clock.monotonic() + Duration::from_secs(secs);
                let mut w = world(&self.world);
                let stalled = &mut w.stalled_until[p];
                *stalled = Some(stalled.map_or(until, |earlier| earlier.max(until)));
                w.event(format!("process {p} stalls for {secs} s"));
            }
        }
        Ok(())
    }

    /// The invariants that hold after every step.
    async fn check(&self) -> Result<(), String> {
        let spaces = self.check_world()?;
        let live_remote = |cs: &ControlSpace| {
            spaces.iter().any(|s| {
                s.provisioning_key == cs.provisioning_key
                    && s.deletion_phase != Some(tenantry_lifecycle::DeletionPhase::Completed)
            })
        };
        for (n, asked) in self.asked.iter().enumerate() {
            let id = space_id(n);
            let Some(cs) = self.store_space(&id).await else {
                return Err(format!("cs-{n} was created but has no row"));
            };
            let allowed: &[ControlSpaceState] = if asked.deleted {
                &[ControlSpaceState::Deleting, ControlSpaceState::Deleted]
            } else {
                &[ControlSpaceState::Provisioning, ControlSpaceState::Active]
            };
            if !allowed.contains(&cs.state) {
                return Err(format!("cs-{n} is {} for {asked:?}", cs.state));
            }
            if cs.state == ControlSpaceState::Deleted && live_remote(&cs) {
                return Err(format!("cs-{n} is deleted but its remote space exists"));
            }
        }
        Ok(())
    }

    /// The invariants read from the shared world: violations recorded by the store and the
    /// remote, live leases, the remote's exactly-once counters. Returns the remote's spaces.
    fn check_world(&self) -> Result<Vec<SpaceRecord>, String> {
        let mut w = world(&self.world);
        if let Some(violation) = w.violations.first() {
            return Err(violation.clone());
        }
        // At most one live lease per command, as the holders see them. A closed lease (settled,
        // refused, its process crashed) never becomes live again. A view's deadline is on its
        // holder's monotonic clock, which runs at the database clock's rate and through a
        // stall, counted from before the statement that took or renewed the lease was sent
        // (before any stall held it): it never outlives the database's expiry, so comparing
        // it with the database clock's monotonic reading judges the view in database time. A
        // stalled holder's statement that reaches the store after the view expired is judged
        // there instead (a refused renewal or settle, or the stale-settle and stale-renewal
        // checks of `SimStore`).
        w.leases.retain(|_, view| !view.closed);
        let now = self.db_clock.monotonic();
        let mut live: BTreeMap<&CommandId, Vec<String>> = BTreeMap::new();
        for ((command, epoch), view) in &w.leases {
            if !view.closed && !view.lost && now < view.deadline {
                live.entry(command)
                    .or_default()
                    .push(format!("{} epoch {epoch}", view.owner));
            }
        }
        if let Some((command, holders)) = live.iter().find(|(_, h)| h.len() > 1) {
            return Err(format!(
                "{} live leases on command {command}: {}",
                holders.len(),
                holders.join(", ")
            ));
        }
        if let Some(violation) = w.remote.violations().first() {
            return Err(format!("remote: {violation}"));
        }
        Ok(w.remote.spaces())
    }

    async fn store_space(&self, id: &ControlSpaceId) -> Option<ControlSpace> {
        self.store.control_space(&tenant(), id).await.ok().flatten()
    }

    /// Stops the faults, restarts crashed processes and lets virtual time run until every
    /// command finished (or a day passed).
    async fn drain(&mut self) {
        world(&self.world).fault_percent = 0;
        for p in 0..PROCESSES {
            if !self.processes[p].alive {
                self.start(p);
            }
        }
        for _ in 0..(24 * 6) {
            tokio::time::sleep(Duration::from_secs(600)).await;
            let open =
                self.store.commands().iter().any(|c| {
                    matches!(c.status, CommandStatus::Pending | CommandStatus::Processing)
                });
            if !open && world(&self.world).pending_deliveries == 0 {
                break;
            }
        }
    }

    /// What the requests predict once everything drained.
    async fn check_settled(&self) -> Result<(), String> {
        let budget =
            i32::try_from(tenantry_lifecycle::failure::DEFAULT_MAX_ATTEMPTS).unwrap_or(i32::MAX);
        let mut dead_lettered = Vec::new();
        for command in self.store.commands() {
            let spent = command.attempt_count - command.attempt_budget_base >= budget;
            match command.status {
                CommandStatus::Succeeded | CommandStatus::Superseded => {}
                CommandStatus::Failed if spent => {
                    dead_lettered.push(command.control_space_id.clone());
                }
                _ => {
                    return Err(format!(
                        "command {} ({}) of {} ended {} ({:?}: {:?}) after {} attempts",
                        command.id,
                        command.operation,
                        command.control_space_id,
                        command.status,
                        command.last_error_code,
                        command.last_error_message,
                        command.attempt_count
                    ));
                }
            }
        }
        let spaces = world(&self.world).remote.spaces();
        for (n, asked) in self.asked.iter().enumerate() {
            let id = space_id(n);
            if dead_lettered.contains(&id) {
                continue;
            }
            let Some(cs) = self.store_space(&id).await else {
                return Err(format!("cs-{n} vanished"));
            };
            let remote = spaces.iter().any(|s| {
                s.provisioning_key == cs.provisioning_key
                    && s.deletion_phase != Some(tenantry_lifecycle::DeletionPhase::Completed)
            });
            let expected = if asked.deleted {
                (ControlSpaceState::Deleted, false)
            } else {
                (ControlSpaceState::Active, true)
            };
            if (cs.state, remote) != expected {
                return Err(format!(
                    "cs-{n} settled as {} with remote space {remote}, expected {expected:?}",
                    cs.state
                ));
            }
        }
        Ok(())
    }

    fn digest(&self) -> u64 {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        for command in self.store.commands() {
            format!("{command:?}").hash(&mut hasher);
        }
        let w = world(&self.world);
        for space in w.remote.spaces() {
            format!("{space:?}").hash(&mut hasher);
        }
        w.trace.hash(&mut hasher);
        hasher.finish()
    }

    fn trace(&self) -> Vec<String> {
        world(&self.world).trace.iter().cloned().collect()
    }
}

/// Runs `steps` seeded steps of the worker simulation (then the drain and the final check)
/// with `bug` planted or none, on a paused current-thread runtime of its own.
///
/// # Errors
/// The first broken invariant, with the seed, the step and the last events.
pub fn run(seed: u64, steps: u64, bug: Option<WorkerBug>) -> Result<WorkerRunSummary, SimFailure> {
    let fail = |step, message: String, trace: Vec<String>| SimFailure {
        sim: "workers",
        seed,
        step,
        message,
        trace,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| fail(0, format!("cannot start the runtime: {e}"), Vec::new()))?;
    runtime.block_on(async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sim = WorkerSim::new(seed, bug);
        let started = tokio::time::Instant::now();
        for step in 0..steps {
            let op = draw(&mut rng);
            world(&sim.world).event(format!("step {step}: {op:?}"));
            let result = match sim.apply(op).await {
                Ok(()) => sim.check().await,
                Err(message) => Err(message),
            };
            if let Err(message) = result {
                return Err(fail(step + 1, message, sim.trace()));
            }
        }
        sim.drain().await;
        let settled = match sim.check().await {
            Ok(()) => sim.check_settled().await,
            Err(message) => Err(message),
        };
        if let Err(message) = settled {
            return Err(fail(steps, message, sim.trace()));
        }
        let (remote_calls, renewals, leases_lost, late_landings, stalled_statements) = {
            let w = world(&sim.world);
            (
                w.remote_calls,
                w.renewals,
                w.leases_lost,
                w.late_landings,
                w.stalled_statements,
            )
        };
        let summary = WorkerRunSummary {
            steps,
            commands: sim.store.commands().len(),
            remote_calls,
            renewals,
            leases_lost,
            late_landings,
            stalled_statements,
            virtual_seconds: (tokio::time::Instant::now() - started + sim.jumped).as_secs(),
            digest: sim.digest(),
        };
        for p in 0..PROCESSES {
            sim.crash(p);
        }
        Ok(summary)
    })
}
