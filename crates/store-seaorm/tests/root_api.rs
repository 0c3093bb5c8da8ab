//! The store adapters are named from the crate root and all built the same way:
//! `new(&Database)`.
#![allow(clippy::unwrap_used)]

use tenantry_fence::Binding;
use tenantry_ports::{HostStorage, ProjectionStateReader, StoreError};
use tenantry_store_seaorm::testing::fresh_database;
use tenantry_store_seaorm::{
    Backend, ConnectError, Database, SeaOrmDirectoryStore, SeaOrmHostStorage, SeaOrmLifecycleStore,
    SeaOrmRetentionStore,
};

#[tokio::test]
async fn every_store_is_built_from_a_database_reference() {
    let test_db = fresh_database().await;
    let db: &Database = &test_db.db;
    let lifecycle = SeaOrmLifecycleStore::new(db);
    let host = SeaOrmHostStorage::new(db);
    let directory = SeaOrmDirectoryStore::new(db);
    let retention = SeaOrmRetentionStore::new(db);
    assert_eq!(
        tenantry_ports::RetentionStore::oldest(
            &retention,
            tenantry_ports::RetentionKind::OperatorActions
        )
        .await
        .unwrap(),
        None
    );
    assert_eq!(lifecycle.contention_retries(), 0);
    let binding = Binding::parse("inst").unwrap();
    host.set(&binding, "k", &serde_json::json!(1))
        .await
        .unwrap();
    assert_eq!(
        host.get(&binding, "k").await.unwrap(),
        Some(serde_json::json!(1))
    );
    let state = directory
        .projection_state(&tenantry_directory::InstanceUuid::parse("inst").unwrap())
        .await
        .unwrap();
    assert!(state.is_none());
    assert!(matches!(db.backend, Backend::Sqlite | Backend::Postgres));
    let _: Option<ConnectError> = None;
    let _: Option<StoreError> = None;
}
