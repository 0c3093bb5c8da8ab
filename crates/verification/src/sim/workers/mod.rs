//! The deterministic simulation of the lifecycle workers on virtual time (issue 12, part 2 of
//! the simulation; issue 31: what `serve` runs): the engine's real [`WorkerPool`] (one claimer
//! and one lease owner per process, remote-call slots, the local queue, lease renewal, idle
//! sleep until the next due command) over group commit ([`GroupCommitStore`]) in each of
//! several processes, over one shared in-memory store and the reference
//! KnowledgeFS model of the test kit (`tenantry_testkit::knowledge_fs::state`), all on a
//! paused current-thread tokio runtime with [`ManualClock::following_tokio`] clocks.
//!
//! A seeded schedule drives the run: create and delete requests, virtual time passing, crashes
//! of a process (its pool and dispatch tasks are dropped, its queued group-commit statements
//! never land) and restarts (a new pool with a new lease owner), time jumps, steps of a
//! process's wall clock, stalls of a process, and the fault weather. Every remote
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
//! statement in flight does not keep its view live, it is judged by the store when it lands;
//! also judged at every claim, before either holder sends); every remote call is sent under
//! the command's current lease (the store's owner and epoch are the caller's, unexpired) and
//! carries a key that names its command; no
//! settle from a stale lease is accepted; no process has more remote calls open than its
//! pool's slots ([`REMOTE_CALL_LIMIT`]); no renewal of a lease that is stale or expired in
//! database time is accepted; at most one remote space per provisioning key; a control
//! space is in a state its requests allow; a deleted control space has no remote space. After
//! the schedule the faults stop, crashed processes restart, virtual time runs until every
//! command finished, and the drained state must match what was asked.
//!
//! A run is a pure function of its seed: [`run`] returns a digest of the final state, equal
//! for equal seeds. [`run_over_sql`] runs the same over the real SQL store (`backend`), its
//! statements taking no virtual time, and is a function of its seed too.

mod backend;
mod remote;
mod store;
mod system;

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;
pub use system::{run, run_over_sql};
use tenantry_kernel::CommandId;
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_testkit::knowledge_fs::state::KnowledgeFsModel;
use tokio::time::Instant;

use crate::sim::SimFailure;

#[cfg(doc)]
use tenantry_engine::lifecycle::{GroupCommitStore, WorkerPool};

/// Processes of a run, each with its own dispatcher, clock and worker pool.
pub const PROCESSES: usize = 3;
/// Workers per process: the pool's `workers` (as `serve`'s setting), with a claim batch of 2
/// the pool has `WORKERS × 2` remote-call slots before [`REMOTE_CALL_LIMIT`].
pub const WORKERS: u32 = 2;
/// The remote client's concurrency limit (`knowledge_fs_max_concurrent_calls`): below the
/// pool's 4 slots, so the pool runs 3 calls at once and up to 6 dispatches in flight, the
/// others waiting in its local queue with their leases.
pub const REMOTE_CALL_LIMIT: usize = 3;
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
    /// Settles that reached the store in a group-commit batch of more than one.
    pub batched_settles: u64,
    /// Most remote calls one process had open at once (at most [`REMOTE_CALL_LIMIT`], the
    /// pool's slots; checked at every call).
    pub most_calls_open: usize,
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
    batched_settles: u64,
    /// Per process: remote calls open now (sent, caller still waiting).
    calls_open: [usize; PROCESSES],
    most_calls_open: usize,
    /// Per process: the database clock's monotonic reading until which it is stalled.
    stalled_until: [Option<Instant>; PROCESSES],
    /// Per process: the generation running, `None` while crashed. A statement of another
    /// generation never starts (its process is gone, with its group-commit queue).
    running: [Option<u32>; PROCESSES],
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

    /// The first command with more than one live lease as the holders see them, as the
    /// violation's text: a view is live while it is neither closed nor lost and its deadline
    /// (on its holder's monotonic clock, counted from before the statement that took or
    /// renewed it) is ahead of the database clock's monotonic reading.
    fn two_live_leases(&self) -> Option<String> {
        let now = self.db_clock.monotonic();
        let mut live: BTreeMap<&CommandId, Vec<String>> = BTreeMap::new();
        for ((command, epoch), view) in &self.leases {
            if !view.closed && !view.lost && now < view.deadline {
                live.entry(command)
                    .or_default()
                    .push(format!("{} epoch {epoch}", view.owner));
            }
        }
        live.iter()
            .find(|(_, h)| h.len() > 1)
            .map(|(command, holders)| {
                format!(
                    "{} live leases on command {command}: {}",
                    holders.len(),
                    holders.join(", ")
                )
            })
    }
}

type Shared = Arc<Mutex<World>>;

fn world(shared: &Shared) -> MutexGuard<'_, World> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

const START: i64 = 1_900_000_000;
