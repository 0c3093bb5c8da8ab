//! Ports of the lifecycle saga: the outbox queue, control-space reads, command intake, the
//! KnowledgeFS remote and lifecycle metrics.
//!
//! Small role traits compose into [`LifecycleStore`]; operator actions on commands (retry,
//! abandon, the action log, counts by status) are the separate role [`CommandAdmin`], which
//! the dispatcher never needs. Every store method is one database transaction; no method is ever called with another transaction open, and the engine never
//! holds one across a remote call.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tenantry_kernel::outcome::{DispatchFailure, DispatchOutcome};
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, LeaseOwner, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::intake::IntakePlan;
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, CommandStatus, ControlSpace, DeletionProgress, DeletionRequest,
    ErrorCode, LeaseToken, Operation, ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest,
    Settlement,
};

use crate::error::ErrorSource;
pub use crate::error::StoreError;

mod intake;

pub use intake::{IntakeFailure, MAX_INTAKE_CONFLICT_RETRIES};

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod fake;

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
    /// stores). Each claimed command gets status processing, the lease owner, a lease expiry of
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

/// What an operator does to a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperatorActionKind {
    /// Back to `pending`, due now, with a fresh attempt budget (`attempt_count` is kept).
    Retry,
    /// To `abandoned` (terminal), `completed_at` set, `last_error_code = ABANDONED_BY_OPERATOR`
    /// and the reason as message. Refused for a delete that owns its `deleting` control space
    /// (it would stay `deleting` for good; [`OperatorActionKind::MarkDeleted`] is the way out).
    Abandon,
    /// Only for a delete that owns its `deleting` control space: abandon it as
    /// [`OperatorActionKind::Abandon`] does and, in the same transaction, move the control
    /// space to `deleted` (`tenantry_lifecycle::operator::mark_deleted`). The remote space, if
    /// any, is not touched: the operator's reason records why that is acceptable.
    MarkDeleted,
}

impl OperatorActionKind {
    /// Stored name: `retry`, `abandon` or `mark_deleted`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Abandon => "abandon",
            Self::MarkDeleted => "mark_deleted",
        }
    }

    /// Parses a stored name.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "retry" => Some(Self::Retry),
            "abandon" => Some(Self::Abandon),
            "mark_deleted" => Some(Self::MarkDeleted),
            _ => None,
        }
    }

    /// Whether the command ends `abandoned` (abandon and mark-deleted).
    pub fn abandons(self) -> bool {
        matches!(self, Self::Abandon | Self::MarkDeleted)
    }
}

/// One operator action on one command: who, when and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorAction {
    /// Unique id of this action record (generated by the caller, e.g. a UUID).
    pub action_id: String,
    /// The command acted on.
    pub command_id: CommandId,
    /// Retry or abandon.
    pub kind: OperatorActionKind,
    /// Who (free text, 1..=255 characters, e.g. `cli:alice` or `admin-api:oncall`).
    pub actor: String,
    /// Why (free text, 1..=1024 characters).
    pub reason: String,
    /// When the caller acted (its clock). The store records the action, and an abandon's
    /// `completed_at`, at its own time instead (the database clock: retention's cut-offs read
    /// them; issue 29), so [`ActionRecord::action`] carries the store's time here.
    pub at: DateTime<Utc>,
}

/// A recorded operator action, as read back from the action log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRecord {
    /// The action as requested.
    pub action: OperatorAction,
    /// The command's status before the action.
    pub previous_status: CommandStatus,
    /// The command's last error code before the action.
    pub previous_error_code: Option<ErrorCode>,
    /// The command's attempt count at the time of the action.
    pub attempt_count: i32,
}

/// Why an operator action changed nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorActionError {
    /// No command has this id.
    #[error("command {command_id} does not exist")]
    UnknownCommand {
        /// The id asked for.
        command_id: CommandId,
    },
    /// The command is neither `pending` nor `failed` (it is in flight, or settled for good).
    #[error(
        "command {command_id} is {status}; only pending or failed commands can be retried or abandoned"
    )]
    NotActionable {
        /// The command.
        command_id: CommandId,
        /// Its status.
        status: CommandStatus,
    },
    /// The action would leave the control space without an exit, or mark-deleted was asked
    /// of a command it does not apply to (`tenantry_lifecycle::operator`); nothing written.
    #[error(transparent)]
    ControlSpace(#[from] tenantry_lifecycle::operator::ControlSpaceActionError),
    /// Storage failed; nothing was written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Number of commands with one (status, operation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandCount {
    /// Status.
    pub status: CommandStatus,
    /// Operation.
    pub operation: Operation,
    /// How many.
    pub count: u64,
}

