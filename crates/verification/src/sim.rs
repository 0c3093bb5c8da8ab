//! Deterministic simulations (issue 12's `cargo xtask sim`): seeded schedules of operations
//! and faults run through the real engine, with invariants checked after every step. A run is
//! a pure function of its seed: a failure names the simulation, the seed, the step and the last
//! events, and re-running the seed repeats it (docs/verification.md, section 6).
//!
//! - this module ([`run`], [`System`]): the lifecycle saga through one `Dispatcher` and
//!   `CommandIntake` over the in-memory store and the fake KnowledgeFS, on one frozen
//!   `ManualClock` that only the simulation moves: create and delete requests, dispatches,
//!   workers that claim and crash, lost provision, lookup and deletion answers, time passing;
//!   checked once more after everything drained. The proptest of lifecycle sequences drives
//!   the same [`System`];
//! - [`workers`]: the worker loops of several processes, lease renewals, stalled processes
//!   and a faulty network on virtual time (a paused runtime);
//! - [`fences`]: scoped writes of two processes and an operator;
//! - [`projector`]: two directory projector replicas against a reordering directory.

pub mod fences;
pub mod projector;
pub mod workers;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenantry_engine::{CommandIntake, Dispatcher, DispatcherConfig};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, ProvisioningKey, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_lifecycle::{CommandStatus, ControlSpaceState, ProvisionRequest, RemoteSpace};
use tenantry_ports::clock::ManualClock;
use tenantry_ports::forward;
use tenantry_ports::lifecycle::fake::{
    FakeKnowledgeFs, InMemoryLifecycleStore, RemoteCall, RemoteFault,
};
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandQueue, ControlSpaceReader, KnowledgeFs, RemoteError,
};

/// Control spaces a run works on.
pub const SPACES: usize = 4;

/// One step of a run.
#[derive(Debug, Clone)]
pub enum Op {
    /// Intake: create control space `i` (idempotent on its key).
    Create(usize),
    /// Intake: request the deletion of control space `i`.
    Delete(usize),
    /// A worker claims, delivers and settles one command.
    Dispatch,
    /// A worker claims the next due command and crashes (never settles it).
    ClaimAndCrash,
    /// The next call of this kind (0 provision, 1 lookup, 2 deletion) is applied but its
    /// answer is lost. A re-delivered deletion is answered `completed` again, as by the
    /// reference KnowledgeFS (docs/verification.md, "Finding: the fake remote's deletion
    /// replay", fixed).
    LoseAnswer(u8),
    /// Time passes, seconds.
    Advance(u64),
}

/// A deliberately broken component, to show a run finds what it must (test-only switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimBug {
    /// The remote forgets provisioning-key idempotency after a lost answer: a re-delivered
    /// provision creates a second space (the contract the saga's exactly-once relies on).
    NonIdempotentProvision,
}

/// What a user asked for, per control space (the reference model).
#[derive(Debug, Default, Clone, Copy)]
pub struct Asked {
    /// A create was accepted.
    pub created: bool,
    /// A deletion was accepted.
    pub deleted: bool,
}

/// A remote wrapping the fake, with an optional planted bug.
#[derive(Clone)]
struct SimRemote {
    inner: FakeKnowledgeFs,
    bug: Option<SimBug>,
    /// Provisioning keys whose last provision answer was lost (bug only).
    lost: Arc<std::sync::Mutex<Vec<ProvisioningKey>>>,
    extra_spaces: Arc<AtomicUsize>,
}

impl forward::Decorator for SimRemote {
    type Inner = FakeKnowledgeFs;
    fn inner(&self) -> &FakeKnowledgeFs {
        &self.inner
    }
}

