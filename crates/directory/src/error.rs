//! Why the projection refused an input.
//!
//! Every variant names the offending entity and says who is at fault: the provider sent an
//! inconsistent or older answer ("the directory ..."), another replica moved the shared
//! projection ahead ("superseded", "replica behind"), or the local database holds a row the
//! projection must not take over ("local ..."). A refused input changes nothing.

use crate::ids::{AccountUuid, EventUuid, InstanceUuid, MembershipUuid, WorkspaceUuid};

/// A rule of the directory projection refused an input; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryError {
    // ----- capacity -----
    /// The snapshot has more workspaces than `max_snapshot_workspaces` (the service's
    /// setting `directory_max_snapshot_workspaces`, named in the message).
    #[error(
        "directory snapshot workspace capacity exceeded ({count} > {limit}); raise the setting directory_max_snapshot_workspaces (TENANTRY_DIRECTORY_MAX_SNAPSHOT_WORKSPACES) or shrink the directory"
    )]
    SnapshotWorkspaceCapacity {
        /// Workspaces in the snapshot.
        count: usize,
        /// Configured limit.
        limit: usize,
    },
    /// The snapshot or delta has more memberships than `max_snapshot_memberships` (the
    /// service's setting `directory_max_snapshot_memberships`, named in the message).
    #[error(
        "directory membership capacity exceeded ({count} > {limit}); raise the setting directory_max_snapshot_memberships (TENANTRY_DIRECTORY_MAX_SNAPSHOT_MEMBERSHIPS) or shrink the directory"
    )]
    MembershipCapacity {
        /// Memberships in the input.
        count: usize,
        /// Configured limit.
        limit: usize,
    },
    /// The input itself has more active workspaces than `max_active_workspaces` (the
    /// service's setting `directory_max_active_workspaces`, named in the message).
    #[error(
        "directory active workspace capacity exceeded ({count} > {limit}); raise the setting directory_max_active_workspaces (TENANTRY_DIRECTORY_MAX_ACTIVE_WORKSPACES)"
    )]
    ActiveWorkspaceCapacity {
        /// Active workspaces in the input.
        count: usize,
        /// Configured limit.
        limit: usize,
    },
    /// After applying, the instance would have more active projected workspaces than allowed.
    #[error(
        "projected active workspace capacity exceeded ({count} > {limit}); raise the setting directory_max_active_workspaces (TENANTRY_DIRECTORY_MAX_ACTIVE_WORKSPACES)"
    )]
    ProjectedActiveWorkspaceCapacity {
        /// Active projected workspaces the instance would have.
        count: u64,
        /// Configured limit.
        limit: usize,
    },

    // ----- shape of provider answers -----
    /// The answer is for another instance.
    #[error(
        "directory {what} targets instance {actual}, not {expected}: check the provider URL and instance id"
    )]
    WrongInstance {
        /// `snapshot`, `delta` or `event batch`.
        what: &'static str,
        /// The configured instance.
        expected: InstanceUuid,
        /// The instance named in the answer.
        actual: InstanceUuid,
    },
    /// The event batch answers another `after` cursor than requested.
    #[error("directory event batch answers after_cursor {actual}, but {expected} was requested")]
    BatchCursorMismatch {
        /// The requested cursor.
        expected: i64,
        /// The cursor in the answer.
        actual: i64,
    },
    /// Cursors of the batch are out of order (provider bug).
    #[error("directory event batch is malformed: {reason}")]
    MalformedBatch {
        /// What is inconsistent.
        reason: String,
    },
    /// The batch has an event type this projection does not understand.
    #[error("directory event {event} has unsupported type {event_type:?}")]
    UnsupportedEventType {
        /// The event.
        event: EventUuid,
        /// Its type.
        event_type: String,
    },
    /// The payload names another workspace than the event's aggregate.
    #[error(
        "directory event {event} payload has a conflicting workspace scope (aggregate {aggregate})"
    )]
    EventScopeConflict {
        /// The event.
        event: EventUuid,
        /// The event's aggregate.
        aggregate: WorkspaceUuid,
    },
    /// The payload revision is missing, not an integer, or differs from the event revision.
    #[error("directory event {event} payload field {field} is not the integer {revision}")]
    EventRevisionConflict {
        /// The event.
        event: EventUuid,
        /// `directory_revision` or `entitlement_revision`.
        field: &'static str,
        /// The event's revision.
        revision: i64,
    },
    /// A snapshot or delta lists one workspace twice.
    #[error("directory answer lists workspace {workspace} more than once")]
    DuplicateWorkspace {
        /// The workspace.
        workspace: WorkspaceUuid,
    },
    /// A workspace lists one account twice.
    #[error("directory workspace {workspace} lists account {account} more than once")]
    DuplicateMember {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// The account.
        account: AccountUuid,
    },
    /// One membership uuid is used for two memberships of the answer.
    #[error("directory membership uuid {membership} is used for more than one membership")]
    DuplicateMembershipUuid {
        /// The membership.
        membership: MembershipUuid,
    },
    /// A member's email is empty or not normalized (trimmed, lowercase).
    #[error("directory account {account} has an email that is empty or not normalized")]
    InvalidEmail {
        /// The account.
        account: AccountUuid,
    },
    /// A directory revision is below 1 (revision 0 marks platform-owned memberships).
    #[error("directory {what} {id} has revision {revision}; directory revisions start at 1")]
    InvalidRevision {
        /// `membership` or `workspace`.
        what: &'static str,
        /// The entity.
        id: String,
        /// Its revision.
        revision: i64,
    },

    // ----- snapshot / shared state -----
    /// The provider served a snapshot older than what the shared projection already applied
    /// (a lagging or cached provider, or another replica that applied newer events first).
    #[error(
        "the directory provider served a snapshot at cursor {snapshot_cursor}, older than cursor {projected_cursor} already applied to the shared projection; nothing was written (a lagging or cached provider answers this way, and so does a race with another replica that applied newer events)"
    )]
    SnapshotSuperseded {
        /// The snapshot's cursor.
        snapshot_cursor: i64,
        /// The shared projection cursor.
        projected_cursor: i64,
    },
    /// A snapshot at the projected cursor has other contents than the projection.
    #[error(
        "directory snapshot cursor {cursor} has conflicting contents (fingerprint differs from the projected one)"
    )]
    SnapshotConflict {
        /// The cursor.
        cursor: i64,
    },
    /// No snapshot was ever applied for this instance.
    #[error(
        "directory projection state is missing for instance {instance}: initialize from a snapshot first"
    )]
    StateMissing {
        /// The instance.
        instance: InstanceUuid,
    },
    /// The shared cursor is behind what this replica already consumed.
    #[error("directory projection state cursor rolled back ({state_cursor} < {expected})")]
    StateCursorRolledBack {
        /// The shared cursor.
        state_cursor: i64,
        /// The cursor this replica expected at least.
        expected: i64,
    },
    /// Another replica advanced the shared cursor past this replica's.
    #[error(
        "this replica (cursor {replica_cursor}) has not consumed the shared directory high-water mark {shared_cursor}"
    )]
    ReplicaBehindHighWater {
        /// This replica's cursor.
        replica_cursor: i64,
        /// The shared cursor.
        shared_cursor: i64,
    },
    /// An event page without events that does not prove the replica is caught up: its
    /// cursors are not all equal, so the provider reports changes it did not serve.
    #[error(
        "directory event page after cursor {after_cursor} holds no events but reports cursor {cursor} and high-water cursor {high_water_cursor}; an empty page proves freshness only when all three are equal, so readiness is not renewed (the provider is lagging or replayed an old page)"
    )]
    EmptyPageNotCaughtUp {
        /// The page's `after_cursor`.
        after_cursor: i64,
        /// The page's `cursor`.
        cursor: i64,
        /// The page's `high_water_cursor`.
        high_water_cursor: i64,
    },
    /// An event batch with `directory.changed` events was applied without a delta.
    #[error("directory changes require a workspace delta or a full snapshot")]
    DirectoryChangesNeedDelta,
    /// The delta does not answer exactly the workspaces named by the batch's directory events.
    #[error("directory delta does not match its event batch (requested workspaces differ)")]
    DeltaMismatch,
    /// The delta returned a workspace that was not requested.
    #[error("directory delta returned workspace {workspace} that was not requested")]
    DeltaUnrequestedWorkspace {
        /// The workspace.
        workspace: WorkspaceUuid,
    },
    /// The delta's workspace is older than the event that announced it.
    #[error(
        "directory workspace {workspace} delta revision {revision} is older than its event notification {required}"
    )]
    DeltaOlderThanEvent {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// Revision in the delta.
        revision: i64,
        /// Revision announced by the event.
        required: i64,
    },

    // ----- inbox -----
    /// An event uuid was seen before with another cursor or other contents.
    #[error("directory event {event} has conflicting contents with its earlier receipt")]
    ReceiptConflict {
        /// The event.
        event: EventUuid,
    },
    /// The shared cursor passed this event but its receipt is missing.
    #[error(
        "directory projection cursor advanced past event {event} (cursor {cursor}) without its receipt"
    )]
    MissingReceipt {
        /// The event.
        event: EventUuid,
        /// Its cursor.
        cursor: i64,
    },

    // ----- accounts -----
    /// One email maps to several accounts in one answer.
    #[error("directory maps email {email:?} to several accounts ({first} and {second})")]
    EmailMapsToSeveralAccounts {
        /// The email.
        email: String,
        /// The first account.
        first: AccountUuid,
        /// The second account.
        second: AccountUuid,
    },
    /// One account appears with different email, name or status in one answer.
    #[error("directory has conflicting projections of account {account}")]
    ConflictingAccountProjections {
        /// The account.
        account: AccountUuid,
    },
    /// The email already belongs to another local account.
    #[error("directory account {account} email collides with account {other}")]
    EmailCollision {
        /// The projected account.
        account: AccountUuid,
        /// The account that owns the email locally.
        other: AccountUuid,
    },
    /// A local (non-directory) account has this uuid.
    #[error("directory account {account} collides with a local account of the same uuid")]
    LocalAccountCollision {
        /// The account.
        account: AccountUuid,
    },
    /// The stored account is newer than this projection.
    #[error("directory account {account} revision rolled back ({stored} > {incoming})")]
    AccountRevisionRolledBack {
        /// The account.
        account: AccountUuid,
        /// Stored revision.
        stored: i64,
        /// Incoming revision.
        incoming: i64,
    },
    /// Same account revision, other contents.
    #[error("directory account {account} revision {revision} has conflicting contents")]
    AccountRevisionConflict {
        /// The account.
        account: AccountUuid,
        /// The revision.
        revision: i64,
    },

    // ----- workspaces -----
    /// The workspace is projected by another instance.
    #[error("directory workspace {workspace} belongs to another instance")]
    WorkspaceOtherInstance {
        /// The workspace.
        workspace: WorkspaceUuid,
    },
    /// A local workspace has this uuid.
    #[error("directory workspace {workspace} collides with a local workspace of the same uuid")]
    LocalWorkspaceCollision {
        /// The workspace.
        workspace: WorkspaceUuid,
    },
    /// The stored workspace is newer.
    #[error("directory workspace {workspace} revision rolled back ({stored} > {incoming})")]
    WorkspaceRevisionRolledBack {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// Stored revision.
        stored: i64,
        /// Incoming revision.
        incoming: i64,
    },
    /// Same workspace revision, other contents.
    #[error("directory workspace {workspace} revision {revision} has conflicting contents")]
    WorkspaceRevisionConflict {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// The revision.
        revision: i64,
    },
    /// An active workspace's creator is not among the projected accounts.
    #[error("active directory workspace {workspace} creator {creator} is not projected")]
    CreatorNotProjected {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// The creator.
        creator: AccountUuid,
    },

    // ----- memberships -----
    /// The membership uuid of one account in one workspace changed.
    #[error(
        "directory membership uuid of account {account} in workspace {workspace} changed ({stored} -> {incoming})"
    )]
    MembershipUuidChanged {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// The account.
        account: AccountUuid,
        /// Stored uuid.
        stored: MembershipUuid,
        /// Incoming uuid.
        incoming: MembershipUuid,
    },
    /// The membership uuid already names a membership of another workspace or account.
    #[error("directory membership {membership} already names another workspace or account")]
    MembershipUuidCollision {
        /// The membership.
        membership: MembershipUuid,
    },
    /// The stored membership is newer.
    #[error(
        "directory membership {membership} of workspace {workspace} revision rolled back ({stored} > {incoming})"
    )]
    MembershipRevisionRolledBack {
        /// The membership.
        membership: MembershipUuid,
        /// Its workspace.
        workspace: WorkspaceUuid,
        /// Stored revision.
        stored: i64,
        /// Incoming revision.
        incoming: i64,
    },
    /// Same membership revision, other own contents (role, membership status or joined_at).
    /// A status change that only follows the workspace status is not a conflict.
    #[error(
        "directory membership {membership} of workspace {workspace} revision {revision} has conflicting contents (role, membership status or joined_at changed without a new membership revision)"
    )]
    MembershipRevisionConflict {
        /// The membership.
        membership: MembershipUuid,
        /// Its workspace.
        workspace: WorkspaceUuid,
        /// The revision.
        revision: i64,
    },

    // ----- execution state -----
    /// The execution row belongs to another instance or to the local platform.
    #[error("directory execution state of workspace {workspace} has an invalid owner")]
    ExecutionOwnerInvalid {
        /// The workspace.
        workspace: WorkspaceUuid,
    },
    /// The execution generation would decrease.
    #[error(
        "directory execution generation of workspace {workspace} rolled back ({stored} > {incoming})"
    )]
    ExecutionGenerationRolledBack {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// Stored generation.
        stored: i64,
        /// Incoming generation.
        incoming: i64,
    },
    /// The desired-state revision would decrease.
    #[error(
        "directory desired-state revision of workspace {workspace} rolled back ({stored} > {incoming})"
    )]
    DesiredStateRevisionRolledBack {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// Stored revision.
        stored: i64,
        /// Incoming revision.
        incoming: i64,
    },
    /// Same desired-state revision, other execution contents.
    #[error(
        "directory execution state of workspace {workspace} has conflicting contents at revision {revision}"
    )]
    ExecutionRevisionConflict {
        /// The workspace.
        workspace: WorkspaceUuid,
        /// The revision.
        revision: i64,
    },
}

