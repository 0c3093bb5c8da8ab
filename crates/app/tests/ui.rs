//! The operator console's safety rules over plain HTTP against a running service: every page
//! redirects to the login without a session, the login sets an HttpOnly SameSite=Strict
//! cookie, every action needs the session's CSRF token, `ui_read_only` hides and refuses
//! actions (and every page says so), `ui = false` serves no console, the bulk confirmation names
//! the commands it acts on, the table pages both ways, static files are cached. Runs on
//! SQLite, or on PostgreSQL with `TENANTRY_TEST_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Harness, TOKEN};
use serde_json::json;
use tenantry_fence::ScopeIdentity;
use tenantry_ports::host_storage::HostStorage;
use tenantry_remote_http::RemoteTls;
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
        !overview.body.contains("id=\"read-only\""),
        "not read-only: {}",
        overview.body
    );
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
    let bulk = console.get("/ui/commands/bulk?limit=many").await;
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
    // With the token: the retry is recorded (actor: the token's operator, admin) and the command settles.
    let csrf = console.csrf().to_owned();
    let done = console
        .post(&retry, &[("csrf", &csrf), ("reason", "remote fixed")])
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let (_, page) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(page["items"][0]["actor"], "admin", "{page}");
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

/// The ids a bulk confirmation names (its hidden `command_ids` field).
fn confirmed_ids(page: &str) -> String {
    let at = page
        .find("name=\"command_ids\" value=\"")
        .expect("the confirmed ids")
        + 26;
    page[at..].split('"').next().unwrap().to_owned()
}

