//! Projector behaviour over the fake provider, store and hooks, on virtual time: a paused
//! runtime and a [`ManualClock`] that follows it. Tests that step time advance the clock; the
//! run-loop tests let tokio's paused clock run (the way the simulation drives the engine).

use std::sync::Arc;
use std::time::Duration;

use tenantry_directory::testing::*;
use tenantry_directory::{DirectoryError, NotReady};
use tenantry_ports::clock::ManualClock;
use tenantry_ports::directory::ProviderError;
use tenantry_ports::directory::testing::{
    HookCall, InMemoryProjectionStore, ProviderCall, RecordingHooks, ScriptedProvider,
};

use tenantry_ports::clock::Clock;

use super::*;

type Projector = DirectoryProjector<ScriptedProvider, InMemoryProjectionStore>;

struct Fixture {
    clock: ManualClock,
    provider: ScriptedProvider,
    store: InMemoryProjectionStore,
    hooks: RecordingHooks,
}

impl Fixture {
    fn new() -> Self {
        Self {
            clock: ManualClock::following_tokio(at(0)),
            provider: ScriptedProvider::new(),
            store: InMemoryProjectionStore::new(),
            hooks: RecordingHooks::new(),
        }
    }

    /// A replica over this fixture's shared store, with its own provider.
    fn replica(&self, provider: ScriptedProvider) -> Projector {
        DirectoryProjector::new(projector_config(), provider, self.store.clone())
            .with_entitlements(Arc::new(self.hooks.clone()))
            .with_runtime_publisher(Arc::new(self.hooks.clone()))
            .with_clock(Arc::new(self.clock.clone()))
    }

    fn projector(&self) -> Projector {
        self.replica(self.provider.clone())
    }
}

fn base() -> tenantry_directory::DirectorySnapshot {
    snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            archived("ws-2"),
        ],
    )
}

fn unavailable() -> ProviderError {
    ProviderError::unavailable("down")
}

#[tokio::test(start_paused = true)]
async fn initialize_applies_a_full_snapshot() {
    let f = Fixture::new();
    let p = f.projector();
    assert_eq!(p.require_ready(), Err(NotReady::NeverReady));
    f.provider.push_snapshot(Ok(base()));
    p.initialize().await.unwrap();
    assert_eq!(p.consumer_cursor(), Some(10));
    assert_eq!(p.require_ready(), Ok(()));
    assert_eq!(f.store.tables().workspaces.len(), 2);
    assert_eq!(
        p.resource_snapshot(),
        ResourceSnapshot {
            active_workspaces: 1,
            max_active_workspaces: 10_000,
            last_batch_workspaces: 2,
            last_batch_memberships: 2,
            max_snapshot_workspaces: 10_000,
            max_snapshot_memberships: 100_000,
        }
    );
}

#[tokio::test(start_paused = true)]
async fn initialize_retries_superseded_snapshots_up_to_five_times() {
    let f = Fixture::new();
    f.provider
        .push_snapshot(Ok(snapshot(20, base().workspaces)));
    f.projector().initialize().await.unwrap();
    // A lagging provider replica keeps serving an older snapshot.
    let p = f.projector();
    for _ in 0..4 {
        f.provider.push_snapshot(Ok(base()));
    }
    f.provider
        .push_snapshot(Ok(snapshot(21, base().workspaces)));
    p.initialize().await.unwrap();
    assert_eq!(p.consumer_cursor(), Some(21));

    let p = f.projector();
    for _ in 0..6 {
        f.provider.push_snapshot(Ok(base()));
    }
    let err = p.initialize().await.unwrap_err();
    assert_eq!(
        err,
        ProjectorError::RepeatedlySuperseded {
            attempts: 5,
            last: DirectoryError::SnapshotSuperseded {
                snapshot_cursor: 10,
                projected_cursor: 21
            }
        }
    );
    assert!(
        err.to_string()
            .contains("served a snapshot older than the shared projection 5 times"),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("served a snapshot at cursor 10, older than cursor 21 already applied"),
        "{err}"
    );
    assert_eq!(p.consumer_cursor(), None);
    assert_eq!(p.require_ready(), Err(NotReady::NeverReady));
}

