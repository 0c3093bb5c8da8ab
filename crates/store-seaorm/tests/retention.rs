//! The retention store on SQLite and PostgreSQL (`TENANTRY_TEST_PG_URL`): the inbox-receipt
//! rule (the shared suites over the lifecycle tables and the cleared fence records run in
//! tests/conformance.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, Statement};
use tenantry_ports::retention::{RetentionKind, RetentionStore};
use tenantry_store_seaorm::retention::SeaOrmRetentionStore;
use tenantry_store_seaorm::testing::fresh_database;

fn at(seconds: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
}

/// A receipt goes once it is older than the window and at or below its instance's projection
/// cursor, whether or not a snapshot covers it (a replica lagging past it re-initializes from a
/// snapshot: `case`-style finding of the retention trial, docs/operations.md "Retention"); one
/// above the projection cursor, one of an instance without a state row and a young one stay.
#[tokio::test]
async fn inbox_receipts_go_at_or_below_the_projection_cursor_once_past_the_window() {
    let test_db = fresh_database().await;
    let conn = &test_db.db.conn;
    let exec = |sql: String| async move {
        conn.execute_raw(Statement::from_string(conn.get_database_backend(), sql))
            .await
            .unwrap();
    };
    exec(format!(
        "INSERT INTO tenantry_directory_projection_state (instance_uuid, cursor, \
         snapshot_coverage_cursor, snapshot_fingerprint, last_applied_at, lease_expires_at) \
         VALUES ('inst-1', 50, 20, 'f', {0}, {0})",
        at(0).timestamp_millis()
    ))
    .await;
    for (instance, event, cursor, received) in [
        ("inst-1", "e-old-covered", 10, 0),
        ("inst-1", "e-old-covered-2", 20, 5),
        ("inst-1", "e-old-uncovered", 21, 0),
        ("inst-1", "e-old-ahead", 51, -90),
        ("inst-1", "e-young-covered", 15, 150),
        ("inst-2", "e-no-state", 1, -90),
    ] {
        exec(format!(
            "INSERT INTO tenantry_directory_projection_inbox (instance_uuid, event_uuid, cursor, \
             event_type, revision, fingerprint, received_at, applied_at) \
             VALUES ('{instance}', '{event}', {cursor}, 'directory.changed', 1, 'f', {ms}, {ms})",
            ms = at(received).timestamp_millis()
        ))
        .await;
    }
    let retention = SeaOrmRetentionStore::new(&test_db.db);
    let kind = RetentionKind::InboxReceipts;
    let window = Duration::from_secs(100);
    assert_eq!(
        retention.oldest(kind).await.unwrap(),
        Some(at(0)),
        "receipts the rule never removes (no state row, above the cursor) do not count"
    );
    assert_eq!(
        retention.count_expired(kind, at(99), window).await.unwrap(),
        0
    );
    assert_eq!(
        retention
            .count_expired(kind, at(105), window)
            .await
            .unwrap(),
        3,
        "covered or not, at or below the projection cursor"
    );
    assert_eq!(
        retention
            .prune_batch(kind, at(105), window, 1)
            .await
            .unwrap()
            .removed(),
        1
    );
    assert_eq!(
        retention
            .prune_batch(kind, at(105), window, 10)
            .await
            .unwrap()
            .removed(),
        2
    );
    assert_eq!(
        retention
            .prune_batch(kind, at(10_000), window, 10)
            .await
            .unwrap()
            .removed(),
        1,
        "the young one, once old"
    );
    let left: Vec<String> = conn
        .query_all_raw(Statement::from_string(
            conn.get_database_backend(),
            "SELECT event_uuid FROM tenantry_directory_projection_inbox ORDER BY event_uuid",
        ))
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.try_get::<String>("", "event_uuid").unwrap())
        .collect();
    assert_eq!(left, ["e-no-state", "e-old-ahead"]);
}

/// PostgreSQL: while another session holds the retention lock (another replica's batch), a
/// batch removes nothing and answers `Busy`; afterwards it prunes. SQLite has no such lock
/// (one process per file): the batch just runs.
#[tokio::test]
async fn a_batch_is_busy_while_another_replica_holds_the_retention_lock() {
    use sea_orm::TransactionTrait;
    use tenantry_ports::retention::PruneBatch;
    use tenantry_store_seaorm::Backend;
    use tenantry_store_seaorm::retention::RETENTION_LOCK_KEY;

    let test_db = fresh_database().await;
    let conn = &test_db.db.conn;
    conn.execute_raw(Statement::from_string(
        conn.get_database_backend(),
        "INSERT INTO tenantry_lifecycle_command_actions (id, command_id, action, actor, reason, \
         previous_status, previous_error_code, attempt_count, created_at) \
         VALUES ('a1', 'c1', 'abandon', 'ops', 'r', 'failed', NULL, 1, 0)",
    ))
    .await
    .unwrap();
    let retention = SeaOrmRetentionStore::new(&test_db.db);
    let kind = RetentionKind::OperatorActions;
    let window = Duration::from_secs(1);
    if test_db.backend() == Backend::Postgres {
        let other = conn.begin().await.unwrap();
        other
            .execute_raw(Statement::from_string(
                sea_orm::DbBackend::Postgres,
                format!("SELECT pg_advisory_xact_lock({RETENTION_LOCK_KEY})"),
            ))
            .await
            .unwrap();
        assert_eq!(
            retention
                .prune_batch(kind, at(0), window, 10)
                .await
                .unwrap(),
            PruneBatch::Busy
        );
        other.commit().await.unwrap();
    }
    assert_eq!(
        retention
            .prune_batch(kind, at(0), window, 10)
            .await
            .unwrap(),
        PruneBatch::Removed(1)
    );
}

/// Case 013: the retention store's `now` is the database's clock (the clock that stamps
/// `completed_at`), read by one statement: it agrees with the database's own reading, to the
/// millisecond resolution of the stamps.
#[tokio::test]
async fn case_013_retention_now_is_the_database_clock() {
    let test_db = fresh_database().await;
    let retention = SeaOrmRetentionStore::new(&test_db.db);
    let db_ms = |sql: &'static str| {
        let conn = test_db.db.conn.clone();
        async move {
            let row = conn
                .query_one_raw(Statement::from_string(conn.get_database_backend(), sql))
                .await
                .unwrap()
                .unwrap();
            row.try_get::<i64>("", "n").unwrap()
        }
    };
    let sql = match test_db.db.backend {
        tenantry_store_seaorm::Backend::Postgres => {
            "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint AS n"
        }
        tenantry_store_seaorm::Backend::Sqlite => {
            "SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER) AS n"
        }
    };
    let before = db_ms(sql).await;
    let now = retention.now().await.unwrap().timestamp_millis();
    let after = db_ms(sql).await;
    assert!(
        before <= now + 1 && now <= after + 1,
        "{before} <= {now} <= {after}"
    );
}
