//! The worker pool: one claimer filling bounded dispatch places, remote calls bounded by its
//! slots, shutdown with dispatches in flight.

use super::*;

mod prompt_lane;
mod settling;

/// A remote whose calls (but lookups) wait for a gate, counting how many are inside at once.
type HeldRemote = Decorated<Held>;

/// The decorator of a [`HeldRemote`].
#[derive(Clone)]
struct Held {
    gate: Arc<tokio::sync::Semaphore>,
    inside: Arc<AtomicUsize>,
    most_inside: Arc<AtomicUsize>,
}

impl HeldRemote {
    fn new(inner: FakeKnowledgeFs) -> Self {
        Self {
            inner,
            around: Held {
                gate: Arc::new(tokio::sync::Semaphore::new(0)),
                inside: Arc::new(AtomicUsize::new(0)),
                most_inside: Arc::new(AtomicUsize::new(0)),
            },
        }
    }
}

#[async_trait]
impl Around for Held {
    async fn enter(&self, call: RemoteCall) -> Result<Option<InFlight>, RemoteError> {
        if call != RemoteCall::Lookup {
            let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_inside.fetch_max(now, Ordering::SeqCst);
            self.gate.acquire().await.unwrap().forget();
        }
        Ok(None)
    }

    fn leave(&self, call: RemoteCall) {
        if call != RemoteCall::Lookup {
            self.inside.fetch_sub(1, Ordering::SeqCst);
        }
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
/// to 4 dispatches in flight (one calling and one waiting per slot), claimed in one
/// statement; the rest waits pending. Releasing the remote drains everything, never more than
/// 2 calls inside.
#[tokio::test]
async fn pool_bounds_remote_calls_by_its_slots_and_claims_its_free_places() {
    let h = harness();
    let (pool, remote, ids) = held_pool(&h, 10, 2, &clock_of_test()).await;
    assert_eq!(
        (pool.slots(), pool.max_in_flight(), pool.refill_at()),
        (2, 4, 2)
    );
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(remote.inside.load(Ordering::SeqCst), 2, "calls held");
    assert_eq!(statuses(&h, &ids), (6, 4, 0), "4 claimed, 6 left pending");

    // One call finishes: 3 in flight, 1 free place (< 2): no claim yet; the waiting dispatch
    // took the free slot.
    remote.gate.add_permits(1);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (6, 3, 1));
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
    assert_eq!(statuses(&h, &ids), (4, 2, 0));
    assert_eq!(remote.inside.load(Ordering::SeqCst), 1, "one slot");
    clock.advance(Duration::from_secs(2));
    stop.send(true).unwrap();
    let_tasks_run().await;
    assert!(!handle.is_finished(), "waits for the call in flight");
    assert_eq!(statuses(&h, &ids), (5, 1, 0), "the waiting one handed back");
    let handed_back: Vec<_> = ids
        .iter()
        .map(|id| h.command(id))
        .filter(|record| record.attempt_count > 0 && record.status == CommandStatus::Pending)
        .collect();
    assert_eq!(handed_back.len(), 1);
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
    assert_eq!((report.claimed, report.completed), (2, 1));
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
/// slots, and with them its claims: one dispatch per slot waits in the pool (lease renewed
/// and checked before the call), never inside the client, whose deadline would run
/// meanwhile; the rest stays pending for other replicas (no hoarding, issue 29).
#[tokio::test]
async fn a_remote_call_limit_bounds_the_slots_and_the_claims() {
    let h = harness();
    let (pool, remote, ids) = held_pool(&h, 10, 4, &clock_of_test()).await;
    let pool = pool.with_remote_call_limit(2);
    assert_eq!((pool.slots(), pool.max_in_flight()), (2, 4));
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(
        statuses(&h, &ids),
        (6, 4, 0),
        "two calling, two waiting, the rest pending"
    );
    assert_eq!(remote.inside.load(Ordering::SeqCst), 2, "two calls at once");
    remote.gate.add_permits(100);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (0, 0, 10));
    assert_eq!(remote.most_inside.load(Ordering::SeqCst), 2);
    stop.send(true).unwrap();
    assert_eq!(handle.await.unwrap().completed, 10);
}

/// With a per-tenant limit of 2 on 4 slots, tenant-1's backlog of 6 takes 2 slots and waits
/// for them (leases renewed) while tenant-2's one command takes a slot at once; without the
/// limit the backlog takes all 4. Everything drains, never more than 3 calls inside.
#[tokio::test]
async fn a_tenant_call_limit_leaves_slots_to_other_tenants() {
    for (limit, inside_with_backlog) in [(None, 4), (Some(2), 3)] {
        let h = harness();
        let (pool, remote, mut ids) = held_pool(&h, 6, 4, &clock_of_test()).await;
        let receipt = h.create_for("tenant-2", "other").await;
        ids.push(receipt.command_id);
        let pool = pool.with_tenant_call_limit(limit);
        assert_eq!(
            (pool.slots(), pool.max_in_flight(), pool.tenant_call_limit()),
            (4, 8, limit.map(|l| l as u32))
        );
        let (stop, stopped) = watch::channel(false);
        let handle = tokio::spawn(pool.run(stopped));
        let_tasks_run().await;
        assert_eq!(statuses(&h, &ids), (0, 7, 0), "{limit:?}: all 7 claimed");
        assert_eq!(
            remote.inside.load(Ordering::SeqCst),
            inside_with_backlog,
            "{limit:?}: calls inside while tenant-1's backlog waits"
        );
        remote.gate.add_permits(100);
        let_tasks_run().await;
        assert_eq!(statuses(&h, &ids), (0, 0, 7), "{limit:?}");
        assert_eq!(
            remote.most_inside.load(Ordering::SeqCst),
            inside_with_backlog,
            "{limit:?}"
        );
        stop.send(true).unwrap();
        assert_eq!(handle.await.unwrap().completed, 7);
    }
}

/// A command of another tenant that arrives while a bounded tenant's backlog fills the pool
/// (`max_held` = 12 commands: the backlog's dispatches waiting for their tenant hold no place)
/// is claimed once one call has ended and settled, not only after the waiting backlog has
/// drained.
#[tokio::test]
async fn another_tenants_late_command_is_claimed_within_one_call_under_a_tenant_bound() {
    late_command_of_another_tenant(12, 2).await;
}

/// The claimer looks again as soon as a dispatch starts waiting for its tenant, not only when
/// one ends: with a bound of 1 on 4 slots, the first claim of 8 leaves 7 waiting and the pool
/// claims 4 more at once (12 held, `max_held`), with no call ended; then the late command of
/// another tenant is claimed after one call, beside the backlog's one call.
#[tokio::test]
async fn the_pool_claims_into_the_places_of_dispatches_that_start_waiting_for_their_tenant() {
    late_command_of_another_tenant(14, 1).await;
}

/// tenant-1's `backlog` provisions under a bound of `limit` calls, on one worker of 4 slots
/// (8 in flight, 12 held), then one command of tenant-2 once the pool is full.
async fn late_command_of_another_tenant(backlog: usize, limit: usize) {
    let h = harness();
    let (pool, remote, ids) = held_pool(&h, backlog, 4, &clock_of_test()).await;
    let pool = pool.with_tenant_call_limit(Some(limit));
    assert_eq!((pool.max_in_flight(), pool.max_held()), (8, 12));
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    let held = backlog.min(12);
    assert_eq!(
        statuses(&h, &ids),
        (backlog - held, held, 0),
        "8 claimed, then 4 more into the places of the waiting, with no call ended"
    );
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        limit,
        "tenant-1 makes {limit} calls"
    );

