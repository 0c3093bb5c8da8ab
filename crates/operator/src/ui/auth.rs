//! Console sign-in: the form takes an operator's token (`admin_token` or an `[[operators]]`
//! token) and sets a signed session cookie ([`super::session`]; `tenantry_console`,
//! HttpOnly, SameSite=Strict, path `/ui`; also `Secure` when the admin listener serves TLS or
//! a TLS-terminating proxy sends `X-Forwarded-Proto: https`, see [`cookie_is_secure`]); every
//! page and action needs a live session (otherwise: a redirect to `/ui/login`, or
//! `HX-Redirect` for htmx requests); every state-changing request carries the session's CSRF
//! token (form field `csrf`; no header is read), otherwise 403 and nothing happens. A session
//! of a `read` operator (or any session with `ui_read_only`) sees no action, and an action it
//! sends anyway is refused with 403.
//!
//! Failed sign-ins are throttled per client address ([`super::throttle`]): 429 with
//! `Retry-After`. Without any configured operator the admin API is open, and so the sign-in
//! takes any token (the session's operator is then `console`).

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::UiState;
use super::extract::Form;
use super::layout;
pub use super::session::{SESSION_LIFETIME, Session, Sessions};
use super::throttle::Verdict;
use crate::identity::{OPEN_CONSOLE_ACTOR, Role, tokens_equal};

/// Name of the session cookie.
pub const COOKIE: &str = "tenantry_console";

/// The session cookie's value in the request's `Cookie` header(s), if any.
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
    tokens_equal(presented.as_bytes(), session.csrf.as_bytes())
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
    let session = session_cookie(request.headers()).and_then(|value| state.sessions.verify(&value));
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
        read_only: session.read_only || state.settings.read_only,
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
        p { "Sign in with your operator token (" code { "admin_token" } " or an " code { "[[operators]]" } " token)." }
        @if let Some(error) = error {
            p.error role="alert" { (error) }
        }
        form method="post" action="/ui/login" {
            label for="token" { "Operator token" }
            input #token type="password" name="token" autocomplete="current-password" autofocus;
            button #login type="submit" { "Sign in" }
        }
    };
    (status, layout::bare("Sign in", body)).into_response()
}

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    /// The operator's token.
    pub token: String,
}

/// The client address of a request: the connection's peer, when the listener recorded it.
fn client(request_peer: Option<&ConnectInfo<SocketAddr>>) -> Option<std::net::IpAddr> {
    request_peer.map(|ConnectInfo(addr)| addr.ip())
}

/// `POST /ui/login`: an operator's token starts a session (303 to the overview with the
/// signed cookie); a wrong token is 401 with the form again; a client with too many recent
/// failures is 429 with `Retry-After` (whole seconds) and its token is not even checked.
pub async fn login(
    State(state): State<UiState>,
    peer: Option<axum::Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let client = client(peer.as_ref().map(|axum::Extension(p)| p));
    let now = state.admin.clock.monotonic();
    if let Verdict::Wait(wait) = state.throttle.check(client, now) {
        let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
        let seconds = seconds.max(1);
        tracing::warn!(client = ?client, retry_after_s = seconds, "console sign-in throttled");
        let mut response = login_page(
            Some(&format!(
                "Too many failed sign-ins from this address; try again in {seconds} s."
            )),
            StatusCode::TOO_MANY_REQUESTS,
        );
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let operators = &state.admin.operators;
    let signed_in = if operators.is_empty() {
        Some((OPEN_CONSOLE_ACTOR.to_owned(), Role::Operate))
    } else {
        operators
            .authenticate(form.token.trim())
            .map(|o| (o.name.clone(), o.role))
    };
    let Some((operator, role)) = signed_in else {
        state.throttle.failed(client, now);
        tracing::warn!(client = ?client, "console sign-in refused: no operator has that token");
        return login_page(
            Some("That is not the admin token or an operator token of this service."),
            StatusCode::UNAUTHORIZED,
        );
    };
    state.throttle.succeeded(client);
    tracing::info!(operator = %operator, role = %role, "console sign-in");
    let value = state.sessions.issue(&operator, role);
    let secure = if cookie_is_secure(state.settings.secure_cookie, &headers) {
        "; Secure"
    } else {
        ""
    };
    let max_age = SESSION_LIFETIME.as_secs();
    let cookie =
        format!("{COOKIE}={value}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={max_age}{secure}");
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

/// `POST /ui/logout`: ends the session (CSRF token required): clears the cookie and refuses it
/// in this process from now on ([`Sessions::revoke`]; another replica accepts a copy of the
/// cookie until it expires).
pub async fn logout(
    State(state): State<UiState>,
    axum::Extension(session): axum::Extension<Session>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !csrf_ok(&session, &form.csrf) {
        return csrf_refused();
    }
    state.sessions.revoke(&session);
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

    #[test]
    fn the_csrf_token_must_match_exactly() {
        let session = Session {
            operator: "alice".into(),
            role: Role::Operate,
            csrf: "0123abcd".into(),
            read_only: false,
            expires_at: 0,
        };
        assert!(csrf_ok(&session, "0123abcd"));
        assert!(!csrf_ok(&session, "0123abce"));
        assert!(!csrf_ok(&session, "0123abc"));
        assert!(!csrf_ok(&session, ""));
    }
}
