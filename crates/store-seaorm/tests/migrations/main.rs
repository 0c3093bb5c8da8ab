//! Migrations on SQLite (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`): m0004 (the outbox
//! claim index), m0006 (attempt windows) and m0014 (room for HOT updates) run up, down and up;
//! the `tenantry_` prefix migrations rename tables both ways keeping rows; a database migrated
//! before the per-mechanism history tables is adopted and renamed; Tenantry's migrators run
//! beside a host's own migrator in either order, or appended to it; a foreign table is refused
//! by name.
// `MigrationTrait` is declared through async-trait with an elided lifetime; the impls match it.
#![allow(elided_lifetimes_in_paths)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use tenantry_kernel::LeaseOwner;
use tenantry_lifecycle::ClaimedCommand;
use tenantry_migrations::*;
use tenantry_migrations::{
    DirectoryMigrator, FencesMigrator, LifecycleMigrator, Mechanisms, MigrateError,
};
use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::{TestDatabase, empty_database, fresh_database};
use tenantry_store_seaorm::{ConnectError, Database};

mod host;
mod interrupted;
mod prefix;
mod steps;

const CLAIM_INDEX: &str = "ix_tenantry_lifecycle_outbox_claim";
/// The claim index in turn order (m0016), which replaced [`CLAIM_INDEX`].
const TURN_INDEX: &str = "ix_tenantry_lifecycle_outbox_turn";
const DUE_INDEX: &str = "ix_tenantry_lifecycle_outbox_due";
const LEGACY_CLAIM_INDEX: &str = "ix_lifecycle_outbox_claim";
const LEGACY_DUE_INDEX: &str = "ix_lifecycle_outbox_due";

async fn index_exists(conn: &DatabaseConnection, name: &str) -> bool {
    let backend = conn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => "SELECT indexname FROM pg_indexes WHERE indexname = $1",
        _ => "SELECT name FROM sqlite_master WHERE type = 'index' AND name = ?",
    };
    conn.query_one_raw(Statement::from_sql_and_values(backend, sql, [name.into()]))
        .await
        .unwrap()
        .is_some()
}

async fn table_exists(conn: &DatabaseConnection, name: &str) -> bool {
    tenantry_migrations::naming::table_exists(conn, name)
        .await
        .unwrap()
}

async fn count(conn: &DatabaseConnection, table: &str) -> i64 {
    conn.query_one_raw(Statement::from_string(
        conn.get_database_backend(),
        format!("SELECT COUNT(*) AS n FROM {table}"),
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get::<i64>("", "n")
    .unwrap()
}

async fn exec(conn: &DatabaseConnection, sql: &str) {
    conn.execute_unprepared(sql).await.unwrap();
}

/// The storage options of `table` on PostgreSQL (`None` elsewhere).
async fn fill_factor(conn: &DatabaseConnection, table: &str) -> Option<String> {
    if conn.get_database_backend() != DbBackend::Postgres {
        return None;
    }
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT coalesce(array_to_string(reloptions, ','), '') AS options \
                 FROM pg_class WHERE relname = '{table}'"
            ),
        ))
        .await
        .unwrap()
        .unwrap();
    Some(row.try_get::<String>("", "options").unwrap())
}

async fn assert_m0004_applied(conn: &DatabaseConnection, when: &str) {
    // m0016 replaced m0004's claim index by the turn-ordered one.
    assert!(index_exists(conn, TURN_INDEX).await, "{when}: claim index");
    assert!(
        !index_exists(conn, CLAIM_INDEX).await,
        "{when}: m0004's claim index"
    );
    assert!(
        !index_exists(conn, DUE_INDEX).await,
        "{when}: old due index"
    );
    if let Some(options) = fill_factor(conn, "tenantry_lifecycle_outbox").await {
        // m0004 set 70; m0014 lowers it to 30.
        assert_eq!(options, "fillfactor=30", "{when}");
    }
}

