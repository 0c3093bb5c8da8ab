//! Async use cases of Tenantry over the port traits.
//!
//! The engine owns loops, concurrency, backoff and cancellation safety; it is generic over
//! the ports and knows no database or HTTP library.
//!
//! - [`lifecycle`]: the saga dispatcher (`dispatch_one`), the worker loop and command intake;
//! - [`scoped_writes`]: the `ScopedWrites` runtime (per-scope serialization and durable fences);
//! - [`directory`]: the `DirectoryProjector`;
//! - [`retention`]: `prune_once`, `dry_run` and the periodic `Pruner` over the retention port.
//!
//! The main types are re-exported here, so `tenantry_engine::Dispatcher`,
//! `tenantry_engine::WorkerReport` or `tenantry_engine::ScopedWrites` name them without the
//! module path. Every type a public item exposes is nameable (lint `unnameable_types`).
//!
//! # Features
//! `lifecycle`, `directory` and `fences` (all default) each enable one mechanism's module and
//! its domain crate. A platform that only needs fenced writes depends on
//! `tenantry-engine = { version = "0.1", default-features = false, features = ["fences"] }` and
//! compiles neither `tenantry-lifecycle` nor `tenantry-directory`.
#![cfg_attr(docsrs, feature(doc_cfg))]
// A build with only some mechanisms documents links to modules it does not compile; the
// default and all-features builds check every link (`cargo xtask ci`, step "doc").
#![cfg_attr(
    not(all(feature = "lifecycle", feature = "directory", feature = "fences")),
    allow(rustdoc::broken_intra_doc_links)
)]

#[cfg(feature = "directory")]
pub mod directory;
#[cfg(feature = "lifecycle")]
pub mod lifecycle;
#[cfg(feature = "directory")]
mod memory;
pub mod retention;
#[cfg(feature = "fences")]
pub mod scoped_writes;
#[cfg(any(feature = "lifecycle", feature = "fences"))]
mod swept;
pub use tenantry_ports::trace_context;

#[cfg(feature = "directory")]
pub use directory::{
    DirectoryProjector, ProjectorError, Refusal, RefusalReport, ResourceSnapshot, SyncFailure,
};
#[cfg(feature = "lifecycle")]
pub use lifecycle::{
    BulkReport, CommandIntake, DispatchError, DispatchReport, Dispatcher, DispatcherConfig,
    GroupCommitConfig, GroupCommitStore, IntakeFailure, IntakeReceipt, IntakeRequest,
    OperatorActions, OperatorRequestError, Worker, WorkerConfig, WorkerReport, unique_lease_owner,
};
pub use retention::{KindReport, PruneReport, Pruner, RetentionError, dry_run, prune_once};
#[cfg(feature = "fences")]
pub use scoped_writes::admin::{
    BindingFence, ClearOutcome, ClearReceipt, ClearTarget, FenceAdminError, FenceView,
};
#[cfg(feature = "fences")]
pub use scoped_writes::connector::{ConnectorError, ConnectorState};
#[cfg(feature = "fences")]
pub use scoped_writes::{
    FenceConfig, FenceEntry, FenceMode, ScopeContext, ScopedWriteError, ScopedWrites,
};
