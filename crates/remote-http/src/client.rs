//! Mutation clients: HTTP clients for requests that change remote state.
//!
//! A mutation client never follows a redirect (a 3xx is an answer, returned as is) and never
//! retries (not even HTTP/2 protocol NACKs): retrying is the engine's decision, made with the
//! request's idempotency key, and a hidden retry would make dispatch outcomes unclassifiable.
//! One deadline covers connecting, sending and reading the whole body. TLS is the rustls
//! configuration of [`crate::tls`] (the platform's roots plus a CA file, an optional client
//! certificate, TLS 1.2 minimum), never reqwest's own. Both clients of this crate check their
//! base URL with the same rule (`parse_base_url`).

use std::time::Duration;

use tenantry_ports::error::ErrorSource;

use crate::tls::{RemoteTls, TlsConfigError};

/// Longest time spent establishing a connection, within the overall deadline.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The client could not be built: its TLS settings cannot work (a CA or client certificate
/// file missing, unreadable or not PEM: [`ClientBuildError::tls`] names it), or reqwest failed
/// to initialise. Its [`source`](std::error::Error::source) is the [`TlsConfigError`] or the
/// `reqwest::Error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot build the HTTP mutation client: {message}")]
pub struct ClientBuildError {
    message: String,
    tls: Option<TlsConfigError>,
    #[source]
    source: Option<ErrorSource>,
}

impl ClientBuildError {
    /// The TLS setting that cannot work, when that is why the client was not built.
    pub fn tls(&self) -> Option<&TlsConfigError> {
        self.tls.as_ref()
    }
}

impl From<TlsConfigError> for ClientBuildError {
    fn from(error: TlsConfigError) -> Self {
        Self {
            message: error.to_string(),
            tls: Some(error.clone()),
            source: Some(ErrorSource::new(error)),
        }
    }
}

/// A client for mutations with one overall `timeout` (connect, send, and read the whole
/// body); connecting alone is bounded by the smaller of `timeout` and
/// [`MAX_CONNECT_TIMEOUT`]. No redirects, no retries. `https` URLs are verified as `tls`
/// says ([`RemoteTls::client_config`]; `RemoteTls::default()` trusts the platform's roots).
///
/// # Errors
/// [`ClientBuildError`] when a TLS file cannot be used or reqwest cannot build the client.
pub fn mutation_client(
    timeout: Duration,
    tls: &RemoteTls,
) -> Result<reqwest::Client, ClientBuildError> {
    client_builder(tls)?
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .timeout(timeout)
        .connect_timeout(timeout.min(MAX_CONNECT_TIMEOUT))
        .build()
        .map_err(|e| ClientBuildError {
            message: e.to_string(),
            tls: None,
            source: Some(ErrorSource::new(e)),
        })
}

/// A reqwest client builder whose TLS is `tls` ([`RemoteTls::client_config`]), for any other
/// client a host builds (reqwest is built with rustls but without a default crypto provider,
/// so `reqwest::Client::new()` cannot make TLS connections; build clients from this instead).
///
/// # Errors
/// [`ClientBuildError`] when a TLS file cannot be used.
pub fn client_builder(tls: &RemoteTls) -> Result<reqwest::ClientBuilder, ClientBuildError> {
    Ok(reqwest::Client::builder().tls_backend_preconfigured(tls.client_config()?))
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
