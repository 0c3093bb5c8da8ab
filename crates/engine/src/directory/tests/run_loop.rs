//! The projector's run loop on virtual time: backoff after failures (doubling up to half the
//! staleness; capacity refusals up to 5 minutes), shutdown while sleeping or during a hung
//! sync, the first sync at start, refused answers recorded, and receipts stamped with the
//! store's clock on a skewed replica.

use super::*;

#[tokio::test(start_paused = true)]
async fn run_loop_backs_off_doubling_up_to_half_the_staleness_and_never_exits() {
    let f = Fixture::new();
    let p = Arc::new(initialized(&f).await);
    let start = f.clock.monotonic();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runner = {
        let p = Arc::clone(&p);
        tokio::spawn(async move {
            p.run(async {
                let _ = stopped.await;
            })
            .await;
        })
    };
    let events_calls = || {
        f.provider
            .calls()
            .iter()
            .filter(|c| matches!(c, ProviderCall::Events { .. }))
            .count()
    };
    let at_secs = |s: f64| start + Duration::from_secs_f64(s);
    // The first sync runs at once; failures at t=0, 10, 30, 60, 90 (delays 10, 20, 30, 30).
    for (t, expected) in [
        (0.1, 1),
        (9.9, 1),
        (10.1, 2),
        (29.9, 2),
        (30.1, 3),
        (59.9, 3),
        (60.1, 4),
        (90.1, 5),
    ] {
        f.clock.sleep_until(at_secs(t)).await;
        assert_eq!(events_calls(), expected, "at t={t}");
    }
    assert!(matches!(p.require_ready(), Err(NotReady::Stale { .. })));
    // The provider recovers: the sync at t=120 succeeds, the next comes one interval later.
    f.provider.push_events(Ok(batch(10, 10, 10, vec![])));
    f.clock.sleep_until(at_secs(120.1)).await;
    assert_eq!(events_calls(), 6);
    assert_eq!(p.require_ready(), Ok(()));
    f.clock.sleep_until(at_secs(125.1)).await;
    assert_eq!(events_calls(), 7);
    assert!(!runner.is_finished());
    stop.send(()).unwrap();
    runner.await.unwrap();
}

/// Runs `p` until `stop` fires, on the fixture's paused clock.
fn spawn_run(
    p: &Arc<Projector>,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let p = Arc::clone(p);
    let runner = tokio::spawn(async move {
        p.run(async {
            let _ = stopped.await;
        })
        .await;
    });
    (stop, runner)
}

fn snapshot_calls(provider: &ScriptedProvider) -> usize {
    provider
        .calls()
        .iter()
        .filter(|c| matches!(c, ProviderCall::Snapshot))
        .count()
}