/// Declares [`RefusalRule`] with each rule's string, once.
macro_rules! refusal_rules {
    ($($variant:ident => $text:literal,)*) => {
        /// Which rule of the directory projection refused an input: one per [`DirectoryError`]
        /// variant, with a stable snake_case string (`as_str`, `Display`, serde) used as the
        /// metrics label `reason`, in logs and in `/v1/directory/status` (`rule`,
        /// `refusals_total`). A string never changes once released.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum RefusalRule {
            $(
                #[doc = concat!("See [`DirectoryError::", stringify!($variant), "`].")]
                $variant,
            )*
        }

        impl RefusalRule {
            /// Every rule, in declaration order.
            pub const ALL: &'static [RefusalRule] = &[$(Self::$variant,)*];

            /// The stable snake_case string (e.g. `membership_revision_conflict`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                }
            }
        }
    };
}

refusal_rules! {
    SnapshotWorkspaceCapacity => "snapshot_workspace_capacity",
    MembershipCapacity => "membership_capacity",
    ActiveWorkspaceCapacity => "active_workspace_capacity",
    ProjectedActiveWorkspaceCapacity => "projected_active_workspace_capacity",
    WrongInstance => "wrong_instance",
    BatchCursorMismatch => "batch_cursor_mismatch",
    MalformedBatch => "malformed_batch",
    UnsupportedEventType => "unsupported_event_type",
    EventScopeConflict => "event_scope_conflict",
    EventRevisionConflict => "event_revision_conflict",
    DuplicateWorkspace => "duplicate_workspace",
    DuplicateMember => "duplicate_member",
    DuplicateMembershipUuid => "duplicate_membership_uuid",
    InvalidEmail => "invalid_email",
    InvalidRevision => "invalid_revision",
    SnapshotSuperseded => "snapshot_superseded",
    SnapshotConflict => "snapshot_conflict",
    StateMissing => "state_missing",
    StateCursorRolledBack => "state_cursor_rolled_back",
    ReplicaBehindHighWater => "replica_behind_high_water",
    EmptyPageNotCaughtUp => "empty_page_not_caught_up",
    DirectoryChangesNeedDelta => "directory_changes_need_delta",
    DeltaMismatch => "delta_mismatch",
    DeltaUnrequestedWorkspace => "delta_unrequested_workspace",
    DeltaOlderThanEvent => "delta_older_than_event",
    ReceiptConflict => "receipt_conflict",
    MissingReceipt => "missing_receipt",
    EmailMapsToSeveralAccounts => "email_maps_to_several_accounts",
    ConflictingAccountProjections => "conflicting_account_projections",
    EmailCollision => "email_collision",
    LocalAccountCollision => "local_account_collision",
    AccountRevisionRolledBack => "account_revision_rolled_back",
    AccountRevisionConflict => "account_revision_conflict",
    WorkspaceOtherInstance => "workspace_other_instance",
    LocalWorkspaceCollision => "local_workspace_collision",
    WorkspaceRevisionRolledBack => "workspace_revision_rolled_back",
    WorkspaceRevisionConflict => "workspace_revision_conflict",
    CreatorNotProjected => "creator_not_projected",
    MembershipUuidChanged => "membership_uuid_changed",
    MembershipUuidCollision => "membership_uuid_collision",
    MembershipRevisionRolledBack => "membership_revision_rolled_back",
    MembershipRevisionConflict => "membership_revision_conflict",
    ExecutionOwnerInvalid => "execution_owner_invalid",
    ExecutionGenerationRolledBack => "execution_generation_rolled_back",
    DesiredStateRevisionRolledBack => "desired_state_revision_rolled_back",
    ExecutionRevisionConflict => "execution_revision_conflict",
}

