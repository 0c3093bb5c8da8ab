//! The method lists of the lifecycle ports, for forwarding and the handles.

use std::time::Duration;

use chrono::{DateTime, Utc};

use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, ProvisioningKey, TenantId};
use tenantry_lifecycle::intake::IntakePlan;
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, CommandStatus, ControlSpace, DeletionProgress, DeletionRequest,
    LeaseToken, ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest, Settlement,
};

use crate::lifecycle::{
    ActionRecord, ClaimRequest, CommandCount, CommandFilter, ErrorCodeCount, ErrorHistory,
    IntakeStoreError, LiveSummary, MetricsError, OperatorAction, OperatorActionError, RemoteError,
    RenewalOutcome, SettleError, SettledCommand, StoreError, Submitted, TaskMetric,
};

forwarding!(lifecycle::CommandQueue {
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
    async fn next_due_in(&self, include_provision: bool) -> Result<Option<Duration>, StoreError>;
    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError>;
    async fn list_commands(
        &self,
        filter: &CommandFilter,
    ) -> Result<Vec<CommandRecord>, StoreError>;
});

forwarding!(lifecycle::ControlSpaceReader {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError>;
    async fn control_spaces(
        &self,
        keys: &[(TenantId, ControlSpaceId)],
    ) -> Result<Vec<Option<ControlSpace>>, StoreError>;
});

forwarding!(lifecycle::IntakeStore {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError>;
    async fn submit_many(&self, plans: &[IntakePlan]) -> Vec<Result<Submitted, IntakeStoreError>>;
    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError>;
});

forwarding!(lifecycle::CommandAdmin {
    async fn act_on_command(
        &self,
        action: &OperatorAction,
    ) -> Result<CommandRecord, OperatorActionError>;
    async fn command_actions(
        &self,
        command_id: &CommandId,
    ) -> Result<Vec<ActionRecord>, StoreError>;
    async fn command_errors(
        &self,
        command_id: &CommandId,
        limit: u32,
    ) -> Result<ErrorHistory, StoreError>;
    async fn command_by_id(
        &self,
        command_id: &CommandId,
    ) -> Result<Option<CommandRecord>, StoreError>;
    async fn count_commands(
        &self,
        statuses: &[CommandStatus],
    ) -> Result<Vec<CommandCount>, StoreError>;
    async fn count_matching(&self, filter: &CommandFilter) -> Result<u64, StoreError>;
    async fn count_by_error_code(
        &self,
        status: CommandStatus,
        limit: u32,
    ) -> Result<Vec<ErrorCodeCount>, StoreError>;
    async fn settled_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<SettledCommand>, StoreError>;
    async fn live_summary(&self) -> Result<LiveSummary, StoreError>;
});

forwarding!(lifecycle::KnowledgeFs {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError>;
    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError>;
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError>;
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError>;
});

forwarding!(lifecycle::LifecycleMetrics {
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError>;
    fn record_lease_renewal(
        &self,
        operation: &str,
        outcome: RenewalOutcome,
    ) -> Result<(), MetricsError>;
});
