//! The worker pool: one claimer filling bounded dispatch places, remote calls bounded by its
//! slots, shutdown with dispatches in flight.

use super::*;

/// A remote whose calls wait for a gate, counting how many are inside at once.
#[derive(Clone)]
struct HeldRemote {
    inner: FakeKnowledgeFs,
    gate: Arc<tokio::sync::Semaphore>,
    inside: Arc<AtomicUsize>,
    most_inside: Arc<AtomicUsize>,
}

impl HeldRemote {
    fn new(inner: FakeKnowledgeFs) -> Self {
        Self {
            inner,
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
            inside: Arc::new(AtomicUsize::new(0)),
            most_inside: Arc::new(AtomicUsize::new(0)),
        }
    }

    async fn held<T>(&self, call: impl std::future::Future<Output = T>) -> T {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_inside.fetch_max(now, Ordering::SeqCst);
        self.gate.acquire().await.unwrap().forget();
        let result = call.await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        result
    }
}

#[async_trait]
impl KnowledgeFs for HeldRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        self.held(self.inner.provision(request)).await
    }
    async fn find_by_provisioning_key(
        &self,
        n: &TenantId,
        k: &ProvisioningKey,
        c: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        self.inner.find_by_provisioning_key(n, k, c).await
    }
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.held(self.inner.request_deletion(request)).await
    }
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        self.held(self.inner.revoke_grant(request)).await
    }
}

fn statuses(h: &Harness, ids: &[CommandId]) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    for id in ids {
        match h.command(id).status {
            CommandStatus::Pending => counts.0 += 1,
            CommandStatus::Processing => counts.1 += 1,
            CommandStatus::Succeeded => counts.2 += 1,
            other => panic!("unexpected status {other:?}"),
        }
    }
    counts
}

/// `n` provision commands and a pool of one worker of `claim_batch` (idle poll of an hour) over
/// a held remote, on `clock`.
async fn held_pool(
    h: &Harness,
    n: usize,
    claim_batch: u32,
    clock: &ManualClock,
) -> (
    WorkerPool<InMemoryLifecycleStore, HeldRemote>,
    HeldRemote,
    Vec<CommandId>,
) {
    let remote = HeldRemote::new(h.remote.clone());
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(h.create(&format!("cs{i}")).await.command_id);
    }
    let dispatcher = Arc::new(
        Dispatcher::new(h.store.clone(), remote.clone(), DispatcherConfig::default())
            .with_clock(Arc::new(clock.clone())),
    );
    let pool = WorkerPool::new(
        dispatcher,
        owner("pool"),
        1,
        WorkerConfig {
            idle_poll: Duration::from_secs(3600),
            claim_batch,
            ..WorkerConfig::default()
        },
    );
    (pool, remote, ids)
}

/// One worker with a claim batch of 2: 2 remote calls at once (the bound W workers had), up
/// to 8 dispatches in flight, claimed in one statement; the rest waits pending. Releasing the
/// remote drains everything, never more than 2 calls inside.
#[tokio::test]
async fn pool_bounds_remote_calls_by_its_slots_and_claims_its_free_places() {
    let h = harness();
    let (pool, remote, ids) = held_pool(&h, 10, 2, &clock_of_test()).await;
    assert_eq!(
        (pool.slots(), pool.max_in_flight(), pool.refill_at()),
        (2, 8, 4)
    );
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(remote.inside.load(Ordering::SeqCst), 2, "calls held");
    assert_eq!(statuses(&h, &ids), (2, 8, 0), "8 claimed, 2 left pending");

    // Two calls finish: 6 in flight, 2 free places (< 4): no claim yet.
    remote.gate.add_permits(2);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (2, 6, 2));
    assert_eq!(remote.inside.load(Ordering::SeqCst), 2);

    remote.gate.add_permits(100);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (0, 0, 10));
    assert_eq!(remote.most_inside.load(Ordering::SeqCst), 2);
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!(
        (report.claimed, report.completed, report.errors),
        (10, 10, 0)
    );
}

/// Shutdown stops claiming; the call already made settles before `run` returns, and the
/// dispatches still waiting for a slot hand their commands back (pending, due at once,
/// `SHUTDOWN_BEFORE_CALL`, attempt window untouched) without calling: a stop waits for one
/// call per slot, not for the whole queue to be called one slot at a time.
#[tokio::test]
async fn pool_shutdown_settles_the_calls_made_and_hands_back_the_waiting() {
    let h = harness();
    let clock = clock_of_test();
    let (pool, remote, ids) = held_pool(&h, 6, 1, &clock).await;
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (2, 4, 0));
    assert_eq!(remote.inside.load(Ordering::SeqCst), 1, "one slot");
    clock.advance(Duration::from_secs(2));
    stop.send(true).unwrap();
    let_tasks_run().await;
    assert!(!handle.is_finished(), "waits for the call in flight");
    assert_eq!(
        statuses(&h, &ids),
        (5, 1, 0),
        "the three waiting handed back"
    );
    let handed_back: Vec<_> = ids
        .iter()
        .map(|id| h.command(id))
        .filter(|record| record.attempt_count > 0 && record.status == CommandStatus::Pending)
        .collect();
    assert_eq!(handed_back.len(), 3);
    for record in handed_back {
        assert_eq!(
            retry_of(&record),
            (
                CommandStatus::Pending,
                Some("SHUTDOWN_BEFORE_CALL"),
                clock.now()
            )
        );
        assert_eq!(record.lease_owner, None, "lease released");
        assert_eq!(record.attempt_count, 1);
    }
    remote.gate.add_permits(1);
    let_tasks_run().await;
    assert!(handle.is_finished(), "one call released is enough to stop");
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed), (4, 1));
    assert_eq!(
        statuses(&h, &ids),
        (5, 0, 1),
        "nothing claimed after shutdown"
    );
    assert_eq!(h.calls("provision"), 1, "no waiting dispatch called");
}

