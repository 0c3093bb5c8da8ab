//! `HttpDirectoryProvider`: the Directory API v1 client behind the [`DirectoryProvider`] port.
//!
//! Every `2xx` answer is read completely (refused above
//! [`DirectoryClientConfig::max_response_bytes`] as [`ProviderError::TooLarge`]), its
//! signature is verified ([`signature`]) and only then is the body parsed; an answer that
//! fails any step is refused as [`ProviderError::InvalidResponse`] and nothing of it reaches
//! the projector. In the dispatch-outcome vocabulary of [`crate::outcome`]: a call not
//! dispatched or whose outcome is unknown (transport failures, timeouts) is
//! [`ProviderError::Unavailable`] (a read changes nothing, so the two need no telling apart); an
//! answered error status is [`ProviderError::Refused`] with that status (its body needs no
//! signature: nothing is applied from it). One deadline (default [`DEFAULT_DEADLINE`]) covers
//! the whole call (for a paged snapshot, each page's call); no redirect is followed and nothing
//! is retried (the projector retries on its next sync).
//!
//! A snapshot is asked for in pages of [`DirectoryClientConfig::snapshot_page_size`]
//! memberships (`docs/protocol.md`, "Paged snapshots"): each page is verified like any answer
//! and the pages are joined by [`tenantry_directory::SnapshotPages`], which refuses pages that
//! do not form one snapshot. A provider that does not page answers the whole snapshot.