/// Issue 27: the bulk confirmation names the commands it will touch (their ids, listed and
/// carried in the form), and the action touches only those: a command that fails after the
/// confirmation is left alone, one retried meanwhile is skipped and listed.
#[tokio::test]
async fn bulk_confirmation_names_the_commands_and_the_action_touches_only_them() {
    let h = Harness::start().await;
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    let first = failed_command(&h, "cs-b1").await;
    let second = failed_command(&h, "cs-b2").await;
    let list = console.get("/ui/commands?status=failed").await;
    assert!(list.body.contains("2 commands match"), "{}", list.body);
    // The confirmation names both ids; it refuses a filter without an actionable status.
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
    assert_eq!(confirmed_ids(&confirm.body), format!("{first} {second}"));
    for id in [&first, &second] {
        assert!(
            confirm.body.contains(&format!("data-id=\"{id}\"")),
            "listed: {}",
            confirm.body
        );
    }
    // "The N oldest": limit=1 names the first only, and says how many match in all.
    let oldest = console
        .get("/ui/commands/bulk?action=abandon&status=failed&limit=1")
        .await;
    assert_eq!(confirmed_ids(&oldest.body), first);
    assert!(oldest.body.contains("oldest of 2"), "{}", oldest.body);
    assert_eq!(
        console
            .get("/ui/commands/bulk?action=abandon&status=failed&limit=0")
            .await
            .status,
        400
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
    // After the confirmation: a third command fails, the second is retried elsewhere.
    let third = failed_command(&h, "cs-b3").await;
    let (status, body) = h
        .post(
            &format!("/v1/commands/{second}/retry"),
            &json!({"reason": "meanwhile"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let csrf = console.csrf().to_owned();
    let ids = confirmed_ids(&confirm.body);
    let fields = |ids: &str| {
        vec![
            ("csrf", csrf.clone()),
            ("action", "abandon".to_owned()),
            ("status", "failed".to_owned()),
            ("error_code", "INVALID_REQUEST".to_owned()),
            ("reason", "tenant gone".to_owned()),
            ("command_ids", ids.to_owned()),
        ]
    };
    // Without the named ids the action is refused, nothing done.
    let none = fields("");
    let none: Vec<(&str, &str)> = none.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(console.post("/ui/commands/bulk", &none).await.status, 400);
    let (_, page) = h.get("/v1/commands?status=abandoned").await;
    assert_eq!(page["items"], json!([]), "nothing done: {page}");
    let named = fields(&ids);
    let named: Vec<(&str, &str)> = named.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let done = console.post("/ui/commands/bulk", &named).await;
    assert_eq!(done.status, 200, "{}", done.body);
    assert!(
        done.body
            .contains("<strong>1</strong> commands acted on, 0 refused, 1 skipped"),
        "{}",
        done.body
    );
    let skipped = &done.body[done.body.find("id=\"bulk-skipped\"").unwrap()..];
    assert!(skipped.contains(&second), "{skipped}");
    let (_, page) = h.get("/v1/commands?status=abandoned").await;
    let abandoned: Vec<_> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(abandoned, vec![first], "{page}");
    let (_, c) = h.get(&format!("/v1/commands/{third}")).await;
    assert_eq!(c["status"], "failed", "not named, not touched: {c}");
}

/// Issue 27: the commands table pages backwards as well as forwards, and shows its times as
/// `<time>` elements (UTC in the text and the title; the script localizes the text).
#[tokio::test]
async fn commands_table_pages_both_ways_and_marks_up_its_times() {
    let h = Harness::start().await;
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    let total = tenantry_app::ui::pages::commands::PAGE as usize + 3;
    for i in 0..total {
        h.create("t-1", &format!("cs-p{i:03}")).await;
    }
    let rows = |body: &str| {
        body.match_indices("<tr class=\"command\"")
            .map(|(at, _)| {
                let href = body[at..].find("href=\"/ui/commands/").unwrap() + at + 19;
                body[href..].split('"').next().unwrap().to_owned()
            })
            .collect::<Vec<_>>()
    };
    let link = |body: &str, id: &str| {
        let at = body.find(&format!("id=\"{id}\" href=\""))? + id.len() + 12;
        Some(body[at..].split('"').next().unwrap().replace("&amp;", "&"))
    };
    let first = console.get("/ui/commands").await;
    assert_eq!(first.status, 200, "{}", first.body);
    let first_rows = rows(&first.body);
    assert_eq!(first_rows.len(), total - 3);
    assert!(
        link(&first.body, "prev-page").is_none(),
        "the first page has no previous"
    );
    let second = console.get(&link(&first.body, "next-page").unwrap()).await;
    assert_eq!(rows(&second.body).len(), 3, "{}", second.body);
    assert!(link(&second.body, "next-page").is_none(), "{}", second.body);
    let back = console.get(&link(&second.body, "prev-page").unwrap()).await;
    assert_eq!(back.status, 200, "{}", back.body);
    assert_eq!(rows(&back.body), first_rows, "back to the first page");
    assert!(link(&back.body, "prev-page").is_none(), "{}", back.body);
    assert!(link(&back.body, "next-page").is_some(), "{}", back.body);
    // An unknown backwards cursor is a clear 400.
    let unknown = console.get("/ui/commands?before=no-such-command").await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    // Times: machine-readable UTC, with UTC on hover.
    let at = first
        .body
        .find("<time datetime=\"")
        .expect("a <time> element");
    let time = &first.body[at..first.body[at..].find("</time>").unwrap() + at];
    assert!(
        time.contains("Z\" title=\"") && time.ends_with(" UTC"),
        "{time}"
    );
    assert!(
        first.body.contains("/console.js\""),
        "the local-time script is linked"
    );
}

/// Issue 27: static files are linked by fingerprinted URLs cached as immutable for a year
/// (with an ETag); the plain URLs revalidate (`no-cache` + ETag, 304 when unchanged); pages
/// stay `no-store`.
#[tokio::test]
async fn static_assets_are_fingerprinted_and_cached_as_immutable() {
    let h = Harness::start().await;
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    let page = console.get("/ui").await;
    assert_eq!(
        page.headers.get("cache-control").unwrap().to_str().unwrap(),
        "no-store"
    );
    for name in ["console.css", "htmx.min.js", "console.js"] {
        let at = page
            .body
            .find(&format!("/{name}\""))
            .unwrap_or_else(|| panic!("{name} linked: {}", page.body));
        let start = page.body[..at].rfind('"').unwrap() + 1;
        let url = &page.body[start..at + name.len() + 1];
        assert!(url.starts_with("/ui/static/") && url.len() > 30, "{url}");
        let asset = console.get(url).await;
        assert_eq!(asset.status, 200, "{url}");
        assert_eq!(
            asset
                .headers
                .get("cache-control")
                .unwrap()
                .to_str()
                .unwrap(),
            "public, max-age=31536000, immutable",
            "{url}"
        );
        let etag = asset
            .headers
            .get("etag")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let again = console
            .send(
                console
                    .http
                    .get(format!("{}{url}", console.base))
                    .header("if-none-match", &etag),
            )
            .await;
        assert_eq!(again.status, 304, "{url}");
        assert!(again.body.is_empty());
        let plain = console.get(&format!("/ui/static/{name}")).await;
        assert_eq!(plain.status, 200, "{name}");
        assert_eq!(
            plain
                .headers
                .get("cache-control")
                .unwrap()
                .to_str()
                .unwrap(),
            "no-cache"
        );
        assert_eq!(plain.headers.get("etag").unwrap().to_str().unwrap(), etag);
        assert_eq!(plain.body, asset.body);
    }
    let stale = console.get("/ui/static/0000000000000000/console.css").await;
    assert_eq!(stale.status, 404);
    assert_eq!(console.get("/ui/static/nothing.js").await.status, 404);
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
    // Every page says the console is read-only.
    assert!(list.body.contains("id=\"read-only\""), "{}", list.body);
    assert!(detail.body.contains("id=\"read-only\""), "{}", detail.body);
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

/// A KnowledgeFS stand-in that answers every request `400` with the next body of `bodies`
/// (the last one again once they run out); returns its base URL.
async fn hostile_remote(bodies: Vec<String>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut next = 0;
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = bodies[next.min(bodies.len() - 1)].clone();
            next += 1;
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                    if n == 0 {
                        break;
                    }
                }
                let answer = format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                socket.write_all(answer.as_bytes()).await.ok();
                socket.shutdown().await.ok();
            });
        }
    });
    url
}

