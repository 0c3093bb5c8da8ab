//! The `{code, message}` error body of the admin API and the mapping of engine errors to it.
//!
//! A 5xx answer never carries the underlying error's text (database driver messages name
//! tables, constraints and hosts): it has a stable code, a safe message and a
//! `correlation_id` (a UUID, also sent as the `X-Correlation-Id` header); the detail is logged
//! at `error` with the same `correlation_id`, so an operator can find it from the answer.

use crate::FilterError;
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tenantry_engine::lifecycle::IntakeFailure;
use tenantry_lifecycle::intake::IntakeError;
use tenantry_ports::lifecycle::StoreError;

use tenantry_engine::scoped_writes::admin::FenceAdminError;

/// An error answer: HTTP status plus `{code, message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct AdminApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What was wrong and what to do.
    pub message: String,
    /// Correlation id of a 5xx answer (the log line with the detail carries the same id).
    pub correlation_id: Option<String>,
}

/// Header carrying the correlation id of a 5xx answer.
pub const CORRELATION_ID_HEADER: &str = "x-correlation-id";

/// The body of every error answer (schema `Error`).
#[derive(Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub(crate) struct Body<'a> {
    /// Stable machine-readable code, e.g. `INVALID_ARGUMENT`.
    code: &'a str,
    /// What was wrong and what to do.
    message: &'a str,
    /// On 5xx answers only: the id under which the service log has the detail (also the
    /// `X-Correlation-Id` header).
    #[serde(skip_serializing_if = "Option::is_none")]
    correlation_id: Option<&'a str>,
}

