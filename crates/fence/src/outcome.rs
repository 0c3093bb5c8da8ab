//! Dispatch outcomes: what a failed or finished remote call tells about the remote state.
//!
//! Every mutation sent to a remote (or host) store ends in one of three outcomes:
//! - [`DispatchOutcome::NotDispatched`]: nothing left this process (connect refused, connect
//!   timeout, request could not be built). The remote state is unchanged.
//! - [`DispatchOutcome::Answered`]: the remote answered with an HTTP status and a body that was
//!   read completely. The answer is deterministic, whatever the status (a 409 is an answer).
//! - [`DispatchOutcome::OutcomeUnknown`]: the request was sent and no complete answer came back
//!   (timeout after sending, connection lost after sending, a body that could not be read or
//!   decoded, or any failure this rule does not recognise). The mutation may or may not have
//!   taken effect.
//!
//! Only `OutcomeUnknown` fences its scope; the other two leave it writable. A write-ahead
//! intent persisted before dispatch is cleared after `NotDispatched` or `Answered` and kept
//! after `OutcomeUnknown` ([`DispatchOutcome::intent_action`]).

/// The outcome of one dispatched mutation, as far as this process can know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DispatchOutcome {
    /// The request never left this process; the remote is unchanged.
    NotDispatched,
    /// The remote answered (any status, complete body): deterministic.
    Answered,
    /// The request was sent and no complete answer came back: the scope needs reconciliation.
    OutcomeUnknown,
}

impl DispatchOutcome {
    /// Whether this outcome fences its scope: only [`DispatchOutcome::OutcomeUnknown`].
    pub fn fences(self) -> bool {
        matches!(self, Self::OutcomeUnknown)
    }

    /// What to do with a write-ahead intent after this outcome.
    pub fn intent_action(self) -> IntentAction {
        if self.fences() {
            IntentAction::Keep
        } else {
            IntentAction::Clear
        }
    }
}

impl std::fmt::Display for DispatchOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotDispatched => "not dispatched",
            Self::Answered => "answered",
            Self::OutcomeUnknown => "outcome unknown",
        })
    }
}

/// What happens to the fence persisted as write-ahead intent once the dispatch settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntentAction {
    /// The outcome is known: clear the fence (JSON null tombstone).
    Clear,
    /// The outcome is unknown: keep the fence until an operator reconciles.
    Keep,
}

/// What a transport observed about one request; adapters (the reqwest adapter in
/// `tenantry-remote-http`) translate their error types into this, then call
/// [`TransportObservation::outcome`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportObservation {
    /// The connection could not be established (refused, DNS failure, connect timeout, TLS
    /// handshake failure).
    ConnectFailed,
    /// The request could not be built or was refused locally before any byte was sent.
    NotSent,
    /// The deadline passed; `request_sent` tells whether any of the request may have left.
    TimedOut {
        /// Whether the request may have been (partly) sent before the deadline.
        request_sent: bool,
    },
    /// The connection broke; `request_sent` tells whether any of the request may have left.
    ConnectionLost {
        /// Whether the request may have been (partly) sent before the connection broke.
        request_sent: bool,
    },
    /// A status line and headers arrived; the body is described by `body`.
    Response {
        /// How reading the body ended.
        body: BodyRead,
    },
    /// A failure the adapter cannot place: treated as outcome unknown (fail closed).
    Unclassified,
}

/// How reading a response body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRead {
    /// The body was read completely and decoded (or needed no decoding).
    Complete,
    /// Reading the body failed or timed out part way.
    Unreadable,
    /// The body was read but could not be decoded into the expected shape.
    Undecodable,
}

impl TransportObservation {
    /// The dispatch outcome this observation means.
    pub fn outcome(self) -> DispatchOutcome {
        match self {
            Self::ConnectFailed | Self::NotSent => DispatchOutcome::NotDispatched,
            Self::TimedOut {
                request_sent: false,
            }
            | Self::ConnectionLost {
                request_sent: false,
            } => DispatchOutcome::NotDispatched,
            Self::Response {
                body: BodyRead::Complete,
            } => DispatchOutcome::Answered,
            Self::TimedOut { request_sent: true }
            | Self::ConnectionLost { request_sent: true }
            | Self::Response {
                body: BodyRead::Unreadable | BodyRead::Undecodable,
            }
            | Self::Unclassified => DispatchOutcome::OutcomeUnknown,
        }
    }
}

/// An error that knows the dispatch outcome of the mutation that produced it. The scoped
/// writes runtime fences a scope exactly when a mutation fails with an error whose
/// [`DispatchFailure::dispatch_outcome`] is [`DispatchOutcome::OutcomeUnknown`].
pub trait DispatchFailure {
    /// The outcome of the failed dispatch.
    fn dispatch_outcome(&self) -> DispatchOutcome;
}

impl DispatchFailure for DispatchOutcome {
    fn dispatch_outcome(&self) -> DispatchOutcome {
        *self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_outcome_classification() {
        use DispatchOutcome::*;
        use TransportObservation as T;
        let cases = [
            (T::ConnectFailed, NotDispatched),
            (T::NotSent, NotDispatched),
            (
                T::TimedOut {
                    request_sent: false,
                },
                NotDispatched,
            ),
            (
                T::ConnectionLost {
                    request_sent: false,
                },
                NotDispatched,
            ),
            (T::TimedOut { request_sent: true }, OutcomeUnknown),
            (T::ConnectionLost { request_sent: true }, OutcomeUnknown),
            (
                T::Response {
                    body: BodyRead::Complete,
                },
                Answered,
            ),
            (
                T::Response {
                    body: BodyRead::Unreadable,
                },
                OutcomeUnknown,
            ),
            (
                T::Response {
                    body: BodyRead::Undecodable,
                },
                OutcomeUnknown,
            ),
            (T::Unclassified, OutcomeUnknown),
        ];
        for (observation, expected) in cases {
            assert_eq!(observation.outcome(), expected, "{observation:?}");
        }
    }

    #[test]
    fn only_outcome_unknown_fences() {
        let cases = [
            (DispatchOutcome::NotDispatched, false, IntentAction::Clear),
            (DispatchOutcome::Answered, false, IntentAction::Clear),
            (DispatchOutcome::OutcomeUnknown, true, IntentAction::Keep),
        ];
        for (outcome, fences, intent) in cases {
            assert_eq!(outcome.fences(), fences, "{outcome:?}");
            assert_eq!(outcome.intent_action(), intent, "{outcome:?}");
            assert_eq!(outcome.dispatch_outcome(), outcome);
        }
    }
}
