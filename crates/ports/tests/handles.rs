//! Every port accepts the handles a host already has: `Arc<T>`, `Box<T>` / `Box<dyn Port>` and
//! `&T` are passed where a generic `S: Port` is expected, and each call reaches the inner value.
#![cfg(feature = "testing")]
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use chrono::{TimeZone, Utc};
use serde_json::json;
use tenantry_directory::{InstanceUuid, WorkspaceUuid};
use tenantry_fence::Binding;
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, OperationId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::CommandStatus;
use tenantry_lifecycle::intake::{CreateControlSpace, NewIds};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::directory::fake::{
    HookCall, InMemoryProjectionStore, RecordingHooks, ScriptedProvider,
};
use tenantry_ports::directory::{
    DirectoryProjectionStore, DirectoryProvider, EntitlementReconciler, ProviderError,
};
use tenantry_ports::host_storage::fake::InMemoryHostStorage;
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings};
use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, InMemoryLifecycleStore};
use tenantry_ports::lifecycle::{
    CommandAdmin, ControlSpaceReader, IntakeStore, KnowledgeFs, LifecycleMetrics, LifecycleStore,
    MetricsError, NoMetrics, Submitted, TaskMetric, TaskStatus,
};

fn start() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
}

async fn submit_one<S: LifecycleStore>(store: S, key: &str) -> Submitted {
    let request = CreateControlSpace::new(
        TenantId::parse("t1").unwrap(),
        ControlSpaceId::parse(format!("cs-{key}")).unwrap(),
        IdempotencyKey::parse(key).unwrap(),
        "Name",
        "slug",
    );
    let plan = request
        .plan(
            NewIds {
                command_id: CommandId::parse(format!("cmd-{key}")).unwrap(),
                operation_id: OperationId::parse(format!("op-{key}")).unwrap(),
            },
            start(),
        )
        .unwrap();
    store.submit(&plan).await.unwrap()
}

async fn exists<S: ControlSpaceReader>(store: S, key: &str) -> bool {
    store
        .control_space(
            &TenantId::parse("t1").unwrap(),
            &ControlSpaceId::parse(format!("cs-{key}")).unwrap(),
        )
        .await
        .unwrap()
        .is_some()
}

async fn pending<S: CommandAdmin>(store: S) -> u64 {
    store
        .count_commands(&[CommandStatus::Pending])
        .await
        .unwrap()
        .iter()
        .map(|c| c.count)
        .sum()
}

#[tokio::test]
async fn lifecycle_store_ports_accept_arc_box_and_borrow() {
    let clock = ManualClock::new(start());
    let store = Arc::new(InMemoryLifecycleStore::with_clock(Arc::new(clock)));
    assert!(matches!(
        submit_one(Arc::clone(&store), "a").await,
        Submitted::Created(_)
    ));
    assert!(matches!(
        submit_one(&*store, "b").await,
        Submitted::Created(_)
    ));
    let boxed: Box<dyn IntakeStore> = Box::new(Arc::clone(&store));
    let existing = boxed
        .command_by_idempotency_key(&IdempotencyKey::parse("a").unwrap())
        .await
        .unwrap();
    assert!(existing.is_some());
    assert!(exists(&store, "a").await);
    assert!(exists(Arc::clone(&store) as Arc<dyn ControlSpaceReader>, "b").await);
    assert_eq!(pending(&*store).await, 2);
    assert_eq!(pending(Arc::clone(&store)).await, 2);
}

async fn lookup<R: KnowledgeFs>(remote: R) {
    let found = remote
        .find_by_provisioning_key(
            &TenantId::parse("t1").unwrap(),
            &ProvisioningKey::parse("pk").unwrap(),
            &ControlSpaceId::parse("cs").unwrap(),
        )
        .await
        .unwrap();
    assert!(found.is_none());
}

#[derive(Default)]
struct CountingMetrics(std::sync::atomic::AtomicUsize);

