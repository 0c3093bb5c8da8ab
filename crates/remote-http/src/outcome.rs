//! Classifying a reqwest error or response into a dispatch outcome.
//!
//! The outcome type and its rule are pure and live in [`tenantry_kernel::outcome`] (one
//! vocabulary for the fences, the lifecycle saga and both clients of this crate); this module
//! only says what a reqwest failure observed ([`observe_error`]) and reads an answer completely
//! ([`read_answer`]), because a response whose body cannot be read is not an answer:
//! - connect failures (refused, DNS, connect timeout, a failed TLS handshake: an untrusted,
//!   expired or wrong-name server certificate, a refused client certificate) and requests that
//!   could not be built: not dispatched (the request was never written);
//! - a status line plus a completely read body, whatever the status (including 3xx, since
//!   mutation clients follow no redirects, and 4xx/5xx): answered, with the status — except a
//!   `502`, `503` or `504` whose body the caller has not read as the remote's own error: a
//!   gateway may have answered while the request goes on, so the outcome is unknown
//!   ([`Answer::outcome`], [`Answer::outcome_given`]; the rule is the kernel's
//!   [`tenantry_kernel::outcome::gateway_may_have_applied`]);
//! - a timeout after the connection was made, a connection lost after sending, a body that
//!   stalls, breaks or does not decode, or any error not recognised here: outcome unknown.

use tenantry_ports::error::ErrorSource;

use reqwest::{Response, StatusCode};
use serde::de::DeserializeOwned;
use tenantry_kernel::outcome::{BodyRead, DispatchFailure, DispatchOutcome, TransportObservation};

/// What a reqwest error says about the request that produced it.
pub fn observe_error(error: &reqwest::Error) -> TransportObservation {
    if error.is_builder() {
        TransportObservation::NotSent
    } else if error.is_connect() || refused_handshake(error) {
        TransportObservation::ConnectFailed
    } else if error.is_status() || error.is_redirect() {
        // Produced after a response arrived (error_for_status, a refused redirect).
        TransportObservation::Response {
            status: status_of(error),
            body: BodyRead::Complete,
        }
    } else if error.is_decode() {
        TransportObservation::Response {
            status: status_of(error),
            body: BodyRead::Undecodable,
        }
    } else if error.is_body() {
        TransportObservation::Response {
            status: status_of(error),
            body: BodyRead::Unreadable,
        }
    } else if error.is_timeout() {
        TransportObservation::TimedOut { request_sent: true }
    } else if error.is_request() {
        TransportObservation::ConnectionLost { request_sent: true }
    } else {
        TransportObservation::Unclassified
    }
}

/// Whether the server refused the TLS handshake with an alert about certificates. In TLS 1.3
/// the client may write its request before the server has checked the client certificate; a
/// server that then refuses the certificate never reads that request (it accepts application
/// data only on an established session), so the request was not dispatched.
fn refused_handshake(error: &reqwest::Error) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        crate::tls::rustls_error(error),
        Some(rustls::Error::AlertReceived(
            A::CertificateRequired
                | A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::AccessDenied
                | A::HandshakeFailure
        ))
    )
}

/// The HTTP status a reqwest error reports, if any.
fn status_of(error: &reqwest::Error) -> Option<u16> {
    error.status().map(|status| status.as_u16())
}

/// The dispatch outcome of a request that failed with `error`.
pub fn classify_error(error: &reqwest::Error) -> DispatchOutcome {
    observe_error(error).outcome()
}

/// The dispatch outcome of a finished `send()`: for a response, whether its body could be read
/// completely (consuming it). Returns the outcome ([`Answer::outcome`]: answered with the HTTP
/// status, or unknown for a `502`/`503`/`504` a gateway may have written) and, when a complete
/// answer came, the answer.
pub async fn classify(
    result: Result<Response, reqwest::Error>,
) -> (DispatchOutcome, Option<Answer>) {
    match read_answer(result).await {
        Ok(answer) => (answer.outcome(), Some(answer)),
        Err(failure) => (failure.outcome, None),
    }
}

/// A remote's complete answer to a mutation: any status with its fully read body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The value of the `Retry-After` header, when present and readable.
    pub retry_after: Option<String>,
    /// The complete body.
    pub body: Vec<u8>,
}

impl Answer {
    /// The dispatch outcome of this answer for a caller that has not read its body as the
    /// remote's own error: [`DispatchOutcome::Answered`] with its status, except a `502`,
    /// `503` or `504`, which a gateway may have written while the request goes on behind it:
    /// outcome unknown (a fenced write fences). A caller that reads its remote's error format
    /// says what it found with [`Self::outcome_given`].
    pub fn outcome(&self) -> DispatchOutcome {
        self.outcome_given(false)
    }

    /// The dispatch outcome of this answer when `remote_error` says whether its body is the
    /// remote's own error: [`DispatchOutcome::of_answer`] (a `502`/`503`/`504` is an answer only
    /// with the remote's own error; the kernel's
    /// [`gateway_may_have_applied`](tenantry_kernel::outcome::gateway_may_have_applied)).
    pub fn outcome_given(&self, remote_error: bool) -> DispatchOutcome {
        DispatchOutcome::of_answer(self.status.as_u16(), remote_error)
    }