pub mod signature;
pub mod spool;

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{Method, Response, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tenantry_directory::paging::page_digest;
use tenantry_directory::{
    DirectoryDelta, DirectoryEventBatch, DirectorySnapshot, DirectorySnapshotPage, InstanceUuid,
    SnapshotPages, WorkspaceUuid,
};
use tenantry_ports::directory::{DirectoryProvider, ProviderError, SnapshotSource};

use self::spool::SpooledSnapshot;
use tenantry_ports::error::ErrorSource;

use crate::client::{ClientBuildError, mutation_client, parse_base_url};
use crate::outcome::TransportError;
use crate::tls::RemoteTls;
use signature::{SignatureHeaders, SignedRequest, TrustedKeys};
use tenantry_kernel::text::{MAX_CODE_BYTES, MAX_MESSAGE_BYTES, bounded};

/// Default largest accepted response body: 128 MiB (for a paged snapshot, all its pages
/// together).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 128 * 1024 * 1024;

/// Default memberships per page asked of a provider that pages snapshots (`docs/protocol.md`,
/// "Paged snapshots"): 10,000, about 3.6 MB of JSON.
pub const DEFAULT_SNAPSHOT_PAGE_SIZE: u32 = 10_000;

/// Default total deadline of one directory call.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);

/// Configuration of an [`HttpDirectoryProvider`].
#[derive(Clone, PartialEq, Eq)]
pub struct DirectoryClientConfig {
    /// Base URL (`http` or `https`), optionally with a path prefix; `/v1/...` is appended.
    pub base_url: String,
    /// Bearer token, when the provider requires one.
    pub bearer_token: Option<String>,
    /// Public keys whose signatures are accepted, by key id (several during a rotation).
    pub trusted_keys: TrustedKeys,
    /// Largest accepted difference between a response's signing time and the local clock.
    pub max_skew: Duration,
    /// Largest accepted response body, bytes; a paged snapshot's pages count together.
    pub max_response_bytes: u64,
    /// Memberships per page asked for a snapshot (`?page_size=`); `None` asks for the whole
    /// snapshot in one answer. A provider that does not page answers the whole snapshot
    /// either way.
    pub snapshot_page_size: Option<u32>,
    /// Total deadline of one call.
    pub deadline: Duration,
    /// TLS of an `https` base URL: the platform's roots by default, plus an optional CA file
    /// and client certificate ([`RemoteTls`]).
    pub tls: RemoteTls,
}

impl DirectoryClientConfig {
    /// A configuration with default skew (300 s), size limit (128 MiB), snapshot page size
    /// (10,000 memberships) and deadline.
    pub fn new(base_url: impl Into<String>, trusted_keys: TrustedKeys) -> Self {
        Self {
            base_url: base_url.into(),
            bearer_token: None,
            trusted_keys,
            max_skew: signature::DEFAULT_MAX_SKEW,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            snapshot_page_size: Some(DEFAULT_SNAPSHOT_PAGE_SIZE),
            deadline: DEFAULT_DEADLINE,
            tls: RemoteTls::default(),
        }
    }

    /// Sets [`tls`](Self::tls) (its files are read by [`HttpDirectoryProvider::new`]).
    #[must_use]
    pub fn with_tls(mut self, tls: RemoteTls) -> Self {
        self.tls = tls;
        self
    }

    /// Sets the [`bearer_token`](Self::bearer_token) sent on every call (not empty, checked by
    /// [`HttpDirectoryProvider::new`]).
    #[must_use]
    pub fn with_bearer_token(mut self, bearer_token: impl Into<String>) -> Self {
        self.bearer_token = Some(bearer_token.into());
        self
    }

    /// Sets [`max_skew`](Self::max_skew).
    #[must_use]
    pub fn with_max_skew(mut self, max_skew: Duration) -> Self {
        self.max_skew = max_skew;
        self
    }

    /// Sets [`max_response_bytes`](Self::max_response_bytes).
    #[must_use]
    pub fn with_max_response_bytes(mut self, max_response_bytes: u64) -> Self {
        self.max_response_bytes = max_response_bytes;
        self
    }

    /// Sets [`snapshot_page_size`](Self::snapshot_page_size) (above zero when set, checked by
    /// [`HttpDirectoryProvider::new`]).
    #[must_use]
    pub fn with_snapshot_page_size(mut self, snapshot_page_size: Option<u32>) -> Self {
        self.snapshot_page_size = snapshot_page_size;
        self
    }

    /// Sets [`deadline`](Self::deadline) (above zero, checked by
    /// [`HttpDirectoryProvider::new`]).
    #[must_use]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }
}

impl fmt::Debug for DirectoryClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectoryClientConfig")
            .field("base_url", &self.base_url)
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("trusted_keys", &self.trusted_keys)
            .field("max_skew", &self.max_skew)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("deadline", &self.deadline)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A [`DirectoryClientConfig`] that cannot work; fix the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectoryConfigError {
    /// The base URL does not parse or is not `http`/`https`.
    #[error("directory base URL {url:?} is invalid: {reason}; give an http(s) URL")]
    InvalidBaseUrl {
        /// The configured URL.
        url: String,
        /// What is wrong with it.
        reason: String,
        /// The URL parser's error, when the URL does not parse.
        #[source]
        source: Option<ErrorSource>,
    },
    /// No key is trusted: every answer would be refused.
    #[error("no trusted directory signing key is configured")]
    NoTrustedKeys,
    /// The bearer token is empty or not a valid header value.
    #[error("directory bearer token is empty or contains characters not allowed in a header")]
    InvalidToken,
    /// The deadline is zero.
    #[error("directory call deadline must be above zero")]
    ZeroDeadline,
    /// The snapshot page size is zero.
    #[error(
        "directory snapshot page size must be at least 1 membership (or unset to ask for the whole snapshot at once)"
    )]
    ZeroPageSize,
    /// The HTTP client could not be built, for example because a TLS file of
    /// [`DirectoryClientConfig::tls`] cannot be used ([`ClientBuildError::tls`] names it).
    #[error(transparent)]
    Client(#[from] ClientBuildError),
}

/// The reqwest implementation of the [`DirectoryProvider`] port, verifying signatures.
#[derive(Clone)]
pub struct HttpDirectoryProvider {
    client: reqwest::Client,
    base: Url,
    authorization: Option<HeaderValue>,
    trusted: TrustedKeys,
    max_skew: Duration,
    max_bytes: u64,
    page_size: Option<u32>,
    deadline: Duration,
}

impl fmt::Debug for HttpDirectoryProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpDirectoryProvider")
            .field("base", &self.base.as_str())
            .field("trusted", &self.trusted)
            .finish_non_exhaustive()
    }
}

impl HttpDirectoryProvider {
    /// Builds a client from `config`.
    ///
    /// # Errors
    /// [`DirectoryConfigError`] naming the invalid setting.
    pub fn new(config: &DirectoryClientConfig) -> Result<Self, DirectoryConfigError> {
        let base = parse_base_url(&config.base_url).map_err(|refusal| {
            DirectoryConfigError::InvalidBaseUrl {
                url: config.base_url.clone(),
                reason: refusal.reason,
                source: refusal.source,
            }
        })?;
        if config.trusted_keys.is_empty() {
            return Err(DirectoryConfigError::NoTrustedKeys);
        }
        if config.deadline.is_zero() {
            return Err(DirectoryConfigError::ZeroDeadline);
        }
        if config.snapshot_page_size == Some(0) {
            return Err(DirectoryConfigError::ZeroPageSize);
        }
        let authorization = match &config.bearer_token {
            None => None,
            Some(token) if token.is_empty() => return Err(DirectoryConfigError::InvalidToken),
            Some(token) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
                    .map_err(|_| DirectoryConfigError::InvalidToken)?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Self {
            client: mutation_client(config.deadline, &config.tls)?,
            base,
            authorization,
            trusted: config.trusted_keys.clone(),
            max_skew: config.max_skew,
            max_bytes: config.max_response_bytes,
            page_size: config.snapshot_page_size,
            deadline: config.deadline,
        })
    }

