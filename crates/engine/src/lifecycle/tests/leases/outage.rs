//! A store outage on virtual time: a lease that ends while its call is in flight cancels the
//! call, a re-claim in the same process waits for it, and the process's own re-claim is no
//! takeover (case 014); timestamps and refusals after a slow call are timed on the store's clock
//! at the end of the call (issue 29).

use super::*;

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

impl forward::Decorator for OutageStore {
    type Inner = InMemoryLifecycleStore;
    fn inner(&self) -> &InMemoryLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for OutageStore {
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

impl forward::IntakeStore for OutageStore {}

#[async_trait]
impl forward::ControlSpaceReader for OutageStore {
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