#[tokio::test(start_paused = true)]
async fn initialize_stops_on_other_errors() {
    let f = Fixture::new();
    let p = f.projector();
    f.provider.push_snapshot(Err(unavailable()));
    assert_eq!(
        p.initialize().await,
        Err(ProjectorError::Provider(unavailable()))
    );
    let mut other = base();
    other.instance_uuid = tenantry_directory::InstanceUuid::parse("inst-9").unwrap();
    f.provider.push_snapshot(Ok(other));
    assert!(matches!(
        p.initialize().await,
        Err(ProjectorError::Rejected(
            DirectoryError::WrongInstance { .. }
        ))
    ));
    f.store.fail_next("disk full");
    f.provider.push_snapshot(Ok(base()));
    assert_eq!(
        p.initialize().await,
        Err(ProjectorError::Storage(StoreError::unavailable(
            "disk full"
        )))
    );
    assert_eq!(f.provider.calls().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn sync_once_without_a_cursor_initializes() {
    let f = Fixture::new();
    let p = f.projector();
    f.provider.push_snapshot(Ok(base()));
    p.sync_once().await.unwrap();
    assert_eq!(f.provider.calls(), vec![ProviderCall::Snapshot]);
    assert_eq!(p.consumer_cursor(), Some(10));
}

async fn initialized(f: &Fixture) -> Projector {
    let p = f.projector();
    f.provider.push_snapshot(Ok(base()));
    p.initialize().await.unwrap();
    p
}

#[tokio::test(start_paused = true)]
async fn sync_once_fetches_a_delta_for_directory_events() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    f.provider.push_events(Ok(batch(
        10,
        13,
        13,
        vec![
            dir_event("e-11", 11, "ws-3", 1),
            dir_event("e-12", 12, "ws-1", 2),
            ent_event("e-13", 13, "ws-1", 1),
        ],
    )));
    f.provider.push_delta(Ok(delta(
        &["ws-1", "ws-3"],
        vec![
            workspace("ws-1", 2, &[("a", 1)]),
            workspace("ws-3", 1, &[("c", 1)]),
        ],
    )));
    p.sync_once().await.unwrap();
    assert_eq!(
        f.provider.calls()[1..],
        [
            ProviderCall::Events {
                after: 10,
                limit: 50
            },
            ProviderCall::Workspaces {
                uuids: vec![ws_id("ws-1"), ws_id("ws-3")]
            },
        ]
    );
    assert_eq!(p.consumer_cursor(), Some(13));
    assert_eq!(f.store.tables().states[&instance()].cursor, 13);
    assert_eq!(p.resource_snapshot().active_workspaces, 2);
}

/// Retention removed receipts of events this replica has not read yet (it lags more than the
/// inbox window): the re-read is refused with `MissingReceipt`, nothing is applied, and the
/// replica's next step initializes from a snapshot instead of being refused forever.
#[tokio::test(start_paused = true)]
async fn a_replica_lagging_past_pruned_receipts_starts_again_from_a_snapshot() {
    let f = Fixture::new();
    let ahead = initialized(&f).await;
    let lagging_provider = ScriptedProvider::new();
    let lagging = f.replica(lagging_provider.clone());
    lagging_provider.push_snapshot(Ok(base()));
    lagging.initialize().await.unwrap();
    let page = || batch(10, 11, 11, vec![ent_event("e-11", 11, "ws-1", 4)]);
    f.provider.push_events(Ok(page()));
    ahead.sync_once().await.unwrap();
    assert_eq!(f.store.tables().receipts.len(), 1);
    f.store.retain_receipts(|_| false);

    lagging_provider.push_events(Ok(page()));
    let refused = lagging.sync_once().await.unwrap_err();
    assert!(
        matches!(
            refused.refusal(),
            Some(DirectoryError::MissingReceipt { cursor: 11, .. })
        ),
        "{refused:?}"
    );
    assert_eq!(lagging.consumer_cursor(), None, "the cursor is forgotten");

    lagging_provider.push_snapshot(Ok(snapshot(
        11,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            archived("ws-2"),
        ],
    )));
    lagging.sync_once().await.unwrap();
    assert_eq!(lagging.consumer_cursor(), Some(11));
    assert_eq!(
        lagging_provider.calls().last(),
        Some(&ProviderCall::Snapshot),
        "re-initialized from a snapshot"
    );
}

#[tokio::test(start_paused = true)]
async fn sync_once_with_only_entitlement_events_advances_the_cursor() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    f.provider.push_events(Ok(batch(
        10,
        11,
        11,
        vec![ent_event("e-11", 11, "ws-1", 4)],
    )));
    p.sync_once().await.unwrap();
    assert_eq!(p.consumer_cursor(), Some(11));
    assert!(
        !f.provider
            .calls()
            .iter()
            .any(|c| matches!(c, ProviderCall::Workspaces { .. }))
    );
    assert_eq!(f.store.tables().receipts.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn sync_once_with_an_empty_batch_touches_freshness() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    f.clock.advance(Duration::from_secs(50));
    f.provider.push_events(Ok(batch(10, 10, 10, vec![])));
    p.sync_once().await.unwrap();
    f.clock.advance(Duration::from_secs(50));
    assert_eq!(p.require_ready(), Ok(()), "the touch refreshed readiness");
    assert_eq!(f.store.applies(), 2);
}

