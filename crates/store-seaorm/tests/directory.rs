//! The directory projection-store conformance suite on SQLite (default) or PostgreSQL
//! (`TENANTRY_TEST_PG_URL`), plus adapter-specific checks: raw table dumps are byte-for-byte
//! unchanged by a rejected input, and the migration runs down and up again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sea_orm::{ConnectionTrait, Statement};
use tenantry_directory::testing::*;
use tenantry_directory::{ApplyContext, DirectoryError, ProjectionLimits};
use tenantry_ports::directory::{ProjectionStoreError, SnapshotApplier};
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;
use tenantry_store_seaorm::testing::fresh_database;

tenantry_ports::directory_projection_store_conformance!({
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    (db, store)
});

const TABLES: [&str; 6] = [
    "accounts",
    "workspaces",
    "workspace_memberships",
    "workspace_execution_state",
    "directory_projection_state",
    "directory_projection_inbox",
];

/// Every row of every directory table as text, in a stable order.
async fn raw_dump(conn: &sea_orm::DatabaseConnection) -> Vec<String> {
    let mut out = Vec::new();
    for table in TABLES {
        let rows = conn
            .query_all_raw(Statement::from_string(
                conn.get_database_backend(),
                format!("SELECT * FROM {table}"),
            ))
            .await
            .unwrap();
        let mut lines: Vec<String> = rows
            .iter()
            .map(|row| {
                let columns = row.column_names();
                let values: Vec<String> = columns
                    .iter()
                    .map(|c| {
                        row.try_get::<Option<String>>("", c)
                            .map(|v| format!("{v:?}"))
                            .or_else(|_| {
                                row.try_get::<Option<i64>>("", c).map(|v| format!("{v:?}"))
                            })
                            .or_else(|_| {
                                row.try_get::<Option<bool>>("", c).map(|v| format!("{v:?}"))
                            })
                            .unwrap()
                    })
                    .collect();
                format!("{table}: {}", values.join(" | "))
            })
            .collect();
        lines.sort();
        out.extend(lines);
    }
    out
}

fn ctx(secs: i64) -> ApplyContext {
    ApplyContext {
        instance: instance(),
        limits: ProjectionLimits::default(),
        now: at(secs),
        max_staleness: Duration::from_secs(60),
    }
}

#[tokio::test]
async fn rejected_snapshot_leaves_raw_tables_byte_for_byte_unchanged() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    let good = snapshot(10, vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])]);
    store.apply_snapshot(&ctx(0), &good, &[]).await.unwrap();
    let before = raw_dump(&db.db.conn).await;
    assert!(before.len() > 5, "{before:?}");
    // Many rows are planned (a new workspace and accounts) before the last one is refused.
    let mut bad = snapshot(
        11,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("c", 1), ("d", 1)]),
            workspace("ws-3", 1, &[("e", 1)]),
        ],
    );
    bad.workspaces[2].created_by_account_uuid = acc_id("ghost");
    let err = store.apply_snapshot(&ctx(5), &bad, &[]).await.unwrap_err();
    assert_eq!(
        err,
        ProjectionStoreError::Rejected(DirectoryError::CreatorNotProjected {
            workspace: ws_id("ws-3"),
            creator: acc_id("ghost")
        })
    );
    assert_eq!(raw_dump(&db.db.conn).await, before);
}

#[tokio::test]
async fn rejected_first_snapshot_leaves_no_state_row() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    let mut bad = snapshot(10, vec![workspace("ws-1", 1, &[("a", 1)])]);
    bad.workspaces[0].created_by_account_uuid = acc_id("ghost");
    store.apply_snapshot(&ctx(0), &bad, &[]).await.unwrap_err();
    assert!(raw_dump(&db.db.conn).await.is_empty());
}

#[tokio::test]
async fn migration_runs_down_and_up_again() {
    use tenantry_migrations::{Migrator, MigratorTrait};
    let db = fresh_database().await;
    Migrator::down(&db.db.conn, None).await.unwrap();
    Migrator::up(&db.db.conn, None).await.unwrap();
    let store = SeaOrmDirectoryStore::new(&db.db);
    store
        .apply_snapshot(
            &ctx(0),
            &snapshot(1, vec![workspace("ws-1", 1, &[("a", 1)])]),
            &[],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn accounts_are_looked_up_in_chunks_never_one_query_per_account() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let db = fresh_database().await;
    let account_selects = Arc::new(AtomicUsize::new(0));
    let mut conn = db.db.conn.clone();
    let counter = Arc::clone(&account_selects);
    conn.set_metric_callback(move |info| {
        let sql = info.statement.sql.to_ascii_lowercase();
        if sql.starts_with("select") && sql.contains("from \"accounts\"") {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let store = SeaOrmDirectoryStore::new(&tenantry_store_seaorm::Database {
        conn,
        backend: db.backend(),
    });
    // 1,234 distinct accounts in 124 workspaces: 3 chunks of at most 500 keys.
    let names: Vec<String> = (0..1_234).map(|i| format!("acc{i:05}")).collect();
    let workspaces = names
        .chunks(10)
        .enumerate()
        .map(|(i, chunk)| {
            let pairs: Vec<(&str, i64)> = chunk.iter().map(|n| (n.as_str(), 1)).collect();
            workspace(&format!("ws-{i:04}"), 1, &pairs)
        })
        .collect();
    let big = snapshot(10, workspaces);
    store.apply_snapshot(&ctx(0), &big, &[]).await.unwrap();
    assert_eq!(account_selects.load(Ordering::SeqCst), 3);
    store.apply_snapshot(&ctx(1), &big, &[]).await.unwrap();
    assert_eq!(account_selects.load(Ordering::SeqCst), 6);
}
