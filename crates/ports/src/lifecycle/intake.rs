//! The error every intake path returns: the engine's `CommandIntake` and the store adapters'
//! enqueue inside a caller's transaction.

use tenantry_lifecycle::intake::IntakeError;

use super::StoreError;

/// How many times intake re-plans a request whose control space changed between its read and
/// its compare-and-set write, before it answers [`IntakeFailure::Contended`].
pub const MAX_INTAKE_CONFLICT_RETRIES: usize = 5;

/// Why a lifecycle request was not accepted. Nothing was written (inside a caller's
/// transaction: nothing of the request; the caller's own writes are untouched).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IntakeFailure {
    /// The request is invalid or not allowed now (the caller's to fix).
    #[error(transparent)]
    Rejected(#[from] IntakeError),
    /// The control space kept changing concurrently; retry the request.
    #[error(
        "control space changed concurrently {MAX_INTAKE_CONFLICT_RETRIES} times; retry the request"
    )]
    Contended,
    /// Storage failed; retry later.
    #[error(transparent)]
    Store(#[from] StoreError),
}
