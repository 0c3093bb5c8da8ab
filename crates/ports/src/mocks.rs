//! mockall mocks of every port trait (feature `mocks`), for tests where the interaction is the
//! thing under test: "the remote is never called while …", "the hook gets exactly these
//! workspaces". For behaviour (a store that keeps what was written, a remote that answers like
//! KnowledgeFS), use the hand-written fakes of feature `testing`.
//!
//! Every `MockX` implements port `X` and is built with `MockX::new()`; set what each call
//! returns with `expect_<method>()` (see the mockall documentation). A mock that gets a call it
//! has no expectation for panics, and one whose `times(n)` is not met panics when dropped, so
//! the test fails there.
//!
//! - one mock per role trait, derived with `mockall::automock` next to the trait and
//!   re-exported here ([`MockCommandQueue`], [`MockKnowledgeFs`], [`MockSnapshotApplier`], …);
//! - [`MockLifecycleStore`] and [`MockDirectoryProjectionStore`]: one value implementing every
//!   role of the composite store traits (the engine takes one store for all of them);
//! - `HostStorage::compare_and_set` and `RuntimeExecutionPublisher::publish_execution_projection`
//!   take an `Option<&T>`, which mockall can mock only with named lifetimes: the traits name
//!   every lifetime of those two methods (implementations still elide them).
//!
//! # Example
//! A platform checks that its own code claims a key only while it is absent, and once:
//! ```
//! use serde_json::json;
//! use tenantry_fence::Binding;
//! use tenantry_ports::host_storage::HostStorage;
//! use tenantry_ports::mocks::MockHostStorage;
//!
//! /// The platform's own code under test.
//! async fn claim_owner(storage: &impl HostStorage, binding: &Binding, me: &str) -> bool {
//!     storage
//!         .compare_and_set(binding, "owner", None, &json!(me))
//!         .await
//!         .unwrap_or(false)
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut storage = MockHostStorage::new();
//! storage
//!     .expect_compare_and_set()
//!     .withf(|_, key, expected, value| key == "owner" && expected.is_none() && value == "node-1")
//!     .times(1)
//!     .returning(|_, _, _, _| Ok(true));
//! let binding = Binding::parse("installation-1")?;
//! assert!(claim_owner(&storage, &binding, "node-1").await);
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "directory")]
pub use directory::MockDirectoryProjectionStore;
#[cfg(feature = "lifecycle")]
pub use lifecycle::MockLifecycleStore;

pub use crate::clock::MockClock;
#[cfg(feature = "directory")]
pub use crate::directory::{
    MockDeltaApplier, MockDirectoryProvider, MockEntitlementReconciler, MockEventBatchApplier,
    MockFreshnessToucher, MockProjectionStateReader, MockProjectionTablesReader,
    MockRuntimeExecutionPublisher, MockSnapshotApplier,
};
#[cfg(feature = "fences")]
pub use crate::host_storage::metrics::MockFenceMetrics;
#[cfg(feature = "fences")]
pub use crate::host_storage::{MockHostStorage, MockHostStorageBindings};
#[cfg(feature = "lifecycle")]
pub use crate::lifecycle::{
    MockCommandAdmin, MockCommandQueue, MockControlSpaceReader, MockIntakeStore, MockKnowledgeFs,
    MockLifecycleMetrics,
};
pub use crate::retention::MockRetentionStore;

#[cfg(feature = "lifecycle")]
mod lifecycle {
    //! The composite lifecycle store mock.

    use std::time::Duration;

    use async_trait::async_trait;
    use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
    use tenantry_lifecycle::intake::IntakePlan;
    use tenantry_lifecycle::{ClaimedCommand, CommandRecord, ControlSpace, LeaseToken, Settlement};

    use crate::lifecycle::{
        ClaimRequest, CommandFilter, CommandQueue, ControlSpaceReader, IntakeStore,
        IntakeStoreError, SettleError, StoreError, Submitted,
    };