    fn endpoint(&self, instance: &InstanceUuid, last: &str) -> Result<Url, ProviderError> {
        crate::path::with_segments(
            &self.base,
            &["v1", "instances", instance.as_str(), "directory", last],
        )
        .map_err(|reason| ProviderError::unavailable(format!("directory request path: {reason}")))
    }

    /// Sends one request and returns its verified body (a non-success status is
    /// [`ProviderError::Refused`]).
    async fn fetch_verified(
        &self,
        method: Method,
        url: Url,
        body: Option<Vec<u8>>,
        already: u64,
    ) -> Result<VerifiedBody, ProviderError> {
        // The request as the signature binds it: the path below the base URL's own prefix.
        let prefix = self.base.path().trim_end_matches('/');
        let path = url
            .path()
            .strip_prefix(prefix)
            .unwrap_or(url.path())
            .to_owned();
        let query = url.query().unwrap_or("").to_owned();
        let method_name = method.as_str().to_owned();
        let span = tracing::info_span!(
            "directory_request",
            http.request.method = %method_name,
            url.path = %path,
        );
        let mut request = self.client.request(method, url).timeout(self.deadline);
        if let Some(traceparent) = span.in_scope(crate::trace_context::current) {
            request = request.header(crate::TRACEPARENT_HEADER, traceparent);
        }
        if let Some(auth) = &self.authorization {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body);
        }
        let signed_request = SignedRequest {
            method: &method_name,
            path: &path,
            query: &query,
        };
        let call = async {
            let response = request.send().await.map_err(unavailable)?;
            let status = response.status();
            if !status.is_success() {
                let budget = Budget {
                    max: self.max_bytes,
                    already: 0,
                };
                let body = read_limited(response, budget, Vec::new()).await?;
                return Err(refusal(status, &body));
            }
            // The headers are checked before the body is read, and the body is read after the
            // signed message's prefix: the signature is checked over that one buffer, so a
            // large snapshot is held once, not copied into a second message.
            let headers = response.headers();
            let pending = signature::check_headers(
                &SignatureHeaders {
                    key_id: header(headers, signature::KEY_ID_HEADER),
                    timestamp: header(headers, signature::TIMESTAMP_HEADER),
                    signature: header(headers, signature::SIGNATURE_HEADER),
                },
                &signed_request,
                &self.trusted,
                Utc::now().timestamp(),
                self.max_skew,
            )
            .map_err(|e| ProviderError::invalid_response(e.to_string()).with_source(e))?;
            let start = pending.prefix_len();
            let message = read_limited(
                response,
                Budget {
                    max: self.max_bytes,
                    already,
                },
                pending.message_prefix(),
            )
            .await?;
            pending
                .verify(&message)
                .map_err(|e| ProviderError::invalid_response(e.to_string()).with_source(e))?;
            Ok::<_, ProviderError>(VerifiedBody { message, start })
        };
        let call = tracing::Instrument::instrument(call, span);
        tokio::time::timeout(self.deadline, call)
            .await
            .map_err(|_| {
                ProviderError::unavailable(format!(
                    "no complete directory answer within the {}s deadline",
                    self.deadline.as_secs_f64()
                ))
            })?
    }
}

impl HttpDirectoryProvider {
    /// Fetches one snapshot answer (a page or the whole snapshot): the parsed page, the
    /// digest of its body and the verified body itself. `already` bytes of the size cap went
    /// to the earlier pages.
    async fn fetch_page(
        &self,
        url: Url,
        already: u64,
    ) -> Result<(DirectorySnapshotPage, String, VerifiedBody), ProviderError> {
        let verified = self.fetch_verified(Method::GET, url, None, already).await?;
        let body = verified.body();
        let page: DirectorySnapshotPage = parse(body)?;
        let digest = page_digest(body);
        Ok((page, digest, verified))
    }

