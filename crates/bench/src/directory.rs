//! Part `directory`: applying a full snapshot (default 10,000 workspaces and 100,000
//! memberships, 25,000 accounts; 10 members per workspace) through the projection store,
//! versus a plain multi-row `INSERT` of the same rows into the same (empty) tables.
//!
//! Both run on fresh databases of the same backend in the same run. The apply is the store's
//! one-transaction apply (state-row lock, chunked lookups, planning, multi-row upserts, the
//! committed-capacity count); the baseline inserts exactly the rows that plan writes. Two
//! re-applies are timed as well: the same snapshot again (already projected: no row is read or
//! written) and the same contents at a later cursor (planned against every stored row; nothing
//! changes but the state row).
//!
//! Memory: the process's peak resident set (`VmHWM`, reset through `/proc/self/clear_refs`
//! before each apply) while the store applies, and the resident set after it. The process holds
//! the parsed snapshot throughout (as a projector does while it applies), so the peak includes
//! it. Run one size per process (`cargo xtask bench` does) so sizes do not share a heap.

use std::time::{Duration, Instant};

use serde_json::json;
use tenantry_directory::plan::plan_snapshot;
use tenantry_directory::testing::{at, instance, snapshot, workspace};
use tenantry_directory::{ApplyContext, DirectorySnapshot, ExistingRows, ProjectionLimits};
use tenantry_ports::directory::SnapshotApplier;
use tenantry_store_seaorm::bench as store_bench;
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;

use crate::fixtures::Target;
use crate::lifecycle::round3;
use crate::{BenchResult, SnapshotSize, emit, rss};

/// Runs the directory part with a snapshot of `size`.
pub async fn run(target: &Target, size: SnapshotSize) -> BenchResult<()> {
    let SnapshotSize {
        workspaces,
        members,
        ..
    } = size;
    let big = large_snapshot(size);
    let ctx = ApplyContext {
        instance: instance(),
        limits: ProjectionLimits {
            max_snapshot_workspaces: workspaces.max(1),
            max_snapshot_memberships: (workspaces * members).max(1),
            max_active_workspaces: workspaces.max(1),
        },
        now: at(0),
        max_staleness: Duration::from_secs(60),
    };

    // Baseline: the rows the apply writes, inserted plainly.
    let (bulk, rows, accounts_written) = {
        let write = plan_snapshot(&ctx, None, &ExistingRows::default(), &big, &[])?;
        let rows = write.accounts.len()
            + write.workspaces.len()
            + write.memberships.len()
            + write.executions.len();
        let bench = target.fresh("directory_bulk", 4).await?;
        let started = Instant::now();
        store_bench::bulk_insert_directory_rows(&bench.db, &write).await?;
        let bulk = started.elapsed().as_secs_f64();
        bench.drop_database().await?;
        (bulk, rows, write.accounts.len())
    };

    let bench = target.fresh("directory_apply", 4).await?;
    let store = SeaOrmDirectoryStore::new(&bench.db);
    let (apply, outcome, apply_mem) = measured(|| store.apply_snapshot(&ctx, &big, &[])).await?;
    let again = ApplyContext { now: at(1), ..ctx };
    let (reapply, _, reapply_mem) = measured(|| store.apply_snapshot(&again, &big, &[])).await?;
    let mut later = big.clone();
    later.cursor += 1;
    let (reapply_later, _, _) = measured(|| store.apply_snapshot(&again, &later, &[])).await?;
    drop(later);
    bench.drop_database().await?;

    emit(&json!({
        "part": "directory",
        "backend": target.backend_name(),
        "workspaces": workspaces,
        "memberships": workspaces * members,
        "accounts": accounts_written,
        "rows": rows,
        "active_workspaces": outcome.active_workspaces,
        "apply_seconds": round3(apply),
        "reapply_seconds": round3(reapply),
        "reapply_later_cursor_seconds": round3(reapply_later),
        "bulk_insert_seconds": round3(bulk),
        "ratio": (apply / bulk * 100.0).round() / 100.0,
        "reapply_share": (reapply / apply * 100.0).round() / 100.0,
        "reapply_later_cursor_share": (reapply_later / apply * 100.0).round() / 100.0,
        "rss_before_apply_mib": apply_mem.before_mib,
        "apply_peak_rss_mib": apply_mem.peak_mib,
        "rss_after_apply_mib": apply_mem.after_mib,
        "reapply_peak_rss_mib": reapply_mem.peak_mib,
    }));
    Ok(())
}

/// Resident set around one apply, MiB (`None` where `/proc` is not readable).
struct Memory {
    before_mib: Option<u64>,
    peak_mib: Option<u64>,
    after_mib: Option<u64>,
}

/// Times `apply` and records the resident set before, at peak during, and after it.
async fn measured<F, Fut, T, E>(apply: F) -> Result<(f64, T, Memory), E>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let reset = rss::reset_peak();
    let before = rss::current_kib();
    let started = Instant::now();
    let value = apply().await?;
    let seconds = started.elapsed().as_secs_f64();
    let peak = if reset { rss::peak_kib() } else { None };
    let memory = Memory {
        before_mib: before.map(|k| k / 1024),
        peak_mib: peak.map(|k| k / 1024),
        after_mib: rss::current_kib().map(|k| k / 1024),
    };
    Ok((seconds, value, memory))
}

/// `size.workspaces` active workspaces of `size.members` members each, members drawn
/// round-robin from `size.accounts` accounts.
pub(crate) fn large_snapshot(size: SnapshotSize) -> DirectorySnapshot {
    let SnapshotSize {
        workspaces,
        members,
        accounts,
    } = size;
    let names: Vec<String> = (0..accounts.max(1)).map(|i| format!("acc{i:06}")).collect();
    let list = (0..workspaces)
        .map(|w| {
            let pairs: Vec<(&str, i64)> = (0..members)
                .map(|k| (names[(w * members + k) % names.len()].as_str(), 1))
                .collect();
            workspace(&format!("ws-{w:06}"), 1, &pairs)
        })
        .collect();
    snapshot(100, list)
}
