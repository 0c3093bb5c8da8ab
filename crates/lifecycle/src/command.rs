//! Outbox commands, their payloads, leases and settlements.
//!
//! A command is one row of `lifecycle_outbox`. A worker *claims* it (status `processing`,
//! lease owner, lease expiry, lease epoch + 1, attempt count + 1), delivers it to KnowledgeFS
//! with no database transaction open, then *settles* it with a [`Settlement`]: ack, retry or
//! (for another command) supersede. Every settle is a compare-and-set on the lease owner and
//! lease epoch it claimed with ([`LeaseToken`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenantry_kernel::{
    CommandId, ControlSpaceId, Fingerprint, GrantId, IdempotencyKey, KnowledgeSpaceId, LeaseEpoch,
    LeaseOwner, OperationId, ProvisioningKey, TenantId,
};

use crate::control_space::{CasUpdate, ControlSpace};

/// What a command asks KnowledgeFS to do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Create the knowledge space of a control space.
    Provision,
    /// Delete the knowledge space of a control space.
    Delete,
    /// Revoke a capability grant on the knowledge space.
    Revoke,
    /// A stored operation this version does not know; it is retried with `UNSUPPORTED_OPERATION`.
    Unsupported(String),
}

impl Operation {
    /// Stored name: `provision`, `delete`, `revoke`, or the unknown name as stored.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Provision => "provision",
            Self::Delete => "delete",
            Self::Revoke => "revoke",
            Self::Unsupported(name) => name,
        }
    }

    /// Parses a stored name; unknown names become [`Operation::Unsupported`].
    pub fn parse(value: &str) -> Self {
        match value {
            "provision" => Self::Provision,
            "delete" => Self::Delete,
            "revoke" => Self::Revoke,
            other => Self::Unsupported(other.to_owned()),
        }
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Status of an outbox command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum CommandStatus {
    /// Waiting for `next_attempt_at`.
    Pending,
    /// Claimed under a lease (reclaimable once the lease expires).
    Processing,
    /// Settled with an ack. Terminal.
    Succeeded,
    /// Cancelled before it could take effect: by another command (a deletion supersedes the
    /// provision it overtakes), or found moot at dispatch (a revocation of a control space that
    /// is being deleted). Terminal.
    Superseded,
    /// Dead-lettered: a non-retryable outcome, or the attempt budget ran out
    /// (see [`crate::failure`]). Terminal until an operator retries it.
    Failed,
    /// Given up by an operator (`commands abandon`). Terminal.
    Abandoned,
}

impl CommandStatus {
    /// Stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Processing => "processing",
            Self::Succeeded => "succeeded",
            Self::Superseded => "superseded",
            Self::Failed => "failed",
            Self::Abandoned => "abandoned",
        }
    }

    /// Parses a stored name.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "pending" => Some(Self::Pending),
            "processing" => Some(Self::Processing),
            "succeeded" => Some(Self::Succeeded),
            "superseded" => Some(Self::Superseded),
            "failed" => Some(Self::Failed),
            "abandoned" => Some(Self::Abandoned),
            _ => None,
        }
    }

    /// Every status, in lifecycle order.
    pub const ALL: [Self; 6] = [
        Self::Pending,
        Self::Processing,
        Self::Succeeded,
        Self::Superseded,
        Self::Failed,
        Self::Abandoned,
    ];

    /// Whether no further attempt will be made (an operator may still retry a `failed` one).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Superseded | Self::Failed | Self::Abandoned
        )
    }

    /// Whether an operator may retry or abandon a command in this status (`pending` or
    /// `failed`; a `processing` one is in flight, the others are settled for good).
    pub fn accepts_operator_action(self) -> bool {
        matches!(self, Self::Pending | Self::Failed)
    }
}

impl std::fmt::Display for CommandStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Payload of a provision command (stored as JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvisionPayload {
    /// Key on which the remote provision is idempotent.
    pub provisioning_key: ProvisioningKey,
    /// Display name of the knowledge space.
    pub name: String,
    /// URL-safe short name.
    pub slug: String,
    /// Icon reference (free text).
    #[serde(default)]
    pub icon: String,
    /// Description (free text).
    #[serde(default)]
    pub description: String,
    /// Optional model intent passed through to KnowledgeFS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_intent: Option<Value>,
    /// Optional profile intent passed through to KnowledgeFS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_intent: Option<Value>,
}

/// Payload of a delete command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletePayload {
    /// Provisioning key of the space, used for lost-ACK recovery.
    pub provisioning_key: ProvisioningKey,
}