#[tokio::test(start_paused = true)]
async fn sync_once_refuses_an_invalid_batch_before_fetching_a_delta() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    let mut bad = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 2)]);
    bad.events[0]
        .payload
        .insert("directory_revision".into(), 3.into());
    f.provider.push_events(Ok(bad));
    assert!(matches!(
        p.sync_once().await,
        Err(ProjectorError::Rejected(
            DirectoryError::EventRevisionConflict { .. }
        ))
    ));
    f.provider.push_events(Ok(batch(9, 10, 10, vec![])));
    assert_eq!(
        p.sync_once().await,
        Err(ProjectorError::Rejected(
            DirectoryError::BatchCursorMismatch {
                expected: 10,
                actual: 9
            }
        ))
    );
    assert_eq!(f.provider.calls().len(), 3, "no workspaces were fetched");
    assert_eq!(p.consumer_cursor(), Some(10));
}

#[tokio::test(start_paused = true)]
async fn require_ready_fails_closed_when_stale() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    f.clock.advance(Duration::from_secs(59));
    assert_eq!(p.require_ready(), Ok(()));
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(
        p.require_ready(),
        Err(NotReady::Stale {
            age: Duration::from_secs(60),
            max_staleness: Duration::from_secs(60)
        })
    );
}

#[tokio::test(start_paused = true)]
async fn readiness_is_recorded_only_when_caught_up() {
    let f = Fixture::new();
    let p = initialized(&f).await;
    f.clock.advance(Duration::from_secs(55));
    f.provider.push_events(Ok(batch(
        10,
        11,
        30,
        vec![dir_event("e-11", 11, "ws-1", 2)],
    )));
    f.provider.push_delta(Ok(delta(
        &["ws-1"],
        vec![workspace("ws-1", 2, &[("a", 1)])],
    )));
    p.sync_once().await.unwrap();
    assert_eq!(p.consumer_cursor(), Some(11));
    f.clock.advance(Duration::from_secs(5));
    assert!(matches!(p.require_ready(), Err(NotReady::Stale { .. })));
}

#[tokio::test(start_paused = true)]
async fn hooks_run_after_commit_and_their_failure_keeps_the_projection() {
    let f = Fixture::new();
    f.hooks.fail_all();
    let p = initialized(&f).await;
    assert_eq!(p.require_ready(), Ok(()));
    f.provider.push_events(Ok(batch(
        10,
        12,
        12,
        vec![
            dir_event("e-11", 11, "ws-1", 2),
            dir_event("e-12", 12, "ws-2", 2),
        ],
    )));
    f.provider.push_delta(Ok(delta(
        &["ws-1", "ws-2"],
        vec![workspace("ws-1", 2, &[("a", 1)])],
    )));
    p.sync_once().await.unwrap();
    assert_eq!(f.store.tables().states[&instance()].cursor, 12);
    let set = |items: &[&str]| items.iter().map(|i| ws_id(i)).collect::<BTreeSet<_>>();
    assert_eq!(
        f.hooks.calls(),
        vec![
            HookCall::Reconcile {
                active: set(&["ws-1"])
            },
            HookCall::Publish {
                active_generations: [(ws_id("ws-1"), 1)].into_iter().collect(),
                affected: None
            },
            HookCall::Activity {
                active: set(&["ws-1"]),
                inactive: set(&["ws-2"])
            },
            HookCall::Publish {
                active_generations: [(ws_id("ws-1"), 1)].into_iter().collect(),
                affected: Some(set(&["ws-1", "ws-2"]))
            },
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn replicas_share_the_state_row_but_keep_their_own_cursor() {
    let f = Fixture::new();
    let a = initialized(&f).await;
    let b_provider = ScriptedProvider::new();
    let b = f.replica(b_provider.clone());
    b_provider.push_snapshot(Ok(base()));
    b.initialize().await.unwrap();
    let page = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 2)]);
    let answer = delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1)])]);
    f.provider.push_events(Ok(page.clone()));
    f.provider.push_delta(Ok(answer.clone()));
    a.sync_once().await.unwrap();
    assert_eq!(
        (a.consumer_cursor(), b.consumer_cursor()),
        (Some(11), Some(10))
    );
    // B has not consumed the shared high-water mark: an empty page cannot refresh it, neither
    // one that reports the newer high-water mark ...
    b_provider.push_events(Ok(batch(10, 10, 11, vec![])));
    assert_eq!(
        b.sync_once().await,
        Err(ProjectorError::Rejected(
            DirectoryError::EmptyPageNotCaughtUp {
                after_cursor: 10,
                cursor: 10,
                high_water_cursor: 11
            }
        ))
    );
    // ... nor an old one (a lagging provider) that looks caught up by itself.
    b_provider.push_events(Ok(batch(10, 10, 10, vec![])));
    assert_eq!(
        b.sync_once().await,
        Err(ProjectorError::Rejected(
            DirectoryError::ReplicaBehindHighWater {
                replica_cursor: 10,
                shared_cursor: 11
            }
        ))
    );
    // B consumes the page itself (hooks run for its process), without rewriting rows.
    b_provider.push_events(Ok(page));
    b_provider.push_delta(Ok(answer));
    b.sync_once().await.unwrap();
    assert_eq!(b.consumer_cursor(), Some(11));
    assert_eq!(f.store.tables().states[&instance()].cursor, 11);
}

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

