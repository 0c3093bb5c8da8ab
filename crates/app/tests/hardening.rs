//! Hardening of the admin API and the `tenantry` binary (issue 16): one id rule (NFC) at every
//! entry point, refused pagination cursors and duplicate idempotency keys, 5xx answers without
//! driver text, start-up order of `serve`, unknown variables, and the CLI sharing the API's
//! limits and JSON shapes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use common::{Harness, TOKEN};
use serde_json::{Value, json};
use tenantry_app::admin::{CORRELATION_ID_HEADER, CommandView, MAX_PAGE};
use tenantry_engine::lifecycle::{CommandIntake, SystemClock};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

const NFC: &str = "cs-\u{00E9}";
const NFD: &str = "cs-e\u{0301}";

fn tenantry() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tenantry"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TENANTRY_") {
            command.env_remove(name);
        }
    }
    command
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `tenantry migrate` on `tenantry.db` in `dir`.
fn migrate(dir: &Path) {
    let out = tenantry().current_dir(dir).arg("migrate").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn case_007_lookalike_ids_are_one_rule_in_the_admin_api() {
    let h = Harness::start().await;
    let path = "/v1/tenants/t-1/control-spaces";
    let (status, body) = h
        .post(
            path,
            &json!({"control_space_id": NFC, "name": "N", "slug": "n"}),
            Some("key-nfc"),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // The same name in NFD is refused, with the NFC form to use, and writes nothing.
    let (status, body) = h
        .post(
            path,
            &json!({"control_space_id": NFD, "name": "N", "slug": "n"}),
            Some("key-nfd"),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "INVALID_ARGUMENT");
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("control_space_id") && message.contains("NFC") && message.contains(NFC),
        "{message}"
    );
    assert_eq!(h.commands().await.len(), 1);
    // Ids in paths and queries follow the same rule.
    let (status, body) = h
        .get(&format!("/v1/tenants/t-1/control-spaces/{NFD}"))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );
    let (status, body) = h.get("/v1/commands?tenant_id=t-e%CC%81").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("INVALID_ARGUMENT"))
    );
    let (status, body) = h
        .get(&format!("/v1/tenants/t-1/control-spaces/{NFC}"))
        .await;
    assert_eq!(status, 200, "{body}");
}

#[test]
fn case_007_lookalike_ids_are_refused_by_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    migrate(dir.path());
    let out = tenantry()
        .current_dir(dir.path())
        .args([
            "commands",
            "list",
            "--tenant",
            "t-1",
            "--control-space",
            NFD,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--control-space is invalid") && stderr(&out).contains("NFC"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn unknown_cursor_is_refused_not_an_empty_page() {
    let h = Harness::start().await;
    h.create("t-1", "cs-1").await;
    let (status, body) = h.get("/v1/commands?after=no-such-command").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "UNKNOWN_CURSOR");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .starts_with("after = \"no-such-command\" names no command"),
        "{body}"
    );
    // A known cursor still pages (the last command: an empty last page).
    let id = h.commands().await[0].id.to_string();
    let (status, body) = h.get(&format!("/v1/commands?after={id}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"], json!([]));
}

#[tokio::test]
async fn two_idempotency_keys_in_one_request_are_refused() {
    let h = Harness::start().await;
    let response = h
        .http
        .post(h.url("/v1/tenants/t-1/control-spaces"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", "key-a")
        .header("Idempotency-Key", "key-b")
        .json(&json!({"name": "N", "slug": "n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "DUPLICATE_IDEMPOTENCY_KEY", "{body}");
    assert!(h.commands().await.is_empty());
}

#[tokio::test]
async fn server_errors_carry_a_correlation_id_and_no_driver_text() {
    let h = Harness::start().await;
    // Every storage call now fails inside the driver.
    h.db.db.conn.clone().close().await.unwrap();
    let response = h
        .http
        .get(h.url("/v1/tenants/t-1/control-spaces/cs-1"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    let header = response.headers()[CORRELATION_ID_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "STORE_UNAVAILABLE", "{body}");
    assert_eq!(body["correlation_id"], header.as_str(), "{body}");
    let message = body["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "storage is unavailable; retry later (correlation id {header}; the service log has the detail)"
        )
    );
}

#[test]
fn serve_with_a_bad_knowledge_fs_url_exits_2_before_any_migration() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .env("TENANTRY_KNOWLEDGE_FS_URL", "http://")
        .env("TENANTRY_KNOWLEDGE_FS_TOKEN", "secret")
        .env("TENANTRY_LISTEN", "127.0.0.1:0")
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"http://\""), "{}", stderr(&out));
    assert!(
        !dir.path().join("tenantry.db").exists(),
        "the database was created before the configuration was checked"
    );
}

#[test]
fn serve_on_a_port_in_use_exits_2_before_any_migration() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = tenantry()
        .current_dir(dir.path())
        .env("TENANTRY_KNOWLEDGE_FS_URL", "http://127.0.0.1:9")
        .env("TENANTRY_KNOWLEDGE_FS_TOKEN", "secret")
        .env("TENANTRY_LISTEN", &addr)
        .arg("serve")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains(&addr), "{}", stderr(&out));
    assert!(
        !dir.path().join("tenantry.db").exists(),
        "the database was created before the listener was bound"
    );
}

#[test]
fn unknown_tenantry_variables_are_warned_about_by_name() {
    let dir = tempfile::tempdir().unwrap();
    migrate(dir.path());
    let out = tenantry()
        .current_dir(dir.path())
        .env("TENANTRY_WROKERS", "3")
        .args(["commands", "list"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("TENANTRY_WROKERS is not a tenantry setting")
            && stderr(&out).contains("did you mean TENANTRY_WORKERS?"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pool_too_small_for_the_workers_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .env("TENANTRY_WORKERS", "16")
        .arg("migrate")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("database_max_connections") && stderr(&out).contains("at least 20"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn cli_commands_list_accepts_the_api_limits_and_prints_the_api_shape() {
    let dir = tempfile::tempdir().unwrap();
    migrate(dir.path());
    let url = format!("sqlite://{}", dir.path().join("tenantry.db").display());
    let db = tenantry_store_seaorm::connect_existing(&url, 2)
        .await
        .unwrap();
    let store = SeaOrmLifecycleStore::new(&db);
    let intake = CommandIntake::new(store.clone(), Arc::new(SystemClock));
    intake
        .create_control_space(&CreateControlSpace::new(
            TenantId::parse("t-1").unwrap(),
            ControlSpaceId::parse("cs-1").unwrap(),
            IdempotencyKey::parse("key-1").unwrap(),
            "N",
            "n",
        ))
        .await
        .unwrap();
    let records = store
        .list_commands(&CommandFilter {
            limit: 10,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    db.conn.close().await.unwrap();

    let run = |args: &[&str]| {
        tenantry()
            .current_dir(dir.path())
            .args(["commands", "list"])
            .args(args)
            .output()
            .unwrap()
    };
    // The API's largest page is accepted, one more is refused.
    let max = MAX_PAGE.to_string();
    let over = (MAX_PAGE + 1).to_string();
    assert!(run(&["--limit", &max]).status.success());
    let out = run(&["--limit", &over]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(run(&["--limit", "0"]).status.code(), Some(2));
    // An unknown cursor is refused, as by the API.
    let out = run(&["--after", "no-such-command"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("names no command"),
        "{}",
        stderr(&out)
    );
    // JSON lines are the API's items.
    let out = run(&["--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let expected: Vec<Value> = records
        .iter()
        .map(|r| serde_json::to_value(CommandView::from(r)).unwrap())
        .collect();
    assert_eq!(lines, expected);
}