    /// The first answer of a snapshot, started as [`SnapshotPages`] (its body is handed back
    /// for a caller that spools it).
    async fn first_page(
        &self,
        instance: &InstanceUuid,
    ) -> Result<(SnapshotPages, VerifiedBody), ProviderError> {
        let mut url = self.endpoint(instance, "snapshot")?;
        if let Some(size) = self.page_size {
            url.query_pairs_mut()
                .append_pair("page_size", &size.to_string());
        }
        let (page, digest, body) = self.fetch_page(url, 0).await?;
        let pages = SnapshotPages::first(page, digest, body.len(), self.max_bytes)
            .map_err(invalid_pages)?;
        same_instance(instance, pages.instance_uuid())?;
        Ok((pages, body))
    }

    /// The page `token` names, added to `pages` (its body is handed back).
    async fn next_page(
        &self,
        instance: &InstanceUuid,
        pages: SnapshotPages,
        token: &str,
    ) -> Result<(SnapshotPages, VerifiedBody), ProviderError> {
        let mut url = self.endpoint(instance, "snapshot")?;
        url.query_pairs_mut().append_pair("page_token", token);
        let (page, digest, body) = self.fetch_page(url, pages.bytes()).await.map_err(|e| match e {
            ProviderError::Refused { status: 410, message } => ProviderError::Refused {
                status: 410,
                message: format!(
                    "{message} (the provider dropped the snapshot being paged; the next attempt starts again from the first page)"
                ),
            },
            other => other,
        })?;
        let pages = pages
            .push(page, digest, body.len())
            .map_err(invalid_pages)?;
        Ok((pages, body))
    }
}

/// The port's error for a spool that could not be written.
fn spool_failed(error: std::io::Error) -> ProviderError {
    ProviderError::unavailable(format!(
        "spooling the directory snapshot to a temporary file failed: {error}; check the free space of the temporary folder (TMPDIR)"
    ))
}

/// The port's error for pages that do not form one snapshot.
fn invalid_pages(error: tenantry_directory::PageError) -> ProviderError {
    match error {
        // The cap over all pages is the client's size cap, a capacity refusal like one body
        // over it (reading a page stops at the cap already; this is the backstop).
        tenantry_directory::PageError::TooLarge { size, limit } => {
            ProviderError::TooLarge { size, limit }
        }
        other => ProviderError::invalid_response(other.to_string()).with_source(other),
    }
}

/// A verified answer: the signed message, whose bytes from `start` are the body.
struct VerifiedBody {
    message: Vec<u8>,
    start: usize,
}

impl VerifiedBody {
    /// The body exactly as received.
    fn body(&self) -> &[u8] {
        &self.message[self.start..]
    }

    /// The body's length in bytes.
    fn len(&self) -> u64 {
        self.body().len() as u64
    }
}

/// The port's error for a non-success answer. What the provider says is bounded data (case
/// 010): its code and message lose control characters and are cut (64 and 2,048 bytes)
/// before they are logged, kept as the last sync error or shown.
fn refusal(status: reqwest::StatusCode, body: &[u8]) -> ProviderError {
    let message = match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => format!(
            "{}: {}",
            bounded(&e.code, MAX_CODE_BYTES),
            bounded(&e.message, MAX_MESSAGE_BYTES)
        ),
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(256)]).into_owned(),
    };
    let message = bounded(&message, MAX_MESSAGE_BYTES).into_owned();
    ProviderError::Refused {
        status: status.as_u16(),
        message,
    }
}

#[async_trait]
impl DirectoryProvider for HttpDirectoryProvider {
    async fn fetch_snapshot(
        &self,
        instance: &InstanceUuid,
    ) -> Result<DirectorySnapshot, ProviderError> {
        let (mut pages, _) = self.first_page(instance).await?;
        while let Some(token) = pages.next_token().map(str::to_owned) {
            (pages, _) = self.next_page(instance, pages, &token).await?;
        }
        pages.finish().map_err(invalid_pages)
    }

