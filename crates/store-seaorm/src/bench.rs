//! Support for `cargo xtask bench` (feature `bench`): bulk loading of fixtures and the
//! plain-SQL baselines the benchmarks compare against. Databases per run are made with
//! [`crate::throwaway`].
//!
//! Nothing here is used by the product. Bulk loading bypasses the intake rules (no idempotency
//! check, no compare-and-set): it writes the rows the caller planned with the pure intake
//! functions, many per statement, so that seeding 200,000 commands takes seconds rather than
//! minutes. Row conversion is the adapter's own, so the loaded rows are exactly what intake
//! would have written.

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tenantry_directory::ProjectionWrite;
use tenantry_lifecycle::ControlSpace;
use tenantry_lifecycle::intake::NewCommand;
use tenantry_ports::directory::ProjectionStoreError;
use tenantry_ports::lifecycle::StoreError;

use crate::connect::{Backend, Database};
use crate::directory::SeaOrmDirectoryStore;
use crate::lifecycle::SeaOrmLifecycleStore;
use crate::lifecycle::unavailable;

/// Rows per multi-row `INSERT` statement when bulk loading.
pub const BULK_ROWS_PER_STATEMENT: usize = 1_000;

/// Inserts `spaces` and pending `commands` as given, [`BULK_ROWS_PER_STATEMENT`] rows per
/// statement, all in one transaction. No rule is checked: plan the rows with the intake
/// functions of `tenantry_lifecycle` first.
///
/// # Errors
/// [`StoreError::Unavailable`] when a statement fails (for example a duplicate key); nothing
/// is written then.
pub async fn bulk_load_lifecycle(
    db: &Database,
    spaces: &[ControlSpace],
    commands: &[NewCommand],
) -> Result<(), StoreError> {
    SeaOrmLifecycleStore::new(db)
        .bulk_insert(spaces, commands, BULK_ROWS_PER_STATEMENT)
        .await
}

/// Inserts the account, workspace, membership and execution rows of a planned directory write
/// (`tenantry_directory::plan::plan_snapshot` against empty tables) with plain multi-row
/// `INSERT` statements in one transaction: no lookups, no planning, no `ON CONFLICT`. This is
/// the physical floor the snapshot apply is compared with.
///
/// # Errors
/// [`ProjectionStoreError::Storage`] when a statement fails (for example the tables are not
/// empty).
pub async fn bulk_insert_directory_rows(
    db: &Database,
    write: &ProjectionWrite,
) -> Result<(), ProjectionStoreError> {
    SeaOrmDirectoryStore::new(db).bulk_insert_plain(write).await
}

/// Number of outbox commands per status, ordered by status name.
///
/// # Errors
/// [`StoreError::Unavailable`] when the query fails.
pub async fn outbox_status_counts(db: &Database) -> Result<Vec<(String, i64)>, StoreError> {
    let rows = db
        .conn
        .query_all_raw(Statement::from_string(
            backend(db),
            "SELECT status, COUNT(*) AS n FROM tenantry_lifecycle_outbox GROUP BY status ORDER BY status",
        ))
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|row| {
            let status: String = row.try_get("", "status").map_err(unavailable)?;
            let n: i64 = row.try_get("", "n").map_err(unavailable)?;
            Ok((status, n))
        })
        .collect()
}

/// Marks every unfinished command `succeeded`, finished at `completed_at` (lease cleared): the
/// history fixture of the retention benchmark. One statement.
///
/// # Errors
/// [`StoreError::Unavailable`] when the statement fails.
pub async fn finish_all_commands(
    db: &Database,
    completed_at: chrono::DateTime<chrono::Utc>,
) -> Result<u64, StoreError> {
    let sql = format!(
        "UPDATE tenantry_lifecycle_outbox SET status = 'succeeded', completed_at = {}, \
         lease_owner = NULL, lease_expires_at = NULL WHERE completed_at IS NULL",
        completed_at.timestamp_millis()
    );
    db.conn
        .execute_raw(Statement::from_string(backend(db), sql))
        .await
        .map(|r| r.rows_affected())
        .map_err(unavailable)
}

/// `VACUUM ANALYZE` on PostgreSQL (what autovacuum does after a bulk change: the index
/// entries of rows updated in bulk are removed), `ANALYZE` on SQLite.
///
/// # Errors
/// [`StoreError::Unavailable`] when the statement fails.
pub async fn vacuum_analyze(db: &Database) -> Result<(), StoreError> {
    let sql = match db.backend {
        Backend::Postgres => "VACUUM ANALYZE",
        Backend::Sqlite => "ANALYZE",
    };
    db.conn
        .execute_unprepared(sql)
        .await
        .map(drop)
        .map_err(unavailable)
}

/// Runs `ANALYZE` (PostgreSQL) or `ANALYZE` (SQLite) so the planner sees the loaded rows.
///
/// # Errors
/// [`StoreError::Unavailable`] when the statement fails.
pub async fn analyze(db: &Database) -> Result<(), StoreError> {
    db.conn
        .execute_unprepared("ANALYZE")
        .await
        .map(drop)
        .map_err(unavailable)
}

fn backend(db: &Database) -> DbBackend {
    match db.backend {
        Backend::Sqlite => DbBackend::Sqlite,
        Backend::Postgres => DbBackend::Postgres,
    }
}
