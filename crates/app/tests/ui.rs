//! The operator console's safety rules over plain HTTP against a running service: every page
//! redirects to the login without a session, the login sets an HttpOnly SameSite=Strict
//! cookie, every action needs the session's CSRF token, `ui_read_only` hides and refuses
//! actions, `ui = false` serves no console, and the bulk confirmation states the count. Runs on
//! SQLite, or on PostgreSQL with `TENANTRY_TEST_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Harness, TOKEN};
use serde_json::json;
use tenantry_fence::ScopeIdentity;
use tenantry_ports::host_storage::HostStorage;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
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
            http: {
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::builder()
            }
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

#[tokio::test]
async fn every_page_redirects_to_the_login_without_a_session() {
    let h = Harness::start().await;
    let console = Console::new(&h);
    for path in [
        "/ui",
        "/ui/commands?status=failed",
        "/ui/commands/some-command",
        "/ui/commands/bulk?action=retry&status=failed",
        "/ui/fences",
        "/ui/fences/clear?binding=b&key=ke.fence.v1.installation",
        "/ui/directory",
    ] {
        let answer = console.get(path).await;
        assert_eq!(answer.status, 303, "{path}: {}", answer.body);
        assert_eq!(answer.location.as_deref(), Some("/ui/login"), "{path}");
    }
    // A live refresh (htmx) is told where to go instead of getting the login page swapped in.
    let answer = console
        .send(
            console
                .http
                .get(format!("{}/ui", h.base))
                .header("hx-request", "true"),
        )
        .await;
    assert_eq!(answer.status, 401);
    assert_eq!(
        answer.headers.get("hx-redirect").unwrap().to_str().unwrap(),
        "/ui/login"
    );
    // Actions without a session are redirected too, and change nothing.
    let id = failed_command(&h, "cs-anon").await;
    let answer = console
        .post(
            &format!("/ui/commands/{id}/retry"),
            &[("csrf", "x"), ("reason", "r")],
        )
        .await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.location.as_deref(), Some("/ui/login"));
    // A forged cookie is no session.
    let mut forged = Console::new(&h);
    forged.cookie = Some("tenantry_console=0000".to_owned());
    assert_eq!(forged.get("/ui").await.status, 303);
    let (_, page) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(page["items"], json!([]), "{page}");
    // The login page and the embedded htmx are served without a session.
    assert_eq!(console.get("/ui/login").await.status, 200);
    let htmx = console.get("/ui/static/htmx.min.js").await;
    assert_eq!(htmx.status, 200);
    assert!(htmx.body.contains("htmx"), "the vendored htmx is served");
}

#[tokio::test]
async fn login_takes_the_admin_token_and_sets_a_strict_http_only_cookie() {
    let h = Harness::start().await;
    let mut console = Console::new(&h);
    let wrong = console.login("not-the-token").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.headers.get("set-cookie").is_none());
    assert!(wrong.body.contains("not the admin token"), "{}", wrong.body);
    let ok = console.login(TOKEN).await;
    assert_eq!(ok.status, 303);
    assert_eq!(ok.location.as_deref(), Some("/ui"));
    let cookie = ok.headers.get("set-cookie").unwrap().to_str().unwrap();
    assert!(cookie.starts_with("tenantry_console="), "{cookie}");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie.contains(attribute), "{cookie} lacks {attribute}");
    }
    for path in ["/ui", "/ui/commands", "/ui/fences", "/ui/directory"] {
        let page = console.get(path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(page.body.contains("htmx.min.js"), "{path}");
        assert!(page.body.contains("hx-trigger"), "{path} refreshes itself");
        assert!(
            page.body.contains("document.visibilityState"),
            "{path} pauses while hidden"
        );
        for (name, value) in [
            ("cache-control", "no-store"),
            ("x-frame-options", "DENY"),
            ("content-security-policy", "frame-ancestors 'none'"),
        ] {
            assert_eq!(
                page.headers.get(name).and_then(|v| v.to_str().ok()),
                Some(value),
                "{path}: {name}"
            );
        }
    }
    let overview = console.get("/ui").await;
    assert!(
        overview.body.contains("id=\"recent-owners\""),
        "the overview lists the lease owners seen recently: {}",
        overview.body
    );
    // Logging out needs the CSRF token and ends the session.
    let refused = console.post("/ui/logout", &[("csrf", "wrong")]).await;
    assert_eq!(refused.status, 403);
    assert_eq!(console.get("/ui").await.status, 200);
    let csrf = console.csrf().to_owned();
    let out = console.post("/ui/logout", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, 303);
    assert_eq!(console.get("/ui").await.status, 303);
}

