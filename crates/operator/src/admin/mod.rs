//! The admin HTTP API of `tenantry serve` (axum, JSON, bearer token), described by
//! `docs/openapi/admin-v1.json` and served at `/openapi.json`.
//!
//! Rules every route follows:
//! - `/v1/*` requires `Authorization: Bearer <admin_token>` when a token is configured;
//!   `/healthz`, `/readyz`, `/metrics` and `/openapi.json` do not (probes and scrapers);
//! - errors are `{code, message}` JSON with a 4xx status for the caller's mistakes (nothing is
//!   written then) and 503 when storage is unavailable; a 5xx never carries the underlying
//!   error text: it has a safe message and a `correlation_id` (also in the
//!   `X-Correlation-Id` header), and the detail is logged under the same id;
//! - request bodies are JSON, at most [`MAX_BODY_BYTES`] (larger: 413 `PAYLOAD_TOO_LARGE`);
//! - mutations accept one `Idempotency-Key` header (an id: 1..=255 bytes, no whitespace,
//!   NFC); without one a fresh key is generated, so the request is not replayable; two or
//!   more are refused (400 `DUPLICATE_IDEMPOTENCY_KEY`).
//!
//! The handlers only translate HTTP to the engine's use cases (`CommandIntake`,
//! `OperatorActions`, the stores, the fence administration of `ScopedWrites`) and back.

mod commands;
mod error;
mod extract;
pub(crate) mod fences;
mod lifecycle;
mod openapi;
mod probes;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tenantry_ports::clock::Clock;

pub use commands::DETAIL_ERRORS;
pub use error::{AdminApiError, CORRELATION_ID_HEADER};
pub use lifecycle::{CommandView, CommandsQuery, DEFAULT_PAGE, MAX_PAGE, known_cursor};
pub use openapi::document_json;

use crate::directory::DirectoryHandle;
use crate::ports::{Fences, Intake, Store};

/// Largest accepted request body: 64 KiB.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// `docs/openapi/admin-v1.json`, served at `/openapi.json`: what [`document_json`] generates
/// from the handlers and types (`tests/openapi.rs` fails when the committed file differs).
pub const OPENAPI: &str = include_str!("../../../../docs/openapi/admin-v1.json");

/// Every route as (method, path template); the OpenAPI file documents exactly these.
pub const PATHS: [(&str, &str); 18] = [
    ("POST", "/v1/tenants/{tenant_id}/control-spaces"),
    (
        "GET",
        "/v1/tenants/{tenant_id}/control-spaces/{control_space_id}",
    ),
    (
        "DELETE",
        "/v1/tenants/{tenant_id}/control-spaces/{control_space_id}",
    ),
    (
        "POST",
        "/v1/tenants/{tenant_id}/control-spaces/{control_space_id}/grants/{grant_id}/revocations",
    ),
    ("GET", "/v1/commands"),
    ("GET", "/v1/fences"),
    ("POST", "/v1/fences/clear"),
    ("GET", "/v1/directory/status"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
    ("POST", "/v1/commands/{command_id}/retry"),
    ("POST", "/v1/commands/{command_id}/abandon"),
    ("POST", "/v1/commands/retry"),
    ("POST", "/v1/commands/abandon"),
    ("GET", "/v1/commands/{command_id}/actions"),
    ("GET", "/v1/commands/{command_id}"),
    ("POST", "/v1/commands/{command_id}/mark-deleted"),
];

/// What the handlers share.
#[derive(Clone)]
pub struct AdminState {
    /// Lifecycle storage (reads).
    pub store: Store,
    /// Command intake (writes).
    pub intake: Arc<Intake>,
    /// Fence listing and clearing: the process's one scoped-writes runtime (so a clear takes
    /// the same scope locks as its writers).
    pub fences: Fences,
    /// Bearer token required on `/v1/*`, if any.
    pub token: Option<Arc<str>>,
    /// False once shutdown began (`/readyz` answers 503 then).
    pub accepting: Arc<AtomicBool>,
    /// The directory projection, when configured.
    pub directory: Option<DirectoryHandle>,
    /// The process's one clock (operator actions record their time on it).
    pub clock: Arc<dyn Clock>,
    /// The counts `/metrics` and the console share (refreshed at most once a second).
    pub counts: Arc<crate::counts::CountsCache>,
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// The admin API router.
pub fn router(state: AdminState) -> Router {
    let v1 = Router::new()
        .route(PATHS[0].1, post(lifecycle::create_control_space))
        .route(
            PATHS[1].1,
            get(lifecycle::get_control_space).delete(lifecycle::delete_control_space),
        )
        .route(PATHS[3].1, post(lifecycle::revoke_grant))
        .route(PATHS[4].1, get(lifecycle::list_commands))
        .route(PATHS[5].1, get(fences::list_fences))
        .route(PATHS[6].1, post(fences::clear_fence))
        .route(PATHS[7].1, get(probes::directory_status))
        .route(PATHS[11].1, post(commands::retry_command))
        .route(PATHS[12].1, post(commands::abandon_command))
        .route(PATHS[13].1, post(commands::retry_matching))
        .route(PATHS[14].1, post(commands::abandon_matching))
        .route(PATHS[15].1, get(commands::list_actions))
        .route(PATHS[16].1, get(commands::get_command))
        .route(PATHS[17].1, post(commands::mark_deleted))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .merge(v1)
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .route("/metrics", get(probes::metrics))
        .route("/openapi.json", get(probes::openapi))
        .fallback(probes::not_found)
        .method_not_allowed_fallback(probes::method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Refuses `/v1/*` requests without the configured bearer token.
async fn require_token(
    State(state): State<AdminState>,
    request: Request,
    next: Next,
) -> Result<Response, AdminApiError> {
    if let Some(expected) = &state.token {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_credentials)
            .unwrap_or("");
        if !constant_time_eq(presented.as_bytes(), expected.as_bytes()) {
            return Err(AdminApiError::unauthorized());
        }
    }
    Ok(next.run(request).await)
}

/// The credentials of an `Authorization: Bearer <token>` value; the scheme name is
/// case-insensitive (RFC 7235 section 2.1).
fn bearer_credentials(value: &str) -> Option<&str> {
    let (scheme, credentials) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credentials.trim_start())
}

/// Compares without an early exit on the first differing byte.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::{bearer_credentials, constant_time_eq};

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        let cases = [
            ("Bearer tok", Some("tok")),
            ("bearer tok", Some("tok")),
            ("BEARER  tok", Some("tok")),
            ("Basic tok", None),
            ("Bearertok", None),
            ("", None),
        ];
        for (header, expected) in cases {
            assert_eq!(bearer_credentials(header), expected, "{header:?}");
        }
    }

    #[test]
    fn token_comparison_needs_equal_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }
}
