//! Fence administration as the operator uses it (moved from the app with the use case): the
//! records of every binding as [`FenceView`]s, the per-kind count of the gauge, and clearing
//! with a tombstone (nothing written when nothing is fenced).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::json;
use tenantry_engine::scoped_writes::ScopedWrites;
use tenantry_engine::scoped_writes::admin::ClearTarget;
use tenantry_fence::{Binding, FenceMarker, RecordKind, ScopeIdentity};
use tenantry_ports::forward;
use tenantry_ports::host_storage::fake::InMemoryHostStorage;
use tenantry_ports::host_storage::{HostStorage, HostStorageError, PrefixedRecord};

fn binding(s: &str) -> Binding {
    Binding::parse(s).unwrap()
}

/// Writes `value` at `key` of binding `b` in `storage`.
async fn put(storage: &impl HostStorage, b: &str, key: &str, value: &serde_json::Value) {
    storage.set(&binding(b), key, value).await.unwrap();
}

#[tokio::test]
async fn fences_are_listed_across_bindings_and_cleared_with_a_tombstone() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let scope = ScopeIdentity::object("kb-1");
    let marker = FenceMarker::new(&scope, "lost ACK on upload", 1_700_000_000_000);
    put(
        &*storage,
        "inst-1",
        scope.fence_key().as_str(),
        &marker.to_value(),
    )
    .await;
    put(
        &*storage,
        "inst-2",
        "ke.fence.v1.installation",
        &json!({"x": 1}),
    )
    .await;
    put(
        &*storage,
        "inst-3",
        "ke.fence.v1.gone",
        &serde_json::Value::Null,
    )
    .await;
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

/// Host storage that hides `records_with_key_prefix` (the default `None`): fences are then
/// counted binding by binding.
struct OneByOne(Arc<InMemoryHostStorage>);

impl forward::Decorator for OneByOne {
    type Inner = InMemoryHostStorage;
    fn inner(&self) -> &InMemoryHostStorage {
        &self.0
    }
}

impl forward::HostStorage for OneByOne {}

#[async_trait::async_trait]
impl forward::HostStorageBindings for OneByOne {
    async fn records_with_key_prefix(
        &self,
        _key_prefix: &str,
    ) -> Result<Option<Vec<PrefixedRecord>>, HostStorageError> {
        Ok(None)
    }
}

/// The gauge's count reads every record at once when the storage can, and counts exactly
/// what the binding-by-binding listing counts: fences, intents, undecodable records as
/// fences, tombstones and other keys not at all.
#[tokio::test]
async fn fence_counts_read_all_records_at_once_and_match_the_listing() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let deadline = std::time::Duration::from_secs(30);
    let fence = FenceMarker::new(
        &ScopeIdentity::object("kb-1"),
        "lost ACK",
        1_700_000_000_000,
    );
    let mut intent = FenceMarker::new(&ScopeIdentity::object("kb-2"), "upload", 1_700_000_000_000);
    intent.kind = RecordKind::Intent;
    intent.owner = Some("other-process".into());
    intent.expires_at_ms = Some(i64::MAX / 2);
    for (b, scope, value) in [
        ("inst-1", "kb-1", fence.to_value()),
        ("inst-1", "kb-2", intent.to_value()),
        ("inst-2", "kb-3", json!({"not": "a marker"})),
        ("inst-3", "kb-4", serde_json::Value::Null),
    ] {
        put(
            &*storage,
            b,
            ScopeIdentity::object(scope).fence_key().as_str(),
            &value,
        )
        .await;
    }
    put(&*storage, "inst-4", "ke.config.v1.x", &json!(1)).await;
    let at_once = ScopedWrites::for_fence_admin(storage.clone(), deadline);
    let keys_before = storage.calls().keys;
    let fast = at_once.count_fences().await.unwrap();
    assert_eq!(
        storage.calls().keys - keys_before,
        1,
        "one read for every binding"
    );
    let one_by_one = ScopedWrites::for_fence_admin(Arc::new(OneByOne(storage.clone())), deadline);
    let slow = one_by_one.count_fences().await.unwrap();
    assert_eq!(fast, slow);
    assert_eq!(fast[&RecordKind::Fence], 2, "{fast:?}");
    assert_eq!(fast[&RecordKind::Intent], 1, "{fast:?}");
}

/// An intent whose holder is gone past its expiry is a fence for the operator: listed as
/// kind `fence` with failure `intent_expired`, and counted as a fence by the gauge (both the
/// one-read count and the binding-by-binding count), by the store's clock.
#[tokio::test]
async fn an_intent_past_its_expiry_is_listed_and_counted_as_a_fence() {
    use chrono::TimeZone;
    use tenantry_ports::clock::ManualClock;

    let start_ms = 1_700_000_000_000;
    let clock = Arc::new(ManualClock::new(
        chrono::Utc.timestamp_millis_opt(start_ms).unwrap(),
    ));
    // The store's clock (the database's) is the one records are judged on.
    let storage = Arc::new(InMemoryHostStorage::new().with_clock(clock.clone()));
    let scope = ScopeIdentity::object("kb-1");
    let intent = FenceMarker::intent(
        &scope,
        "upload",
        "vanished-process",
        start_ms,
        start_ms + 60_000,
    );
    put(
        &*storage,
        "inst-1",
        scope.fence_key().as_str(),
        &intent.to_value(),
    )
    .await;
    let at_once = ScopedWrites::with_clock(storage.clone(), clock.clone());
    let one_by_one = ScopedWrites::with_clock(Arc::new(OneByOne(storage.clone())), clock.clone());

    // Before its expiry: an intent in flight.
    let views = at_once.fence_views(None).await.unwrap();
    assert_eq!(views[0].kind, RecordKind::Intent, "{views:?}");
    assert_eq!(views[0].failure_kind, None);
    for writes in [
        at_once.count_fences().await,
        one_by_one.count_fences().await,
    ] {
        let counts = writes.unwrap();
        assert_eq!(
            (counts[&RecordKind::Fence], counts[&RecordKind::Intent]),
            (0, 1)
        );
    }

    // At its expiry the holder is gone: a fence.
    clock.advance(std::time::Duration::from_secs(60));
    let views = at_once.fence_views(None).await.unwrap();
    assert_eq!(views[0].kind, RecordKind::Fence, "{views:?}");
    assert_eq!(views[0].failure_kind.as_deref(), Some("intent_expired"));
    assert_eq!(views[0].owner.as_deref(), Some("vanished-process"));
    for writes in [
        at_once.count_fences().await,
        one_by_one.count_fences().await,
    ] {
        let counts = writes.unwrap();
        assert_eq!(
            (counts[&RecordKind::Fence], counts[&RecordKind::Intent]),
            (1, 0)
        );
    }
}
