//! One handle convention for every port: a port trait is implemented for `Arc<T>`, `Box<T>`
//! and `&T` whenever `T` implements it (`T` may be unsized, so `Arc<dyn KnowledgeFs>` works
//! too).
//!
//! So a host passes whatever handle it already has where the engine expects `S: Port`: the
//! store by value, an `Arc` shared with the rest of the platform, a `Box<dyn Port>`, or a plain
//! borrow in a test or a short-lived use case. Every forwarding impl calls the same method of
//! the inner value, including methods with a default body (`settle_many`, `control_spaces`,
//! `record_lease_renewal`), so an adapter's override is never bypassed by wrapping it.
//!
//! Composite traits (`LifecycleStore`, `DirectoryProjectionStore`) follow from their parts.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryEvent, DirectoryEventBatch,
    DirectorySnapshot, InstanceUuid, ProjectionState, WorkspaceUuid,
};
use tenantry_fence::Binding;
use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, ProvisioningKey, TenantId};
use tenantry_lifecycle::intake::IntakePlan;
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, CommandStatus, ControlSpace, DeletionProgress, DeletionRequest,
    LeaseToken, ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest, Settlement,
};

use crate::clock::Clock;
use crate::directory::{
    DeltaApplier, DirectoryProvider, EntitlementReconciler, EventBatchApplier, FreshnessToucher,
    HookError, ProjectionStateReader, ProjectionStoreError, ProviderError,
    RuntimeExecutionPublisher, SnapshotApplier,
};
use crate::host_storage::{HostStorage, HostStorageBindings, HostStorageError};
use crate::lifecycle::{
    ActionRecord, ClaimRequest, CommandAdmin, CommandCount, CommandFilter, CommandQueue,
    ControlSpaceReader, IntakeStore, IntakeStoreError, KnowledgeFs, LifecycleMetrics, MetricsError,
    OperatorAction, OperatorActionError, RemoteError, RenewalOutcome, SettleError, StoreError,
    Submitted, TaskMetric,
};

/// Implements an async port trait for `Arc<T>`, `Box<T>` and `&T`; the body forwards every
/// method to `(**self)`.
macro_rules! async_handles {
    ($port:ident { $($body:tt)* }) => {
        #[async_trait]
        impl<T: $port + ?Sized> $port for Arc<T> {
            $($body)*
        }
        #[async_trait]
        impl<T: $port + ?Sized> $port for Box<T> {
            $($body)*
        }
        #[async_trait]
        impl<T: $port + ?Sized> $port for &T {
            $($body)*
        }
    };
}

/// The same for a synchronous port trait.
macro_rules! sync_handles {
    ($port:ident { $($body:tt)* }) => {
        impl<T: $port + ?Sized> $port for Arc<T> {
            $($body)*
        }
        impl<T: $port + ?Sized> $port for Box<T> {
            $($body)*
        }
        impl<T: $port + ?Sized> $port for &T {
            $($body)*
        }
    };
}

sync_handles!(Clock {
    fn now(&self) -> DateTime<Utc> {
        (**self).now()
    }
});

async_handles!(CommandQueue {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        (**self).claim(request).await
    }
    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: Duration,
    ) -> Result<LeaseToken, SettleError> {
        (**self).renew_lease(lease, lease_duration).await
    }
    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        (**self).settle(lease, settlement).await
    }
    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        (**self).settle_many(items).await
    }
    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        (**self).latest_provision(tenant_id, control_space_id).await
    }
    async fn list_commands(
        &self,
        filter: &CommandFilter,
    ) -> Result<Vec<CommandRecord>, StoreError> {
        (**self).list_commands(filter).await
    }
});

async_handles!(ControlSpaceReader {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        (**self).control_space(tenant_id, control_space_id).await
    }
    async fn control_spaces(
        &self,
        keys: &[(TenantId, ControlSpaceId)],
    ) -> Result<Vec<Option<ControlSpace>>, StoreError> {
        (**self).control_spaces(keys).await
    }
});

async_handles!(IntakeStore {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        (**self).submit(plan).await
    }
    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        (**self).command_by_idempotency_key(key).await
    }
});

