//! Part `fairness` (issue 33): one tenant's backlog and another tenant's few commands.
//!
//! Three runs, each on a fresh database with the service's worker settings (one
//! [`WorkerPool`] per process, group commit, in-process wake-ups from intake):
//! - `alone`: tenant `tenant-b` enqueues `others` provision requests through
//!   [`CommandIntake`], one every [`SPACING`], on an empty outbox;
//! - `backlog`: tenant `tenant-0`'s `backlog` revoke commands are loaded as intake gives them
//!   (consecutive turns); once a tenth of them is settled, `tenant-b` enqueues the same
//!   requests as in `alone` while the drain goes on;
//! - `reference`: the same backlog drained with no other tenant (the backlog's throughput
//!   without the fairness ever coming into play, as in a first-in-first-out run where the
//!   other tenant's commands come last).
//!
//! Each of `tenant-b`'s commands is timed from the return of its intake call (committed) to
//! the return of the settle that acked it (committed). Reported: p50, p99 and max of those
//! times per run, and the backlog's commands per second.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use serde_json::json;
use tenantry_engine::lifecycle::{
    CommandIntake, Dispatcher, DispatcherConfig, GroupCommitStore, SystemClock, Wakeups,
    WorkerConfig, WorkerPool, unique_lease_owner,
};
use tenantry_kernel::CommandId;
use tenantry_lifecycle::{CommandOutcome, LeaseToken, Settlement};
use tenantry_ports::forward;
use tenantry_ports::lifecycle::{CommandQueue, SettleError, StoreError};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tokio::sync::watch;

use crate::fixtures::{Target, Workload, create_request, load_for};
use crate::lifecycle::{AckCounter, DrainOptions, percentile, round1, round3};
use crate::remote::InstantRemote;
use crate::{BenchResult, emit};

/// Time between two of the other tenant's requests: 10 ms (100 requests in about a second).
pub const SPACING: Duration = Duration::from_millis(10);

/// Runs the three runs and prints one result line each.
pub async fn run(
    target: &Target,
    backlog: usize,
    others: usize,
    workers: u32,
    options: &DrainOptions,
) -> BenchResult<()> {
    for (run, backlog, others) in [
        ("alone", 0, others),
        ("backlog", backlog, others),
        ("reference", backlog, 0),
    ] {
        let measured = measure(target, run, backlog, others, workers, options).await?;
        emit(&json!({
            "part": "fairness",
            "backend": target.backend_name(),
            "run": run,
            "backlog": backlog,
            "others": others,
            "workers": workers,
            "settings": options.label(),
            "service_defaults": options.is_service_default(),
            "seconds": round3(measured.seconds),
            "backlog_per_second": (backlog > 0).then(|| round1(backlog as f64 / measured.seconds)),
            "others_settled": measured.latencies_ms.len(),
            "others_p50_ms": round3(percentile(&measured.latencies_ms, 0.50)),
            "others_p99_ms": round3(percentile(&measured.latencies_ms, 0.99)),
            "others_max_ms": round3(measured.latencies_ms.last().copied().unwrap_or(f64::NAN)),
            "others_to_claim_p50_ms": round3(percentile(&measured.to_claim_ms, 0.50)),
            "others_to_claim_p99_ms": round3(percentile(&measured.to_claim_ms, 0.99)),
            "timed_out": measured.timed_out,
        }));
    }
    Ok(())
}

/// What one run measured.
struct Measured {
    /// Seconds from the workers' start to the last ack.
    seconds: f64,
    /// The other tenant's enqueue-to-settle times, milliseconds, sorted.
    latencies_ms: Vec<f64>,
    /// The other tenant's enqueue-to-claim times, milliseconds, sorted.
    to_claim_ms: Vec<f64>,
    timed_out: bool,
}

