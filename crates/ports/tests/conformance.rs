//! Every conformance suite of the enabled mechanisms against the in-memory fakes, through the
//! umbrella macro a backend uses.
#![cfg(feature = "testing")]

// Full paths: a suite whose mechanism is off leaves nothing to import for.
tenantry_ports::conformance_suites! {
    #[cfg(feature = "lifecycle")]
    lifecycle_store: |clock: tenantry_ports::clock::ManualClock| async move {
        let store = tenantry_ports::lifecycle::fake::InMemoryLifecycleStore::with_clock(
            std::sync::Arc::new(clock),
        );
        (store, ())
    },
    #[cfg(feature = "lifecycle")]
    retention_store: |clock: tenantry_ports::clock::ManualClock| async move {
        let store = tenantry_ports::lifecycle::fake::InMemoryLifecycleStore::with_clock(
            std::sync::Arc::new(clock),
        );
        (store.clone(), store, ())
    },
    #[cfg(feature = "fences")]
    host_storage: ((), tenantry_ports::host_storage::fake::InMemoryHostStorage::new()),
    // One fake is both the host storage and the retention store (shared through the `Arc`).
    #[cfg(feature = "fences")]
    fence_retention: |clock: tenantry_ports::clock::ManualClock| async move {
        let storage = std::sync::Arc::new(
            tenantry_ports::host_storage::fake::InMemoryHostStorage::new()
                .with_clock(std::sync::Arc::new(clock)),
        );
        (storage.clone(), storage, ())
    },
    #[cfg(feature = "directory")]
    directory_projection_store: (
        (),
        tenantry_ports::directory::fake::InMemoryProjectionStore::new(),
    ),
}
