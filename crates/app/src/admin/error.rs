//! The `{code, message}` error body of the admin API and the mapping of engine errors to it.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tenantry_engine::lifecycle::IntakeFailure;
use tenantry_lifecycle::intake::IntakeError;
use tenantry_ports::lifecycle::StoreError;

use crate::fences::FenceAdminError;

/// An error answer: HTTP status plus `{code, message}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What was wrong and what to do.
    pub message: String,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
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

    /// 503 `STORE_UNAVAILABLE`.
    pub fn unavailable(reason: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "STORE_UNAVAILABLE",
            format!("storage is unavailable ({reason}); retry later"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            Json(Body {
                code: self.code,
                message: &self.message,
            }),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        Self::unavailable(error)
    }
}

impl From<FenceAdminError> for ApiError {
    fn from(error: FenceAdminError) -> Self {
        Self::unavailable(error)
    }
}

impl From<IntakeFailure> for ApiError {
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
                };
                Self::new(status, code, message)
            }
            IntakeFailure::Contended => Self::new(StatusCode::CONFLICT, "CONTENDED", message),
            IntakeFailure::Store(e) => Self::unavailable(e),
        }
    }
}
