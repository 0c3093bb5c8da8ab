//! Behaviour tests of the saga dispatcher, intake and worker over the in-memory fakes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use tenantry_kernel::{
    CommandId, ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, LeaseEpoch, LeaseOwner,
    ProvisioningKey, TenantId,
};
use tenantry_lifecycle::ErrorCode;
use tenantry_lifecycle::intake::{
    CreateControlSpace, IntakeError, RequestDeletion, RequestRevocation,
};
use tenantry_lifecycle::{
    CommandRecord, CommandStatus, ControlSpace, ControlSpaceState, DeletionProgress,
    DeletionRequest, Operation, ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest,
};
use tenantry_ports::forward;
use tenantry_ports::lifecycle::fake::{
    FakeKnowledgeFs, InMemoryLifecycleStore, RemoteCall, RemoteFault,
};
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandQueue, ControlSpaceReader, KnowledgeFs, LifecycleMetrics, MetricsError,
    RemoteError, TaskMetric, TaskStatus,
};
use tokio::sync::{Notify, watch};

use super::*;

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_900_000_000 + seconds, 0)
        .single()
        .unwrap()
}

/// A pool leased to `pool` with `slots` remote-call slots (claim batch 1), polling every
/// 100 ms when idle.
fn polling_pool<S, R>(dispatcher: Arc<Dispatcher<S, R>>, slots: u32) -> WorkerPool<S, R>
where
    S: tenantry_ports::lifecycle::LifecycleStore + 'static,
    R: KnowledgeFs + 'static,
{
    WorkerPool::new(
        dispatcher,
        owner("pool"),
        slots,
        WorkerConfig {
            idle_poll: Duration::from_millis(100),
            claim_batch: 1,
            ..WorkerConfig::default()
        },
    )
}

fn tenant() -> TenantId {
    TenantId::parse("tenant-1").unwrap()
}

fn cs_id(name: &str) -> ControlSpaceId {
    ControlSpaceId::parse(name).unwrap()
}

fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::parse(name).unwrap()
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::parse(k).unwrap()
}

struct Harness {
    store: InMemoryLifecycleStore,
    remote: FakeKnowledgeFs,
    intake: CommandIntake<InMemoryLifecycleStore>,
    dispatcher: Dispatcher<InMemoryLifecycleStore, FakeKnowledgeFs>,
}

thread_local! {
    /// The test's clock: the harness sets it; it plays the database clock of the fake store and
    /// the process clock of every dispatcher. (`#[tokio::test]` runs a test, spawned tasks
    /// included, on one thread.)
    static TEST_CLOCK: ManualClock = ManualClock::new(t(0));
}

fn clock_of_test() -> ManualClock {
    TEST_CLOCK.with(Clone::clone)
}

/// Moves the test clock to `now` and passes `enabled` through: `dispatch_one(&w, at(t(5), true))`
/// dispatches when the store's clock reads `t(5)`.
fn at(now: DateTime<Utc>, enabled: bool) -> bool {
    clock_of_test().set(now);
    enabled
}

fn harness() -> Harness {
    let clock = clock_of_test();
    clock.set(t(0));
    let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
    let remote = FakeKnowledgeFs::new();
    let counter = Arc::new(AtomicUsize::new(0));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()))
        .with_id_source(move || format!("id-{}", counter.fetch_add(1, Ordering::Relaxed)));
    let dispatcher = Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default())
        .with_clock(Arc::new(clock_of_test()));
    Harness {
        store,
        remote,
        intake,
        dispatcher,
    }
}

fn create_request(cs: &str, k: &str) -> CreateControlSpace {
    CreateControlSpace::new(tenant(), cs_id(cs), key(k), format!("Space {cs}"), cs)
        .with_icon("book")
}

fn delete_request(cs: &str, k: &str) -> RequestDeletion {
    RequestDeletion {
        tenant_id: tenant(),
        control_space_id: cs_id(cs),
        idempotency_key: key(k),
    }
}

impl Harness {
    async fn create(&self, cs: &str) -> IntakeReceipt {
        self.intake
            .create_control_space(&create_request(cs, &format!("create-{cs}")))
            .await
            .unwrap()
    }

    /// A provision of control space `cs` for another tenant than [`tenant`]'s.
    async fn create_for(&self, tenant: &str, cs: &str) -> IntakeReceipt {
        let request = CreateControlSpace::new(
            TenantId::parse(tenant).unwrap(),
            cs_id(cs),
            key(&format!("create-{cs}")),
            format!("Space {cs}"),
            cs,
        );
        self.intake.create_control_space(&request).await.unwrap()
    }

    async fn delete(&self, cs: &str) -> IntakeReceipt {
        self.intake
            .request_deletion(&delete_request(cs, &format!("delete-{cs}")))
            .await
            .unwrap()
    }

    async fn space(&self, cs: &str) -> ControlSpace {
        self.store
            .control_space(&tenant(), &cs_id(cs))
            .await
            .unwrap()
            .unwrap()
    }

    fn command(&self, id: &CommandId) -> CommandRecord {
        self.store.command(id).unwrap()
    }
    /// Another dispatcher of this store and remote (default configuration) reading `clock`.
    fn dispatcher_on(
        &self,
        clock: ManualClock,
    ) -> Dispatcher<InMemoryLifecycleStore, FakeKnowledgeFs> {
        Dispatcher::new(
            self.store.clone(),
            self.remote.clone(),
            DispatcherConfig::default(),
        )
        .with_clock(Arc::new(clock))
    }

    async fn dispatch(&self, now: DateTime<Utc>, enabled: bool) -> DispatchReport {
        self.dispatcher
            .dispatch_one(&owner("w1"), at(now, enabled))
            .await
            .unwrap()
    }