impl std::fmt::Display for RefusalRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for RefusalRule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl DirectoryError {
    /// The rule that refused the input (one per variant); its stable snake_case string
    /// ([`RefusalRule::as_str`]) labels metrics, logs and the status report.
    pub fn rule(&self) -> RefusalRule {
        match self {
            Self::SnapshotWorkspaceCapacity { .. } => RefusalRule::SnapshotWorkspaceCapacity,
            Self::MembershipCapacity { .. } => RefusalRule::MembershipCapacity,
            Self::ActiveWorkspaceCapacity { .. } => RefusalRule::ActiveWorkspaceCapacity,
            Self::ProjectedActiveWorkspaceCapacity { .. } => {
                RefusalRule::ProjectedActiveWorkspaceCapacity
            }
            Self::WrongInstance { .. } => RefusalRule::WrongInstance,
            Self::BatchCursorMismatch { .. } => RefusalRule::BatchCursorMismatch,
            Self::MalformedBatch { .. } => RefusalRule::MalformedBatch,
            Self::UnsupportedEventType { .. } => RefusalRule::UnsupportedEventType,
            Self::EventScopeConflict { .. } => RefusalRule::EventScopeConflict,
            Self::EventRevisionConflict { .. } => RefusalRule::EventRevisionConflict,
            Self::DuplicateWorkspace { .. } => RefusalRule::DuplicateWorkspace,
            Self::DuplicateMember { .. } => RefusalRule::DuplicateMember,
            Self::DuplicateMembershipUuid { .. } => RefusalRule::DuplicateMembershipUuid,
            Self::InvalidEmail { .. } => RefusalRule::InvalidEmail,
            Self::InvalidRevision { .. } => RefusalRule::InvalidRevision,
            Self::SnapshotSuperseded { .. } => RefusalRule::SnapshotSuperseded,
            Self::SnapshotConflict { .. } => RefusalRule::SnapshotConflict,
            Self::StateMissing { .. } => RefusalRule::StateMissing,
            Self::StateCursorRolledBack { .. } => RefusalRule::StateCursorRolledBack,
            Self::ReplicaBehindHighWater { .. } => RefusalRule::ReplicaBehindHighWater,
            Self::EmptyPageNotCaughtUp { .. } => RefusalRule::EmptyPageNotCaughtUp,
            Self::DirectoryChangesNeedDelta => RefusalRule::DirectoryChangesNeedDelta,
            Self::DeltaMismatch => RefusalRule::DeltaMismatch,
            Self::DeltaUnrequestedWorkspace { .. } => RefusalRule::DeltaUnrequestedWorkspace,
            Self::DeltaOlderThanEvent { .. } => RefusalRule::DeltaOlderThanEvent,
            Self::ReceiptConflict { .. } => RefusalRule::ReceiptConflict,
            Self::MissingReceipt { .. } => RefusalRule::MissingReceipt,
            Self::EmailMapsToSeveralAccounts { .. } => RefusalRule::EmailMapsToSeveralAccounts,
            Self::ConflictingAccountProjections { .. } => {
                RefusalRule::ConflictingAccountProjections
            }
            Self::EmailCollision { .. } => RefusalRule::EmailCollision,
            Self::LocalAccountCollision { .. } => RefusalRule::LocalAccountCollision,
            Self::AccountRevisionRolledBack { .. } => RefusalRule::AccountRevisionRolledBack,
            Self::AccountRevisionConflict { .. } => RefusalRule::AccountRevisionConflict,
            Self::WorkspaceOtherInstance { .. } => RefusalRule::WorkspaceOtherInstance,
            Self::LocalWorkspaceCollision { .. } => RefusalRule::LocalWorkspaceCollision,
            Self::WorkspaceRevisionRolledBack { .. } => RefusalRule::WorkspaceRevisionRolledBack,
            Self::WorkspaceRevisionConflict { .. } => RefusalRule::WorkspaceRevisionConflict,
            Self::CreatorNotProjected { .. } => RefusalRule::CreatorNotProjected,
            Self::MembershipUuidChanged { .. } => RefusalRule::MembershipUuidChanged,
            Self::MembershipUuidCollision { .. } => RefusalRule::MembershipUuidCollision,
            Self::MembershipRevisionRolledBack { .. } => RefusalRule::MembershipRevisionRolledBack,
            Self::MembershipRevisionConflict { .. } => RefusalRule::MembershipRevisionConflict,
            Self::ExecutionOwnerInvalid { .. } => RefusalRule::ExecutionOwnerInvalid,
            Self::ExecutionGenerationRolledBack { .. } => {
                RefusalRule::ExecutionGenerationRolledBack
            }
            Self::DesiredStateRevisionRolledBack { .. } => {
                RefusalRule::DesiredStateRevisionRolledBack
            }
            Self::ExecutionRevisionConflict { .. } => RefusalRule::ExecutionRevisionConflict,
        }
    }

