//! The lifecycle saga over the ports: the dispatcher that claims, delivers and settles one
//! command at a time, the worker loop around it (or the worker pool: one claimer per process
//! feeding bounded dispatch slots), command intake, and operator actions (retry / abandon of
//! dead-lettered or pending commands).
//!
//! Each store call is its own transaction and no transaction is open while KnowledgeFS is
//! called: claim (transaction 1), call the remote, settle (transaction 2). Over a
//! [`GroupCommitStore`], the settles of concurrent dispatches share one transaction (group
//! commit) and their control-space reads one statement.

/// Test wrappers around a store (`inner`) that change a few calls forward the rest unchanged;
/// `forward_intake_store!(Wrapper)` writes the [`tenantry_ports::lifecycle::IntakeStore`]
/// impl, `forward_control_space_reader!(Wrapper)` the
/// [`tenantry_ports::lifecycle::ControlSpaceReader`] one.
#[cfg(test)]
macro_rules! forward_intake_store {
    ($wrapper:ty) => {
        #[async_trait::async_trait]
        impl tenantry_ports::lifecycle::IntakeStore for $wrapper {
            async fn submit(
                &self,
                plan: &tenantry_lifecycle::intake::IntakePlan,
            ) -> Result<
                tenantry_ports::lifecycle::Submitted,
                tenantry_ports::lifecycle::IntakeStoreError,
            > {
                self.inner.submit(plan).await
            }
            async fn command_by_idempotency_key(
                &self,
                key: &tenantry_kernel::IdempotencyKey,
            ) -> Result<
                Option<tenantry_lifecycle::CommandRecord>,
                tenantry_ports::lifecycle::StoreError,
            > {
                self.inner.command_by_idempotency_key(key).await
            }
        }
    };
}

#[cfg(test)]
macro_rules! forward_control_space_reader {
    ($wrapper:ty) => {
        #[async_trait::async_trait]
        impl tenantry_ports::lifecycle::ControlSpaceReader for $wrapper {
            async fn control_space(
                &self,
                tenant_id: &tenantry_kernel::TenantId,
                control_space_id: &tenantry_kernel::ControlSpaceId,
            ) -> Result<
                Option<tenantry_lifecycle::ControlSpace>,
                tenantry_ports::lifecycle::StoreError,
            > {
                self.inner.control_space(tenant_id, control_space_id).await
            }
        }
    };
}

mod dispatcher;
mod group_commit;
mod intake;
mod lease;
mod operator;
mod pool;
mod worker;

pub use dispatcher::{DispatchError, DispatchReport, Dispatcher, DispatcherConfig};
pub use group_commit::{GroupCommitConfig, GroupCommitStore};
pub use intake::{CommandIntake, IntakeFailure, IntakeReceipt, IntakeRequest};
pub use operator::{
    BulkReport, MAX_ACTOR_CHARS, MAX_BULK, MAX_REASON_CHARS, OperatorActions, OperatorRequestError,
};
pub use pool::{IN_FLIGHT_PER_SLOT, WorkerPool};
pub use tenantry_ports::clock::{Clock, ManualClock, SystemClock};
pub use tenantry_ports::wake::{WakeSubscription, Wakeups};
pub use worker::{Worker, WorkerConfig, WorkerReport, unique_lease_owner};

#[cfg(test)]
mod tests;
