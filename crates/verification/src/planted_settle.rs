//! DELIBERATELY BROKEN: a lifecycle store decorator whose settle skips the lease check, the
//! planted bug that the chaos harness (`cargo xtask chaos --planted-bug`, its replica binary
//! `tenantry-chaos-planted-replica`) and the model-based store check
//! (`tests/store_sequences.rs`, feature `planted-store-settle`) must find.
//!
//! Before each settle it hands the command back to the settling lease in the database (owner,
//! epoch, `processing`) whoever holds it, by a direct write to the outbox table; the wrapped
//! store's own settle then finds its lease current and writes. So a late settle of a worker
//! whose lease was taken over is written instead of refused. Every other method goes to the
//! wrapped store unchanged ([`tenantry_ports::forward`]). It lives here, in a crate nothing of the service depends on, so no
//! build of a shipped or published crate contains it (issue 28).

use async_trait::async_trait;
use sea_orm::{ConnectionTrait, DbBackend, Statement};

use tenantry_lifecycle::{CommandStatus, LeaseToken, Settlement};
use tenantry_ports::forward;
use tenantry_ports::lifecycle::{
    CommandAdmin, CommandQueue, ControlSpaceReader, IntakeStore, SettleError, StoreError,
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

impl<S> forward::Decorator for PlantedSettle<S> {
    type Inner = S;
    fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: CommandQueue> forward::CommandQueue for PlantedSettle<S> {
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
}

impl<S: ControlSpaceReader> forward::ControlSpaceReader for PlantedSettle<S> {}

impl<S: IntakeStore> forward::IntakeStore for PlantedSettle<S> {}

impl<S: CommandAdmin> forward::CommandAdmin for PlantedSettle<S> {}