    let late = h.create_for("tenant-2", "late").await.command_id;
    // One call of tenant-1 ends: the loop looks again and claims into the places its waiting
    // dispatches would take; tenant-2's command (its turn at the head) takes a free slot.
    remote.gate.add_permits(1);
    let_tasks_run().await;
    assert_eq!(h.command(&late).status, CommandStatus::Processing);
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        limit + 1,
        "{limit} of tenant-1, 1 of tenant-2"
    );
    let (pending, processing, succeeded) = statuses(&h, &ids);
    assert_eq!(succeeded, 1);
    assert!(
        processing < 12,
        "at most max_held (12) commands held: {processing} + the late one"
    );
    assert_eq!(pending + processing + succeeded, backlog);

    remote.gate.add_permits(100);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (0, 0, backlog));
    assert_eq!(h.command(&late).status, CommandStatus::Succeeded);
    assert_eq!(remote.most_inside.load(Ordering::SeqCst), limit + 1);
    stop.send(true).unwrap();
    assert_eq!(handle.await.unwrap().completed, backlog as u64 + 1);
}

/// A tenant bound would make dispatches wait on leases that are not renewed: a pool whose
/// dispatcher does not renew ignores it (and `tenantry serve` refuses the combination).
#[tokio::test]
async fn a_pool_without_renewal_ignores_a_tenant_bound() {
    let h = harness();
    let dispatcher = Arc::new(Dispatcher::new(
        h.store.clone(),
        h.remote.clone(),
        DispatcherConfig::default()
            .with_renew_leases(false)
            .with_lease_duration(Duration::from_secs(300)),
    ));
    let config = WorkerConfig {
        claim_batch: 4,
        ..WorkerConfig::default()
    };
    let pool = WorkerPool::new(dispatcher, owner("pool"), 1, config.clone())
        .with_tenant_call_limit(Some(2));
    assert_eq!(
        (pool.slots(), pool.tenant_call_limit(), pool.max_held()),
        (4, None, 4)
    );
    let renewing_dispatcher = Arc::new(Dispatcher::new(
        h.store.clone(),
        h.remote.clone(),
        DispatcherConfig::default(),
    ));
    let renewing = WorkerPool::new(renewing_dispatcher, owner("pool"), 1, config)
        .with_tenant_call_limit(Some(2));
    assert_eq!(
        (renewing.tenant_call_limit(), renewing.max_held()),
        (Some(2), 12)
    );
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

/// A remote that answers every provision after `delay` (tokio time: virtual on a paused
/// runtime), counting the calls this replica sent and how many are inside at once.
type SlowRemote = Decorated<Slow>;

/// The decorator of a [`SlowRemote`].
#[derive(Clone)]
struct Slow {
    delay: Duration,
    sent: Arc<AtomicUsize>,
    inside: Arc<AtomicUsize>,
}

#[async_trait]
impl Around for Slow {
    async fn enter(&self, _call: RemoteCall) -> Result<Option<InFlight>, RemoteError> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        self.inside.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        Ok(None)
    }

    fn leave(&self, _call: RemoteCall) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Issue 29, "the pool does not hoard": three replicas (pools of 4 workers × 16, a remote
/// call limit of 8) share one store and a remote that answers after 5 s; 300 provisions.
/// Every replica sends some, none holds more than `2 × slots` claimed (one calling and one
/// waiting per slot), and no more than its slots wait for a call. A pool sized by
/// `4 × workers × claim_batch` (256) took almost the whole backlog in its first claim and
/// left a replica idle.
#[tokio::test(start_paused = true)]
async fn replicas_share_a_backlog_under_a_slow_remote() {
    const COMMANDS: usize = 300;
    let clock = ManualClock::following_tokio(t(0));
    let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()));
    for i in 0..COMMANDS {
        intake
            .create_control_space(&create_request(&format!("cs{i}"), &format!("create-{i}")))
            .await
            .unwrap();
    }
    let inner = FakeKnowledgeFs::new();
    let (stop, stopped) = watch::channel(false);
    let mut replicas = Vec::new();
    for r in 0..3 {
        let remote = SlowRemote {
            inner: inner.clone(),
            around: Slow {
                delay: Duration::from_secs(5),
                sent: Arc::default(),
                inside: Arc::default(),
            },
        };
        let dispatcher = Arc::new(
            Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default())
                .with_clock(Arc::new(clock.clone())),
        );
        let pool = WorkerPool::new(
            dispatcher,
            owner(&format!("replica-{r}")),
            4,
            WorkerConfig::default(),
        )
        .with_remote_call_limit(8);
        assert_eq!(pool.slots(), 8);
        let owner = pool.owner().clone();
        replicas.push((owner, remote, tokio::spawn(pool.run(stopped.clone()))));
    }

    // Sample every 100 ms of virtual time: commands each replica holds (processing, leased
    // to it) and how many of them are not calling.
    let started = clock.monotonic();
    let mut most_held = [0usize; 3];
    let mut most_waiting = [0usize; 3];
    loop {
        let commands = store.commands();
        for (i, (owner, remote, _)) in replicas.iter().enumerate() {
            let held = commands
                .iter()
                .filter(|c| {
                    c.status == CommandStatus::Processing && c.lease_owner.as_ref() == Some(owner)
                })
                .count();
            most_held[i] = most_held[i].max(held);
            let calling = remote.inside.load(Ordering::SeqCst);
            most_waiting[i] = most_waiting[i].max(held.saturating_sub(calling));
        }
        if commands
            .iter()
            .all(|c| c.status == CommandStatus::Succeeded)
        {
            break;
        }
        assert!(
            clock.monotonic() - started < Duration::from_secs(600),
            "backlog not drained"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = clock.monotonic() - started;
    stop.send(true).unwrap();
    let mut sent = Vec::new();
    for (_, remote, handle) in replicas {
        handle.await.unwrap();
        sent.push(remote.sent.load(Ordering::SeqCst));
    }
    println!(
        "300 commands, 3 replicas, 5 s remote: sent {sent:?}, most held {most_held:?}, \
         most waiting {most_waiting:?}, drained in {elapsed:?} (virtual)"
    );
    assert_eq!(
        sent.iter().sum::<usize>(),
        COMMANDS,
        "each command sent once"
    );
    assert!(sent.iter().all(|&n| n > 0), "every replica sends: {sent:?}");
    assert!(
        most_held.iter().all(|&n| n <= 16),
        "a replica holds at most 2 × slots: {most_held:?}"
    );
    assert!(
        most_waiting.iter().all(|&n| n <= 8),
        "at most one waiting command per slot: {most_waiting:?}"
    );
}

/// A pool of one remote-call slot whose only slot is held by cs0's provision (at the gate),
/// and a deletion of `cs-lost` claimed behind it: the provision of `cs-lost` applied on the
/// remote but its answer was lost, so the deletion must look the space up by provisioning key.
async fn lookup_behind_a_held_call(
    h: &Harness,
    clock: &ManualClock,
) -> (
    watch::Sender<bool>,
    tokio::task::JoinHandle<WorkerReport>,
    HeldRemote,
    CommandId,
) {
    h.create("cs-lost").await;
    h.remote
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    h.dispatch(t(0), true).await;
    let (pool, remote, _) = held_pool(h, 1, 1, clock).await;
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        1,
        "cs0's provision holds the slot"
    );
    let delete = h.delete("cs-lost").await.command_id;
    // The lost provision's retry is due in about 2 s: the idle pool looks again then and
    // claims the deletion into its one free place.
    clock.advance(Duration::from_secs(3));
    let_tasks_run().await;
    assert_eq!(h.command(&delete).status, CommandStatus::Processing);
    (stop, handle, remote, delete)
}

