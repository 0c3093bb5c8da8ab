//! Fence administration as the operator uses it (moved from the app with the use case): the
//! records of every binding as [`FenceView`]s, the per-kind count of the gauge, and clearing
//! with a tombstone (nothing written when nothing is fenced).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use tenantry_engine::scoped_writes::ScopedWrites;
use tenantry_engine::scoped_writes::admin::ClearTarget;
use tenantry_fence::{Binding, FenceMarker, RecordKind, ScopeIdentity};
use tenantry_ports::host_storage::HostStorage;
use tenantry_ports::host_storage::testing::InMemoryHostStorage;

fn binding(s: &str) -> Binding {
    Binding::parse(s).unwrap()
}

#[tokio::test]
async fn fences_are_listed_across_bindings_and_cleared_with_a_tombstone() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let scope = ScopeIdentity::object("kb-1");
    let marker = FenceMarker::new(&scope, "lost ACK on upload", 1_700_000_000_000);
    storage
        .set(
            &binding("inst-1"),
            scope.fence_key().as_str(),
            &marker.to_value(),
        )
        .await
        .unwrap();
    storage
        .set(
            &binding("inst-2"),
            "ke.fence.v1.installation",
            &json!({"x": 1}),
        )
        .await
        .unwrap();
    storage
        .set(
            &binding("inst-3"),
            "ke.fence.v1.gone",
            &serde_json::Value::Null,
        )
        .await
        .unwrap();
    let writes = ScopedWrites::new(storage.clone());
    let views = writes.fence_views(None).await.unwrap();
    assert_eq!(views.len(), 2, "{views:?}");
    assert_eq!(views[0].binding, "inst-1");
    assert_eq!(views[0].scope.as_deref(), Some("kb-1"));
    assert_eq!(views[0].reason.as_deref(), Some("lost ACK on upload"));
    assert_eq!(
        views[0].fenced_at.map(|t| t.timestamp_millis()),
        Some(1_700_000_000_000)
    );
    assert!(views[1].installation);

    let outcome = writes
        .clear(
            &binding("inst-1"),
            &ClearTarget::Scope(scope.clone()),
            "reconciled",
        )
        .await
        .unwrap();
    assert!(outcome.cleared);
    assert_eq!(
        storage
            .get(&binding("inst-1"), scope.fence_key().as_str())
            .await
            .unwrap(),
        Some(serde_json::Value::Null)
    );
    assert_eq!(writes.count_fences().await.unwrap()[&RecordKind::Fence], 1);
    assert_eq!(writes.count_fences().await.unwrap()[&RecordKind::Intent], 0);
}

#[tokio::test]
async fn clearing_an_unfenced_scope_writes_nothing() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let writes = ScopedWrites::new(storage.clone());
    let outcome = writes
        .clear(
            &binding("inst-1"),
            &ClearTarget::Scope(ScopeIdentity::object("kb-9")),
            "nothing there",
        )
        .await
        .unwrap();
    assert!(!outcome.cleared);
    assert_eq!(storage.calls().set, 0);
    assert_eq!(storage.calls().cas, 0);
}
