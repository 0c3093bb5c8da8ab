//! The admin API over HTTP: happy paths, and each route's bad-input cases (4xx with
//! `{code, message}` and nothing written).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use common::{Harness, TOKEN, assert_error};
use serde_json::{Value, json};
use tenantry_app::admin::{OPENAPI, PATHS};
use tenantry_fence::{Binding, FenceMarker, ScopeIdentity};
use tenantry_ports::host_storage::HostStorage;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;

const SETTLE: Duration = Duration::from_secs(20);

#[tokio::test]
async fn create_control_space_is_accepted_and_settles_active() {
    let h = Harness::start().await;
    let body = h.create("t-1", "cs-1").await;
    assert_eq!(body["control_space_id"], "cs-1");
    assert_eq!(body["operation"], "provision");
    assert_eq!(body["replayed"], false);
    assert!(body["operation_id"].as_str().is_some());
    let cs = h.wait_state("t-1", "cs-1", "active", SETTLE).await;
    assert!(cs["knowledge_space_id"].as_str().is_some(), "{cs}");
    assert_eq!(cs["open_commands"], json!([]));
    assert_eq!(h.remote.truth().effects().spaces_created, 1);
}

#[tokio::test]
async fn idempotency_key_replay_returns_the_original_operation() {
    let h = Harness::start().await;
    let path = "/v1/tenants/t-1/control-spaces";
    let body = json!({"name": "N", "slug": "n"});
    let (s1, first) = h.post(path, &body, Some("key-1")).await;
    let (s2, again) = h.post(path, &body, Some("key-1")).await;
    assert_eq!((s1, s2), (202, 202));
    assert_eq!(first["operation_id"], again["operation_id"]);
    assert_eq!(first["control_space_id"], again["control_space_id"]);
    assert!(
        first["control_space_id"]
            .as_str()
            .unwrap()
            .starts_with("cs-")
    );
    assert_eq!(again["replayed"], true);
    assert_eq!(h.commands().await.len(), 1);
    // The same key with another request is refused.
    let (s3, other) = h
        .post(path, &json!({"name": "Other", "slug": "o"}), Some("key-1"))
        .await;
    assert_error(s3, &other, 422, "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(h.commands().await.len(), 1);
}

#[tokio::test]
async fn create_control_space_bad_input_is_refused_and_writes_nothing() {
    let h = Harness::start().await;
    let path = "/v1/tenants/t-1/control-spaces";
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"slug": "s"}), 400, "INVALID_JSON"),
        (
            json!({"name": "n", "slug": "s", "colour": "red"}),
            400,
            "INVALID_JSON",
        ),
        (json!({"name": "", "slug": "s"}), 400, "INVALID_ARGUMENT"),
        (
            json!({"name": "x".repeat(300), "slug": "s"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"name": "n", "slug": "s", "control_space_id": "has space"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"name": "n", "slug": "s", "control_space_id": ""}),
            400,
            "INVALID_ARGUMENT",
        ),
        (json!([1, 2]), 400, "INVALID_JSON"),
    ];
    for (body, status, code) in cases {
        let (got, answer) = h.post(path, &body, None).await;
        assert_error(got, &answer, status, code);
    }
    // Not JSON at all, wrong content type, too large, bad path, bad key.
    let raw = h
        .http
        .post(h.url(path))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 400);
    let form = h
        .http
        .post(h.url(path))
        .bearer_auth(TOKEN)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 415);
    let big = json!({"name": "n", "slug": "s", "description": "d".repeat(70 * 1024)});
    let (status, answer) = h.post(path, &big, None).await;
    assert_error(status, &answer, 413, "PAYLOAD_TOO_LARGE");
    let (status, answer) = h
        .post(
            "/v1/tenants/bad%20tenant/control-spaces",
            &json!({"name": "n", "slug": "s"}),
            None,
        )
        .await;
    assert_error(status, &answer, 400, "INVALID_ARGUMENT");
    assert!(answer["message"].as_str().unwrap().contains("tenant_id"));
    let (status, answer) = h
        .post(
            path,
            &json!({"name": "n", "slug": "s"}),
            Some(&"k".repeat(300)),
        )
        .await;
    assert_error(status, &answer, 400, "INVALID_IDEMPOTENCY_KEY");
    assert!(h.commands().await.is_empty(), "bad input wrote a command");

    // A duplicate control space id is a conflict and writes nothing more.
    h.create("t-1", "cs-dup").await;
    let (status, answer) = h
        .post(
            path,
            &json!({"control_space_id": "cs-dup", "name": "n", "slug": "s"}),
            Some("another-key"),
        )
        .await;
    assert_error(status, &answer, 409, "CONTROL_SPACE_EXISTS");
    assert_eq!(h.commands().await.len(), 1);
}

