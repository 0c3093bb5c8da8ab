//! Why a dispatch ended without a settlement ([`DispatchError`]), the message a refused
//! compare-and-set is retried with, and the closed set of codes a dispatch error reports.

use tenantry_kernel::{CommandId, ControlSpaceId};
#[cfg(doc)]
use tenantry_lifecycle::saga::Step;
use tenantry_lifecycle::saga::StepError;
use tenantry_ports::lifecycle::{SettleError, StoreError};

/// Why a dispatch ended without a settlement. The command stays processing under its lease and
/// is reclaimed once the lease expires (the next attempt re-reads everything).
///
/// Only a lost or expired lease (nothing may be written) and a storage failure (nothing could
/// be written) reach the caller: the dispatcher settles step errors and refused compare-and-sets itself
/// (see [`Step::step_error`]; a refused compare-and-set retries with `CONTROL_SPACE_CONFLICT`),
/// so the `Step`, `ControlSpaceConflict`, `SupersedeRefused` and `SettleRefused` variants are
/// reported only when that settle itself could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// Another worker took the lease over (or the command was settled already); this worker's
    /// result was dropped.
    #[error("lease on command {command_id} was lost before the result could be settled")]
    LeaseLost {
        /// The command.
        command_id: CommandId,
    },
    /// The attempt could no longer prove its lease live (its local deadline passed while the
    /// store did not renew it, or a renewal was refused) and nobody else holds the command:
    /// the attempt stopped, a remote call it had in flight was cancelled, nothing was written.
    /// The command is claimed again once the lease expired on the store's clock (case 014).
    #[error(
        "lease on command {command_id} expired before the attempt ended (nobody else holds it); \
         its remote call was cancelled or not made, and nothing was settled"
    )]
    LeaseExpired {
        /// The command.
        command_id: CommandId,
    },
    /// The control space moved on under the command.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The control space changed between read and settle (its compare-and-set failed).
    #[error("control space {control_space_id} changed concurrently")]
    ControlSpaceConflict {
        /// The control space whose compare-and-set failed.
        control_space_id: ControlSpaceId,
    },
    /// The command the settlement supersedes no longer meets its supersede rule.
    #[error("control space changed concurrently: command {command_id} can no longer be superseded")]
    SupersedeRefused {
        /// The command that could not be superseded.
        command_id: CommandId,
    },
    /// The store refused the settlement's compare-and-set for a reason this version does not
    /// name (a refusal added to [`SettleError`] later); handled like a control-space conflict.
    #[error("control space changed concurrently: {0}")]
    SettleRefused(SettleError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<SettleError> for DispatchError {
    fn from(error: SettleError) -> Self {
        match error {
            SettleError::LeaseLost { command_id } => Self::LeaseLost { command_id },
            SettleError::Store(e) => Self::Store(e),
            SettleError::ControlSpaceConflict { control_space_id } => {
                Self::ControlSpaceConflict { control_space_id }
            }
            SettleError::SupersedeRefused { command_id } => Self::SupersedeRefused { command_id },
            // Any refusal added later: a compare-and-set the store refused.
            other => Self::SettleRefused(other),
        }
    }
}

/// The message a refused compare-and-set is retried with: the store's refusal, as before the
/// refusal had typed variants (`control space X changed concurrently`, `command X can no longer
/// be superseded`).
pub(super) fn refusal_message(error: &DispatchError) -> String {
    match error {
        DispatchError::ControlSpaceConflict { control_space_id } => {
            SettleError::ControlSpaceConflict {
                control_space_id: control_space_id.clone(),
            }
            .to_string()
        }
        DispatchError::SupersedeRefused { command_id } => SettleError::SupersedeRefused {
            command_id: command_id.clone(),
        }
        .to_string(),
        DispatchError::SettleRefused(refusal) => refusal.to_string(),
        other => other.to_string(),
    }
}

pub(super) fn error_code(error: &DispatchError) -> &'static str {
    match error {
        DispatchError::LeaseLost { .. } => "LEASE_LOST",
        DispatchError::LeaseExpired { .. } => "LEASE_EXPIRED",
        DispatchError::Step(StepError::OwnershipLost { .. }) => "OWNERSHIP_LOST",
        DispatchError::Step(StepError::IdentityConflict) => "IDENTITY_CONFLICT",
        DispatchError::Step(StepError::Transition(_)) => "FORBIDDEN_TRANSITION",
        DispatchError::Step(_) => "STEP_REFUSED",
        DispatchError::ControlSpaceConflict { .. }
        | DispatchError::SupersedeRefused { .. }
        | DispatchError::SettleRefused(_) => "CONTROL_SPACE_CONFLICT",
        DispatchError::Store(_) => "STORE_UNAVAILABLE",
    }
}

#[cfg(test)]
mod conflict_tests {
    use super::*;

    /// A refused settle keeps its kind and typed fields, and the message the command is retried
    /// with stays the store's refusal.
    #[test]
    fn settle_refusals_become_typed_conflicts() {
        let Ok(space) = ControlSpaceId::parse("cs-1") else {
            panic!("valid id")
        };
        let Ok(command) = CommandId::parse("cmd-1") else {
            panic!("valid id")
        };
        let conflict = DispatchError::from(SettleError::ControlSpaceConflict {
            control_space_id: space.clone(),
        });
        assert_eq!(
            conflict,
            DispatchError::ControlSpaceConflict {
                control_space_id: space
            }
        );
        assert_eq!(
            refusal_message(&conflict),
            "control space cs-1 changed concurrently"
        );
        assert_eq!(
            conflict.to_string(),
            "control space cs-1 changed concurrently"
        );
        let refused = DispatchError::from(SettleError::SupersedeRefused {
            command_id: command.clone(),
        });
        assert_eq!(
            refused,
            DispatchError::SupersedeRefused {
                command_id: command
            }
        );
        assert_eq!(
            refusal_message(&refused),
            "command cmd-1 can no longer be superseded"
        );
        assert_eq!(error_code(&refused), "CONTROL_SPACE_CONFLICT");
        // Every code a dispatch error reports is its own metric label (a closed set, case 010).
        let Ok(command) = CommandId::parse("cmd-2") else {
            panic!("valid id")
        };
        for error in [
            DispatchError::LeaseLost {
                command_id: command.clone(),
            },
            DispatchError::LeaseExpired {
                command_id: command.clone(),
            },
            DispatchError::Step(StepError::OwnershipLost { reason: "r" }),
            DispatchError::Step(StepError::IdentityConflict),
            DispatchError::SupersedeRefused {
                command_id: command,
            },
            DispatchError::Store(StoreError::unavailable("down")),
        ] {
            let code = error_code(&error);
            assert_eq!(tenantry_lifecycle::code::metric_label(code), code);
        }
        // Lease loss and storage failures are not conflicts.
        assert!(matches!(
            DispatchError::from(SettleError::Store(StoreError::unavailable("down"))),
            DispatchError::Store(_)
        ));
    }
}
