//! A dispatch whose settle has begun holds no claim place (docs/protocol.md, "A settling
//! dispatch holds no claim place"): the pool claims into its place while the settle waits,
//! up to `max_held_settling` commands in all.

use super::*;
use crate::lifecycle::dispatcher::SettlingPlaces;

/// A store whose settles wait for a gate before they are applied (a group commit's batch
/// waiting for its turn, or a slow commit).
#[derive(Clone)]
struct GatedSettles {
    inner: InMemoryLifecycleStore,
    gate: Arc<tokio::sync::Semaphore>,
}

impl forward::Decorator for GatedSettles {
    type Inner = InMemoryLifecycleStore;
    fn inner(&self) -> &InMemoryLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for GatedSettles {
    async fn settle(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        settlement: &tenantry_lifecycle::Settlement,
    ) -> Result<(), tenantry_ports::lifecycle::SettleError> {
        if let Ok(permit) = self.gate.acquire().await {
            permit.forget();
        }
        self.inner.settle(lease, settlement).await
    }
}

impl forward::ControlSpaceReader for GatedSettles {}
impl forward::IntakeStore for GatedSettles {}

/// One worker with a claim batch of 2 (2 slots, 4 places, 8 commands held at most) over a
/// remote that answers at once and a store whose settles wait: the first claim takes 4, their
/// calls end and their settles wait, and the pool claims 4 more into their places (8 held),
/// never a ninth while the settles wait. Without the rule the pool would hold 4 and wait.
#[tokio::test]
async fn the_pool_claims_into_the_places_of_dispatches_whose_settle_waits() {
    let h = harness();
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(h.create(&format!("cs{i}")).await.command_id);
    }
    let store = GatedSettles {
        inner: h.store.clone(),
        gate: Arc::new(tokio::sync::Semaphore::new(0)),
    };
    let dispatcher = Arc::new(
        Dispatcher::new(store.clone(), h.remote.clone(), DispatcherConfig::default())
            .with_clock(Arc::new(clock_of_test())),
    );
    let config = WorkerConfig {
        idle_poll: Duration::from_secs(3600),
        claim_batch: 2,
        ..WorkerConfig::default()
    };
    let pool = WorkerPool::new(dispatcher, owner("pool"), 1, config);
    assert_eq!(
        (
            pool.max_in_flight(),
            pool.max_held(),
            pool.max_held_settling()
        ),
        (4, 4, 8)
    );
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(
        statuses(&h, &ids),
        (4, 8, 0),
        "4 claimed, their settles waiting, then 4 more into their places; not a ninth"
    );
    assert_eq!(
        h.remote.counters().spaces_created,
        8,
        "every held command made its call"
    );

    // Two settles are applied: two places of the total free, and the pool claims 2 more.
    store.gate.add_permits(2);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (2, 8, 2));

    store.gate.add_permits(100);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (0, 0, 12));
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!(
        (report.claimed, report.completed, report.errors),
        (12, 12, 0)
    );
}

/// A store that lets the provision `attempted` be claimed by another worker just before a
/// settle that supersedes it: the supersede is refused.
#[derive(Clone)]
struct ClaimedMeanwhile {
    inner: InMemoryLifecycleStore,
    attempted: CommandId,
}

impl forward::Decorator for ClaimedMeanwhile {
    type Inner = InMemoryLifecycleStore;
    fn inner(&self) -> &InMemoryLifecycleStore {
        &self.inner
    }
}

#[async_trait]
impl forward::CommandQueue for ClaimedMeanwhile {
    async fn settle(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        settlement: &tenantry_lifecycle::Settlement,
    ) -> Result<(), tenantry_ports::lifecycle::SettleError> {
        if settlement.supersede.is_some()
            && let Some(mut provision) = self.inner.command(&self.attempted)
        {
            provision.attempt_count += 1;
            self.inner.put_command(provision);
        }
        self.inner.settle(lease, settlement).await
    }
}

impl forward::ControlSpaceReader for ClaimedMeanwhile {}
impl forward::IntakeStore for ClaimedMeanwhile {}

/// A deletion of a never-provisioned space settles an ack that supersedes the provision; when
/// the supersede is refused (the provision was claimed meanwhile) the deletion goes on to the
/// remote. That settle gave no place back: every remote call of the dispatch is made while it
/// still counts among the pool's `max_in_flight` (issue 29's bound holds).
#[tokio::test]
async fn a_deletion_whose_supersede_is_refused_keeps_its_place_for_its_remote_calls() {
    let h = harness();
    let provision = h.create("cs1").await.command_id;
    let delete = h.delete("cs1").await.command_id;
    let store = ClaimedMeanwhile {
        inner: h.store.clone(),
        attempted: provision.clone(),
    };
    let dispatcher = Dispatcher::new(store, h.remote.clone(), DispatcherConfig::default())
        .with_clock(Arc::new(clock_of_test()));
    let places = Arc::new(SettlingPlaces::default());
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    h.remote.set_hook({
        let (places, seen) = (places.clone(), seen.clone());
        move |call| {
            if let Ok(mut seen) = seen.lock() {
                seen.push((call, places.settling()));
            }
        }
    });
    // Product disabled: the claim skips the provision and takes the deletion.
    let (mut claimed, started) = dispatcher.claim(&owner("w1"), false, 1).await.unwrap();
    let command = claimed.pop().expect("the deletion is claimed");
    assert_eq!(command.id(), &delete);
    let report = SettlingPlaces::scope(
        places.clone(),
        dispatcher.dispatch_claimed(command, started, false, None),
    )
    .await
    .unwrap();
    assert!(report.claimed);
    let seen = seen.lock().map(|seen| seen.clone()).unwrap_or_default();
    assert!(!seen.is_empty(), "the deletion went on to the remote");
    assert!(
        seen.iter().all(|(_, settling)| *settling == 0),
        "no remote call while counted as settling: {seen:?}"
    );
    assert_eq!(places.settling(), 0);
}