    /// A provider that answers in one body gives the joined snapshot (one page in memory);
    /// the pages of a paged snapshot are spooled ([`spool`]) as they are verified, so the
    /// process holds one page at a time.
    async fn fetch_snapshot_source(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Box<dyn SnapshotSource>, ProviderError> {
        let (mut pages, body) = self.first_page(instance).await?;
        let Some(token) = pages.next_token().map(str::to_owned) else {
            return Ok(Box::new(pages.finish().map_err(invalid_pages)?));
        };
        let mut spool = SpooledSnapshot::new(pages.instance_uuid().clone(), pages.cursor())
            .map_err(spool_failed)?;
        spool
            .append(body.body(), &pages.take_workspaces())
            .map_err(spool_failed)?;
        drop(body);
        let mut next = Some(token);
        while let Some(token) = next {
            let body;
            (pages, body) = self.next_page(instance, pages, &token).await?;
            spool
                .append(body.body(), &pages.take_workspaces())
                .map_err(spool_failed)?;
            drop(body);
            next = pages.next_token().map(str::to_owned);
        }
        pages.finish().map_err(invalid_pages)?;
        Ok(Box::new(spool))
    }

    async fn fetch_events(
        &self,
        instance: &InstanceUuid,
        after: i64,
        limit: u32,
    ) -> Result<DirectoryEventBatch, ProviderError> {
        let mut url = self.endpoint(instance, "events")?;
        url.query_pairs_mut()
            .append_pair("after", &after.to_string())
            .append_pair("limit", &limit.to_string());
        let body = self.fetch_verified(Method::GET, url, None, 0).await?;
        let batch: DirectoryEventBatch = parse(body.body())?;
        same_instance(instance, &batch.instance_uuid)?;
        Ok(batch)
    }

    async fn fetch_workspaces(
        &self,
        instance: &InstanceUuid,
        workspace_uuids: &[WorkspaceUuid],
    ) -> Result<DirectoryDelta, ProviderError> {
        let url = self.endpoint(instance, "workspaces")?;
        let request = serde_json::to_vec(&WorkspacesBody { workspace_uuids }).map_err(|e| {
            ProviderError::unavailable(format!("cannot encode the request body: {e}"))
                .with_source(e)
        })?;
        let body = self
            .fetch_verified(Method::POST, url, Some(request), 0)
            .await?;
        let delta: DirectoryDelta = parse(body.body())?;
        same_instance(instance, &delta.instance_uuid)?;
        Ok(delta)
    }
}

#[derive(Serialize)]
struct WorkspacesBody<'a> {
    workspace_uuids: &'a [WorkspaceUuid],
}

#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    #[serde(default)]
    message: String,
}

/// What a body may still take of the size cap: `max` bytes, of which `already` went to the
/// earlier pages of the same snapshot (0 for any other answer).
#[derive(Debug, Clone, Copy)]
struct Budget {
    max: u64,
    already: u64,
}

