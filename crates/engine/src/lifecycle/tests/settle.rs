//! Settles that race (a lease taken over, a control space changed by a concurrent writer),
//! task metrics, and batch claims.

use super::*;

#[tokio::test]
async fn late_settle_after_lease_takeover_changes_nothing() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let remote = GatedRemote::new(h.remote.clone());
    let metrics = Arc::new(RecordingMetrics::default());
    let slow = Arc::new(
        Dispatcher::new(h.store.clone(), remote.clone(), DispatcherConfig::default())
            .with_clock(Arc::new(clock_of_test()))
            .with_metrics(metrics.clone()),
    );
    let task = {
        let slow = slow.clone();
        tokio::spawn(async move { slow.dispatch_one(&owner("slow"), at(t(0), true)).await })
    };
    remote.entered.notified().await;
    // The lease expires; another worker takes over and completes the command.
    assert!(h.dispatch(t(301), true).await.completed);
    let settled = h.space("cs1").await;
    let record = h.command(&receipt.command_id);
    remote.release.notify_one();
    let late = task.await.unwrap();
    assert_eq!(
        late,
        Err(DispatchError::LeaseLost {
            command_id: receipt.command_id.clone()
        })
    );
    assert_eq!(h.space("cs1").await, settled, "late settle changed nothing");
    assert_eq!(h.command(&receipt.command_id), record);
    let statuses: Vec<TaskStatus> = metrics
        .records
        .lock()
        .unwrap()
        .iter()
        .map(|m| m.status)
        .collect();
    assert_eq!(statuses, [TaskStatus::Running, TaskStatus::DispatchError]);
    assert_eq!(h.remote.counters().spaces_created, 1);
}

#[tokio::test]
async fn metrics_record_each_task_state_with_duration_since_creation() {
    let h = harness();
    h.create("cs1").await;
    let metrics = Arc::new(RecordingMetrics::default());
    let dispatcher = h
        .dispatcher_on(clock_of_test())
        .with_metrics(metrics.clone());
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::answered(503, "BUSY", "busy")),
    );
    dispatcher
        .dispatch_one(&owner("w"), at(t(0), true))
        .await
        .unwrap();
    dispatcher
        .dispatch_one(&owner("w"), at(t(7), true))
        .await
        .unwrap();
    let records = metrics.records.lock().unwrap().clone();
    let expected = [
        (TaskStatus::Running, None, None),
        (TaskStatus::Retry, None, Some("BUSY")),
        (TaskStatus::Running, None, None),
        (TaskStatus::Succeeded, Some(7.0), None),
    ];
    assert_eq!(records.len(), expected.len());
    for (record, (status, duration, code)) in records.iter().zip(expected) {
        assert_eq!(record.operation, "provision");
        assert_eq!(record.status, status);
        assert_eq!(record.duration_seconds, duration);
        assert_eq!(record.error_code.as_deref(), code);
    }
}

#[tokio::test]
async fn failing_metrics_sink_never_breaks_dispatch() {
    let h = harness();
    h.create("cs1").await;
    let dispatcher = h
        .dispatcher_on(clock_of_test())
        .with_metrics(Arc::new(FailingMetrics));
    assert!(
        dispatcher
            .dispatch_one(&owner("w"), at(t(0), true))
            .await
            .unwrap()
            .completed
    );
}

#[tokio::test]
async fn batch_dispatch_claims_several_commands_in_one_call() {
    let h = harness();
    for i in 0..5 {
        h.create(&format!("cs{i}")).await;
    }
    let results = h
        .dispatcher
        .dispatch_batch(&owner("w"), at(t(0), true), 3)
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|o| o.completed))
    );
    assert_eq!(
        h.dispatcher
            .dispatch_batch(&owner("w"), at(t(0), true), 10)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(h.remote.counters().spaces_created, 5);
}

/// A store whose first `races` settles carrying a control-space CAS find the control space
/// changed by a concurrent writer (its resource version bumped just before); it counts the
/// control-space reads of single rows.
#[derive(Clone)]
struct RacingStore {
    inner: InMemoryLifecycleStore,
    races: Arc<AtomicUsize>,
    reads: Arc<AtomicUsize>,
}