/// Number of commands of one status with one last error code (the overview's "failed by
/// error code").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorCodeCount {
    /// The last error code (`None`: commands without one).
    pub code: Option<ErrorCode>,
    /// How many.
    pub count: u64,
}

/// One command that succeeded, for throughput and latency views
/// ([`CommandAdmin::settled_since`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettledCommand {
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it succeeded.
    pub completed_at: DateTime<Utc>,
}

/// What the live commands look like right now ([`CommandAdmin::live_summary`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveSummary {
    /// `created_at` of the oldest pending command (`None`: nothing pending).
    pub oldest_pending_created_at: Option<DateTime<Utc>>,
    /// Lease owners of processing commands with how many each holds, ordered by owner: the
    /// workers (and so the replicas) seen claiming right now.
    pub lease_owners: Vec<(String, u64)>,
}

/// How an attempt recorded in the attempt-error log ended ([`AttemptError::end`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AttemptEnd {
    /// Settled as a retry: the command went back to `pending` with this error.
    Retry,
    /// Settled as a dead letter: the command became `failed` with this error.
    Failed,
    /// An operator abandoned the command (code `ABANDONED_BY_OPERATOR`, the reason as message,
    /// the operator as [`AttemptError::actor`]); the attempt number is the command's attempt
    /// count at the time, not a new attempt.
    Abandoned,
}

impl AttemptEnd {
    /// Stored name: `retry`, `failed` or `abandoned`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
        }
    }

    /// Parses a stored name.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "retry" => Some(Self::Retry),
            "failed" => Some(Self::Failed),
            "abandoned" => Some(Self::Abandoned),
            _ => None,
        }
    }
}

/// One entry of a command's attempt-error log: an attempt that ended in an error (a retry or
/// a dead letter), or an operator's abandon. Written by the settle (or the abandon) in its own
/// transaction, so an entry exists exactly when that settle was written; a settle refused for a
/// lost lease writes none. Acks and moot closes write none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptError {
    /// The command.
    pub command_id: CommandId,
    /// The command's `attempt_count` when it was recorded (1 for the first claim).
    pub attempt: i32,
    /// How the attempt ended.
    pub end: AttemptEnd,
    /// The error code of the settlement.
    pub code: ErrorCode,
    /// The error message of the settlement.
    pub message: String,
    /// When it was recorded, on the store's clock (the database clock of the SQL stores).
    pub recorded_at: DateTime<Utc>,
    /// The lease owner (worker) that settled the attempt; `None` for an operator's abandon.
    pub lease_owner: Option<String>,
    /// The operator who abandoned the command; `None` for a settle.
    pub actor: Option<String>,
}

/// The newest entries of a command's attempt-error log ([`CommandAdmin::command_errors`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorHistory {
    /// The newest entries first (by `recorded_at`, then `attempt`), at most the limit asked.
    pub entries: Vec<AttemptError>,
    /// How many entries the command has in all (`total - entries.len()` were left out).
    pub total: u64,
}

