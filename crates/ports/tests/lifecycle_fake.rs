//! The lifecycle conformance suite against the in-memory fake.
#![cfg(feature = "testing")]

use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;

tenantry_ports::lifecycle_store_conformance!(async { (InMemoryLifecycleStore::new(), ()) });
