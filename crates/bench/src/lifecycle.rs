//! Lifecycle benchmarks: drain throughput (part `lifecycle`), claim latency at low load
//! (part `latency`) and memory while draining a large backlog (part `memory`).
//!
//! Every drain runs the production code path: a [`WorkerPool`] (or, labelled, one [`Worker`] per
//! worker) over one shared [`Dispatcher`]
//! on the SeaORM store, against an in-process remote that answers at once. A run ends when
//! the metrics sink has seen every command acked; the database is then checked (every command
//! succeeded, the remote saw each exactly once).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;
use tenantry_engine::lifecycle::{
    CommandIntake, Dispatcher, DispatcherConfig, GroupCommitConfig, GroupCommitStore, SystemClock,
    Wakeups, Worker, WorkerConfig, WorkerPool, unique_lease_owner,
};
use tenantry_kernel::CommandId;
use tenantry_lifecycle::ClaimedCommand;
use tenantry_ports::forward;
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandQueue, LifecycleMetrics, LifecycleStore, MetricsError, StoreError,
    TaskMetric, TaskStatus,
};
use tenantry_store_seaorm::Database;
use tenantry_store_seaorm::bench as store_bench;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::wake::{ListenerConfig, WakeListener};
use tokio::sync::{Notify, watch};

use crate::fixtures::{Target, Workload, create_request, load};
use crate::remote::InstantRemote;
use crate::{BenchResult, emit, rss};

/// Who claims in a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Claimer {
    /// One [`WorkerPool`] for the process (what `tenantry serve` runs): one claim statement
    /// fills the free slots of all workers.
    Pool,
    /// One [`Worker`] per worker, each claiming its own batch (the service before issue 14).
    PerWorker,
}

/// How the workers of a drain are configured.
#[derive(Debug, Clone)]
pub struct DrainOptions {
    /// Who claims: one pool per process (the service) or each worker for itself.
    pub claimer: Claimer,
    /// Commands claimed per statement by each worker (and dispatched concurrently).
    pub claim_batch: u32,
    /// Worker sleep when nothing is due.
    pub idle_poll: Duration,
    /// Longest a drain may take before it is reported as unfinished.
    pub timeout: Duration,
    /// Group commit of settles (`None`: each settle in its own transaction).
    pub group_commit: Option<GroupCommitConfig>,
    /// Pool connections beyond one per worker.
    pub extra_connections: u32,
}

impl DrainOptions {
    /// Whether these are the settings `tenantry serve` ships (the engine's defaults).
    pub fn is_service_default(&self) -> bool {
        let worker = WorkerConfig::default();
        self.claimer == Claimer::Pool
            && self.claim_batch == worker.claim_batch
            && self.idle_poll == worker.idle_poll
            && self.group_commit == Some(GroupCommitConfig::default())
    }

    /// `service defaults`, or the settings that differ from them.
    pub fn label(&self) -> String {
        if self.is_service_default() {
            return "service defaults".into();
        }
        let worker = WorkerConfig::default();
        let mut differs = Vec::new();
        if self.claimer == Claimer::PerWorker {
            differs.push("claimer=per-worker".to_owned());
        }
        if self.claim_batch != worker.claim_batch {
            differs.push(format!("claim_batch={}", self.claim_batch));
        }
        if self.idle_poll != worker.idle_poll {
            differs.push(format!("idle_poll_ms={}", self.idle_poll.as_millis()));
        }
        if self.group_commit != Some(GroupCommitConfig::default()) {
            differs.push(format!("settle={}", self.settle_mode()));
        }
        differs.join(", ")
    }

    /// The settle mode as reported: `direct` or `group(batch=..,wait_us=..,in_flight=..)`.
    pub fn settle_mode(&self) -> String {
        match &self.group_commit {
            None => "direct".into(),
            Some(g) => format!(
                "group(max_batch={},max_wait_us={}{},in_flight={},coalesce_reads={})",
                g.max_batch,
                g.max_wait.as_micros(),
                if g.wait_only_when_busy { "" } else { ",always" },
                g.max_in_flight,
                g.coalesce_reads
            ),
        }
    }
}

/// What a drain did.
#[derive(Debug, Clone, Copy)]
pub struct Drained {
    /// Seconds from the workers' start to the last ack.
    pub seconds: f64,
    /// Commands acked.
    pub acked: u64,
    /// Dispatches that ended without a settlement.
    pub errors: u64,
    /// Whether the timeout ended the drain.
    pub timed_out: bool,
}

