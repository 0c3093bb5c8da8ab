//! The one refusal of the operator façade ([`OperatorRefusal`]), mapped once to each front end's
//! form, as rustls maps its `Error` to one `AlertDescription`:
//!
//! - HTTP (the admin API): its `status` with the `{code, message}` body (`IntoResponse`, in
//!   `admin::error`);
//! - the console: [`OperatorRefusal::page`] (in `ui::pages`), the same status with a page naming the
//!   code and the message;
//! - the CLI: [`OperatorRefusal::exit_code`], [`USAGE_EXIT`] (2) when the request itself was wrong
//!   (400: the arguments), 1 otherwise.
//!
//! The engine's errors become refusals here, once (`From` impls): the filter's
//! [`FilterError`], storage, intake, operator actions and the fence administration. A 5xx
//! never carries the underlying error's text (database driver messages name tables,
//! constraints and hosts): it has a stable code, a safe message and a `correlation_id` (a
//! UUID, also sent as the `X-Correlation-Id` header); the detail is logged at `error` with the
//! same `correlation_id`, so an operator can find it from the answer.

use axum::http::StatusCode;
use tenantry_engine::lifecycle::{IntakeFailure, OperatorRequestError};
use tenantry_engine::scoped_writes::admin::FenceAdminError;
use tenantry_lifecycle::intake::IntakeError;
use tenantry_lifecycle::operator::ControlSpaceActionError;
use tenantry_ports::lifecycle::{OperatorActionError, StoreError};

use crate::FilterError;

/// The CLI's exit code for a refusal of the request itself (sysexits-style usage error, as
/// clap exits on bad arguments).
pub const USAGE_EXIT: u8 = 2;

/// A request the operator façade does not carry out: the HTTP status that classifies it, a
/// stable code and a safe message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct OperatorRefusal {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable machine-readable code.
    pub code: &'static str,
    /// What was wrong and what to do.
    pub message: String,
    /// Correlation id of a 5xx answer (the log line with the detail carries the same id).
    pub correlation_id: Option<String>,
}

impl OperatorRefusal {
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
            "missing or wrong bearer token; send Authorization: Bearer <token> with an operator token (admin_token or an [[operators]] token)",
        )
    }

    /// 403 `FORBIDDEN_ROLE`: the operator `name` has `role` `read`, which may not change
    /// anything (docs/operations.md, "Operators and roles"). Nothing was done.
    pub fn forbidden_role(name: &str, role: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "FORBIDDEN_ROLE",
            format!(
                "operator {name:?} has role {role}, which may read but not change anything; nothing was done (use a token of an operator with role operate)"
            ),
        )
    }

    /// 403 `ACTOR_MISMATCH`: the request states an actor other than the authenticated
    /// operator's name (an action is recorded under the token's name only). Nothing was done.
    pub fn actor_mismatch(name: &str, stated: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "ACTOR_MISMATCH",
            format!(
                "actor {stated:?} is not the authenticated operator {name:?}; actions are recorded under the token's operator name: omit actor or send {name:?}; nothing was done"
            ),
        )
    }

    /// 503 `STORE_UNAVAILABLE` with a correlation id; `detail` is only logged (see
    /// [`OperatorRefusal::internal`]).
    pub fn unavailable(detail: impl std::fmt::Display) -> Self {
        Self::internal(
            StatusCode::SERVICE_UNAVAILABLE,
            "STORE_UNAVAILABLE",
            "storage is unavailable; retry later",
            detail,
        )
    }

    /// The CLI's exit code for this refusal: [`USAGE_EXIT`] (2) when the request itself was
    /// wrong (400: an argument is invalid, a cursor unknown), 1 for everything else (not
    /// found, a conflict with the current state, storage unavailable).
    pub fn exit_code(&self) -> u8 {
        if self.status == StatusCode::BAD_REQUEST {
            USAGE_EXIT
        } else {
            1
        }
    }
}

/// A refused command filter (the operator façade's one parser): 400 `INVALID_ARGUMENT`
/// naming the query or body field.
impl From<FilterError> for OperatorRefusal {
    fn from(error: FilterError) -> Self {
        Self::invalid(error.field.name(), error.reason)
    }
}

impl From<StoreError> for OperatorRefusal {
    fn from(error: StoreError) -> Self {
        Self::unavailable(error)
    }
}

impl From<FenceAdminError> for OperatorRefusal {
    fn from(error: FenceAdminError) -> Self {
        let message = error.to_string();
        match error {
            FenceAdminError::Storage(e) => Self::unavailable(e),
            FenceAdminError::Refused(tenantry_fence::ClearRefused::RequestMayLand { .. }) => {
                Self::new(StatusCode::CONFLICT, "FENCE_REQUEST_MAY_LAND", message)
            }
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

impl From<IntakeFailure> for OperatorRefusal {
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

impl From<OperatorActionError> for OperatorRefusal {
    fn from(error: OperatorActionError) -> Self {
        let message = error.to_string();
        match error {
            OperatorActionError::UnknownCommand { .. } => {
                Self::new(StatusCode::NOT_FOUND, "COMMAND_NOT_FOUND", message)
            }
            OperatorActionError::NotActionable { .. } => {
                Self::new(StatusCode::CONFLICT, "COMMAND_NOT_ACTIONABLE", message)
            }
            OperatorActionError::ControlSpace(
                ControlSpaceActionError::DeleteOwnsControlSpace { .. },
            ) => Self::new(StatusCode::CONFLICT, "DELETE_OWNS_CONTROL_SPACE", message),
            OperatorActionError::ControlSpace(_) => {
                Self::new(StatusCode::CONFLICT, "NOT_AN_OWNING_DELETE", message)
            }
            OperatorActionError::Store(e) => Self::unavailable(e),
            _ => Self::unexpected(message),
        }
    }
}

impl From<OperatorRequestError> for OperatorRefusal {
    fn from(error: OperatorRequestError) -> Self {
        let message = error.to_string();
        match error {
            OperatorRequestError::InvalidField { .. }
            | OperatorRequestError::BulkStatusRequired { .. }
            | OperatorRequestError::ConfirmedCount { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message)
            }
            OperatorRequestError::Refused(e) => e.into(),
            OperatorRequestError::Store(e) => Self::unavailable(e),
            _ => Self::unexpected(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CLI's exit code follows the refusal's class: 2 for a wrong request, 1 otherwise.
    #[test]
    fn a_refusal_has_one_exit_code() {
        assert_eq!(
            OperatorRefusal::invalid("status", "unknown").exit_code(),
            USAGE_EXIT
        );
        let unknown_cursor =
            OperatorRefusal::new(StatusCode::BAD_REQUEST, "UNKNOWN_CURSOR", "no such");
        assert_eq!(unknown_cursor.exit_code(), 2);
        for status in [
            StatusCode::NOT_FOUND,
            StatusCode::CONFLICT,
            StatusCode::UNPROCESSABLE_ENTITY,
            StatusCode::SERVICE_UNAVAILABLE,
        ] {
            assert_eq!(
                OperatorRefusal::new(status, "X", "x").exit_code(),
                1,
                "{status}"
            );
        }
    }
}