/// Case 010: a KnowledgeFS that answers a 200 KB code, then 50 distinct codes, each message
/// holding `ESC [2J` (the first one 700 KB of it): what is stored is bounded, the metric
/// labels stay a closed set, and the console shows no control character and no 200 KB word.
#[tokio::test]
async fn case_010_remote_error_strings_are_bounded_data() {
    use tenantry_kernel::text::MAX_MESSAGE_BYTES;
    let mut bodies = vec![
        json!({
            "code": "c".repeat(200 * 1024),
            "message": format!("\u{1b}[2J{}", "m".repeat(700 * 1024)),
        })
        .to_string(),
    ];
    for i in 0..50 {
        bodies.push(
            json!({"code": format!("HOSTILE_CODE_{i}"), "message": format!("\u{1b}[2Jcode {i}")})
                .to_string(),
        );
    }
    let remote = hostile_remote(bodies).await;
    let h = Harness::start_with(Default::default(), |config| {
        config.knowledge_fs_url = Some(remote);
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..51 {
        let cs = format!("cs-{i}");
        let created = h.create("t-1", &cs).await;
        ids.push(created["command_id"].as_str().unwrap().to_owned());
        // One at a time, so the first command gets the first (200 KB) answer.
        h.wait_for(
            &format!("/v1/tenants/t-1/control-spaces/{cs}"),
            |b| b["lifecycle_status"] == "failed",
            SETTLE,
        )
        .await;
    }
    // Stored: the fixed code, the original quoted and bounded, no control character.
    let (status, first) = h.get(&format!("/v1/commands/{}", ids[0])).await;
    assert_eq!(status, 200);
    assert_eq!(
        first["last_error"]["code"], "REMOTE_ERROR_CODE_INVALID",
        "{first}"
    );
    let message = first["last_error"]["message"].as_str().unwrap();
    assert!(
        message.len() <= MAX_MESSAGE_BYTES,
        "{} bytes",
        message.len()
    );
    assert!(message.starts_with("remote error code \"cccc"), "{message}");
    assert!(!message.contains('\u{1b}'));
    for error in first["errors"].as_array().unwrap() {
        assert!(error["message"].as_str().unwrap().len() <= MAX_MESSAGE_BYTES);
    }
    let records = h.commands().await;
    let stored: usize = records
        .iter()
        .map(|c| {
            c.last_error_message.as_deref().map_or(0, str::len)
                + c.last_error_code.as_ref().map_or(0, |c| c.as_str().len())
        })
        .sum();
    assert!(
        stored < 51 * (MAX_MESSAGE_BYTES + 64),
        "{stored} bytes stored"
    );
    let (_, last) = h.get(&format!("/v1/commands/{}", ids[50])).await;
    assert_eq!(last["last_error"]["code"], "HOSTILE_CODE_49", "{last}");
    assert_eq!(last["last_error"]["message"], "[2Jcode 49");
    // Metrics: no remote code became a label value.
    let metrics = h.metrics().await;
    assert!(
        !metrics.contains("HOSTILE_CODE_"),
        "a remote code became a label"
    );
    assert!(
        metrics.lines().all(|l| l.len() < 1024),
        "a long label was rendered"
    );
    assert!(
        metrics.contains("code=\"REMOTE_ERROR_CODE_INVALID\"")
            && metrics.contains("code=\"OTHER\""),
        "{metrics}"
    );
    // The console: no control character, no 200 KB word, on the overview and the detail.
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    for path in [
        "/ui".to_owned(),
        format!("/ui/commands/{}", ids[0]),
        "/ui/commands?status=failed".to_owned(),
    ] {
        let page = console.get(&path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(!page.body.contains('\u{1b}'), "{path} shows an escape");
        assert!(
            page.body.len() < 256 * 1024,
            "{path}: {} bytes",
            page.body.len()
        );
        let longest_word = page
            .body
            .split_whitespace()
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest_word < 4096, "{path}: a {longest_word}-byte word");
    }
}

/// Case 010, at display: a row written before the bounds (a 200 KB code with escape
/// sequences, a message holding `ESC [2J`) is shown bounded and without control characters.
#[tokio::test]
async fn case_010_the_console_bounds_text_of_old_rows_too() {
    use tenantry_kernel::LeaseOwner;
    use tenantry_lifecycle::{ErrorCode, ErrorRecord, Settlement};
    use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

    // Provisions are not dispatched, so this test claims the command itself.
    let h = Harness::start_with(Default::default(), |config| config.product_enabled = false).await;
    let created = h.create("t-1", "cs-old").await;
    let id = created["command_id"].as_str().unwrap().to_owned();
    let store = SeaOrmLifecycleStore::new(&h.db.db);
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("old-version").unwrap(),
            lease_duration: Duration::from_secs(60),
            include_provision: true,
            limit: 1,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    assert_eq!(claimed[0].id().as_str(), id);
    // Built field by field: what an older version stored, without today's bounds.
    let old_row = ErrorRecord {
        code: ErrorCode::from(format!("\u{1b}[2J{}", "X".repeat(200 * 1024))),
        message: format!("\u{1b}]0;pwned\u{7}{}", "m".repeat(700 * 1024)),
    };
    store
        .settle(
            &claimed[0].lease,
            &Settlement::fail(chrono::Utc::now(), old_row),
        )
        .await
        .unwrap();
    let mut console = Console::new(&h);
    console.login(TOKEN).await;
    for path in [
        "/ui".to_owned(),
        format!("/ui/commands/{id}"),
        "/ui/commands?status=failed".to_owned(),
    ] {
        let page = console.get(&path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            !page
                .body
                .chars()
                .any(|c| c.is_control() && !c.is_whitespace()),
            "{path} shows a control character"
        );
        let longest_word = page
            .body
            .split_whitespace()
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest_word < 4096, "{path}: a {longest_word}-byte word");
    }
}
