//! The simulated system: processes of workers (started, crashed, restarted), intake, the driver
//! that applies each drawn operation, and the checks after every step and after the drain.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tenantry_engine::lifecycle::{
    CommandIntake, Dispatcher, DispatcherConfig, GroupCommitConfig, GroupCommitStore, WorkerConfig,
    WorkerPool,
};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_lifecycle::{CommandStatus, ControlSpace, ControlSpaceState};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
use tenantry_testkit::knowledge_fs::SpaceRecord;
use tenantry_testkit::knowledge_fs::state::KnowledgeFsModel;
use tokio::task::JoinHandle;

use super::backend::{Backend, SqlBridge};
use super::remote::SimRemote;
use super::store::SimStore;
use super::{
    LEASE, LIVE_SPACES, PROCESSES, REMOTE_CALL_LIMIT, START, Shared, SimFailure, WORKERS,
    WorkerBug, WorkerOp, WorkerRunSummary, World, draw, world,
};

// The literals and formatted names below are valid ids; a parse failure is a defect of the
// simulation itself.
#[allow(clippy::expect_used)]
pub(super) fn key(text: String) -> IdempotencyKey {
    IdempotencyKey::parse(text).expect("valid id")
}

#[allow(clippy::expect_used)]
pub(super) fn owner(name: &str) -> LeaseOwner {
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

/// One process: its clock, its worker pool's task (absent while crashed), its generation.
pub(super) struct Process {
    clock: ManualClock,
    generation: u32,
    pool: Option<JoinHandle<()>>,
    alive: bool,
}

/// What a user asked for, per control space.
#[derive(Debug, Default, Clone, Copy)]
struct Asked {
    deleted: bool,
}

/// The simulated system of one run.
pub(super) struct WorkerSim<B> {
    world: Shared,
    store: B,
    db_clock: ManualClock,
    intake: CommandIntake<B>,
    processes: Vec<Process>,
    bug: Option<WorkerBug>,
    /// Total of the time jumps, applied to every clock (new ones too).
    jumped: Duration,
    asked: Vec<Asked>,
}

/// The database clock of a run: at [`START`], following the paused runtime.
fn database_clock() -> ManualClock {
    let start = Utc
        .timestamp_opt(START, 0)
        .single()
        .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC);
    ManualClock::following_tokio(start)
}