/// Without lease renewal a lease is sized for one remote call: the pool keeps no dispatch
/// waiting for a slot, where the wait would eat the lease (the third command would find its
/// lease over once a slot freed, and be dropped unsent, its attempt spent).
#[tokio::test]
async fn a_pool_without_renewal_claims_no_more_than_its_slots() {
    let h = harness();
    let clock = clock_of_test();
    let remote = HeldRemote::new(h.remote.clone());
    let ids = [
        h.create("cs0").await.command_id,
        h.create("cs1").await.command_id,
        h.create("cs2").await.command_id,
    ];
    let dispatcher = Arc::new(
        Dispatcher::new(
            h.store.clone(),
            remote.clone(),
            DispatcherConfig::default()
                .with_renew_leases(false)
                .with_lease_duration(Duration::from_secs(30)),
        )
        .with_clock(Arc::new(clock.clone())),
    );
    let pool = WorkerPool::new(
        dispatcher,
        owner("pool"),
        1,
        WorkerConfig {
            idle_poll: Duration::from_secs(3600),
            claim_batch: 1,
            ..WorkerConfig::default()
        },
    );
    assert_eq!((pool.slots(), pool.max_in_flight()), (1, 1));
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(
        statuses(&h, &ids),
        (2, 1, 0),
        "claims only what it can call"
    );
    // Each call takes 20 s, within the 30 s lease.
    for settled in 1..=3 {
        clock.advance(Duration::from_secs(20));
        remote.gate.add_permits(1);
        let_tasks_run().await;
        assert_eq!(statuses(&h, &ids).2, settled);
    }
    remote.gate.add_permits(100);
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!(
        (report.claimed, report.completed, report.errors),
        (3, 3, 0),
        "no lease ran out while waiting"
    );
}

/// A remote client that allows fewer calls than `workers × claim_batch` bounds the pool's
/// slots, not its claims: the dispatches beyond the limit wait in the pool (lease renewed and
/// checked before the call), never inside the client, whose deadline would run meanwhile.
#[tokio::test]
async fn a_remote_call_limit_bounds_the_slots_not_the_claims() {
    let h = harness();
    let (pool, remote, ids) = held_pool(&h, 10, 4, &clock_of_test()).await;
    let pool = pool.with_remote_call_limit(2);
    assert_eq!((pool.slots(), pool.max_in_flight()), (2, 16));
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (0, 10, 0), "all claimed");
    assert_eq!(remote.inside.load(Ordering::SeqCst), 2, "two calls at once");
    remote.gate.add_permits(100);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (0, 0, 10));
    assert_eq!(remote.most_inside.load(Ordering::SeqCst), 2);
    stop.send(true).unwrap();
    assert_eq!(handle.await.unwrap().completed, 10);
}

/// A pool whose shutdown sender is dropped stops instead of spinning: the closed channel
/// would end every wait at once (claim after claim). Multi-threaded with a real-time bound, so
/// the spin fails the test instead of starving the runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_whose_shutdown_sender_is_dropped_stops() {
    let store = InMemoryLifecycleStore::with_clock(Arc::new(ManualClock::new(t(0))));
    let dispatcher = Arc::new(
        Dispatcher::new(store, FakeKnowledgeFs::new(), DispatcherConfig::default())
            .with_clock(Arc::new(ManualClock::new(t(0)))),
    );
    let pool = WorkerPool::new(dispatcher, owner("pool"), 1, WorkerConfig::default());
    let (stop, stopped) = watch::channel(false);
    drop(stop);
    let report = tokio::time::timeout(Duration::from_secs(10), tokio::spawn(pool.run(stopped)))
        .await
        .expect("the pool stopped")
        .unwrap();
    assert_eq!(report.claimed, 0);
}

/// An idle pool is woken by an intake of this process without waiting for its idle poll.
#[tokio::test]
async fn an_intake_wakes_an_idle_pool() {
    let h = harness();
    let wakeups = Wakeups::new();
    let intake = CommandIntake::new(h.store.clone(), Arc::new(clock_of_test()))
        .with_wakeups(wakeups.clone());
    let dispatcher = Arc::new(
        Dispatcher::new(
            h.store.clone(),
            h.remote.clone(),
            DispatcherConfig::default(),
        )
        .with_clock(Arc::new(clock_of_test())),
    );
    let pool = WorkerPool::new(
        dispatcher,
        owner("pool"),
        2,
        WorkerConfig {
            idle_poll: Duration::from_secs(3600),
            ..WorkerConfig::default()
        },
    )
    .with_wakeups(&wakeups);
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    let receipt = intake
        .create_control_space(&create_request("cs1", "create-cs1"))
        .await
        .unwrap();
    let_tasks_run().await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Succeeded
    );
    stop.send(true).unwrap();
    assert_eq!(handle.await.unwrap().claimed, 1);
}

/// A command retried after a backoff is claimed when the backoff ends, not at the next idle
/// poll: a dispatch finishing while the pool is idle makes it look again, so it sleeps until
/// the store's next due time (the retry's).
#[tokio::test]
async fn an_idle_pool_wakes_when_a_backoff_comes_due() {
    let h = harness();
    let clock = clock_of_test();
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::answered(503, "KFS_UNAVAILABLE", "busy")),
    );
    let (pool, remote, ids) = held_pool(&h, 1, 1, &clock).await;
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    // The first attempt is held in the remote while the pool finds nothing more and goes idle.
    let_tasks_run().await;
    remote.gate.add_permits(100);
    let_tasks_run().await;
    assert_claimed_when_the_backoff_ends(&h, &clock, &ids[0]).await;
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed), (2, 1));
}
