//! What an operator's action on a command does to its control space, and what a given-up
//! command may have left behind in KnowledgeFS.
//!
//! Every control space has an exit (case 012): a delete command that owns its `deleting`
//! control space is never simply abandoned, which would leave the space `deleting` for good
//! (no command may complete it and the state machine refuses a new deletion). Instead the
//! operator either retries it (a remote that proves the space absent now completes it, see
//! docs/protocol.md, "A deletion never orphans a remote space") or **marks the control space
//! deleted**: the command is abandoned and the control space moves to `deleted` in the same
//! transaction, with the operator's reason in the action log. The store applies
//! [`mark_deleted`]'s compare-and-set; [`abandon_refusal`] says when a plain abandon is refused.

use chrono::{DateTime, Utc};
use tenantry_kernel::{ControlSpaceId, KnowledgeSpaceId, ProvisioningKey};

use crate::command::{CommandRecord, CommandStatus, Operation};
use crate::control_space::{CasUpdate, ControlSpace, ControlSpaceState, Transition};

/// Why an operator action that touches the control space was refused; nothing is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlSpaceActionError {
    /// A plain abandon of a delete that owns its `deleting` control space would leave that
    /// control space `deleting` for good.
    #[error(
        "command {command_id} is the deletion that owns control space {control_space_id}; abandoning it would leave the control space deleting for good: retry it, or mark the control space deleted (mark-deleted, with a reason)"
    )]
    DeleteOwnsControlSpace {
        /// The command.
        command_id: String,
        /// Its control space.
        control_space_id: ControlSpaceId,
    },
    /// Mark-deleted applies only to a delete command that owns its `deleting` control space.
    #[error(
        "command {command_id} is not a deletion that owns a deleting control space; mark-deleted applies only to such a deletion (use abandon)"
    )]
    NotAnOwningDelete {
        /// The command.
        command_id: String,
    },
}

/// Whether an operator action may act on a command in `status`: `pending` and `failed`
/// always; mark-deleted (`mark_deleted = true`) also on an `abandoned` command, so a control
/// space left `deleting` by a delete abandoned earlier (by a version that allowed it) still
/// has an exit. [`mark_deleted`] then still requires the command to own its `deleting`
/// control space.
pub fn accepts_action(status: CommandStatus, mark_deleted: bool) -> bool {
    status.accepts_operator_action() || (mark_deleted && status == CommandStatus::Abandoned)
}

/// Whether `command` is the delete that owns `cs` while it is `deleting`.
pub fn owns_deleting(command: &CommandRecord, cs: Option<&ControlSpace>) -> bool {
    command.operation == Operation::Delete
        && cs.is_some_and(|cs| {
            cs.state == ControlSpaceState::Deleting
                && cs.lifecycle_operation_id == command.operation_id
        })
}

/// A plain abandon of `command` (its control space read in the same transaction as `cs`) is
/// refused when `command` is the delete that owns its `deleting` control space.
pub fn abandon_refusal(
    command: &CommandRecord,
    cs: Option<&ControlSpace>,
) -> Option<ControlSpaceActionError> {
    owns_deleting(command, cs).then(|| ControlSpaceActionError::DeleteOwnsControlSpace {
        command_id: command.id.to_string(),
        control_space_id: command.control_space_id.clone(),
    })
}

/// The compare-and-set that marks `cs` deleted when `command` (a delete that owns it while it
/// is `deleting`) is given up by an operator at `now`: deleting → deleted, knowledge space
/// identity and revision kept (they say what may remain in KnowledgeFS).
///
/// # Errors
/// [`ControlSpaceActionError::NotAnOwningDelete`] for any other command or state.
pub fn mark_deleted(
    command: &CommandRecord,
    cs: Option<&ControlSpace>,
    now: DateTime<Utc>,
) -> Result<CasUpdate, ControlSpaceActionError> {
    let refused = || ControlSpaceActionError::NotAnOwningDelete {
        command_id: command.id.to_string(),
    };
    let cs = cs
        .filter(|_| owns_deleting(command, cs))
        .ok_or_else(refused)?;
    cs.plan(
        &[Transition::CompleteDeletion {
            operation_id: command.operation_id.clone(),
            revision: cs.knowledge_space_revision,
        }],
        now,
    )
    .map_err(|_| refused())
}

/// What a given-up command may have left in KnowledgeFS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    /// The provisioning key under which a remote space may exist (a lookup finds it).
    pub provisioning_key: ProvisioningKey,
    /// The remote identity, when known.
    pub knowledge_space_id: Option<KnowledgeSpaceId>,
}

