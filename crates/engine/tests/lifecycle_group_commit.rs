//! Group commit over the SeaORM store, on SQLite (default) or PostgreSQL
//! (`TENANTRY_TEST_PG_URL`): the saga settles every command exactly once through shared
//! transactions, and a batch with a stale lease refuses exactly that item.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tenantry_engine::lifecycle::{
    Dispatcher, DispatcherConfig, GroupCommitConfig, GroupCommitStore, ManualClock,
};
use tenantry_kernel::{KnowledgeSpaceId, LeaseOwner};
use tenantry_lifecycle::{CommandStatus, ControlSpaceState, Settlement, Transition};
use tenantry_ports::lifecycle::conformance::create_plan;
use tenantry_ports::lifecycle::fake::FakeKnowledgeFs;
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandFilter, CommandQueue, ControlSpaceReader, IntakeStore, SettleError,
};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_900_000_000 + seconds, 0)
        .single()
        .unwrap()
}

fn claim(who: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        owner: LeaseOwner::parse(who).unwrap(),
        lease_duration: Duration::from_secs(60),
        include_provision: true,
        limit,
        call_deadline: std::time::Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_drains_sagas_exactly_once_on_the_database() {
    let db = fresh_database().await;
    let store = SeaOrmLifecycleStore::new(&db.db);
    for i in 0..60 {
        store
            .submit(&create_plan(&format!("cs{i}"), &format!("k{i}"), t(0)))
            .await
            .unwrap();
    }
    let remote = FakeKnowledgeFs::new();
    let dispatcher = Arc::new(Dispatcher::new(
        GroupCommitStore::start(store.clone(), GroupCommitConfig::default()),
        remote.clone(),
        DispatcherConfig::default(),
    ));
    // Three workers claim concurrently until nothing is due.
    let mut workers = Vec::new();
    for w in 0..3 {
        let dispatcher = dispatcher.clone();
        workers.push(tokio::spawn(async move {
            let owner = LeaseOwner::parse(format!("w{w}")).unwrap();
            let mut completed = 0;
            loop {
                let results = dispatcher.dispatch_batch(&owner, true, 8).await.unwrap();
                if results.is_empty() {
                    return completed;
                }
                completed += results
                    .iter()
                    .filter(|r| r.as_ref().is_ok_and(|o| o.completed))
                    .count();
            }
        }));
    }
    let mut completed = 0;
    for worker in workers {
        completed += worker.await.unwrap();
    }
    assert_eq!(completed, 60);
    assert_eq!(remote.counters().calls.get("provision"), Some(&60));
    let rows = store
        .list_commands(&CommandFilter {
            limit: 1000,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(rows.len(), 60);
    for row in rows {
        assert_eq!(row.status, CommandStatus::Succeeded);
        let space = store
            .control_space(&row.tenant_id, &row.control_space_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(space.state, ControlSpaceState::Active);
        assert_eq!(
            space.resource_version, 2,
            "one compare-and-set per provision"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_on_the_database_refuses_only_the_stale_lease() {
    let db = fresh_database().await;
    let clock = ManualClock::new(t(0));
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock.clone()));
    for i in 0..3 {
        store
            .submit(&create_plan(&format!("cs{i}"), &format!("k{i}"), t(0)))
            .await
            .unwrap();
    }
    let mut mine = store.claim(&claim("w1", 3)).await.unwrap();
    mine.sort_by(|a, b| a.control_space_id.cmp(&b.control_space_id));
    // cs1's lease expires and w2 takes the command over.
    clock.set(t(61));
    let taken = store.claim(&claim("w2", 1)).await.unwrap();
    assert_eq!(taken.len(), 1);
    let lost_index = mine.iter().position(|c| c.id() == taken[0].id()).unwrap();
    let group = GroupCommitStore::start(store.clone(), GroupCommitConfig::default());
    let mut settles = Vec::new();
    let mut before = Vec::new();
    for command in &mine {
        let cs = store
            .control_space(&command.tenant_id, &command.control_space_id)
            .await
            .unwrap()
            .unwrap();
        before.push(cs.clone());
        let cas = cs
            .plan(
                &[Transition::Activate {
                    operation_id: cs.lifecycle_operation_id.clone(),
                    knowledge_space_id: KnowledgeSpaceId::parse(format!("ks-{}", command.id()))
                        .unwrap(),
                    revision: 1,
                }],
                t(62),
            )
            .unwrap();
        let group = group.clone();
        let lease = command.lease.clone();
        settles.push(async move {
            group
                .settle(&lease, &Settlement::ack(t(62)).with_control_space(cas))
                .await
        });
    }
    let results = futures::future::join_all(settles).await;
    for (i, result) in results.into_iter().enumerate() {
        let command = &mine[i];
        let space = store
            .control_space(&command.tenant_id, &command.control_space_id)
            .await
            .unwrap()
            .unwrap();
        if i == lost_index {
            assert_eq!(
                result,
                Err(SettleError::LeaseLost {
                    command_id: command.id().clone()
                })
            );
            assert_eq!(space, before[i], "no compare-and-set without the lease");
        } else {
            assert_eq!(result, Ok(()));
            assert_eq!(space.state, ControlSpaceState::Active);
        }
    }
    // w2 still holds its lease and settles.
    group
        .settle(&taken[0].lease, &Settlement::ack(t(63)))
        .await
        .unwrap();
}