async_handles!(CommandAdmin {
    async fn act_on_command(
        &self,
        action: &OperatorAction,
    ) -> Result<CommandRecord, OperatorActionError> {
        (**self).act_on_command(action).await
    }
    async fn command_actions(
        &self,
        command_id: &CommandId,
    ) -> Result<Vec<ActionRecord>, StoreError> {
        (**self).command_actions(command_id).await
    }
    async fn command_by_id(
        &self,
        command_id: &CommandId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        (**self).command_by_id(command_id).await
    }
    async fn count_commands(
        &self,
        statuses: &[CommandStatus],
    ) -> Result<Vec<CommandCount>, StoreError> {
        (**self).count_commands(statuses).await
    }
});

async_handles!(KnowledgeFs {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        (**self).provision(request).await
    }
    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        (**self)
            .find_by_provisioning_key(namespace_id, provisioning_key, control_space_id)
            .await
    }
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        (**self).request_deletion(request).await
    }
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        (**self).revoke_grant(request).await
    }
});

sync_handles!(LifecycleMetrics {
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError> {
        (**self).record_task(metric)
    }
    fn record_lease_renewal(
        &self,
        operation: &str,
        outcome: RenewalOutcome,
    ) -> Result<(), MetricsError> {
        (**self).record_lease_renewal(operation, outcome)
    }
});

async_handles!(HostStorage {
    async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError> {
        (**self).keys(binding).await
    }
    async fn get(&self, binding: &Binding, key: &str) -> Result<Option<Value>, HostStorageError> {
        (**self).get(binding, key).await
    }
    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> Result<(), HostStorageError> {
        (**self).set(binding, key, value).await
    }
    async fn compare_and_set(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        value: &Value,
    ) -> Result<bool, HostStorageError> {
        (**self)
            .compare_and_set(binding, key, expected, value)
            .await
    }
});

async_handles!(HostStorageBindings {
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Vec<Binding>, HostStorageError> {
        (**self).bindings_with_key_prefix(key_prefix).await
    }
});

async_handles!(DirectoryProvider {
    async fn fetch_snapshot(
        &self,
        instance: &InstanceUuid,
    ) -> Result<DirectorySnapshot, ProviderError> {
        (**self).fetch_snapshot(instance).await
    }
    async fn fetch_events(
        &self,
        instance: &InstanceUuid,
        after: i64,
        limit: u32,
    ) -> Result<DirectoryEventBatch, ProviderError> {
        (**self).fetch_events(instance, after, limit).await
    }
    async fn fetch_workspaces(
        &self,
        instance: &InstanceUuid,
        workspace_uuids: &[WorkspaceUuid],
    ) -> Result<DirectoryDelta, ProviderError> {
        (**self).fetch_workspaces(instance, workspace_uuids).await
    }
});

async_handles!(SnapshotApplier {
    async fn apply_snapshot(
        &self,
        ctx: &ApplyContext,
        snapshot: &DirectorySnapshot,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        (**self).apply_snapshot(ctx, snapshot, events).await
    }
});

async_handles!(DeltaApplier {
    async fn apply_delta(
        &self,
        ctx: &ApplyContext,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        (**self).apply_delta(ctx, delta, batch).await
    }
});

async_handles!(EventBatchApplier {
    async fn apply_event_batch(
        &self,
        ctx: &ApplyContext,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        (**self).apply_event_batch(ctx, batch).await
    }
});

async_handles!(FreshnessToucher {
    async fn touch_freshness(
        &self,
        ctx: &ApplyContext,
        replica_cursor: i64,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        (**self).touch_freshness(ctx, replica_cursor).await
    }
});

async_handles!(ProjectionStateReader {
    async fn projection_state(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Option<ProjectionState>, ProjectionStoreError> {
        (**self).projection_state(instance).await
    }
});

async_handles!(EntitlementReconciler {
    async fn reconcile_active_workspaces(
        &self,
        instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError> {
        (**self).reconcile_active_workspaces(instance, active).await
    }
    async fn update_workspace_activity(
        &self,
        instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
        inactive: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError> {
        (**self)
            .update_workspace_activity(instance, active, inactive)
            .await
    }
});

async_handles!(RuntimeExecutionPublisher {
    async fn publish_execution_projection(
        &self,
        instance: &InstanceUuid,
        active_generations: &BTreeMap<WorkspaceUuid, i64>,
        affected: Option<&BTreeSet<WorkspaceUuid>>,
    ) -> Result<(), HookError> {
        (**self)
            .publish_execution_projection(instance, active_generations, affected)
            .await
    }
});
