//! The directory projection inside `tenantry serve`: status and readiness over HTTP, fail
//! closed while the provider cannot be reached.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Harness;
use common::directory::{settings, workspace};
use tenantry_directory::InstanceUuid;
use tenantry_directory::maps::WorkspaceStatus;
use tenantry_directory::{MembershipUuid, WorkspaceUuid};
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};

/// The reference directory of instance `inst-1`, holding the workspaces `uuids`, and its URL.
async fn provider(uuids: &[&str]) -> (String, ReferenceDirectory) {
    let (url, directory) = ReferenceDirectory::start(DirectoryServerConfig::new(
        InstanceUuid::parse("inst-1").unwrap(),
    ))
    .await
    .unwrap();
    for uuid in uuids {
        directory.change(|m| m.upsert_workspace(workspace(uuid)));
    }
    (url, directory)
}

/// The service with its directory projection reading the provider at `url`, trusting `keys`.
async fn service(url: String, keys: Vec<(String, [u8; 32])>) -> Harness {
    Harness::start_with(Default::default(), |c| {
        c.directory = Some(settings(url, keys))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_status_reports_a_ready_projection_at_the_provider_cursor() {
    let (url, directory) = provider(&["ws-1", "ws-2"]).await;
    let target = directory.cursor();
    let keys = directory.trusted_public_keys();
    let h = service(url, keys).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        let (code, status) = h.get("/v1/directory/status").await;
        assert_eq!(code, 200, "{status}");
        if status["ready"] == true && status["cursor"].as_i64() == Some(target) {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never caught up: {status}"
        );
        // Real time: the service under test runs on its own runtime and answers over HTTP.
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status["configured"], true);
    assert_eq!(status["instance_uuid"], "inst-1");
    assert_eq!(status["resources"]["active_workspaces"], 2);
    assert!(
        status["staleness_seconds"].as_f64().unwrap() < 30.0,
        "{status}"
    );
    let (code, ready) = h.get("/readyz").await;
    assert_eq!((code, ready["directory"].clone()), (200, "ready".into()));
    let metrics = h.metrics().await;
    assert!(
        metrics.contains("tenantry_directory_staleness_seconds"),
        "{metrics}"
    );
}

#[tokio::test]
async fn readyz_fails_closed_while_the_directory_was_never_synced() {
    // A provider that is gone: the projector never completes a sync.
    let (url, directory) = provider(&[]).await;
    let keys = directory.trusted_public_keys();
    directory.shutdown().await;
    let start = Harness::start_with(Default::default(), |c| {
        c.directory = Some(settings(url, keys))
    });
    let h = match tokio::time::timeout(Duration::from_secs(20), start).await {
        Ok(h) => h,
        Err(_) => panic!("service did not start"),
    };
    let (code, body) = h.get("/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["code"], "DIRECTORY_NOT_READY");
    let (code, status) = h.get("/v1/directory/status").await;
    assert_eq!(code, 200);
    assert_eq!(status["ready"], false);
    assert!(status["not_ready_reason"].as_str().is_some(), "{status}");
}

/// Polls `/v1/directory/status` until `done` accepts it (20 s at most).
async fn wait_status(h: &Harness, done: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (code, status) = h.get("/v1/directory/status").await;
        assert_eq!(code, 200, "{status}");
        if done(&status) {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up at {status}"
        );
        // Real time: the service under test runs on its own runtime and answers over HTTP.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_001_workspace_suspended_without_member_revisions_keeps_the_service_ready() {
    let (url, directory) = provider(&["ws-1"]).await;
    let keys = directory.trusted_public_keys();
    let h = service(url, keys).await;
    let ws = WorkspaceUuid::parse("ws-1").unwrap();
    let target = directory.cursor();
    wait_status(&h, |s| {
        s["ready"] == true && s["cursor"].as_i64() == Some(target)
    })
    .await;
    for status in [
        WorkspaceStatus::Suspended,
        WorkspaceStatus::Active,
        WorkspaceStatus::Archived,
    ] {
        directory
            .change(|m| m.set_workspace_status(&ws, status))
            .unwrap();
        let target = directory.cursor();
        let s = wait_status(&h, |s| {
            s["ready"] == true && s["cursor"].as_i64() == Some(target)
        })
        .await;
        assert!(s["last_refusal"].is_null(), "{status:?}: {s}");
    }
    let (code, _) = h.get("/readyz").await;
    assert_eq!(code, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_answer_shows_in_status_and_metrics_with_rule_and_workspace() {
    let (url, directory) = provider(&["ws-1", "ws-2"]).await;
    let keys = directory.trusted_public_keys();
    let h = service(url, keys).await;
    let target = directory.cursor();
    wait_status(&h, |s| {
        s["ready"] == true && s["cursor"].as_i64() == Some(target)
    })
    .await;
    // The directory gives acc-1 another membership uuid in ws-2: a rule refuses that answer.
    let mut changed = workspace("ws-2");
    changed.members[0].membership_uuid = MembershipUuid::parse("m-other").unwrap();
    directory.change(|m| m.upsert_workspace(changed));
    let status = wait_status(&h, |s| s["last_refusal"]["count"].as_u64() >= Some(2)).await;
    let refusal = &status["last_refusal"];
    assert_eq!(refusal["rule"], "membership_uuid_changed", "{status}");
    assert_eq!(refusal["workspace"], "ws-2", "{status}");
    assert!(refusal["since"].as_str().is_some(), "{status}");
    assert!(refusal["resolved_at"].is_null(), "{status}");
    assert!(
        status["refusals_total"]["membership_uuid_changed"].as_u64() >= Some(2),
        "{status}"
    );
    let metrics = h.metrics().await;
    assert!(
        metrics.contains("tenantry_directory_refusals_total{reason=\"membership_uuid_changed\"}"),
        "{metrics}"
    );
    // The directory corrects itself: the projection moves again and the refusal is resolved.
    directory.change(|m| m.upsert_workspace(workspace("ws-2")));
    let target = directory.cursor();
    let status = wait_status(&h, |s| {
        s["ready"] == true && s["cursor"].as_i64() == Some(target)
    })
    .await;
    assert!(
        status["last_refusal"]["resolved_at"].as_str().is_some(),
        "{status}"
    );
}

/// `serve` restarted on the same database resumes the projection it finds there: no second
/// snapshot is fetched, and the replica is ready again after one events call; a change made
/// while it was down is applied from the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_service_resumes_from_the_projection_in_its_database() {
    use tenantry_testkit::fault::Route;
    let (url, directory) = provider(&["ws-1", "ws-2"]).await;
    let keys = directory.trusted_public_keys();
    let mut h = service(url, keys).await;
    let target = directory.cursor();
    wait_status(&h, |s| {
        s["ready"] == true && s["cursor"].as_i64() == Some(target)
    })
    .await;
    h.stop().await;
    let snapshots = directory.requests()[&Route::DirectorySnapshot];
    assert_eq!(snapshots, 1);

    directory.change(|m| m.upsert_workspace(workspace("ws-3")));
    let target = directory.cursor();
    h.restart().await;
    let status = wait_status(&h, |s| {
        s["ready"] == true && s["cursor"].as_i64() == Some(target)
    })
    .await;
    assert_eq!(
        directory.requests()[&Route::DirectorySnapshot],
        snapshots,
        "the restart fetched no snapshot: {status}"
    );
    assert_eq!(status["projection_cursor"].as_i64(), Some(target));
    let (code, _) = h.get("/readyz").await;
    assert_eq!(code, 200);
}

/// The capacity settings reach the projector: a directory over
/// `directory_max_snapshot_workspaces` is refused naming that setting, and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_over_its_configured_limit_is_refused_naming_the_setting() {
    let (url, directory) = provider(&["ws-1", "ws-2"]).await;
    let keys = directory.trusted_public_keys();
    let h = Harness::start_with(Default::default(), |c| {
        c.directory = Some(settings(url, keys));
        c.directory_capacity.limits.max_snapshot_workspaces = 1;
    })
    .await;
    let status = wait_status(&h, |s| !s["last_refusal"].is_null()).await;
    let refusal = &status["last_refusal"];
    assert_eq!(refusal["rule"], "snapshot_workspace_capacity", "{status}");
    assert!(
        refusal["message"]
            .as_str()
            .unwrap()
            .contains("raise the setting directory_max_snapshot_workspaces"),
        "{status}"
    );
    assert_eq!(status["ready"], false);
    let metrics = h.metrics().await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("tenantry_directory_capacity_refusals_total{")
                && l.contains("limit=\"max_snapshot_workspaces\"")
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(!line.ends_with(" 0"), "{line}");
}
