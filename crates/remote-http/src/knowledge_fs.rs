//! `HttpKnowledgeFs`: the KnowledgeFS lifecycle API v1 client behind the
//! [`KnowledgeFs`] port.
//!
//! Every call carries `Authorization: Bearer <token>`; every mutation carries the command's
//! `Idempotency-Key` (stable across the saga's retries). One deadline (default
//! [`DEFAULT_DEADLINE`]) covers waiting for a concurrency permit, connecting, sending and
//! reading the whole body; at most [`DEFAULT_MAX_CONCURRENT_CALLS`] calls are in flight per
//! client. The client follows no redirect and never retries: the saga decides retries.
//!
//! Failures are classified by [`crate::outcome`] into the kernel's [`DispatchOutcome`] and
//! mapped to [`RemoteError`]:
//! - waiting for a permit past the deadline, or a connection that was never made:
//!   [`DispatchOutcome::NotDispatched`] (`REMOTE_CLIENT_SATURATED` / `REMOTE_UNAVAILABLE`);
//! - any status outside 2xx with a complete body: [`DispatchOutcome::Answered`] with the
//!   status, the remote's `{code, message}` (or `KFS_HTTP_<status>` when the body is not that
//!   shape), bounded by [`tenantry_lifecycle::code::bounded_error`] (a code that is not an
//!   upper-case identifier becomes `REMOTE_ERROR_CODE_INVALID`, the message loses control
//!   characters and is cut to 2,048 bytes), and its `Retry-After`;
//! - a deadline after sending, a lost or reset connection, an unreadable body, or a 2xx
//!   body that does not decode: [`DispatchOutcome::OutcomeUnknown`]
//!   (`REMOTE_OUTCOME_UNKNOWN`). The saga retries such a command with the same idempotency
//!   key and provisioning key (the remote's idempotency answers a repeated provision with the
//!   space it already created), never with new keys.
//!
//! Bodies are read with a size cap ([`DEFAULT_MAX_BODY_BYTES`], `max_body_bytes`), refused as
//! soon as the announced length or the bytes read exceed it (the rest is never buffered):
//! - a mutation answered 2xx with an over-cap body: outcome unknown (the remote says it did
//!   something, but we cannot read what);
//! - any other over-cap body (a non-2xx status, or a lookup's 2xx): an answered error with
//!   code [`CODE_RESPONSE_TOO_LARGE`] and the real status (and its `Retry-After`); a refused
//!   mutation changed nothing, and a lookup changes nothing.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tenantry_kernel::outcome::DispatchOutcome;
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, OperationId, ProvisioningKey, TenantId};
use tenantry_lifecycle::code::bounded_error;
use tenantry_lifecycle::{
    DeletionProgress, DeletionRequest, ErrorCode, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest,
};
use tenantry_ports::error::ErrorSource;
use tenantry_ports::lifecycle::{KnowledgeFs, RemoteError};
use tokio::sync::Semaphore;

use crate::client::{ClientBuildError, mutation_client, parse_base_url};
use crate::outcome::{Answer, TransportError, error_chain, retry_after_header};
use crate::tls::RemoteTls;

/// Default total deadline of one call (queueing, connect, send, whole body).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(150);

/// Default number of calls one client runs at once.
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 4;

/// Code of a call that waited for a concurrency permit until its deadline passed.
pub const CODE_CLIENT_SATURATED: ErrorCode = ErrorCode::RemoteClientSaturated;

/// Code of a lookup that found more than one space for one provisioning key.
pub const CODE_LOOKUP_AMBIGUOUS: ErrorCode = ErrorCode::KnowledgeFsLookupAmbiguous;

/// Default largest response body read from KnowledgeFS: 1 MiB (its answers are a few hundred
/// bytes; a lookup lists the spaces of one provisioning key).
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;

/// Code of an answer whose body exceeded `max_body_bytes` (when it is not outcome unknown).
pub const CODE_RESPONSE_TOO_LARGE: ErrorCode = ErrorCode::KfsResponseTooLarge;