/// Sends `request` (a raw HTTP/1.1 request head and body, the path exactly as given: no client
/// normalizes `/./`) to the service; returns the status and the JSON body.
async fn raw_request(h: &Harness, method: &str, path: &str, body: &str) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = h.base.trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\nidempotency-key: raw-1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    let json = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(json).unwrap_or(Value::Null))
}

/// Case 009: ids a URL path would resolve away (`.`, `..`) are refused at intake with a 400
/// naming the field, in a body and in a path, and nothing is written.
#[tokio::test]
async fn case_009_dot_segment_ids_are_refused_at_intake() {
    let h = Harness::start().await;
    let path = "/v1/tenants/t-1/control-spaces";
    for id in [".", ".."] {
        let (status, answer) = h
            .post(
                path,
                &json!({"control_space_id": id, "name": "n", "slug": "s"}),
                Some(&format!("dot-{}", id.len())),
            )
            .await;
        assert_error(status, &answer, 400, "INVALID_ARGUMENT");
        let message = answer["message"].as_str().unwrap();
        assert!(message.contains("control_space_id"), "{message}");
        assert!(message.contains("'.' or '..'"), "{message}");
    }
    let body = r#"{"control_space_id":"cs-1","name":"n","slug":"s"}"#;
    for (raw_path, field) in [
        ("/v1/tenants/./control-spaces", "tenant_id"),
        ("/v1/tenants/../control-spaces", "tenant_id"),
        ("/v1/tenants/%2E/control-spaces", "tenant_id"),
        ("/v1/tenants/%2e%2e/control-spaces", "tenant_id"),
    ] {
        let (status, answer) = raw_request(&h, "POST", raw_path, body).await;
        assert_error(status, &answer, 400, "INVALID_ARGUMENT");
        assert!(
            answer["message"].as_str().unwrap().contains(field),
            "{raw_path}: {answer}"
        );
    }
    let (status, answer) = raw_request(
        &h,
        "POST",
        "/v1/tenants/t-1/control-spaces/cs-1/grants/../revocations",
        r#"{"reason_code":"r"}"#,
    )
    .await;
    assert_error(status, &answer, 400, "INVALID_ARGUMENT");
    assert!(
        answer["message"].as_str().unwrap().contains("grant_id"),
        "{answer}"
    );
    assert!(
        h.commands().await.is_empty(),
        "a refused id wrote a command"
    );
    // Ids with dots among other characters are ordinary ids.
    h.create("t-1", "...").await;
    h.create("t-1", ".hidden").await;
    assert_eq!(h.commands().await.len(), 2);
}

#[tokio::test]
async fn delete_control_space_bad_input_is_refused() {
    let h = Harness::start().await;
    let (status, body) = h.delete("/v1/tenants/t-1/control-spaces/nope", None).await;
    assert_error(status, &body, 404, "CONTROL_SPACE_NOT_FOUND");
    let (status, body) = h.delete("/v1/tenants/t-1/control-spaces/a%09b", None).await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    h.create("t-1", "cs-1").await;
    let (status, body) = h
        .delete("/v1/tenants/t-1/control-spaces/cs-1", Some("del-1"))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["operation"], "delete");
    // Replay is the original; a second deletion with a new key is a conflict.
    let (status, again) = h
        .delete("/v1/tenants/t-1/control-spaces/cs-1", Some("del-1"))
        .await;
    assert_eq!((status, again["replayed"].clone()), (202, json!(true)));
    // The service's worker may already have completed the deletion (the space was never
    // provisioned, so nothing is sent): then the refusal names the deleted space instead.
    let (status, body) = h
        .delete("/v1/tenants/t-1/control-spaces/cs-1", Some("del-2"))
        .await;
    let code = if body["code"] == "CONTROL_SPACE_DELETED" {
        "CONTROL_SPACE_DELETED"
    } else {
        "FORBIDDEN_TRANSITION"
    };
    assert_error(status, &body, 409, code);
    assert_eq!(h.commands().await.len(), 2);
    h.wait_state("t-1", "cs-1", "deleted", SETTLE).await;
}

