//! What a dispatch outcome means for a fenced write.
//!
//! The outcome vocabulary itself (not dispatched / answered / outcome unknown, and the rule
//! mapping transport observations to it) is [`tenantry_kernel::outcome`], shared with the
//! lifecycle saga and the HTTP clients; the outcome and the [`DispatchFailure`] trait a fenced
//! write's error implements are re-exported here, beside the rules that read them:
//! - only [`DispatchOutcome::OutcomeUnknown`] fences its scope ([`fences`]); the other two
//!   leave it writable;
//! - a write-ahead intent persisted before dispatch is cleared after `NotDispatched` or
//!   `Answered` and kept (as a fence) after `OutcomeUnknown` ([`IntentAction::after`]).

pub use tenantry_kernel::outcome::{DispatchFailure, DispatchOutcome};

/// Whether `outcome` fences its scope: only [`DispatchOutcome::OutcomeUnknown`]
/// ([`DispatchOutcome::is_unknown`]).
pub fn fences(outcome: DispatchOutcome) -> bool {
    outcome.is_unknown()
}

/// What happens to the fence persisted as write-ahead intent once the dispatch settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentAction {
    /// The outcome is known: clear the fence (JSON null tombstone).
    Clear,
    /// The outcome is unknown: keep the fence until an operator reconciles.
    Keep,
}

impl IntentAction {
    /// What to do with a write-ahead intent after a dispatch ended with `outcome`: keep it
    /// exactly when the outcome fences ([`fences`]).
    pub fn after(outcome: DispatchOutcome) -> Self {
        // Planted (verification only): an unknown outcome clears the intent like a known one.
        if fences(outcome) && !tenantry_kernel::planted!("unknown-outcome-clears-intent") {
            Self::Keep
        } else {
            Self::Clear
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_outcome_unknown_fences() {
        let cases = [
            (DispatchOutcome::NotDispatched, false, IntentAction::Clear),
            (
                DispatchOutcome::Answered { status: None },
                false,
                IntentAction::Clear,
            ),
            (DispatchOutcome::answered(409), false, IntentAction::Clear),
            (DispatchOutcome::OutcomeUnknown, true, IntentAction::Keep),
        ];
        for (outcome, fenced, intent) in cases {
            assert_eq!(fences(outcome), fenced, "{outcome:?}");
            assert_eq!(IntentAction::after(outcome), intent, "{outcome:?}");
            assert_eq!(outcome.dispatch_outcome(), outcome);
        }
    }
}