/// Name of the idempotency header sent with every mutation.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// Configuration of an [`HttpKnowledgeFs`].
#[derive(Clone, PartialEq, Eq)]
pub struct KnowledgeFsConfig {
    /// Base URL (`http` or `https`), optionally with a path prefix; `/v1/...` is appended.
    pub base_url: String,
    /// Bearer token sent on every call.
    pub bearer_token: String,
    /// Total deadline of one call, covering queueing for a permit and the whole body.
    pub deadline: Duration,
    /// Most calls in flight at once (at least 1).
    pub max_concurrent_calls: usize,
    /// Largest response body read, in bytes (at least 1); see the module docs for how a
    /// larger one is classified.
    pub max_body_bytes: usize,
    /// TLS of an `https` base URL: the platform's roots by default, plus an optional CA file
    /// and client certificate ([`RemoteTls`]).
    pub tls: RemoteTls,
}

impl KnowledgeFsConfig {
    /// A configuration with the default deadline and concurrency.
    pub fn new(base_url: impl Into<String>, bearer_token: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            bearer_token: bearer_token.into(),
            deadline: DEFAULT_DEADLINE,
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            tls: RemoteTls::default(),
        }
    }

    /// Sets [`tls`](Self::tls) (its files are read by [`HttpKnowledgeFs::new`]).
    #[must_use]
    pub fn with_tls(mut self, tls: RemoteTls) -> Self {
        self.tls = tls;
        self
    }

    /// Sets [`deadline`](Self::deadline) (above zero, checked by [`HttpKnowledgeFs::new`]).
    #[must_use]
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Sets [`max_concurrent_calls`](Self::max_concurrent_calls) (at least 1, checked by
    /// [`HttpKnowledgeFs::new`]).
    #[must_use]
    pub fn with_max_concurrent_calls(mut self, max_concurrent_calls: usize) -> Self {
        self.max_concurrent_calls = max_concurrent_calls;
        self
    }

    /// Sets [`max_body_bytes`](Self::max_body_bytes) (at least 1, checked by
    /// [`HttpKnowledgeFs::new`]).
    #[must_use]
    pub fn with_max_body_bytes(mut self, max_body_bytes: usize) -> Self {
        self.max_body_bytes = max_body_bytes;
        self
    }
}

impl fmt::Debug for KnowledgeFsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KnowledgeFsConfig")
            .field("base_url", &self.base_url)
            .field("bearer_token", &"<redacted>")
            .field("deadline", &self.deadline)
            .field("max_concurrent_calls", &self.max_concurrent_calls)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A [`KnowledgeFsConfig`] that cannot work; fix the configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KnowledgeFsConfigError {
    /// The base URL does not parse or is not `http`/`https`.
    #[error("KnowledgeFS base URL {url:?} is invalid: {reason}; give an http(s) URL")]
    InvalidBaseUrl {
        /// The configured URL.
        url: String,
        /// What is wrong with it.
        reason: String,
        /// The URL parser's error, when the URL does not parse.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The bearer token is empty or not a valid header value.
    #[error("KnowledgeFS bearer token is empty or contains characters not allowed in a header")]
    InvalidToken,
    /// The deadline is zero.
    #[error("KnowledgeFS call deadline must be above zero")]
    ZeroDeadline,
    /// The concurrency limit is zero.
    #[error("KnowledgeFS max_concurrent_calls must be at least 1")]
    ZeroConcurrency,
    /// The body size cap is zero.
    #[error("KnowledgeFS max_body_bytes must be at least 1")]
    ZeroBodyCap,
    /// The HTTP client could not be built, for example because a TLS file of
    /// [`KnowledgeFsConfig::tls`] cannot be used ([`ClientBuildError::tls`] names it).
    #[error(transparent)]
    Client(#[from] ClientBuildError),
}

/// The reqwest implementation of the [`KnowledgeFs`] port.
#[derive(Clone)]
pub struct HttpKnowledgeFs {
    client: reqwest::Client,
    base: Url,
    authorization: HeaderValue,
    deadline: Duration,
    max_body_bytes: usize,
    permits: Arc<Semaphore>,
}

impl fmt::Debug for HttpKnowledgeFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpKnowledgeFs")
            .field("base", &self.base.as_str())
            .field("deadline", &self.deadline)
            .field("available_permits", &self.permits.available_permits())
            .finish_non_exhaustive()
    }
}

