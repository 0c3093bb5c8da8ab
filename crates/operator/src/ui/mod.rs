//! The operator console at `/ui` on the admin listener: server-rendered HTML (maud) with htmx
//! for live refresh, both embedded in the binary (nothing is fetched at run time).
//!
//! - [`auth`]: the sign-in form (an operator's token), the session cookie (HttpOnly,
//!   SameSite=Strict, path `/ui`), the CSRF token of every state-changing request, and the
//!   redirect of every page to the login without a valid session;
//! - [`session`]: the session cookie, signed with HMAC-SHA256 under `ui_session_key`, so every
//!   replica with the same key and operators accepts it;
//! - [`throttle`]: failed sign-ins per client address, 429 beyond the bound;
//! - [`pages`]: overview, commands (filter, keyset paging, detail, retry / abandon one, bulk
//!   of the commands a confirmation names, by id), fences (fence vs in-flight intent, clear with a
//!   reason), directory (cursor, staleness, readiness, counts);
//! - [`assets`]: the vendored htmx, the stylesheet and the local-time script, under
//!   fingerprinted URLs cached as immutable;
//! - [`layout`]: the page shell;
//! - [`extract`]: form and query extractors whose rejection is a console page (400), not
//!   axum's plain text.
//!
//! Reads go through the stores' read ports and the shared [`CountsCache`](crate::counts::CountsCache)
//! (at most one refresh a second for every viewer); actions call the same use cases as the
//! admin API (`OperatorActions` of the engine, the fence administration of the process's
//! `ScopedWrites`), so they are validated and recorded the same way, with the signed-in
//! operator's name as the actor. A session of a `read` operator, and every session with
//! `ui_read_only = true`, is shown no action, and every action request it sends is refused with
//! 403.

pub mod assets;
pub mod auth;
pub mod extract;
pub mod layout;
pub mod pages;
pub mod session;
pub mod throttle;

use std::sync::Arc;

use axum::Router;
use axum::middleware;
use axum::routing::{get, post};

use crate::admin::{self, AdminState};

/// Settings of the console (`ui`, `ui_read_only`, `ui_session_key`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UiSettings {
    /// Hide and refuse every action (retry, abandon, fence clear).
    pub read_only: bool,
    /// Mark the session cookie `Secure` (the admin listener serves TLS). Behind a reverse
    /// proxy that terminates TLS, a request with `X-Forwarded-Proto: https` gets it too.
    pub secure_cookie: bool,
    /// The key session cookies are signed with (`ui_session_key`); `None`: a random key of
    /// this process (sessions then work on this replica only, until it stops).
    pub session_key: Option<crate::identity::Secret>,
    /// The sign-in throttle's rule.
    pub throttle: throttle::ThrottleRule,
}

/// What the console's handlers share: the admin API's state (stores, use cases, clock,
/// counts), the sessions and the settings.
#[derive(Clone)]
pub struct UiState {
    /// The admin API's state.
    pub admin: AdminState,
    /// Signs and checks session cookies.
    pub sessions: Arc<session::Sessions>,
    /// Failed sign-ins per client.
    pub throttle: Arc<throttle::SignInThrottle>,
    /// `ui_read_only` and friends.
    pub settings: UiSettings,
}

impl std::fmt::Debug for UiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UiState")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl UiState {
    /// The console over `admin`, its sessions signed with `settings.session_key` (or a random
    /// key of this process, which a log line at `warn` reports: sessions then do not survive
    /// a restart nor work across replicas).
    pub fn new(admin: AdminState, settings: UiSettings) -> Self {
        if settings.session_key.is_none() {
            tracing::warn!(
                "ui_session_key is not set: console sessions are signed with a random key of this process, so they end when it stops and are not accepted by other replicas behind a load balancer; set ui_session_key_file (docs/operations.md, \"Operators and roles\")"
            );
        }
        let sessions = Arc::new(session::Sessions::new(
            settings.session_key.clone(),
            admin.operators.clone(),
            admin.clock.clone(),
        ));
        let throttle = Arc::new(throttle::SignInThrottle::new(settings.throttle));
        Self {
            admin,
            sessions,
            throttle,
            settings,
        }
    }
}

/// The console's routes (all under `/ui`).
pub fn router(state: UiState) -> Router {
    let pages = Router::new()
        .route("/ui", get(pages::overview::page))
        .route("/ui/", get(pages::overview::page))
        .route("/ui/commands", get(pages::commands::list))
        .route("/ui/commands/bulk", get(pages::commands::confirm_bulk))
        .route("/ui/commands/bulk", post(pages::commands::bulk))
        .route("/ui/commands/{command_id}", get(pages::commands::detail))
        .route(
            "/ui/commands/{command_id}/retry",
            post(pages::commands::retry),
        )
        .route(
            "/ui/commands/{command_id}/abandon",
            post(pages::commands::abandon),
        )
        .route("/ui/fences", get(pages::fences::list))
        .route("/ui/fences/clear", get(pages::fences::confirm_clear))
        .route("/ui/fences/clear", post(pages::fences::clear))
        .route("/ui/directory", get(pages::directory::page))
        .route("/ui/logout", post(auth::logout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::require_session,
        ));
    Router::new()
        .merge(pages)
        .route("/ui/login", get(auth::login_form).post(auth::login))
        .route("/ui/static/{name}", get(assets::plain))
        .route(
            "/ui/static/{fingerprint}/{name}",
            get(assets::fingerprinted),
        )
        .layer(middleware::from_fn(protective_headers))
        .with_state(state)
}

/// Headers on every console answer: `Cache-Control: no-store` unless the handler set its own
/// (pages show live operational data and carry the CSRF token; a shared or back-button cache
/// must not keep them; the static files set theirs, see [`assets`]),
/// `X-Frame-Options: DENY` and `Content-Security-Policy: frame-ancestors 'none'` (no other
/// site may frame the console to trick a click on an action), `X-Content-Type-Options:
/// nosniff`, `Referrer-Policy: same-origin`.
async fn protective_headers(
    request: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    use axum::http::{HeaderValue, header};
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// The admin API with the console beside it when `ui` is set (`ui = false`: `/ui` is 404
/// like any unknown route).
pub fn app(admin_state: AdminState, ui: Option<UiSettings>) -> Router {
    let api = admin::router(admin_state.clone());
    match ui {
        Some(settings) => router(UiState::new(admin_state, settings)).merge(api),
        None => api,
    }
}
