//! Leases that hold, on virtual time: a paused runtime and a [`ManualClock`] that follows
//! tokio's clock, shared by the store, the dispatcher and the slow remote, so a remote that
//! answers after 8 s and a lease of 2 s run in microseconds. A test that lets time pass
//! advances the clock.
//!
//! - renewal keeps the lease of a dispatch in flight (cases 004 and 005);
//! - a dispatch that is not polled past its lease loses it, and its late settle is refused;
//! - settle timestamps count from the end of the attempt;
//! - the worker pool: a dispatch waiting for a remote-call slot keeps its lease by renewal, and
//!   one whose renewal is refused meanwhile never calls;
//! - a renewal that meets the attempt's own settle or hand-back is not a lost lease (case 015);
//! - a lease that ends while its call is in flight cancels the call, a re-claim in the same
//!   process waits for it, and the process's own re-claim is no takeover (case 014);
//! - timestamps written after a call, and refusals after a slow call, are timed on the store's
//!   clock at the end of the call (issue 29).

use std::sync::atomic::AtomicU64;

use tenantry_ports::clock::Clock;
use tenantry_ports::lifecycle::RenewalOutcome;

use super::*;

/// A remote whose every call takes `delay` on `clock` before the fake answers; counts the
/// requests that reached it per call.
#[derive(Clone)]
struct SlowRemote {
    inner: FakeKnowledgeFs,
    clock: ManualClock,
    /// Time each call takes on `clock`, in milliseconds.
    delay_ms: Arc<AtomicU64>,
    /// Answer the first `fail_first` provisions with an unknown outcome (after the delay).
    fail_first: Arc<AtomicUsize>,
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
}

impl SlowRemote {
    fn new(inner: FakeKnowledgeFs, clock: ManualClock, delay: Duration) -> Self {
        Self {
            inner,
            clock,
            delay_ms: Arc::new(AtomicU64::new(delay.as_millis().try_into().unwrap())),
            fail_first: Arc::default(),
            in_flight: Arc::default(),
            max_in_flight: Arc::default(),
        }
    }

    async fn slow<T>(&self, call: impl Future<Output = T>) -> T {
        /// Counts the call out when it ends or is cancelled (dropped).
        struct InFlight(Arc<AtomicUsize>);
        impl Drop for InFlight {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _in_flight = InFlight(self.in_flight.clone());
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
        self.clock.sleep(delay).await;
        call.await
    }
}

#[async_trait]
impl KnowledgeFs for SlowRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let fail = self
            .fail_first
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        self.slow(async {
            if fail {
                Err(RemoteError::outcome_unknown("deadline passed"))
            } else {
                self.inner.provision(request).await
            }
        })
        .await
    }
    async fn find_by_provisioning_key(
        &self,
        n: &TenantId,
        k: &ProvisioningKey,
        c: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        self.slow(self.inner.find_by_provisioning_key(n, k, c))
            .await
    }
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.slow(self.inner.request_deletion(request)).await
    }
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        self.slow(self.inner.revoke_grant(request)).await
    }
}

#[derive(Default)]
struct RenewalCounter {
    renewed: AtomicU64,
    lost: AtomicU64,
    settled: AtomicU64,
    handed_back: AtomicU64,
    expired: AtomicU64,
    /// Dispatches that ended as `LEASE_LOST` (reported as a takeover).
    dropped_lost: AtomicU64,
    /// Dispatches that ended as `LEASE_EXPIRED`.
    dropped_expired: AtomicU64,
}

impl LifecycleMetrics for RenewalCounter {
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError> {
        match metric.error_code.as_deref() {
            Some("LEASE_LOST") => self.dropped_lost.fetch_add(1, Ordering::SeqCst),
            Some("LEASE_EXPIRED") => self.dropped_expired.fetch_add(1, Ordering::SeqCst),
            _ => 0,
        };
        Ok(())
    }
    fn record_lease_renewal(
        &self,
        _operation: &str,
        outcome: RenewalOutcome,
    ) -> Result<(), MetricsError> {
        match outcome {
            RenewalOutcome::Renewed => self.renewed.fetch_add(1, Ordering::SeqCst),
            RenewalOutcome::Lost => self.lost.fetch_add(1, Ordering::SeqCst),
            RenewalOutcome::Settled => self.settled.fetch_add(1, Ordering::SeqCst),
            RenewalOutcome::HandedBack => self.handed_back.fetch_add(1, Ordering::SeqCst),
            RenewalOutcome::Expired => self.expired.fetch_add(1, Ordering::SeqCst),
            RenewalOutcome::Failed => 0,
        };
        Ok(())
    }
}

