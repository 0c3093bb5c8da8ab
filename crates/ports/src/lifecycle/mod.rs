//! Ports of the lifecycle saga: the outbox queue, control-space reads, command intake, the
//! KnowledgeFS remote and lifecycle metrics.
//!
//! Small role traits compose into [`LifecycleStore`]; operator actions on commands (retry,
//! abandon, the action log, counts by status) are the separate role [`CommandAdmin`], which
//! the dispatcher never needs. Every store method is one database transaction; no method is ever called with another transaction open, and the engine never
//! holds one across a remote call.

mod admin;
mod intake;
mod metrics;
mod remote;

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod fake;

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::IntakePlan;
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, CommandStatus, ControlSpace, ErrorCode, LeaseToken, Operation,
    Settlement,
};

pub use admin::{
    ActionRecord, AttemptEnd, AttemptError, CommandAdmin, CommandCount, ErrorCodeCount,
    ErrorHistory, LiveSummary, OperatorAction, OperatorActionError, OperatorActionKind,
    SettledCommand,
};
pub use metrics::{
    LifecycleMetrics, MetricsError, NoMetrics, RenewalOutcome, TaskMetric, TaskStatus,
};
pub use remote::{KnowledgeFs, RemoteError};

pub use crate::error::StoreError;
pub use intake::{IntakeFailure, MAX_INTAKE_CONFLICT_RETRIES};

#[cfg(feature = "mocks")]
pub use admin::MockCommandAdmin;
#[cfg(feature = "mocks")]
pub use metrics::MockLifecycleMetrics;
#[cfg(feature = "mocks")]
pub use remote::MockKnowledgeFs;

/// Why a settlement wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SettleError {
    /// The command is no longer processing under this lease owner and epoch: another worker
    /// reclaimed it. The late worker must drop its result.
    #[error("lease on command {command_id} was lost (taken over or already settled)")]
    LeaseLost {
        /// The command.
        command_id: CommandId,
    },
    /// The control space changed since it was read (compare-and-set failed).
    #[error("control space {control_space_id} changed concurrently")]
    ControlSpaceConflict {
        /// The control space.
        control_space_id: ControlSpaceId,
    },
    /// The command to supersede no longer meets its supersede rule.
    #[error("command {command_id} can no longer be superseded")]
    SupersedeRefused {
        /// The command that could not be superseded.
        command_id: CommandId,
    },
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why an intake plan wrote nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IntakeStoreError {
    /// A control space with the planned id exists already.
    #[error("control space already exists")]
    ControlSpaceExists,
    /// The control space changed since it was read (its compare-and-set, on the resource
    /// version and state or on the revoke sequence, failed); re-plan.
    #[error("control space {control_space_id} changed concurrently")]
    ControlSpaceConflict {
        /// The control space whose compare-and-set failed.
        control_space_id: ControlSpaceId,
    },
    /// The control space to update does not exist.
    #[error("control space does not exist")]
    UnknownControlSpace,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Result of submitting an intake plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Submitted {
    /// The plan was written; the new command.
    Created(CommandRecord),
    /// The idempotency key was used before: nothing was written; the original command.
    Existing(CommandRecord),
}

/// Parameters of a claim.
///
/// A claim carries no time: the store decides what is due and when a lease expires by its own
/// clock (the database's clock for SQL stores), so replicas whose process clocks disagree never
/// take each other's live leases. See docs/protocol.md, "Time comes from the database".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The claiming worker.
    pub owner: LeaseOwner,
    /// Lease length. Without renewal it must exceed the remote call deadline; with renewal
    /// (the default) the dispatcher extends it every third of its length.
    pub lease_duration: Duration,
    /// Whether provision commands may be claimed (false while the product is disabled).
    pub include_provision: bool,
    /// Most commands to claim at once (at least 1).
    pub limit: u32,
    /// The remote call deadline. A claim that takes over an expired lease extends the attempt
    /// window of the attempt it replaces by this much (a request that attempt sent just before
    /// its lease expired may still land up to one call deadline later), so that window is at
    /// least `old end + call_deadline` for the absence rule whatever the new attempt does
    /// (docs/protocol.md, "Leases, renewal and the attempt window"). Zero extends nothing.
    pub call_deadline: Duration,
}