impl HttpKnowledgeFs {
    /// Builds a client from `config`.
    ///
    /// # Errors
    /// [`KnowledgeFsConfigError`] naming the invalid setting.
    pub fn new(config: &KnowledgeFsConfig) -> Result<Self, KnowledgeFsConfigError> {
        let base = parse_base_url(&config.base_url).map_err(|refusal| {
            KnowledgeFsConfigError::InvalidBaseUrl {
                url: config.base_url.clone(),
                reason: refusal.reason,
                source: refusal.source,
            }
        })?;
        if config.bearer_token.is_empty() {
            return Err(KnowledgeFsConfigError::InvalidToken);
        }
        let mut authorization = HeaderValue::from_str(&format!("Bearer {}", config.bearer_token))
            .map_err(|_| KnowledgeFsConfigError::InvalidToken)?;
        authorization.set_sensitive(true);
        if config.deadline.is_zero() {
            return Err(KnowledgeFsConfigError::ZeroDeadline);
        }
        if config.max_concurrent_calls == 0 {
            return Err(KnowledgeFsConfigError::ZeroConcurrency);
        }
        if config.max_body_bytes == 0 {
            return Err(KnowledgeFsConfigError::ZeroBodyCap);
        }
        Ok(Self {
            client: mutation_client(config.deadline, &config.tls)?,
            base,
            authorization,
            deadline: config.deadline,
            max_body_bytes: config.max_body_bytes,
            permits: Arc::new(Semaphore::new(config.max_concurrent_calls)),
        })
    }

    /// `base` + `/v1/namespaces/{namespace}` + `rest`, each segment percent-encoded
    /// ([`crate::path`]: the remote receives every id byte for byte as one segment).
    fn endpoint(&self, namespace: &TenantId, rest: &[&str]) -> Result<Url, RemoteError> {
        let mut segments = vec!["v1", "namespaces", namespace.as_str()];
        segments.extend_from_slice(rest);
        crate::path::with_segments(&self.base, &segments).map_err(|reason| {
            RemoteError::not_dispatched(format!("KnowledgeFS request path: {reason}"))
        })
    }

    /// One call under the deadline and the concurrency limit; returns the complete answer.
    async fn exchange(
        &self,
        method: Method,
        url: Url,
        idempotency_key: Option<&IdempotencyKey>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, RemoteError> {
        let started = Instant::now();
        let permit = match tokio::time::timeout(self.deadline, self.permits.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => {
                return Err(RemoteError::not_dispatched("KnowledgeFS client is closed"));
            }
            Err(_elapsed) => return Err(saturated(self.deadline)),
        };
        let remaining = self.deadline.saturating_sub(started.elapsed());
        if remaining.is_zero() {
            return Err(saturated(self.deadline));
        }
        let mut request = self
            .client
            .request(method, url)
            .timeout(remaining)
            .header(AUTHORIZATION, self.authorization.clone());
        if let Some(key) = idempotency_key {
            request = request.header(IDEMPOTENCY_KEY_HEADER, key.as_str());
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(body);
        }
        let mutation = idempotency_key.is_some();
        let answer = tokio::time::timeout(
            remaining,
            read_capped(request.send().await, self.max_body_bytes, mutation),
        )
        .await;
        drop(permit);
        match answer {
            Ok(result) => result,
            Err(_elapsed) => Err(RemoteError::outcome_unknown(format!(
                "no complete KnowledgeFS answer within the {}s deadline",
                self.deadline.as_secs_f64()
            ))),
        }
    }

    async fn mutate<T: DeserializeOwned>(
        &self,
        url: Url,
        key: &IdempotencyKey,
        body: &impl Serialize,
    ) -> Result<T, RemoteError> {
        let body = serde_json::to_vec(body).map_err(|e| {
            RemoteError::not_dispatched(format!("cannot encode the request body: {e}"))
                .with_source(e)
        })?;
        let answer = self
            .exchange(Method::POST, url, Some(key), Some(body))
            .await?;
        decode(&answer, Utc::now())
    }
}

#[async_trait]
impl KnowledgeFs for HttpKnowledgeFs {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let url = self.endpoint(&request.namespace_id, &["spaces"])?;
        let body = ProvisionBody {
            control_space_id: &request.control_space_id,
            operation_id: &request.operation_id,
            provisioning_key: &request.provisioning_key,
            name: &request.name,
            slug: &request.slug,
            icon: &request.icon,
            description: &request.description,
            model_intent: request.model_intent.as_ref(),
            profile_intent: request.profile_intent.as_ref(),
        };
        self.mutate(url, &request.idempotency_key, &body).await
    }

    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        let mut url = self.endpoint(namespace_id, &["spaces"])?;
        url.query_pairs_mut()
            .append_pair("provisioning_key", provisioning_key.as_str())
            .append_pair("control_space_id", control_space_id.as_str());
        let answer = self.exchange(Method::GET, url, None, None).await?;
        let list: SpaceList = decode(&answer, Utc::now())?;
        let mut items = list.items.into_iter();
        match (items.next(), items.next()) {
            (None, _) => Ok(None),
            (Some(space), None) => Ok(Some(space)),
            (Some(_), Some(_)) => Err(RemoteError::answered(
                answer.status.as_u16(),
                CODE_LOOKUP_AMBIGUOUS,
                format!(
                    "KnowledgeFS lists more than one space for provisioning key \
                     {provisioning_key}; reconcile the remote by hand"
                ),
            )),
        }
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        let url = self.endpoint(
            &request.namespace_id,
            &["spaces", request.knowledge_space_id.as_str(), "deletion"],
        )?;
        let body = DeletionBody {
            control_space_id: &request.control_space_id,
            operation_id: &request.operation_id,
            provisioning_key: &request.provisioning_key,
            expected_revision: request.expected_revision,
        };
        let body = serde_json::to_vec(&body).map_err(|e| {
            RemoteError::not_dispatched(format!("cannot encode the request body: {e}"))
                .with_source(e)
        })?;
        let answer = self
            .exchange(
                Method::POST,
                url,
                Some(&request.idempotency_key),
                Some(body),
            )
            .await?;
        let now = Utc::now();
        let mut progress: DeletionProgress = decode(&answer, now)?;
        // The poll interval the remote suggests for a deletion still in progress.
        progress.retry_after = answer
            .retry_after
            .as_deref()
            .and_then(|v| parse_retry_after(v, now));
        Ok(progress)
    }

    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        let url = self.endpoint(
            &request.namespace_id,
            &[
                "spaces",
                request.knowledge_space_id.as_str(),
                "grants",
                request.grant_id.as_str(),
                "revocations",
            ],
        )?;
        let body = RevocationBody {
            control_space_id: &request.control_space_id,
            operation_id: &request.operation_id,
            event_id: &request.event_id,
            reason_code: &request.reason_code,
            revoke_sequence: request.revoke_sequence,
            expected_revision: request.expected_revision,
        };
        self.mutate(url, &request.idempotency_key, &body).await
    }
}

