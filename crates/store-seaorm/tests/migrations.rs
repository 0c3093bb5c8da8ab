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

    // Down one step: only m0004 is reverted.
    Migrator::down(conn, Some(1)).await.unwrap();
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
        1
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
            now: chrono::Utc::now(),
            lease_duration: Duration::from_secs(30),
            include_provision: true,
            limit: 8,
        })
        .await
        .unwrap();
    assert!(claimed.is_empty());
}