/// Part `lifecycle`: drains `commands` fixture commands per workload and worker count.
pub async fn throughput(
    target: &Target,
    workloads: &[Workload],
    workers: &[u32],
    commands: usize,
    options: &DrainOptions,
) -> BenchResult<()> {
    for &workload in workloads {
        for &w in workers {
            let pool = w + options.extra_connections;
            let bench = target
                .fresh(&format!("lifecycle_{}_{w}", workload.name()), pool)
                .await?;
            let loaded = Instant::now();
            load(&bench.db, workload, commands, 5_000, Utc::now()).await?;
            eprintln!(
                "  {} {}: loaded {commands} commands in {:.1} s; draining with {w} workers",
                target.backend_name(),
                workload.name(),
                loaded.elapsed().as_secs_f64()
            );
            let remote = InstantRemote::default();
            let cpu_before = crate::rss::cpu_seconds();
            let drained =
                drain(&bench.db, remote.clone(), commands as u64, w, options, None).await?;
            // This process's CPU per settled command during the drain (the workers, the
            // claimer, the group commit and the instant remote; not the server's).
            let client_cpu_us = cpu_before
                .zip(crate::rss::cpu_seconds())
                .filter(|_| drained.acked > 0)
                .map(|(before, after)| round1((after - before) * 1e6 / drained.acked as f64));
            let counts = store_bench::outbox_status_counts(&bench.db).await?;
            let succeeded = count_of(&counts, "succeeded");
            let calls = match workload {
                Workload::Revoke => remote.revokes(),
                Workload::Provision => remote.provisions(),
            };
            emit(&json!({
                "part": "lifecycle",
                "backend": target.backend_name(),
                "workload": workload.name(),
                "workers": w,
                "pool_connections": pool,
                "claim_batch": options.claim_batch,
                "idle_poll_ms": options.idle_poll.as_millis(),
                "settle": options.settle_mode(),
                "settings": options.label(),
                "service_defaults": options.is_service_default(),
                "commands": commands,
                "seconds": round3(drained.seconds),
                "commands_per_second": round1(drained.acked as f64 / drained.seconds),
                "acked": drained.acked,
                "dispatch_errors": drained.errors,
                "timed_out": drained.timed_out,
                "succeeded_rows": succeeded,
                "remote_calls": calls,
                "exactly_once": succeeded == commands as i64 && calls == commands as u64,
                "client_cpu_us_per_command": client_cpu_us,
            }));
            bench.drop_database().await?;
        }
    }
    Ok(())
}

/// Latency targets of issue 14 (enqueue commit to claim, low load, default idle poll).
pub const LATENCY_TARGET_P50_MS: f64 = 5.0;
/// See [`LATENCY_TARGET_P50_MS`].
pub const LATENCY_TARGET_P99_MS: f64 = 50.0;

/// How the worker of the latency part learns of a new command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeMode {
    /// Only its idle poll.
    None,
    /// The intake is in the worker's process and wakes it (`CommandIntake::with_wakeups`).
    InProcess,
    /// The intake is another process's (no in-process signal); the PostgreSQL listener of
    /// the worker's process wakes it on the intake's `NOTIFY`.
    Listener,
}

impl WakeMode {
    /// The name reported in the `wake_up` field.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none (polling only)",
            Self::InProcess => "in-process (intake in the worker's process)",
            Self::Listener => "LISTEN/NOTIFY (intake in another process)",
        }
    }
}

/// Part `latency`: enqueues `commands` provision requests one at a time through intake, at
/// about `rate` per second, while one worker idles with `idle_poll` and is woken as `wake`
/// says; reports the time from the enqueue commit to the claim, against the targets.
pub async fn latency(
    target: &Target,
    commands: usize,
    rate: f64,
    idle_polls: &[Duration],
    wakes: &[WakeMode],
) -> BenchResult<()> {
    for &idle_poll in idle_polls {
        for &wake in wakes {
            if wake == WakeMode::Listener && matches!(target, Target::Sqlite) {
                continue; // SQLite has no notifications
            }
            latency_run(target, commands, rate, idle_poll, wake).await?;
        }
    }
    Ok(())
}