#[tokio::test]
async fn malformed_forms_and_queries_get_a_console_page_and_change_nothing() {
    let h = Harness::start().await;
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    // A logout without a body (no content type): a 400 page, and the session stays.
    let bare = console
        .send(console.http.post(format!("{}/ui/logout", console.base)))
        .await;
    assert_eq!(bare.status, 400, "{}", bare.body);
    assert!(bare.body.contains("<html"), "an HTML page: {}", bare.body);
    assert!(bare.body.contains("Reload the page"), "{}", bare.body);
    assert_eq!(console.get("/ui").await.status, 200, "still logged in");
    // A form missing its fields, a query of the wrong shape: the same page, nothing done.
    let id = failed_command(&h, "cs-malformed").await;
    let csrf = console.csrf().to_owned();
    let json = console
        .send(
            console
                .http
                .post(format!("{}/ui/commands/{id}/retry", console.base))
                .header("content-type", "application/json")
                .body(format!("{{\"csrf\":\"{csrf}\",\"reason\":\"r\"}}")),
        )
        .await;
    assert_eq!(json.status, 400, "{}", json.body);
    assert!(json.body.contains("nothing was done"), "{}", json.body);
    let twice = console
        .get("/ui/commands?status=failed&status=pending")
        .await;
    assert_eq!(twice.status, 400, "{}", twice.body);
    assert!(twice.body.contains("<html"), "{}", twice.body);
    let bulk = console.get("/ui/commands/bulk?expected=many").await;
    assert_eq!(bulk.status, 400, "{}", bulk.body);
    assert!(bulk.body.contains("<html"), "{}", bulk.body);
    let detail = console.get(&format!("/ui/commands/{id}")).await;
    assert!(
        detail.body.contains("failed"),
        "still failed: {}",
        detail.body
    );
}