/// Whether an abandoned provision may have reached KnowledgeFS, so a remote space may exist
/// that no command will clean up unless the control space is deleted: some attempt of it may
/// have sent a request that can still take effect (its attempt window is set; a provision
/// that never left, or that KnowledgeFS refused, has none). `None` for any other command.
pub fn abandoned_provision_left_behind(
    command: &CommandRecord,
    provisioning_key: Option<&ProvisioningKey>,
) -> Option<LeftBehind> {
    if command.operation != Operation::Provision
        || command.status != CommandStatus::Abandoned
        || command.attempt_window_ends_at.is_none()
    {
        return None;
    }
    let provisioning_key = provisioning_key.cloned().or_else(|| {
        command
            .payload
            .get("provisioning_key")
            .and_then(|v| v.as_str())
            .and_then(|k| ProvisioningKey::parse(k).ok())
    })?;
    Some(LeftBehind {
        provisioning_key,
        knowledge_space_id: None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::control_space::tests::{at, op, space};

    fn record(operation: Operation, status: CommandStatus, operation_id: &str) -> CommandRecord {
        CommandRecord {
            operation_id: op(operation_id),
            payload: json!({"provisioning_key": "pk1"}),
            ..crate::command::tests::record("c1", operation, status)
        }
    }

    /// Case 012: the delete owning its deleting control space cannot be plainly abandoned;
    /// every other command can.
    #[test]
    fn case_012_abandoning_the_owning_delete_is_refused_everything_else_is_not() {
        use ControlSpaceState as S;
        let delete = record(Operation::Delete, CommandStatus::Failed, "op");
        let table = [
            (S::Deleting, "op", true),
            (S::Deleting, "other", false),
            (S::Deleted, "op", false),
            (S::Active, "op", false),
        ];
        for (state, owner, refused) in table {
            let cs = space(state, owner);
            assert_eq!(
                abandon_refusal(&delete, Some(&cs)).is_some(),
                refused,
                "{state} owned by {owner}"
            );
        }
        assert!(abandon_refusal(&delete, None).is_none());
        let provision = record(Operation::Provision, CommandStatus::Failed, "op");
        assert!(abandon_refusal(&provision, Some(&space(S::Deleting, "op"))).is_none());
    }

    /// Case 012: mark-deleted moves the owning delete's control space to deleted (a new
    /// version, identity kept) and refuses anything else.
    #[test]
    fn case_012_mark_deleted_completes_only_an_owning_delete() {
        use ControlSpaceState as S;
        let delete = record(Operation::Delete, CommandStatus::Pending, "op");
        let mut cs = space(S::Deleting, "op");
        cs.knowledge_space_id = Some(KnowledgeSpaceId::parse("ks1").unwrap());
        cs.knowledge_space_revision = 4;
        let cas = mark_deleted(&delete, Some(&cs), at(9)).unwrap();
        assert_eq!(cas.expected_state, S::Deleting);
        assert_eq!(cas.expected_resource_version, cs.resource_version);
        assert_eq!(cas.next.state, S::Deleted);
        assert_eq!(cas.next.resource_version, cs.resource_version + 1);
        assert_eq!(cas.next.knowledge_space_id, cs.knowledge_space_id);
        assert_eq!(cas.next.knowledge_space_revision, 4);
        assert_eq!(cas.next.updated_at, at(9));
        for (state, owner) in [
            (S::Deleting, "other"),
            (S::Deleted, "op"),
            (S::Active, "op"),
        ] {
            assert!(
                mark_deleted(&delete, Some(&space(state, owner)), at(9)).is_err(),
                "{state} {owner}"
            );
        }
        let provision = record(Operation::Provision, CommandStatus::Pending, "op");
        assert!(mark_deleted(&provision, Some(&cs), at(9)).is_err());
        assert!(mark_deleted(&delete, None, at(9)).is_err());
    }

    /// Mark-deleted also reaches a delete abandoned earlier; nothing else widens.
    #[test]
    fn case_012_mark_deleted_also_accepts_an_abandoned_delete() {
        for status in CommandStatus::ALL {
            assert_eq!(
                accepts_action(status, false),
                status.accepts_operator_action()
            );
            assert_eq!(
                accepts_action(status, true),
                status.accepts_operator_action() || status == CommandStatus::Abandoned,
                "{status}"
            );
        }
    }

    /// An abandoned provision may have left a remote space only when one of its attempts may
    /// have sent a request that can still take effect.
    #[test]
    fn abandoned_provision_left_behind_follows_the_attempt_window() {
        let mut provision = record(Operation::Provision, CommandStatus::Abandoned, "op");
        assert_eq!(abandoned_provision_left_behind(&provision, None), None);
        provision.attempt_window_ends_at = Some(at(30));
        let left = abandoned_provision_left_behind(&provision, None).unwrap();
        assert_eq!(left.provisioning_key.as_str(), "pk1");
        provision.status = CommandStatus::Failed;
        assert_eq!(abandoned_provision_left_behind(&provision, None), None);
        let mut delete = record(Operation::Delete, CommandStatus::Abandoned, "op");
        delete.attempt_window_ends_at = Some(at(30));
        assert_eq!(abandoned_provision_left_behind(&delete, None), None);
    }
}
