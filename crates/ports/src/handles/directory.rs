//! `Arc<T>`, `Box<T>` and `&T` handles of the directory ports.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryEvent, DirectoryEventBatch,
    DirectorySnapshot, InstanceUuid, ProjectionState, WorkspaceUuid,
};

use crate::directory::{
    DeltaApplier, DirectoryProvider, EntitlementReconciler, EventBatchApplier, FreshnessToucher,
    HookError, ProjectionStateReader, ProjectionStoreError, ProviderError,
    RuntimeExecutionPublisher, SnapshotApplier,
};

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