#[tokio::test]
async fn revoke_grant_bad_input_is_refused() {
    let h = Harness::start_with(Default::default(), |c| c.workers = 1).await;
    let revoke = "/v1/tenants/t-1/control-spaces/cs-1/grants/g-1/revocations";
    let (status, body) = h.post(revoke, &json!({"reason_code": "r"}), None).await;
    assert_error(status, &body, 404, "CONTROL_SPACE_NOT_FOUND");
    h.create("t-1", "cs-1").await;
    let (status, body) = h.post(revoke, &json!({}), None).await;
    assert_error(status, &body, 400, "INVALID_JSON");
    let (status, body) = h.post(revoke, &json!({"reason_code": ""}), None).await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    h.wait_state("t-1", "cs-1", "active", SETTLE).await;
    let (status, body) = h
        .post(
            revoke,
            &json!({"reason_code": "offboarding"}),
            Some("rev-1"),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["operation"], "revoke");
    let (status, body) = h
        .post(
            "/v1/tenants/t-1/control-spaces/cs-1/grants/bad%20grant/revocations",
            &json!({"reason_code": "r"}),
            None,
        )
        .await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    assert_eq!(h.commands().await.len(), 2);
}

#[tokio::test]
async fn revoke_before_provisioning_is_a_conflict() {
    // No worker runs, so the control space stays provisioning.
    let h = Harness::start_with(Default::default(), |c| c.product_enabled = false).await;
    h.create("t-1", "cs-1").await;
    let (status, body) = h
        .post(
            "/v1/tenants/t-1/control-spaces/cs-1/grants/g-1/revocations",
            &json!({"reason_code": "r"}),
            None,
        )
        .await;
    assert_error(status, &body, 409, "CONTROL_SPACE_NOT_PROVISIONED");
    let (status, cs) = h.get("/v1/tenants/t-1/control-spaces/cs-1").await;
    assert_eq!(status, 200);
    assert_eq!(cs["state"], "provisioning");
    assert_eq!(cs["open_commands"].as_array().unwrap().len(), 1);
    assert_eq!(cs["open_commands"][0]["status"], "pending");
}

#[tokio::test]
async fn get_control_space_bad_input_is_refused() {
    let h = Harness::start().await;
    let (status, body) = h.get("/v1/tenants/t-1/control-spaces/missing").await;
    assert_error(status, &body, 404, "CONTROL_SPACE_NOT_FOUND");
    let long = "x".repeat(300);
    let (status, body) = h
        .get(&format!("/v1/tenants/{long}/control-spaces/cs-1"))
        .await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
}

#[tokio::test]
async fn list_commands_filters_pages_and_refuses_bad_queries() {
    let h = Harness::start_with(Default::default(), |c| c.product_enabled = false).await;
    for i in 0..5 {
        h.create("t-1", &format!("cs-{i}")).await;
    }
    h.create("t-2", "cs-x").await;
    let (status, page) = h.get("/v1/commands?tenant_id=t-1&limit=2").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let mut seen = BTreeSet::new();
    let mut after = page["next_after"].as_str().map(str::to_owned);
    for item in page["items"].as_array().unwrap() {
        seen.insert(item["id"].as_str().unwrap().to_owned());
    }
    while let Some(cursor) = after {
        let (_, page) = h
            .get(&format!(
                "/v1/commands?tenant_id=t-1&limit=2&after={cursor}"
            ))
            .await;
        for item in page["items"].as_array().unwrap() {
            assert_eq!(item["tenant_id"], "t-1");
            assert_eq!(item["status"], "pending");
            assert_eq!(item["attempt_count"], 0);
            seen.insert(item["id"].as_str().unwrap().to_owned());
        }
        after = page["next_after"].as_str().map(str::to_owned);
    }
    assert_eq!(seen.len(), 5);
    let (_, page) = h
        .get("/v1/commands?status=pending&operation=provision&tenant_id=t-2&control_space_id=cs-x")
        .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    assert_eq!(page["next_after"], Value::Null);

    for (query, code) in [
        ("status=done", "INVALID_ARGUMENT"),
        ("operation=explode", "INVALID_ARGUMENT"),
        ("limit=0", "INVALID_ARGUMENT"),
        ("limit=5000", "INVALID_ARGUMENT"),
        ("limit=many", "INVALID_QUERY"),
        ("colour=red", "INVALID_QUERY"),
        ("control_space_id=cs-1", "INVALID_ARGUMENT"),
        ("tenant_id=a%20b", "INVALID_ARGUMENT"),
    ] {
        let (status, body) = h.get(&format!("/v1/commands?{query}")).await;
        assert_error(status, &body, 400, code);
    }
}

