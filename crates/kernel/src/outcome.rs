//! Dispatch outcomes: what a failed or finished remote call tells about the remote state.
//!
//! This is the one vocabulary every Tenantry crate uses for a call to a remote (or host) store:
//! the fence runtime decides from it whether a scope is fenced, the lifecycle saga whether a
//! provision may still land, and the HTTP clients classify every transport failure into it.
//! Every call ends in one of three outcomes:
//! - [`DispatchOutcome::NotDispatched`]: nothing left this process (connect refused, connect
//!   timeout, request could not be built). The remote state is unchanged.
//! - [`DispatchOutcome::Answered`]: the remote answered (an HTTP status and a body that was
//!   read completely). The answer is deterministic, whatever the status (a 409 is an answer).
//! - [`DispatchOutcome::OutcomeUnknown`]: the request was sent and no complete answer came back
//!   (timeout after sending, connection lost after sending, a body that could not be read or
//!   decoded, or any failure this rule does not recognise). The call may or may not have
//!   taken effect.
//!
//! Only `OutcomeUnknown` leaves the remote state unknown ([`DispatchOutcome::is_unknown`]): a
//! fenced write keeps its scope fenced until an operator reconciles, a provision is resolved by
//! a lookup of its provisioning key. [`TransportObservation::outcome`] is the rule that maps what
//! a transport observed to an outcome; adapters translate their error types into an observation.

use std::fmt;

/// The outcome of one dispatched call, as far as this process can know it.
///
/// `Answered` carries the HTTP status when the remote speaks HTTP and the caller needs it (the
/// lifecycle saga's failure table reads it); a remote that is not HTTP, or a caller that only
/// needs to know that an answer came, leaves it `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DispatchOutcome {
    /// The request never left this process; the remote is unchanged.
    NotDispatched,
    /// The remote answered (any status, complete body): deterministic.
    Answered {
        /// The HTTP status of the answer (100..=599), when known.
        status: Option<u16>,
    },
    /// The request was sent and no complete answer came back: the remote state is unknown and
    /// needs reconciliation.
    OutcomeUnknown,
}

impl DispatchOutcome {
    /// An answer with HTTP status `status`.
    pub fn answered(status: u16) -> Self {
        Self::Answered {
            status: Some(status),
        }
    }

    /// Whether the call may have taken effect without this process learning what it did: only
    /// [`DispatchOutcome::OutcomeUnknown`]. A fenced write fences its scope exactly then.
    pub fn is_unknown(self) -> bool {
        matches!(self, Self::OutcomeUnknown)
    }

    /// The outcome of a complete HTTP answer with `status`; `remote_error` says whether its
    /// body is the remote's own error (read in the remote's error format). Outcome unknown when
    /// a gateway may have answered while the request goes on ([`gateway_may_have_applied`]),
    /// answered with the status otherwise.
    pub fn of_answer(status: u16, remote_error: bool) -> Self {
        if gateway_may_have_applied(status, remote_error) {
            Self::OutcomeUnknown
        } else {
            Self::answered(status)
        }
    }

    /// The HTTP status of an answer, when the outcome is [`DispatchOutcome::Answered`] with a
    /// known status; `None` otherwise.
    pub fn status(self) -> Option<u16> {
        match self {
            Self::Answered { status } => status,
            Self::NotDispatched | Self::OutcomeUnknown => None,
        }
    }
}

impl fmt::Display for DispatchOutcome {
    /// `not dispatched`, `answered`, `answered 503` (with a status) or `outcome unknown`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotDispatched => f.write_str("not dispatched"),
            Self::Answered { status: None } => f.write_str("answered"),
            Self::Answered {
                status: Some(status),
            } => write!(f, "answered {status}"),
            Self::OutcomeUnknown => f.write_str("outcome unknown"),
        }
    }
}

/// Whether an HTTP answer with `status` may have left its request applied although it reports
/// a failure: a `502`, `503` or `504` whose body is not the remote's own error (`remote_error`
/// false: a gateway's page, an empty body, anything the remote's error format does not read)
/// was written by a gateway in front of the remote (a proxy or load balancer that passed the
/// request on, then gave up waiting or lost the upstream connection) while the remote may go
/// on with the request. The remote's own `503` (its error body) is its answer.
///
/// The one rule for every mechanism (issue 29): a fenced write treats such an answer as an
/// unknown outcome and fences ([`DispatchOutcome::of_answer`], applied by
/// `tenantry_remote_http::outcome::Answer::outcome`); the lifecycle counts it as possibly
/// sent.
pub fn gateway_may_have_applied(status: u16, remote_error: bool) -> bool {
    matches!(status, 502..=504) && !remote_error
}

