//! Console sessions: the login form takes the admin token and sets a session cookie
//! (`tenantry_console`, HttpOnly, SameSite=Strict, path `/ui`; also `Secure` when the admin
//! listener serves TLS or a TLS-terminating proxy sends `X-Forwarded-Proto: https`, see
//! [`cookie_is_secure`]); every page and action needs a
//! live session (otherwise: a redirect to `/ui/login`, or `HX-Redirect` for htmx requests);
//! every state-changing request carries the session's CSRF token (form field `csrf`; no header
//! is read), otherwise 403 and nothing happens.
//!
//! Sessions live in this process only (a restart logs everyone out) for
//! [`SESSION_LIFETIME`] on the clock port's monotonic time. Without a configured
//! `admin_token` the admin API is open, and so the login takes any token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use tenantry_ports::clock::Clock;
use tokio::time::Instant;

use super::UiState;
use super::extract::Form;
use super::layout;

/// Name of the session cookie.
pub const COOKIE: &str = "tenantry_console";

/// How long a session lasts after login: 12 hours.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Most sessions kept at once; the oldest goes first beyond it.
pub const MAX_SESSIONS: usize = 1024;

/// A logged-in console session, as handlers see it (a request extension).
#[derive(Debug, Clone)]
pub struct Session {
    /// The CSRF token every state-changing request of this session must carry.
    pub csrf: Arc<str>,
    /// Whether the console is read-only (`ui_read_only`); set by [`require_session`] so every
    /// page's header can say so.
    pub read_only: bool,
}

#[derive(Debug)]
struct Entry {
    csrf: Arc<str>,
    expires: Instant,
}

/// The live sessions of this process.
pub struct Sessions {
    clock: Arc<dyn Clock>,
    map: Mutex<HashMap<String, Entry>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

/// 32 random bytes as hex: a session id or a CSRF token.
fn random_token() -> String {
    rand::random::<[u8; 32]>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl Sessions {
    /// No session yet; lifetimes measured on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // The map holds plain values; a panic elsewhere leaves it usable.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a session; returns its id (the cookie value).
    pub fn create(&self) -> String {
        let now = self.clock.monotonic();
        let id = random_token();
        let mut map = self.lock();
        map.retain(|_, e| e.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, e)| e.expires)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            Entry {
                csrf: Arc::from(random_token()),
                expires: now + SESSION_LIFETIME,
            },
        );
        id
    }

    /// The live session with this id.
    pub fn get(&self, id: &str) -> Option<Session> {
        let now = self.clock.monotonic();
        let map = self.lock();
        map.get(id).filter(|e| e.expires > now).map(|e| Session {
            csrf: e.csrf.clone(),
            read_only: false,
        })
    }

    /// Ends a session.
    pub fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// The session id in the request's `Cookie` header(s), if any.
pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// Whether `presented` is the session's CSRF token (compared without an early exit).
pub fn csrf_ok(session: &Session, presented: &str) -> bool {
    crate::admin::constant_time_eq(presented.as_bytes(), session.csrf.as_bytes())
}

/// The answer to a state-changing request without the session's CSRF token: 403, nothing
/// done.
pub fn csrf_refused() -> Response {
    (
        StatusCode::FORBIDDEN,
        layout::message_page(
            "Refused",
            "This request did not carry the console's CSRF token, so nothing was done. Reload the page and try again.",
        ),
    )
        .into_response()
}

/// Every console route but the login and the static files: a live session, or a redirect to
/// the login (htmx requests get `HX-Redirect`). State-changing requests (`POST`) must also
/// carry the CSRF token in their form field `csrf` (checked by each handler, which reads the
/// form).
pub async fn require_session(
    State(state): State<UiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let session = session_cookie(request.headers()).and_then(|id| state.sessions.get(&id));
    let Some(session) = session else {
        if request.headers().contains_key("hx-request") {
            return (
                StatusCode::UNAUTHORIZED,
                [("hx-redirect", HeaderValue::from_static("/ui/login"))],
            )
                .into_response();
        }
        return Redirect::to("/ui/login").into_response();
    };
    request.extensions_mut().insert(Session {
        read_only: state.settings.read_only,
        ..session
    });
    next.run(request).await
}

/// `GET /ui/login`.
pub async fn login_form() -> Response {
    login_page(None, StatusCode::OK)
}

fn login_page(error: Option<&str>, status: StatusCode) -> Response {
    let body = html! {
        h1 { "Tenantry console" }
        p { "Sign in with the service's admin token (" code { "admin_token" } ")." }
        @if let Some(error) = error {
            p.error role="alert" { (error) }
        }
        form method="post" action="/ui/login" {
            label for="token" { "Admin token" }
            input #token type="password" name="token" autocomplete="current-password" autofocus;
            button #login type="submit" { "Sign in" }
        }
    };
    (status, layout::bare("Sign in", body)).into_response()
}

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    /// The admin token.
    pub token: String,
}