#[derive(Serialize)]
struct ProvisionBody<'a> {
    control_space_id: &'a ControlSpaceId,
    operation_id: &'a OperationId,
    provisioning_key: &'a ProvisioningKey,
    name: &'a str,
    slug: &'a str,
    icon: &'a str,
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_intent: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    profile_intent: Option<&'a serde_json::Value>,
}

#[derive(Serialize)]
struct DeletionBody<'a> {
    control_space_id: &'a ControlSpaceId,
    operation_id: &'a OperationId,
    provisioning_key: &'a ProvisioningKey,
    expected_revision: i64,
}

#[derive(Serialize)]
struct RevocationBody<'a> {
    control_space_id: &'a ControlSpaceId,
    operation_id: &'a OperationId,
    event_id: &'a str,
    reason_code: &'a str,
    revoke_sequence: i64,
    expected_revision: i64,
}

#[derive(Deserialize)]
struct SpaceList {
    items: Vec<RemoteSpace>,
}

/// The `{code, message}` error body.
#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    #[serde(default)]
    message: String,
}

/// Decodes a complete answer: 2xx → `T` (outcome unknown if it does not decode), any other
/// status → an answered [`RemoteError`] with the remote's code, message and `Retry-After`.
fn decode<T: DeserializeOwned>(answer: &Answer, now: DateTime<Utc>) -> Result<T, RemoteError> {
    if answer.status.is_success() {
        return answer.json().map_err(transport_error);
    }
    let status = answer.status.as_u16();
    let (code, message) = match serde_json::from_slice::<ErrorBody>(&answer.body) {
        Ok(body) if !body.code.is_empty() => (body.code, body.message),
        _ => (
            format!("KFS_HTTP_{status}"),
            format!(
                "KnowledgeFS answered {} without an error body: {}",
                answer.status,
                String::from_utf8_lossy(&answer.body[..answer.body.len().min(256)])
            ),
        ),
    };
    // What the remote says is bounded data (case 010): a code that is not an upper-case
    // identifier becomes REMOTE_ERROR_CODE_INVALID, the message loses control characters
    // and is cut to 2,048 bytes, before it reaches logs, storage, metrics or a terminal.
    let (code, message) = bounded_error(ErrorCode::from(code), &message);
    let mut error = RemoteError::answered(status, code, message);
    if let Some(after) = answer
        .retry_after
        .as_deref()
        .and_then(|v| parse_retry_after(v, now))
    {
        error = error.with_retry_after(after);
    }
    Err(error)
}

