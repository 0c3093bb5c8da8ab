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

mod wire;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use chrono::Utc;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, ProvisioningKey, TenantId};
use tenantry_lifecycle::{
    DeletionProgress, DeletionRequest, ErrorCode, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest,
};
use tenantry_ports::error::ErrorSource;
use tenantry_ports::lifecycle::{KnowledgeFs, RemoteError};
use tokio::sync::Semaphore;
use wire::{
    DeletionBody, ProvisionBody, RevocationBody, SpaceList, decode, parse_retry_after, read_capped,
    saturated,
};

use crate::client::{ClientBuildError, mutation_client, parse_base_url};
use crate::outcome::Answer;
use crate::tls::RemoteTls;

#[cfg(doc)]
use tenantry_kernel::outcome::DispatchOutcome;

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

    /// One call under the deadline and the concurrency limit, in a `knowledge_fs_request`
    /// span whose W3C context goes out as the `traceparent` header (when OpenTelemetry
    /// records the span); returns the complete answer.
    async fn exchange(
        &self,
        method: Method,
        url: Url,
        idempotency_key: Option<&IdempotencyKey>,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, RemoteError> {
        let span = tracing::info_span!(
            "knowledge_fs_request",
            http.request.method = %method,
            url.path = url.path(),
        );
        tracing::Instrument::instrument(self.exchange_now(method, url, idempotency_key, body), span)
            .await
    }

    async fn exchange_now(
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
        if let Some(traceparent) = crate::trace_context::current() {
            request = request.header(crate::TRACEPARENT_HEADER, traceparent);
        }
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
