//! `Arc<T>`, `Box<T>` and `&T` handles of the lifecycle ports.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, ProvisioningKey, TenantId};
use tenantry_lifecycle::intake::IntakePlan;
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, CommandStatus, ControlSpace, DeletionProgress, DeletionRequest,
    LeaseToken, ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest, Settlement,
};

use crate::lifecycle::{
    ActionRecord, ClaimRequest, CommandAdmin, CommandCount, CommandFilter, CommandQueue,
    ControlSpaceReader, ErrorCodeCount, ErrorHistory, IntakeStore, IntakeStoreError, KnowledgeFs,
    LifecycleMetrics, LiveSummary, MetricsError, OperatorAction, OperatorActionError, RemoteError,
    RenewalOutcome, SettleError, SettledCommand, StoreError, Submitted, TaskMetric,
};

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
    async fn next_due_in(&self, include_provision: bool) -> Result<Option<Duration>, StoreError> {
        (**self).next_due_in(include_provision).await
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
    async fn submit_many(&self, plans: &[IntakePlan]) -> Vec<Result<Submitted, IntakeStoreError>> {
        (**self).submit_many(plans).await
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
    async fn command_errors(
        &self,
        command_id: &CommandId,
        limit: u32,
    ) -> Result<ErrorHistory, StoreError> {
        (**self).command_errors(command_id, limit).await
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
    async fn count_matching(&self, filter: &CommandFilter) -> Result<u64, StoreError> {
        (**self).count_matching(filter).await
    }
    async fn count_by_error_code(
        &self,
        status: CommandStatus,
        limit: u32,
    ) -> Result<Vec<ErrorCodeCount>, StoreError> {
        (**self).count_by_error_code(status, limit).await
    }
    async fn settled_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<SettledCommand>, StoreError> {
        (**self).settled_since(since, limit).await
    }
    async fn live_summary(&self) -> Result<LiveSummary, StoreError> {
        (**self).live_summary().await
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
