//! Projector behaviour over the fake provider, store and hooks, on virtual time: a paused
//! runtime and a [`ManualClock`] that follows it. Tests that step time advance the clock; the
//! run-loop tests let tokio's paused clock run (the way the simulation drives the engine).

use std::sync::Arc;
use std::time::Duration;

use tenantry_directory::testing::*;
use tenantry_directory::{DirectoryError, NotReady};
use tenantry_ports::clock::ManualClock;
use tenantry_ports::directory::ProviderError;
use tenantry_ports::directory::fake::{
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

/// How often [`count_release`] ran (only the test below installs it).
static RELEASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_release() -> bool {
    RELEASES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    true
}

#[tokio::test(start_paused = true)]
async fn initialize_hands_the_snapshot_memory_back_whatever_its_result() {
    use std::sync::atomic::Ordering::SeqCst;
    let f = Fixture::new();
    let p = f.projector().with_memory_release(count_release);
    f.provider.push_snapshot(Err(unavailable()));
    assert!(p.initialize().await.is_err());
    assert_eq!(RELEASES.load(SeqCst), 1, "after a failed fetch");
    f.provider.push_snapshot(Ok(base()));
    p.initialize().await.unwrap();
    assert_eq!(RELEASES.load(SeqCst), 2, "after an applied snapshot");
    f.provider.push_events(Ok(batch(10, 10, 10, vec![])));
    p.sync_once().await.unwrap();
    assert_eq!(RELEASES.load(SeqCst), 2, "an event step is not a snapshot");
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

mod run_loop;