/// Payload of a revoke command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokePayload {
    /// The knowledge space holding the grant.
    pub knowledge_space_id: KnowledgeSpaceId,
    /// The grant to revoke.
    pub grant_id: GrantId,
    /// Event id of this revocation (the operation id).
    pub event_id: String,
    /// Why the grant is revoked.
    pub reason_code: String,
    /// Position of this revocation; acked only when the remote watermark reaches it.
    pub revoke_sequence: i64,
    /// Remote revision the revocation was computed against.
    pub expected_revision: i64,
}

/// A command's payload parsed according to its operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandBody {
    /// Provision.
    Provision(ProvisionPayload),
    /// Delete.
    Delete(DeletePayload),
    /// Revoke.
    Revoke(RevokePayload),
    /// An operation this version does not dispatch.
    Unsupported(String),
}

/// A stored payload does not match its operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payload of {operation} command is invalid: {reason}")]
pub struct PayloadError {
    /// The command's operation.
    pub operation: String,
    /// What the JSON decoder reported.
    pub reason: String,
}

/// The lease a claim handed out: presented by every settle of the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseToken {
    /// The claimed command.
    pub command_id: CommandId,
    /// The worker that holds the lease.
    pub owner: LeaseOwner,
    /// The epoch of this claim (fencing token).
    pub epoch: LeaseEpoch,
    /// When the lease expires; after that another worker may reclaim the command.
    pub expires_at: DateTime<Utc>,
}

/// A command as handed to the worker that claimed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedCommand {
    /// Owning tenant (the KnowledgeFS namespace).
    pub tenant_id: TenantId,
    /// Target control space.
    pub control_space_id: ControlSpaceId,
    /// The lifecycle operation this command belongs to.
    pub operation_id: OperationId,
    /// The caller's idempotency key of the request that created the command (intake
    /// replays). Not sent to KnowledgeFS: see [`ClaimedCommand::remote_idempotency_key`].
    pub idempotency_key: IdempotencyKey,
    /// What to do.
    pub operation: Operation,
    /// Stored JSON payload.
    pub payload: Value,
    /// Number of claims so far, including this one.
    pub attempt_count: i32,
    /// `attempt_count` when the current attempt budget began: 0, or the count at the last
    /// operator retry. `attempt_count - attempt_budget_base` is checked against
    /// [`RetryPolicy::max_attempts`](crate::RetryPolicy::max_attempts).
    pub attempt_budget_base: i32,
    /// The lease of this claim.
    pub lease: LeaseToken,
    /// When the claim happened, by the store's clock (the database clock for SQL stores). The
    /// engine measures elapsed time from here, so the timestamps it computes at settle time
    /// (`next_attempt_at`, `completed_at`) are on the store's clock too.
    pub claimed_at: DateTime<Utc>,
    /// When the command was enqueued.
    pub created_at: DateTime<Utc>,
    /// The command's control space as the store read it right after the claim, so the saga's
    /// first step need not read it again (docs/protocol.md, "The control space comes with the
    /// claim").
    pub control_space: ClaimedControlSpace,
    /// The W3C trace context (`traceparent` value) stored with the command at intake, if any:
    /// the dispatch's span continues it, so one command is one trace across attempts.
    pub trace_context: Option<String>,
}

/// The control space a claim hands over with its command ([`ClaimedCommand::control_space`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ClaimedControlSpace {
    /// The store did not read it; the saga reads it itself (stores that do not carry it, and
    /// commands built by hand).
    #[default]
    NotRead,
    /// Read after the claim took effect: the row (`None` when no such control space exists).
    Read(Option<ControlSpace>),
}

impl ClaimedCommand {
    /// Claims made in the current attempt budget, this one included.
    pub fn attempts_in_budget(&self) -> i32 {
        self.attempt_count.saturating_sub(self.attempt_budget_base)
    }

    /// The outbox id.
    pub fn id(&self) -> &CommandId {
        &self.lease.command_id
    }

