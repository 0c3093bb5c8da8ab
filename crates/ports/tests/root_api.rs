//! The ports' traits, errors and request types are named from the crate root.
#![allow(clippy::unwrap_used)]

use std::any::type_name;

use tenantry_ports::{
    ActionRecord, ClaimRequest, Clock, CommandAdmin, CommandCount, CommandFilter, CommandQueue,
    ControlSpaceReader, DeltaApplier, DirectoryProjectionStore, DirectoryProvider,
    EntitlementReconciler, ErrorSource, EventBatchApplier, FreshnessToucher, HookError,
    HostStorage, HostStorageBindings, HostStorageError, IntakeStore, IntakeStoreError, KnowledgeFs,
    LifecycleMetrics, LifecycleStore, ManualClock, MetricsError, NoHooks, NoMetrics,
    OperatorAction, OperatorActionError, OperatorActionKind, ProjectionStateReader,
    ProjectionStoreError, ProviderError, PruneBatch, RemoteError, RenewalOutcome, RetentionKind,
    RetentionPolicy, RetentionStore, RuntimeExecutionPublisher, SettleError, SnapshotApplier,
    StoreError, Submitted, SystemClock, TaskMetric, TaskStatus,
};

#[test]
fn every_root_reexport_names_the_ports_item() {
    let names = [
        type_name::<ActionRecord>(),
        type_name::<PruneBatch>(),
        type_name::<RetentionKind>(),
        type_name::<RetentionPolicy>(),
        type_name::<dyn RetentionStore>(),
        type_name::<ClaimRequest>(),
        type_name::<dyn Clock>(),
        type_name::<dyn CommandAdmin>(),
        type_name::<CommandCount>(),
        type_name::<CommandFilter>(),
        type_name::<dyn CommandQueue>(),
        type_name::<dyn ControlSpaceReader>(),
        type_name::<dyn DeltaApplier>(),
        type_name::<dyn DirectoryProjectionStore>(),
        type_name::<dyn DirectoryProvider>(),
        type_name::<dyn EntitlementReconciler>(),
        type_name::<ErrorSource>(),
        type_name::<dyn EventBatchApplier>(),
        type_name::<dyn FreshnessToucher>(),
        type_name::<HookError>(),
        type_name::<dyn HostStorage>(),
        type_name::<dyn HostStorageBindings>(),
        type_name::<HostStorageError>(),
        type_name::<dyn IntakeStore>(),
        type_name::<IntakeStoreError>(),
        type_name::<dyn KnowledgeFs>(),
        type_name::<dyn LifecycleMetrics>(),
        type_name::<dyn LifecycleStore>(),
        type_name::<ManualClock>(),
        type_name::<MetricsError>(),
        type_name::<NoHooks>(),
        type_name::<NoMetrics>(),
        type_name::<OperatorAction>(),
        type_name::<OperatorActionError>(),
        type_name::<OperatorActionKind>(),
        type_name::<dyn ProjectionStateReader>(),
        type_name::<ProjectionStoreError>(),
        type_name::<ProviderError>(),
        type_name::<RemoteError>(),
        type_name::<RenewalOutcome>(),
        type_name::<dyn RuntimeExecutionPublisher>(),
        type_name::<SettleError>(),
        type_name::<dyn SnapshotApplier>(),
        type_name::<StoreError>(),
        type_name::<Submitted>(),
        type_name::<SystemClock>(),
        type_name::<TaskMetric>(),
        type_name::<TaskStatus>(),
    ];
    for name in names {
        assert!(
            name.trim_start_matches("dyn ")
                .starts_with("tenantry_ports::"),
            "{name}"
        );
    }
}

#[test]
fn port_errors_stay_clone_and_comparable_with_a_source() {
    use std::error::Error as _;

    let io = std::io::Error::other("socket closed");
    let error = StoreError::unavailable("socket closed").with_source(io);
    let copy = error.clone();
    assert_eq!(copy, error);
    assert_eq!(error.to_string(), "database unavailable: socket closed");
    assert_eq!(error.message(), "socket closed");
    assert!(copy.source().unwrap().is::<std::io::Error>());
    assert_ne!(error, StoreError::unavailable("socket closed"));
    assert_eq!(
        StoreError::contention("deadlock").to_string(),
        "database contention (deadlock or serialization failure): deadlock"
    );
    assert_eq!(
        StoreError::corrupt("bad row").to_string(),
        "stored data is corrupt: bad row"
    );

    let remote = RemoteError::not_dispatched("refused").with_source(std::io::Error::other("x"));
    assert!(remote.source().unwrap().is::<std::io::Error>());
    assert_eq!(remote.to_string(), "REMOTE_UNAVAILABLE: refused");

    let host =
        HostStorageError::unavailable("get", "down").with_source(std::io::Error::other("down"));
    assert!(host.source().unwrap().is::<std::io::Error>());
    assert_eq!(
        host.to_string(),
        "host storage unavailable during get: down; retry after the storage recovers"
    );
    let provider = ProviderError::unavailable("down").with_source(std::io::Error::other("down"));
    assert!(provider.source().unwrap().is::<std::io::Error>());
    let projection =
        ProjectionStoreError::storage("down").with_source(std::io::Error::other("down"));
    assert!(projection.source().unwrap().is::<std::io::Error>());
    let hook = HookError::new("crm down").with_source(std::io::Error::other("x"));
    assert_eq!(
        hook.to_string(),
        "directory post-commit hook failed: crm down"
    );
    assert!(hook.source().unwrap().is::<std::io::Error>());
    let metrics = MetricsError::new("exporter down").with_source(std::io::Error::other("x"));
    assert_eq!(metrics.to_string(), "metrics sink failed: exporter down");
    assert!(metrics.source().unwrap().is::<std::io::Error>());
}

/// The lifecycle, host-storage and directory ports share one storage error shape: the same
/// `StoreError` kinds and constructors, wrapped by the host-storage and directory errors with
/// the driver's error still the first `source()`.
#[test]
fn the_storage_ports_share_one_store_error() {
    use std::error::Error as _;

    // The lifecycle port's `StoreError` is the shared one.
    assert_eq!(
        type_name::<tenantry_ports::lifecycle::StoreError>(),
        type_name::<tenantry_ports::error::StoreError>()
    );

    let missing = StoreError::schema_missing("fences", "no such table: tenantry_host_storage");
    assert_eq!(
        missing.to_string(),
        "the fences schema is not migrated on this database (no such table: \
         tenantry_host_storage); migrate it with Mechanisms::FENCES (Database::migrate) or \
         `tenantry migrate`"
    );
    assert!(!missing.is_transient());
    assert!(StoreError::contention("deadlock").is_transient());

    let host = HostStorageError::storage("set", StoreError::contention("deadlock"))
        .with_source(std::io::Error::other("deadlock"));
    assert!(matches!(
        &host,
        HostStorageError::Storage {
            operation: "set",
            error: StoreError::Contention { .. }
        }
    ));
    assert_eq!(
        host.to_string(),
        "host storage failed during set: database contention (deadlock or serialization \
         failure): deadlock"
    );
    assert!(host.source().unwrap().is::<std::io::Error>());

    let projection = ProjectionStoreError::from(
        StoreError::unavailable("connection reset").with_context("apply_snapshot"),
    );
    assert_eq!(
        projection.to_string(),
        "directory projection storage failed: apply_snapshot: connection reset; the projector \
         retries"
    );
    let corrupt = ProjectionStoreError::Storage(StoreError::corrupt("bad cursor"));
    assert_eq!(
        corrupt.to_string(),
        "directory projection storage failed: stored data is corrupt: bad cursor"
    );
}
