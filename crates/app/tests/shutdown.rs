//! Graceful shutdown: in-flight dispatches settle within the grace period; a dispatch cut off
//! past it loses nothing, because the command is re-claimed after a restart once its lease
//! expires, and the remote effect happens exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Harness;
use tenantry_lifecycle::CommandStatus;
use tenantry_testkit::fault::{Fault, Route};
use tenantry_testkit::knowledge_fs::RemoteConfig;

/// Waits until the remote has received `n` provision requests.
async fn wait_provision_requests(h: &Harness, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h
        .remote
        .truth()
        .requests()
        .get(&Route::Provision)
        .copied()
        .unwrap_or(0)
        < n
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no provision request"
        );
        // Real time: the service under test runs on its own runtime and answers over HTTP.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_an_in_flight_dispatch_settle() {
    let remote = RemoteConfig {
        stall: Duration::from_millis(800),
        ..RemoteConfig::default()
    };
    let mut h = Harness::start_with(remote, |_| {}).await;
    h.remote
        .script(Route::Provision, [Some(Fault::Stall { commit: true })]);
    h.create("t-1", "cs-1").await;
    wait_provision_requests(&h, 1).await;
    // The provision call is stalled inside the remote right now.
    let report = h.stop().await;
    assert_eq!(report.workers_aborted, 0, "{report:?}");
    let commands = h.commands().await;
    assert_eq!(commands.len(), 1);
    assert_eq!(
        commands[0].status,
        CommandStatus::Succeeded,
        "the in-flight dispatch settled before shutdown returned: {commands:?}"
    );
    assert_eq!(h.remote.truth().effects().spaces_created, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_in_flight_dispatch_loses_nothing_after_restart() {
    let remote = RemoteConfig {
        stall: Duration::from_secs(3),
        ..RemoteConfig::default()
    };
    let mut h = Harness::start_with(remote, |c| {
        c.shutdown_grace = Duration::ZERO;
        c.lease = Duration::from_secs(2);
        c.knowledge_fs_deadline = Duration::from_millis(1500);
    })
    .await;
    h.remote
        .script(Route::Provision, [Some(Fault::Stall { commit: true })]);
    h.create("t-1", "cs-1").await;
    wait_provision_requests(&h, 1).await;
    // Grace zero: the dispatch is cut off mid-call, after the remote committed.
    let report = h.stop().await;
    assert!(report.workers_aborted > 0, "{report:?}");
    let commands = h.commands().await;
    assert_eq!(
        commands[0].status,
        CommandStatus::Processing,
        "{commands:?}"
    );

    h.restart().await;
    let cs = h
        .wait_state("t-1", "cs-1", "active", Duration::from_secs(30))
        .await;
    let commands = h.commands().await;
    assert_eq!(commands[0].status, CommandStatus::Succeeded, "{commands:?}");
    assert!(commands[0].attempt_count >= 2, "{commands:?}");
    let truth = h.remote.truth();
    assert_eq!(
        truth.effects().spaces_created,
        1,
        "exactly one remote space"
    );
    assert_eq!(truth.check_exactly_once(), Ok(()));
    let space = &truth.spaces()[0];
    assert_eq!(cs["knowledge_space_id"], space.knowledge_space_id.as_str());
    h.stop().await;
}