/// Operator actions on commands and counts for gauges. Not part of [`LifecycleStore`]: only
/// the admin API, the CLI and metrics use it.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait CommandAdmin: Send + Sync {
    /// Applies `action` in one transaction, as a compare-and-set on the command's status
    /// (`pending` or `failed`), and records it in the action log. Retry: status `pending`,
    /// `next_attempt_at = at`, `attempt_budget_base = attempt_count` (a fresh budget;
    /// `attempt_count` is never reset, so a retried provision still shows it may have been
    /// dispatched), `completed_at` cleared. Abandon: status `abandoned`, `completed_at = at`,
    /// `last_error_code = ABANDONED_BY_OPERATOR`, `last_error_message = reason`, and an
    /// [`AttemptEnd::Abandoned`] entry (with the actor) in the attempt-error log. The lease
    /// is cleared either way. Returns the command after the action.
    ///
    /// # Errors
    /// [`OperatorActionError`]: unknown command, a status other than pending/failed (nothing
    /// written, nothing recorded), or storage failure.
    async fn act_on_command(
        &self,
        action: &OperatorAction,
    ) -> Result<CommandRecord, OperatorActionError>;

    /// The recorded actions on one command, oldest first.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn command_actions(
        &self,
        command_id: &CommandId,
    ) -> Result<Vec<ActionRecord>, StoreError>;

    /// The attempt-error log of one command: its newest `limit` entries, newest first (by
    /// `recorded_at`, then `attempt`, descending), and how many it has in all. An unknown
    /// command has none. SQL stores read the index on `(command_id, recorded_at)` of migration
    /// m0013; the log is removed with its command by retention.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails or a row is corrupt.
    async fn command_errors(
        &self,
        command_id: &CommandId,
        limit: u32,
    ) -> Result<ErrorHistory, StoreError>;

    /// One command by id.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn command_by_id(
        &self,
        command_id: &CommandId,
    ) -> Result<Option<CommandRecord>, StoreError>;

    /// Counts of commands per (status, operation) for the given statuses, one aggregate query
    /// (no paging through rows). Pairs with no command are omitted.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn count_commands(
        &self,
        statuses: &[CommandStatus],
    ) -> Result<Vec<CommandCount>, StoreError>;

    /// How many commands match `filter` (every field but `after` and `limit`, which are
    /// ignored): one `COUNT` query, for the console's "N commands match" and the count a bulk
    /// action's confirmation states.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn count_matching(&self, filter: &CommandFilter) -> Result<u64, StoreError>;

    /// Commands of `status` grouped by their last error code, largest group first (ties by
    /// code), at most `limit` groups: one aggregate query (the `failed_at` index serves
    /// `failed`).
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn count_by_error_code(
        &self,
        status: CommandStatus,
        limit: u32,
    ) -> Result<Vec<ErrorCodeCount>, StoreError>;

    /// Commands that succeeded at or after `since` (their `completed_at`), newest first, at
    /// most `limit`: throughput per minute and enqueue-to-settle latency for the console. SQL
    /// stores read the `completed_at` index of the retention migration (m0010).
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn settled_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<SettledCommand>, StoreError>;

    /// The oldest pending command's age and the lease owners of processing commands: two
    /// aggregate queries over the live commands (the claim index).
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    async fn live_summary(&self) -> Result<LiveSummary, StoreError>;
}

/// Everything the lifecycle engine needs from storage.
pub trait LifecycleStore: CommandQueue + ControlSpaceReader + IntakeStore {}
impl<T: CommandQueue + ControlSpaceReader + IntakeStore> LifecycleStore for T {}

/// A failed KnowledgeFS call. The saga retries the command with `code`; a provision whose
/// outcome is unknown is resolved later by lookup of the provisioning key, never by a new key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
#[non_exhaustive]
pub struct RemoteError {
    /// How it failed: not dispatched, answered (with the HTTP status, when the remote speaks
    /// HTTP) or outcome unknown.
    pub failure: DispatchOutcome,
    /// Machine-readable code: the remote's `code` (a code Tenantry gives no rule to is
    /// [`ErrorCode::Other`], kept verbatim), or a transport code such as
    /// [`ErrorCode::RemoteUnavailable`] or [`ErrorCode::RemoteOutcomeUnknown`].
    pub code: ErrorCode,
    /// Human-readable detail.
    pub message: String,
    /// The remote's `Retry-After`, if any.
    pub retry_after: Option<Duration>,
    /// The transport's error (e.g. the HTTP client's), if any; see [`with_source`](Self::with_source).
    #[source]
    pub source: Option<ErrorSource>,
}

impl RemoteError {
    /// An error the remote answered with.
    pub fn answered(status: u16, code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        Self {
            failure: DispatchOutcome::answered(status),
            code: code.into(),
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// A call whose outcome is unknown.
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        Self {
            failure: DispatchOutcome::OutcomeUnknown,
            code: ErrorCode::RemoteOutcomeUnknown,
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// A call that never reached the remote.
    pub fn not_dispatched(message: impl Into<String>) -> Self {
        Self {
            failure: DispatchOutcome::NotDispatched,
            code: ErrorCode::RemoteUnavailable,
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// The same error keeping `error` (the transport's) as its
    /// [`source`](std::error::Error::source).
    #[must_use]
    pub fn with_source(mut self, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(ErrorSource::new(error));
        self
    }

    /// The same error keeping a source that is already shared (e.g. one taken from another
    /// error).
    #[must_use]
    pub fn with_shared_source(mut self, source: Option<ErrorSource>) -> Self {
        self.source = source;
        self
    }

    /// Adds a `Retry-After`.
    #[must_use]
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }
}

impl DispatchFailure for RemoteError {
    fn dispatch_outcome(&self) -> DispatchOutcome {
        self.failure
    }
}

/// KnowledgeFS lifecycle API v1 (see docs/protocol.md).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait KnowledgeFs: Send + Sync {
    /// Provisions a knowledge space; idempotent on the provisioning key.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError>;

    /// Authoritative lookup by provisioning key: `None` proves absence.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError>;

    /// Requests (or polls) the deletion of a knowledge space.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError>;

    /// Revokes a capability grant.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError>;
}

/// State of a dispatched task, as reported to metrics (reference: running, succeeded, retry,
/// dispatch_error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Claimed, about to dispatch.
    Running,
    /// Acked.
    Succeeded,
    /// Scheduled for another attempt.
    Retry,
    /// Dead-lettered (status `failed`): a non-retryable outcome or the attempt budget spent.
    Failed,
    /// Closed as moot without a remote call (status `superseded`).
    Moot,
    /// The attempt ended with an error and no settlement (the lease will expire).
    DispatchError,
}

impl TaskStatus {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Retry => "retry",
            Self::Failed => "failed",
            Self::Moot => "moot",
            Self::DispatchError => "dispatch_error",
        }
    }
}