/// `POST /ui/login`: the admin token starts a session (303 to the overview with the cookie);
/// a wrong token is 401 with the form again.
pub async fn login(
    State(state): State<UiState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let accepted = match &state.admin.token {
        Some(expected) => {
            crate::admin::constant_time_eq(form.token.trim().as_bytes(), expected.as_bytes())
        }
        None => true,
    };
    if !accepted {
        tracing::warn!("console login refused: wrong admin token");
        return login_page(
            Some("That is not the admin token of this service."),
            StatusCode::UNAUTHORIZED,
        );
    }
    let id = state.sessions.create();
    let secure = if cookie_is_secure(state.settings.secure_cookie, &headers) {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!("{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict{secure}");
    let mut response = Redirect::to("/ui").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

/// Whether the session cookie gets `Secure`: the admin listener serves TLS, or a reverse proxy
/// that terminates TLS says so with `X-Forwarded-Proto: https` (the first value, when it lists
/// several). A wrong header can only add `Secure`, which a plain-HTTP browser then does not
/// send back: it never weakens the cookie.
pub fn cookie_is_secure(listener_tls: bool, headers: &HeaderMap) -> bool {
    listener_tls
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(',').next())
            .is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
}

/// The logout form's fields.
#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    /// The session's CSRF token.
    #[serde(default)]
    pub csrf: String,
}

/// `POST /ui/logout`: ends the session (CSRF token required) and clears the cookie.
pub async fn logout(
    State(state): State<UiState>,
    axum::Extension(session): axum::Extension<Session>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !csrf_ok(&session, &form.csrf) {
        return csrf_refused();
    }
    if let Some(id) = session_cookie(&headers) {
        state.sessions.remove(&id);
    }
    let mut response = Redirect::to("/ui/login").into_response();
    let cleared = if cookie_is_secure(state.settings.secure_cookie, &headers) {
        "tenantry_console=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0; Secure"
    } else {
        "tenantry_console=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0"
    };
    response
        .headers_mut()
        .insert(header::SET_COOKIE, HeaderValue::from_static(cleared));
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; tenantry_console=abc; b=2"),
        );
        assert_eq!(session_cookie(&headers).as_deref(), Some("abc"));
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("tenantry_consoles=x"),
        );
        assert_eq!(session_cookie(&headers), None);
    }

    #[test]
    fn the_cookie_is_secure_with_tls_or_a_forwarded_https() {
        let none = HeaderMap::new();
        assert!(cookie_is_secure(true, &none));
        assert!(!cookie_is_secure(false, &none));
        let forwarded = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert("x-forwarded-proto", HeaderValue::from_static(value));
            headers
        };
        assert!(cookie_is_secure(false, &forwarded("https")));
        assert!(cookie_is_secure(false, &forwarded("HTTPS")));
        assert!(cookie_is_secure(false, &forwarded("https, http")));
        assert!(!cookie_is_secure(false, &forwarded("http")));
        assert!(!cookie_is_secure(false, &forwarded("http, https")));
    }

    #[tokio::test]
    async fn sessions_expire_on_the_clock() {
        let clock = tenantry_ports::clock::ManualClock::new(chrono::Utc::now());
        let sessions = Sessions::new(Arc::new(clock.clone()));
        let id = sessions.create();
        let session = sessions.get(&id).unwrap();
        assert!(csrf_ok(&session, session.csrf.as_ref()));
        assert!(!csrf_ok(&session, "nope"));
        clock.advance(SESSION_LIFETIME);
        assert!(sessions.get(&id).is_none());
    }
}
