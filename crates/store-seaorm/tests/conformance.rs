//! Every conformance suite of the enabled mechanisms on SQLite, or on PostgreSQL when
//! `TENANTRY_TEST_PG_URL` is set: each behind the features that build its adapters.

#[allow(unused_imports)]
use std::sync::Arc;

#[allow(unused_imports)]
use tenantry_ports::clock::ManualClock;
#[allow(unused_imports)]
use tenantry_store_seaorm::testing::fresh_database;

tenantry_ports::conformance_suites! {
    #[cfg(feature = "lifecycle")]
    lifecycle_store: |clock: ManualClock| async move {
        let test_db = fresh_database().await;
        (
            tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore::new(&test_db.db)
                .with_clock(Arc::new(clock)),
            test_db,
        )
    },
    #[cfg(all(feature = "lifecycle", feature = "directory"))]
    retention_store: |clock: ManualClock| async move {
        let test_db = fresh_database().await;
        let store = tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore::new(&test_db.db)
            .with_clock(Arc::new(clock));
        let retention = tenantry_store_seaorm::retention::SeaOrmRetentionStore::new(&test_db.db);
        (store, retention, test_db)
    },
    #[cfg(feature = "fences")]
    host_storage: {
        let db = fresh_database().await;
        let storage = tenantry_store_seaorm::host_storage::SeaOrmHostStorage::new(&db.db);
        (db, storage)
    },
    #[cfg(all(feature = "lifecycle", feature = "directory", feature = "fences"))]
    fence_retention: |clock: ManualClock| async move {
        let test_db = fresh_database().await;
        let storage = tenantry_store_seaorm::host_storage::SeaOrmHostStorage::new(&test_db.db)
            .with_clock(Arc::new(clock));
        let retention = tenantry_store_seaorm::retention::SeaOrmRetentionStore::new(&test_db.db);
        (storage, retention, test_db)
    },
    #[cfg(feature = "directory")]
    directory_projection_store: {
        let db = fresh_database().await;
        let store = tenantry_store_seaorm::directory::SeaOrmDirectoryStore::new(&db.db);
        (db, store)
    },
}

/// The directory suite again with every workspace of a snapshot on its own page: the
/// page-by-page apply (`SeaOrmDirectoryStore::with_snapshot_page`) across page boundaries.
#[cfg(feature = "directory")]
mod directory_in_pages_of_one_workspace {
    use tenantry_store_seaorm::testing::fresh_database;

    tenantry_ports::directory_projection_store_conformance!({
        let db = fresh_database().await;
        let store = tenantry_store_seaorm::directory::SeaOrmDirectoryStore::new(&db.db)
            .with_snapshot_page(0);
        (db, store)
    });
}