#[async_trait]
impl forward::KnowledgeFs for SimRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        if self.bug == Some(SimBug::NonIdempotentProvision) {
            let lost = |keys: &Arc<std::sync::Mutex<Vec<ProvisioningKey>>>| {
                keys.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .contains(&request.provisioning_key)
            };
            if lost(&self.lost) {
                self.extra_spaces.fetch_add(1, Ordering::Relaxed);
            }
            let answer = self.inner.provision(request).await;
            if answer.is_err() {
                self.lost
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(request.provisioning_key.clone());
            }
            return answer;
        }
        self.inner.provision(request).await
    }
}

// The literals and formatted names below are valid ids; a parse failure is a defect of the
// simulation itself.
#[allow(clippy::expect_used)]
fn ids(i: usize) -> (TenantId, ControlSpaceId) {
    (
        TenantId::parse("tenant-1").expect("valid id"),
        ControlSpaceId::parse(format!("cs-{i}")).expect("valid id"),
    )
}

#[allow(clippy::expect_used)]
fn key(text: String) -> IdempotencyKey {
    IdempotencyKey::parse(text).expect("valid id")
}

#[allow(clippy::expect_used)]
fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::parse(name).expect("valid id")
}

/// The system under simulation.
pub struct System {
    clock: ManualClock,
    store: InMemoryLifecycleStore,
    remote: SimRemote,
    intake: CommandIntake<InMemoryLifecycleStore>,
    dispatcher: Dispatcher<InMemoryLifecycleStore, SimRemote>,
    /// The reference model.
    pub asked: [Asked; SPACES],
}