impl<B: Backend> WorkerSim<B> {
    /// A fresh system over `store` (whose "now" is `db_clock`): [`PROCESSES`] processes of
    /// [`WORKERS`] workers each, the remote's fault rate at 10 %. Must be called inside a
    /// paused current-thread runtime.
    fn new(seed: u64, bug: Option<WorkerBug>, store: B, db_clock: ManualClock) -> Self {
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
            batched_settles: 0,
            calls_open: [0; PROCESSES],
            most_calls_open: 0,
            stalled_until: [None; PROCESSES],
            running: [None; PROCESSES],
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
                pool: None,
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

    /// Starts process `p`'s next generation as `serve` runs one: a new dispatcher over group
    /// commit, one [`WorkerPool`] with one lease owner, its remote-call slots and local queue.
    fn start(&mut self, p: usize) {
        let generation = self.processes[p].generation + 1;
        let name = format!("p{p}g{generation}");
        let clock = self.new_clock(0);
        let store = SimStore {
            inner: self.store.clone(),
            world: Arc::clone(&self.world),
            process: p,
            generation,
            owner: name.clone(),
            clock: clock.clone(),
            bug: self.bug,
        };
        let remote = SimRemote {
            world: Arc::clone(&self.world),
            process: p,
            generation,
            store: self.store.clone(),
            clock: clock.clone(),
            caller: name.clone(),
        };
        let grace = if self.bug == Some(WorkerBug::NoAbsenceGrace) {
            Duration::ZERO
        } else {
            Duration::from_secs(600)
        };
        let config = DispatcherConfig::default()
            .with_lease_duration(LEASE)
            .with_absence_grace(grace);
        // Settles and control-space reads share statements as in `serve` (its defaults).
        let store = GroupCommitStore::start_with_clock(
            store,
            GroupCommitConfig::default(),
            Arc::new(clock.clone()),
        );
        let dispatcher =
            Arc::new(Dispatcher::new(store, remote, config).with_clock(Arc::new(clock.clone())));
        let pool = WorkerPool::new(
            dispatcher,
            owner(&name),
            WORKERS,
            WorkerConfig::default()
                .with_idle_poll(Duration::from_secs(5))
                .with_claim_batch(2),
        )
        .with_remote_call_limit(REMOTE_CALL_LIMIT);
        // No `with_wakeups`: tokio's watch channel wakes its receivers in an order drawn from
        // tokio's own (unseeded) generator, which would make the run depend on more than its
        // seed. The idle pool finds new commands at its idle poll instead.
        // Never stopped by the watch: a crash drops the future (and with it every dispatch
        // task of the pool), the end drops the runtime.
        let (keep, stop) = tokio::sync::watch::channel(false);
        let run = async move {
            let _keep = keep;
            pool.run(stop).await;
        };
        world(&self.world).running[p] = Some(generation);
        let process = &mut self.processes[p];
        process.clock = clock;
        process.generation = generation;
        process.pool = Some(tokio::spawn(run));
        process.alive = true;
        world(&self.world).event(format!("process {p} starts generation {generation}"));
    }

    fn crash(&mut self, p: usize) {
        let process = &mut self.processes[p];
        if !process.alive {
            return;
        }
        if let Some(pool) = process.pool.take() {
            pool.abort();
        }
        process.alive = false;
        let generation = process.generation;
        let mut w = world(&self.world);
        // Its held statements, and those queued for its group commit, never land.
        w.stalled_until[p] = None;
        w.running[p] = None;
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
        if let Some(violation) = w.two_live_leases() {
            return Err(violation);
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
/// over the in-memory store, with `bug` planted or none, on a paused current-thread runtime of
/// its own.
///
/// # Errors
/// The first broken invariant, with the seed, the step and the last events.
pub fn run(seed: u64, steps: u64, bug: Option<WorkerBug>) -> Result<WorkerRunSummary, SimFailure> {
    run_with("workers", seed, steps, bug, |db_clock| {
        Ok(InMemoryLifecycleStore::with_clock(Arc::new(db_clock)))
    })
}

/// Runs the simulation of `seed` for `steps` steps over the real SQL store
/// (`SeaOrmLifecycleStore` on a fresh SQLite database, or PostgreSQL when
/// the test run is on PostgreSQL: `tenantry_store_seaorm::testing` picks), its statements
/// taking no virtual time (see
/// `backend::SqlBridge`). No bug is planted: the store's own rules are the ones under test (the
/// planted mutations of its claim run in `tests/planted.rs`).
///
/// # Errors
/// The first broken invariant, with the seed, the step and the last events; a database that
/// cannot be created is reported as the failure of step 0.
pub fn run_over_sql(seed: u64, steps: u64) -> Result<WorkerRunSummary, SimFailure> {
    run_with("workers-sql", seed, steps, None, SqlBridge::start)
}

fn run_with<B: Backend>(
    sim: &'static str,
    seed: u64,
    steps: u64,
    bug: Option<WorkerBug>,
    store: impl FnOnce(ManualClock) -> Result<B, String>,
) -> Result<WorkerRunSummary, SimFailure> {
    let fail = |step, message: String, trace: Vec<String>| SimFailure {
        sim,
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
        let db_clock = database_clock();
        let store = store(db_clock.clone()).map_err(|message| fail(0, message, Vec::new()))?;
        let mut sim = WorkerSim::new(seed, bug, store, db_clock);
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
        let summary = {
            let w = world(&sim.world);
            WorkerRunSummary {
                steps,
                commands: sim.store.commands().len(),
                remote_calls: w.remote_calls,
                renewals: w.renewals,
                leases_lost: w.leases_lost,
                late_landings: w.late_landings,
                stalled_statements: w.stalled_statements,
                batched_settles: w.batched_settles,
                most_calls_open: w.most_calls_open,
                virtual_seconds: 0,
                digest: 0,
            }
        };
        let summary = WorkerRunSummary {
            virtual_seconds: (tokio::time::Instant::now() - started + sim.jumped).as_secs(),
            digest: sim.digest(),
            ..summary
        };
        for p in 0..PROCESSES {
            sim.crash(p);
        }
        Ok(summary)
    })
}