/// Issue 31 (found by the worker simulation over the pool): a deletion's lookup by
/// provisioning key holds a remote-call slot like every other call, so it waits while the
/// pool's only slot is taken, and the process never has more calls open than its slots.
#[tokio::test]
async fn a_deletion_lookup_waits_for_a_remote_call_slot() {
    let h = harness();
    let clock = clock_of_test();
    let (stop, handle, remote, delete) = lookup_behind_a_held_call(&h, &clock).await;
    assert_eq!(h.calls("lookup"), 0, "the lookup waits for the slot");
    remote.gate.add_permits(100);
    let_tasks_run().await;
    assert_eq!(h.calls("lookup"), 1);
    assert_eq!(h.command(&delete).status, CommandStatus::Succeeded);
    assert_eq!(h.space("cs-lost").await.state, ControlSpaceState::Deleted);
    stop.send(true).unwrap();
    handle.await.unwrap();
}

/// A pool that shuts down while a deletion waits for a slot to look its space up hands the
/// deletion back (nothing sent, the attempt given back) instead of making the lookup.
#[tokio::test]
async fn a_deletion_waiting_to_look_up_is_handed_back_at_shutdown() {
    let h = harness();
    let clock = clock_of_test();
    let (stop, handle, remote, delete) = lookup_behind_a_held_call(&h, &clock).await;
    stop.send(true).unwrap();
    let_tasks_run().await;
    let record = h.command(&delete);
    assert_eq!(
        retry_of(&record),
        (
            CommandStatus::Pending,
            Some("SHUTDOWN_BEFORE_CALL"),
            clock.now()
        )
    );
    assert_eq!(h.calls("lookup"), 0, "no lookup after shutdown");
    remote.gate.add_permits(1);
    handle.await.unwrap();
}