    /// The `Idempotency-Key` sent to KnowledgeFS with every request of this command: its
    /// outbox id, so the key is the same on every attempt of the command and unique to it.
    ///
    /// Why not the caller's key: a caller's key may be used again once its command was pruned
    /// (docs/protocol.md, "Idempotency key lifetime"), and KnowledgeFS remembers keys for good;
    /// a new request under the old key would then be refused remotely with
    /// `IDEMPOTENCY_KEY_REUSED` and could never complete (case 013; a deviation from the
    /// reference, which sends the caller's key). Command ids follow the same id rules as
    /// idempotency keys, so the conversion cannot fail; should it ever, the caller's key is
    /// sent as before.
    pub fn remote_idempotency_key(&self) -> IdempotencyKey {
        IdempotencyKey::parse(self.id().as_str()).unwrap_or_else(|_| self.idempotency_key.clone())
    }

    /// Parses the payload according to the operation.
    ///
    /// # Errors
    /// [`PayloadError`] when the stored JSON does not have the operation's shape.
    pub fn body(&self) -> Result<CommandBody, PayloadError> {
        fn parse<T: serde::de::DeserializeOwned>(
            op: &Operation,
            v: &Value,
        ) -> Result<T, PayloadError> {
            serde_json::from_value(v.clone()).map_err(|e| PayloadError {
                operation: op.to_string(),
                reason: e.to_string(),
            })
        }
        Ok(match &self.operation {
            Operation::Provision => CommandBody::Provision(parse(&self.operation, &self.payload)?),
            Operation::Delete => CommandBody::Delete(parse(&self.operation, &self.payload)?),
            Operation::Revoke => CommandBody::Revoke(parse(&self.operation, &self.payload)?),
            Operation::Unsupported(name) => CommandBody::Unsupported(name.clone()),
        })
    }
}

/// A command row as read for listing, lookups and idempotent replays.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRecord {
    /// Outbox id.
    pub id: CommandId,
    /// Owning tenant.
    pub tenant_id: TenantId,
    /// Target control space.
    pub control_space_id: ControlSpaceId,
    /// Lifecycle operation id.
    pub operation_id: OperationId,
    /// Idempotency key (unique across the outbox).
    pub idempotency_key: IdempotencyKey,
    /// Fingerprint of the request that created the command.
    pub request_fingerprint: Fingerprint,
    /// What to do.
    pub operation: Operation,
    /// Stored JSON payload.
    pub payload: Value,
    /// Current status.
    pub status: CommandStatus,
    /// Number of claims so far (never reset, so a retried provision still shows it may have
    /// been dispatched).
    pub attempt_count: i32,
    /// `attempt_count` when the current attempt budget began (0, or the count at the last
    /// operator retry).
    pub attempt_budget_base: i32,
    /// Current or last lease owner.
    pub lease_owner: Option<LeaseOwner>,
    /// Current or last lease expiry.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Epoch of the last claim (0 if never claimed).
    pub lease_epoch: LeaseEpoch,
    /// Earliest time of the next claim while pending.
    pub next_attempt_at: DateTime<Utc>,
    /// The command's turn (store clock, milliseconds): due commands are claimed in turn order.
    /// Set once at intake by [`crate::turn::next_turn`]; kept by retries and operator actions.
    pub turn_at: DateTime<Utc>,
    /// Code of the last retry, failure, supersede or operator abandon.
    pub last_error_code: Option<crate::ErrorCode>,
    /// Message of the last retry or supersede.
    pub last_error_message: Option<String>,
    /// Enqueue time.
    pub created_at: DateTime<Utc>,
    /// Time of the terminal settle.
    pub completed_at: Option<DateTime<Utc>>,
    /// The latest time (store clock) at which the most recent attempt could still send a
    /// request: the lease expiry while processing (moved by renewals), the settle time once
    /// settled; `None` while never claimed. A deletion completes on proven remote absence only
    /// a grace period after this time (docs/protocol.md).
    pub attempt_window_ends_at: Option<DateTime<Utc>>,
    /// The W3C trace context (`traceparent` value) intake recorded for the command, opaque to
    /// the domain: each dispatch continues that trace (docs/operations.md, "Tracing").
    pub trace_context: Option<String>,
}

