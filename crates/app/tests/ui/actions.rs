//! Actions: each needs the session's CSRF token and is recorded; the bulk confirmation names
//! the commands it acts on and the action touches only those.

use serde_json::json;
use tenantry_fence::ScopeIdentity;
use tenantry_ports::host_storage::HostStorage;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;

use crate::SETTLE;
use crate::common::console::Console;
use crate::common::{Harness, TOKEN};

#[tokio::test]
async fn actions_need_the_csrf_token_and_are_recorded() {
    let h = Harness::start().await;
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    let id = h.failed_command("cs-csrf").await;
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
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    let first = h.failed_command("cs-b1").await;
    let second = h.failed_command("cs-b2").await;
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
    let third = h.failed_command("cs-b3").await;
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
