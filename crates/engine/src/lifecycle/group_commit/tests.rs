//! Behaviour tests of [`GroupCommitStore`] over the in-memory store: batching, per-caller
//! results, batch failures, coalesced reads, and the saga dispatched through it.

use std::sync::Mutex as StdMutex;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, TimeZone, Utc};
use tenantry_kernel::{LeaseEpoch, LeaseOwner};
use tenantry_lifecycle::ClaimedCommand;
use tenantry_lifecycle::{CommandStatus, ControlSpaceState, Transition};
use tenantry_ports::clock::ManualClock;
use tenantry_ports::lifecycle::conformance::create_plan;
use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, InMemoryLifecycleStore};
use tenantry_ports::lifecycle::{ClaimRequest, IntakeStore};
use tokio::sync::Notify;

use super::*;
use crate::lifecycle::{Dispatcher, DispatcherConfig};

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_900_000_000 + seconds, 0)
        .single()
        .unwrap()
}

fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::parse(name).unwrap()
}

fn claim_request(who: &str, limit: u32) -> ClaimRequest {
    ClaimRequest {
        owner: owner(who),
        lease_duration: Duration::from_secs(60),
        include_provision: true,
        limit,
        call_deadline: std::time::Duration::ZERO,
    }
}

/// The in-memory store, recording batch sizes; an armed gate holds the next batch call until
/// released, so requests can queue up behind it deterministically.
#[derive(Clone, Default)]
struct Gated {
    inner: InMemoryLifecycleStore,
    settle_batches: Arc<StdMutex<Vec<usize>>>,
    read_batches: Arc<StdMutex<Vec<usize>>>,
    armed: Arc<AtomicBool>,
    entered: Arc<Notify>,
    release: Arc<Notify>,
    fail_batch: Arc<StdMutex<Option<StoreError>>>,
}

impl Gated {
    async fn gate(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
    }
}

impl forward::Decorator for Gated {
    type Inner = InMemoryLifecycleStore;
    fn inner(&self) -> &InMemoryLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for Gated {
    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        let fail = self.fail_batch.lock().unwrap().take();
        self.gate().await;
        self.settle_batches.lock().unwrap().push(items.len());
        match fail {
            Some(error) => Err(error),
            None => self.inner.settle_many(items).await,
        }
    }
}

#[async_trait]
impl forward::ControlSpaceReader for Gated {
    async fn control_spaces(
        &self,
        keys: &[(TenantId, ControlSpaceId)],
    ) -> Result<Vec<Option<ControlSpace>>, StoreError> {
        self.gate().await;
        self.read_batches.lock().unwrap().push(keys.len());
        self.inner.control_spaces(keys).await
    }
}

impl forward::IntakeStore for Gated {}

fn one_at_a_time() -> GroupCommitConfig {
    GroupCommitConfig {
        max_in_flight: 1,
        ..GroupCommitConfig::default()
    }
}

/// Enqueues `n` provisions (`cs0..`) and claims them all as `w1`.
async fn claimed(store: &Gated, n: usize) -> Vec<ClaimedCommand> {
    for i in 0..n {
        store
            .submit(&create_plan(&format!("cs{i}"), &format!("k{i}"), t(0)))
            .await
            .unwrap();
    }
    let claimed = store.claim(&claim_request("w1", n as u32)).await.unwrap();
    assert_eq!(claimed.len(), n);
    claimed
}

/// Lets every spawned task run until it waits.
async fn settle_down() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn group_commit_settles_concurrent_requests_in_one_batch() {
    let store = Gated::default();
    let commands = claimed(&store, 6).await;
    let group = GroupCommitStore::start(store.clone(), one_at_a_time());
    store.armed.store(true, Ordering::SeqCst);
    let mut tasks = Vec::new();
    for command in &commands {
        let group = group.clone();
        let lease = command.lease.clone();
        tasks.push(tokio::spawn(async move {
            group.settle(&lease, &Settlement::ack(t(1))).await
        }));
        if tasks.len() == 1 {
            // The first request is taken alone and held in its transaction.
            store.entered.notified().await;
        }
    }
    settle_down().await;
    store.release.notify_one();
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(()));
    }
    assert_eq!(*store.settle_batches.lock().unwrap(), vec![1, 5]);
    for command in &commands {
        assert_eq!(
            store.inner.command(command.id()).unwrap().status,
            CommandStatus::Succeeded
        );
    }
}