#[tokio::test]
async fn m0004_runs_up_down_and_up_again() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    assert_m0004_applied(conn, "after the first up").await;

    // Down to just before m0004: the prefix migration (tables renamed back to their old names),
    // m0006, m0005 and m0004 are reverted.
    let steps = LifecycleMigrator::migrations().len() - 1;
    LifecycleMigrator::down(
        conn,
        Some(<u32 as std::convert::TryFrom<usize>>::try_from(steps).unwrap()),
    )
    .await
    .unwrap();
    assert!(table_exists(conn, "lifecycle_outbox").await);
    assert!(
        !index_exists(conn, LEGACY_CLAIM_INDEX).await,
        "after down: claim index"
    );
    assert!(
        index_exists(conn, LEGACY_DUE_INDEX).await,
        "after down: due index"
    );
    if let Some(options) = fill_factor(conn, "lifecycle_outbox").await {
        assert_eq!(options, "", "after down: fill factor reset");
    }
    assert_eq!(
        LifecycleMigrator::get_pending_migrations(conn)
            .await
            .unwrap()
            .len(),
        steps
    );

    LifecycleMigrator::up(conn, None).await.unwrap();
    assert_m0004_applied(conn, "after the second up").await;
    assert!(!index_exists(conn, LEGACY_CLAIM_INDEX).await);
    assert!(
        LifecycleMigrator::get_pending_migrations(conn)
            .await
            .unwrap()
            .is_empty()
    );

    // The lifecycle store claims on the rebuilt schema.
    let claimed = claim_up_to_8(&db).await;
    assert!(claimed.is_empty());
}

/// Claims up to 8 due commands (provisions included) through the lifecycle store, as `w-1`.
async fn claim_up_to_8(db: &TestDatabase) -> Vec<ClaimedCommand> {
    SeaOrmLifecycleStore::new(&db.db)
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w-1").unwrap(),
            lease_duration: Duration::from_secs(30),
            include_provision: true,
            limit: 8,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap()
}

/// Whether table `table` has the column `name`.
async fn column_exists(conn: &DatabaseConnection, table: &str, name: &str) -> bool {
    let backend = conn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => format!(
            "SELECT column_name FROM information_schema.columns \
             WHERE table_name = '{table}' AND column_name = $1"
        ),
        _ => format!("SELECT name FROM pragma_table_info('{table}') WHERE name = ?"),
    };
    conn.query_one_raw(Statement::from_sql_and_values(backend, sql, [name.into()]))
        .await
        .unwrap()
        .is_some()
}

/// Inserts a pending provision command `id` into outbox table `table`.
async fn insert_command(
    conn: &DatabaseConnection,
    table: &str,
    id: &str,
    attempts: i32,
    completed: &str,
) {
    exec(
        conn,
        &format!(
            "INSERT INTO {table} (id, tenant_id, control_space_id, operation_id, \
             idempotency_key, request_fingerprint, operation, payload, status, \
             attempt_count, lease_epoch, next_attempt_at, created_at, completed_at) \
             VALUES ('{id}', 't', 'cs-{id}', 'op-{id}', 'k-{id}', 'f', 'provision', '{{}}', \
             'pending', {attempts}, {attempts}, 1000, 1000, {completed})"
        ),
    )
    .await;
}

/// m0006 (attempt windows) runs up, down and up with rows present: existing rows keep their
/// data, and a command claimed before the migration gets a conservative window.
#[tokio::test]
async fn m0006_runs_up_down_and_up_again_with_rows_present() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    // m0016, m0015, m0014, m0013, m0010, the prefix migration and m0006: the outbox has its old
    // name and no window columns.
    LifecycleMigrator::down(conn, Some(7)).await.unwrap();
    let outbox = "lifecycle_outbox";
    assert!(!column_exists(conn, outbox, "attempt_window_ends_at").await);
    assert!(!column_exists(conn, outbox, "prior_window_ends_at").await);
    for (id, attempts, completed) in [("c-new", 0, "NULL"), ("c-done", 2, "5000")] {
        insert_command(conn, outbox, id, attempts, completed).await;
    }
    LifecycleMigrator::up(conn, None).await.unwrap();
    let outbox = "tenantry_lifecycle_outbox";
    let window = |id: &'static str| async move {
        conn.query_one_raw(Statement::from_string(
            conn.get_database_backend(),
            format!("SELECT attempt_window_ends_at AS w FROM {outbox} WHERE id = '{id}'"),
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<Option<i64>>("", "w")
        .unwrap()
    };
    assert_eq!(window("c-new").await, None, "never claimed: no window");
    assert_eq!(
        window("c-done").await,
        Some(5000),
        "claimed before the migration: a conservative window"
    );
    LifecycleMigrator::down(conn, Some(7)).await.unwrap();
    assert!(!column_exists(conn, "lifecycle_outbox", "attempt_window_ends_at").await);
    LifecycleMigrator::up(conn, None).await.unwrap();
    assert!(column_exists(conn, outbox, "attempt_window_ends_at").await);
    assert!(column_exists(conn, outbox, "prior_window_ends_at").await);
    assert_eq!(
        window("c-done").await,
        Some(5000),
        "rows survive down and up"
    );
}
