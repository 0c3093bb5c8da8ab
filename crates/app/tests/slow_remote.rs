//! Measurement (issue 29, "the pool does not hoard"): three `tenantry serve` replicas on one
//! database, the reference KnowledgeFS answering every provision after 5 s, 300 commands.
//! Every replica must send some. Real time (about a minute), so ignored by default:
//! `cargo test -p tenantry-app --test slow_remote -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{Harness, test_config};
use tenantry_app::service::Service;
use tenantry_lifecycle::CommandStatus;
use tenantry_testkit::fault::{Fault, Route, RoutePlan};
use tenantry_testkit::knowledge_fs::RemoteConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "real time: about a minute"]
async fn three_replicas_share_a_backlog_under_a_slow_remote() {
    const COMMANDS: usize = 300;
    let remote = RemoteConfig {
        stall: Duration::from_secs(5),
        ..RemoteConfig::default()
    };
    let tweak = |config: &mut tenantry_app::config::Config| {
        config.workers = 4;
        config.claim_batch = 16;
        config.knowledge_fs_max_concurrent_calls = 8;
        config.lease = Duration::from_secs(30);
        config.knowledge_fs_deadline = Duration::from_secs(20);
    };
    let h = Harness::start_with(remote, tweak).await;
    h.remote.set_plan(
        Route::Provision,
        RoutePlan::random(1.0, vec![(Fault::Stall { commit: true }, 1)]),
    );
    let mut config = test_config(&h.remote);
    tweak(&mut config);
    let mut others = Vec::new();
    for _ in 0..2 {
        others.push(Service::start(&config, h.db.db.clone()).await.unwrap());
    }
    let started = Instant::now();
    for i in 0..COMMANDS {
        h.create("tenant-slow", &format!("cs{i}")).await;
    }
    // Sample every 200 ms: who holds each processing command (a call takes 5 s, so every
    // claim is seen), and the most each replica holds at once.
    let mut claimed_by: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut most_held: BTreeMap<String, usize> = BTreeMap::new();
    loop {
        let commands = h.commands().await;
        let mut held: BTreeMap<String, usize> = BTreeMap::new();
        for command in &commands {
            if command.status == CommandStatus::Processing
                && let Some(owner) = &command.lease_owner
            {
                *held.entry(owner.to_string()).or_default() += 1;
                claimed_by
                    .entry(owner.to_string())
                    .or_default()
                    .insert(command.id.to_string());
            }
        }
        for (owner, n) in held {
            let most = most_held.entry(owner).or_default();
            *most = (*most).max(n);
        }
        if commands.len() == COMMANDS
            && commands
                .iter()
                .all(|c| c.status == CommandStatus::Succeeded)
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(600), "not drained");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let elapsed = started.elapsed();
    let sent: Vec<usize> = claimed_by.values().map(BTreeSet::len).collect();
    println!(
        "{COMMANDS} commands, 3 replicas (8 call slots each), 5 s remote: claimed per replica \
         {sent:?}, most held at once {:?}, drained in {elapsed:.1?}",
        most_held.values().collect::<Vec<_>>()
    );
    for service in others {
        service.shutdown().await;
    }
    assert_eq!(sent.len(), 3, "every replica claims some: {claimed_by:?}");
    assert!(most_held.values().all(|&n| n <= 16), "{most_held:?}");
}