/// The value of `tenantry_fence_clears_total` in a `/metrics` text (0 when absent).
fn fence_clears(metrics: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix("tenantry_fence_clears_total "))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

#[tokio::test]
async fn fences_are_listed_and_cleared_with_a_logged_reason() {
    let h = Harness::start().await;
    let storage = Arc::new(SeaOrmHostStorage::new(&h.db.db));
    let binding = Binding::parse("inst-1").unwrap();
    let scope = ScopeIdentity::object("kb-7");
    let marker = FenceMarker::new(&scope, "upload outcome unknown", 1_800_000_000_000);
    storage
        .set(&binding, scope.fence_key().as_str(), &marker.to_value())
        .await
        .unwrap();

    let (status, list) = h.get("/v1/fences").await;
    assert_eq!(status, 200, "{list}");
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["binding"], "inst-1");
    assert_eq!(items[0]["scope"], "kb-7");
    assert_eq!(items[0]["reason"], "upload outcome unknown");
    assert_eq!(items[0]["kind"], "fence");
    let (_, only) = h.get("/v1/fences?binding=inst-2").await;
    assert_eq!(only["items"], json!([]));

    let clears_before = fence_clears(&h.metrics().await);
    let (status, outcome) = h
        .post(
            "/v1/fences/clear",
            &json!({"binding": "inst-1", "scope": "kb-7", "reason": "verified the upload landed"}),
            Some("clear-1"),
        )
        .await;
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["cleared"], true);
    // The recorder is shared by the tests of this binary: other clears may add to it too.
    assert!(
        fence_clears(&h.metrics().await) > clears_before,
        "the clear is counted in tenantry_fence_clears_total"
    );
    assert_eq!(
        storage
            .get(&binding, scope.fence_key().as_str())
            .await
            .unwrap(),
        Some(Value::Null),
        "clearing writes a tombstone"
    );
    let (_, list) = h.get("/v1/fences").await;
    assert_eq!(list["items"], json!([]));
    // Clearing again under a new key is harmless and writes nothing.
    let (status, again) = h
        .post(
            "/v1/fences/clear",
            &json!({"binding": "inst-1", "scope": "kb-7", "reason": "again"}),
            Some("clear-2"),
        )
        .await;
    assert_eq!((status, again["cleared"].clone()), (200, json!(false)));
}

#[tokio::test]
async fn fence_clear_enforces_the_idempotency_key() {
    let h = Harness::start().await;
    let storage = Arc::new(SeaOrmHostStorage::new(&h.db.db));
    let binding = Binding::parse("inst-1").unwrap();
    let scope = ScopeIdentity::object("kb-7");
    let marker = FenceMarker::new(&scope, "upload outcome unknown", 1_800_000_000_000);
    storage
        .set(&binding, scope.fence_key().as_str(), &marker.to_value())
        .await
        .unwrap();
    let body =
        json!({"binding": "inst-1", "scope": "kb-7", "reason": "verified the upload landed"});
    let (status, first) = h.post("/v1/fences/clear", &body, Some("clear-1")).await;
    assert_eq!(
        (status, first["cleared"].clone()),
        (200, json!(true)),
        "{first}"
    );
    // The same key and body replays the first answer (cleared: true), writing nothing.
    let (status, replay) = h.post("/v1/fences/clear", &body, Some("clear-1")).await;
    assert_eq!((status, replay), (200, first));
    // The same key with another body is refused, and changes nothing.
    storage
        .set(&binding, scope.fence_key().as_str(), &marker.to_value())
        .await
        .unwrap();
    for other in [
        json!({"binding": "inst-1", "scope": "kb-7", "reason": "another reason"}),
        json!({"binding": "inst-2", "scope": "kb-7", "reason": "verified the upload landed"}),
    ] {
        let (status, answer) = h.post("/v1/fences/clear", &other, Some("clear-1")).await;
        assert_error(status, &answer, 422, "IDEMPOTENCY_KEY_REUSED");
    }
    assert_eq!(
        storage
            .get(&binding, scope.fence_key().as_str())
            .await
            .unwrap(),
        Some(marker.to_value()),
        "the refused request cleared nothing"
    );
}

