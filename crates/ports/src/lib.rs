//! Port traits between the Tenantry engine and the outside world, with their error types.
//!
//! Each module holds the traits of one mechanism. Port errors carry no driver types
//! (`sea_orm::DbErr`, `reqwest::Error`): adapters map their failures to these enums.
//!
//! Feature `testing` adds in-memory fakes and one conformance-suite macro per port; every
//! adapter (fake, SQLite, PostgreSQL) instantiates the same suite.
//!
//! - [`clock`]: wall-clock time ([`clock::SystemClock`], [`clock::ManualClock`]);
//! - [`lifecycle`]: outbox and control-space storage, command intake storage, the KnowledgeFS
//!   remote, lifecycle metrics;
//! - [`host_storage`]: installation-bound key/value storage behind fences and connector state;
//! - [`directory`]: the directory provider, projection storage and post-commit hooks;
//! - [`error`]: [`error::ErrorSource`], how port errors keep a driver's error as their source;
//! - [`handles`]: every port is implemented for `Arc<T>`, `Box<T>` and `&T` of an implementor.

pub mod clock;
pub mod directory;
pub mod error;
pub mod handles;
pub mod host_storage;
pub mod lifecycle;

pub use clock::{Clock, ManualClock, SystemClock};
pub use directory::{
    DeltaApplier, DirectoryProjectionStore, DirectoryProvider, EntitlementReconciler,
    EventBatchApplier, FreshnessToucher, HookError, NoHooks, ProjectionStateReader,
    ProjectionStoreError, ProviderError, RuntimeExecutionPublisher, SnapshotApplier,
};
pub use error::ErrorSource;
pub use host_storage::{HostStorage, HostStorageBindings, HostStorageError};
pub use lifecycle::{
    ActionRecord, ClaimRequest, CommandAdmin, CommandCount, CommandFilter, CommandQueue,
    ControlSpaceReader, IntakeStore, IntakeStoreError, KnowledgeFs, LifecycleMetrics,
    LifecycleStore, MetricsError, NoMetrics, OperatorAction, OperatorActionError,
    OperatorActionKind, RemoteError, RemoteFailure, RenewalOutcome, SettleError, StoreError,
    Submitted, TaskMetric, TaskStatus,
};
