//! Named operators end to end (docs/operations.md, "Operators and roles"): a `read` operator
//! reads everything and changes nothing through the admin API (403 `FORBIDDEN_ROLE`) or the
//! console (no action shown, a forged action refused); every action records the token's
//! operator as its actor; console sessions are signed cookies that another replica with the
//! same key accepts; failed sign-ins are throttled. Runs on SQLite, or on PostgreSQL with
//! `TENANTRY_TEST_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::console::Console;
use common::{Harness, TOKEN};
use serde_json::{Value, json};
use tenantry_app::service::Service;
use tenantry_operator::identity::{Operator, Role, Secret};

const SETTLE: Duration = Duration::from_secs(20);
const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef";
const KEY: &str = "ui-session-key-0123456789abcdef0123456789";

fn with_operators(config: &mut tenantry_app::config::Config) {
    config.operators = vec![
        Operator {
            name: "alice".into(),
            role: Role::Operate,
            token: Secret::new(ALICE),
        },
        Operator {
            name: "bob".into(),
            role: Role::Read,
            token: Secret::new(BOB),
        },
    ];
    config.ui_session_key = Some(Secret::new(KEY));
}

/// `method path` with `token` and an optional JSON body.
async fn call(
    h: &Harness,
    token: &str,
    method: reqwest::Method,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut request = h.http.request(method, h.url(path)).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_read_operator_reads_everything_and_changes_nothing_through_the_api() {
    use reqwest::Method;
    let h = Harness::start_with(Default::default(), with_operators).await;
    let id = h.failed_command("cs-read").await;
    // Reads: every GET.
    for path in [
        "/v1/commands?status=failed",
        "/v1/fences",
        "/v1/tenants/t-1/control-spaces/cs-read",
        &format!("/v1/commands/{id}"),
        &format!("/v1/commands/{id}/actions"),
    ] {
        let (status, body) = call(&h, BOB, Method::GET, path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    // Mutations: 403 FORBIDDEN_ROLE with {code, message}, nothing written.
    let who = json!({"reason": "x"});
    let mutations: [(Method, String, Option<Value>); 6] = [
        (
            Method::POST,
            format!("/v1/commands/{id}/retry"),
            Some(who.clone()),
        ),
        (
            Method::POST,
            "/v1/commands/abandon".into(),
            Some(json!({"reason": "x", "status": "failed"})),
        ),
        (
            Method::POST,
            "/v1/fences/clear".into(),
            Some(json!({"binding": "b", "scope": "s", "reason": "x"})),
        ),
        (
            Method::POST,
            "/v1/tenants/t-1/control-spaces".into(),
            Some(json!({"control_space_id": "cs-new", "name": "N", "slug": "n"})),
        ),
        (
            Method::DELETE,
            "/v1/tenants/t-1/control-spaces/cs-read".into(),
            None,
        ),
        (
            Method::POST,
            format!("/v1/commands/{id}/mark-deleted"),
            Some(who.clone()),
        ),
    ];
    for (method, path, body) in mutations {
        let (status, answer) = call(&h, BOB, method.clone(), &path, body.as_ref()).await;
        assert_eq!(status, 403, "{method} {path}: {answer}");
        assert_eq!(answer["code"], "FORBIDDEN_ROLE", "{answer}");
        assert!(
            answer["message"].as_str().unwrap().contains("bob"),
            "{answer}"
        );
    }
    let (_, actions) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(actions["items"], json!([]), "{actions}");
    let (status, _) = h.get("/v1/tenants/t-1/control-spaces/cs-new").await;
    assert_eq!(status, 404, "no control space was created");
    // A wrong token is still 401.
    let (status, _) = call(
        &h,
        "nobody-0123456789abcdef",
        Method::GET,
        "/v1/fences",
        None,
    )
    .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn the_api_records_the_tokens_operator_as_the_actor() {
    use reqwest::Method;
    let h = Harness::start_with(Default::default(), with_operators).await;
    let id = h.failed_command("cs-actor").await;
    let retry = format!("/v1/commands/{id}/retry");
    // Another name in the body is refused, and nothing is recorded.
    let (status, body) = call(
        &h,
        ALICE,
        Method::POST,
        &retry,
        Some(&json!({"actor": "bob", "reason": "x"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "ACTOR_MISMATCH");
    let (status, body) = call(
        &h,
        ALICE,
        Method::POST,
        &retry,
        Some(&json!({"reason": "remote fixed"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, actions) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(actions["items"].as_array().unwrap().len(), 1, "{actions}");
    assert_eq!(actions["items"][0]["actor"], "alice", "{actions}");
    // The single admin_token is operator `admin`; its own name in the body is accepted.
    h.wait_state("t-1", "cs-actor", "active", SETTLE).await;
    let id = h.failed_command("cs-admin").await;
    let (status, body) = call(
        &h,
        TOKEN,
        Method::POST,
        &format!("/v1/commands/{id}/abandon"),
        Some(&json!({"actor": "admin", "reason": "gone"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (_, actions) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(actions["items"][0]["actor"], "admin", "{actions}");
}

#[tokio::test]
async fn a_read_operators_console_shows_no_action_and_refuses_a_forged_one() {
    let h = Harness::start_with(Default::default(), with_operators).await;
    let id = h.failed_command("cs-ui-read").await;
    let mut bob = Console::new(&h.base);
    assert_eq!(bob.login(BOB).await.status, 303);
    let detail = bob.get(&format!("/ui/commands/{id}")).await;
    assert_eq!(detail.status, 200, "{}", detail.body);
    assert!(!detail.body.contains("retry-button"), "{}", detail.body);
    assert!(detail.body.contains("id=\"read-only\""), "{}", detail.body);
    assert!(detail.body.contains("bob (read)"), "{}", detail.body);
    let list = bob.get("/ui/commands?status=failed").await;
    assert!(!list.body.contains("bulk-retry"), "{}", list.body);
    // A forged POST with the session's own CSRF token is refused; nothing is recorded.
    let csrf = bob.csrf().to_owned();
    let forged = bob
        .post(
            &format!("/ui/commands/{id}/retry"),
            &[("csrf", &csrf), ("reason", "r")],
        )
        .await;
    assert_eq!(forged.status, 403, "{}", forged.body);
    let (_, actions) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(actions["items"], json!([]), "{actions}");
    // Alice's console acts, recorded under her name.
    let mut alice = Console::new(&h.base);
    assert_eq!(alice.login(ALICE).await.status, 303);
    let detail = alice.get(&format!("/ui/commands/{id}")).await;
    assert!(detail.body.contains("retry-button"), "{}", detail.body);
    let csrf = alice.csrf().to_owned();
    let done = alice
        .post(
            &format!("/ui/commands/{id}/retry"),
            &[("csrf", &csrf), ("reason", "fixed")],
        )
        .await;
    assert_eq!(done.status, 303, "{}", done.body);
    let (_, actions) = h.get(&format!("/v1/commands/{id}/actions")).await;
    assert_eq!(actions["items"][0]["actor"], "alice", "{actions}");
}

/// Replica A signs a session; replica B (same database, same `ui_session_key`) accepts it,
/// replica C with another key does not.
#[tokio::test]
async fn a_session_from_replica_a_is_accepted_by_replica_b_with_the_same_key() {
    let h = Harness::start_with(Default::default(), with_operators).await;
    let mut a = Console::new(&h.base);
    assert_eq!(a.login(ALICE).await.status, 303);
    assert_eq!(a.get("/ui").await.status, 200);
    let b_service = Service::start(&h.config, h.db.db.clone()).await.unwrap();
    let mut other_key = h.config.clone();
    other_key.ui_session_key = Some(Secret::new(format!("{KEY}-other")));
    let c_service = Service::start(&other_key, h.db.db.clone()).await.unwrap();
    let mut b = Console::new(&format!("http://{}", b_service.addr()));
    b.cookie = a.cookie.clone();
    let page = b.get("/ui").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("alice (operate)"), "{}", page.body);
    let mut c = Console::new(&format!("http://{}", c_service.addr()));
    c.cookie = a.cookie.clone();
    let refused = c.get("/ui").await;
    assert_eq!(
        refused.status, 303,
        "signed by another key: {}",
        refused.body
    );
    b_service.shutdown().await;
    c_service.shutdown().await;
}

#[tokio::test]
async fn repeated_failed_sign_ins_are_answered_429_with_retry_after() {
    let h = Harness::start_with(Default::default(), with_operators).await;
    let mut console = Console::new(&h.base);
    for _ in 0..5 {
        assert_eq!(console.login("wrong-token-0123456789").await.status, 401);
    }
    let throttled = console.login("wrong-token-0123456789").await;
    assert_eq!(throttled.status, 429, "{}", throttled.body);
    let retry_after: u64 = throttled.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=300).contains(&retry_after), "{retry_after}");
    // Even the right token waits (its check would tell a guesser it was right).
    let right = console.login(ALICE).await;
    assert_eq!(right.status, 429);
    assert!(right.headers.get("set-cookie").is_none());
}
