//! The directory projection-store conformance suite against the in-memory fake.

use tenantry_ports::directory::testing::InMemoryProjectionStore;

tenantry_ports::directory_projection_store_conformance!(((), InMemoryProjectionStore::new()));