impl LifecycleMetrics for CountingMetrics {
    fn record_task(&self, _metric: &TaskMetric) -> Result<(), MetricsError> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

fn record<M: LifecycleMetrics>(metrics: M) {
    metrics
        .record_task(&TaskMetric {
            operation: "provision".into(),
            status: TaskStatus::Running,
            duration_seconds: None,
            error_code: None,
        })
        .unwrap();
}

fn read<C: Clock>(clock: C) -> chrono::DateTime<Utc> {
    clock.now()
}

#[tokio::test]
async fn remote_metrics_and_clock_ports_accept_arc_box_and_borrow() {
    let remote = Arc::new(FakeKnowledgeFs::new());
    lookup(&*remote).await;
    lookup(Arc::clone(&remote)).await;
    lookup(Box::new(Arc::clone(&remote)) as Box<dyn KnowledgeFs>).await;
    assert_eq!(remote.counters().calls.get("lookup"), Some(&3));

    let metrics = Arc::new(CountingMetrics::default());
    record(&*metrics);
    record(Arc::clone(&metrics) as Arc<dyn LifecycleMetrics>);
    record(Box::new(NoMetrics));
    assert_eq!(metrics.0.load(std::sync::atomic::Ordering::Relaxed), 2);

    let clock = ManualClock::new(start());
    assert_eq!(read(&clock), start());
    assert_eq!(read(Arc::new(clock.clone()) as Arc<dyn Clock>), start());
    assert_eq!(read(Box::new(clock)), start());
}

async fn write<S: HostStorage>(storage: S, key: &str) {
    storage
        .set(&Binding::parse("inst").unwrap(), key, &json!(1))
        .await
        .unwrap();
}

/// `compare_and_set_now` of `key` from 1 to 2 through the handle `storage`.
async fn swap_now<S: HostStorage>(storage: S, binding: &Binding, key: &str) -> Option<bool> {
    storage
        .compare_and_set_now(binding, key, Some(&Arc::new(json!(1))), &Arc::new(json!(2)))
        .map(Result::unwrap)
}

async fn bindings<S: HostStorageBindings>(storage: S) -> usize {
    storage.bindings_with_key_prefix("").await.unwrap().len()
}

#[tokio::test]
async fn host_storage_ports_accept_arc_box_and_borrow() {
    let storage = Arc::new(InMemoryHostStorage::new());
    write(&*storage, "a").await;
    write(Arc::clone(&storage), "b").await;
    write(Box::new(Arc::clone(&storage)) as Box<dyn HostStorage>, "c").await;
    assert_eq!(
        storage
            .keys(&Binding::parse("inst").unwrap())
            .await
            .unwrap(),
        ["a", "b", "c"]
    );
    assert_eq!(bindings(&*storage).await, 1);
    assert_eq!(bindings(Arc::clone(&storage)).await, 1);
    // The immediate methods (default `None`) are forwarded too, so the fake's answers are
    // not hidden behind a handle.
    let inst = Binding::parse("inst").unwrap();
    let handle = Box::new(Arc::clone(&storage)) as Box<dyn HostStorage>;
    assert_eq!(
        handle.get_now(&inst, "a").unwrap().unwrap(),
        Some(Arc::new(json!(1)))
    );
    assert_eq!(swap_now(&*storage, &inst, "b").await, Some(true));
    assert_eq!(storage.peek(&inst, "b"), Some(Ok(json!(2))));
}

async fn snapshot<P: DirectoryProvider>(provider: P) -> ProviderError {
    provider
        .fetch_snapshot(&InstanceUuid::parse("inst").unwrap())
        .await
        .unwrap_err()
}

async fn state<S: DirectoryProjectionStore>(store: S) -> bool {
    store
        .projection_state(&InstanceUuid::parse("inst").unwrap())
        .await
        .unwrap()
        .is_some()
}

async fn reconcile<H: EntitlementReconciler>(hooks: H) {
    let active = BTreeSet::from([WorkspaceUuid::parse("ws-1").unwrap()]);
    hooks
        .reconcile_active_workspaces(&InstanceUuid::parse("inst").unwrap(), &active)
        .await
        .unwrap();
}

#[tokio::test]
async fn directory_ports_accept_arc_box_and_borrow() {
    let provider = Arc::new(ScriptedProvider::new());
    for _ in 0..2 {
        provider.push_snapshot(Err(ProviderError::unavailable("down")));
    }
    assert!(matches!(
        snapshot(&*provider).await,
        ProviderError::Unavailable { .. }
    ));
    assert!(matches!(
        snapshot(Arc::clone(&provider) as Arc<dyn DirectoryProvider>).await,
        ProviderError::Unavailable { .. }
    ));
    assert_eq!(provider.calls().len(), 2);

    let store = Arc::new(InMemoryProjectionStore::new());
    assert!(!state(&*store).await);
    assert!(!state(Arc::clone(&store)).await);
    assert!(!state(Box::new(Arc::clone(&store))).await);

    let hooks = Arc::new(RecordingHooks::new());
    reconcile(&*hooks).await;
    reconcile(Arc::clone(&hooks)).await;
    reconcile(Box::new(Arc::clone(&hooks)) as Box<dyn EntitlementReconciler>).await;
    assert_eq!(
        hooks
            .calls()
            .iter()
            .filter(|c| matches!(c, HookCall::Reconcile { .. }))
            .count(),
        3
    );
}

/// A store and a provider whose page-by-page methods differ from their defaults: a handle must
/// reach the override (the service holds its store as `Arc<dyn ProjectionStore>`; a default
/// reached instead joins a spooled snapshot in memory).
struct PagedOnly;

#[async_trait::async_trait]
impl tenantry_ports::directory::SnapshotApplier for PagedOnly {
    async fn apply_snapshot(
        &self,
        _ctx: &tenantry_directory::ApplyContext,
        _snapshot: &tenantry_directory::DirectorySnapshot,
        _events: &[tenantry_directory::DirectoryEvent],
    ) -> Result<tenantry_directory::ApplyOutcome, tenantry_ports::directory::ProjectionStoreError>
    {
        Err(tenantry_ports::directory::ProjectionStoreError::storage(
            "joined",
        ))
    }