/// A replica without hooks, over this fixture's store and provider (resuming is on).
fn plain(f: &Fixture) -> Projector {
    DirectoryProjector::new(projector_config(), f.provider.clone(), f.store.clone())
        .with_clock(Arc::new(f.clock.clone()))
}

/// A restarted process finds the projection at cursor 10 in the store: it asks the provider
/// for the events after 10, not for a snapshot, and is ready only after that caught-up step.
#[tokio::test(start_paused = true)]
async fn a_restarted_replica_resumes_from_the_stored_cursor_instead_of_a_snapshot() {
    let f = Fixture::new();
    f.provider.push_snapshot(Ok(base()));
    plain(&f).sync_once().await.unwrap(); // the previous process
    f.clock.advance(Duration::from_secs(120)); // down for longer than the staleness
    let provider = ScriptedProvider::new();
    let p = DirectoryProjector::new(projector_config(), provider.clone(), f.store.clone())
        .with_clock(Arc::new(f.clock.clone()));
    assert_eq!(p.require_ready(), Err(NotReady::NeverReady));
    provider.push_events(Err(unavailable()));
    assert!(p.sync_once().await.is_err());
    assert_eq!(p.consumer_cursor(), Some(10));
    assert_eq!(
        p.require_ready(),
        Err(NotReady::NeverReady),
        "a stored projection alone does not make the replica ready"
    );
    provider.push_events(Ok(batch(
        10,
        11,
        11,
        vec![ent_event("e-11", 11, "ws-1", 3)],
    )));
    p.sync_once().await.unwrap();
    assert_eq!(
        provider.calls(),
        vec![
            ProviderCall::Events {
                after: 10,
                limit: 50
            },
            ProviderCall::Events {
                after: 10,
                limit: 50
            },
        ],
        "no snapshot fetched"
    );
    assert_eq!(p.consumer_cursor(), Some(11));
    assert_eq!(p.require_ready(), Ok(()));
    assert_eq!(f.store.tables().states[&instance()].cursor, 11);
}

/// Resuming reads the store once: an empty store means a snapshot; hooks (whose caches a
/// snapshot feeds) turn it off; a refused first step from the stored cursor falls back to a
/// snapshot.
#[tokio::test(start_paused = true)]
async fn resuming_falls_back_to_a_snapshot() {
    let f = Fixture::new();
    f.provider.push_snapshot(Ok(base()));
    let p = plain(&f);
    p.sync_once().await.unwrap();
    assert_eq!(
        f.provider.calls(),
        vec![ProviderCall::Snapshot],
        "empty store"
    );

    let hooked = f.projector(); // with hooks
    f.provider.push_snapshot(Ok(base()));
    hooked.sync_once().await.unwrap();
    assert_eq!(f.provider.calls().last(), Some(&ProviderCall::Snapshot));

    let p = plain(&f);
    // The provider answers another page than asked: refused, and the replica starts over.
    f.provider.push_events(Ok(batch(9, 10, 10, vec![])));
    let error = p.sync_once().await.unwrap_err();
    assert!(error.refusal().is_some(), "{error}");
    assert_eq!(p.consumer_cursor(), None);
    f.provider.push_snapshot(Ok(base()));
    p.sync_once().await.unwrap();
    assert_eq!(f.provider.calls().last(), Some(&ProviderCall::Snapshot));
    assert_eq!(p.consumer_cursor(), Some(10));
    assert_eq!(p.require_ready(), Ok(()));
}
