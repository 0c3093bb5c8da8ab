//! Commands that can never succeed stop, visibly, end to end over HTTP: the dead-letter shows
//! in the control space, the command list and the metrics; operators retry or abandon through
//! the admin API; revocations of a deleting control space are refused. Runs on SQLite, or on
//! PostgreSQL with `TENANTRY_TEST_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{Harness, assert_error};
use serde_json::{Value, json};
use tenantry_testkit::fault::{Fault, Route};

const SETTLE: Duration = Duration::from_secs(20);

async fn wait_for(h: &Harness, path: &str, ready: impl Fn(&Value) -> bool) -> Value {
    h.wait_for(path, ready, SETTLE).await
}

/// `shared/cases/003-permanent-remote-error.md` over the whole service: a remote that answers
/// `400 INVALID_REQUEST` to the provision of `cs-bad`.
#[tokio::test]
async fn case_003_permanent_remote_error_is_visible_and_operators_act_on_it() {
    let h = Harness::start().await;
    h.remote
        .script(Route::Provision, [Some(Fault::InvalidRequest)]);
    let created = h.create("t-1", "cs-bad").await;
    let command_id = created["command_id"].as_str().unwrap().to_owned();
    let cs_path = "/v1/tenants/t-1/control-spaces/cs-bad";
    let cs = wait_for(&h, cs_path, |b| b["lifecycle_status"] == "failed").await;
    assert_eq!(cs["state"], "provisioning", "{cs}");
    assert_eq!(cs["failure"]["code"], "INVALID_REQUEST", "{cs}");
    assert_eq!(cs["failure"]["command_id"], command_id.as_str());
    assert_eq!(cs["failed_commands"].as_array().unwrap().len(), 1, "{cs}");
    assert_eq!(cs["open_commands"], json!([]));
    // Listed by status and error code; counted in the metrics.
    let (status, page) = h
        .get("/v1/commands?status=failed&error_code=INVALID_REQUEST")
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["items"][0]["id"], command_id.as_str(), "{page}");
    assert_eq!(page["items"][0]["attempt_count"], 1);
    let metrics = h.metrics().await;
    assert!(
        metrics.contains(
            "tenantry_lifecycle_failed_total{operation=\"provision\",code=\"INVALID_REQUEST\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("tenantry_commands{status=\"failed\",operation=\"provision\"} 1"),
        "{metrics}"
    );
    // Retrying needs who and why.
    let retry = format!("/v1/commands/{command_id}/retry");
    let (status, body) = h
        .post(&retry, &json!({"actor": "", "reason": "x"}), None)
        .await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    let (status, body) = h
        .post(&retry, &json!({"reason": "remote fixed"}), None)
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "pending");
    assert_eq!(body["attempt_count"], 1, "the attempt count is kept");
    assert_eq!(body["attempt_budget_base"], 1);
    // The fault was one-shot: the retried provision succeeds.
    let cs = h.wait_state("t-1", "cs-bad", "active", SETTLE).await;
    assert_eq!(cs["lifecycle_status"], "settled", "{cs}");
    assert_eq!(cs["failure"], Value::Null);
    let (status, actions) = h.get(&format!("/v1/commands/{command_id}/actions")).await;
    assert_eq!(status, 200);
    assert_eq!(actions["items"].as_array().unwrap().len(), 1, "{actions}");
    assert_eq!(actions["items"][0]["action"], "retry");
    assert_eq!(
        actions["items"][0]["actor"], "admin",
        "the token's operator"
    );
    assert_eq!(actions["items"][0]["reason"], "remote fixed");
    assert_eq!(actions["items"][0]["previous_status"], "failed");
    assert_eq!(
        actions["items"][0]["previous_error_code"],
        "INVALID_REQUEST"
    );
    // A succeeded command can be neither retried nor abandoned.
    let (status, body) = h
        .post(
            &format!("/v1/commands/{command_id}/abandon"),
            &json!({"reason": "late"}),
            None,
        )
        .await;
    assert_error(status, &body, 409, "COMMAND_NOT_ACTIONABLE");
    let (status, body) = h
        .post(
            "/v1/commands/no-such-command/retry",
            &json!({"reason": "x"}),
            None,
        )
        .await;
    assert_error(status, &body, 404, "COMMAND_NOT_FOUND");
}