/// A directory over a capacity limit is fetched again with a backoff doubling from the
/// interval up to 5 minutes (not half the staleness, 30 s here, as other failures), counted
/// per limit; once it fits, the loop returns to the interval.
#[tokio::test(start_paused = true)]
async fn a_directory_over_a_capacity_limit_is_retried_with_a_longer_backoff() {
    let f = Fixture::new();
    let limits = tenantry_directory::ProjectionLimits {
        max_snapshot_workspaces: 1,
        ..Default::default()
    };
    let config = ProjectorConfig::new(
        INSTANCE,
        Duration::from_secs(5),
        Duration::from_secs(60),
        50,
        limits,
    )
    .unwrap();
    let p = Arc::new(
        DirectoryProjector::new(config, f.provider.clone(), f.store.clone())
            .with_clock(Arc::new(f.clock.clone())),
    );
    for _ in 0..8 {
        f.provider.push_snapshot(Ok(base())); // 2 workspaces, over the limit of 1
    }
    let start = f.clock.monotonic();
    let at_secs = |s: f64| start + Duration::from_secs_f64(s);
    let (stop, runner) = spawn_run(&p);
    // Fetches at t=0, 10, 30, 70, 150, 310, 610, 910 (delays 10, 20, 40, 80, 160, 300, 300).
    for (t, expected) in [
        (0.1, 1),
        (9.9, 1),
        (10.1, 2),
        (30.1, 3),
        (69.9, 3),
        (70.1, 4),
        (149.9, 4),
        (150.1, 5),
        (309.9, 5),
        (310.1, 6),
        (609.9, 6),
        (610.1, 7),
        (910.1, 8),
    ] {
        f.clock.sleep_until(at_secs(t)).await;
        assert_eq!(snapshot_calls(&f.provider), expected, "at t={t}");
    }
    assert_eq!(
        p.capacity_refusals(),
        BTreeMap::from([(CapacityLimit::SnapshotWorkspaces, 8)])
    );
    assert_eq!(
        p.refusals().total_by_rule,
        BTreeMap::from([(RefusalRule::SnapshotWorkspaceCapacity, 8)])
    );
    assert_eq!(p.require_ready(), Err(NotReady::NeverReady));
    assert!(f.store.tables().workspaces.is_empty(), "nothing written");

    // An answer over the client's size cap counts as a capacity refusal too.
    f.provider.push_snapshot(Err(ProviderError::TooLarge {
        size: 200,
        limit: 100,
    }));
    f.clock.sleep_until(at_secs(1210.1)).await;
    assert_eq!(snapshot_calls(&f.provider), 9);
    assert_eq!(p.capacity_refusals()[&CapacityLimit::ResponseBytes], 1);

    // The directory shrinks: the next fetch (300 s later) succeeds, then the interval again.
    f.provider
        .push_snapshot(Ok(snapshot(10, vec![workspace("ws-1", 1, &[("a", 1)])])));
    f.provider.push_events(Ok(batch(10, 10, 10, vec![])));
    f.clock.sleep_until(at_secs(1510.1)).await;
    assert_eq!(snapshot_calls(&f.provider), 10);
    assert_eq!(p.require_ready(), Ok(()));
    f.clock.sleep_until(at_secs(1515.1)).await;
    assert_eq!(
        f.provider.calls().len(),
        11,
        "one events call an interval later"
    );
    stop.send(()).unwrap();
    runner.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn run_loop_stops_on_shutdown_while_sleeping() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    p.run(f.clock.sleep(Duration::from_secs(2))).await;
    assert_eq!(
        f.provider.calls().len(),
        2,
        "the initial snapshot and the sync at the start of run, nothing while sleeping"
    );
}