impl RacingStore {
    fn new(inner: InMemoryLifecycleStore, races: usize) -> Self {
        Self {
            inner,
            races: Arc::new(AtomicUsize::new(races)),
            reads: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A dispatcher over this store and `h`'s remote, on the test clock.
    fn dispatcher(&self, h: &Harness) -> Dispatcher<Self, FakeKnowledgeFs> {
        Dispatcher::new(self.clone(), h.remote.clone(), DispatcherConfig::default())
            .with_clock(Arc::new(clock_of_test()))
    }
}

impl forward::Decorator for RacingStore {
    type Inner = InMemoryLifecycleStore;
    fn inner(&self) -> &InMemoryLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for RacingStore {
    async fn settle(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        settlement: &tenantry_lifecycle::Settlement,
    ) -> Result<(), tenantry_ports::lifecycle::SettleError> {
        if let Some(cas) = &settlement.control_space
            && self
                .races
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            let mut current = cas.next.clone();
            current.resource_version = cas.expected_resource_version + 1;
            current.state = cas.expected_state;
            self.inner.put_control_space(current);
        }
        self.inner.settle(lease, settlement).await
    }
}

#[async_trait]
impl forward::ControlSpaceReader for RacingStore {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, tenantry_ports::lifecycle::StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.control_space(tenant_id, control_space_id).await
    }
}
impl forward::IntakeStore for RacingStore {}

#[tokio::test]
async fn control_space_conflict_at_settle_hands_the_command_back_for_a_re_read() {
    let h = harness();
    let receipt = h.create("cs1").await;
    // Both the compare-and-set on the row read before the call and the one on the row read
    // again after it find the control space changed.
    let racing = RacingStore::new(h.store.clone(), 2);
    let dispatcher = racing.dispatcher(&h);
    let first = dispatcher
        .dispatch_one(&owner("w1"), at(t(0), true))
        .await
        .unwrap();
    assert!(first.claimed && !first.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(
        retry_of(&record),
        (
            CommandStatus::Pending,
            Some(ErrorCode::ControlSpaceConflict.as_str()),
            t(2)
        ),
        "retried at once instead of waiting for the lease to expire"
    );
    assert_eq!(record.lease_owner, None);
    assert!(
        dispatcher
            .dispatch_one(&owner("w1"), at(t(2), true))
            .await
            .unwrap()
            .completed
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Active);
    assert_eq!(h.remote.counters().spaces_created, 1);
}

/// docs/protocol.md, "A provision completes on the row it started from".
#[tokio::test]
async fn a_provision_completes_on_the_row_it_started_from_without_reading_it_again() {
    let h = harness();
    h.create("cs1").await;
    let store = RacingStore::new(h.store.clone(), 0);
    let dispatcher = store.dispatcher(&h);
    let report = dispatcher
        .dispatch_one(&owner("w1"), at(t(0), true))
        .await
        .unwrap();
    assert!(report.completed);
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Active);
    assert_eq!(
        store.reads.load(Ordering::SeqCst),
        0,
        "the claim carried the row; its compare-and-set proved it current"
    );
}

#[tokio::test]
async fn a_provision_whose_row_changed_during_its_call_reads_it_again_in_the_same_attempt() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let created = h.space("cs1").await.resource_version;
    let store = RacingStore::new(h.store.clone(), 1);
    let dispatcher = store.dispatcher(&h);
    let report = dispatcher
        .dispatch_one(&owner("w1"), at(t(0), true))
        .await
        .unwrap();
    assert!(report.completed, "completed in its first attempt");
    assert_eq!(
        store.reads.load(Ordering::SeqCst),
        1,
        "one read after the refusal"
    );
    let space = h.space("cs1").await;
    assert_eq!(space.state, ControlSpaceState::Active);
    // The concurrent writer's version, then the provision's own compare-and-set on it.
    assert_eq!(space.resource_version, created + 2);
    assert_eq!(h.command(&receipt.command_id).attempt_count, 1);
    assert_eq!(h.remote.counters().spaces_created, 1);
}
