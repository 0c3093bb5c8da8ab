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

mod outage;
mod own_settle;

/// A remote whose every call takes `delay` on `clock` before the fake answers; counts the
/// requests that reached it per call.
type SlowRemote = Decorated<Slow>;

/// The decorator of a [`SlowRemote`].
#[derive(Clone)]
struct Slow {
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
            around: Slow {
                clock,
                delay_ms: Arc::new(AtomicU64::new(delay.as_millis().try_into().unwrap())),
                fail_first: Arc::default(),
                in_flight: Arc::default(),
                max_in_flight: Arc::default(),
            },
        }
    }
}

#[async_trait]
impl Around for Slow {
    async fn enter(&self, call: RemoteCall) -> Result<Option<InFlight>, RemoteError> {
        let fail = call == RemoteCall::Provision
            && self
                .fail_first
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let in_flight = InFlight(self.in_flight.clone());
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let delay = Duration::from_millis(self.delay_ms.load(Ordering::SeqCst));
        self.clock.sleep(delay).await;
        if fail {
            return Err(RemoteError::outcome_unknown("deadline passed"));
        }
        Ok(Some(in_flight))
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
