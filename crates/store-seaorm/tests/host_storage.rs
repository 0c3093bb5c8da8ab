//! Host storage on SQLite (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`): the adapter's own
//! checks (the conformance suite runs in tests/conformance.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{ConnectionTrait, Statement};
use tenantry_fence::Binding;
use tenantry_ports::host_storage::{HostStorage, HostStorageError};
use tenantry_store_seaorm::Backend;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
use tenantry_store_seaorm::testing::{TestDatabase, fresh_database};

/// Writes `text` as the value of key `ke.fence.v1.x` of binding `inst` straight into the
/// table, as another program or a hand edit would.
async fn insert_raw(db: &TestDatabase, text: &str) {
    let sql = match db.backend() {
        Backend::Sqlite => {
            "INSERT INTO tenantry_host_storage (binding, key, value) VALUES (?, ?, ?)"
        }
        Backend::Postgres => {
            "INSERT INTO tenantry_host_storage (binding, key, value) VALUES ($1, $2, $3)"
        }
    };
    db.db
        .conn
        .execute_raw(Statement::from_sql_and_values(
            db.db.conn.get_database_backend(),
            sql,
            ["inst".into(), "ke.fence.v1.x".into(), text.into()],
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn non_json_text_in_the_table_reads_as_corrupt_value() {
    let db = fresh_database().await;
    let storage = SeaOrmHostStorage::new(&db.db);
    insert_raw(&db, "{torn").await;
    let b = Binding::parse("inst").unwrap();
    assert!(matches!(
        storage.get(&b, "ke.fence.v1.x").await,
        Err(HostStorageError::CorruptValue { .. })
    ));
    assert_eq!(storage.keys(&b).await.unwrap(), vec!["ke.fence.v1.x"]);
}

/// A record written by another program or by hand keeps its own key order; a compare-and-set
/// whose expected value equals it as JSON still swaps (the operator's fence clear compares
/// against the value it read), and one whose value differs still does not.
#[tokio::test]
async fn compare_and_set_matches_a_record_spelled_in_another_key_order() {
    let db = fresh_database().await;
    let storage = SeaOrmHostStorage::new(&db.db);
    let written = r#"{"scope": "kb-1", "reason": "upload", "kind": "fence"}"#;
    insert_raw(&db, written).await;
    let b = Binding::parse("inst").unwrap();
    let read = storage.get(&b, "ke.fence.v1.x").await.unwrap().unwrap();
    assert_ne!(read.to_string(), written, "the stored spelling differs");
    let other = serde_json::json!({"scope": "kb-1", "reason": "other", "kind": "fence"});
    assert!(
        !storage
            .compare_and_set(&b, "ke.fence.v1.x", Some(&other), &serde_json::Value::Null)
            .await
            .unwrap()
    );
    assert!(
        storage
            .compare_and_set(&b, "ke.fence.v1.x", Some(&read), &serde_json::Value::Null)
            .await
            .unwrap()
    );
    assert_eq!(
        storage.get(&b, "ke.fence.v1.x").await.unwrap(),
        Some(serde_json::Value::Null)
    );
}

#[tokio::test]
async fn closed_pool_is_unavailable() {
    let db = fresh_database().await;
    let storage = SeaOrmHostStorage::new(&db.db);
    db.db.conn.close_by_ref().await.unwrap();
    let b = Binding::parse("inst").unwrap();
    assert!(matches!(
        storage.keys(&b).await,
        Err(HostStorageError::Storage {
            operation: "keys",
            error: tenantry_ports::StoreError::Unavailable { .. }
        })
    ));
    assert!(matches!(
        storage.set(&b, "k", &serde_json::json!(1)).await,
        Err(HostStorageError::Storage {
            operation: "set",
            error: tenantry_ports::StoreError::Unavailable { .. }
        })
    ));
}

/// `now_ms` is the clock that stamps `updated_at`: the database's (a write between two
/// readings is stamped between them), or the override's reading.
#[tokio::test]
async fn now_ms_is_the_clock_that_stamps_writes() {
    let db = fresh_database().await;
    let storage = SeaOrmHostStorage::new(&db.db);
    let b = Binding::parse("inst").unwrap();
    let before = storage.now_ms().await.unwrap();
    storage
        .set(&b, "ke.fence.v1.x", &serde_json::json!(1))
        .await
        .unwrap();
    let after = storage.now_ms().await.unwrap();
    let stamped = db
        .db
        .conn
        .query_one_raw(Statement::from_string(
            db.db.conn.get_database_backend(),
            "SELECT updated_at AS n FROM tenantry_host_storage".to_owned(),
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<i64>("", "n")
        .unwrap();
    assert!(
        before <= stamped && stamped <= after,
        "{before} <= {stamped} <= {after}"
    );

    let at = chrono::DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
    let manual = std::sync::Arc::new(tenantry_ports::clock::ManualClock::new(at));
    let overridden = SeaOrmHostStorage::new(&db.db).with_clock(manual);
    assert_eq!(overridden.now_ms().await.unwrap(), 1_700_000_000_123);
}
