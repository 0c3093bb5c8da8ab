//! The admin HTTP API of `tenantry serve` (axum, JSON, bearer token), described by
//! `docs/openapi/admin-v1.json` and served at `/openapi.json`.
//!
//! Rules every route follows:
//! - `/v1/*` requires `Authorization: Bearer <token>` with the token of a configured operator
//!   (`admin_token`, or an `[[operators]]` entry) when any is configured; `/healthz`,
//!   `/readyz`, `/metrics` and `/openapi.json` do not (probes and scrapers);
//! - an operator with role `read` may send `GET` (and `HEAD`) only: any other method is 403
//!   `FORBIDDEN_ROLE` before the handler runs, so nothing is written (the role is enforced
//!   here once, for every route);
//! - every action records the authenticated operator's name as its actor
//!   ([`Caller::actor`](crate::identity::Caller::actor));
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
use axum::http::{Method, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tenantry_ports::clock::Clock;

pub use commands::DETAIL_ERRORS;
pub use error::{AdminApiError, CORRELATION_ID_HEADER};
pub use lifecycle::{CommandView, CommandsQuery, DEFAULT_PAGE, MAX_PAGE, known_cursor};
pub use openapi::document_json;

use crate::directory::DirectoryHandle;
use crate::identity::{Caller, Operators};
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
    /// The operators whose bearer tokens `/v1/*` accepts (none: the API is open).
    pub operators: Arc<Operators>,
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
            .field("operators", &self.operators)
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

/// Authenticates `/v1/*` requests: with operators configured, the bearer token must be one of
/// theirs (else 401), and the request gets its [`Caller`] as an extension; a `read` operator's
/// request with a method other than `GET` or `HEAD` is refused with 403 `FORBIDDEN_ROLE`
/// before any handler runs. Without operators every request is [`Caller::Open`].
async fn require_token(
    State(state): State<AdminState>,
    mut request: Request,
    next: Next,
) -> Result<Response, AdminApiError> {
    let caller = if state.operators.is_empty() {
        Caller::Open
    } else {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_credentials)
            .unwrap_or("");
        match state.operators.authenticate(presented) {
            Some(operator) => Caller::of(operator),
            None => return Err(AdminApiError::unauthorized()),
        }
    };
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if !reads {
        caller.may_mutate()?;
    }
    request.extensions_mut().insert(caller);
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

#[cfg(test)]
mod tests {
    use super::bearer_credentials;

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
}