fn short_lease() -> DispatcherConfig {
    DispatcherConfig {
        lease_duration: Duration::from_secs(2),
        ..DispatcherConfig::default()
    }
}

struct VirtualSetup {
    clock: ManualClock,
    store: InMemoryLifecycleStore,
    remote: SlowRemote,
    intake: CommandIntake<InMemoryLifecycleStore>,
    metrics: Arc<RenewalCounter>,
    dispatcher: Arc<Dispatcher<InMemoryLifecycleStore, SlowRemote>>,
}

fn virtual_setup(delay: Duration, config: DispatcherConfig) -> VirtualSetup {
    let clock = ManualClock::following_tokio(t(0));
    let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
    let remote = SlowRemote::new(FakeKnowledgeFs::new(), clock.clone(), delay);
    let metrics = Arc::new(RenewalCounter::default());
    let counter = Arc::new(AtomicUsize::new(0));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()))
        .with_id_source(move || format!("id-{}", counter.fetch_add(1, Ordering::Relaxed)));
    let dispatcher = Arc::new(
        Dispatcher::new(store.clone(), remote.clone(), config)
            .with_clock(Arc::new(clock.clone()))
            .with_metrics(metrics.clone()),
    );
    VirtualSetup {
        clock,
        store,
        remote,
        intake,
        metrics,
        dispatcher,
    }
}