#[tokio::test(start_paused = true)]
async fn run_syncs_at_start_not_one_interval_later() {
    let f = Fixture::new();
    let p = f.projector();
    f.provider.push_snapshot(Ok(base()));
    let start = f.clock.monotonic();
    p.run(f.clock.sleep(Duration::from_millis(1))).await;
    assert_eq!(f.clock.monotonic() - start, Duration::from_millis(1));
    assert_eq!(
        p.consumer_cursor(),
        Some(10),
        "initialized by the first sync"
    );
    assert_eq!(p.require_ready(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn empty_page_renews_readiness_only_when_all_cursors_are_equal() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    f.clock.advance(Duration::from_secs(59));
    // A page that reports newer events it does not hold (lagging or replayed) proves nothing.
    f.provider.push_events(Ok(batch(10, 10, 12, vec![])));
    assert_eq!(
        p.sync_once().await,
        Err(ProjectorError::Rejected(
            DirectoryError::EmptyPageNotCaughtUp {
                after_cursor: 10,
                cursor: 10,
                high_water_cursor: 12,
            }
        ))
    );
    f.clock.advance(Duration::from_secs(1));
    assert!(matches!(p.require_ready(), Err(NotReady::Stale { .. })));
    f.provider.push_events(Ok(batch(10, 10, 10, vec![])));
    p.sync_once().await.unwrap();
    assert_eq!(p.require_ready(), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_refused_answer_is_recorded_with_rule_workspace_since_and_count() {
    let f = Fixture::new();
    let clock = ManualClock::new(at(0));
    let p = f.projector().with_clock(Arc::new(clock.clone()));
    f.provider.push_snapshot(Ok(base()));
    p.initialize().await.unwrap();
    assert_eq!(p.refusals(), RefusalReport::default());
    let page = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 5)]);
    for (t, count) in [(1, 1), (2, 2), (3, 3)] {
        clock.set(at(t));
        f.provider.push_events(Ok(page.clone()));
        f.provider.push_delta(Ok(delta(
            &["ws-1"],
            vec![workspace("ws-1", 4, &[("a", 1)])],
        )));
        let error = p.sync_once().await.unwrap_err();
        assert_eq!(
            error.refusal().map(DirectoryError::rule),
            Some(RefusalRule::DeltaOlderThanEvent)
        );
        let last = p.refusals().last.unwrap();
        assert_eq!(
            (
                last.rule,
                last.workspace.clone(),
                last.since,
                last.last_at,
                last.count
            ),
            (
                RefusalRule::DeltaOlderThanEvent,
                Some(ws_id("ws-1")),
                at(1),
                at(t),
                count
            )
        );
        assert_eq!(last.resolved_at, None);
    }
    // Refusals are not sync failures.
    assert_eq!(p.sync_failure(), None);
    // Provider outages are not refusals: they are the replica's sync failure, counted in a
    // row until a step succeeds.
    f.provider.push_events(Err(unavailable()));
    assert!(p.sync_once().await.unwrap_err().refusal().is_none());
    assert_eq!(p.refusals().last.unwrap().count, 3);
    let failure = p.sync_failure().expect("an outage is recorded");
    assert_eq!((failure.count, failure.since), (1, failure.last_at));
    assert!(
        failure.message.contains("unavailable"),
        "{}",
        failure.message
    );
    clock.set(at(3));
    f.provider.push_events(Err(unavailable()));
    assert!(p.sync_once().await.is_err());
    let again = p.sync_failure().unwrap();
    assert_eq!(
        (again.count, again.since, again.last_at),
        (2, failure.since, at(3))
    );
    // The provider serves an acceptable answer: the refusal is resolved, the total stays.
    clock.set(at(4));
    f.provider.push_events(Ok(page));
    f.provider.push_delta(Ok(delta(
        &["ws-1"],
        vec![workspace("ws-1", 5, &[("a", 1)])],
    )));
    p.sync_once().await.unwrap();
    assert_eq!(
        p.sync_failure(),
        None,
        "a successful step clears the failure"
    );
    let report = p.refusals();
    assert_eq!(report.last.unwrap().resolved_at, Some(at(4)));
    assert_eq!(
        report.total_by_rule.get(&RefusalRule::DeltaOlderThanEvent),
        Some(&3)
    );
}

/// A provider whose event fetch never answers (a hung connection).
#[derive(Clone)]
struct HangingProvider(ScriptedProvider);

#[async_trait::async_trait]
impl DirectoryProvider for HangingProvider {
    async fn fetch_snapshot(
        &self,
        instance: &tenantry_directory::InstanceUuid,
    ) -> Result<tenantry_directory::DirectorySnapshot, ProviderError> {
        self.0.fetch_snapshot(instance).await
    }

    async fn fetch_events(
        &self,
        _instance: &tenantry_directory::InstanceUuid,
        _after: i64,
        _limit: u32,
    ) -> Result<DirectoryEventBatch, ProviderError> {
        std::future::pending().await
    }

    async fn fetch_workspaces(
        &self,
        instance: &tenantry_directory::InstanceUuid,
        uuids: &[WorkspaceUuid],
    ) -> Result<DirectoryDelta, ProviderError> {
        self.0.fetch_workspaces(instance, uuids).await
    }
}

#[tokio::test(start_paused = true)]
async fn run_loop_stops_on_shutdown_during_a_hung_sync() {
    let f = Fixture::new();
    let p = DirectoryProjector::new(
        projector_config(),
        HangingProvider(f.provider.clone()),
        f.store.clone(),
    )
    .with_clock(Arc::new(f.clock.clone()));
    f.provider.push_snapshot(Ok(base()));
    p.initialize().await.unwrap();
    let before = f.store.tables();
    let start = f.clock.monotonic();
    p.run(f.clock.sleep(Duration::from_secs(30))).await;
    assert_eq!(f.clock.monotonic() - start, Duration::from_secs(30));
    assert_eq!(f.store.tables(), before);
    assert_eq!(p.consumer_cursor(), Some(10));
}

/// Issue 29: a replica whose wall clock is 10 minutes ahead stamps nothing with it: the
/// receipts it creates carry the store's (database) clock, which retention's cut-off reads.
#[tokio::test(start_paused = true)]
async fn a_skewed_replica_stamps_receipts_with_the_store_clock() {
    let database = ManualClock::following_tokio(at(0));
    let f = Fixture {
        clock: ManualClock::following_tokio(at(600)),
        store: InMemoryProjectionStore::with_clock(Arc::new(database.clone())),
        ..Fixture::new()
    };
    let p = initialized(&f).await;
    f.provider.push_events(Ok(batch(
        10,
        11,
        11,
        vec![ent_event("e-11", 11, "ws-1", 4)],
    )));
    p.sync_once().await.unwrap();
    let receipts = f.store.tables().receipts;
    let receipt = receipts.values().next().unwrap();
    let database_now = database.now();
    assert!(
        receipt.received_at <= database_now
            && database_now - receipt.received_at < chrono::TimeDelta::seconds(5),
        "received at {} on a database clock reading {database_now} (the replica's: {})",
        receipt.received_at,
        f.clock.now()
    );
}