/// Reads the whole body after `buffer`'s bytes, refusing it as soon as the body and what the
/// budget already spent exceed the cap (announced or read). Room for an announced body is
/// reserved at once.
async fn read_limited(
    mut response: Response,
    budget: Budget,
    mut buffer: Vec<u8>,
) -> Result<Vec<u8>, ProviderError> {
    let too_large = |size: u64| ProviderError::TooLarge {
        size: budget.already.saturating_add(size),
        limit: budget.max,
    };
    let room = budget.max.saturating_sub(budget.already);
    let start = buffer.len();
    if let Some(announced) = response.content_length() {
        if announced > room {
            return Err(too_large(announced));
        }
        buffer.reserve_exact(usize::try_from(announced).unwrap_or(0));
    }
    while let Some(chunk) = response.chunk().await.map_err(unavailable)? {
        let size = (buffer.len() - start + chunk.len()) as u64;
        if size > room {
            return Err(too_large(size));
        }
        buffer.extend_from_slice(&chunk);
    }
    Ok(buffer)
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ProviderError> {
    serde_json::from_slice(body).map_err(|e| {
        // The decoder's message may quote the provider's text.
        let message = format!("signed directory body does not parse: {e}");
        ProviderError::invalid_response(bounded(&message, MAX_MESSAGE_BYTES)).with_source(e)
    })
}

fn same_instance(asked: &InstanceUuid, answered: &InstanceUuid) -> Result<(), ProviderError> {
    if asked == answered {
        Ok(())
    } else {
        Err(ProviderError::invalid_response(format!(
            "asked for instance {asked}, the answer is for {answered}"
        )))
    }
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The port's error for a transport failure, classified like every call of this crate
/// ([`TransportError`]: not dispatched or outcome unknown, which a read does not need to tell
/// apart): its text and its sources, joined by `: `; the `reqwest::Error` is kept as the source.
fn unavailable(error: reqwest::Error) -> ProviderError {
    let failure = TransportError::from_reqwest(error);
    ProviderError::Unavailable {
        message: failure.message,
        source: failure.source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> TrustedKeys {
        let mut t = TrustedKeys::new();
        t.insert_hex(
            "k1",
            &hex::encode(
                ed25519_dalek::SigningKey::from_bytes(&[1; 32])
                    .verifying_key()
                    .as_bytes(),
            ),
        )
        .unwrap();
        t
    }

    #[test]
    fn endpoint_encodes_the_instance_and_keeps_a_prefix() {
        let p = HttpDirectoryProvider::new(&DirectoryClientConfig::new(
            "https://d.example/api",
            keys(),
        ))
        .unwrap();
        let url = p
            .endpoint(&InstanceUuid::parse("in?st#1").unwrap(), "snapshot")
            .unwrap();
        assert_eq!(
            url.as_str(),
            "https://d.example/api/v1/instances/in%3Fst%231/directory/snapshot"
        );
    }

    #[tokio::test]
    async fn unreachable_provider_keeps_the_reqwest_error_as_source() {
        use std::error::Error as _;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        drop(listener);
        let p = HttpDirectoryProvider::new(&DirectoryClientConfig::new(url, keys())).unwrap();
        let error = p
            .fetch_snapshot(&InstanceUuid::parse("inst").unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(error, ProviderError::Unavailable { .. }),
            "{error:?}"
        );
        let source = error.source().unwrap();
        assert!(source.is::<reqwest::Error>(), "{source:?}");
    }

    #[test]
    fn configuration_without_trusted_keys_is_refused() {
        let cfg = DirectoryClientConfig::new("http://x", TrustedKeys::new());
        assert_eq!(
            HttpDirectoryProvider::new(&cfg).unwrap_err(),
            DirectoryConfigError::NoTrustedKeys
        );
        let cfg = DirectoryClientConfig::new("file:///x", keys());
        assert!(matches!(
            HttpDirectoryProvider::new(&cfg),
            Err(DirectoryConfigError::InvalidBaseUrl { .. })
        ));
        let cfg = DirectoryClientConfig {
            bearer_token: Some(String::new()),
            ..DirectoryClientConfig::new("http://x", keys())
        };
        assert_eq!(
            HttpDirectoryProvider::new(&cfg).unwrap_err(),
            DirectoryConfigError::InvalidToken
        );
    }

    #[tokio::test]
    async fn case_009_the_provider_receives_every_accepted_instance_as_one_exact_segment() {
        use crate::path::testing::{accepted_id_shapes, id_segments, recording};
        let body = r#"{"code":"NOPE","message":"no"}"#;
        let (url, targets) = recording(format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let p = HttpDirectoryProvider::new(&DirectoryClientConfig::new(url, keys())).unwrap();
        for id in accepted_id_shapes() {
            let instance = InstanceUuid::parse(id.as_str()).unwrap();
            p.fetch_snapshot(&instance).await.unwrap_err();
            let sent = std::mem::take(&mut *targets.lock().unwrap());
            assert_eq!(sent.len(), 1, "{id:?}");
            let ids = id_segments(&sent[0], &["v1", "instances", "*", "directory", "snapshot"]);
            assert_eq!(ids, [id.as_bytes().to_vec()], "{id:?}");
        }
    }

    #[tokio::test]
    async fn case_010_a_provider_error_is_bounded_data() {
        let body = serde_json::json!({
            "code": "c".repeat(200 * 1024),
            "message": format!("\u{1b}[2J{}", "m".repeat(700 * 1024)),
        })
        .to_string();
        let url = crate::path::testing::recording(format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ))
        .await
        .0;
        let p = HttpDirectoryProvider::new(&DirectoryClientConfig {
            max_response_bytes: 2 * 1024 * 1024,
            ..DirectoryClientConfig::new(url, keys())
        })
        .unwrap();
        let error = p
            .fetch_snapshot(&InstanceUuid::parse("inst").unwrap())
            .await
            .unwrap_err();
        let ProviderError::Refused { status, message } = error else {
            panic!("{error:?}")
        };
        assert_eq!(status, 500);
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(!message.contains('\u{1b}'), "{message}");
        assert!(
            message.starts_with(&format!("{}\u{2026}: [2Jmmm", "c".repeat(61))),
            "{message}"
        );
    }

    #[test]
    fn instance_mismatch_is_an_invalid_response() {
        let a = InstanceUuid::parse("a").unwrap();
        let b = InstanceUuid::parse("b").unwrap();
        assert!(same_instance(&a, &a).is_ok());
        assert!(matches!(
            same_instance(&a, &b),
            Err(ProviderError::InvalidResponse { .. })
        ));
    }
}
