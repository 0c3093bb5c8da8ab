//! A renewal that meets the attempt's own settle or hand-back is not a lost lease (case 015):
//! a store that answers settles late lets a renewal tick run in between.

use super::*;

/// A store whose settles are applied at once but answered `answer_delay` later on `clock` (a
/// commit whose reply is slow to come back, or a group commit's wait after its transaction):
/// a renewal tick in between finds the command already settled by this very attempt.
#[derive(Clone)]
struct LateAnswerStore {
    inner: InMemoryLifecycleStore,
    clock: ManualClock,
    answer_delay: Duration,
}

impl forward::Decorator for LateAnswerStore {
    type Inner = InMemoryLifecycleStore;
    fn inner(&self) -> &InMemoryLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for LateAnswerStore {
    async fn settle(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        settlement: &tenantry_lifecycle::Settlement,
    ) -> Result<(), tenantry_ports::lifecycle::SettleError> {
        let applied = self.inner.settle(lease, settlement).await;
        self.clock.sleep(self.answer_delay).await;
        applied
    }
}

impl forward::ControlSpaceReader for LateAnswerStore {}
impl forward::IntakeStore for LateAnswerStore {}

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