impl System {
    /// A fresh system at a fixed start time, with `bug` planted (or none).
    pub fn new(bug: Option<SimBug>) -> Self {
        let start = Utc
            .timestamp_opt(1_900_000_000, 0)
            .single()
            .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC);
        let clock = ManualClock::new(start);
        let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
        let remote = SimRemote {
            inner: FakeKnowledgeFs::new(),
            bug,
            lost: Arc::default(),
            extra_spaces: Arc::default(),
        };
        let counter = Arc::new(AtomicUsize::new(0));
        let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()))
            .with_id_source(move || format!("id-{}", counter.fetch_add(1, Ordering::Relaxed)));
        let dispatcher =
            Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default())
                .with_clock(Arc::new(clock.clone()));
        Self {
            clock,
            store,
            remote,
            intake,
            dispatcher,
            asked: [Asked::default(); SPACES],
        }
    }

    /// Applies one operation; an error is a broken expectation of the reference model.
    ///
    /// # Errors
    /// What was wrong, for the failure report.
    pub async fn apply(&mut self, op: &Op) -> Result<(), String> {
        match op {
            Op::Create(i) => {
                let (tenant, space) = ids(*i);
                let request = CreateControlSpace::new(
                    tenant,
                    space,
                    key(format!("create-{i}")),
                    "Docs",
                    "docs",
                );
                let result = self.intake.create_control_space(&request).await;
                if self.asked[*i].deleted {
                    // A replay of the first create answers its receipt: fine either way.
                    return Ok(());
                }
                result.map_err(|e| format!("{op:?} refused: {e}"))?;
                self.asked[*i].created = true;
            }
            Op::Delete(i) => {
                let (tenant, space) = ids(*i);
                let request = RequestDeletion::new(tenant, space, key(format!("delete-{i}")));
                let result = self.intake.request_deletion(&request).await;
                match (self.asked[*i].created, result) {
                    (true, Ok(_)) => self.asked[*i].deleted = true,
                    (false, Err(_)) => {}
                    (true, Err(e)) => return Err(format!("{op:?} refused: {e}")),
                    (false, Ok(_)) => return Err(format!("{op:?} of an unknown space accepted")),
                }
            }
            Op::Dispatch => {
                self.dispatcher
                    .dispatch_one(&owner("worker-1"), true)
                    .await
                    .map_err(|e| format!("dispatch failed: {e}"))?;
            }
            Op::ClaimAndCrash => {
                let request = ClaimRequest {
                    owner: owner("crashed-worker"),
                    lease_duration: Duration::from_secs(30),
                    include_provision: true,
                    limit: 1,
                    call_deadline: std::time::Duration::ZERO,
                };
                self.store
                    .claim(&request)
                    .await
                    .map_err(|e| format!("claim failed: {e}"))?;
            }
            Op::LoseAnswer(kind) => {
                let call = match kind {
                    0 => RemoteCall::Provision,
                    1 => RemoteCall::Lookup,
                    _ => RemoteCall::Deletion,
                };
                self.remote.inner.push_fault(call, RemoteFault::LoseAck);
            }
            Op::Advance(secs) => self.clock.advance(Duration::from_secs(*secs)),
        }
        Ok(())
    }

    /// The invariants that hold after every step.
    ///
    /// # Errors
    /// The invariant that broke.
    pub async fn check(&self) -> Result<(), String> {
        let created = self.asked.iter().filter(|a| a.created).count() as u64;
        let spaces = self.remote.inner.counters().spaces_created
            + self.remote.extra_spaces.load(Ordering::Relaxed) as u64;
        if spaces > created {
            return Err(format!(
                "{spaces} remote spaces for {created} control spaces (one per provisioning key)"
            ));
        }
        for (i, asked) in self.asked.iter().enumerate() {
            let (tenant, space) = ids(i);
            let cs = self
                .store
                .control_space(&tenant, &space)
                .await
                .map_err(|e| e.to_string())?;
            let Some(cs) = cs else {
                if asked.created {
                    return Err(format!("cs-{i} was created but has no row"));
                }
                continue;
            };
            let allowed: &[ControlSpaceState] = if asked.deleted {
                &[ControlSpaceState::Deleting, ControlSpaceState::Deleted]
            } else {
                &[ControlSpaceState::Provisioning, ControlSpaceState::Active]
            };
            if !allowed.contains(&cs.state) {
                return Err(format!("cs-{i} is {} for {asked:?}", cs.state));
            }
            if cs.state == ControlSpaceState::Deleted
                && self.remote.inner.has_space(&cs.provisioning_key)
            {
                return Err(format!("cs-{i} is deleted but its remote space exists"));
            }
        }
        Ok(())
    }

    /// Lets every lease expire and every backoff pass, dispatching until nothing is due.
    ///
    /// # Errors
    /// A dispatch that failed.
    pub async fn drain(&mut self) -> Result<(), String> {
        for _ in 0..30 {
            self.clock.advance(Duration::from_secs(700));
            for _ in 0..(4 * SPACES) {
                let report = self
                    .dispatcher
                    .dispatch_one(&owner("worker-1"), true)
                    .await
                    .map_err(|e| format!("dispatch failed: {e}"))?;
                if !report.claimed {
                    break;
                }
            }
        }
        Ok(())
    }

    /// What the reference model predicts once everything drained.
    ///
    /// # Errors
    /// The first difference.
    pub async fn check_settled(&self) -> Result<(), String> {
        // A command whose whole attempt budget went to injected faults is dead-lettered
        // (`failed`), as designed; its control space then stays where it was.
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
                        "command {} ({}) of {} ended {} ({:?}) after {} attempts",
                        command.id,
                        command.operation,
                        command.control_space_id,
                        command.status,
                        command.last_error_code,
                        command.attempt_count
                    ));
                }
            }
        }
        for (i, asked) in self.asked.iter().enumerate().filter(|(_, a)| a.created) {
            let (tenant, space) = ids(i);
            if dead_lettered.contains(&space) {
                continue;
            }
            let Some(cs) = self
                .store
                .control_space(&tenant, &space)
                .await
                .map_err(|e| e.to_string())?
            else {
                return Err(format!("cs-{i} vanished"));
            };
            let remote = self.remote.inner.has_space(&cs.provisioning_key);
            let expected = if asked.deleted {
                (ControlSpaceState::Deleted, false)
            } else {
                (ControlSpaceState::Active, true)
            };
            if (cs.state, remote) != expected {
                return Err(format!(
                    "cs-{i} settled as {} with remote space {remote}, expected {expected:?}",
                    cs.state
                ));
            }
        }
        Ok(())
    }
}