impl CommandRecord {
    /// The record of `command` as intake inserts it at store time `now`: pending, never
    /// claimed, due at once (`next_attempt_at = created_at = now`), its turn `now` (the turn of
    /// a tenant without live commands; intake sets [`Self::turn_at`] by
    /// [`crate::turn::next_turn`]).
    pub fn enqueued(command: &crate::intake::NewCommand, now: DateTime<Utc>) -> Self {
        Self {
            id: command.id.clone(),
            tenant_id: command.tenant_id.clone(),
            control_space_id: command.control_space_id.clone(),
            operation_id: command.operation_id.clone(),
            idempotency_key: command.idempotency_key.clone(),
            request_fingerprint: command.request_fingerprint.clone(),
            operation: command.operation.clone(),
            payload: command.payload.clone(),
            status: CommandStatus::Pending,
            attempt_count: 0,
            attempt_budget_base: 0,
            lease_owner: None,
            lease_expires_at: None,
            lease_epoch: LeaseEpoch(0),
            next_attempt_at: now,
            turn_at: now,
            last_error_code: None,
            last_error_message: None,
            created_at: now,
            completed_at: None,
            attempt_window_ends_at: None,
            trace_context: command.trace_context.clone(),
        }
    }
}

/// An error code and message recorded on a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorRecord {
    /// Stable machine-readable code, e.g. [`REMOTE_DELETION_PENDING`](crate::ErrorCode::RemoteDeletionPending).
    pub code: crate::ErrorCode,
    /// Human-readable detail.
    pub message: String,
}

impl ErrorRecord {
    /// Builds a record, bounded as it will be stored ([`crate::code::bounded_error`]): a
    /// code that is not an upper-case identifier becomes `REMOTE_ERROR_CODE_INVALID` (the
    /// original quoted in the message), and the message loses its control characters and is
    /// cut to [`MAX_MESSAGE_BYTES`](tenantry_kernel::text::MAX_MESSAGE_BYTES) bytes.
    pub fn new(code: impl Into<crate::ErrorCode>, message: impl Into<String>) -> Self {
        let message = message.into();
        let (code, message) = crate::code::bounded_error(code.into(), &message);
        Self { code, message }
    }
}

/// How the claimed command itself is settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    /// Done: status `succeeded`, `completed_at` set, lease cleared.
    Ack {
        /// Settle time.
        completed_at: DateTime<Utc>,
    },
    /// Try again later: status `pending` at `next_attempt_at`, error recorded, lease cleared.
    Retry {
        /// Earliest next claim.
        next_attempt_at: DateTime<Utc>,
        /// Why.
        error: ErrorRecord,
    },
    /// Dead-letter: status `failed`, `completed_at` set, error recorded, lease cleared. Reached
    /// on a non-retryable outcome or when the attempt budget is spent.
    Fail {
        /// Settle time.
        completed_at: DateTime<Utc>,
        /// Why (the code of the permanent or last error).
        error: ErrorRecord,
    },
    /// Moot: status `superseded`, `completed_at` set, error recorded, lease cleared, with no
    /// remote call (a revocation of a control space that is being deleted or is deleted).
    Moot {
        /// Settle time.
        completed_at: DateTime<Utc>,
        /// Why.
        error: ErrorRecord,
    },
}

impl CommandOutcome {
    /// The status the command has after this outcome.
    pub fn status(&self) -> CommandStatus {
        match self {
            Self::Ack { .. } => CommandStatus::Succeeded,
            Self::Retry { .. } => CommandStatus::Pending,
            Self::Fail { .. } => CommandStatus::Failed,
            Self::Moot { .. } => CommandStatus::Superseded,
        }
    }

    /// The settle time of a terminal outcome (`None` for a retry).
    pub fn completed_at(&self) -> Option<DateTime<Utc>> {
        match self {
            Self::Ack { completed_at }
            | Self::Fail { completed_at, .. }
            | Self::Moot { completed_at, .. } => Some(*completed_at),
            Self::Retry { .. } => None,
        }
    }

    /// The error recorded by this outcome (`None` for an ack).
    pub fn error(&self) -> Option<&ErrorRecord> {
        match self {
            Self::Ack { .. } => None,
            Self::Retry { error, .. } | Self::Fail { error, .. } | Self::Moot { error, .. } => {
                Some(error)
            }
        }
    }
}

