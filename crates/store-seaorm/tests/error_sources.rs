//! A real database failure keeps the driver's error: every store's port error exposes the
//! `sea_orm::DbErr` through `std::error::Error::source`, and its message still names it.
//! SQLite by default, PostgreSQL with `TENANTRY_TEST_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error;
use std::time::Duration;

use sea_orm::DbErr;
use tenantry_directory::InstanceUuid;
use tenantry_fence::Binding;
use tenantry_kernel::LeaseOwner;
use tenantry_ports::directory::{ProjectionStateReader, ProjectionStoreError};
use tenantry_ports::host_storage::{HostStorage, HostStorageError};
use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue, SettleError, StoreError};
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

/// The `DbErr` behind `error`, asserting that the message carries its text too.
fn db_err(error: &(dyn Error + 'static)) -> DbErr {
    let source = error
        .source()
        .unwrap_or_else(|| panic!("{error} kept no source"));
    let db_err = source
        .downcast_ref::<DbErr>()
        .unwrap_or_else(|| panic!("the source of {error} is not a DbErr: {source:?}"))
        .clone();
    assert!(
        error.to_string().contains(&db_err.to_string()),
        "{error} lost the driver's text {db_err}"
    );
    db_err
}

/// A claim of at most one command.
fn claim_one() -> ClaimRequest {
    ClaimRequest {
        owner: LeaseOwner::parse("w1").unwrap(),
        lease_duration: Duration::from_secs(30),
        include_provision: true,
        limit: 1,
        call_deadline: std::time::Duration::ZERO,
    }
}

#[tokio::test]
async fn lifecycle_store_errors_keep_the_db_err() {
    let db = fresh_database().await;
    let store = SeaOrmLifecycleStore::new(&db.db);
    db.db.conn.close_by_ref().await.unwrap();
    let error = store.claim(&claim_one()).await.unwrap_err();
    assert!(matches!(error, StoreError::Unavailable { .. }), "{error:?}");
    db_err(&error);
    // Wrapped in another port error, the chain still reaches the driver.
    let settle = SettleError::from(error.clone());
    assert_eq!(
        db_err(&settle).to_string(),
        db_err(&error).to_string(),
        "SettleError::Store is transparent"
    );
}

#[tokio::test]
async fn host_storage_errors_keep_the_db_err() {
    let db = fresh_database().await;
    let storage = SeaOrmHostStorage::new(&db.db);
    db.db.conn.close_by_ref().await.unwrap();
    let error = storage
        .get(&Binding::parse("inst").unwrap(), "k")
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            HostStorageError::Storage {
                operation: "get",
                error: tenantry_ports::StoreError::Unavailable { .. }
            }
        ),
        "{error:?}"
    );
    db_err(&error);
}

#[tokio::test]
async fn directory_store_errors_keep_the_db_err() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    db.db.conn.close_by_ref().await.unwrap();
    let error = store
        .projection_state(&InstanceUuid::parse("inst").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ProjectionStoreError::Storage(StoreError::Unavailable { .. })
        ),
        "{error:?}"
    );
    db_err(&error);
}

/// `store` (the `StoreError` inside `port_error`) is a missing schema of `mechanism`, and the
/// port error names the migrator to run and keeps the `DbErr` as its source.
fn assert_schema_missing(store: &StoreError, port_error: &(dyn Error + 'static), mechanism: &str) {
    assert!(
        matches!(store, StoreError::SchemaMissing { mechanism: m, .. } if *m == mechanism),
        "{store:?}"
    );
    let migrator = format!("Mechanisms::{}", mechanism.to_uppercase());
    assert!(port_error.to_string().contains(&migrator), "{port_error}");
    db_err(port_error);
}

/// One mapping for all three stores: on a database that was never migrated, each store reports
/// the same `StoreError::SchemaMissing` kind (not a retryable outage), naming its own mechanism
/// and the migrator to run, with the `DbErr` kept as the source.
#[tokio::test]
async fn every_store_reports_a_missing_schema_the_same_way() {
    let test = tenantry_store_seaorm::testing::empty_database().await;
    let db = &test.db;

    let lifecycle = SeaOrmLifecycleStore::new(db)
        .claim(&claim_one())
        .await
        .unwrap_err();
    assert_schema_missing(&lifecycle, &lifecycle, "lifecycle");

    let host = SeaOrmHostStorage::new(db)
        .get(&Binding::parse("inst").unwrap(), "k")
        .await
        .unwrap_err();
    let HostStorageError::Storage {
        operation: "get",
        error: store,
    } = &host
    else {
        panic!("{host:?}");
    };
    assert_schema_missing(store, &host, "fences");

    let directory = SeaOrmDirectoryStore::new(db)
        .projection_state(&InstanceUuid::parse("inst").unwrap())
        .await
        .unwrap_err();
    let ProjectionStoreError::Storage(store) = &directory else {
        panic!("{directory:?}");
    };
    assert_schema_missing(store, &directory, "directory");
}
