//! A small JSON client of the admin API over HTTP/1.1 (hyper), used by the demo's workload.
//!
//! The demo talks to the service exactly as an operator's tooling would: real TCP, bearer
//! token, `Idempotency-Key` on every mutation. Transient answers (503, connection errors) are
//! retried with the same key, which is safe because every mutation is idempotent on it.
//!
//! A client of several replicas of one service ([`AdminClient::replicas`], used by the chaos
//! harness) sends each request to the next replica in turn and each retry to the one after, so a
//! killed or paused replica costs a retry, not a failed request.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Deadline of one admin API request.
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);

/// Attempts of a request that meets a transient failure.
const ATTEMPTS: u32 = 8;

/// Why an admin API call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The request could not be built (a bug in the demo).
    #[error("request could not be built: {0}")]
    Build(String),
    /// No answer after every attempt.
    #[error("{method} {path}: no answer after {attempts} attempts: {reason}")]
    Transport {
        /// Attempts made.
        attempts: u32,
        /// Method.
        method: String,
        /// Path.
        path: String,
        /// Last failure.
        reason: String,
    },
    /// The service answered with an unexpected status.
    #[error("{method} {path}: answered {status}: {body}")]
    Status {
        /// Method.
        method: String,
        /// Path.
        path: String,
        /// HTTP status.
        status: u16,
        /// The answer body.
        body: String,
    },
}

/// An answer: status and JSON body (`Value::Null` when the body is not JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct AdminAnswer {
    /// HTTP status.
    pub status: u16,
    /// Decoded body.
    pub body: Value,
}

/// Client of one admin API, or of the same admin API served by several replicas.
#[derive(Debug, Clone)]
pub struct AdminClient {
    bases: Arc<[String]>,
    next: Arc<AtomicUsize>,
    attempts: u32,
    request_deadline: Duration,
    authorization: HeaderValue,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl AdminClient {
    /// A client of `base` (`http://127.0.0.1:PORT`) sending `token`.
    ///
    /// # Errors
    /// [`ClientError::Build`] when the token is not a valid header value.
    pub fn new(base: impl Into<String>, token: &str) -> Result<Self, ClientError> {
        Self::replicas(vec![base.into()], token, ATTEMPTS, REQUEST_DEADLINE)
    }

    /// A client of the replicas at `bases` (each `http://127.0.0.1:PORT`) sending `token`:
    /// request *n* goes to replica *n* mod len, each retry to the next replica; a request is
    /// tried `attempts` times (at least once), each attempt bounded by `request_deadline`.
    ///
    /// # Errors
    /// [`ClientError::Build`] when the token is not a valid header value or `bases` is empty.
    pub fn replicas(
        bases: Vec<String>,
        token: &str,
        attempts: u32,
        request_deadline: Duration,
    ) -> Result<Self, ClientError> {
        if bases.is_empty() {
            return Err(ClientError::Build("no admin API address given".to_owned()));
        }
        let authorization = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|e| ClientError::Build(e.to_string()))?;
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(32)
            .build_http();
        Ok(Self {
            bases: bases.into(),
            next: Arc::new(AtomicUsize::new(0)),
            attempts: attempts.max(1),
            request_deadline,
            authorization,
            client,
        })
    }

    /// Sends one request, retrying transport failures and 503 answers with the same
    /// idempotency key; returns the first other answer.
    ///
    /// # Errors
    /// [`ClientError::Transport`] after the last attempt.
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<AdminAnswer, ClientError> {
        let mut last = String::new();
        let first = self.next.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..self.attempts {
            if attempt > 0 {
                let backoff = 100 * u64::from(attempt.min(10));
                tokio::time::sleep(Duration::from_millis(backoff)).await;
            }
            let base = &self.bases[(first + attempt as usize) % self.bases.len()];
            match self.once(base, &method, path, body, idempotency_key).await {
                Ok(answer) if answer.status == 503 => last = answer.body.to_string(),
                Ok(answer) => return Ok(answer),
                Err(reason) => last = reason,
            }
        }
        Err(ClientError::Transport {
            attempts: self.attempts,
            method: method.to_string(),
            path: path.to_owned(),
            reason: last,
        })
    }

    /// Like [`AdminClient::send`], but only `expected` is a success; any other status is
    /// [`ClientError::Status`].
    ///
    /// # Errors
    /// [`ClientError`] for transport failures and unexpected statuses.
    pub async fn expect(
        &self,
        expected: u16,
        method: Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<Value, ClientError> {
        let answer = self
            .send(method.clone(), path, body, idempotency_key)
            .await?;
        if answer.status == expected {
            Ok(answer.body)
        } else {
            Err(ClientError::Status {
                method: method.to_string(),
                path: path.to_owned(),
                status: answer.status,
                body: answer.body.to_string(),
            })
        }
    }

    async fn once(
        &self,
        base: &str,
        method: &Method,
        path: &str,
        body: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<AdminAnswer, String> {
        let mut builder = Request::builder()
            .method(method.clone())
            .uri(format!("{base}{path}"))
            .header(AUTHORIZATION, self.authorization.clone());
        if let Some(key) = idempotency_key {
            builder = builder.header("Idempotency-Key", key);
        }
        let payload = match body {
            Some(value) => {
                builder = builder.header(CONTENT_TYPE, "application/json");
                Bytes::from(value.to_string())
            }
            None => Bytes::new(),
        };
        let request = builder
            .body(Full::new(payload))
            .map_err(|e| e.to_string())?;
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            Ok::<_, String>(AdminAnswer { status, body })
        };
        tokio::time::timeout(self.request_deadline, exchange)
            .await
            .map_err(|_| format!("no answer within {:?}", self.request_deadline))?
    }
}
