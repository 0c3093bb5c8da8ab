//! The method lists of the directory ports, for forwarding and the handles.

use std::collections::{BTreeMap, BTreeSet};

use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryEvent, DirectoryEventBatch,
    DirectorySnapshot, InstanceUuid, ProjectionState, WorkspaceUuid,
};

use crate::directory::{
    AnySnapshotSource, HookError, ProjectionStoreError, ProviderError, SnapshotSource,
};

forwarding!(directory::DirectoryProvider {
    async fn fetch_snapshot(
        &self,
        instance: &InstanceUuid,
    ) -> Result<DirectorySnapshot, ProviderError>;
    async fn fetch_snapshot_source(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Box<dyn SnapshotSource>, ProviderError>;
    async fn fetch_events(
        &self,
        instance: &InstanceUuid,
        after: i64,
        limit: u32,
    ) -> Result<DirectoryEventBatch, ProviderError>;
    async fn fetch_workspaces(
        &self,
        instance: &InstanceUuid,
        workspace_uuids: &[WorkspaceUuid],
    ) -> Result<DirectoryDelta, ProviderError>;
});

forwarding!(directory::SnapshotApplier {
    async fn apply_snapshot(
        &self,
        ctx: &ApplyContext,
        snapshot: &DirectorySnapshot,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
    async fn apply_snapshot_source(
        &self,
        ctx: &ApplyContext,
        source: &AnySnapshotSource,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
});

forwarding!(directory::DeltaApplier {
    async fn apply_delta(
        &self,
        ctx: &ApplyContext,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
});

forwarding!(directory::EventBatchApplier {
    async fn apply_event_batch(
        &self,
        ctx: &ApplyContext,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
});

forwarding!(directory::FreshnessToucher {
    async fn touch_freshness(
        &self,
        ctx: &ApplyContext,
        replica_cursor: i64,
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
});

forwarding!(directory::ProjectionStateReader {
    async fn projection_state(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Option<ProjectionState>, ProjectionStoreError>;
});

forwarding!(directory::EntitlementReconciler {
    async fn reconcile_active_workspaces(
        &self,
        instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError>;
    async fn update_workspace_activity(
        &self,
        instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
        inactive: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError>;
});

forwarding!(directory::RuntimeExecutionPublisher {
    async fn publish_execution_projection(
        &self,
        instance: &InstanceUuid,
        active_generations: &BTreeMap<WorkspaceUuid, i64>,
        affected: Option<&BTreeSet<WorkspaceUuid>>,
    ) -> Result<(), HookError>;
});