/// An error that knows the dispatch outcome of the call that produced it. The scoped-writes
/// runtime (`tenantry_engine::scoped_writes`) fences a scope exactly when a mutation fails with
/// an error whose [`DispatchFailure::dispatch_outcome`] is [`DispatchOutcome::OutcomeUnknown`].
pub trait DispatchFailure {
    /// The outcome of the failed dispatch.
    fn dispatch_outcome(&self) -> DispatchOutcome;
}

impl DispatchFailure for DispatchOutcome {
    fn dispatch_outcome(&self) -> DispatchOutcome {
        *self
    }
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
        /// The HTTP status, when the transport reports it.
        status: Option<u16>,
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
    /// The dispatch outcome this observation means: a response with a complete body is an
    /// answer (with its status), a failure before anything was sent is not dispatched, and
    /// everything else (including what the adapter could not place) is outcome unknown.
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
                status,
                body: BodyRead::Complete,
            } => DispatchOutcome::Answered { status },
            Self::TimedOut { request_sent: true }
            | Self::ConnectionLost { request_sent: true }
            | Self::Response {
                body: BodyRead::Unreadable | BodyRead::Undecodable,
                ..
            }
            | Self::Unclassified => DispatchOutcome::OutcomeUnknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gateway_5xx_without_the_remotes_own_error_may_have_applied() {
        let cases = [
            (502, false, DispatchOutcome::OutcomeUnknown),
            (503, false, DispatchOutcome::OutcomeUnknown),
            (504, false, DispatchOutcome::OutcomeUnknown),
            (502, true, DispatchOutcome::answered(502)),
            (503, true, DispatchOutcome::answered(503)),
            (504, true, DispatchOutcome::answered(504)),
            (500, false, DispatchOutcome::answered(500)),
            (429, false, DispatchOutcome::answered(429)),
            (409, false, DispatchOutcome::answered(409)),
            (200, false, DispatchOutcome::answered(200)),
        ];
        for (status, remote_error, expected) in cases {
            assert_eq!(
                DispatchOutcome::of_answer(status, remote_error),
                expected,
                "{status} {remote_error}"
            );
            assert_eq!(
                gateway_may_have_applied(status, remote_error),
                expected.is_unknown(),
                "{status} {remote_error}"
            );
        }
    }

    #[test]
    fn dispatch_outcome_classification() {
        use DispatchOutcome::*;
        use TransportObservation as T;
        let response = |status, body| T::Response { status, body };
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
                response(None, BodyRead::Complete),
                Answered { status: None },
            ),
            (
                response(Some(409), BodyRead::Complete),
                DispatchOutcome::answered(409),
            ),
            (response(Some(200), BodyRead::Unreadable), OutcomeUnknown),
            (response(None, BodyRead::Undecodable), OutcomeUnknown),
            (T::Unclassified, OutcomeUnknown),
        ];
        for (observation, expected) in cases {
            assert_eq!(observation.outcome(), expected, "{observation:?}");
        }
    }

    #[test]
    fn only_outcome_unknown_is_unknown() {
        let cases = [
            (
                DispatchOutcome::NotDispatched,
                false,
                None,
                "not dispatched",
            ),
            (
                DispatchOutcome::Answered { status: None },
                false,
                None,
                "answered",
            ),
            (
                DispatchOutcome::answered(503),
                false,
                Some(503),
                "answered 503",
            ),
            (
                DispatchOutcome::OutcomeUnknown,
                true,
                None,
                "outcome unknown",
            ),
        ];
        for (outcome, unknown, status, text) in cases {
            assert_eq!(outcome.is_unknown(), unknown, "{outcome:?}");
            assert_eq!(outcome.status(), status, "{outcome:?}");
            assert_eq!(outcome.to_string(), text);
            assert_eq!(outcome.dispatch_outcome(), outcome);
        }
    }
}