#[tokio::test]
async fn group_commit_reports_a_lost_lease_only_to_its_caller() {
    let store = Gated::default();
    let commands = claimed(&store, 3).await;
    // A lease of an earlier epoch of the second command: its holder was taken over.
    let mut stale = commands[1].lease.clone();
    stale.epoch = LeaseEpoch(stale.epoch.0 - 1);
    let group = GroupCommitStore::start(store.clone(), one_at_a_time());
    store.armed.store(true, Ordering::SeqCst);
    let blocker = {
        let group = group.clone();
        let lease = commands[0].lease.clone();
        tokio::spawn(async move { group.settle(&lease, &Settlement::ack(t(1))).await })
    };
    store.entered.notified().await;
    let cs = store
        .control_space(&commands[1].tenant_id, &commands[1].control_space_id)
        .await
        .unwrap()
        .unwrap();
    let activate = cs
        .plan(
            &[Transition::Activate {
                operation_id: cs.lifecycle_operation_id.clone(),
                knowledge_space_id: tenantry_kernel::KnowledgeSpaceId::parse("ks-1").unwrap(),
                revision: 1,
            }],
            t(1),
        )
        .unwrap();
    let lost = {
        let group = group.clone();
        tokio::spawn(async move {
            group
                .settle(&stale, &Settlement::ack(t(1)).with_control_space(activate))
                .await
        })
    };
    let kept = {
        let group = group.clone();
        let lease = commands[2].lease.clone();
        tokio::spawn(async move { group.settle(&lease, &Settlement::ack(t(1))).await })
    };
    settle_down().await;
    store.release.notify_one();
    assert_eq!(blocker.await.unwrap(), Ok(()));
    assert_eq!(
        lost.await.unwrap(),
        Err(SettleError::LeaseLost {
            command_id: commands[1].id().clone()
        })
    );
    assert_eq!(kept.await.unwrap(), Ok(()));
    assert_eq!(*store.settle_batches.lock().unwrap(), vec![1, 2]);
    let row = store.inner.command(commands[1].id()).unwrap();
    assert_eq!(row.status, CommandStatus::Processing);
    let after = store
        .control_space(&commands[1].tenant_id, &commands[1].control_space_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, cs, "the lost item's compare-and-set was not applied");
}

