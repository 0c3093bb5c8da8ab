//! Request extractors that turn every malformed input into an [`AdminApiError`]: JSON bodies
//! (content type, size, syntax, unknown fields), the `Idempotency-Key` header, ids in paths.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;
use tenantry_kernel::{IdError, IdempotencyKey};

use super::error::AdminApiError;

/// Name of the idempotency header of mutations.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";

/// A JSON request body of type `T`.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = AdminApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let json = request
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(AdminApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UNSUPPORTED_MEDIA_TYPE",
                "send the body as JSON with Content-Type: application/json",
            ));
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    AdminApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "PAYLOAD_TOO_LARGE",
                        format!("request body exceeds {} bytes", super::MAX_BODY_BYTES),
                    )
                } else {
                    AdminApiError::new(
                        StatusCode::BAD_REQUEST,
                        "BODY_UNREADABLE",
                        format!("request body could not be read: {rejection}"),
                    )
                }
            })?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            AdminApiError::new(
                StatusCode::BAD_REQUEST,
                "INVALID_JSON",
                format!("request body is not the expected JSON: {e}"),
            )
        })
    }
}

/// Name of the W3C trace context header (docs/operations.md, "Tracing").
pub const TRACEPARENT_HEADER: &str = "traceparent";

/// The caller's W3C `traceparent` header, if it sent one (the first, as text). Never refuses:
/// a value that does not parse only starts a new trace (`tenantry_engine::trace_context`).
#[derive(Debug, Clone, Default)]
pub struct TraceParentHeader(pub Option<String>);

impl<S: Send + Sync> FromRequestParts<S> for TraceParentHeader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .headers
                .get(TRACEPARENT_HEADER)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
        ))
    }
}

/// The `Idempotency-Key` of a mutation, or a generated one when the header is absent. More
/// than one header is refused with 400 `DUPLICATE_IDEMPOTENCY_KEY`.
#[derive(Debug, Clone)]
pub struct IdempotencyKeyHeader {
    /// The key.
    pub key: IdempotencyKey,
    /// Whether the caller sent it (false: generated for this request).
    pub supplied: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKeyHeader {
    type Rejection = AdminApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let invalid = |reason: String| {
            AdminApiError::new(
                StatusCode::BAD_REQUEST,
                "INVALID_IDEMPOTENCY_KEY",
                format!("Idempotency-Key header is invalid: {reason}"),
            )
        };
        let mut values = parts.headers.get_all(IDEMPOTENCY_KEY_HEADER).iter();
        let first = values.next();
        if values.next().is_some() {
            // Two keys in one request: picking either would make the replay semantics depend
            // on header order (and on proxies that reorder or merge headers).
            return Err(AdminApiError::new(
                StatusCode::BAD_REQUEST,
                "DUPLICATE_IDEMPOTENCY_KEY",
                "the request carries more than one Idempotency-Key header; send exactly one",
            ));
        }
        match first {
            None => {
                let key = IdempotencyKey::parse(uuid::Uuid::new_v4().to_string())
                    .map_err(|e| invalid(e.to_string()))?;
                Ok(Self {
                    key,
                    supplied: false,
                })
            }
            Some(value) => {
                let text = value
                    .to_str()
                    .map_err(|_| invalid("not visible ASCII".to_owned()))?;
                let key = IdempotencyKey::parse(text).map_err(|e| invalid(e.to_string()))?;
                Ok(Self {
                    key,
                    supplied: true,
                })
            }
        }
    }
}

/// Parses an identifier from the path or body, naming `field` in the error.
///
/// # Errors
/// 400 `INVALID_ARGUMENT` naming `field`.
pub fn parse_id<T>(
    field: &str,
    value: &str,
    parse: impl FnOnce(String) -> Result<T, IdError>,
) -> Result<T, AdminApiError> {
    parse(value.to_owned()).map_err(|e| AdminApiError::invalid(field, e))
}

/// Path parameters of type `T`; a malformed path is 400 `INVALID_PATH`.
#[derive(Debug)]
pub struct PathParams<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParams<T> {
    type Rejection = AdminApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|e| {
                AdminApiError::new(
                    StatusCode::BAD_REQUEST,
                    "INVALID_PATH",
                    format!("path is invalid: {e}"),
                )
            })
    }
}

/// Query parameters of type `T`; a malformed or unknown parameter is 400 `INVALID_QUERY`.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = AdminApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e| {
                AdminApiError::new(
                    StatusCode::BAD_REQUEST,
                    "INVALID_QUERY",
                    format!("query string is invalid: {}", e.body_text()),
                )
            })
    }
}
