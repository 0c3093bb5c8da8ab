//! Async use cases of Tenantry over the port traits.
//!
//! The engine owns loops, concurrency, backoff and cancellation safety; it is generic over
//! the ports and knows no database or HTTP library.
//!
//! - [`lifecycle`]: the saga dispatcher (`dispatch_one`), the worker loop and command intake;
//! - [`scoped_writes`]: the `ScopedWrites` runtime (per-scope serialization and durable fences);
//! - [`directory`]: the `DirectoryProjector`.
//!
//! The main types are re-exported here, so `tenantry_engine::Dispatcher`,
//! `tenantry_engine::WorkerReport` or `tenantry_engine::ScopedWrites` name them without the
//! module path. Every type a public item exposes is nameable (lint `unnameable_types`).

pub mod directory;
pub mod lifecycle;
pub mod scoped_writes;

pub use directory::{
    DirectoryProjector, ProjectorError, Refusal, RefusalReport, ResourceSnapshot, WallClock,
};
pub use lifecycle::{
    BulkReport, CommandIntake, DispatchError, DispatchOutcome, Dispatcher, DispatcherConfig,
    GroupCommitConfig, GroupCommitStore, IntakeFailure, IntakeReceipt, OperatorActions,
    OperatorRequestError, Worker, WorkerConfig, WorkerReport, unique_lease_owner,
};
pub use scoped_writes::admin::{
    BindingFence, ClearOutcome, ClearReceipt, ClearTarget, FenceAdminError,
};
pub use scoped_writes::connector::{ConnectorError, ConnectorState};
pub use scoped_writes::{
    FenceConfig, FenceEntry, FenceMode, ScopeContext, ScopedWriteError, ScopedWrites,
};
