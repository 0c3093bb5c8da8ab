//! Sessions: every page redirects to the login without one, the login sets an HttpOnly
//! SameSite=Strict cookie, malformed forms change nothing, `ui_read_only` hides and refuses
//! actions, `ui = false` serves no console.

use serde_json::json;

use crate::common::console::Console;
use crate::common::{Harness, TOKEN};

#[tokio::test]
async fn every_page_redirects_to_the_login_without_a_session() {
    let h = Harness::start().await;
    let console = Console::new(&h.base);
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
    let id = h.failed_command("cs-anon").await;
    let answer = console
        .post(
            &format!("/ui/commands/{id}/retry"),
            &[("csrf", "x"), ("reason", "r")],
        )
        .await;
    assert_eq!(answer.status, 303);
    assert_eq!(answer.location.as_deref(), Some("/ui/login"));
    // A forged cookie is no session.
    let mut forged = Console::new(&h.base);
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
    let mut console = Console::new(&h.base);
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
    let mut console = Console::new(&h.base);
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
    let id = h.failed_command("cs-malformed").await;
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
async fn read_only_console_hides_and_refuses_actions() {
    let h = Harness::start_with(Default::default(), |c| c.ui_read_only = true).await;
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    let id = h.failed_command("cs-ro").await;
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
    let console = Console::new(&h.base);
    assert_eq!(console.get("/ui").await.status, 404);
    assert_eq!(console.get("/ui/login").await.status, 404);
    // The admin API is unchanged.
    assert_eq!(h.get("/v1/commands").await.0, 200);
}
