//! When a command stops for good: the dead-letter rules.
//!
//! A command ends `failed` (see [`CommandStatus::Failed`](crate::CommandStatus::Failed)) when an
//! attempt ends with an outcome that no later attempt can change, or when its attempt budget
//! ([`RetryPolicy::max_attempts`](crate::RetryPolicy::max_attempts)) is spent. Everything else
//! is retried with backoff. The tables below are the whole rule; docs/protocol.md repeats them.
//!
//! Permanent (fail at once):
//! - a remote answer `400` or `422` (the KnowledgeFS protocol: malformed request, idempotency
//!   key reused with another request — resending the same request gets the same answer);
//! - a remote answer `409` with one of [`PERMANENT_CONFLICT_CODES`] (the provisioning key
//!   belongs to another control space; the space behind the key is being or was deleted);
//! - the code [`IDEMPOTENCY_KEY_REUSED`](ErrorCode::IdempotencyKeyReused) with any status;
//! - local: a stored payload that does not parse, a recovered deletion identity that
//!   conflicts with the registered one.
//!
//! Retryable: `401`/`403` (a credential can be fixed without touching the command), `404`
//! (lost-ACK recovery handles it), other `409` codes, `429`, every `5xx`, and every transport
//! failure (not dispatched, outcome unknown).
//!
//! Progress polls ([`PROGRESS_CODES`]) do not spend the attempt budget: a deletion that drains
//! for hours or a lagging revoke watermark is progress, not failure.

use crate::ErrorCode;

/// Default attempt budget of a command: 50 claims. With the default backoff (2 s doubling to
/// a 300 s cap) that is about four hours of retrying before a command is dead-lettered.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 50;

/// `409` codes of the KnowledgeFS protocol that no retry can change.
pub const PERMANENT_CONFLICT_CODES: [ErrorCode; 2] = [
    ErrorCode::ProvisioningKeyConflict,
    ErrorCode::KnowledgeFsSpaceDeleted,
];

/// Retry codes that report progress of a long remote operation; they never fail a command.
pub const PROGRESS_CODES: [ErrorCode; 3] = [
    ErrorCode::RemoteDeletionPending,
    ErrorCode::RemoteRevokeWatermarkLag,
    ErrorCode::ControlSpaceConflict,
];

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Try again later (within the attempt budget).
    Retry,
    /// No later attempt can succeed: dead-letter now.
    Permanent,
}

/// Disposition of a remote error: `status` is the HTTP status of an answer (`None` for a
/// transport failure: not dispatched or outcome unknown), `code` the error code.
pub fn remote_disposition(status: Option<u16>, code: &ErrorCode) -> Disposition {
    if *code == ErrorCode::IdempotencyKeyReused {
        return Disposition::Permanent;
    }
    match status {
        // Planted (verification only): a transport failure (no answer) fails the command.
        None if tenantry_kernel::planted!("transport-failure-is-permanent") => {
            Disposition::Permanent
        }
        Some(400 | 422) => Disposition::Permanent,
        Some(409) if PERMANENT_CONFLICT_CODES.contains(code) => Disposition::Permanent,
        _ => Disposition::Retry,
    }
}

/// Whether a retry with `code` spends the attempt budget (progress polls do not).
pub fn spends_budget(code: &ErrorCode) -> bool {
    !PROGRESS_CODES.contains(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_dispositions_follow_the_protocol_table() {
        use Disposition::{Permanent, Retry};
        let table = [
            (Some(400), "INVALID_REQUEST", Permanent),
            (Some(400), "IDEMPOTENCY_KEY_REQUIRED", Permanent),
            (Some(422), "IDEMPOTENCY_KEY_REUSED", Permanent),
            (Some(409), "IDEMPOTENCY_KEY_REUSED", Permanent),
            (Some(409), "PROVISIONING_KEY_CONFLICT", Permanent),
            (Some(409), "KNOWLEDGE_FS_SPACE_DELETED", Permanent),
            (Some(409), "KNOWLEDGE_FS_SCOPE_MISMATCH", Retry),
            (Some(409), "REVISION_AHEAD", Retry),
            (Some(401), "UNAUTHORIZED", Retry),
            (Some(403), "FORBIDDEN", Retry),
            (Some(404), "KNOWLEDGE_FS_SPACE_NOT_FOUND", Retry),
            (Some(429), "KFS_RATE_LIMITED", Retry),
            (Some(500), "INTERNAL", Retry),
            (Some(503), "KFS_UNAVAILABLE", Retry),
            (Some(504), "GATEWAY_TIMEOUT", Retry),
            (None, "REMOTE_UNAVAILABLE", Retry),
            (None, "REMOTE_OUTCOME_UNKNOWN", Retry),
        ];
        for (status, code, expected) in table {
            assert_eq!(
                remote_disposition(status, &ErrorCode::from(code)),
                expected,
                "{status:?} {code}"
            );
        }
    }

    #[test]
    fn progress_polls_do_not_spend_the_budget() {
        assert!(!spends_budget(&ErrorCode::RemoteDeletionPending));
        assert!(!spends_budget(&ErrorCode::RemoteRevokeWatermarkLag));
        assert!(spends_budget(&ErrorCode::from("KFS_UNAVAILABLE")));
        assert!(spends_budget(&ErrorCode::KnowledgeFsSpaceNotFound));
    }
}