/// `Retry-After` as delay-seconds or an HTTP date (a date in the past gives zero).
fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = DateTime::parse_from_rfc2822(value)
        .ok()?
        .with_timezone(&Utc);
    Some((at - now).to_std().unwrap_or(Duration::ZERO))
}

/// Reads the answer of a finished `send()` completely, but no more than `max` body bytes (see
/// the module docs); `mutation` says whether the request changes remote state.
async fn read_capped(
    result: Result<reqwest::Response, reqwest::Error>,
    max: usize,
    mutation: bool,
) -> Result<Answer, RemoteError> {
    let mut response = result.map_err(|e| transport_error(TransportError::from_reqwest(e)))?;
    let status = response.status();
    let retry_after = retry_after_header(&response);
    let too_large = |size: u64| {
        let message = format!(
            "KnowledgeFS answered {status} with a body of at least {size} bytes, over the \
             {max}-byte limit; the body was not read"
        );
        if mutation && status.is_success() {
            return RemoteError::outcome_unknown(format!(
                "{message}, so what the mutation did is unknown"
            ));
        }
        let mut error = RemoteError::answered(status.as_u16(), CODE_RESPONSE_TOO_LARGE, message);
        if let Some(after) = retry_after
            .as_deref()
            .and_then(|v| parse_retry_after(v, Utc::now()))
        {
            error = error.with_retry_after(after);
        }
        error
    };
    if let Some(announced) = response.content_length()
        && announced > max as u64
    {
        return Err(too_large(announced));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let size = body.len() + chunk.len();
                if size > max {
                    return Err(too_large(size as u64));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            // A response arrived: a body that breaks off leaves the outcome unknown.
            Err(e) => {
                return Err(RemoteError::outcome_unknown(format!(
                    "KnowledgeFS answer body ({status}) could not be read: {}",
                    error_chain(&e)
                ))
                .with_source(e));
            }
        }
    }
    Ok(Answer {
        status,
        retry_after,
        body,
    })
}

/// The port's error for a call without a complete answer; keeps the transport's error.
fn transport_error(failure: TransportError) -> RemoteError {
    let error = match failure.outcome {
        DispatchOutcome::NotDispatched => RemoteError::not_dispatched(failure.message),
        // A failure always lacks a complete answer; treat a contradiction (or an outcome added
        // later) as unknown.
        _ => RemoteError::outcome_unknown(failure.message),
    };
    error.with_shared_source(failure.source)
}

fn saturated(deadline: Duration) -> RemoteError {
    let mut error = RemoteError::not_dispatched(format!(
        "no KnowledgeFS call slot freed within the {}s deadline; raise \
         max_concurrent_calls or the deadline",
        deadline.as_secs_f64()
    ));
    error.code = CODE_CLIENT_SATURATED;
    error
}

#[cfg(test)]
mod tests {
    use tenantry_kernel::outcome::DispatchOutcome;

    use super::*;
    use reqwest::StatusCode;
    use tenantry_kernel::KnowledgeSpaceId;

    fn answer(status: u16, retry_after: Option<&str>, body: &str) -> Answer {
        Answer {
            status: StatusCode::from_u16(status).unwrap(),
            retry_after: retry_after.map(str::to_owned),
            body: body.as_bytes().to_vec(),
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn remote_error_code_and_retry_after_are_mapped() {
        let err = decode::<RemoteSpace>(
            &answer(
                503,
                Some("7"),
                r#"{"code":"KFS_UNAVAILABLE","message":"busy"}"#,
            ),
            now(),
        )
        .unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::answered(503));
        assert_eq!(err.code, "KFS_UNAVAILABLE");
        assert_eq!(err.message, "busy");
        assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
    }

    #[test]
    fn error_without_code_body_gets_a_status_code() {
        let err = decode::<RemoteSpace>(&answer(502, None, "<html>bad gateway</html>"), now())
            .unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::answered(502));
        assert_eq!(err.code, "KFS_HTTP_502");
        assert!(err.message.contains("bad gateway"));
    }