    mockall::mock! {
        /// One mock implementing every role of [`crate::lifecycle::LifecycleStore`]
        /// ([`CommandQueue`], [`ControlSpaceReader`], [`IntakeStore`]), for the engine's
        /// use cases that take a single store.
        pub LifecycleStore {}

        #[async_trait]
        impl CommandQueue for LifecycleStore {
            async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError>;
            async fn renew_lease(
                &self,
                lease: &LeaseToken,
                lease_duration: Duration,
            ) -> Result<LeaseToken, SettleError>;
            async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError>;
            async fn settle_many(
                &self,
                items: &[(LeaseToken, Settlement)],
            ) -> Result<Vec<Result<(), SettleError>>, StoreError>;
            async fn latest_provision(
                &self,
                tenant_id: &TenantId,
                control_space_id: &ControlSpaceId,
            ) -> Result<Option<CommandRecord>, StoreError>;
            async fn list_commands(&self, filter: &CommandFilter) -> Result<Vec<CommandRecord>, StoreError>;
        }

        #[async_trait]
        impl ControlSpaceReader for LifecycleStore {
            async fn control_space(
                &self,
                tenant_id: &TenantId,
                control_space_id: &ControlSpaceId,
            ) -> Result<Option<ControlSpace>, StoreError>;
            async fn control_spaces(
                &self,
                keys: &[(TenantId, ControlSpaceId)],
            ) -> Result<Vec<Option<ControlSpace>>, StoreError>;
        }

        #[async_trait]
        impl IntakeStore for LifecycleStore {
            async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError>;
            async fn command_by_idempotency_key(
                &self,
                key: &IdempotencyKey,
            ) -> Result<Option<CommandRecord>, StoreError>;
        }
    }
}

#[cfg(feature = "directory")]
mod directory {
    //! The composite projection store mock.

    use async_trait::async_trait;
    use tenantry_directory::{
        ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryEvent, DirectoryEventBatch,
        DirectorySnapshot, InstanceUuid, ProjectionState,
    };

    use crate::directory::{
        DeltaApplier, EventBatchApplier, FreshnessToucher, ProjectionStateReader,
        ProjectionStoreError, SnapshotApplier,
    };

    mockall::mock! {
        /// One mock implementing every role of
        /// [`crate::directory::DirectoryProjectionStore`], for the projector.
        pub DirectoryProjectionStore {}

        #[async_trait]
        impl SnapshotApplier for DirectoryProjectionStore {
            async fn apply_snapshot(
                &self,
                ctx: &ApplyContext,
                snapshot: &DirectorySnapshot,
                events: &[DirectoryEvent],
            ) -> Result<ApplyOutcome, ProjectionStoreError>;
        }

        #[async_trait]
        impl DeltaApplier for DirectoryProjectionStore {
            async fn apply_delta(
                &self,
                ctx: &ApplyContext,
                delta: &DirectoryDelta,
                batch: &DirectoryEventBatch,
            ) -> Result<ApplyOutcome, ProjectionStoreError>;
        }

        #[async_trait]
        impl EventBatchApplier for DirectoryProjectionStore {
            async fn apply_event_batch(
                &self,
                ctx: &ApplyContext,
                batch: &DirectoryEventBatch,
            ) -> Result<ApplyOutcome, ProjectionStoreError>;
        }

        #[async_trait]
        impl FreshnessToucher for DirectoryProjectionStore {
            async fn touch_freshness(
                &self,
                ctx: &ApplyContext,
                replica_cursor: i64,
            ) -> Result<ApplyOutcome, ProjectionStoreError>;
        }

        #[async_trait]
        impl ProjectionStateReader for DirectoryProjectionStore {
            async fn projection_state(
                &self,
                instance: &InstanceUuid,
            ) -> Result<Option<ProjectionState>, ProjectionStoreError>;
        }
    }
}