    /// The workspace the refusal is about, when one workspace is named.
    pub fn workspace(&self) -> Option<&WorkspaceUuid> {
        match self {
            Self::EventScopeConflict {
                aggregate: workspace,
                ..
            }
            | Self::DuplicateWorkspace { workspace }
            | Self::DuplicateMember { workspace, .. }
            | Self::DeltaUnrequestedWorkspace { workspace }
            | Self::DeltaOlderThanEvent { workspace, .. }
            | Self::WorkspaceOtherInstance { workspace }
            | Self::LocalWorkspaceCollision { workspace }
            | Self::WorkspaceRevisionRolledBack { workspace, .. }
            | Self::WorkspaceRevisionConflict { workspace, .. }
            | Self::CreatorNotProjected { workspace, .. }
            | Self::MembershipUuidChanged { workspace, .. }
            | Self::MembershipRevisionRolledBack { workspace, .. }
            | Self::MembershipRevisionConflict { workspace, .. }
            | Self::ExecutionOwnerInvalid { workspace }
            | Self::ExecutionGenerationRolledBack { workspace, .. }
            | Self::DesiredStateRevisionRolledBack { workspace, .. }
            | Self::ExecutionRevisionConflict { workspace, .. } => Some(workspace),
            _ => None,
        }
    }