    #[test]
    fn redirect_is_an_answer_not_followed() {
        let err = decode::<RemoteSpace>(&answer(307, None, ""), now()).unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::answered(307));
    }

    #[test]
    fn undecodable_success_body_is_outcome_unknown() {
        let err =
            decode::<RemoteSpace>(&answer(201, None, r#"{"unexpected":true}"#), now()).unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown);
        assert_eq!(err.code, "REMOTE_OUTCOME_UNKNOWN");
    }

    #[test]
    fn success_body_decodes() {
        let space: RemoteSpace = decode(
            &answer(
                200,
                None,
                r#"{"namespace_id":"t1","knowledge_space_id":"ks-1","revision":3}"#,
            ),
            now(),
        )
        .unwrap();
        assert_eq!(space.revision, 3);
    }

    #[test]
    fn retry_after_parses_seconds_and_http_dates() {
        assert_eq!(
            parse_retry_after("120", now()),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now()),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 31 Dec 2025 23:00:00 GMT", now()),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now()), None);
        // Far-future values parse; the retry policy caps what it honours
        // (`RetryPolicy::max_retry_after`, 1 hour).
        assert_eq!(
            parse_retry_after("18446744073709551615", now()),
            Some(Duration::from_secs(u64::MAX))
        );
        assert!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now()).unwrap()
                > Duration::from_secs(86_400 * 365 * 7000)
        );
    }

    #[test]
    fn endpoint_encodes_segments_and_keeps_a_path_prefix() {
        let fs = HttpKnowledgeFs::new(&KnowledgeFsConfig::new("http://h:1/kfs/", "t")).unwrap();
        let ns = TenantId::parse("a%b?c").unwrap();
        let url = fs.endpoint(&ns, &["spaces", "ks#1/x", "deletion"]).unwrap();
        assert_eq!(
            url.as_str(),
            "http://h:1/kfs/v1/namespaces/a%25b%3Fc/spaces/ks%231%2Fx/deletion"
        );
    }

    #[test]
    fn invalid_configuration_is_refused() {
        let ok = KnowledgeFsConfig::new("http://127.0.0.1:1", "token");
        assert!(HttpKnowledgeFs::new(&ok).is_ok());
        let bad_url = KnowledgeFsConfig::new("ftp://x", "t");
        assert!(matches!(
            HttpKnowledgeFs::new(&bad_url),
            Err(KnowledgeFsConfigError::InvalidBaseUrl { .. })
        ));
        let no_token = KnowledgeFsConfig::new("http://x", "");
        assert_eq!(
            HttpKnowledgeFs::new(&no_token).unwrap_err(),
            KnowledgeFsConfigError::InvalidToken
        );
        let zero = KnowledgeFsConfig {
            max_concurrent_calls: 0,
            ..ok.clone()
        };
        assert_eq!(
            HttpKnowledgeFs::new(&zero).unwrap_err(),
            KnowledgeFsConfigError::ZeroConcurrency
        );
        let zero = KnowledgeFsConfig {
            max_body_bytes: 0,
            ..ok.clone()
        };
        assert_eq!(
            HttpKnowledgeFs::new(&zero).unwrap_err(),
            KnowledgeFsConfigError::ZeroBodyCap
        );
        let zero = KnowledgeFsConfig {
            deadline: Duration::ZERO,
            ..ok
        };
        assert_eq!(
            HttpKnowledgeFs::new(&zero).unwrap_err(),
            KnowledgeFsConfigError::ZeroDeadline
        );
    }

    /// A server that answers every request with `raw` (read the request headers and body
    /// first) and closes the connection.
    async fn answering(raw: String) -> String {
        recording(raw).await.0
    }

    /// [`answering`], also keeping the raw request target of every request.
    async fn recording(raw: String) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        crate::path::testing::recording(raw).await
    }

    #[tokio::test]
    async fn case_009_the_remote_receives_every_accepted_id_as_one_exact_segment() {
        let body = r#"{"code":"NOPE","message":"no"}"#;
        let (url, targets) = recording(format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let fs = capped_client(&url);
        let shapes = crate::path::testing::accepted_id_shapes();
        assert!(shapes.len() > 250, "{}", shapes.len());
        for id in &shapes {
            let tenant = TenantId::parse(id.as_str()).unwrap();
            let space = KnowledgeSpaceId::parse(id.as_str()).unwrap();
            let deletion = DeletionRequest {
                namespace_id: tenant.clone(),
                control_space_id: ControlSpaceId::parse(id.as_str()).unwrap(),
                operation_id: OperationId::parse("op-1").unwrap(),
                idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
                knowledge_space_id: space.clone(),
                provisioning_key: ProvisioningKey::parse("pk-1").unwrap(),
                expected_revision: 1,
            };
            fs.request_deletion(&deletion).await.unwrap_err();
            let revoke = RevokeRequest {
                namespace_id: tenant.clone(),
                control_space_id: ControlSpaceId::parse(id.as_str()).unwrap(),
                operation_id: OperationId::parse("op-1").unwrap(),
                idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
                knowledge_space_id: space,
                grant_id: tenantry_kernel::GrantId::parse(id.as_str()).unwrap(),
                event_id: "e".into(),
                reason_code: "r".into(),
                revoke_sequence: 1,
                expected_revision: 1,
            };
            fs.revoke_grant(&revoke).await.unwrap_err();
            fs.find_by_provisioning_key(
                &tenant,
                &ProvisioningKey::parse(id.as_str()).unwrap(),
                &ControlSpaceId::parse(id.as_str()).unwrap(),
            )
            .await
            .unwrap_err();
            let sent: Vec<String> = std::mem::take(&mut *targets.lock().unwrap());
            assert_eq!(sent.len(), 3, "{id:?}: {sent:?}");
            let bytes = id.as_bytes().to_vec();
            let deletion = crate::path::testing::id_segments(
                &sent[0],
                &["v1", "namespaces", "*", "spaces", "*", "deletion"],
            );
            assert_eq!(deletion, [bytes.clone(), bytes.clone()], "{id:?}");
            let revocation = crate::path::testing::id_segments(
                &sent[1],
                &[
                    "v1",
                    "namespaces",
                    "*",
                    "spaces",
                    "*",
                    "grants",
                    "*",
                    "revocations",
                ],
            );
            assert_eq!(
                revocation,
                [bytes.clone(), bytes.clone(), bytes.clone()],
                "{id:?}"
            );
            let lookup =
                crate::path::testing::id_segments(&sent[2], &["v1", "namespaces", "*", "spaces"]);
            assert_eq!(lookup, [bytes], "{id:?}");
            let query = Url::parse(&format!("http://h{}", sent[2])).unwrap();
            let pairs: Vec<(String, String)> = query.query_pairs().into_owned().collect();
            assert_eq!(
                pairs,
                [
                    ("provisioning_key".to_owned(), id.clone()),
                    ("control_space_id".to_owned(), id.clone())
                ],
                "{}",
                sent[2]
            );
        }
        // A few exact targets, spelled out.
        for (id, target) in [
            ("%2e", "/v1/namespaces/%252e/spaces/%252e/deletion"),
            ("...", "/v1/namespaces/.../spaces/.../deletion"),
            ("a;b", "/v1/namespaces/a%3Bb/spaces/a%3Bb/deletion"),
            ("a\\b", "/v1/namespaces/a%5Cb/spaces/a%5Cb/deletion"),
            (
                "caf\u{e9}",
                "/v1/namespaces/caf%C3%A9/spaces/caf%C3%A9/deletion",
            ),
        ] {
            let deletion = DeletionRequest {
                namespace_id: TenantId::parse(id).unwrap(),
                control_space_id: ControlSpaceId::parse("cs").unwrap(),
                operation_id: OperationId::parse("op-1").unwrap(),
                idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
                knowledge_space_id: KnowledgeSpaceId::parse(id).unwrap(),
                provisioning_key: ProvisioningKey::parse("pk-1").unwrap(),
                expected_revision: 1,
            };
            fs.request_deletion(&deletion).await.unwrap_err();
            let sent = std::mem::take(&mut *targets.lock().unwrap());
            assert_eq!(sent, [target.to_owned()], "{id:?}");
        }
    }

    fn capped_client(url: &str) -> HttpKnowledgeFs {
        HttpKnowledgeFs::new(&KnowledgeFsConfig {
            max_body_bytes: 1024,
            deadline: Duration::from_secs(10),
            ..KnowledgeFsConfig::new(url, "t")
        })
        .unwrap()
    }

    /// A valid `RemoteSpace` body padded with whitespace to `len` bytes.
    fn padded_space(len: usize) -> String {
        let json = r#"{"namespace_id":"t1","knowledge_space_id":"ks-1","revision":1}"#;
        format!("{json}{}", " ".repeat(len.saturating_sub(json.len())))
    }

    fn provision_request() -> ProvisionRequest {
        ProvisionRequest {
            namespace_id: TenantId::parse("t1").unwrap(),
            control_space_id: ControlSpaceId::parse("cs-1").unwrap(),
            operation_id: OperationId::parse("op-1").unwrap(),
            idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
            provisioning_key: ProvisioningKey::parse("pk-1").unwrap(),
            name: "N".into(),
            slug: "n".into(),
            icon: String::new(),
            description: String::new(),
            model_intent: None,
            profile_intent: None,
        }
    }

    #[tokio::test]
    async fn over_cap_success_body_of_a_mutation_is_outcome_unknown() {
        // Announced length over the cap.
        let body = padded_space(4096);
        let url = answering(format!(
            "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let err = capped_client(&url)
            .provision(&provision_request())
            .await
            .unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown, "{err:?}");
        assert!(err.message.contains("1024-byte limit"), "{}", err.message);

        // No length announced (chunked): the cap applies to the bytes read.
        let chunk = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
        let url = answering(format!(
            "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{chunk}"
        ))
        .await;
        let err = capped_client(&url)
            .provision(&provision_request())
            .await
            .unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown, "{err:?}");

        // Under the cap the same answer is a success.
        let small = padded_space(512);
        let url = answering(format!(
            "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{small}",
            small.len()
        ))
        .await;
        let space = capped_client(&url)
            .provision(&provision_request())
            .await
            .unwrap();
        assert_eq!(space.revision, 1);
    }

    #[tokio::test]
    async fn over_cap_error_body_or_lookup_body_is_an_answered_error() {
        let body = "x".repeat(4096);
        let url = answering(format!(
            "HTTP/1.1 503 Service Unavailable\r\nretry-after: 9\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let err = capped_client(&url)
            .provision(&provision_request())
            .await
            .unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::answered(503));
        assert_eq!(err.code, CODE_RESPONSE_TOO_LARGE);
        assert_eq!(err.retry_after, Some(Duration::from_secs(9)));

        let list = format!(r#"{{"items":[]}}{}"#, " ".repeat(4096));
        let url = answering(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{list}",
            list.len()
        ))
        .await;
        let err = capped_client(&url)
            .find_by_provisioning_key(
                &TenantId::parse("t1").unwrap(),
                &ProvisioningKey::parse("pk-1").unwrap(),
                &ControlSpaceId::parse("cs-1").unwrap(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::answered(200));
        assert_eq!(err.code, CODE_RESPONSE_TOO_LARGE);
    }

    #[tokio::test]
    async fn case_010_what_a_remote_says_is_bounded_data() {
        use tenantry_kernel::text::MAX_MESSAGE_BYTES;
        let client = |url: &str| {
            HttpKnowledgeFs::new(&KnowledgeFsConfig {
                deadline: Duration::from_secs(10),
                ..KnowledgeFsConfig::new(url, "t")
            })
            .unwrap()
        };
        let body = serde_json::json!({
            "code": "C".repeat(200 * 1024).to_lowercase(),
            "message": format!("\u{1b}[2J{}", "m".repeat(700 * 1024)),
        })
        .to_string();
        let url = answering(format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let err = client(&url)
            .provision(&provision_request())
            .await
            .unwrap_err();
        assert_eq!(err.failure, DispatchOutcome::answered(400));
        assert_eq!(err.code, ErrorCode::RemoteErrorCodeInvalid);
        assert!(
            err.message.len() <= MAX_MESSAGE_BYTES,
            "{}",
            err.message.len()
        );
        assert!(
            err.message.starts_with("remote error code \"cccc"),
            "{}",
            err.message
        );
        assert!(!err.message.contains('\u{1b}'));

        // A body that is not `{code, message}`: its first bytes, without controls.
        let raw = "\u{1b}[2J\u{1b}]0;pwned\u{7}<html>";
        let url = answering(format!(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{raw}",
            raw.len()
        ))
        .await;
        let err = client(&url)
            .provision(&provision_request())
            .await
            .unwrap_err();
        assert_eq!(err.code, "KFS_HTTP_502");
        assert!(
            err.message.ends_with("[2J]0;pwned<html>"),
            "{}",
            err.message
        );
    }

    #[test]
    fn config_debug_redacts_the_token() {
        let cfg = KnowledgeFsConfig::new("http://x", "s3cret");
        assert!(!format!("{cfg:?}").contains("s3cret"));
        let fs = HttpKnowledgeFs::new(&cfg).unwrap();
        assert!(!format!("{fs:?}").contains("s3cret"));
    }
}