async fn latency_run(
    target: &Target,
    commands: usize,
    rate: f64,
    idle_poll: Duration,
    wake: WakeMode,
) -> BenchResult<()> {
    let bench = target
        .fresh(&format!("latency_{}", idle_poll.as_millis()), 2)
        .await?;
    let wakeups = Wakeups::new();
    let listener = match wake {
        WakeMode::Listener => {
            let listener =
                WakeListener::spawn(&bench.db, wakeups.clone(), ListenerConfig::default())
                    .ok_or("the listener needs PostgreSQL")?;
            let mut state = listener.watch();
            tokio::time::timeout(Duration::from_secs(10), state.wait_for(|s| s.listening))
                .await
                .map_err(|_| "the wake listener did not connect within 10 s")??;
            Some(listener)
        }
        WakeMode::None | WakeMode::InProcess => None,
    };
    let store = SeaOrmLifecycleStore::new(&bench.db);
    let timed = TimedStore {
        inner: store.clone(),
        claimed_at: Arc::new(Mutex::new(HashMap::new())),
    };
    let counter = Arc::new(AckCounter::new(commands as u64));
    let dispatcher = Arc::new(
        Dispatcher::new(
            timed.clone(),
            InstantRemote::default(),
            DispatcherConfig::default(),
        )
        .with_metrics(counter.clone()),
    );
    // The service's claimer (one pool per process), with one remote call at a time.
    let mut worker = WorkerPool::new(
        dispatcher,
        unique_lease_owner("bench-latency"),
        1,
        WorkerConfig {
            idle_poll,
            claim_batch: 1,
            product_enabled: Arc::new(AtomicBool::new(true)),
        },
    );
    if wake != WakeMode::None {
        worker = worker.with_wakeups(&wakeups);
    }
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(worker.run(stopped));
    let mut intake = CommandIntake::new(store.clone(), Arc::new(SystemClock));
    if wake == WakeMode::InProcess {
        intake = intake.with_wakeups(wakeups.clone());
    }
    let mut enqueued_at = HashMap::with_capacity(commands);
    let mut jitter = Lcg(0x2545_f491_4f6c_dd1d);
    let spacing = 1.0 / rate;
    for i in 0..commands {
        let receipt = intake
            .create_control_space(&create_request("tenant-latency", "latency", i)?)
            .await?;
        enqueued_at.insert(receipt.command_id, Instant::now());
        // Spacing uniform in [0.5, 1.5) × 1/rate, so enqueues do not lock onto the poll phase.
        tokio::time::sleep(Duration::from_secs_f64(spacing * (0.5 + jitter.next()))).await;
    }
    let finished = tokio::time::timeout(
        idle_poll * 2 + Duration::from_secs(30),
        counter.done.notified(),
    )
    .await
    .is_ok();
    let _ = stop.send(true);
    let _ = handle.await;
    let claimed_at = timed
        .claimed_at
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut micros: Vec<f64> = enqueued_at
        .iter()
        .filter_map(|(id, at)| {
            claimed_at
                .get(id)
                .map(|claimed| claimed.saturating_duration_since(*at).as_secs_f64() * 1e6)
        })
        .collect();
    micros.sort_by(f64::total_cmp);
    let reconnections = listener.as_ref().map(WakeListener::reconnections);
    if let Some(listener) = listener {
        listener.stop().await;
    }
    let p50_ms = round3(percentile(&micros, 0.50) / 1e3);
    let p99_ms = round3(percentile(&micros, 0.99) / 1e3);
    emit(&json!({
        "part": "latency",
        "backend": target.backend_name(),
        "idle_poll_ms": idle_poll.as_millis(),
        "default_idle_poll": idle_poll == WorkerConfig::default().idle_poll,
        "wake_up": wake.name(),
        "wake_mode": format!("{wake:?}"),
        "commands": commands,
        "rate_per_second": rate,
        "claimed": micros.len(),
        "finished": finished,
        "p50_ms": p50_ms,
        "p99_ms": p99_ms,
        "max_ms": round3(micros.last().copied().unwrap_or(f64::NAN) / 1e3),
        "target_p50_ms": LATENCY_TARGET_P50_MS,
        "target_p99_ms": LATENCY_TARGET_P99_MS,
        "met": finished && micros.len() == commands
            && p50_ms <= LATENCY_TARGET_P50_MS && p99_ms <= LATENCY_TARGET_P99_MS,
        "listener_reconnections": reconnections,
    }));
    bench.drop_database().await?;
    Ok(())
}

