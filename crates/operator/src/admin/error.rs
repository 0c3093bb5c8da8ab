//! The `{code, message}` error body of the admin API: how a [`OperatorRefusal`] (the operator façade
//! refusal, `crate::refusal`) is answered over HTTP, and the documented error answers.
//!
//! A 5xx answer never carries the underlying error's text (database driver messages name
//! tables, constraints and hosts): it has a stable code, a safe message and a
//! `correlation_id` (a UUID, also sent as the `X-Correlation-Id` header); the detail is logged
//! at `error` with the same `correlation_id`, so an operator can find it from the answer.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

pub use crate::refusal::OperatorRefusal as AdminApiError;
use crate::refusal::OperatorRefusal;

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
    /// The operator's role may not do this (FORBIDDEN_ROLE: a `read` operator sent a
    /// mutation), or the body's actor is not the authenticated operator's name
    /// (ACTOR_MISMATCH). Nothing was written.
    Forbidden;
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
    /// What every mutation can answer about who sends it: 403 for a `read` operator or an
    /// actor that is not the token's operator.
    RoleRefusals = ["403" => Forbidden];
    /// What an operation with a JSON body can answer about the body itself.
    BodyRefusals = ["413" => PayloadTooLarge, "415" => UnsupportedMediaType];
}

/// The HTTP mapping of a [`OperatorRefusal`]: its status with the `{code, message}` body (and the
/// correlation id of a 5xx, `WWW-Authenticate` on a 401).
impl IntoResponse for OperatorRefusal {
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

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use tenantry_ports::lifecycle::StoreError;

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
