//! The operator console's safety rules over plain HTTP against a running service: every page
//! redirects to the login without a session, the login sets an HttpOnly SameSite=Strict
//! cookie, every action needs the session's CSRF token, `ui_read_only` hides and refuses
//! actions (and every page says so), `ui = false` serves no console, the bulk confirmation names
//! the commands it acts on, the table pages both ways, static files are cached. Runs on
//! SQLite, or on PostgreSQL with `TENANTRY_TEST_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod access;
mod actions;
mod pages;
mod remote_errors;

use std::time::Duration;

use common::Harness;
use tenantry_remote_http::RemoteTls;
use tenantry_testkit::fault::{Fault, Route};

const SETTLE: Duration = Duration::from_secs(20);

/// Percent-encodes a form value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn form(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// A console client that follows no redirect (so the tests see them).
struct Console {
    http: reqwest::Client,
    base: String,
    cookie: Option<String>,
    csrf: Option<String>,
}

struct Answer {
    status: u16,
    location: Option<String>,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Console {
    fn new(h: &Harness) -> Self {
        Self {
            http: tenantry_remote_http::client::client_builder(&RemoteTls::default())
                .unwrap()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: h.base.clone(),
            cookie: None,
            csrf: None,
        }
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let request = match &self.cookie {
            Some(cookie) => request.header("cookie", cookie),
            None => request,
        };
        let response = request.send().await.unwrap();
        let headers = response.headers().clone();
        Answer {
            status: response.status().as_u16(),
            location: headers
                .get("location")
                .map(|v| v.to_str().unwrap().to_owned()),
            body: response.text().await.unwrap(),
            headers,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Answer {
        self.send(
            self.http
                .post(format!("{}{path}", self.base))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(form(fields)),
        )
        .await
    }

    /// Logs in with `token`; keeps the cookie and the page's CSRF token.
    async fn login(&mut self, token: &str) -> Answer {
        let answer = self.post("/ui/login", &[("token", token)]).await;
        if let Some(set) = answer.headers.get("set-cookie") {
            let pair = set.to_str().unwrap().split(';').next().unwrap().to_owned();
            self.cookie = Some(pair);
            let page = self.get("/ui").await;
            assert_eq!(page.status, 200, "{}", page.body);
            self.csrf = Some(csrf_of(&page.body));
        }
        answer
    }

    fn csrf(&self) -> &str {
        self.csrf.as_deref().unwrap()
    }
}

/// The CSRF token in a page's forms.
fn csrf_of(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with the CSRF token")
        + 19;
    page[at..].split('"').next().unwrap().to_owned()
}

/// A failed provision command (the remote refuses it once with 400 INVALID_REQUEST).
async fn failed_command(h: &Harness, cs: &str) -> String {
    h.remote
        .script(Route::Provision, [Some(Fault::InvalidRequest)]);
    let created = h.create("t-1", cs).await;
    let id = created["command_id"].as_str().unwrap().to_owned();
    h.wait_for(
        &format!("/v1/tenants/t-1/control-spaces/{cs}"),
        |b| b["lifecycle_status"] == "failed",
        SETTLE,
    )
    .await;
    id
}
