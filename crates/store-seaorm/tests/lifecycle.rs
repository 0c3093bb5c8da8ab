//! The lifecycle conformance suite on SQLite, or on PostgreSQL when `TENANTRY_TEST_PG_URL` is set.

use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

tenantry_ports::lifecycle_store_conformance!(async {
    let test_db = fresh_database().await;
    (SeaOrmLifecycleStore::new(&test_db.db), test_db)
});