    /// The capacity limit that refused the input, when this is a capacity refusal (the run
    /// loop then backs off longer: [`crate::ProjectorConfig::next_delay_after_capacity`]).
    pub fn capacity_limit(&self) -> Option<crate::config::CapacityLimit> {
        use crate::config::CapacityLimit;
        match self {
            Self::SnapshotWorkspaceCapacity { .. } => Some(CapacityLimit::SnapshotWorkspaces),
            Self::MembershipCapacity { .. } => Some(CapacityLimit::SnapshotMemberships),
            Self::ActiveWorkspaceCapacity { .. }
            | Self::ProjectedActiveWorkspaceCapacity { .. } => {
                Some(CapacityLimit::ActiveWorkspaces)
            }
            _ => None,
        }
    }

    /// True when another replica's newer projection won the race; initialization retries.
    pub fn is_superseded(&self) -> bool {
        matches!(self, Self::SnapshotSuperseded { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each rule's string is its variant name in snake_case and no two rules share one (the
    /// strings are metrics labels and appear in the status report: they must stay stable).
    #[test]
    fn refusal_rules_have_distinct_snake_case_strings() {
        let mut seen = std::collections::BTreeSet::new();
        for rule in RefusalRule::ALL {
            let name = format!("{rule:?}");
            let mut snake = String::new();
            for (i, c) in name.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            assert_eq!(rule.as_str(), snake, "{name}");
            assert_eq!(rule.to_string(), snake);
            assert!(seen.insert(rule.as_str()), "{rule} twice");
        }
        assert_eq!(
            serde_json::to_string(&RefusalRule::MembershipRevisionConflict).ok(),
            Some("\"membership_revision_conflict\"".to_owned())
        );
    }

    /// A capacity refusal names the setting the operator raises, and its variable.
    #[test]
    fn capacity_refusals_name_the_setting_to_raise() {
        let refusals = [
            DirectoryError::SnapshotWorkspaceCapacity { count: 3, limit: 2 },
            DirectoryError::MembershipCapacity { count: 3, limit: 2 },
            DirectoryError::ActiveWorkspaceCapacity { count: 3, limit: 2 },
            DirectoryError::ProjectedActiveWorkspaceCapacity { count: 3, limit: 2 },
        ];
        for refusal in refusals {
            let limit = refusal.capacity_limit().expect("a capacity refusal");
            let message = refusal.to_string();
            assert!(message.contains(limit.setting()), "{message}");
            let variable = format!("TENANTRY_{}", limit.setting().to_uppercase());
            assert!(message.contains(&variable), "{message}");
        }
        assert_eq!(DirectoryError::DeltaMismatch.capacity_limit(), None);
    }
}