#[tokio::test]
async fn fence_routes_bad_input_is_refused() {
    let h = Harness::start().await;
    let (status, body) = h.get("/v1/fences?binding=").await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    let (status, body) = h.get("/v1/fences?scope=x").await;
    assert_error(status, &body, 400, "INVALID_QUERY");
    let (status, body) = h.get("/v1/fences?binding=inst%201").await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    let cases: Vec<(Value, u16, &str)> = vec![
        (
            json!({"binding": "b", "reason": "r"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"binding": "b", "scope": "s", "key": "ke.fence.v1.installation", "reason": "r"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"binding": "b", "scope": "s", "reason": "  "}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"binding": "", "scope": "s", "reason": "r"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"binding": "b", "key": "not-a-fence", "reason": "r"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"binding": "inst 1", "scope": "kb-7", "reason": "r"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"binding": "inst-1", "scope": "kb 7", "reason": "r"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (
            json!({"binding": "inst-1", "scope": "", "reason": "r"}),
            400,
            "INVALID_ARGUMENT",
        ),
        (json!({"binding": "b", "scope": "s"}), 400, "INVALID_JSON"),
        (
            json!({"binding": "b", "scope": "s", "reason": "x".repeat(1001)}),
            400,
            "INVALID_ARGUMENT",
        ),
    ];
    for (body, status, code) in cases {
        let (got, answer) = h.post("/v1/fences/clear", &body, None).await;
        assert_error(got, &answer, status, code);
    }
}

#[tokio::test]
async fn admin_routes_require_the_bearer_token() {
    let h = Harness::start().await;
    for path in ["/v1/commands", "/v1/fences", "/v1/directory/status"] {
        let response = h.http.get(h.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "UNAUTHORIZED");
        let wrong = h
            .http
            .get(h.url(path))
            .bearer_auth("wrong-token-0123456789")
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401, "{path}");
    }
    let response = h
        .http
        .post(h.url("/v1/tenants/t/control-spaces"))
        .json(&json!({"name": "n", "slug": "s"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert!(h.commands().await.is_empty());
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let response = h.http.get(h.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
}

#[tokio::test]
async fn probes_metrics_and_fallbacks_answer_as_documented() {
    let h = Harness::start().await;
    h.create("t-1", "cs-1").await;
    h.wait_state("t-1", "cs-1", "active", SETTLE).await;
    let (status, ready) = h.get("/readyz").await;
    assert_eq!((status, ready["status"].clone()), (200, json!("ready")));
    let metrics = h.metrics().await;
    for name in [
        "tenantry_lifecycle_tasks_total",
        "tenantry_dispatch_duration_seconds",
        "tenantry_lifecycle_settle_seconds",
        "tenantry_commands",
        "tenantry_fences_active",
    ] {
        assert!(metrics.contains(name), "{name} missing from:\n{metrics}");
    }
    let (status, body) = h.get("/v1/nothing-here").await;
    assert_error(status, &body, 404, "NOT_FOUND");
    let (status, body) = h
        .call(reqwest::Method::PUT, "/v1/commands", None, None)
        .await;
    assert_error(status, &body, 405, "METHOD_NOT_ALLOWED");
    let (status, directory) = h.get("/v1/directory/status").await;
    assert_eq!(status, 200);
    assert_eq!(directory["configured"], false);
}

#[tokio::test]
async fn served_openapi_is_the_documented_file() {
    let h = Harness::start().await;
    let response = h.http.get(h.url("/openapi.json")).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "application/json");
    let served = response.text().await.unwrap();
    let file = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/openapi/admin-v1.json"
    ))
    .unwrap();
    assert_eq!(served, file);
    assert_eq!(served, OPENAPI);
}

#[test]
fn openapi_documents_exactly_the_served_routes() {
    let documented = tenantry_testkit::openapi::documented_routes(OPENAPI);
    let served: BTreeSet<(String, String)> = PATHS
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(documented, served);
}

#[tokio::test]
async fn fence_clear_through_the_api_waits_for_a_dispatch_in_flight_in_the_process() {
    use tenantry_engine::scoped_writes::{FenceMode, ScopedWriteError};
    use tenantry_fence::DispatchOutcome;
    use tokio::sync::Notify;

    let h = Harness::start().await;
    // The service's own runtime, as an in-process writer (library caller) would use it.
    let writes = h.service.as_ref().unwrap().scoped_writes().clone();
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let commit = {
        let (started, release) = (started.clone(), release.clone());
        async move {
            started.notify_one();
            release.notified().await;
            Err::<(), _>(DispatchOutcome::OutcomeUnknown)
        }
    };
    let dispatching = tokio::spawn(async move {
        let binding = Binding::parse("inst-1").unwrap();
        writes
            .run(
                &binding,
                &ScopeIdentity::object("kb-7"),
                FenceMode::Enforce,
                |ctx| async move { ctx.dispatch("upload document", commit).await },
            )
            .await
    });
    started.notified().await;
    let (status, list) = h.get("/v1/fences").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"][0]["kind"], "intent", "{list}");
    let metrics = h.metrics().await;
    // The gauge is process-wide (other tests refresh it too): check the labels only.
    for label in ["kind=\"intent\"", "kind=\"fence\""] {
        assert!(
            metrics.contains(&format!("tenantry_fences_active{{{label}}}")),
            "{label} missing from:\n{metrics}"
        );
    }

    let body =
        json!({"binding": "inst-1", "scope": "kb-7", "reason": "verified the upload landed"});
    let clear = h.post("/v1/fences/clear", &body, Some("clear-in-flight"));
    tokio::pin!(clear);
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(300), &mut clear)
            .await
            .is_err(),
        "the clear waits for the scope lock of the dispatch in flight"
    );
    release.notify_one();
    assert!(matches!(
        dispatching.await.unwrap(),
        Err(ScopedWriteError::OutcomeUnknown { .. })
    ));
    // The request may still land until its intent's expiry (dispatch deadline + margin): the
    // fence keeps it and the clear that waited is refused, saying until when.
    let (status, refused) = clear.await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["code"], "FENCE_REQUEST_MAY_LAND", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("may still land at the remote until"),
        "{refused}"
    );
    let (_, list) = h.get("/v1/fences").await;
    assert_eq!(list["items"][0]["kind"], "fence", "{list}");
}