#[tokio::test]
async fn actions_need_the_csrf_token_and_are_recorded() {
    let h = Harness::start().await;
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    let id = failed_command(&h, "cs-csrf").await;
    let retry = format!("/ui/commands/{id}/retry");
    for fields in [
        vec![("reason", "remote fixed")],
        vec![("csrf", ""), ("reason", "remote fixed")],
        vec![("csrf", "0123"), ("reason", "remote fixed")],
    ] {
        let answer = console.post(&retry, &fields).await;
        assert_eq!(answer.status, 403, "{fields:?}: {}", answer.body);
    }
    let binding = tenantry_fence::Binding::parse("inst-1").unwrap();
    let scope = ScopeIdentity::object("kb-1");
    let storage = SeaOrmHostStorage::new(&h.db.db);
    storage
        .set(
            &binding,
            scope.fence_key().as_str(),
            &json!({"scope": "kb-1", "reason": "upload", "fenced_at_ms": 1_700_000_000_000i64, "kind": "fence"}),
        )
        .await
        .unwrap();
    let key = scope.fence_key().as_str().to_owned();
    let refused = console
        .post(
            "/ui/fences/clear",
            &[
                ("binding", "inst-1"),
                ("key", &key),
                ("reason", "reconciled"),
            ],
        )
        .await;
    assert_eq!(refused.status, 403);
    let refused = console
        .post(
            "/ui/commands/bulk",
            &[("action", "retry"), ("status", "failed"), ("reason", "r")],
        )
        .await;
    assert_eq!(refused.status, 403);
    // Nothing happened.
    let (_, page) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(page["items"], json!([]), "{page}");
    assert!(
        storage
            .get(&binding, &key)
            .await
            .unwrap()
            .is_some_and(|v| !v.is_null())
    );
    // With the token: the retry is recorded (actor console) and the command settles.
    let csrf = console.csrf().to_owned();
    let done = console
        .post(&retry, &[("csrf", &csrf), ("reason", "remote fixed")])
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let (_, page) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(page["items"][0]["actor"], "console", "{page}");
    assert_eq!(page["items"][0]["reason"], "remote fixed", "{page}");
    h.wait_state("t-1", "cs-csrf", "active", SETTLE).await;
    // Settled: the detail page offers no action and names the earlier attempt's error as such.
    let detail = console.get(&format!("/ui/commands/{id}")).await;
    assert!(!detail.body.contains("retry-button"), "{}", detail.body);
    assert!(
        detail.body.contains("id=\"not-actionable\""),
        "{}",
        detail.body
    );
    assert!(
        detail.body.contains("error of an earlier attempt"),
        "{}",
        detail.body
    );
    // The dead-lettered attempt stays in the detail's error table, with its time.
    let log = &detail.body[detail
        .body
        .find("id=\"errors-log\"")
        .expect("the errors table")..];
    assert!(
        log.contains("data-outcome=\"failed\"") && log.contains("INVALID_REQUEST"),
        "{log}"
    );
    // A reason is required to clear a fence; with one, the fence is cleared.
    let empty = console
        .post(
            "/ui/fences/clear",
            &[
                ("csrf", &csrf),
                ("binding", "inst-1"),
                ("key", &key),
                ("reason", " "),
            ],
        )
        .await;
    assert_eq!(empty.status, 400, "{}", empty.body);
    let cleared = console
        .post(
            "/ui/fences/clear",
            &[
                ("csrf", &csrf),
                ("binding", "inst-1"),
                ("key", &key),
                ("reason", "reconciled with the remote"),
            ],
        )
        .await;
    assert_eq!(cleared.status, 303, "{}", cleared.body);
    assert_eq!(
        storage.get(&binding, &key).await.unwrap(),
        Some(serde_json::Value::Null)
    );
}