/// Four competing workers poll every 100 ms for `span` of virtual time.
async fn compete(s: &VirtualSetup, span: Duration) {
    let mut tasks = Vec::new();
    for w in 0..4 {
        let dispatcher = s.dispatcher.clone();
        let clock = s.clock.clone();
        tasks.push(tokio::spawn(async move {
            let until = clock.monotonic() + span;
            while clock.monotonic() < until {
                let _ = dispatcher
                    .dispatch_one(&owner(&format!("rival-{w}")), true)
                    .await;
                clock.sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_lease_of_2_s_is_renewed_while_a_provision_takes_8_s() {
    let s = virtual_setup(Duration::from_secs(8), short_lease());
    let receipt = s
        .intake
        .create_control_space(&create_request("cs1", "create-cs1"))
        .await
        .unwrap();
    compete(&s, Duration::from_secs(20)).await;
    let record = s.store.command(&receipt.command_id).unwrap();
    assert_eq!(record.status, CommandStatus::Succeeded);
    assert_eq!(record.attempt_count, 1, "claimed once");
    assert_eq!(record.lease_epoch, LeaseEpoch(1), "never taken over");
    assert_eq!(
        s.remote.inner.counters().calls.get("provision"),
        Some(&1),
        "exactly one request reached the remote"
    );
    assert_eq!(s.remote.max_in_flight.load(Ordering::SeqCst), 1);
    let renewed = s.metrics.renewed.load(Ordering::SeqCst);
    assert!(
        (8..=13).contains(&renewed),
        "about one renewal every 2/3 s for 8 s, counted: {renewed}"
    );
    assert_eq!(s.metrics.lost.load(Ordering::SeqCst), 0);
}

/// `../shared/cases/005-delete-outlives-lease.md`: a delete makes two calls (lookup, then the
/// deletion request), each slower than the lease; one dispatch of the command is in flight at a
/// time, and each call reaches the remote once.
#[tokio::test(start_paused = true)]
async fn case_005_delete_outlives_lease_with_one_dispatch_in_flight() {
    let s = virtual_setup(Duration::from_secs(3), short_lease());
    s.intake
        .create_control_space(&create_request("cs-d", "create-cs-d"))
        .await
        .unwrap();
    // The provision's answer is lost: the deletion must look the identity up.
    s.remote
        .inner
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    assert!(
        s.dispatcher
            .dispatch_one(&owner("w"), true)
            .await
            .unwrap()
            .claimed
    );
    let delete = s
        .intake
        .request_deletion(&delete_request("cs-d", "delete-cs-d"))
        .await
        .unwrap();
    compete(&s, Duration::from_secs(40)).await;
    let record = s.store.command(&delete.command_id).unwrap();
    assert_eq!(record.status, CommandStatus::Succeeded, "{record:?}");
    assert_eq!(
        record.lease_epoch.0,
        i64::from(record.attempt_count),
        "no claim took a live lease over"
    );
    let calls = s.remote.inner.counters().calls;
    assert_eq!(calls.get("lookup"), Some(&1), "{calls:?}");
    assert_eq!(
        s.remote.max_in_flight.load(Ordering::SeqCst),
        1,
        "never two requests of one command in flight"
    );
    let space = s
        .store
        .control_space(&tenant(), &cs_id("cs-d"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.state, ControlSpaceState::Deleted);
    assert!(!s.remote.inner.has_space(&space.provisioning_key));
    assert_eq!(s.metrics.lost.load(Ordering::SeqCst), 0);
}

/// `../shared/cases/004-retry-after-slow-failure.md`: a provision times out after 8 s (lease
/// 5 s, renewed); its retry waits the backoff counted from the end of the attempt, not from
/// the claim.
#[tokio::test(start_paused = true)]
async fn case_004_retry_after_a_slow_failure_waits_its_backoff() {
    let s = virtual_setup(
        Duration::from_secs(8),
        DispatcherConfig {
            lease_duration: Duration::from_secs(5),
            ..DispatcherConfig::default()
        },
    );
    s.remote.fail_first.store(1, Ordering::SeqCst);
    let receipt = s
        .intake
        .create_control_space(&create_request("cs-slow", "create-cs-slow"))
        .await
        .unwrap();
    s.dispatcher.dispatch_one(&owner("w"), true).await.unwrap();
    let record = s.store.command(&receipt.command_id).unwrap();
    assert_eq!(record.status, CommandStatus::Pending);
    assert_eq!(
        record.next_attempt_at,
        t(8) + chrono::Duration::seconds(2),
        "the backoff (2 s) counts from the settle at t(8), not from the claim at t(0)"
    );
    // Nothing is due before then.
    s.clock.advance(Duration::from_millis(1900));
    assert!(
        !s.dispatcher
            .dispatch_one(&owner("w"), true)
            .await
            .unwrap()
            .claimed
    );
}

/// A dispatch whose future is not polled (a paused process) does not renew: its lease expires,
/// another worker takes the command over and settles it, and the late settle is refused.
#[tokio::test(start_paused = true)]
async fn a_paused_dispatch_loses_its_lease_and_its_late_settle_is_refused() {
    let s = virtual_setup(Duration::from_secs(1), short_lease());
    let receipt = s
        .intake
        .create_control_space(&create_request("cs1", "create-cs1"))
        .await
        .unwrap();
    let dispatcher = s.dispatcher.clone();
    let mut paused = Box::pin(async move { dispatcher.dispatch_one(&owner("paused"), true).await });
    // Poll it until its provision is in flight, then stop polling it.
    tokio::select! {
        result = &mut paused => panic!("finished before the pause: {result:?}"),
        () = s.clock.sleep(Duration::from_millis(500)) => {}
    }
    assert_eq!(s.remote.in_flight.load(Ordering::SeqCst), 1);
    // Paused for 10 s: the lease (2 s) expires; a rival process takes over and completes.
    s.clock.advance(Duration::from_secs(10));
    let rival = Dispatcher::new(s.store.clone(), s.remote.clone(), short_lease())
        .with_clock(Arc::new(s.clock.clone()))
        .dispatch_one(&owner("rival"), true)
        .await
        .unwrap();
    assert!(rival.completed);
    let settled = s.store.command(&receipt.command_id).unwrap();
    assert_eq!(settled.lease_epoch, LeaseEpoch(2));
    // Resumed: its call, past its lease, is cancelled; the attempt is dropped as lost.
    let late = paused.await;
    assert_eq!(
        late,
        Err(DispatchError::LeaseLost {
            command_id: receipt.command_id.clone()
        })
    );
    assert_eq!(
        s.store.command(&receipt.command_id).unwrap(),
        settled,
        "the new owner's result stands"
    );
}

/// The local lease deadline is on the dispatcher's clock: a lookup that takes 31 s of the
/// clock, under a 30 s lease without renewal, is cancelled when the lease ends and the
/// deletion request is never sent, although no time passed on tokio's clock.
#[tokio::test]
async fn the_local_lease_deadline_is_on_the_dispatcher_clock() {
    let clock = ManualClock::new(t(0));
    let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
    let remote = SlowRemote::new(FakeKnowledgeFs::new(), clock.clone(), Duration::ZERO);
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()));
    let dispatcher = Arc::new(
        Dispatcher::new(
            store.clone(),
            remote.clone(),
            DispatcherConfig::default()
                .with_lease_duration(Duration::from_secs(30))
                .with_renew_leases(false),
        )
        .with_clock(Arc::new(clock.clone())),
    );
    intake
        .create_control_space(&create_request("cs-d", "create-cs-d"))
        .await
        .unwrap();
    // The provision's answer is lost: the deletion must look the identity up first.
    remote
        .inner
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    assert!(
        dispatcher
            .dispatch_one(&owner("w"), true)
            .await
            .unwrap()
            .claimed
    );
    let delete = intake
        .request_deletion(&delete_request("cs-d", "delete-cs-d"))
        .await
        .unwrap();
    remote.delay_ms.store(31_000, Ordering::SeqCst);
    let dispatching = {
        let dispatcher = dispatcher.clone();
        tokio::spawn(async move { dispatcher.dispatch_one(&owner("w"), true).await })
    };
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        remote.in_flight.load(Ordering::SeqCst),
        1,
        "the lookup is in flight"
    );
    clock.advance(Duration::from_secs(31));
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    assert!(
        dispatching.is_finished(),
        "the dispatch stops at the lease's end instead of sending the deletion"
    );
    assert_eq!(
        dispatching.await.unwrap(),
        Err(DispatchError::LeaseExpired {
            command_id: delete.command_id.clone()
        })
    );
    assert_eq!(remote.in_flight.load(Ordering::SeqCst), 0);
    let calls = remote.inner.counters().calls;
    assert_eq!(
        calls.get("lookup"),
        None,
        "the lookup was cancelled at the lease's end: {calls:?}"
    );
    assert_eq!(
        calls.get("deletion"),
        None,
        "no request on a lease the dispatcher cannot prove live: {calls:?}"
    );
}

/// `n` provisions enqueued on `s`, and a pool of one remote-call slot (claim batch 1) over its
/// dispatcher: up to two dispatches in flight, one of them waiting for the slot.
async fn one_slot_pool(
    s: &VirtualSetup,
    n: usize,
) -> (
    WorkerPool<InMemoryLifecycleStore, SlowRemote>,
    Vec<CommandId>,
) {
    let mut ids = Vec::new();
    for i in 0..n {
        let receipt = s
            .intake
            .create_control_space(&create_request(&format!("cs{i}"), &format!("create-cs{i}")))
            .await
            .unwrap();
        ids.push(receipt.command_id);
    }
    let pool = polling_pool(s.dispatcher.clone(), 1);
    (pool, ids)
}

/// A pool of one slot, a lease of 2 s and calls of 8 s: the second command waits 8 s for the
/// slot, four leases long, while four rival workers poll every 100 ms. Renewal keeps every
/// waiting lease: nothing is taken over, each command reaches the remote once.
#[tokio::test(start_paused = true)]
async fn pool_dispatches_waiting_for_a_slot_keep_their_leases() {
    let s = virtual_setup(Duration::from_secs(8), short_lease());
    let (pool, ids) = one_slot_pool(&s, 2).await;
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    compete(&s, Duration::from_secs(30)).await;
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed, report.errors), (2, 2, 0));
    for id in &ids {
        let record = s.store.command(id).unwrap();
        assert_eq!(record.status, CommandStatus::Succeeded);
        assert_eq!(
            (record.attempt_count, record.lease_epoch),
            (1, LeaseEpoch(1)),
            "claimed once, never taken over"
        );
    }
    assert_eq!(s.remote.inner.counters().calls.get("provision"), Some(&2));
    assert_eq!(s.remote.max_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(s.metrics.lost.load(Ordering::SeqCst), 0);
}

/// A dispatch whose renewal is refused while it waits for the slot (its command was taken
/// over) never makes its call once the slot frees; the call already in flight is cancelled
/// when its renewal is refused. Nothing either attempt computed is written.
#[tokio::test(start_paused = true)]
async fn a_dispatch_whose_renewal_is_refused_while_it_waits_for_a_slot_never_calls() {
    let s = virtual_setup(Duration::from_secs(8), short_lease());
    let (pool, ids) = one_slot_pool(&s, 2).await;
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(s.remote.max_in_flight.load(Ordering::SeqCst), 1);
    for id in &ids {
        let mut record = s.store.command(id).unwrap();
        assert_eq!(record.status, CommandStatus::Processing, "both claimed");
        record.lease_owner = Some(owner("thief"));
        record.lease_epoch = LeaseEpoch(record.lease_epoch.0 + 1);
        record.lease_expires_at = Some(t(3600));
        s.store.put_command(record);
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.errors), (2, 2));
    assert_eq!(
        s.remote.inner.counters().calls.get("provision"),
        None,
        "the call in flight at the takeover was cancelled, the other never made"
    );
    assert_eq!(s.remote.max_in_flight.load(Ordering::SeqCst), 1);
    assert!(
        s.metrics.lost.load(Ordering::SeqCst) >= 2,
        "renewals refused"
    );
    for id in &ids {
        let record = s.store.command(id).unwrap();
        assert_eq!(
            (
                record.status,
                record.lease_owner.as_ref().map(LeaseOwner::as_str)
            ),
            (CommandStatus::Processing, Some("thief")),
            "nothing written"
        );
    }
}

/// A store whose settles are applied at once but answered `answer_delay` later on `clock` (a
/// commit whose reply is slow to come back, or a group commit's wait after its transaction):
/// a renewal tick in between finds the command already settled by this very attempt.
#[derive(Clone)]
struct LateAnswerStore {
    inner: InMemoryLifecycleStore,
    clock: ManualClock,
    answer_delay: Duration,
}

#[async_trait]
impl CommandQueue for LateAnswerStore {
    async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<Vec<tenantry_lifecycle::ClaimedCommand>, tenantry_ports::lifecycle::StoreError>
    {
        self.inner.claim(request).await
    }
    async fn renew_lease(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        lease_duration: Duration,
    ) -> Result<tenantry_lifecycle::LeaseToken, tenantry_ports::lifecycle::SettleError> {
        self.inner.renew_lease(lease, lease_duration).await
    }
    async fn settle(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        settlement: &tenantry_lifecycle::Settlement,
    ) -> Result<(), tenantry_ports::lifecycle::SettleError> {
        let applied = self.inner.settle(lease, settlement).await;
        self.clock.sleep(self.answer_delay).await;
        applied
    }
    async fn next_due_in(
        &self,
        include_provision: bool,
    ) -> Result<Option<Duration>, tenantry_ports::lifecycle::StoreError> {
        self.inner.next_due_in(include_provision).await
    }
    async fn latest_provision(
        &self,
        t: &TenantId,
        c: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, tenantry_ports::lifecycle::StoreError> {
        self.inner.latest_provision(t, c).await
    }
    async fn list_commands(
        &self,
        f: &tenantry_ports::lifecycle::CommandFilter,
    ) -> Result<Vec<CommandRecord>, tenantry_ports::lifecycle::StoreError> {
        self.inner.list_commands(f).await
    }
}

forward_control_space_reader!(LateAnswerStore);
forward_intake_store!(LateAnswerStore);

/// Case 015's run on virtual time: a lease of 3 s (renewed every second), a remote that
/// answers after `remote_delay`, and settles answered 1 s after they are applied. Returns
/// the dispatcher over the late-answering store and the ids of `n` provisions enqueued.
async fn late_answer_setup(
    s: &VirtualSetup,
    n: usize,
) -> (Arc<Dispatcher<LateAnswerStore, SlowRemote>>, Vec<CommandId>) {
    let store = LateAnswerStore {
        inner: s.store.clone(),
        clock: s.clock.clone(),
        answer_delay: Duration::from_secs(1),
    };
    let dispatcher = Arc::new(
        Dispatcher::new(
            store,
            s.remote.clone(),
            DispatcherConfig {
                lease_duration: Duration::from_secs(3),
                ..DispatcherConfig::default()
            },
        )
        .with_clock(Arc::new(s.clock.clone()))
        .with_metrics(s.metrics.clone()),
    );
    let mut ids = Vec::new();
    for i in 0..n {
        let receipt = s
            .intake
            .create_control_space(&create_request(&format!("cs{i}"), &format!("create-cs{i}")))
            .await
            .unwrap();
        ids.push(receipt.command_id);
    }
    (dispatcher, ids)
}

/// Case 015: the remote answers after 1.5 s, the settle is applied then and answered at
/// 2.5 s, and the renewal due at 2 s finds the command settled by this attempt. That is no
/// lost lease: counted `settled`, never `lost` (the `LEASE_LOST` warning goes with `lost`
/// alone), and the command succeeded at its first attempt.
#[tokio::test(start_paused = true)]
async fn case_015_a_renewal_that_meets_its_own_settle_is_not_a_lost_lease() {
    let s = virtual_setup(Duration::from_millis(1500), short_lease());
    let (dispatcher, ids) = late_answer_setup(&s, 1).await;
    let report = dispatcher.dispatch_one(&owner("w1"), true).await.unwrap();
    assert!(report.completed);
    let record = s.store.command(&ids[0]).unwrap();
    assert_eq!(
        (record.status, record.attempt_count, record.lease_epoch),
        (CommandStatus::Succeeded, 1, LeaseEpoch(1))
    );
    assert_eq!(
        s.metrics.renewed.load(Ordering::SeqCst),
        1,
        "the tick at 1 s"
    );
    assert_eq!(
        s.metrics.settled.load(Ordering::SeqCst),
        1,
        "the tick at 2 s met the settle"
    );
    assert_eq!(
        s.metrics.lost.load(Ordering::SeqCst),
        0,
        "no lease was lost"
    );
}

/// Case 015 at shutdown: a pool of one remote-call slot, two commands; the second waits for
/// the slot when the pool stops at 0.5 s and hands its command back (applied at once,
/// answered at 1.5 s), and its renewal due at 1 s meets that hand-back; the first's call
/// (4.5 s) settles, and its renewal due at 5 s meets that settle. Neither is a lost lease.
#[tokio::test(start_paused = true)]
async fn case_015_a_renewal_that_meets_a_hand_back_at_shutdown_is_not_a_lost_lease() {
    let s = virtual_setup(Duration::from_millis(4500), short_lease());
    let (dispatcher, ids) = late_answer_setup(&s, 2).await;
    let pool = polling_pool(dispatcher, 1);
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(s.remote.in_flight.load(Ordering::SeqCst), 1);
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed, report.errors), (2, 1, 0));
    let mut statuses: Vec<_> = ids
        .iter()
        .map(|id| {
            let record = s.store.command(id).unwrap();
            (record.status, record.lease_epoch)
        })
        .collect();
    statuses.sort_by_key(|(status, _)| status.as_str());
    assert_eq!(
        statuses,
        [
            (CommandStatus::Pending, LeaseEpoch(1)),
            (CommandStatus::Succeeded, LeaseEpoch(1))
        ]
    );
    assert_eq!(s.metrics.handed_back.load(Ordering::SeqCst), 1);
    assert_eq!(s.metrics.settled.load(Ordering::SeqCst), 1);
    assert_eq!(
        s.metrics.lost.load(Ordering::SeqCst),
        0,
        "no lease was lost"
    );
}

/// A store that is unreachable for a span of `clock`'s time (a database outage): meanwhile a
/// claim waits for it to come back (as a connection pool waits for a connection), and every
/// other call fails. With `refuse_registration` armed, it also refuses the next settle that
/// registers a control-space change without an outcome (a concurrent writer won the
/// compare-and-set).
#[derive(Clone)]
struct OutageStore {
    inner: InMemoryLifecycleStore,
    clock: ManualClock,
    /// The outage: from, until (monotonic readings of `clock`).
    outage: Arc<Mutex<Option<(tokio::time::Instant, tokio::time::Instant)>>>,
    refuse_registration: Arc<AtomicBool>,
}

impl OutageStore {
    /// When the outage ends, if it is on now.
    fn down_until(&self) -> Option<tokio::time::Instant> {
        let now = self.clock.monotonic();
        self.outage
            .lock()
            .unwrap()
            .and_then(|(from, until)| (from <= now && now < until).then_some(until))
    }

    fn check(&self) -> Result<(), tenantry_ports::lifecycle::StoreError> {
        match self.down_until() {
            Some(_) => Err(tenantry_ports::lifecycle::StoreError::unavailable(
                "database unreachable",
            )),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl CommandQueue for OutageStore {
    async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<Vec<tenantry_lifecycle::ClaimedCommand>, tenantry_ports::lifecycle::StoreError>
    {
        if let Some(until) = self.down_until() {
            self.clock.sleep_until(until).await;
        }
        self.inner.claim(request).await
    }
    async fn renew_lease(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        lease_duration: Duration,
    ) -> Result<tenantry_lifecycle::LeaseToken, tenantry_ports::lifecycle::SettleError> {
        self.check()?;
        self.inner.renew_lease(lease, lease_duration).await
    }
    async fn settle(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        settlement: &tenantry_lifecycle::Settlement,
    ) -> Result<(), tenantry_ports::lifecycle::SettleError> {
        self.check()?;
        if let Some(cas) = &settlement.control_space
            && settlement.outcome.is_none()
            && self.refuse_registration.swap(false, Ordering::SeqCst)
        {
            return Err(
                tenantry_ports::lifecycle::SettleError::ControlSpaceConflict {
                    control_space_id: cas.next.control_space_id.clone(),
                },
            );
        }
        self.inner.settle(lease, settlement).await
    }
    async fn next_due_in(
        &self,
        include_provision: bool,
    ) -> Result<Option<Duration>, tenantry_ports::lifecycle::StoreError> {
        self.check()?;
        self.inner.next_due_in(include_provision).await
    }
    async fn latest_provision(
        &self,
        t: &TenantId,
        c: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, tenantry_ports::lifecycle::StoreError> {
        self.check()?;
        self.inner.latest_provision(t, c).await
    }
    async fn list_commands(
        &self,
        f: &tenantry_ports::lifecycle::CommandFilter,
    ) -> Result<Vec<CommandRecord>, tenantry_ports::lifecycle::StoreError> {
        self.check()?;
        self.inner.list_commands(f).await
    }
}

forward_intake_store!(OutageStore);

#[async_trait]
impl ControlSpaceReader for OutageStore {
    async fn control_space(
        &self,
        t: &TenantId,
        c: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, tenantry_ports::lifecycle::StoreError> {
        self.check()?;
        self.inner.control_space(t, c).await
    }
}

/// `../shared/cases/014-outage-longer-than-lease.md` on virtual time: one process (a pool of
/// 16 slots), a lease of 6 s, a KnowledgeFS that answers provisions after 20 s, 8 creates; the
/// database is unreachable from 3 s to 11 s. The renewals fail, so each call is cancelled when
/// its lease can no longer be proven live (8 s); the claim that waited for the database takes
/// the commands again at 11 s and sends them then (a renewal makes up for the claim's wait).
/// Never two requests of one command in flight, and no attempt is reported as taken over.
#[tokio::test(start_paused = true)]
async fn case_014_a_lease_lost_in_an_outage_cancels_its_call_before_the_reclaim_sends() {
    let s = virtual_setup(Duration::from_secs(20), short_lease());
    let start = s.clock.monotonic();
    let store = OutageStore {
        inner: s.store.clone(),
        clock: s.clock.clone(),
        outage: Arc::new(Mutex::new(Some((
            start + Duration::from_secs(3),
            start + Duration::from_secs(11),
        )))),
        refuse_registration: Arc::default(),
    };
    let dispatcher = Arc::new(
        Dispatcher::new(
            store,
            s.remote.clone(),
            DispatcherConfig {
                lease_duration: Duration::from_secs(6),
                ..DispatcherConfig::default()
            },
        )
        .with_clock(Arc::new(s.clock.clone()))
        .with_metrics(s.metrics.clone()),
    );
    let mut ids = Vec::new();
    for i in 0..8 {
        let receipt = s
            .intake
            .create_control_space(&create_request(&format!("cs{i}"), &format!("create-cs{i}")))
            .await
            .unwrap();
        ids.push(receipt.command_id);
    }
    let pool = polling_pool(dispatcher, 16);
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    tokio::time::sleep(Duration::from_secs(60)).await;
    stop.send(true).unwrap();
    handle.await.unwrap();
    for id in &ids {
        let record = s.store.command(id).unwrap();
        assert_eq!(
            (record.status, record.attempt_count, record.lease_epoch),
            (CommandStatus::Succeeded, 2, LeaseEpoch(2)),
            "claimed again once after the outage, and that attempt went through"
        );
    }
    assert_eq!(
        s.remote.max_in_flight.load(Ordering::SeqCst),
        8,
        "one request per command in flight at most"
    );
    assert_eq!(
        s.remote.inner.counters().calls.get("provision"),
        Some(&8),
        "the cancelled calls never answered; the re-sent ones did"
    );
    assert_eq!(s.metrics.lost.load(Ordering::SeqCst), 0, "no renewal lost");
    assert_eq!(
        s.metrics.dropped_lost.load(Ordering::SeqCst),
        0,
        "no attempt reported as taken over"
    );
    assert_eq!(
        s.metrics.dropped_expired.load(Ordering::SeqCst),
        8,
        "each first attempt ended on its expired lease"
    );
}

/// Case 014, the wait: an attempt whose call is in flight is not polled (a stalled task) past
/// its lease; the same process claims the command again. The re-claim does not send while the
/// earlier call is in flight; once the stalled attempt runs again it cancels its call and ends
/// as expired (its own owner's re-claim is no takeover), and the re-claim sends.
#[tokio::test(start_paused = true)]
async fn case_014_a_reclaim_waits_for_the_call_of_the_earlier_attempt() {
    let s = virtual_setup(Duration::from_secs(5), short_lease());
    let receipt = s
        .intake
        .create_control_space(&create_request("cs1", "create-cs1"))
        .await
        .unwrap();
    let dispatcher = s.dispatcher.clone();
    let mut stalled = Box::pin(async move { dispatcher.dispatch_one(&owner("w"), true).await });
    tokio::select! {
        result = &mut stalled => panic!("finished before the stall: {result:?}"),
        () = s.clock.sleep(Duration::from_millis(500)) => {}
    }
    assert_eq!(s.remote.in_flight.load(Ordering::SeqCst), 1);
    s.clock.advance(Duration::from_secs(10));
    let reclaim = {
        let dispatcher = s.dispatcher.clone();
        tokio::spawn(async move { dispatcher.dispatch_one(&owner("w"), true).await })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        s.store.command(&receipt.command_id).unwrap().lease_epoch,
        LeaseEpoch(2),
        "claimed again"
    );
    assert_eq!(
        s.remote.in_flight.load(Ordering::SeqCst),
        1,
        "the re-claim waits for the earlier call"
    );
    assert_eq!(
        stalled.await,
        Err(DispatchError::LeaseExpired {
            command_id: receipt.command_id.clone()
        }),
        "its own owner's re-claim is no takeover"
    );
    let report = reclaim.await.unwrap().unwrap();
    assert!(report.completed);
    assert_eq!(s.remote.max_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(s.remote.inner.counters().calls.get("provision"), Some(&1));
    assert_eq!(s.metrics.lost.load(Ordering::SeqCst), 0);
    assert_eq!(s.metrics.dropped_lost.load(Ordering::SeqCst), 0);
}

/// Issue 29: the timestamps the engine writes after a call come from the store's time at the
/// claim plus the monotonic time elapsed, not from this process's wall clock. A provision
/// answered `503` with `Retry-After: 30` after 8 s, while the process's wall clock was stepped
/// back an hour mid-call (the store's clock did not move), is due 30 s after the answer on the
/// store's clock.
#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_when_the_wall_clock_steps_mid_call() {
    let store_clock = ManualClock::following_tokio(t(0));
    let process_clock = ManualClock::following_tokio(t(0));
    let store = InMemoryLifecycleStore::with_clock(Arc::new(store_clock.clone()));
    let remote = SlowRemote::new(
        FakeKnowledgeFs::new(),
        process_clock.clone(),
        Duration::from_secs(8),
    );
    remote.inner.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(
            RemoteError::answered(503, "KFS_UNAVAILABLE", "busy")
                .with_retry_after(Duration::from_secs(30)),
        ),
    );
    let intake = CommandIntake::new(store.clone(), Arc::new(store_clock.clone()));
    let receipt = intake
        .create_control_space(&create_request("cs1", "create-cs1"))
        .await
        .unwrap();
    let dispatcher = Dispatcher::new(store.clone(), remote, short_lease())
        .with_clock(Arc::new(process_clock.clone()));
    let step = {
        let process_clock = process_clock.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            process_clock.set(process_clock.now() - chrono::Duration::hours(1));
        }
    };
    let w = owner("w");
    let (dispatched, ()) = tokio::join!(dispatcher.dispatch_one(&w, true), step);
    assert!(dispatched.unwrap().claimed);
    let record = store.command(&receipt.command_id).unwrap();
    assert_eq!(record.status, CommandStatus::Pending);
    assert_eq!(
        record.next_attempt_at,
        t(8) + chrono::Duration::seconds(30),
        "Retry-After counts from the answer on the store's clock"
    );
}

/// Issue 29: a refusal after a slow call is timed at the failure, not at the claim. A delete
/// looks the lost identity up (3 s) and its registration meets a control-space conflict: the
/// retry it settles waits its backoff from after the lookup.
#[tokio::test(start_paused = true)]
async fn a_conflict_after_a_slow_lookup_is_timed_at_the_failure() {
    let s = virtual_setup(Duration::from_secs(3), DispatcherConfig::default());
    s.intake
        .create_control_space(&create_request("cs-d", "create-cs-d"))
        .await
        .unwrap();
    // The provision's answer is lost: the deletion must look the identity up.
    s.remote
        .inner
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    s.dispatcher.dispatch_one(&owner("w"), true).await.unwrap();
    let delete = s
        .intake
        .request_deletion(&delete_request("cs-d", "delete-cs-d"))
        .await
        .unwrap();
    let store = OutageStore {
        inner: s.store.clone(),
        clock: s.clock.clone(),
        outage: Arc::default(),
        refuse_registration: Arc::new(AtomicBool::new(true)),
    };
    let dispatcher = Dispatcher::new(store, s.remote.clone(), DispatcherConfig::default())
        .with_clock(Arc::new(s.clock.clone()));
    let claimed_at = s.clock.now();
    let report = dispatcher.dispatch_one(&owner("w"), true).await.unwrap();
    assert_eq!(report.command_id.as_ref(), Some(&delete.command_id));
    let record = s.store.command(&delete.command_id).unwrap();
    assert_eq!(
        (
            record.status,
            record.last_error_code.as_ref().map(ErrorCode::as_str)
        ),
        (CommandStatus::Pending, Some("CONTROL_SPACE_CONFLICT"))
    );
    assert!(
        record.next_attempt_at >= claimed_at + chrono::Duration::seconds(3),
        "the retry counts from the failure after the 3 s lookup: {} (claimed at {claimed_at})",
        record.next_attempt_at
    );
}