/// Draws the next operation from the seeded generator.
pub fn draw(rng: &mut StdRng) -> Op {
    match rng.random_range(0..8u8) {
        0 => Op::Create(rng.random_range(0..SPACES)),
        1 => Op::Delete(rng.random_range(0..SPACES)),
        2..=4 => Op::Dispatch,
        5 => Op::ClaimAndCrash,
        6 => Op::LoseAnswer(rng.random_range(0..3)),
        _ => Op::Advance([1, 10, 31, 700][rng.random_range(0..4usize)]),
    }
}

/// A failed run: enough to reproduce and read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimFailure {
    /// Which simulation failed (`lifecycle`, `workers`, ...), the value of `--sim`.
    pub sim: &'static str,
    /// The seed; `cargo xtask sim --seed SEED --steps STEPS` repeats the run.
    pub seed: u64,
    /// The step at which an invariant broke (`steps` for the final, drained check).
    pub step: u64,
    /// What broke.
    pub message: String,
    /// The last operations before it, oldest first.
    pub trace: Vec<String>,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "simulation failed: seed {} step {}: {}",
            self.seed, self.step, self.message
        )?;
        writeln!(f, "last operations:")?;
        for op in &self.trace {
            writeln!(f, "  {op}")?;
        }
        write!(
            f,
            "reproduce: cargo xtask sim --sim {} --seed {} --steps {}",
            self.sim, self.seed, self.step
        )
    }
}

impl SimFailure {
    /// How a run of simulation `sim` with `seed` fails: the step, what broke and the trace.
    pub(crate) fn of(
        sim: &'static str,
        seed: u64,
    ) -> impl Fn(u64, String, Vec<String>) -> SimFailure + Copy {
        move |step, message, trace| SimFailure {
            sim,
            seed,
            step,
            message,
            trace,
        }
    }
}

/// A current-thread runtime on paused (virtual) time, for a simulation of simulation `sim`
/// with `seed`; failing to start is its failure at step 0.
pub(crate) fn paused_runtime(
    sim: &'static str,
    seed: u64,
) -> Result<tokio::runtime::Runtime, SimFailure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| {
            SimFailure::of(sim, seed)(0, format!("cannot start the runtime: {e}"), Vec::new())
        })
}

/// Runs `steps` seeded steps (then a drain and the final check) with `bug` planted or none.
///
/// # Errors
/// The first broken invariant, with the seed, step and trace.
pub fn run(seed: u64, steps: u64, bug: Option<SimBug>) -> Result<(), SimFailure> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| SimFailure {
            sim: "lifecycle",
            seed,
            step: 0,
            message: format!("cannot start the runtime: {e}"),
            trace: Vec::new(),
        })?;
    runtime.block_on(async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut system = System::new(bug);
        let mut trace: VecDeque<String> = VecDeque::new();
        let fail = |step, message, trace: &VecDeque<String>| SimFailure {
            sim: "lifecycle",
            seed,
            step,
            message,
            trace: trace.iter().cloned().collect(),
        };
        for step in 0..steps {
            let op = draw(&mut rng);
            if trace.len() == 20 {
                trace.pop_front();
            }
            trace.push_back(format!("{step}: {op:?}"));
            if let Err(message) = system.apply(&op).await {
                return Err(fail(step + 1, message, &trace));
            }
            if let Err(message) = system.check().await {
                return Err(fail(step + 1, message, &trace));
            }
        }
        let settled = async {
            system.drain().await?;
            system.check().await?;
            system.check_settled().await
        };
        settled
            .await
            .map_err(|message| fail(steps, message, &trace))
    })
}