/// A pool that shuts down between a deletion's `404` and the lookup by provisioning key that
/// must follow it (the lookup waiting for the pool's only slot, taken by another command's
/// call) settles the deletion as a retry with the `404`'s code, due at once, its attempt given
/// back: no lookup is sent after the stop, and the stop never spends the deletion's budget.
#[tokio::test]
async fn a_deletion_stopped_between_its_404_and_the_lookup_retries_at_once() {
    let h = harness();
    let clock = clock_of_test();
    h.create("cs-gone").await;
    h.drain(t(0)).await;
    let delete = h.delete("cs-gone").await.command_id;
    h.remote.push_fault(
        RemoteCall::Deletion,
        RemoteFault::Fail(RemoteError::answered(
            404,
            "KNOWLEDGE_FS_SPACE_NOT_FOUND",
            "no such space",
        )),
    );
    // A provision claimed right behind the deletion (a later turn of the same tenant).
    let provision = h.create("cs-next").await.command_id;
    let (pool, remote, _) = held_pool(&h, 0, 1, &clock).await;
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(h.command(&delete).status, CommandStatus::Processing);
    assert_eq!(h.command(&provision).status, CommandStatus::Processing);
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        1,
        "the deletion's call holds the slot"
    );
    // The deletion is answered 404 and gives the slot up; the provision's call takes it (and
    // waits at the gate), so the deletion's lookup waits for the slot.
    remote.gate.add_permits(1);
    let_tasks_run().await;
    assert_eq!(h.calls("lookup"), 0, "the lookup waits for the slot");
    assert_eq!(h.command(&delete).status, CommandStatus::Processing);
    let attempts = h.command(&delete).attempt_count;
    stop.send(true).unwrap();
    let_tasks_run().await;
    let record = h.command(&delete);
    assert_eq!(
        retry_of(&record),
        (
            CommandStatus::Pending,
            Some("KNOWLEDGE_FS_SPACE_NOT_FOUND"),
            clock.now()
        )
    );
    assert_eq!(
        record.attempt_count - record.attempt_budget_base,
        attempts - 1,
        "the attempt is given back"
    );
    assert_eq!(h.calls("lookup"), 0, "no lookup after shutdown");
    remote.gate.add_permits(1);
    handle.await.unwrap();
    assert_eq!(h.command(&provision).status, CommandStatus::Succeeded);
}