    /// Dispatches until nothing is due at `at`.
    async fn drain(&self, at: DateTime<Utc>) {
        for _ in 0..100 {
            if !self.dispatch(at, true).await.claimed {
                return;
            }
        }
        panic!("commands kept being due");
    }

    fn calls(&self, name: &str) -> u64 {
        self.remote.counters().calls.get(name).copied().unwrap_or(0)
    }
}

fn retry_of(record: &CommandRecord) -> (CommandStatus, Option<&str>, DateTime<Utc>) {
    (
        record.status,
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        record.next_attempt_at,
    )
}

/// What a [`Decorated`] remote does around each call it forwards to its fake.
#[async_trait]
trait Around: Send + Sync {
    /// Runs before `call` is forwarded: an error answers the call instead of the fake; the
    /// guard returned is dropped once the call ends or is cancelled.
    async fn enter(&self, call: RemoteCall) -> Result<Option<InFlight>, RemoteError>;

    /// Runs once a forwarded `call` has answered (not when it is cancelled).
    fn leave(&self, _call: RemoteCall) {}

    /// Runs first on a provision: an error answers it instead (before [`Around::enter`]).
    fn intercept_provision(&self, _request: &ProvisionRequest) -> Option<RemoteError> {
        None
    }
}

/// Counts a call out of an in-flight counter when dropped (the call ended or was cancelled).
struct InFlight(Arc<AtomicUsize>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A remote that forwards every call to the fake `inner`, with `around` around each; its
/// decorator's fields read through it (`Deref`).
#[derive(Clone)]
struct Decorated<A> {
    inner: FakeKnowledgeFs,
    around: A,
}

impl<A> std::ops::Deref for Decorated<A> {
    type Target = A;

    fn deref(&self) -> &A {
        &self.around
    }
}

impl<A: Around> Decorated<A> {
    async fn forward<T>(
        &self,
        call: RemoteCall,
        forwarded: impl std::future::Future<Output = Result<T, RemoteError>>,
    ) -> Result<T, RemoteError> {
        let _guard = self.around.enter(call).await?;
        let result = forwarded.await;
        self.around.leave(call);
        result
    }
}

#[async_trait]
impl<A: Around> KnowledgeFs for Decorated<A> {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        if let Some(error) = self.around.intercept_provision(request) {
            return Err(error);
        }
        self.forward(RemoteCall::Provision, self.inner.provision(request))
            .await
    }
    async fn find_by_provisioning_key(
        &self,
        n: &TenantId,
        k: &ProvisioningKey,
        c: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        self.forward(
            RemoteCall::Lookup,
            self.inner.find_by_provisioning_key(n, k, c),
        )
        .await
    }
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.forward(RemoteCall::Deletion, self.inner.request_deletion(request))
            .await
    }
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        self.forward(RemoteCall::Revoke, self.inner.revoke_grant(request))
            .await
    }
}

/// A remote whose first provision call waits until released.
type GatedRemote = Decorated<Gate>;

/// The decorator of a [`GatedRemote`].
#[derive(Clone)]
struct Gate {
    entered: Arc<Notify>,
    release: Arc<Notify>,
    gated: Arc<AtomicBool>,
}

impl GatedRemote {
    fn new(inner: FakeKnowledgeFs) -> Self {
        Self {
            inner,
            around: Gate {
                entered: Arc::new(Notify::new()),
                release: Arc::new(Notify::new()),
                gated: Arc::new(AtomicBool::new(true)),
            },
        }
    }
}

#[async_trait]
impl Around for Gate {
    async fn enter(&self, call: RemoteCall) -> Result<Option<InFlight>, RemoteError> {
        if call == RemoteCall::Provision && self.gated.swap(false, Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        Ok(None)
    }
}

#[derive(Default)]
struct RecordingMetrics {
    records: Mutex<Vec<TaskMetric>>,
}

impl LifecycleMetrics for RecordingMetrics {
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError> {
        self.records.lock().unwrap().push(metric.clone());
        Ok(())
    }
}

struct FailingMetrics;

impl LifecycleMetrics for FailingMetrics {
    fn record_task(&self, _metric: &TaskMetric) -> Result<(), MetricsError> {
        Err(MetricsError::new("exporter down"))
    }
}

/// Lets the spawned tasks run until they wait (for the clock or a channel): the fakes never
/// wait on I/O, so a few turns of the current-thread runtime are enough.
async fn let_tasks_run() {
    for _ in 0..64 {
        tokio::task::yield_now().await;
    }
}

/// With a claim loop (worker or pool) running on `clock`: `id`, whose first attempt failed,
/// is pending until its backoff ends and claimed and settled exactly then.
async fn assert_claimed_when_the_backoff_ends(h: &Harness, clock: &ManualClock, id: &CommandId) {
    let record = h.command(id);
    assert_eq!(
        record.status,
        CommandStatus::Pending,
        "first attempt failed"
    );
    let backoff = (record.next_attempt_at - clock.now()).to_std().unwrap();
    assert!(backoff > Duration::ZERO && backoff < Duration::from_secs(3600));
    clock.advance(backoff - Duration::from_millis(1));
    let_tasks_run().await;
    assert_eq!(h.command(id).status, CommandStatus::Pending, "not due yet");
    clock.advance(Duration::from_millis(1));
    let_tasks_run().await;
    assert_eq!(
        h.command(id).status,
        CommandStatus::Succeeded,
        "claimed when the backoff ended"
    );
}

mod dispatch;
mod failures;
mod intake;
mod leases;
mod pool;
mod settle;
mod worker;
