//! Support for `cargo xtask bench` (feature `bench`): databases per run, bulk loading of
//! fixtures, and the plain-SQL baselines the benchmarks compare against.
//!
//! Nothing here is used by the product. Bulk loading bypasses the intake rules (no idempotency
//! check, no compare-and-set): it writes the rows the caller planned with the pure intake
//! functions, many per statement, so that seeding 200,000 commands takes seconds rather than
//! minutes. Row conversion is the adapter's own, so the loaded rows are exactly what intake
//! would have written.

use sea_orm::{ConnectionTrait, DbBackend, Statement, TransactionTrait};
use tenantry_directory::ProjectionWrite;
use tenantry_lifecycle::ControlSpace;
use tenantry_lifecycle::intake::NewCommand;
use tenantry_ports::directory::ProjectionStoreError;
use tenantry_ports::lifecycle::StoreError;

use crate::connect::{Backend, Database};
use crate::directory::SeaOrmDirectoryStore;
use crate::lifecycle::unavailable;

/// Rows per multi-row `INSERT` statement when bulk loading.
pub const BULK_ROWS_PER_STATEMENT: usize = 1_000;

/// Creates (dropping it first if it exists) database `name` on the PostgreSQL server of
/// `server_url` and returns the URL of the new database.
///
/// # Errors
/// [`StoreError::Unavailable`] when the server cannot be reached or refuses the statements.
pub async fn create_postgres_database(server_url: &str, name: &str) -> Result<String, StoreError> {
    let admin = sea_orm::Database::connect(server_url)
        .await
        .map_err(unavailable)?;
    admin
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .map_err(unavailable)?;
    admin
        .execute_unprepared(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(unavailable)?;
    admin.close().await.map_err(unavailable)?;
    Ok(with_database(server_url, name))
}

/// Drops database `name` on the PostgreSQL server of `server_url` (closing its sessions).
///
/// # Errors
/// [`StoreError::Unavailable`] when the server cannot be reached or refuses the statement.
pub async fn drop_postgres_database(server_url: &str, name: &str) -> Result<(), StoreError> {
    let admin = sea_orm::Database::connect(server_url)
        .await
        .map_err(unavailable)?;
    admin
        .execute_unprepared(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .map_err(unavailable)?;
    admin.close().await.map_err(unavailable)
}

/// `server_url` with its database (the path) replaced by `database`, query string kept.
pub fn with_database(server_url: &str, database: &str) -> String {
    let (base, query) = match server_url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (server_url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..authority_end], database);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

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
    let txn = db.conn.begin().await.map_err(unavailable)?;
    crate::lifecycle::bulk::insert(&txn, spaces, commands).await?;
    txn.commit().await.map_err(unavailable)
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
    crate::directory::bulk::insert_plain(&SeaOrmDirectoryStore::new(db), write).await
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

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn with_database_keeps_authority_and_query() {
        assert_eq!(
            with_database("postgres://u@h:5/postgres", "x"),
            "postgres://u@h:5/x"
        );
        assert_eq!(with_database("postgres://u@h:5", "x"), "postgres://u@h:5/x");
        assert_eq!(
            with_database("postgres://u@h:5/db?sslmode=disable", "x"),
            "postgres://u@h:5/x?sslmode=disable"
        );
    }
}