/// `at + length`, saturating at the largest representable time.
pub fn add_duration(at: DateTime<Utc>, length: Duration) -> DateTime<Utc> {
    let length = chrono::Duration::from_std(length).unwrap_or(chrono::Duration::MAX);
    at.checked_add_signed(length)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Filter of [`CommandQueue::list_commands`]; results are ordered by `(created_at, id)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommandFilter {
    /// Only this status.
    pub status: Option<CommandStatus>,
    /// Only this operation.
    pub operation: Option<Operation>,
    /// Only this tenant.
    pub tenant_id: Option<TenantId>,
    /// Only this control space (with `tenant_id`).
    pub control_space_id: Option<ControlSpaceId>,
    /// Only commands whose last error code is exactly this.
    pub error_code: Option<ErrorCode>,
    /// Keyset cursor: only commands ordered after this id.
    pub after: Option<CommandId>,
    /// Keyset cursor backwards: only commands ordered before this id; the page is the last
    /// `limit` of them, still returned in ascending order (the page before the one starting
    /// at this id). An unknown cursor yields an empty page. Ignored when `after` is set.
    pub before: Option<CommandId>,
    /// Most rows returned.
    pub limit: u32,
}

impl CommandFilter {
    /// Whether `record` matches every field of the filter but the cursors and the limit (the
    /// rule the stores apply in `list_commands` and `count_matching`).
    pub fn matches(&self, record: &CommandRecord) -> bool {
        self.status.is_none_or(|s| record.status == s)
            && self
                .operation
                .as_ref()
                .is_none_or(|o| &record.operation == o)
            && self
                .tenant_id
                .as_ref()
                .is_none_or(|t| &record.tenant_id == t)
            && self
                .control_space_id
                .as_ref()
                .is_none_or(|c| &record.control_space_id == c)
            && self
                .error_code
                .as_ref()
                .is_none_or(|c| record.last_error_code.as_ref() == Some(c))
    }
}

/// Claim and settle of outbox commands.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait CommandQueue: Send + Sync {
    /// Claims up to `limit` due commands: pending with `next_attempt_at <= now`, or processing
    /// with an expired lease, where `now` is the store's clock (the database clock for SQL
    /// stores), in turn order (`turn_at`, then `next_attempt_at`, `created_at`, `id`; the turn
    /// is given at intake by `tenantry_lifecycle::turn`, docs/protocol.md, "Fair claims across
    /// tenants"). Each claimed command gets status processing, the lease owner, a lease expiry of
    /// `now + lease_duration` (also the end of its attempt window), `lease_epoch + 1` and
    /// `attempt_count + 1`; [`ClaimedCommand::claimed_at`] is `now`. Concurrent claimers never
    /// receive the same command. A store may hand each command over with its control space
    /// read after the claim took effect ([`ClaimedCommand::control_space`]; the fake and the
    /// SQL stores do, docs/protocol.md, "The control space comes with the claim"); one that
    /// cannot leaves it `NotRead`.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails; nothing is claimed then.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError>;

    /// Extends a lease while its dispatch is in flight: a compare-and-set on the command being
    /// processing under `lease` (owner and epoch) with a lease that has not expired
    /// (`lease_expires_at > now`, the store's clock: an expired lease is not revived, even
    /// before another worker claims the command). The new expiry is the store's now plus
    /// `lease_duration`, and the command's attempt window ends with it. Returns the renewed
    /// lease (same owner and epoch, new `expires_at`).
    ///
    /// # Errors
    /// [`SettleError::LeaseLost`] when the lease is no longer held (expired, reclaimed, or
    /// settled); [`SettleError::Store`] when the database fails. Nothing is written then.
    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: Duration,
    ) -> Result<LeaseToken, SettleError>;

    /// Applies `settlement` in one transaction, as compare-and-sets: the command must still be
    /// processing under `lease` (owner and epoch), the control space must still have the
    /// expected resource version and state, and a superseded command must still meet its rule.
    /// A retry or fail outcome also appends an entry to the command's attempt-error log
    /// ([`CommandAdmin::command_errors`]) in the same transaction, stamped with the store's now.
    ///
    /// # Errors
    /// [`SettleError`] naming the first check that failed; nothing is written then.
    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError>;

    /// Settles a batch: every item is checked and applied with the rules of
    /// [`settle`](Self::settle), all or nothing per item. An item whose lease was lost, whose
    /// control-space compare-and-set failed or whose supersede was refused writes nothing at
    /// all (no ack, no CAS), and the other items still settle. The result has one entry per
    /// item, in the order of `items`, naming exactly which items were refused and why.
    ///
    /// The outcome equals settling the items one at a time in some order (an adapter may
    /// reorder independent items, and applies items that touch the same command or control
    /// space in the order given): two items that compare-and-set the same control space
    /// from the same resource version cannot both succeed. Adapters override this to settle
    /// the whole batch in one transaction with a few statements (group commit); the default
    /// settles the items one after the other, each in its own transaction.
    ///
    /// # Errors
    /// [`StoreError`] when the batch as a whole failed (for a one-transaction adapter: the
    /// transaction failed, so no item was written, or — a lost commit answer — the outcome is
    /// unknown, as for a failed `settle`). Per-item failures, including per-item
    /// [`SettleError::Store`] of the default implementation, are in the returned vector.
    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        let mut results = Vec::with_capacity(items.len());
        for (lease, settlement) in items {
            results.push(self.settle(lease, settlement).await);
        }
        Ok(results)
    }

    /// How long, on the store's clock, until the next command not yet claimable becomes
    /// claimable: the earliest `next_attempt_at` of a pending command and `lease_expires_at` of
    /// a processing one (provision commands only when `include_provision`), minus the store's
    /// now; [`Duration::ZERO`] when one is due already, `None` when no command is waiting.
    /// An idle worker sleeps until then (or its idle poll, whichever is sooner), so a command
    /// retried after a backoff is claimed when it becomes due. The default answers `None`
    /// (unknown: the worker relies on its idle poll); the SQL stores answer with one statement.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn next_due_in(&self, include_provision: bool) -> Result<Option<Duration>, StoreError> {
        let _ = include_provision;
        Ok(None)
    }

    /// The most recent provision command of a control space.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError>;

    /// Commands matching `filter`, ordered by `(created_at, id)`.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn list_commands(&self, filter: &CommandFilter)
    -> Result<Vec<CommandRecord>, StoreError>;
}

/// Reads of control spaces.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ControlSpaceReader: Send + Sync {
    /// One control space, if it exists.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails or the row is corrupt.
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError>;

    /// Several control spaces at once: one entry per key, in the order of `keys` (`None` for a
    /// missing one; a key given twice is answered twice). Adapters override this to read them
    /// all with one statement; the default reads them one after the other.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails or a row is corrupt; nothing is returned then.
    async fn control_spaces(
        &self,
        keys: &[(TenantId, ControlSpaceId)],
    ) -> Result<Vec<Option<ControlSpace>>, StoreError> {
        let mut spaces = Vec::with_capacity(keys.len());
        for (tenant_id, control_space_id) in keys {
            spaces.push(self.control_space(tenant_id, control_space_id).await?);
        }
        Ok(spaces)
    }
}

/// Writes of command intake.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait IntakeStore: Send + Sync {
    /// Applies `plan` in one transaction: if a command with the plan's idempotency key exists,
    /// writes nothing and returns it as [`Submitted::Existing`]; otherwise applies the
    /// control-space write and inserts the command, due at once: its `created_at` and
    /// `next_attempt_at` are the store's now (not the plan's time, which comes from the
    /// process clock). A concurrent submit with the same key that commits first makes this
    /// one [`Submitted::Existing`] too, never a conflict.
    ///
    /// # Errors
    /// [`IntakeStoreError`] naming the failed check; nothing is written then.
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError>;

    /// Applies `plans` as [`submit`](Self::submit) applies each of them, and answers each in
    /// order: every plan succeeds, replays or is refused on its own, exactly as if it had been
    /// submitted alone. What may differ is the cost: an adapter writes a batch together (the
    /// SeaORM store writes a batch of new control spaces and their commands with multi-row
    /// inserts in one transaction, and falls back to one transaction per plan when any of
    /// them replays or conflicts). The default submits them one by one.
    async fn submit_many(&self, plans: &[IntakePlan]) -> Vec<Result<Submitted, IntakeStoreError>> {
        let mut answers = Vec::with_capacity(plans.len());
        for plan in plans {
            answers.push(self.submit(plan).await);
        }
        answers
    }

    /// The command created with `key`, if any.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError>;
}

/// Everything the lifecycle engine needs from storage.
pub trait LifecycleStore: CommandQueue + ControlSpaceReader + IntakeStore {}
impl<T: CommandQueue + ControlSpaceReader + IntakeStore> LifecycleStore for T {}
