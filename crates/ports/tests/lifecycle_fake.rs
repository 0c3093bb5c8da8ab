//! The lifecycle conformance suite against the in-memory fake.
#![cfg(feature = "testing")]

use std::sync::Arc;

use tenantry_ports::clock::ManualClock;
use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;

tenantry_ports::lifecycle_store_conformance!(|clock: ManualClock| async move {
    (InMemoryLifecycleStore::with_clock(Arc::new(clock)), ())
});

mod retention {
    use std::sync::Arc;

    use tenantry_ports::clock::ManualClock;
    use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;

    tenantry_ports::retention_store_conformance!(|clock: ManualClock| async move {
        let store = InMemoryLifecycleStore::with_clock(Arc::new(clock));
        (store.clone(), store, ())
    });
}
