//! Migration m0004 (the outbox claim index) runs up, down and up again on SQLite (default) or
//! PostgreSQL (`TENANTRY_TEST_PG_URL`), leaving the schema each direction promises, and the
//! lifecycle store works on the result.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use tenantry_kernel::LeaseOwner;
use tenantry_migrations::{Migrator, MigratorTrait};
use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

const CLAIM_INDEX: &str = "ix_lifecycle_outbox_claim";
const DUE_INDEX: &str = "ix_lifecycle_outbox_due";

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

/// The storage options of `lifecycle_outbox` on PostgreSQL (`None` elsewhere).
async fn fill_factor(conn: &DatabaseConnection) -> Option<String> {
    if conn.get_database_backend() != DbBackend::Postgres {
        return None;
    }
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT coalesce(array_to_string(reloptions, ','), '') AS options \
             FROM pg_class WHERE relname = 'lifecycle_outbox'",
        ))
        .await
        .unwrap()
        .unwrap();
    Some(row.try_get::<String>("", "options").unwrap())
}

async fn assert_m0004_applied(conn: &DatabaseConnection, when: &str) {
    assert!(index_exists(conn, CLAIM_INDEX).await, "{when}: claim index");
    assert!(
        !index_exists(conn, DUE_INDEX).await,
        "{when}: old due index"
    );
    if let Some(options) = fill_factor(conn).await {
        assert_eq!(options, "fillfactor=70", "{when}");
    }
}

#[tokio::test]
async fn m0004_runs_up_down_and_up_again() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    assert_m0004_applied(conn, "after the first up").await;

    // Down to just before m0004 (the migrations after it are reverted first).
    let steps = Migrator::migrations().len() - 3;
    Migrator::down(conn, Some(u32::try_from(steps).unwrap()))
        .await
        .unwrap();
    assert!(
        !index_exists(conn, CLAIM_INDEX).await,
        "after down: claim index"
    );
    assert!(index_exists(conn, DUE_INDEX).await, "after down: due index");
    if let Some(options) = fill_factor(conn).await {
        assert_eq!(options, "", "after down: fill factor reset");
    }
    assert_eq!(
        Migrator::get_pending_migrations(conn).await.unwrap().len(),
        steps
    );

    Migrator::up(conn, None).await.unwrap();
    assert_m0004_applied(conn, "after the second up").await;
    assert!(
        Migrator::get_pending_migrations(conn)
            .await
            .unwrap()
            .is_empty()
    );

    // The lifecycle store claims on the rebuilt schema.
    let store = SeaOrmLifecycleStore::new(&db.db);
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w-1").unwrap(),
            lease_duration: Duration::from_secs(30),
            include_provision: true,
            limit: 8,
        })
        .await
        .unwrap();
    assert!(claimed.is_empty());
}

/// Whether `lifecycle_outbox` has the column `name`.
async fn column_exists(conn: &DatabaseConnection, name: &str) -> bool {
    let backend = conn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT column_name FROM information_schema.columns \
             WHERE table_name = 'lifecycle_outbox' AND column_name = $1"
        }
        _ => "SELECT name FROM pragma_table_info('lifecycle_outbox') WHERE name = ?",
    };
    conn.query_one_raw(Statement::from_sql_and_values(backend, sql, [name.into()]))
        .await
        .unwrap()
        .is_some()
}

/// m0006 (attempt windows) runs up, down and up with rows present: existing rows keep their
/// data, and a command claimed before the migration gets a conservative window.
#[tokio::test]
async fn m0006_runs_up_down_and_up_again_with_rows_present() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let backend = conn.get_database_backend();
    Migrator::down(conn, Some(1)).await.unwrap();
    assert!(!column_exists(conn, "attempt_window_ends_at").await);
    assert!(!column_exists(conn, "prior_window_ends_at").await);
    for (id, attempts, completed) in [("c-new", 0, "NULL"), ("c-done", 2, "5000")] {
        conn.execute_raw(Statement::from_string(
            backend,
            format!(
                "INSERT INTO tenantry_lifecycle_outbox (id, tenant_id, control_space_id, operation_id, \
                 idempotency_key, request_fingerprint, operation, payload, status, \
                 attempt_count, lease_epoch, next_attempt_at, created_at, completed_at) \
                 VALUES ('{id}', 't', 'cs-{id}', 'op-{id}', 'k-{id}', 'f', 'provision', '{{}}', \
                 'pending', {attempts}, {attempts}, 1000, 1000, {completed})"
            ),
        ))
        .await
        .unwrap();
    }
    Migrator::up(conn, None).await.unwrap();
    let window = |id: &'static str| async move {
        conn.query_one_raw(Statement::from_string(
            backend,
            format!("SELECT attempt_window_ends_at AS w FROM tenantry_lifecycle_outbox WHERE id = '{id}'"),
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
    Migrator::down(conn, Some(1)).await.unwrap();
    assert!(!column_exists(conn, "attempt_window_ends_at").await);
    Migrator::up(conn, None).await.unwrap();
    assert!(column_exists(conn, "attempt_window_ends_at").await);
    assert!(column_exists(conn, "prior_window_ends_at").await);
    assert_eq!(
        window("c-done").await,
        Some(5000),
        "rows survive down and up"
    );
}
