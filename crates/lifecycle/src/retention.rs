//! Retention rules of the lifecycle tables: which finished commands and operator action
//! records may be removed, given `now` and the retention window (docs/operations.md,
//! "Retention"; the key's lifetime in docs/protocol.md, "Idempotency key lifetime").
//!
//! The store adapters express the same rules in SQL; the in-memory fake calls these functions,
//! and the conformance suite checks that every store agrees with them.

use chrono::{DateTime, Duration, Utc};

use crate::{CommandRecord, CommandStatus, ControlSpaceState, Operation};

/// The statuses of a finished command that retention may remove: `succeeded`, `superseded`
/// and `abandoned` (a terminal failure an operator acted on). `pending` and `processing` are
/// live; `failed` waits for an operator (retry or abandon) and is never removed.
pub const PRUNABLE_STATUSES: [CommandStatus; 3] = [
    CommandStatus::Succeeded,
    CommandStatus::Superseded,
    CommandStatus::Abandoned,
];

/// The instant before which a record is past `window` at `now`: records stamped at or before
/// it are expired. A window too large for the calendar saturates to the earliest time (nothing
/// expires).
pub fn cutoff(now: DateTime<Utc>, window: std::time::Duration) -> DateTime<Utc> {
    Duration::from_std(window)
        .ok()
        .and_then(|w| now.checked_sub_signed(w))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// Whether a finished command may be removed at `now` with retention `window`.
///
/// `space_state` is the state of the command's control space (`None`: no row). A command is
/// removable when all hold:
/// - its status is one of [`PRUNABLE_STATUSES`];
/// - it finished (`completed_at`) at least `window` before `now`: until then its idempotency
///   key replays the original command (the key's documented lifetime);
/// - it is not a provision of a control space that still exists and is not `deleted`: a
///   deletion decides on remote absence by reading the space's latest provision
///   (`Step::complete_absent`), so that evidence stays while a deletion can still need it.
pub fn command_expired(
    command: &CommandRecord,
    space_state: Option<ControlSpaceState>,
    now: DateTime<Utc>,
    window: std::time::Duration,
) -> bool {
    if !PRUNABLE_STATUSES.contains(&command.status) {
        return false;
    }
    let Some(completed_at) = command.completed_at else {
        return false;
    };
    if completed_at > cutoff(now, window) {
        return false;
    }
    !pins_control_space(&command.operation, space_state)
}

/// Whether a provision command is still evidence for its control space (see
/// [`command_expired`]): it is a provision and the space exists in a state other than
/// `deleted`.
pub fn pins_control_space(operation: &Operation, space_state: Option<ControlSpaceState>) -> bool {
    *operation == Operation::Provision
        && space_state.is_some_and(|state| state != ControlSpaceState::Deleted)
}

/// Whether an operator action record created at `created_at` may be removed at `now` with
/// retention `window` (the audit trail is kept for the window, whatever became of the
/// command).
pub fn action_expired(
    created_at: DateTime<Utc>,
    now: DateTime<Utc>,
    window: std::time::Duration,
) -> bool {
    created_at <= cutoff(now, window)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command_with(
        status: CommandStatus,
        operation: Operation,
        completed_at: Option<DateTime<Utc>>,
    ) -> CommandRecord {
        CommandRecord {
            completed_at,
            ..crate::command::tests::record("c", operation, status)
        }
    }

    const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    #[test]
    fn command_rules_table() {
        let now = at(100 * 86_400);
        let old = Some(at(100 * 86_400 - 30 * 86_400));
        let young = Some(at(100 * 86_400 - 30 * 86_400 + 1));
        use CommandStatus::*;
        use ControlSpaceState as S;
        /// status, operation, completed_at, the space's state, expired?
        type Row = (
            CommandStatus,
            Operation,
            Option<DateTime<Utc>>,
            Option<S>,
            bool,
        );
        let rows: &[Row] = &[
            (Succeeded, Operation::Delete, old, Some(S::Deleted), true),
            (Superseded, Operation::Revoke, old, Some(S::Active), true),
            (Abandoned, Operation::Delete, old, None, true),
            (Succeeded, Operation::Delete, young, None, false),
            (Failed, Operation::Delete, old, None, false),
            (Pending, Operation::Delete, old, None, false),
            (Processing, Operation::Delete, old, None, false),
            (Succeeded, Operation::Delete, None, None, false),
            (Succeeded, Operation::Provision, old, Some(S::Active), false),
            (
                Succeeded,
                Operation::Provision,
                old,
                Some(S::Provisioning),
                false,
            ),
            (
                Superseded,
                Operation::Provision,
                old,
                Some(S::Deleting),
                false,
            ),
            (Succeeded, Operation::Provision, old, Some(S::Deleted), true),
            (Abandoned, Operation::Provision, old, None, true),
        ];
        for (status, operation, completed_at, space, expected) in rows {
            let command = command_with(*status, operation.clone(), *completed_at);
            assert_eq!(
                command_expired(&command, *space, now, 30 * DAY),
                *expected,
                "{status:?} {operation:?} {completed_at:?} {space:?}"
            );
        }
    }

    #[test]
    fn action_rules_table() {
        let now = at(1_000_000);
        for (created, window, expected) in [
            (at(1_000_000 - 86_400), DAY, true),
            (at(1_000_000 - 86_399), DAY, false),
            (at(0), DAY, true),
            (at(0), std::time::Duration::MAX, false),
        ] {
            assert_eq!(
                action_expired(created, now, window),
                expected,
                "{created} {window:?}"
            );
        }
    }

    #[test]
    fn cutoff_saturates() {
        assert_eq!(
            cutoff(at(10), std::time::Duration::MAX),
            DateTime::<Utc>::MIN_UTC
        );
        assert_eq!(cutoff(at(10), std::time::Duration::from_secs(4)), at(6));
    }
}
