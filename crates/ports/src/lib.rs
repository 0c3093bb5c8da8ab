//! Port traits between the Tenantry engine and the outside world, with their error types.
//!
//! Each module holds the traits of one mechanism. Port errors carry no driver types
//! (`sea_orm::DbErr`, `reqwest::Error`): adapters map their failures to these enums.
//!
//! Every port module has the same layout: `<port>/mod.rs` (the traits), `<port>/fake` (its
//! in-memory fake) and `<port>/conformance` (its suite, one macro to run it), the last two
//! under feature `testing`; every adapter (fake, SQLite, PostgreSQL) instantiates the same
//! suites, all at once with [`conformance_suites!`](crate::conformance_suites) ([`conformance`]).
//!
//! - [`clock`]: wall time, monotonic time and timers ([`clock::SystemClock`],
//!   [`clock::ManualClock`]);
//! - [`lifecycle`]: outbox and control-space storage, command intake storage, the KnowledgeFS
//!   remote, lifecycle metrics;
//! - [`host_storage`]: installation-bound key/value storage behind fences and connector state;
//! - [`directory`]: the directory provider, projection storage and post-commit hooks;
//! - [`error`]: [`StoreError`], the one storage failure shape of every storage port (lifecycle,
//!   host storage, directory projection), and [`error::ErrorSource`], how port errors keep a
//!   driver's error as their source;
//! - [`wake`]: the wake-up signal of idle workers ([`wake::Wakeups`]), sent by intake and by
//!   database listeners;
//! - [`retention`]: bounded removal of expired history, dry-run counts, the oldest record per
//!   kind (its fakes and suites are those of the lifecycle and host-storage modules, whose
//!   history it removes);
//! - [`trace_context`]: the W3C `traceparent` a command carries through the outbox, read from
//!   and set on `tracing` spans (one copy for the engine, the store and the HTTP clients);
//! - [`forward`]: decorators that write only the methods they change ([`forward::Decorator`]
//!   and one forwarding trait per port); every port is implemented for `Arc<T>`, `Box<T>` and
//!   `&T` of an implementor.
//!
//! # Features
//! - `lifecycle`, `directory`, `fences` (all default): one per mechanism; each gates its module
//!   and its domain crate, so a fences-only build (`default-features = false, features =
//!   ["fences"]`) compiles neither `tenantry-lifecycle` nor `tenantry-directory`;
//! - `testing`: the in-memory fakes and conformance suites of the enabled mechanisms;
//! - `mocks` (off by default): mockall mocks of every port trait of the enabled mechanisms
//!   ([`mocks`]), for tests where the interaction is what is checked ("the remote is never
//!   called while …"); keep the fakes for behaviour.
#![cfg_attr(docsrs, feature(doc_cfg))]
// A build with only some mechanisms documents links to modules it does not compile; the
// default and all-features builds check every link (`cargo xtask ci`, step "doc").
#![cfg_attr(
    not(all(feature = "lifecycle", feature = "directory", feature = "fences")),
    allow(rustdoc::broken_intra_doc_links)
)]

pub mod clock;
#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "directory")]
pub mod directory;
pub mod error;
pub mod forward;
#[cfg(feature = "fences")]
pub mod host_storage;
#[cfg(feature = "lifecycle")]
pub mod lifecycle;
#[cfg(feature = "mocks")]
pub mod mocks;
pub mod retention;
pub mod trace_context;
pub mod wake;

pub use clock::{Clock, ManualClock, SystemClock};
#[cfg(feature = "directory")]
pub use directory::{
    DeltaApplier, DirectoryProjectionStore, DirectoryProvider, EntitlementReconciler,
    EventBatchApplier, FreshnessToucher, HookError, NoHooks, ProjectionStateReader,
    ProjectionStoreError, ProviderError, RuntimeExecutionPublisher, SnapshotApplier,
};
pub use error::{ErrorSource, StoreError};
#[cfg(feature = "fences")]
pub use host_storage::metrics::{FenceMetrics, FenceRefusal, FenceWriteOutcome, NoFenceMetrics};
#[cfg(feature = "fences")]
pub use host_storage::{HostStorage, HostStorageBindings, HostStorageError};
#[cfg(feature = "lifecycle")]
pub use lifecycle::{
    ActionRecord, ClaimRequest, CommandAdmin, CommandCount, CommandFilter, CommandQueue,
    ControlSpaceReader, ErrorCodeCount, IntakeStore, IntakeStoreError, KnowledgeFs,
    LifecycleMetrics, LifecycleStore, MetricsError, NoMetrics, OperatorAction, OperatorActionError,
    OperatorActionKind, RemoteError, RenewalOutcome, SettleError, SettledCommand, Submitted,
    TaskMetric, TaskStatus,
};
pub use retention::{PruneBatch, RetentionKind, RetentionPolicy, RetentionStore};