/// The shared error answers of the admin API: each a response component of
/// `docs/openapi/admin-v1.json` with the `Error` body, named by the type.
macro_rules! error_responses {
    ($($(#[doc = $doc:literal])* $name:ident;)*) => {$(
        $(#[doc = $doc])*
        #[derive(utoipa::ToResponse)]
        #[allow(dead_code)] // Documents an answer; the answers are built as `AdminApiError`.
        pub(crate) struct $name(Body<'static>);
    )*};
}

error_responses! {
    /// Invalid input (codes INVALID_ARGUMENT, INVALID_JSON, INVALID_PATH, INVALID_QUERY,
    /// INVALID_IDEMPOTENCY_KEY, DUPLICATE_IDEMPOTENCY_KEY, UNKNOWN_CURSOR, BODY_UNREADABLE).
    /// Nothing was written.
    BadRequest;
    /// Missing or wrong bearer token (UNAUTHORIZED).
    Unauthorized;
    /// No such control space (CONTROL_SPACE_NOT_FOUND), command (COMMAND_NOT_FOUND) or route
    /// (NOT_FOUND).
    NotFound;
    /// Not allowed in the current state (CONTROL_SPACE_EXISTS, CONTROL_SPACE_DELETED,
    /// CONTROL_SPACE_NOT_PROVISIONED, CONTROL_SPACE_DELETING, FORBIDDEN_TRANSITION, CONTENDED,
    /// COMMAND_NOT_ACTIONABLE, DELETE_OWNS_CONTROL_SPACE, NOT_AN_OWNING_DELETE).
    /// Nothing was written.
    Conflict;
    /// The Idempotency-Key was used for a different request (IDEMPOTENCY_KEY_REUSED).
    IdempotencyKeyReused;
    /// Body or command payload over 64 KiB (PAYLOAD_TOO_LARGE).
    PayloadTooLarge;
    /// Body without Content-Type: application/json (UNSUPPORTED_MEDIA_TYPE).
    UnsupportedMediaType;
    /// Storage unavailable or shutting down (STORE_UNAVAILABLE, DATABASE_UNREACHABLE,
    /// SHUTTING_DOWN, DIRECTORY_NOT_READY); retry later. The body has a correlation_id, also
    /// sent as the X-Correlation-Id header; the detail is only in the service log.
    Unavailable;
}

/// Groups of the shared error answers, for the `responses(...)` of the admin operations:
/// each lists (status, response component) and documents them as `$ref`s.
macro_rules! error_groups {
    ($($(#[doc = $doc:literal])* $name:ident = [$($status:literal => $response:ident),*];)*) => {$(
        $(#[doc = $doc])*
        pub(crate) struct $name;

        impl utoipa::IntoResponses for $name {
            fn responses() -> std::collections::BTreeMap<
                String,
                utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
            > {
                [$(($status, stringify!($response))),*]
                    .into_iter()
                    .map(|(status, name)| {
                        (
                            status.to_owned(),
                            utoipa::openapi::RefOr::Ref(utoipa::openapi::Ref::from_response_name(name)),
                        )
                    })
                    .collect()
            }
        }
    )*};
}

error_groups! {
    /// What every `/v1/*` operation can answer besides its own outcomes: bad input, a missing
    /// token, storage unavailable.
    Refusals = ["400" => BadRequest, "401" => Unauthorized, "503" => Unavailable];
    /// What an operation with a JSON body can answer about the body itself.
    BodyRefusals = ["413" => PayloadTooLarge, "415" => UnsupportedMediaType];
}

impl AdminApiError {
    /// An error with `status`, `code` and `message`.
    /// `message` must be safe to show (no error text of a lower layer); a 5xx built this way
    /// still gets a correlation id when it is answered.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            correlation_id: None,
        }
    }

    /// A server-side failure: answers `status`, `code` and the safe `message` with a fresh
    /// correlation id, and logs `detail` (which may hold driver text) at `error` under the
    /// same id. The detail never reaches the caller.
    pub fn internal(
        status: StatusCode,
        code: &'static str,
        message: &str,
        detail: impl std::fmt::Display,
    ) -> Self {
        let correlation_id = uuid::Uuid::new_v4().to_string();
        tracing::error!(
            correlation_id = %correlation_id,
            code,
            status = status.as_u16(),
            detail = %detail,
            "admin API request failed"
        );
        Self {
            status,
            code,
            message: format!(
                "{message} (correlation id {correlation_id}; the service log has the detail)"
            ),
            correlation_id: Some(correlation_id),
        }
    }

    /// 500 `INTERNAL_ERROR`: a library error of a kind this build does not map (the library
    /// error enums are `#[non_exhaustive]`); logged like [`unavailable`](Self::unavailable).
    pub fn unexpected(detail: impl std::fmt::Display) -> Self {
        Self::internal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            "the request failed unexpectedly",
            detail,
        )
    }

    /// 400 `INVALID_ARGUMENT` naming the field.
    pub fn invalid(field: &str, reason: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            format!("{field} is invalid: {reason}"),
        )
    }

    /// 401 `UNAUTHORIZED`.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "missing or wrong bearer token; send Authorization: Bearer <admin_token>",
        )
    }

    /// 503 `STORE_UNAVAILABLE` with a correlation id; `detail` is only logged (see
    /// [`AdminApiError::internal`]).
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        Self::internal(
            StatusCode::SERVICE_UNAVAILABLE,
            "STORE_UNAVAILABLE",
            "storage is unavailable; retry later",
            detail,
        )
    }
}