    /// Decodes the body as JSON.
    ///
    /// # Errors
    /// A [`TransportError`] with outcome unknown when the body is not the expected JSON: an
    /// answer we cannot understand does not tell what the remote did.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, TransportError> {
        serde_json::from_slice(&self.body).map_err(|e| TransportError {
            outcome: TransportObservation::Response {
                status: Some(self.status.as_u16()),
                body: BodyRead::Undecodable,
            }
            .outcome(),
            message: format!("undecodable {} response body: {e}", self.status),
            source: Some(ErrorSource::new(e)),
        })
    }
}

/// A transport failure: a call that got no complete (or no decodable) answer, with its
/// dispatch outcome. Names no reqwest type; the transport's error (a `reqwest::Error`, or the
/// JSON decoder's) is kept as its [`source`](std::error::Error::source). A fenced write returns
/// it from its commit: it implements [`DispatchFailure`], so the runtime fences exactly the
/// outcome-unknown ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} ({outcome:?})")]
#[non_exhaustive]
pub struct TransportError {
    /// What the failure means for the remote state: not dispatched or outcome unknown (an
    /// answer that arrived complete is an [`Answer`], not an error).
    pub outcome: DispatchOutcome,
    /// The transport's description of the failure (the error and its sources, joined by `: `).
    pub message: String,
    /// The transport's error, if any.
    #[source]
    pub source: Option<ErrorSource>,
}

impl DispatchFailure for TransportError {
    fn dispatch_outcome(&self) -> DispatchOutcome {
        self.outcome
    }
}

impl TransportError {
    /// Classifies `error` and keeps it as the source. A failed TLS handshake's message starts
    /// with what went wrong ([`tls_cause`]).
    pub(crate) fn from_reqwest(error: reqwest::Error) -> Self {
        let chain = error_chain(&error);
        let message = match crate::tls::rustls_error(&error) {
            Some(tls) => format!("TLS handshake failed: {}: {chain}", tls_cause(tls)),
            None => chain,
        };
        Self {
            outcome: classify_error(&error),
            message,
            source: Some(ErrorSource::new(error)),
        }
    }
}

/// Reads the answer of a finished `send()` completely.
///
/// # Errors
/// A [`TransportError`] when no complete answer came back: not dispatched for connect failures,
/// outcome unknown for timeouts, lost connections and bodies that stall or break.
///
/// # Example
/// A mutation to a port where nothing listens was never dispatched, so it must not fence
/// (inside `ScopedWrites::run`, return the `TransportError` from `ctx.dispatch`'s commit and the
/// runtime fences exactly the outcome-unknown failures):
/// ```
/// use std::time::Duration;
///
/// use tenantry_kernel::DispatchOutcome;
/// use tenantry_remote_http::client::mutation_client;
/// use tenantry_remote_http::outcome::read_answer;
/// use tenantry_remote_http::tls::RemoteTls;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port(); // then closed
/// let client = mutation_client(Duration::from_secs(5), &RemoteTls::default())?;
/// let sent = client.post(format!("http://127.0.0.1:{port}/v1/rename")).send().await;
/// let failure = read_answer(sent).await.expect_err("nothing listens there");
/// assert_eq!(failure.outcome, DispatchOutcome::NotDispatched);
/// # Ok(())
/// # }
/// ```
pub async fn read_answer(
    result: Result<Response, reqwest::Error>,
) -> Result<Answer, TransportError> {
    let response = result.map_err(TransportError::from_reqwest)?;
    let status = response.status();
    let retry_after = retry_after_header(&response);
    let body = response.bytes().await.map_err(|e| {
        let mut failure = TransportError::from_reqwest(e);
        // A response arrived: any failure reading its body leaves the outcome unknown.
        failure.outcome = TransportObservation::Response {
            status: Some(status.as_u16()),
            body: BodyRead::Unreadable,
        }
        .outcome();
        failure
    })?;
    Ok(Answer {
        status,
        retry_after,
        body: body.to_vec(),
    })
}

/// The raw `Retry-After` header of `response`, when present and readable.
pub(crate) fn retry_after_header(response: &Response) -> Option<String> {
    response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// What a rustls error means for the operator, and what to check: the start of the message of a
/// failed handshake.
pub fn tls_cause(error: &rustls::Error) -> String {
    use rustls::{AlertDescription, CertificateError, Error};
    match error {
        Error::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                "the remote's certificate is not issued by a trusted CA (unknown issuer); set \
                 the remote's CA file if a private CA issued it"
                    .to_owned()
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "the remote's certificate has expired".to_owned()
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "the remote's certificate is not valid yet (check the clocks)".to_owned()
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "the remote's certificate is not valid for the host name of the URL".to_owned()
            }
            CertificateError::Revoked => "the remote's certificate is revoked".to_owned(),
            other => format!("the remote's certificate is refused ({other:?})"),
        },
        Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::HandshakeFailure,
        ) => "the remote refused the handshake (does it require a client certificate, or \
              refuse this one?)"
            .to_owned(),
        other => format!("{other}"),
    }
}

/// `error` and its sources, joined by `: ` (the one message format of every client here).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
