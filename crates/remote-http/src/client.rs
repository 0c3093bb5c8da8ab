//! Mutation clients: HTTP clients for requests that change remote state.
//!
//! A mutation client never follows a redirect (a 3xx is an answer, returned as is) and never
//! retries (not even HTTP/2 protocol NACKs): retrying is the engine's decision, made with the
//! request's idempotency key, and a hidden retry would make dispatch outcomes unclassifiable.
//! One deadline covers connecting, sending and reading the whole body. Both clients of this
//! crate check their base URL with the same rule (`parse_base_url`).

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
    // reqwest is built without a default crypto provider: use rustls's ring provider (a
    // provider the host installed first is kept).
    let _ = rustls::crypto::ring::default_provider().install_default();
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

/// Why a client's base URL was refused: the reason, and the URL parser's error when the text
/// did not parse. Each client turns it into its own config error, naming the URL.
#[cfg(any(feature = "lifecycle", feature = "directory"))]
#[derive(Debug)]
pub(crate) struct BaseUrlRefusal {
    /// What is wrong with the URL.
    pub(crate) reason: String,
    /// The parser's error, if the text is no URL at all.
    pub(crate) source: Option<ErrorSource>,
}

/// Parses a client's base URL: `http` or `https`, able to take a path below it, without a
/// query or fragment.
#[cfg(any(feature = "lifecycle", feature = "directory"))]
pub(crate) fn parse_base_url(url: &str) -> Result<reqwest::Url, BaseUrlRefusal> {
    let refused = |reason: &str| BaseUrlRefusal {
        reason: reason.to_owned(),
        source: None,
    };
    let base = reqwest::Url::parse(url).map_err(|e| BaseUrlRefusal {
        reason: e.to_string(),
        source: Some(ErrorSource::new(e)),
    })?;
    if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
        return Err(refused("the scheme must be http or https"));
    }
    if base.query().is_some() || base.fragment().is_some() {
        return Err(refused("a query or fragment is not allowed"));
    }
    Ok(base)
}
