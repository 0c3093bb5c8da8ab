//! DELIBERATELY BROKEN: a lifecycle store decorator whose settle skips the lease check, the
//! planted bug that the chaos harness (`cargo xtask chaos --planted-bug`, its replica binary
//! `tenantry-chaos-planted-replica`) and the model-based store check
//! (`tests/store_sequences.rs`, feature `planted-store-settle`) must find.
//!
//! Before each settle it hands the command back to the settling lease in the database (owner,
//! epoch, `processing`) whoever holds it, by a direct write to the outbox table; the wrapped
//! store's own settle then finds its lease current and writes. So a late settle of a worker
//! whose lease was taken over is written instead of refused. Every other method goes to the
//! wrapped store unchanged. It lives here, in a crate nothing of the service depends on, so no
//! build of a shipped or published crate contains it (issue 28).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement};

use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::IntakePlan;
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, CommandStatus, ControlSpace, LeaseToken, Settlement,
};
use tenantry_ports::lifecycle::{
    ActionRecord, ClaimRequest, CommandAdmin, CommandCount, CommandFilter, CommandQueue,
    ControlSpaceReader, ErrorCodeCount, ErrorHistory, IntakeStore, IntakeStoreError, LiveSummary,
    OperatorAction, OperatorActionError, SettleError, SettledCommand, StoreError, Submitted,
};
use tenantry_store_seaorm::Database;
use tenantry_store_seaorm::connect::Backend;

/// `inner` with the planted settle; the outbox rows are written through `db`, the database
/// `inner` stores in.
#[derive(Clone)]
pub struct PlantedSettle<S> {
    inner: S,
    db: Database,
}

impl<S> std::fmt::Debug for PlantedSettle<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlantedSettle").finish_non_exhaustive()
    }
}

impl<S> PlantedSettle<S> {
    /// Wraps `inner`, whose rows are in `db`.
    pub fn new(inner: S, db: Database) -> Self {
        Self { inner, db }
    }

    /// The planted write: each lease's command handed back to that lease.
    async fn hand_back(&self, leases: &[&LeaseToken]) -> Result<(), StoreError> {
        let (backend, sql) = match self.db.backend {
            Backend::Postgres => (
                DbBackend::Postgres,
                "UPDATE tenantry_lifecycle_outbox SET lease_owner = $1, lease_epoch = $2, \
                 status = $3 WHERE id = $4",
            ),
            Backend::Sqlite => (
                DbBackend::Sqlite,
                "UPDATE tenantry_lifecycle_outbox SET lease_owner = ?, lease_epoch = ?, \
                 status = ? WHERE id = ?",
            ),
        };
        for lease in leases {
            let statement = Statement::from_sql_and_values(
                backend,
                sql,
                [
                    lease.owner.as_str().into(),
                    lease.epoch.0.into(),
                    CommandStatus::Processing.as_str().into(),
                    lease.command_id.as_str().into(),
                ],
            );
            self.db
                .conn
                .execute_raw(statement)
                .await
                .map_err(|e| StoreError::unavailable(e.to_string()))?;
        }
        Ok(())
    }
}

#[async_trait]
impl<S: CommandQueue> CommandQueue for PlantedSettle<S> {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        self.inner.claim(request).await
    }
    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: Duration,
    ) -> Result<LeaseToken, SettleError> {
        self.inner.renew_lease(lease, lease_duration).await
    }
    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        self.hand_back(&[lease]).await?;
        self.inner.settle(lease, settlement).await
    }
    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        self.hand_back(&items.iter().map(|(lease, _)| lease).collect::<Vec<_>>())
            .await?;
        self.inner.settle_many(items).await
    }
    async fn next_due_in(&self, include_provision: bool) -> Result<Option<Duration>, StoreError> {
        self.inner.next_due_in(include_provision).await
    }
    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.inner
            .latest_provision(tenant_id, control_space_id)
            .await
    }
    async fn list_commands(
        &self,
        filter: &CommandFilter,
    ) -> Result<Vec<CommandRecord>, StoreError> {
        self.inner.list_commands(filter).await
    }
}

#[async_trait]
impl<S: ControlSpaceReader> ControlSpaceReader for PlantedSettle<S> {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        self.inner.control_space(tenant_id, control_space_id).await
    }
    async fn control_spaces(
        &self,
        keys: &[(TenantId, ControlSpaceId)],
    ) -> Result<Vec<Option<ControlSpace>>, StoreError> {
        self.inner.control_spaces(keys).await
    }
}

#[async_trait]
impl<S: IntakeStore> IntakeStore for PlantedSettle<S> {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        self.inner.submit(plan).await
    }
    async fn submit_many(&self, plans: &[IntakePlan]) -> Vec<Result<Submitted, IntakeStoreError>> {
        self.inner.submit_many(plans).await
    }
    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.inner.command_by_idempotency_key(key).await
    }
}

#[async_trait]
impl<S: CommandAdmin> CommandAdmin for PlantedSettle<S> {
    async fn act_on_command(
        &self,
        action: &OperatorAction,
    ) -> Result<CommandRecord, OperatorActionError> {
        self.inner.act_on_command(action).await
    }
    async fn command_actions(
        &self,
        command_id: &CommandId,
    ) -> Result<Vec<ActionRecord>, StoreError> {
        self.inner.command_actions(command_id).await
    }
    async fn command_errors(
        &self,
        command_id: &CommandId,
        limit: u32,
    ) -> Result<ErrorHistory, StoreError> {
        self.inner.command_errors(command_id, limit).await
    }
    async fn command_by_id(
        &self,
        command_id: &CommandId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.inner.command_by_id(command_id).await
    }
    async fn count_commands(
        &self,
        statuses: &[CommandStatus],
    ) -> Result<Vec<CommandCount>, StoreError> {
        self.inner.count_commands(statuses).await
    }
    async fn count_matching(&self, filter: &CommandFilter) -> Result<u64, StoreError> {
        self.inner.count_matching(filter).await
    }
    async fn count_by_error_code(
        &self,
        status: CommandStatus,
        limit: u32,
    ) -> Result<Vec<ErrorCodeCount>, StoreError> {
        self.inner.count_by_error_code(status, limit).await
    }
    async fn settled_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<SettledCommand>, StoreError> {
        self.inner.settled_since(since, limit).await
    }
    async fn live_summary(&self) -> Result<LiveSummary, StoreError> {
        self.inner.live_summary().await
    }
}