async fn measure(
    target: &Target,
    run: &str,
    backlog: usize,
    others: usize,
    workers: u32,
    options: &DrainOptions,
) -> BenchResult<Measured> {
    let bench = target
        .fresh(
            &format!("fairness_{run}"),
            workers + options.extra_connections + 1,
        )
        .await?;
    if backlog > 0 {
        let loading = Instant::now();
        load_for(&bench.db, Workload::Revoke, backlog, 5_000, Utc::now(), 1).await?;
        eprintln!(
            "  {run}: loaded {backlog} commands in {:.1} s",
            loading.elapsed().as_secs_f64()
        );
    }
    let store = SeaOrmLifecycleStore::new(&bench.db);
    let settled = SettleTimes {
        inner: store.clone(),
        acked_at: Arc::new(Mutex::new(HashMap::new())),
        claimed_at: Arc::new(Mutex::new(HashMap::new())),
    };
    let counter = Arc::new(AckCounter::new((backlog + others) as u64));
    let wakeups = Wakeups::new();
    let (stop, stopped) = watch::channel(false);
    let started = Instant::now();
    let handle = {
        let config = options.group_commit.unwrap_or_default();
        let dispatcher = Arc::new(
            Dispatcher::new(
                GroupCommitStore::start(settled.clone(), config),
                InstantRemote::default(),
                DispatcherConfig::default(),
            )
            .with_metrics(counter.clone()),
        );
        let pool = WorkerPool::new(
            dispatcher,
            unique_lease_owner("bench-fairness"),
            workers,
            WorkerConfig {
                idle_poll: options.idle_poll,
                claim_batch: options.claim_batch,
                product_enabled: Arc::new(AtomicBool::new(true)),
            },
        )
        .with_wakeups(&wakeups);
        tokio::spawn(pool.run(stopped))
    };
    // The other tenant starts once a tenth of the backlog is settled (the drain at speed).
    while settled.count() < backlog / 10 && started.elapsed() < options.timeout {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let intake = CommandIntake::new(store, Arc::new(SystemClock)).with_wakeups(wakeups);
    let mut enqueued_at = HashMap::with_capacity(others);
    for i in 0..others {
        let receipt = intake
            .create_control_space(&create_request("tenant-b", "fairness-b", i)?)
            .await?;
        enqueued_at.insert(receipt.command_id, Instant::now());
        tokio::time::sleep(SPACING).await;
    }
    let remaining = options.timeout.saturating_sub(started.elapsed());
    let timed_out = tokio::time::timeout(remaining, counter.done.notified())
        .await
        .is_err();
    let seconds = started.elapsed().as_secs_f64();
    let _ = stop.send(true);
    handle.await?;
    let latencies_ms = sorted_ms_since(&enqueued_at, &settled.acked_at);
    let to_claim_ms = sorted_ms_since(&enqueued_at, &settled.claimed_at);
    bench.drop_database().await?;
    Ok(Measured {
        seconds,
        latencies_ms,
        to_claim_ms,
        timed_out,
    })
}

/// For each command of `from` that `to` has a time for, the milliseconds between the two,
/// sorted.
fn sorted_ms_since(
    from: &HashMap<CommandId, Instant>,
    to: &Mutex<HashMap<CommandId, Instant>>,
) -> Vec<f64> {
    let to = to.lock().unwrap_or_else(PoisonError::into_inner);
    let mut ms: Vec<f64> = from
        .iter()
        .filter_map(|(id, at)| {
            to.get(id)
                .map(|then| then.saturating_duration_since(*at).as_secs_f64() * 1e3)
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    ms
}

/// The SeaORM store, recording when each command's ack returned.
#[derive(Debug, Clone)]
struct SettleTimes {
    inner: SeaOrmLifecycleStore,
    acked_at: Arc<Mutex<HashMap<CommandId, Instant>>>,
    claimed_at: Arc<Mutex<HashMap<CommandId, Instant>>>,
}

impl SettleTimes {
    fn count(&self) -> usize {
        self.acked_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn record<'a>(&self, acked: impl Iterator<Item = &'a LeaseToken>) {
        let now = Instant::now();
        let mut at = self.acked_at.lock().unwrap_or_else(PoisonError::into_inner);
        for lease in acked {
            at.entry(lease.command_id.clone()).or_insert(now);
        }
    }
}

fn is_ack(settlement: &Settlement) -> bool {
    matches!(settlement.outcome, Some(CommandOutcome::Ack { .. }))
}

impl forward::Decorator for SettleTimes {
    type Inner = SeaOrmLifecycleStore;
    fn inner(&self) -> &SeaOrmLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for SettleTimes {
    async fn claim(
        &self,
        request: &tenantry_ports::lifecycle::ClaimRequest,
    ) -> Result<Vec<tenantry_lifecycle::ClaimedCommand>, StoreError> {
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

    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        self.inner.settle(lease, settlement).await?;
        if is_ack(settlement) {
            self.record(std::iter::once(lease));
        }
        Ok(())
    }

    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        let results = self.inner.settle_many(items).await?;
        self.record(
            items
                .iter()
                .zip(&results)
                .filter(|((_, settlement), result)| result.is_ok() && is_ack(settlement))
                .map(|((lease, _), _)| lease),
        );
        Ok(results)
    }
}

impl forward::ControlSpaceReader for SettleTimes {}

impl forward::IntakeStore for SettleTimes {}