/// Which condition a superseded command must still meet when the supersede is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SupersedeRule {
    /// Pending and never claimed (`attempt_count = 0`): it has certainly not reached the remote.
    Unattempted,
    /// Pending, or processing under a lease that expired by the store's clock, and provably
    /// quiet when the lookup looked: never claimed (`attempt_count = 0`), or its last attempt
    /// window (`attempt_window_ends_at`) ended at least `grace` before `observed_at` (and before
    /// the store's clock). Used when an authoritative remote lookup proved the target absent:
    /// no request of the command could still land after the lookup observed the absence
    /// (docs/protocol.md, "A deletion never orphans a remote space" and "Absence is judged when
    /// the lookup was sent").
    AfterRemoteAbsence {
        /// How long after its last attempt window a request may still land remotely (e.g. a
        /// gateway answered 504 while the backend went on).
        grace: std::time::Duration,
        /// When the lookup that observed the absence was sent (the store's clock as the
        /// dispatcher estimated it just before sending). Quietness is judged at this instant,
        /// not when the answer arrived: a request landing between the two would be missed.
        observed_at: DateTime<Utc>,
    },
}

/// Cancel another command (e.g. the provision of a control space being deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supersede {
    /// The command to cancel.
    pub command_id: CommandId,
    /// The condition it must still meet; otherwise the whole settlement is refused.
    pub rule: SupersedeRule,
    /// Settle time.
    pub completed_at: DateTime<Utc>,
    /// Recorded reason.
    pub error: ErrorRecord,
}

/// Everything one saga step writes, in one transaction: all of it or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// How the claimed command is settled; `None` keeps it processing under the same lease
    /// (used to register a recovered identity before the remote deletion call).
    pub outcome: Option<CommandOutcome>,
    /// A compare-and-set of the control space, if the step changes it.
    pub control_space: Option<CasUpdate>,
    /// Another command to supersede, if any.
    pub supersede: Option<Supersede>,
    /// Whether this attempt may have sent a request to the remote (default `true`, the safe
    /// answer). An attempt that provably sent nothing (acked without delivery, a payload that
    /// does not parse) settles with `false`: the store then keeps the command's attempt window
    /// as it was before this claim, so a deletion does not wait out a grace period for a
    /// request that was never sent (docs/protocol.md, "A deletion never orphans a remote space").
    pub may_have_sent: bool,
    /// Whether this claim counts against the attempt budget (default `true`). A claim handed
    /// back before its remote call was made ([`Self::gives_attempt_back`]) settles with `false`:
    /// the store then raises `attempt_budget_base` by one (with an outcome only), so the claim
    /// spends neither the budget nor a backoff step; `attempt_count` still counts it.
    pub spends_attempt: bool,
}

impl Settlement {
    /// Ack only.
    pub fn ack(completed_at: DateTime<Utc>) -> Self {
        Self {
            outcome: Some(CommandOutcome::Ack { completed_at }),
            control_space: None,
            supersede: None,
            may_have_sent: true,
            spends_attempt: true,
        }
    }

    /// Retry only.
    pub fn retry(next_attempt_at: DateTime<Utc>, error: ErrorRecord) -> Self {
        Self {
            outcome: Some(CommandOutcome::Retry {
                next_attempt_at,
                error,
            }),
            control_space: None,
            supersede: None,
            may_have_sent: true,
            spends_attempt: true,
        }
    }

    /// Marks this attempt as one that provably sent nothing to the remote.
    #[must_use]
    pub fn nothing_sent(mut self) -> Self {
        self.may_have_sent = false;
        self
    }

    /// Marks this claim as one handed back before its remote call was made (the worker pool
    /// shut down while it waited for a call slot): it provably sent nothing, and it gives its
    /// attempt back to the budget ([`Self::spends_attempt`] `false`; issue 29).
    #[must_use]
    pub fn gives_attempt_back(mut self) -> Self {
        self.may_have_sent = false;
        self.spends_attempt = false;
        self
    }

    /// Dead-letter only (status `failed`).
    pub fn fail(completed_at: DateTime<Utc>, error: ErrorRecord) -> Self {
        Self {
            outcome: Some(CommandOutcome::Fail {
                completed_at,
                error,
            }),
            control_space: None,
            supersede: None,
            may_have_sent: true,
            spends_attempt: true,
        }
    }

    /// Moot only (status `superseded`, no remote call).
    pub fn moot(completed_at: DateTime<Utc>, error: ErrorRecord) -> Self {
        Self {
            outcome: Some(CommandOutcome::Moot {
                completed_at,
                error,
            }),
            control_space: None,
            supersede: None,
            may_have_sent: false,
            spends_attempt: true,
        }
    }

    /// Adds a control-space compare-and-set.
    #[must_use]
    pub fn with_control_space(mut self, cas: CasUpdate) -> Self {
        self.control_space = Some(cas);
        self
    }

