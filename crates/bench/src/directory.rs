//! Part `directory`: applying a full snapshot of 10,000 workspaces and 100,000 memberships
//! (25,000 accounts; 10 members per workspace) through the projection store, versus a plain
//! multi-row `INSERT` of the same rows into the same (empty) tables.
//!
//! Both run on fresh databases of the same backend in the same run. The apply is the store's
//! one-transaction apply (state-row lock, chunked lookups, planning, multi-row upserts, the
//! committed-capacity count); the baseline inserts exactly the rows that plan writes. A second
//! apply of the same snapshot (nothing changes but the state row) is timed as well.

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
use crate::{BenchResult, emit};

/// Runs the directory part with `workspaces` workspaces of `members` members each, drawn from
/// `accounts` accounts.
pub async fn run(
    target: &Target,
    workspaces: usize,
    members: usize,
    accounts: usize,
) -> BenchResult<()> {
    let big = large_snapshot(workspaces, members, accounts);
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

    let bench = target.fresh("directory_apply", 4).await?;
    let store = SeaOrmDirectoryStore::new(&bench.db);
    let started = Instant::now();
    let outcome = store.apply_snapshot(&ctx, &big, &[]).await?;
    let apply = started.elapsed().as_secs_f64();
    let again = ApplyContext { now: at(1), ..ctx };
    let started = Instant::now();
    store.apply_snapshot(&again, &big, &[]).await?;
    let reapply = started.elapsed().as_secs_f64();
    bench.drop_database().await?;

    emit(&json!({
        "part": "directory",
        "backend": target.backend_name(),
        "workspaces": workspaces,
        "memberships": workspaces * members,
        "accounts": write.accounts.len(),
        "rows": rows,
        "active_workspaces": outcome.active_workspaces,
        "apply_seconds": round3(apply),
        "reapply_seconds": round3(reapply),
        "bulk_insert_seconds": round3(bulk),
        "ratio": (apply / bulk * 100.0).round() / 100.0,
    }));
    Ok(())
}

/// `workspaces` active workspaces of `members` members each, members drawn round-robin from
/// `accounts` accounts.
fn large_snapshot(workspaces: usize, members: usize, accounts: usize) -> DirectorySnapshot {
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