/// One lifecycle task record.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskMetric {
    /// Operation name.
    pub operation: String,
    /// Task state.
    pub status: TaskStatus,
    /// Seconds since the command was created, for settled tasks (succeeded).
    pub duration_seconds: Option<f64>,
    /// Error code of a retry, failure, moot close or dispatch error.
    pub error_code: Option<String>,
}

/// What became of one lease renewal, as reported to metrics
/// (`tenantry_lifecycle_lease_renewals_total{outcome}`). A refused renewal is classified by
/// who has the command now (docs/protocol.md, "Leases, renewal and the attempt window"): only
/// [`Lost`](Self::Lost) means another holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenewalOutcome {
    /// The lease was extended.
    Renewed,
    /// Refused: another owner's attempt (a later lease epoch) has claimed the command. Renewal
    /// stopped; the only outcome logged as `LEASE_LOST`.
    Lost,
    /// Refused because this attempt's own settle ended the lease first (or the command was
    /// settled at this attempt's epoch): nothing was lost. Renewal stopped.
    Settled,
    /// Refused because this attempt handed its command back at shutdown
    /// (`SHUTDOWN_BEFORE_CALL`) first: nothing was lost. Renewal stopped.
    HandedBack,
    /// Refused because the lease had expired on the store's clock (a paused process or a slow
    /// store) and nobody else has claimed the command (nobody at all, or this same owner again
    /// after the expiry: its own re-claim is no takeover, case 014): this attempt sends nothing
    /// more and its call in flight is cancelled. Renewal stopped.
    Expired,
    /// The store failed (or, after a refusal, who has the command could not be read);
    /// renewal is tried again at the next tick unless it was refused.
    Failed,
}

impl RenewalOutcome {
    /// Every outcome, in label order of the documentation.
    pub const ALL: [Self; 6] = [
        Self::Renewed,
        Self::Lost,
        Self::Settled,
        Self::HandedBack,
        Self::Expired,
        Self::Failed,
    ];

    /// Label value: `renewed`, `lost`, `settled`, `handed_back`, `expired` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Renewed => "renewed",
            Self::Lost => "lost",
            Self::Settled => "settled",
            Self::HandedBack => "handed_back",
            Self::Expired => "expired",
            Self::Failed => "failed",
        }
    }
}

crate::error::message_error! {
    /// A metrics sink refused a record. Build it with [`MetricsError::new`], and keep the sink's
    /// own error with [`with_source`](MetricsError::with_source).
    pub struct MetricsError;
    display: "metrics sink failed";
    source: " The sink's own error (e.g. its exporter's), if any."
}

/// Where lifecycle task metrics go. A failure is logged by the engine and never breaks dispatch.
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait LifecycleMetrics: Send + Sync {
    /// Records one task state.
    ///
    /// # Errors
    /// [`MetricsError`] when the sink fails.
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError>;

    /// Records one lease renewal of a dispatch in flight of `operation`. The default ignores it.
    ///
    /// # Errors
    /// [`MetricsError`] when the sink fails.
    fn record_lease_renewal(
        &self,
        operation: &str,
        outcome: RenewalOutcome,
    ) -> Result<(), MetricsError> {
        let _ = (operation, outcome);
        Ok(())
    }
}

/// A metrics sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl LifecycleMetrics for NoMetrics {
    fn record_task(&self, _metric: &TaskMetric) -> Result<(), MetricsError> {
        Ok(())
    }
}
