//! Part `history`: does the cost of the outbox grow with its history, and how fast does the
//! pruner remove it (issue 18, docs/benchmarks.md "History and retention").
//!
//! For each history size (0 and `--history`, default 1,000,000): a fresh database is loaded
//! with that many finished (`succeeded`) revoke commands, 60 days old, then with `--live` pending
//! revoke commands, then vacuumed (`VACUUM ANALYZE`: the bulk fixture's dead index entries are
//! removed, as autovacuum does in a running service). Measured on the live ones: the latency of single claim statements
//! (`claim` of 1 command, then its ack; `--claims` of them) and the drain throughput of
//! `--workers` workers over the rest. Then one `prune_once` with the default policy (30-day
//! window) removes the history: rows per second.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;
use tenantry_engine::retention::prune_once;
use tenantry_kernel::LeaseOwner;
use tenantry_lifecycle::Settlement;
use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
use tenantry_ports::retention::{RetentionKind, RetentionPolicy};
use tenantry_store_seaorm::SeaOrmRetentionStore;
use tenantry_store_seaorm::bench as store_bench;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

use crate::fixtures::{Target, Workload, plan};
use crate::lifecycle::{DrainOptions, drain, percentile, round1, round3};
use crate::remote::InstantRemote;
use crate::{BenchResult, emit};

/// Rows planned and loaded per bulk statement group.
const CHUNK: usize = 10_000;

/// Runs the part for history sizes 0 and `history`.
pub async fn run(
    target: &Target,
    history: usize,
    live: usize,
    claims: usize,
    workers: u32,
    options: &DrainOptions,
) -> BenchResult<()> {
    let sizes = if history == 0 {
        vec![0]
    } else {
        vec![0, history]
    };
    for size in sizes {
        let pool = workers + options.extra_connections + 1;
        let bench = target.fresh(&format!("history_{size}"), pool).await?;
        let db = &bench.db;
        let loading = Instant::now();
        // The history: revoke commands finished 60 days ago (past the 30-day window; a revoke
        // never pins its control space).
        load_range(db, 0, size).await?;
        let finished_at = Utc::now() - chrono::Duration::days(60);
        let finished = store_bench::finish_all_commands(db, finished_at).await?;
        load_range(db, size, live).await?;
        // The bulk UPDATE above left a dead claim-index entry per finished command; a service
        // finishes commands one by one and autovacuum removes those entries as it goes.
        store_bench::vacuum_analyze(db).await?;
        eprintln!(
            "  history {size}: loaded {finished} finished and {live} pending commands in {:.1} s",
            loading.elapsed().as_secs_f64()
        );

        // Claim latency: one statement claiming one command, then its ack.
        let store = SeaOrmLifecycleStore::new(db);
        let request = ClaimRequest {
            owner: LeaseOwner::parse("bench-claim")?,
            lease_duration: Duration::from_secs(60),
            include_provision: true,
            limit: 1,
            call_deadline: std::time::Duration::ZERO,
        };
        let mut micros = Vec::with_capacity(claims);
        for _ in 0..claims.min(live) {
            let started = Instant::now();
            let claimed = store.claim(&request).await?;
            micros.push(started.elapsed().as_secs_f64() * 1e6);
            for c in claimed {
                store.settle(&c.lease, &Settlement::ack(Utc::now())).await?;
            }
        }
        micros.sort_by(f64::total_cmp);

        // Drain throughput of the rest.
        let rest = live.saturating_sub(claims) as u64;
        let drained = drain(
            db,
            InstantRemote::default(),
            rest,
            workers,
            options,
            None::<std::sync::Arc<AtomicU64>>,
        )
        .await?;
        emit(&json!({
            "part": "history",
            "backend": target.backend_name(),
            "history": size,
            "live": live,
            "workers": workers,
            "claim_batch": options.claim_batch,
            "claim_p50_ms": round3(percentile(&micros, 0.50) / 1e3),
            "claim_p99_ms": round3(percentile(&micros, 0.99) / 1e3),
            "drain_seconds": round3(drained.seconds),
            "commands_per_second": round1(drained.acked as f64 / drained.seconds),
            "timed_out": drained.timed_out,
        }));

        // The pruner over the history.
        if size > 0 {
            let retention = SeaOrmRetentionStore::new(db);
            let policy = RetentionPolicy::default();
            let started = Instant::now();
            let report = prune_once(&retention, &policy, Utc::now()).await?;
            let seconds = started.elapsed().as_secs_f64();
            let removed = report
                .kind(RetentionKind::FinishedCommands)
                .map_or(0, |k| k.removed);
            emit(&json!({
                "part": "history_prune",
                "backend": target.backend_name(),
                "history": size,
                "batch_size": policy.batch_size,
                "removed": removed,
                "seconds": round3(seconds),
                "rows_per_second": round1(removed as f64 / seconds),
            }));
        }
        bench.drop_database().await?;
    }
    Ok(())
}

/// Loads revoke commands `first..first + count` (and their control spaces), pending.
async fn load_range(
    db: &tenantry_store_seaorm::Database,
    first: usize,
    count: usize,
) -> BenchResult<()> {
    let now = Utc::now();
    let mut at = first;
    while at < first + count {
        let n = CHUNK.min(first + count - at);
        let (spaces, commands) = plan(Workload::Revoke, at, n, now)?;
        store_bench::bulk_load_lifecycle(db, &spaces, &commands).await?;
        at += n;
    }
    Ok(())
}