#[tokio::test]
async fn group_commit_batch_failure_reaches_every_caller_of_the_batch() {
    let store = Gated::default();
    let commands = claimed(&store, 3).await;
    let group = GroupCommitStore::start(store.clone(), one_at_a_time());
    store.armed.store(true, Ordering::SeqCst);
    let settle = |i: usize| {
        let group = group.clone();
        let lease = commands[i].lease.clone();
        tokio::spawn(async move { group.settle(&lease, &Settlement::ack(t(1))).await })
    };
    let first = settle(0);
    store.entered.notified().await;
    // The next batch (the two requests queued behind the first) fails as a whole.
    *store.fail_batch.lock().unwrap() = Some(StoreError::unavailable("down"));
    let queued = [settle(1), settle(2)];
    settle_down().await;
    store.release.notify_one();
    assert_eq!(first.await.unwrap(), Ok(()));
    for task in queued {
        assert_eq!(
            task.await.unwrap(),
            Err(SettleError::Store(StoreError::unavailable("down")))
        );
    }
    assert_eq!(*store.settle_batches.lock().unwrap(), vec![1, 2]);
    // Nothing of the failed batch was written: both are still processing and settle later.
    for command in &commands[1..] {
        assert_eq!(
            store.inner.command(command.id()).unwrap().status,
            CommandStatus::Processing
        );
        group
            .settle(&command.lease, &Settlement::ack(t(2)))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn coalesced_reads_answer_each_caller_with_its_own_space() {
    let store = Gated::default();
    claimed(&store, 3).await;
    let group = GroupCommitStore::start(store.clone(), one_at_a_time());
    store.armed.store(true, Ordering::SeqCst);
    let tenant = create_plan("cs0", "k0", t(0)).command.tenant_id;
    let read = |cs: &str| {
        let group = group.clone();
        let tenant = tenant.clone();
        let cs = ControlSpaceId::parse(cs).unwrap();
        tokio::spawn(async move { group.control_space(&tenant, &cs).await })
    };
    let first = read("cs0");
    store.entered.notified().await;
    let queued: Vec<_> = ["cs1", "missing", "cs2", "cs1"]
        .into_iter()
        .map(read)
        .collect();
    settle_down().await;
    store.release.notify_one();
    let cs0 = first.await.unwrap().unwrap().unwrap();
    assert_eq!(cs0.control_space_id.as_str(), "cs0");
    let answers: Vec<Option<String>> = futures::future::join_all(queued)
        .await
        .into_iter()
        .map(|r| {
            r.unwrap()
                .unwrap()
                .map(|s| s.control_space_id.as_str().to_owned())
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            Some("cs1".to_owned()),
            None,
            Some("cs2".to_owned()),
            Some("cs1".to_owned())
        ]
    );
    assert_eq!(*store.read_batches.lock().unwrap(), vec![1, 4]);
}

#[tokio::test]
async fn dispatcher_over_group_commit_settles_every_command_once() {
    let store = Gated::default();
    for i in 0..20 {
        store
            .submit(&create_plan(&format!("cs{i}"), &format!("k{i}"), t(0)))
            .await
            .unwrap();
    }
    let remote = FakeKnowledgeFs::new();
    let dispatcher = Dispatcher::new(
        GroupCommitStore::start(store.clone(), GroupCommitConfig::default()),
        remote.clone(),
        DispatcherConfig::default(),
    );
    let results = dispatcher
        .dispatch_batch(&owner("w1"), true, 20)
        .await
        .unwrap();
    assert_eq!(results.len(), 20);
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|o| o.completed))
    );
    assert_eq!(remote.counters().calls.get("provision"), Some(&20));
    for record in store.inner.commands() {
        assert_eq!(record.status, CommandStatus::Succeeded);
        let space = store
            .control_space(&record.tenant_id, &record.control_space_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(space.state, ControlSpaceState::Active);
    }
    let batches = store.settle_batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), 20);
    assert!(
        batches.len() < 20,
        "concurrent settles shared transactions: {batches:?}"
    );
}

/// `max_wait` is timed on the store's clock port, not on tokio's clock: a flusher holding
/// fewer than `max_batch` requests executes when the clock has advanced `max_wait`, however
/// much time passes on tokio's (paused) clock before.
#[tokio::test(start_paused = true)]
async fn group_commit_waits_max_wait_on_its_clock() {
    let store = Gated::default();
    let commands = claimed(&store, 3).await;
    let clock = ManualClock::new(t(0));
    let group = GroupCommitStore::start_with_clock(
        store.clone(),
        GroupCommitConfig {
            max_batch: 3,
            max_wait: Duration::from_secs(10),
            wait_only_when_busy: false,
            ..one_at_a_time()
        },
        Arc::new(clock.clone()),
    );
    let mut tasks = Vec::new();
    for command in &commands[..2] {
        let group = group.clone();
        let lease = command.lease.clone();
        tasks.push(tokio::spawn(async move {
            group.settle(&lease, &Settlement::ack(t(1))).await
        }));
    }
    // A minute of tokio's virtual time: the flusher keeps gathering.
    tokio::time::sleep(Duration::from_secs(60)).await;
    settle_down().await;
    assert!(store.settle_batches.lock().unwrap().is_empty());
    clock.advance(Duration::from_secs(9));
    settle_down().await;
    assert!(store.settle_batches.lock().unwrap().is_empty(), "9 s of 10");
    clock.advance(Duration::from_secs(1));
    for task in tasks {
        assert_eq!(task.await.unwrap(), Ok(()));
    }
    assert_eq!(*store.settle_batches.lock().unwrap(), vec![2]);
}

