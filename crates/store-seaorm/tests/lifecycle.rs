//! The lifecycle conformance suite on SQLite, or on PostgreSQL when `TENANTRY_TEST_PG_URL` is set.

use std::sync::Arc;

use tenantry_ports::clock::ManualClock;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

tenantry_ports::lifecycle_store_conformance!(|clock: ManualClock| async move {
    let test_db = fresh_database().await;
    (
        SeaOrmLifecycleStore::new(&test_db.db).with_clock(Arc::new(clock)),
        test_db,
    )
});
