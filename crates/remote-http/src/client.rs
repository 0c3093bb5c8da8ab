//! Mutation clients: HTTP clients for requests that change remote state.
//!
//! A mutation client never follows a redirect (a 3xx is an answer, returned as is) and never
//! retries (not even HTTP/2 protocol NACKs): retrying is the engine's decision, made with the
//! request's idempotency key, and a hidden retry would make dispatch outcomes unclassifiable.
//! One deadline covers connecting, sending and reading the whole body.

use std::time::Duration;

use tenantry_ports::error::ErrorSource;

/// Longest time spent establishing a connection, within the overall deadline.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The client could not be built (for example the TLS backend failed to initialise). Its
/// [`source`](std::error::Error::source) is the `reqwest::Error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot build the HTTP mutation client: {message}")]
pub struct ClientBuildError {
    message: String,
    #[source]
    source: Option<ErrorSource>,
}

/// A client for mutations with one overall `timeout` (connect, send, and read the whole
/// body); connecting alone is bounded by the smaller of `timeout` and
/// [`MAX_CONNECT_TIMEOUT`]. No redirects, no retries.
///
/// # Errors
/// [`ClientBuildError`] when reqwest cannot build the client.
pub fn mutation_client(timeout: Duration) -> Result<reqwest::Client, ClientBuildError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .timeout(timeout)
        .connect_timeout(timeout.min(MAX_CONNECT_TIMEOUT))
        .build()
        .map_err(|e| ClientBuildError {
            message: e.to_string(),
            source: Some(ErrorSource::new(e)),
        })
}
