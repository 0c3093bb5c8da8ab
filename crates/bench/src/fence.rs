//! Part `fence`: the cost of `ScopedWrites` around a no-op write.
//!
//! - uncontended: one task runs a no-op operation through [`ScopedWrites::run`] on one scope,
//!   again and again, versus awaiting the same no-op directly (ns per operation);
//! - concurrent: one task per scope over 1,000 scopes of one installation binding, every task
//!   running no-op writes as fast as it can (operations per second in total).
//!
//! With `--database`, the same writes run over the SQL host storage of the `--backend`
//! database ([`database`]): fenced writes per second with many scopes at once, and the time of
//! one write alone (3 statements per run after the warm-up).
//!
//! Otherwise host storage is the in-memory fake. Every run reads the installation's fence record and
//! takes and releases the scope's cross-process claim (the scope's record is not read first
//! when this runtime released it last: 1 read and 2 compare-and-sets on the fake per run after
//! the warm-up), so the figure is the runtime's own overhead (lock map, fence records, claim,
//! task-local bookkeeping) without database latency.

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use tenantry_engine::scoped_writes::{FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::{Binding, ScopeIdentity};
use tenantry_ports::host_storage::HostStorage;
use tenantry_ports::host_storage::fake::InMemoryHostStorage;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;

use crate::fixtures::Target;
use crate::lifecycle::{round1, round3};
use crate::{BenchResult, emit};

/// Pool connections of the database measurement.
const DB_POOL: u32 = 16;

/// Runs the fence part: `ops` uncontended operations, then `scopes` concurrent tasks doing
/// `ops_per_scope` operations each.
pub async fn run(ops: u64, scopes: u64, ops_per_scope: u64) -> BenchResult<()> {
    let writes = ScopedWrites::new(Arc::new(InMemoryHostStorage::new()));
    let binding = Binding::parse("bench-binding")?;
    let scope = scope_of(0);

    // Warm up.
    for _ in 0..1_000 {
        scoped_noop(&writes, &binding, &scope).await?;
    }
    let started = Instant::now();
    for _ in 0..ops {
        black_box(noop().await)?;
    }
    let bare_ns = started.elapsed().as_nanos() as f64 / ops as f64;
    let started = Instant::now();
    for _ in 0..ops {
        black_box(scoped_noop(&writes, &binding, &scope).await)?;
    }
    let scoped_ns = started.elapsed().as_nanos() as f64 / ops as f64;
    emit(&json!({
        "part": "fence",
        "measure": "uncontended",
        "ops": ops,
        "bare_ns_per_op": round1(bare_ns),
        "scoped_ns_per_op": round1(scoped_ns),
        "overhead_ns_per_op": round1(scoped_ns - bare_ns),
    }));

    let seconds = every_scope_at_once(&writes, &binding, scopes, ops_per_scope).await?;
    let total = scopes * ops_per_scope;
    emit(&json!({
        "part": "fence",
        "measure": "concurrent",
        "scopes": scopes,
        "ops": total,
        "seconds": round3(seconds),
        "ops_per_second": round1(total as f64 / seconds),
        "runtime_threads": tokio::runtime::Handle::current().metrics().num_workers(),
    }));
    Ok(())
}

/// Scope `i` of the measurements.
fn scope_of(i: u64) -> ScopeIdentity {
    ScopeIdentity::object(format!("kb-{i}"))
}

/// `scopes` tasks, one per scope of `binding`, each running `ops_per_scope` no-op writes as
/// fast as it can; returns the seconds until the last one finished.
async fn every_scope_at_once<S: HostStorage + ?Sized + 'static>(
    writes: &ScopedWrites<S>,
    binding: &Binding,
    scopes: u64,
    ops_per_scope: u64,
) -> BenchResult<f64> {
    let started = Instant::now();
    let tasks: Vec<_> = (0..scopes)
        .map(|i| {
            let writes = writes.clone();
            let binding = binding.clone();
            tokio::spawn(async move {
                let scope = scope_of(i);
                for _ in 0..ops_per_scope {
                    scoped_noop(&writes, &binding, &scope).await?;
                }
                Ok::<(), ScopedWriteError<Infallible>>(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed().as_secs_f64())
}

async fn noop() -> Result<(), ScopedWriteError<Infallible>> {
    black_box(Ok(()))
}

async fn scoped_noop<S: HostStorage + ?Sized + 'static>(
    writes: &ScopedWrites<S>,
    binding: &Binding,
    scope: &ScopeIdentity,
) -> Result<(), ScopedWriteError<Infallible>> {
    writes
        .run(binding, scope, FenceMode::Enforce, |_ctx| noop())
        .await
}

/// The database measurement: `scopes` tasks, one per scope of one installation binding, each
/// running `ops_per_scope` no-op writes through [`ScopedWrites::run`] over the SQL host storage
/// of a fresh database on `target` (a pool of [`DB_POOL`] connections); then one task alone
/// running `ops_per_scope` writes on one scope. Emits fenced writes per second (all tasks)
/// and the mean milliseconds of a write alone.
///
/// # Errors
/// When the database cannot be created or a write fails.
pub async fn database(target: &Target, scopes: u64, ops_per_scope: u64) -> BenchResult<()> {
    let bench_db = target.fresh("fence", DB_POOL).await?;
    let writes = ScopedWrites::new(Arc::new(SeaOrmHostStorage::new(&bench_db.db)));
    let binding = Binding::parse("bench-binding")?;
    // Warm-up: every scope once (its first claim reads the absent record), so the timed runs
    // are the steady state.
    for i in 0..scopes {
        scoped_noop(&writes, &binding, &scope_of(i)).await?;
    }
    let seconds = every_scope_at_once(&writes, &binding, scopes, ops_per_scope).await?;
    let total = scopes * ops_per_scope;

    let alone = scope_of(0);
    let started = Instant::now();
    for _ in 0..ops_per_scope {
        scoped_noop(&writes, &binding, &alone).await?;
    }
    let alone_ms = started.elapsed().as_secs_f64() * 1_000.0 / ops_per_scope as f64;
    emit(&json!({
        "part": "fence",
        "measure": "database",
        "backend": target.backend_name(),
        "scopes": scopes,
        "ops": total,
        "pool": DB_POOL,
        "seconds": round3(seconds),
        "ops_per_second": round1(total as f64 / seconds),
        "alone_ms_per_op": round3(alone_ms),
    }));
    drop(writes);
    bench_db.drop_database().await?;
    Ok(())
}