#[tokio::test]
async fn bulk_confirmation_states_the_count_then_acts_on_every_match() {
    let h = Harness::start().await;
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    h.remote.script(
        Route::Provision,
        [Some(Fault::InvalidRequest), Some(Fault::InvalidRequest)],
    );
    for cs in ["cs-b1", "cs-b2"] {
        h.create("t-1", cs).await;
    }
    for cs in ["cs-b1", "cs-b2"] {
        h.wait_for(
            &format!("/v1/tenants/t-1/control-spaces/{cs}"),
            |b| b["lifecycle_status"] == "failed",
            SETTLE,
        )
        .await;
    }
    let list = console.get("/ui/commands?status=failed").await;
    assert!(list.body.contains("2 commands match"), "{}", list.body);
    // The confirmation names the count; it refuses a filter without an actionable status.
    let confirm = console
        .get("/ui/commands/bulk?action=abandon&status=failed&error_code=INVALID_REQUEST")
        .await;
    assert_eq!(confirm.status, 200, "{}", confirm.body);
    assert!(
        confirm
            .body
            .contains("<strong id=\"bulk-count\">2</strong>"),
        "{}",
        confirm.body
    );
    let refused = console.get("/ui/commands/bulk?action=abandon").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    // Nothing matching: no button to act on 0 commands.
    let nothing = console
        .get("/ui/commands/bulk?action=retry&status=failed&tenant_id=nobody")
        .await;
    assert!(
        nothing.body.contains("id=\"bulk-nothing\""),
        "{}",
        nothing.body
    );
    assert!(!nothing.body.contains("bulk-confirm"), "{}", nothing.body);
    let csrf = console.csrf().to_owned();
    let bulk = |expected: &'static str| {
        [
            ("csrf", csrf.clone()),
            ("action", "abandon".to_owned()),
            ("status", "failed".to_owned()),
            ("error_code", "INVALID_REQUEST".to_owned()),
            ("reason", "tenant gone".to_owned()),
            ("expected", expected.to_owned()),
        ]
    };
    // A confirmation that stated another count than what matches now does nothing: the page
    // comes back with the new count (a third command failing meanwhile, or a re-sent POST).
    let stale = bulk("1");
    let stale: Vec<(&str, &str)> = stale.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let again = console.post("/ui/commands/bulk", &stale).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("id=\"bulk-changed\""), "{}", again.body);
    assert!(
        again.body.contains("<strong id=\"bulk-count\">2</strong>"),
        "{}",
        again.body
    );
    let (_, page) = h.get("/v1/commands?status=abandoned").await;
    assert_eq!(page["items"], json!([]), "nothing done: {page}");
    // Without the stated count the action is refused.
    let missing: Vec<(&str, &str)> = stale
        .iter()
        .copied()
        .filter(|(k, _)| *k != "expected")
        .collect();
    assert_eq!(
        console.post("/ui/commands/bulk", &missing).await.status,
        400
    );
    let fields = bulk("2");
    let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let done = console.post("/ui/commands/bulk", &fields).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body.contains("<strong>2</strong> commands acted on"),
        "{}",
        done.body
    );
    let (_, page) = h.get("/v1/commands?status=abandoned").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2, "{page}");
}

#[tokio::test]
async fn read_only_console_hides_and_refuses_actions() {
    let h = Harness::start_with(Default::default(), |c| c.ui_read_only = true).await;
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    let id = failed_command(&h, "cs-ro").await;
    let detail = console.get(&format!("/ui/commands/{id}")).await;
    assert_eq!(detail.status, 200);
    assert!(!detail.body.contains("retry-button"), "{}", detail.body);
    let list = console.get("/ui/commands?status=failed").await;
    assert!(!list.body.contains("bulk-retry"), "{}", list.body);
    let csrf = console.csrf().to_owned();
    let answer = console
        .post(
            &format!("/ui/commands/{id}/retry"),
            &[("csrf", &csrf), ("reason", "r")],
        )
        .await;
    assert_eq!(answer.status, 403, "{}", answer.body);
    assert!(answer.body.contains("read-only"), "{}", answer.body);
    assert_eq!(
        console
            .get("/ui/commands/bulk?action=retry&status=failed")
            .await
            .status,
        403
    );
    let (_, page) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(page["items"], json!([]), "{page}");
}

#[tokio::test]
async fn ui_false_serves_no_console() {
    let h = Harness::start_with(Default::default(), |c| c.ui = false).await;
    let console = Console::new(&h);
    assert_eq!(console.get("/ui").await.status, 404);
    assert_eq!(console.get("/ui/login").await.status, 404);
    // The admin API is unchanged.
    assert_eq!(h.get("/v1/commands").await.0, 200);
}

/// `/metrics` and the console read one shared snapshot: a burst of scrapes and page loads
/// costs at most two reads of the counts (one, plus one if the burst crosses a second).
#[tokio::test]
async fn metrics_and_console_share_one_read_of_the_counts_a_second() {
    let h = Harness::start().await;
    let counts = h.service.as_ref().unwrap().counts().clone();
    let before = counts.refreshes();
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    for _ in 0..5 {
        assert!(h.metrics().await.contains("tenantry_fences_active"));
        assert_eq!(console.get("/ui").await.status, 200);
        assert_eq!(console.get("/ui/directory").await.status, 200);
    }
    let reads = counts.refreshes() - before;
    assert!((1..=2).contains(&reads), "{reads} reads for 16 viewers");
}