    /// Adds a supersede of another command.
    #[must_use]
    pub fn with_supersede(mut self, supersede: Supersede) -> Self {
        self.supersede = Some(supersede);
        self
    }

    /// Whether the claimed command reaches a terminal status (acked, failed or moot).
    pub fn completes(&self) -> bool {
        self.outcome
            .as_ref()
            .is_some_and(|o| o.status().is_terminal())
    }

    /// The status the claimed command gets (`None`: it stays processing).
    pub fn status(&self) -> Option<CommandStatus> {
        self.outcome.as_ref().map(CommandOutcome::status)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    /// A command record of `operation` in `status`: tenant `t1`, control space `cs1`, one
    /// attempt made, no lease held, created at `at(0)`, payload `{}`. Tests set the
    /// fields they are about.
    pub(crate) fn record(
        id: &str,
        operation: crate::command::Operation,
        status: crate::command::CommandStatus,
    ) -> crate::command::CommandRecord {
        crate::command::CommandRecord {
            id: tenantry_kernel::CommandId::parse(id).unwrap(),
            tenant_id: tenantry_kernel::TenantId::parse("t1").unwrap(),
            control_space_id: tenantry_kernel::ControlSpaceId::parse("cs1").unwrap(),
            operation_id: crate::control_space::tests::op("op"),
            idempotency_key: tenantry_kernel::IdempotencyKey::parse("k").unwrap(),
            request_fingerprint: tenantry_kernel::Fingerprint::from_stored("f"),
            operation,
            payload: serde_json::json!({}),
            status,
            attempt_count: 1,
            attempt_budget_base: 0,
            lease_owner: None,
            lease_expires_at: None,
            lease_epoch: tenantry_kernel::LeaseEpoch(1),
            next_attempt_at: crate::control_space::tests::at(0),
            turn_at: crate::control_space::tests::at(0),
            last_error_code: None,
            last_error_message: None,
            created_at: crate::control_space::tests::at(0),
            completed_at: None,
            attempt_window_ends_at: None,
            trace_context: None,
        }
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn operation_and_status_names_round_trip() {
        for op in [Operation::Provision, Operation::Delete, Operation::Revoke] {
            assert_eq!(Operation::parse(op.as_str()), op);
        }
        assert_eq!(
            Operation::parse("rename"),
            Operation::Unsupported("rename".into())
        );
        for s in CommandStatus::ALL {
            assert_eq!(CommandStatus::parse(s.as_str()), Some(s));
        }
        assert!(CommandStatus::Succeeded.is_terminal());
        assert!(CommandStatus::Failed.is_terminal());
        assert!(CommandStatus::Abandoned.is_terminal());
        assert!(!CommandStatus::Processing.is_terminal());
        let operable: Vec<_> = CommandStatus::ALL
            .into_iter()
            .filter(|s| s.accepts_operator_action())
            .collect();
        assert_eq!(operable, [CommandStatus::Pending, CommandStatus::Failed]);
    }

    #[test]
    fn payloads_have_a_stable_json_shape() {
        let provision = ProvisionPayload {
            provisioning_key: ProvisioningKey::parse("pk").unwrap(),
            name: "Docs".into(),
            slug: "docs".into(),
            icon: "book".into(),
            description: "d".into(),
            model_intent: None,
            profile_intent: Some(json!({"tier": "pro"})),
        };
        let value = serde_json::to_value(&provision).unwrap();
        assert_eq!(
            value,
            json!({"provisioning_key": "pk", "name": "Docs", "slug": "docs", "icon": "book",
                   "description": "d", "profile_intent": {"tier": "pro"}})
        );
        assert_eq!(
            serde_json::from_value::<ProvisionPayload>(value).unwrap(),
            provision
        );
        let revoke = RevokePayload {
            knowledge_space_id: KnowledgeSpaceId::parse("ks").unwrap(),
            grant_id: GrantId::parse("g").unwrap(),
            event_id: "op".into(),
            reason_code: "user_removed".into(),
            revoke_sequence: 2,
            expected_revision: 5,
        };
        let value = serde_json::to_value(&revoke).unwrap();
        assert_eq!(
            value,
            json!({"knowledge_space_id": "ks", "grant_id": "g", "event_id": "op",
                   "reason_code": "user_removed", "revoke_sequence": 2, "expected_revision": 5})
        );
        assert_eq!(
            serde_json::from_value::<RevokePayload>(value).unwrap(),
            revoke
        );
    }
}