/// The adaptive wait (`wait_only_when_busy`, the default): with no batch executing, a lone
/// settle is executed at once however long `max_wait` is; while a batch is executing, the
/// other flusher gathers for `max_wait` (on its clock) before executing what it holds.
#[tokio::test(start_paused = true)]
async fn group_commit_waits_only_while_another_batch_executes() {
    let store = Gated::default();
    let commands = claimed(&store, 3).await;
    let clock = ManualClock::new(t(0));
    let group = GroupCommitStore::start_with_clock(
        store.clone(),
        GroupCommitConfig {
            max_batch: 8,
            max_wait: Duration::from_secs(10),
            max_in_flight: 2,
            ..GroupCommitConfig::default()
        },
        Arc::new(clock.clone()),
    );
    // Idle: the first settle does not wait for the clock.
    store.armed.store(true, Ordering::SeqCst);
    let first = {
        let group = group.clone();
        let lease = commands[0].lease.clone();
        tokio::spawn(async move { group.settle(&lease, &Settlement::ack(t(1))).await })
    };
    // Executing (held by the gate) without the store's clock moving.
    tokio::time::timeout(Duration::from_secs(60), store.entered.notified())
        .await
        .expect("an idle flusher executes a lone settle at once");
    // Busy: the next settles are gathered for `max_wait`.
    let mut rest = Vec::new();
    for command in &commands[1..] {
        let group = group.clone();
        let lease = command.lease.clone();
        rest.push(tokio::spawn(async move {
            group.settle(&lease, &Settlement::ack(t(1))).await
        }));
        settle_down().await;
    }
    assert!(store.settle_batches.lock().unwrap().is_empty());
    clock.advance(Duration::from_secs(10));
    for task in rest {
        assert_eq!(task.await.unwrap(), Ok(()));
    }
    assert_eq!(
        *store.settle_batches.lock().unwrap(),
        vec![2],
        "gathered while busy"
    );
    store.release.notify_one();
    assert_eq!(first.await.unwrap(), Ok(()));
    assert_eq!(*store.settle_batches.lock().unwrap(), vec![2, 1]);
}

/// The prompt lane's settle does not queue: a dispatch in the lane
/// (`Dispatcher::dispatch_prompt`) hands its settle to the store as a batch of one, which the
/// group-commit store executes at once, while the one flusher is held in another batch (a
/// settle queued for group commit would wait for it).
#[tokio::test]
async fn a_prompt_dispatch_settles_beside_a_held_batch() {
    let store = Gated::default();
    let mut commands = claimed(&store, 2).await;
    let group = GroupCommitStore::start(store.clone(), one_at_a_time());
    store.armed.store(true, Ordering::SeqCst);
    let held = tokio::spawn({
        let group = group.clone();
        let lease = commands[0].lease.clone();
        async move { group.settle(&lease, &Settlement::ack(t(1))).await }
    });
    store.entered.notified().await;

    let remote = FakeKnowledgeFs::new();
    let dispatcher = Dispatcher::new(group, remote.clone(), DispatcherConfig::default());
    let slots = crate::lifecycle::dispatcher::CallSlots::new(2, None).reserve_for_prompt_lane(1);
    let prompt = commands.pop().unwrap();
    let id = prompt.id().clone();
    let report = tokio::time::timeout(
        Duration::from_secs(5),
        dispatcher.dispatch_prompt(prompt, tokio::time::Instant::now(), true, &slots),
    )
    .await
    .expect("the prompt settle did not wait for the held batch")
    .unwrap();
    assert!(report.completed);
    assert_eq!(
        store.inner.command(&id).unwrap().status,
        CommandStatus::Succeeded
    );
    assert_eq!(remote.counters().calls.get("provision"), Some(&1));
    assert!(!held.is_finished(), "the batch is still held");

    store.release.notify_one();
    assert_eq!(held.await.unwrap(), Ok(()));
    assert_eq!(*store.settle_batches.lock().unwrap(), vec![1, 1]);
}