/// A loopback relay to a server that can be frozen: every byte stops flowing and every
/// connection stays open, as when the database's host stops answering.
async fn freezable_relay(server: String) -> (u16, tokio::sync::watch::Sender<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (freeze, frozen) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let server = server.clone();
            let mut frozen = frozen.clone();
            tokio::spawn(async move {
                if *frozen.borrow() {
                    std::future::pending::<()>().await;
                }
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&server).await else {
                    return;
                };
                tokio::select! {
                    _ = frozen.changed() => {
                        // Hold both ends open and silent.
                        let _held = (&client, &upstream);
                        std::future::pending::<()>().await;
                    }
                    _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                }
            });
        }
    });
    (port, freeze)
}

#[tokio::test]
async fn readyz_answers_503_within_seconds_when_the_database_stops_answering() {
    let test = tenantry_store_seaorm::testing::fresh_database().await;
    if test.backend() != tenantry_store_seaorm::Backend::Postgres {
        return; // A frozen host needs a network database.
    }
    let url = test.url().to_owned();
    let rest = url.split_once("://").unwrap().1;
    let (authority, path) = rest.split_once('/').unwrap();
    let (user, server) = authority.rsplit_once('@').unwrap();
    let (port, freeze) = freezable_relay(server.to_owned()).await;
    let db =
        tenantry_store_seaorm::connect(&format!("postgres://{user}@127.0.0.1:{port}/{path}"), 4)
            .await
            .unwrap();
    let (_, remote) = tenantry_testkit::knowledge_fs::ReferenceRemote::start(
        tenantry_testkit::knowledge_fs::RemoteConfig::default(),
    )
    .await
    .unwrap();
    let service = tenantry_app::service::Service::start(&common::test_config(&remote), db)
        .await
        .unwrap();
    let http = common::http_client();
    let readyz = format!("http://{}/readyz", service.addr());
    assert_eq!(http.get(&readyz).send().await.unwrap().status(), 200);
    freeze.send(true).unwrap();
    let asked = std::time::Instant::now();
    let response = http
        .get(&readyz)
        .timeout(Duration::from_secs(8))
        .send()
        .await
        .expect("/readyz answers while the database is silent");
    assert_eq!(response.status(), 503);
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "answered after {:?}",
        asked.elapsed()
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "DATABASE_UNREACHABLE", "{body}");
    // The healthz probe does not depend on the database.
    let healthz = format!("http://{}/healthz", service.addr());
    assert_eq!(http.get(&healthz).send().await.unwrap().status(), 200);
}