#[tokio::test]
async fn bulk_abandon_needs_a_status_and_acts_on_every_match() {
    let h = Harness::start().await;
    h.remote.script(
        Route::Provision,
        [Some(Fault::InvalidRequest), Some(Fault::InvalidRequest)],
    );
    h.create("t-1", "cs-a").await;
    h.create("t-1", "cs-b").await;
    for cs in ["cs-a", "cs-b"] {
        wait_for(&h, &format!("/v1/tenants/t-1/control-spaces/{cs}"), |b| {
            b["lifecycle_status"] == "failed"
        })
        .await;
    }
    let (status, body) = h
        .post(
            "/v1/commands/abandon",
            &json!({"reason": "tenant gone"}),
            None,
        )
        .await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    let (status, body) = h
        .post(
            "/v1/commands/abandon",
            &json!({"reason": "tenant gone", "status": "failed",
                    "tenant_id": "t-1", "error_code": "INVALID_REQUEST"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["acted"].as_array().unwrap().len(), 2, "{body}");
    assert_eq!(body["refused"], json!([]));
    assert!(
        body["acted"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["status"] == "abandoned"
                && c["last_error"]["code"] == "ABANDONED_BY_OPERATOR")
    );
    let (_, page) = h.get("/v1/commands?status=abandoned").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
}

/// Issue 27: with `command_ids` the bulk endpoint acts on exactly the confirmed commands: a
/// confirmed one that stopped matching (retried meanwhile) is skipped and reported, one that
/// matches but was not confirmed is untouched.
#[tokio::test]
async fn bulk_abandon_with_command_ids_acts_on_exactly_the_confirmed_commands() {
    let h = Harness::start().await;
    h.remote.script(
        Route::Provision,
        [
            Some(Fault::InvalidRequest),
            Some(Fault::InvalidRequest),
            Some(Fault::InvalidRequest),
        ],
    );
    let mut ids = Vec::new();
    for cs in ["cs-a", "cs-b", "cs-c"] {
        let created = h.create("t-1", cs).await;
        ids.push(created["command_id"].as_str().unwrap().to_owned());
        wait_for(&h, &format!("/v1/tenants/t-1/control-spaces/{cs}"), |b| {
            b["lifecycle_status"] == "failed"
        })
        .await;
    }
    // The operator confirmed a and b; b is retried by someone else before the action.
    let (status, body) = h
        .post(
            &format!("/v1/commands/{}/retry", ids[1]),
            &json!({"reason": "meanwhile"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let bulk = |command_ids: Value| {
        json!({"reason": "tenant gone", "status": "failed",
               "command_ids": command_ids})
    };
    let (status, body) = h.post("/v1/commands/abandon", &bulk(json!([])), None).await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    let (status, body) = h
        .post("/v1/commands/abandon", &bulk(json!([""])), None)
        .await;
    assert_error(status, &body, 400, "INVALID_ARGUMENT");
    let (status, body) = h
        .post("/v1/commands/abandon", &bulk(json!([ids[0], ids[1]])), None)
        .await;
    assert_eq!(status, 200, "{body}");
    let acted: Vec<_> = body["acted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].clone())
        .collect();
    assert_eq!(acted, vec![json!(ids[0])], "{body}");
    assert_eq!(body["refused"], json!([]));
    assert_eq!(body["skipped"][0]["command_id"], ids[1].as_str(), "{body}");
    assert_eq!(body["skipped"][0]["code"], "COMMAND_NO_LONGER_MATCHES");
    let (_, c) = h.get(&format!("/v1/commands/{}", ids[2])).await;
    assert_eq!(c["status"], "failed", "not confirmed, not touched: {c}");
    let (_, b) = h.get(&format!("/v1/commands/{}", ids[1])).await;
    assert_ne!(b["status"], "abandoned", "{b}");
}

#[tokio::test]
async fn revocation_is_refused_while_the_control_space_is_deleting() {
    let h = Harness::start().await;
    h.create("t-1", "cs-1").await;
    h.wait_state("t-1", "cs-1", "active", SETTLE).await;
    let (status, _) = h
        .delete("/v1/tenants/t-1/control-spaces/cs-1", Some("del-1"))
        .await;
    assert_eq!(status, 202);
    let before = h.commands().await.len();
    let (status, body) = h
        .post(
            "/v1/tenants/t-1/control-spaces/cs-1/grants/g-1/revocations",
            &json!({"reason_code": "user_removed"}),
            Some("revoke-1"),
        )
        .await;
    assert_eq!(status, 409, "{body}");
    assert!(
        ["CONTROL_SPACE_DELETING"].contains(&body["code"].as_str().unwrap_or("")),
        "{body}"
    );
    assert_eq!(h.commands().await.len(), before, "nothing written");
}

/// The command detail of the admin API lists every attempt's error with its time, newest
/// first: a provision answered 503 (retried), then 400 (dead-lettered), then abandoned by an
/// operator.
#[tokio::test]
async fn command_detail_lists_each_failed_attempt_with_its_time() {
    let h = Harness::start().await;
    h.remote.script(
        Route::Provision,
        [
            Some(Fault::Unavailable {
                retry_after_secs: 1,
            }),
            Some(Fault::InvalidRequest),
        ],
    );
    let created = h.create("t-1", "cs-flaky").await;
    let command_id = created["command_id"].as_str().unwrap().to_owned();
    wait_for(&h, "/v1/tenants/t-1/control-spaces/cs-flaky", |b| {
        b["lifecycle_status"] == "failed"
    })
    .await;
    let path = format!("/v1/commands/{command_id}");
    let (status, detail) = h.get(&path).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["id"], command_id.as_str(), "{detail}");
    assert_eq!(detail["status"], "failed", "{detail}");
    assert_eq!(detail["errors_total"], 2, "{detail}");
    let errors = detail["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 2, "{detail}");
    assert_eq!(
        (
            &errors[0]["outcome"],
            &errors[0]["code"],
            &errors[0]["attempt"]
        ),
        (&json!("failed"), &json!("INVALID_REQUEST"), &json!(2)),
        "{detail}"
    );
    assert_eq!(
        (
            &errors[1]["outcome"],
            &errors[1]["code"],
            &errors[1]["attempt"]
        ),
        (&json!("retry"), &json!("KFS_UNAVAILABLE"), &json!(1)),
        "{detail}"
    );
    let at = |e: &Value| {
        chrono::DateTime::parse_from_rfc3339(e["at"].as_str().unwrap())
            .unwrap()
            .timestamp_millis()
    };
    assert!(at(&errors[0]) >= at(&errors[1]), "{detail}");
    assert!(errors[0]["lease_owner"].is_string(), "{detail}");
    assert_eq!(errors[0]["actor"], Value::Null);
    // The operator's abandon is in the log too, with who and why.
    let (status, body) = h
        .post(
            &format!("{path}/abandon"),
            &json!({"reason": "bad slug, customer told"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (_, detail) = h.get(&path).await;
    assert_eq!(detail["errors_total"], 3, "{detail}");
    assert_eq!(detail["errors"][0]["outcome"], "abandoned", "{detail}");
    assert_eq!(detail["errors"][0]["actor"], "admin", "{detail}");
    assert_eq!(
        detail["errors"][0]["message"], "bad slug, customer told",
        "{detail}"
    );
    let (status, body) = h.get("/v1/commands/no-such-command").await;
    assert_error(status, &body, 404, "COMMAND_NOT_FOUND");
}

/// `shared/cases/012-deletion-404-forever.md` over the admin API: a delete that cannot
/// complete. Abandoning it is refused (the control space would stay `deleting` for good);
/// mark-deleted gives it up and records the control space deleted; its id then answers 409
/// `CONTROL_SPACE_DELETED` (not "already exists") to a create and to a new DELETE.
#[tokio::test]
async fn case_012_an_owning_delete_is_marked_deleted_and_the_id_says_deleted() {
    let h = Harness::start().await;
    h.create("t-1", "cs-stuck").await;
    h.wait_state("t-1", "cs-stuck", "active", SETTLE).await;
    h.remote
        .script(Route::Deletion, [Some(Fault::InvalidRequest)]);
    let cs_path = "/v1/tenants/t-1/control-spaces/cs-stuck";
    let (status, deleted) = h.delete(cs_path, Some("del-stuck")).await;
    assert_eq!(status, 202, "{deleted}");
    let command_id = deleted["command_id"].as_str().unwrap().to_owned();
    let cs = wait_for(&h, cs_path, |b| b["lifecycle_status"] == "failed").await;
    assert_eq!(cs["state"], "deleting", "{cs}");
    let who = json!({"reason": "removed in KnowledgeFS by hand"});
    let (status, body) = h
        .post(&format!("/v1/commands/{command_id}/abandon"), &who, None)
        .await;
    assert_error(status, &body, 409, "DELETE_OWNS_CONTROL_SPACE");
    assert!(body["message"].as_str().unwrap().contains("mark"), "{body}");
    let (_, cs) = h.get(cs_path).await;
    assert_eq!(cs["state"], "deleting", "nothing written: {cs}");
    let (status, body) = h
        .post(
            &format!("/v1/commands/{command_id}/mark-deleted"),
            &who,
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "abandoned");
    let (_, cs) = h.get(cs_path).await;
    assert_eq!(cs["state"], "deleted", "{cs}");
    let (_, actions) = h.get(&format!("/v1/commands/{command_id}/actions")).await;
    assert_eq!(actions["items"][0]["action"], "mark_deleted", "{actions}");
    assert_eq!(
        actions["items"][0]["reason"],
        "removed in KnowledgeFS by hand"
    );
    // Mark-deleted of anything else is refused.
    let created = h.create("t-1", "cs-other").await;
    let (status, body) = h
        .post(
            &format!(
                "/v1/commands/{}/mark-deleted",
                created["command_id"].as_str().unwrap()
            ),
            &who,
            None,
        )
        .await;
    assert!(
        status == 409
            && ["NOT_AN_OWNING_DELETE", "COMMAND_NOT_ACTIONABLE"]
                .contains(&body["code"].as_str().unwrap_or("")),
        "{status} {body}"
    );
    // The id of the deleted control space says so.
    let (status, body) = h
        .post(
            "/v1/tenants/t-1/control-spaces",
            &json!({"control_space_id": "cs-stuck", "name": "n", "slug": "s"}),
            Some("recreate"),
        )
        .await;
    assert_error(status, &body, 409, "CONTROL_SPACE_DELETED");
    assert!(
        body["message"].as_str().unwrap().contains("was deleted"),
        "{body}"
    );
    let (status, body) = h.delete(cs_path, Some("del-again")).await;
    assert_error(status, &body, 409, "CONTROL_SPACE_DELETED");
}

/// Abandoning a provision whose request may have reached KnowledgeFS (its answer was lost)
/// says so in the answer and in the control space's view, with the delete that cleans it up;
/// that delete finds the remote space and removes it.
#[tokio::test]
async fn an_abandoned_provision_that_may_have_reached_the_remote_says_what_it_left() {
    let h = Harness::start_with(Default::default(), |c| c.max_attempts = 1).await;
    h.remote.script(Route::Provision, [Some(Fault::LostAck)]);
    let created = h.create("t-1", "cs-lost").await;
    let command_id = created["command_id"].as_str().unwrap().to_owned();
    let cs_path = "/v1/tenants/t-1/control-spaces/cs-lost";
    wait_for(&h, cs_path, |b| b["lifecycle_status"] == "failed").await;
    let (status, body) = h
        .post(
            &format!("/v1/commands/{command_id}/abandon"),
            &json!({"reason": "giving up"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "abandoned");
    let left = &body["left_behind"];
    assert_eq!(left["remote_space_may_exist"], true, "{body}");
    assert_eq!(
        left["cleanup"],
        "DELETE /v1/tenants/t-1/control-spaces/cs-lost"
    );
    assert!(left["provisioning_key"].as_str().is_some(), "{body}");
    let (_, cs) = h.get(cs_path).await;
    assert_eq!(cs["state"], "provisioning", "{cs}");
    assert_eq!(cs["remote_space_may_exist"], true, "{cs}");
    assert_eq!(cs["left_behind"]["cleanup"], left["cleanup"], "{cs}");
    assert_eq!(h.remote.truth().effects().spaces_created, 1);
    // The console's command page says it too.
    let page = console_page(&h, &format!("/ui/commands/{command_id}")).await;
    assert!(page.contains("id=\"left-behind\""), "{page}");
    assert!(
        page.contains("DELETE /v1/tenants/t-1/control-spaces/cs-lost"),
        "{page}"
    );
    // The cleanup it names removes the space the lost answer created.
    let (status, body) = h.delete(cs_path, Some("cleanup")).await;
    assert_eq!(status, 202, "{body}");
    let cs = h.wait_state("t-1", "cs-lost", "deleted", SETTLE).await;
    assert_eq!(cs["remote_space_may_exist"], false, "{cs}");
    assert_eq!(h.remote.truth().effects().deletions_completed, 1);
}

/// A provision KnowledgeFS refused (nothing can exist remotely) is abandoned without the note.
#[tokio::test]
async fn an_abandoned_provision_the_remote_refused_leaves_nothing_behind() {
    let h = Harness::start().await;
    h.remote
        .script(Route::Provision, [Some(Fault::InvalidRequest)]);
    let created = h.create("t-1", "cs-refused").await;
    let command_id = created["command_id"].as_str().unwrap().to_owned();
    let cs_path = "/v1/tenants/t-1/control-spaces/cs-refused";
    wait_for(&h, cs_path, |b| b["lifecycle_status"] == "failed").await;
    let (status, body) = h
        .post(
            &format!("/v1/commands/{command_id}/abandon"),
            &json!({"reason": "bad request"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body.get("left_behind"), None, "{body}");
    let (_, cs) = h.get(cs_path).await;
    assert_eq!(cs["remote_space_may_exist"], false, "{cs}");
    let page = console_page(&h, &format!("/ui/commands/{command_id}")).await;
    assert!(page.contains("id=\"status\""), "{page}");
    assert!(!page.contains("id=\"left-behind\""), "{page}");
}

/// A console page, read after logging in with the admin token.
async fn console_page(h: &Harness, path: &str) -> String {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = http
        .post(h.url("/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}", common::TOKEN))
        .send()
        .await
        .unwrap();
    let cookie = login
        .headers()
        .get("set-cookie")
        .expect("the login sets a session cookie")
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = http
        .get(h.url(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    page.text().await.unwrap()
}
