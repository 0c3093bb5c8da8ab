//! Pure rules of the directory projection: a signed SaaS directory (snapshot, event batches,
//! per-workspace deltas) projected into local accounts, workspaces, memberships and execution
//! state.
//!
//! Contract: this crate is fully deterministic. It does no I/O, reads no clock and draws no
//! random numbers. Wall-clock `now` and monotonic time are arguments; the engine
//! (`tenantry_engine::directory`) fetches from the provider, the store adapter loads rows and
//! writes plans, and these functions decide.
//!
//! - [`model`]: wire models of Directory API v1;
//! - [`ids`]: validated identifiers;
//! - [`maps`]: role and status vocabularies and the maps between directory and platform;
//! - [`config`]: projector configuration, capacity limits, run-loop backoff;
//! - [`batch`]: validation of batches, deltas, workspace lists, capacity;
//! - [`fingerprint`]: canonical snapshot and event fingerprints;
//! - [`paging`]: the rules that join a paged snapshot's pages into one snapshot;
//! - [`rows`]: persisted rows and an in-memory table set;
//! - [`plan`]: apply planning (current rows + incoming projection → rows to write, or error);
//! - [`memory`]: the plans applied atomically to in-memory tables (reference semantics);
//! - [`readiness`]: fail-closed readiness evaluation;
//! - [`retention`]: when an inbox receipt may be removed;
//! - [`error`]: the [`DirectoryError`] enum.
//!
//! Specification: the repository's `docs/protocol.md`, section 4 "Directory projection".

pub mod batch;
pub mod config;
pub mod error;
pub mod fingerprint;
pub mod ids;
pub mod maps;
pub mod memory;
pub mod model;
pub mod paging;
pub mod plan;
pub mod readiness;
pub mod retention;
pub mod rows;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use config::{CapacityLimit, ProjectionLimits, ProjectorConfig, ProjectorConfigError};
pub use error::{DirectoryError, RefusalRule};
pub use ids::{AccountUuid, EventUuid, InstanceUuid, MembershipUuid, WorkspaceUuid};
pub use memory::ApplyOutcome;
pub use model::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectoryMember, DirectorySnapshot,
    DirectorySnapshotPage, DirectoryWorkspace, SnapshotPageLink,
};
pub use paging::{PageError, SnapshotPages};
pub use plan::{ApplyContext, LookupKeys, ProjectionWrite};
pub use readiness::{NotReady, Readiness};
pub use rows::{
    AccountRow, ExecutionRow, ExistingRows, InboxReceipt, MembershipRow, ProjectionState,
    ProjectionTables, WorkspaceRow,
};
