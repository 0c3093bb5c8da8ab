//! The retention pruner of `tenantry serve`: it runs at start and then every interval, removes
//! expired history from the service's database, and exports its metrics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Harness;
use tenantry_ports::host_storage::HostStorage;
use tenantry_ports::lifecycle::{CommandAdmin, OperatorAction, OperatorActionKind};
use tenantry_store_seaorm::SeaOrmHostStorage;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

#[tokio::test]
async fn serve_prunes_expired_history_and_exports_the_metrics() {
    // Started without the pruner, so the old record below exists before it first runs, and
    // with the product disabled, so the provision stays pending for the operator to abandon.
    let mut h = Harness::start_with(Default::default(), |config| {
        config.retention.enabled = false;
        config.product_enabled = false;
    })
    .await;
    let created = h.create("t-1", "cs-old").await;
    let command_id =
        tenantry_kernel::CommandId::parse(created["command_id"].as_str().expect("a command id"))
            .unwrap();
    let store = SeaOrmLifecycleStore::new(&h.db.db);
    // An operator action 400 days old: past the default 180-day window. Actions are recorded
    // at the store's time, so it is taken by a store whose clock reads then.
    let old_clock =
        tenantry_ports::clock::ManualClock::new(chrono::Utc::now() - chrono::Duration::days(400));
    SeaOrmLifecycleStore::new(&h.db.db)
        .with_clock(std::sync::Arc::new(old_clock))
        .act_on_command(&OperatorAction {
            action_id: "act-old".into(),
            command_id: command_id.clone(),
            kind: OperatorActionKind::Abandon,
            actor: "ops".into(),
            reason: "retention test".into(),
            at: chrono::Utc::now() - chrono::Duration::days(400),
        })
        .await
        .unwrap();
    assert_eq!(store.command_actions(&command_id).await.unwrap().len(), 1);
    // A fence record cleared 30 days ago (past the default 7-day window), and a fence.
    let binding = tenantry_fence::Binding::parse("inst-retention").unwrap();
    let month_ago =
        tenantry_ports::clock::ManualClock::new(chrono::Utc::now() - chrono::Duration::days(30));
    let storage = SeaOrmHostStorage::new(&h.db.db).with_clock(std::sync::Arc::new(month_ago));
    let (cleared, fenced) = ("ke.fence.v1.cleared", "ke.fence.v1.fenced");
    storage
        .set(&binding, cleared, &serde_json::Value::Null)
        .await
        .unwrap();
    let fence = serde_json::json!({"reason": "lost", "kind": "fence"});
    storage.set(&binding, fenced, &fence).await.unwrap();
    h.stop().await;

    h.config.retention.enabled = true;
    h.restart().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !store.command_actions(&command_id).await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pruner did not remove the expired action"
        );
        // Real time: the service under test prunes on its own tasks.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while storage.get(&binding, cleared).await.unwrap().is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the pruner did not remove the cleared fence record"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(storage.get(&binding, fenced).await.unwrap(), Some(fence));
    let metrics = h.metrics().await;
    // The recorder is process-wide: check the series exist.
    for series in [
        "tenantry_retention_removed_total{kind=\"operator_actions\"}",
        "tenantry_retention_oldest_age_seconds{kind=\"finished_commands\"}",
        "tenantry_retention_oldest_age_seconds{kind=\"inbox_receipts\"}",
        "tenantry_retention_removed_total{kind=\"cleared_fences\"}",
    ] {
        assert!(
            metrics.contains(series),
            "{series} missing from:\n{metrics}"
        );
    }
    h.stop().await;
}