impl IntoResponse for AdminApiError {
    fn into_response(mut self) -> Response {
        if self.status.is_server_error() && self.correlation_id.is_none() {
            // Built with `new` (a safe message of our own): still give it an id to quote.
            let id = uuid::Uuid::new_v4().to_string();
            tracing::warn!(correlation_id = %id, code = self.code, status = self.status.as_u16(), message = %self.message, "admin API answered a server error");
            self.correlation_id = Some(id);
        }
        let mut response = (
            self.status,
            Json(Body {
                code: self.code,
                message: &self.message,
                correlation_id: self.correlation_id.as_deref(),
            }),
        )
            .into_response();
        if let Some(id) = self
            .correlation_id
            .as_deref()
            .and_then(|id| HeaderValue::from_str(id).ok())
        {
            response.headers_mut().insert(CORRELATION_ID_HEADER, id);
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A refused command filter (the operator façade's one parser): 400 `INVALID_ARGUMENT`
/// naming the query or body field.
impl From<FilterError> for AdminApiError {
    fn from(error: FilterError) -> Self {
        Self::invalid(error.field.name(), error.reason)
    }
}

impl From<StoreError> for AdminApiError {
    fn from(error: StoreError) -> Self {
        Self::unavailable(error)
    }
}

impl From<FenceAdminError> for AdminApiError {
    fn from(error: FenceAdminError) -> Self {
        let message = error.to_string();
        match error {
            FenceAdminError::Storage(e) => Self::unavailable(e),
            FenceAdminError::Refused(_) => {
                Self::new(StatusCode::CONFLICT, "FENCE_INTENT_IN_FLIGHT", message)
            }
            FenceAdminError::Changed { .. } => {
                Self::new(StatusCode::CONFLICT, "FENCE_CHANGED", message)
            }
            FenceAdminError::IdempotencyKeyReused { .. } => Self::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "IDEMPOTENCY_KEY_REUSED",
                message,
            ),
            _ => Self::unexpected(message),
        }
    }
}

impl From<IntakeFailure> for AdminApiError {
    fn from(error: IntakeFailure) -> Self {
        let message = error.to_string();
        match error {
            IntakeFailure::Rejected(rejected) => {
                let (status, code) = match rejected {
                    IntakeError::InvalidField { .. } => {
                        (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
                    }
                    IntakeError::PayloadTooLarge { .. } => {
                        (StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE")
                    }
                    IntakeError::UnknownControlSpace { .. } => {
                        (StatusCode::NOT_FOUND, "CONTROL_SPACE_NOT_FOUND")
                    }
                    IntakeError::ControlSpaceExists { .. } => {
                        (StatusCode::CONFLICT, "CONTROL_SPACE_EXISTS")
                    }
                    IntakeError::ControlSpaceDeleted { .. } => {
                        (StatusCode::CONFLICT, "CONTROL_SPACE_DELETED")
                    }
                    IntakeError::NotProvisioned { .. } => {
                        (StatusCode::CONFLICT, "CONTROL_SPACE_NOT_PROVISIONED")
                    }
                    IntakeError::ControlSpaceDeleting { .. } => {
                        (StatusCode::CONFLICT, "CONTROL_SPACE_DELETING")
                    }
                    IntakeError::Transition(_) => (StatusCode::CONFLICT, "FORBIDDEN_TRANSITION"),
                    IntakeError::IdempotencyConflict { .. } => {
                        (StatusCode::UNPROCESSABLE_ENTITY, "IDEMPOTENCY_KEY_REUSED")
                    }
                    _ => return Self::unexpected(message),
                };
                Self::new(status, code, message)
            }
            IntakeFailure::Contended => Self::new(StatusCode::CONFLICT, "CONTENDED", message),
            IntakeFailure::Store(e) => Self::unavailable(e),
            _ => Self::unexpected(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn server_errors_hide_the_detail_and_log_it_under_the_correlation_id() {
        let log = Buffer::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let detail = "error returned from database: relation \"lifecycle_outbox\" does not exist";
        let error = tracing::subscriber::with_default(subscriber, || {
            AdminApiError::from(StoreError::unavailable(detail))
        });
        let id = error.correlation_id.clone().unwrap();
        assert!(
            !error.message.contains("lifecycle_outbox"),
            "{}",
            error.message
        );
        assert!(error.message.contains(&id), "{}", error.message);
        let logged = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
        assert!(logged.contains(&id) && logged.contains(detail), "{logged}");

        let response = error.into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[CORRELATION_ID_HEADER], id.as_str());
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["code"], "STORE_UNAVAILABLE");
        assert_eq!(body["correlation_id"], id.as_str());
        assert!(!body.to_string().contains("does not exist"), "{body}");
    }

    #[test]
    fn client_errors_carry_no_correlation_id() {
        let response = AdminApiError::invalid("limit", "0 is outside 1..=1000").into_response();
        assert!(response.headers().get(CORRELATION_ID_HEADER).is_none());
    }
}