    async fn apply_snapshot_source(
        &self,
        _ctx: &tenantry_directory::ApplyContext,
        _source: &tenantry_ports::directory::AnySnapshotSource,
        _events: &[tenantry_directory::DirectoryEvent],
    ) -> Result<tenantry_directory::ApplyOutcome, tenantry_ports::directory::ProjectionStoreError>
    {
        Err(tenantry_ports::directory::ProjectionStoreError::storage(
            "paged",
        ))
    }
}

#[async_trait::async_trait]
impl DirectoryProvider for PagedOnly {
    async fn fetch_snapshot(
        &self,
        _instance: &InstanceUuid,
    ) -> Result<tenantry_directory::DirectorySnapshot, ProviderError> {
        Err(ProviderError::unavailable("joined"))
    }

    async fn fetch_snapshot_source(
        &self,
        _instance: &InstanceUuid,
    ) -> Result<Box<dyn tenantry_ports::directory::SnapshotSource>, ProviderError> {
        Err(ProviderError::unavailable("paged"))
    }

    async fn fetch_events(
        &self,
        _instance: &InstanceUuid,
        _after: i64,
        _limit: u32,
    ) -> Result<tenantry_directory::DirectoryEventBatch, ProviderError> {
        Err(ProviderError::unavailable("events"))
    }

    async fn fetch_workspaces(
        &self,
        _instance: &InstanceUuid,
        _workspace_uuids: &[WorkspaceUuid],
    ) -> Result<tenantry_directory::DirectoryDelta, ProviderError> {
        Err(ProviderError::unavailable("workspaces"))
    }
}

async fn apply_source<S: tenantry_ports::directory::SnapshotApplier>(store: S) -> String {
    let ctx = tenantry_directory::ApplyContext {
        instance: InstanceUuid::parse("inst").unwrap(),
        limits: tenantry_directory::ProjectionLimits::default(),
        now: start(),
        max_staleness: std::time::Duration::from_secs(60),
    };
    let snapshot = tenantry_directory::DirectorySnapshot {
        instance_uuid: ctx.instance.clone(),
        cursor: 1,
        generated_at: start(),
        workspaces: Vec::new(),
    };
    store
        .apply_snapshot_source(&ctx, &snapshot, &[])
        .await
        .unwrap_err()
        .to_string()
}

async fn fetch_source<P: DirectoryProvider>(provider: P) -> String {
    match provider
        .fetch_snapshot_source(&InstanceUuid::parse("inst").unwrap())
        .await
    {
        Ok(_) => "a source".into(),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn handles_reach_the_page_by_page_overrides() {
    let inner = Arc::new(PagedOnly);
    for message in [
        apply_source(&*inner).await,
        apply_source(Arc::clone(&inner)).await,
        apply_source(Arc::clone(&inner) as Arc<dyn tenantry_ports::directory::SnapshotApplier>)
            .await,
        apply_source(Box::new(Arc::clone(&inner))).await,
    ] {
        assert!(message.contains("paged"), "{message}");
    }
    for message in [
        fetch_source(&*inner).await,
        fetch_source(Arc::clone(&inner)).await,
        fetch_source(Arc::clone(&inner) as Arc<dyn DirectoryProvider>).await,
        fetch_source(Box::new(Arc::clone(&inner))).await,
    ] {
        assert!(message.contains("paged"), "{message}");
    }
}