/// Part `memory`: one process drains `commands` revoke commands with `workers` workers while
/// its resident set is sampled; the peak must not depend on the backlog.
pub async fn memory(
    target: &Target,
    commands: usize,
    workers: u32,
    options: &DrainOptions,
) -> BenchResult<()> {
    let bench = target
        .fresh("memory", workers + options.extra_connections)
        .await?;
    let loaded = Instant::now();
    load(&bench.db, Workload::Revoke, commands, 5_000, Utc::now()).await?;
    eprintln!(
        "  {}: loaded {commands} commands in {:.1} s; draining with {workers} workers",
        target.backend_name(),
        loaded.elapsed().as_secs_f64()
    );
    // Forget the peak of the loading phase: only the drain is measured.
    let reset = rss::reset_peak();
    let before = rss::current_kib();
    let samples = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let progress = Arc::new(AtomicU64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let samples = samples.clone();
        let progress = progress.clone();
        let sampling = sampling.clone();
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                if let Some(kib) = rss::current_kib() {
                    samples
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push((progress.load(Ordering::Relaxed), kib));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let remote = InstantRemote::default();
    let drained = drain(
        &bench.db,
        remote.clone(),
        commands as u64,
        workers,
        options,
        Some(progress),
    )
    .await?;
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    let peak = rss::peak_kib();
    let samples = samples
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    // Largest resident set while each quarter of the backlog was drained.
    let total = commands as u64;
    let quarter_peaks: Vec<u64> = (0..4)
        .map(|q| {
            samples
                .iter()
                .filter(|(done, _)| *done * 4 / total.max(1) == q)
                .map(|(_, kib)| *kib)
                .max()
                .unwrap_or(0)
        })
        .collect();
    let counts = store_bench::outbox_status_counts(&bench.db).await?;
    emit(&json!({
        "part": "memory",
        "backend": target.backend_name(),
        "commands": commands,
        "workers": workers,
        "claim_batch": options.claim_batch,
        "settle": options.settle_mode(),
        "seconds": round3(drained.seconds),
        "commands_per_second": round1(drained.acked as f64 / drained.seconds),
        "acked": drained.acked,
        "timed_out": drained.timed_out,
        "succeeded_rows": count_of(&counts, "succeeded"),
        "rss_before_drain_mib": before.map(mib),
        "peak_rss_mib": peak.map(mib),
        "peak_reset_after_loading": reset,
        "rss_peak_per_quarter_mib": quarter_peaks.into_iter().map(mib).collect::<Vec<_>>(),
    }));
    bench.drop_database().await?;
    Ok(())
}

/// Runs `workers` workers over one dispatcher until `total` commands were acked (or the
/// timeout), then shuts them down gracefully.
pub async fn drain(
    db: &Database,
    remote: InstantRemote,
    total: u64,
    workers: u32,
    options: &DrainOptions,
    progress: Option<Arc<AtomicU64>>,
) -> BenchResult<Drained> {
    let counter = Arc::new(AckCounter::new(total).with_progress(progress));
    let store = SeaOrmLifecycleStore::new(db);
    let (stop, stopped) = watch::channel(false);
    let started = Instant::now();
    let handles = match options.group_commit {
        Some(config) => {
            let store = GroupCommitStore::start(store, config);
            spawn_workers(store, remote, counter.clone(), workers, options, &stopped)
        }
        None => spawn_workers(store, remote, counter.clone(), workers, options, &stopped),
    };
    let timed_out = tokio::time::timeout(options.timeout, counter.done.notified())
        .await
        .is_err();
    let seconds = started.elapsed().as_secs_f64();
    let _ = stop.send(true);
    for handle in handles {
        handle.await?;
    }
    Ok(Drained {
        seconds,
        acked: counter.acked.load(Ordering::Relaxed),
        errors: counter.errors.load(Ordering::Relaxed),
        timed_out,
    })
}

/// Starts `workers` workers over one dispatcher on `store`.
fn spawn_workers<S: LifecycleStore + 'static>(
    store: S,
    remote: InstantRemote,
    counter: Arc<AckCounter>,
    workers: u32,
    options: &DrainOptions,
    stopped: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let dispatcher =
        Arc::new(Dispatcher::new(store, remote, DispatcherConfig::default()).with_metrics(counter));
    if options.claimer == Claimer::Pool {
        let pool = WorkerPool::new(
            dispatcher,
            unique_lease_owner("bench-pool"),
            workers,
            WorkerConfig {
                idle_poll: options.idle_poll,
                claim_batch: options.claim_batch,
                product_enabled: Arc::new(AtomicBool::new(true)),
            },
        );
        let stopped = stopped.clone();
        return vec![tokio::spawn(async move {
            pool.run(stopped).await;
        })];
    }
    (0..workers)
        .map(|i| {
            let worker = Worker::new(
                dispatcher.clone(),
                unique_lease_owner(&format!("bench-{i}")),
                WorkerConfig {
                    idle_poll: options.idle_poll,
                    claim_batch: options.claim_batch,
                    product_enabled: Arc::new(AtomicBool::new(true)),
                },
            );
            let stopped = stopped.clone();
            tokio::spawn(async move {
                worker.run(stopped).await;
            })
        })
        .collect()
}

/// Metrics sink that counts acks and wakes the waiter at the last one.
#[derive(Debug)]
pub(crate) struct AckCounter {
    target: u64,
    acked: AtomicU64,
    errors: AtomicU64,
    /// Notified (one permit) when the target number of acks is reached.
    pub(crate) done: Notify,
    progress: Option<Arc<AtomicU64>>,
}

impl AckCounter {
    /// A counter that notifies [`Self::done`] at the `target`-th ack.
    pub(crate) fn new(target: u64) -> Self {
        Self {
            target,
            acked: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            done: Notify::new(),
            progress: None,
        }
    }

    fn with_progress(mut self, progress: Option<Arc<AtomicU64>>) -> Self {
        self.progress = progress;
        self
    }
}

impl LifecycleMetrics for AckCounter {
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError> {
        match metric.status {
            TaskStatus::Succeeded => {
                let acked = self.acked.fetch_add(1, Ordering::Relaxed) + 1;
                if let Some(progress) = &self.progress {
                    progress.store(acked, Ordering::Relaxed);
                }
                if acked == self.target {
                    // Stores a permit if nobody waits yet.
                    self.done.notify_one();
                }
            }
            TaskStatus::DispatchError => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
            TaskStatus::Running | TaskStatus::Retry | TaskStatus::Failed | TaskStatus::Moot => {}
        }
        Ok(())
    }
}

/// The SeaORM store, recording when each command was claimed.
#[derive(Debug, Clone)]
struct TimedStore {
    inner: SeaOrmLifecycleStore,
    claimed_at: Arc<Mutex<HashMap<CommandId, Instant>>>,
}

impl forward::Decorator for TimedStore {
    type Inner = SeaOrmLifecycleStore;
    fn inner(&self) -> &SeaOrmLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for TimedStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        let claimed = self.inner.claim(request).await?;
        let now = Instant::now();
        let mut at = self
            .claimed_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for command in &claimed {
            at.entry(command.id().clone()).or_insert(now);
        }
        Ok(claimed)
    }

    /// Not forwarded: the pool is not told when the next command comes due (the port's
    /// default answer), so the latency measured is that of the idle poll or of the wake-ups.
    async fn next_due_in(&self, _include_provision: bool) -> Result<Option<Duration>, StoreError> {
        Ok(None)
    }
}

impl forward::ControlSpaceReader for TimedStore {}

impl forward::IntakeStore for TimedStore {}

/// A small deterministic generator of draws in `[0, 1)` (xorshift), for enqueue spacing.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn count_of(counts: &[(String, i64)], status: &str) -> i64 {
    counts
        .iter()
        .find(|(s, _)| s == status)
        .map_or(0, |(_, n)| *n)
}

/// The `q` quantile (nearest rank) of sorted `values`; NaN when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn mib(kib: u64) -> f64 {
    round1(kib as f64 / 1024.0)
}

/// Rounds to one decimal.
pub fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Rounds to three decimals.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn spacing_draws_stay_in_unit_interval() {
        let mut g = Lcg(7);
        for _ in 0..1000 {
            let x = g.next();
            assert!((0.0..1.0).contains(&x));
        }
    }
}
