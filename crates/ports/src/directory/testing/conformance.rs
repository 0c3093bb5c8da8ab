//! The projection-store conformance suite: every function is one behaviour, run unchanged
//! against the in-memory fake, SQLite and PostgreSQL.
//!
//! Most checks replay the same inputs on the store and on the in-memory reference tables
//! (`tenantry_directory::memory`) and require equal outcomes and equal table dumps, so an
//! adapter must select, plan and write exactly like the reference.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tenantry_directory::maps::{
    AccountStatus, ExecutionStatus, MembershipRole, MembershipStatus, RowSource, WorkspaceStatus,
};
use tenantry_directory::testing::*;
use tenantry_directory::{
    AccountRow, ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryError, DirectoryEventBatch,
    DirectorySnapshot, EventUuid, ExecutionRow, InstanceUuid, ProjectionLimits, ProjectionTables,
    WorkspaceRow,
};

use super::DirectoryFixtureStore;
use crate::directory::{DirectoryProjectionStore, ProjectionStoreError};

/// A store the suite can drive.
pub trait SuiteStore: DirectoryProjectionStore + DirectoryFixtureStore {}
impl<T: DirectoryProjectionStore + DirectoryFixtureStore> SuiteStore for T {}

fn ctx(secs: i64) -> ApplyContext {
    ApplyContext {
        instance: instance(),
        limits: ProjectionLimits::default(),
        now: at(secs),
        max_staleness: Duration::from_secs(60),
    }
}

/// Replays inputs on a store and on the reference tables side by side.
struct Replay<'s, S> {
    store: &'s S,
    reference: ProjectionTables,
    /// Receipts already compared (seeded or created by an earlier step).
    known_receipts: BTreeSet<(InstanceUuid, EventUuid)>,
}

impl<'s, S: SuiteStore> Replay<'s, S> {
    fn new(store: &'s S) -> Self {
        Self {
            store,
            reference: ProjectionTables::default(),
            known_receipts: BTreeSet::new(),
        }
    }

    async fn seed(&mut self, rows: ProjectionTables) {
        self.store.seed_rows(&rows).await.unwrap();
        self.reference.accounts.extend(rows.accounts);
        self.reference.workspaces.extend(rows.workspaces);
        self.reference.memberships.extend(rows.memberships);
        self.reference.executions.extend(rows.executions);
        self.reference.states.extend(rows.states);
        self.known_receipts.extend(rows.receipts.keys().cloned());
        self.reference.receipts.extend(rows.receipts);
    }

    async fn check(
        &mut self,
        got: Result<ApplyOutcome, ProjectionStoreError>,
        expected: Result<ApplyOutcome, DirectoryError>,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let got = got.map_err(|e| match e {
            ProjectionStoreError::Rejected(e) => e,
            other => panic!("storage failure: {other}"),
        });
        assert_eq!(got, expected, "store and reference disagree");
        let dump = self.store.dump_tables().await.unwrap();
        self.adopt_receipt_times(&dump);
        assert_tables_eq(&dump, &self.reference);
        got
    }

    /// A receipt an apply creates carries the store's clock (the database's), not the
    /// apply's `now` that the reference wrote: check that the store's stamp is this host's
    /// time (the suite's databases run here; the fake reads the system clock), far from the
    /// suite's fixed apply times, and adopt it in the reference.
    fn adopt_receipt_times(&mut self, dump: &ProjectionTables) {
        let now = crate::clock::Clock::now(&crate::clock::SystemClock);
        for (key, expected) in &mut self.reference.receipts {
            if self.known_receipts.contains(key) {
                continue;
            }
            if let Some(got) = dump.receipts.get(key) {
                assert!(
                    (got.received_at - now).abs() < chrono::TimeDelta::minutes(10),
                    "receipt {key:?} received at {} (the apply's time was {}): a new receipt \
                     must be stamped with the store's clock, {now} here",
                    got.received_at,
                    expected.received_at,
                );
                expected.received_at = got.received_at;
            }
            self.known_receipts.insert(key.clone());
        }
    }

    async fn snapshot(
        &mut self,
        c: &ApplyContext,
        s: &DirectorySnapshot,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_snapshot(c, s, &[]);
        let got = self.store.apply_snapshot(c, s, &[]).await;
        self.check(got, expected).await
    }

    async fn snapshot_with_events(
        &mut self,
        c: &ApplyContext,
        s: &DirectorySnapshot,
        events: &[tenantry_directory::DirectoryEvent],
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_snapshot(c, s, events);
        let got = self.store.apply_snapshot(c, s, events).await;
        self.check(got, expected).await
    }

    async fn delta(
        &mut self,
        c: &ApplyContext,
        d: &DirectoryDelta,
        b: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_delta(c, d, b);
        let got = self.store.apply_delta(c, d, b).await;
        self.check(got, expected).await
    }

    async fn events(
        &mut self,
        c: &ApplyContext,
        b: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_event_batch(c, b);
        let got = self.store.apply_event_batch(c, b).await;
        self.check(got, expected).await
    }

    async fn touch(
        &mut self,
        c: &ApplyContext,
        cursor: i64,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.touch_freshness(c, cursor);
        let got = self.store.touch_freshness(c, cursor).await;
        self.check(got, expected).await
    }
}

/// Compares table by table so a failure names the table (and stays readable at scale).
fn assert_tables_eq(got: &ProjectionTables, expected: &ProjectionTables) {
    fn diff<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
        name: &str,
        got: &BTreeMap<K, V>,
        expected: &BTreeMap<K, V>,
    ) {
        if got == expected {
            return;
        }
        let first = got
            .iter()
            .zip(expected.iter())
            .find(|(g, e)| g != e)
            .map(|(g, e)| format!("first difference: got {g:?}, expected {e:?}"))
            .unwrap_or_default();
        panic!(
            "table {name} differs ({} rows, expected {}); {first}",
            got.len(),
            expected.len()
        );
    }
    diff("accounts", &got.accounts, &expected.accounts);
    diff("workspaces", &got.workspaces, &expected.workspaces);
    diff(
        "workspace_memberships",
        &got.memberships,
        &expected.memberships,
    );
    diff(
        "workspace_execution_state",
        &got.executions,
        &expected.executions,
    );
    diff("directory_projection_state", &got.states, &expected.states);
    diff(
        "directory_projection_inbox",
        &got.receipts,
        &expected.receipts,
    );
}

fn base() -> DirectorySnapshot {
    snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("c", 1)]),
        ],
    )
}

fn local_account(uuid: &str, email: &str) -> AccountRow {
    AccountRow {
        uuid: acc_id(uuid),
        normalized_email: email.into(),
        display_name: "Local".into(),
        status: AccountStatus::Active,
        source: RowSource::Local,
        projection_revision: 0,
    }
}

/// A snapshot writes accounts, workspaces, memberships, execution state and the state row
/// exactly as the reference does; re-applying it changes only freshness; a later snapshot
/// archives and fences absent workspaces.
pub async fn snapshot_apply_matches_reference<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    let outcome = r.snapshot(&ctx(0), &base()).await.unwrap();
    assert_eq!(outcome.active_workspaces, Some(2));
    assert!(outcome.caught_up);
    r.snapshot(&ctx(5), &base()).await.unwrap();
    let mut next = snapshot(12, vec![workspace("ws-1", 2, &[("a", 1), ("d", 2)])]);
    next.workspaces[0].members[1].role = tenantry_directory::maps::DirectoryRole::Owner;
    next.workspaces[0].members[1].joined_at = None;
    let outcome = r.snapshot(&ctx(10), &next).await.unwrap();
    assert_eq!(outcome.active_workspaces, Some(1));
    let dump = store.dump_tables().await.unwrap();
    assert_eq!(
        dump.workspaces[&ws_id("ws-2")].status,
        WorkspaceStatus::Archived
    );
    assert!(dump.executions[&ws_id("ws-2")].write_fenced);
    assert_eq!(
        dump.memberships[&m_id("m-b-ws-1")].status,
        MembershipStatus::Removed
    );
    assert_eq!(
        dump.memberships[&m_id("m-d-ws-1")].role,
        MembershipRole::Owner
    );
    assert_eq!(dump.memberships[&m_id("m-d-ws-1")].joined_at, None);
    let state = store.projection_state(&instance()).await.unwrap().unwrap();
    assert_eq!(state.cursor, 12);
    assert_eq!(state.last_applied_at, at(10));
    assert_eq!(state.lease_expires_at, at(70));
}

/// `count_rows` answers the sizes of the projected tables, as a dump of them shows.
pub async fn projection_counts_match_the_tables<S: SuiteStore>(store: &S) {
    let empty = store.count_rows().await.unwrap();
    assert_eq!(empty, crate::directory::ProjectionCounts::default());
    let mut r = Replay::new(store);
    r.snapshot(&ctx(0), &base()).await.unwrap();
    let dump = store.dump_tables().await.unwrap();
    let counts = store.count_rows().await.unwrap();
    assert_eq!(
        (counts.accounts, counts.workspaces, counts.memberships),
        (
            dump.accounts.len() as u64,
            dump.workspaces.len() as u64,
            dump.memberships.len() as u64
        )
    );
    assert!(counts.accounts > 0 && counts.workspaces > 0 && counts.memberships > 0);
}

/// `recent_receipts` answers the receipts received last, newest first, up to the limit.
pub async fn recent_receipts_are_the_newest_first<S: SuiteStore>(store: &S) {
    assert!(store.recent_receipts(5).await.unwrap().is_empty());
    let receipt = |n: i64| tenantry_directory::InboxReceipt {
        instance_uuid: instance(),
        event_uuid: tenantry_directory::EventUuid::parse(format!("ev-{n}")).unwrap(),
        cursor: n,
        event_type: "workspace.updated".to_owned(),
        revision: 1,
        fingerprint: tenantry_kernel::Fingerprint::of_bytes(format!("ev-{n}").as_bytes()),
        received_at: at(n),
        applied_at: Some(at(n)),
    };
    let mut rows = ProjectionTables::default();
    for n in [3, 1, 2] {
        let r = receipt(n);
        rows.receipts
            .insert((r.instance_uuid.clone(), r.event_uuid.clone()), r);
    }
    store.seed_rows(&rows).await.unwrap();
    let recent = store.recent_receipts(2).await.unwrap();
    let cursors: Vec<i64> = recent.iter().map(|r| r.cursor).collect();
    assert_eq!(cursors, vec![3, 2]);
    assert_eq!(recent[0], receipt(3));
}

/// An older snapshot is superseded; the same cursor with other contents conflicts.
pub async fn snapshot_superseded_and_conflict_are_rejected<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    r.snapshot(&ctx(0), &base()).await.unwrap();
    let older = snapshot(9, base().workspaces);
    let err = r.snapshot(&ctx(1), &older).await.unwrap_err();
    assert!(err.is_superseded());
    let mut other = base();
    other.workspaces[0].name = "other".into();
    assert_eq!(
        r.snapshot(&ctx(1), &other).await.unwrap_err(),
        DirectoryError::SnapshotConflict { cursor: 10 }
    );
}

/// A delta updates the named workspaces, tombstones requested-but-omitted ones and moves the
/// shared cursor with the incremental marker.
pub async fn delta_apply_matches_reference<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    r.snapshot(&ctx(0), &base()).await.unwrap();
    let b = batch(
        10,
        13,
        13,
        vec![
            dir_event("e-11", 11, "ws-1", 2),
            dir_event("e-12", 12, "ws-2", 3),
            ent_event("e-13", 13, "ws-1", 1),
        ],
    );
    let d = delta(
        &["ws-1", "ws-2"],
        vec![workspace("ws-1", 2, &[("a", 1), ("e", 2)])],
    );
    let outcome = r.delta(&ctx(3), &d, &b).await.unwrap();
    assert!(outcome.caught_up);
    assert_eq!(outcome.active_workspaces, Some(1));
    let dump = store.dump_tables().await.unwrap();
    assert_eq!(dump.workspaces[&ws_id("ws-2")].projection_revision, 3);
    assert_eq!(dump.receipts.len(), 3);
    // Not caught up: the high-water mark is ahead.
    let b2 = batch(13, 14, 20, vec![dir_event("e-14", 14, "ws-3", 1)]);
    let d2 = delta(&["ws-3"], vec![workspace("ws-3", 1, &[("a", 1)])]);
    assert!(!r.delta(&ctx(4), &d2, &b2).await.unwrap().caught_up);
}

/// A second replica consuming a page another replica already applied changes no entity row.
pub async fn delta_already_applied_by_another_replica_only_refreshes<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    r.snapshot(&ctx(0), &base()).await.unwrap();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 2)]);
    let d = delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1)])]);
    r.delta(&ctx(1), &d, &b).await.unwrap();
    let before = store.dump_tables().await.unwrap();
    r.delta(&ctx(2), &d, &b).await.unwrap();
    let after = store.dump_tables().await.unwrap();
    assert_eq!(after.workspaces, before.workspaces);
    assert_eq!(after.memberships, before.memberships);
    assert_eq!(after.states[&instance()].last_applied_at, at(2));
}

/// Entitlement-only batches move the cursor; an empty batch touches freshness only when this
/// replica has consumed the shared high-water mark.
pub async fn entitlement_batches_and_freshness<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    assert_eq!(
        r.touch(&ctx(0), 0).await.unwrap_err(),
        DirectoryError::StateMissing {
            instance: instance()
        }
    );
    r.snapshot(&ctx(0), &base()).await.unwrap();
    let b = batch(
        10,
        12,
        12,
        vec![
            ent_event("e-11", 11, "ws-1", 5),
            ent_event("e-12", 12, "ws-2", 1),
        ],
    );
    assert!(r.events(&ctx(1), &b).await.unwrap().caught_up);
    r.touch(&ctx(2), 12).await.unwrap();
    assert_eq!(
        r.touch(&ctx(3), 11).await.unwrap_err(),
        DirectoryError::ReplicaBehindHighWater {
            replica_cursor: 11,
            shared_cursor: 12
        }
    );
    let with_directory = batch(12, 13, 13, vec![dir_event("e-13", 13, "ws-1", 2)]);
    assert_eq!(
        r.events(&ctx(4), &with_directory).await.unwrap_err(),
        DirectoryError::DirectoryChangesNeedDelta
    );
}

/// The inbox skips an event seen again with the same contents and rejects changed contents.
pub async fn inbox_skips_duplicates_and_rejects_conflicts<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    let events = vec![ent_event("e-1", 10, "ws-1", 1)];
    r.snapshot_with_events(&ctx(0), &base(), &events)
        .await
        .unwrap();
    r.snapshot_with_events(&ctx(1), &base(), &events)
        .await
        .unwrap();
    let changed = vec![ent_event("e-1", 10, "ws-1", 2)];
    assert!(matches!(
        r.snapshot_with_events(&ctx(2), &base(), &changed).await,
        Err(DirectoryError::ReceiptConflict { .. })
    ));
}

/// Inbox receipts are stamped with the store's clock (the database's), not the applying
/// process's: retention's cut-off on `received_at` holds whatever a replica's wall clock
/// reads (issue 29). Applies from processes 10 minutes ahead and 10 minutes behind stamp
/// their new receipts within a minute of the store's time (this host's: the suite's
/// databases run here, the fake reads the system clock); a receipt already there keeps its
/// stamp.
pub async fn receipts_are_stamped_with_the_store_clock<S: SuiteStore>(store: &S) {
    use crate::clock::{Clock, SystemClock};
    let skew = chrono::TimeDelta::minutes(10);
    let ahead = ApplyContext {
        now: SystemClock.now() + skew,
        ..ctx(0)
    };
    let first = vec![ent_event("e-1", 10, "ws-1", 1)];
    store.apply_snapshot(&ahead, &base(), &first).await.unwrap();
    let e1 = (instance(), EventUuid::parse("e-1").unwrap());
    let first_stamp = store.dump_tables().await.unwrap().receipts[&e1].received_at;
    let behind = ApplyContext {
        now: SystemClock.now() - skew,
        ..ctx(0)
    };
    let both = vec![
        ent_event("e-1", 10, "ws-1", 1),
        ent_event("e-2", 10, "ws-2", 1),
    ];
    store.apply_snapshot(&behind, &base(), &both).await.unwrap();
    let receipts = store.dump_tables().await.unwrap().receipts;
    let received =
        |event: &str| receipts[&(instance(), EventUuid::parse(event).unwrap())].received_at;
    let now = SystemClock.now();
    for event in ["e-1", "e-2"] {
        let off = (received(event) - now).abs();
        assert!(
            off < chrono::TimeDelta::minutes(1),
            "{event} received at {} while the store's clock reads {now}",
            received(event)
        );
    }
    assert_eq!(
        received("e-1"),
        first_stamp,
        "a receipt keeps its first stamp"
    );
}

/// Local accounts, local workspaces, foreign execution rows and revision-0 memberships are
/// never taken over.
pub async fn local_rows_are_never_taken_over<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    let mut seed = ProjectionTables::default();
    seed.accounts
        .insert(acc_id("a"), local_account("a", "a@example.com"));
    seed.accounts
        .insert(acc_id("local"), local_account("local", "c@example.com"));
    r.seed(seed).await;
    assert_eq!(
        r.snapshot(&ctx(0), &base()).await.unwrap_err(),
        DirectoryError::LocalAccountCollision {
            account: acc_id("a")
        }
    );
    let only_c = snapshot(10, vec![workspace("ws-2", 1, &[("c", 1)])]);
    assert_eq!(
        r.snapshot(&ctx(0), &only_c).await.unwrap_err(),
        DirectoryError::EmailCollision {
            account: acc_id("c"),
            other: acc_id("local")
        }
    );
}

/// A platform-owned (revision 0) membership survives every later projection.
pub async fn revision_zero_memberships_are_never_overwritten<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    r.snapshot(&ctx(0), &base()).await.unwrap();
    let mut owned = r.reference.memberships[&m_id("m-a-ws-1")].clone();
    owned.projection_revision = 0;
    owned.role = MembershipRole::Viewer;
    let mut seed = ProjectionTables::default();
    seed.memberships.insert(owned.uuid.clone(), owned.clone());
    r.seed(seed).await;
    let mut next = snapshot(
        11,
        vec![
            workspace("ws-1", 2, &[("b", 2)]),
            workspace("ws-2", 1, &[("c", 1)]),
        ],
    );
    next.workspaces[0].members[0].role = tenantry_directory::maps::DirectoryRole::Admin;
    r.snapshot(&ctx(1), &next).await.unwrap();
    assert_eq!(
        store.dump_tables().await.unwrap().memberships[&owned.uuid],
        owned
    );
}

/// Local workspaces and foreign execution rows are refused.
pub async fn local_workspaces_and_foreign_execution_rows_are_refused<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    let mut seed = ProjectionTables::default();
    seed.workspaces.insert(
        ws_id("ws-2"),
        WorkspaceRow {
            uuid: ws_id("ws-2"),
            source: RowSource::Local,
            instance_uuid: None,
            name: "local".into(),
            slug: "local".into(),
            workspace_type: "team".into(),
            status: WorkspaceStatus::Active,
            created_by_account_uuid: None,
            projection_revision: 0,
        },
    );
    seed.executions.insert(
        ws_id("ws-1"),
        ExecutionRow {
            workspace_uuid: ws_id("ws-1"),
            source: RowSource::Local,
            instance_uuid: None,
            active_generation: 3,
            state: ExecutionStatus::Active,
            write_fenced: false,
            desired_state_revision: 0,
        },
    );
    r.seed(seed).await;
    let only_ws2 = snapshot(10, vec![workspace("ws-2", 1, &[("c", 1)])]);
    assert_eq!(
        r.snapshot(&ctx(0), &only_ws2).await.unwrap_err(),
        DirectoryError::LocalWorkspaceCollision {
            workspace: ws_id("ws-2")
        }
    );
    let only_ws1 = snapshot(10, vec![workspace("ws-1", 1, &[("a", 1)])]);
    assert_eq!(
        r.snapshot(&ctx(0), &only_ws1).await.unwrap_err(),
        DirectoryError::ExecutionOwnerInvalid {
            workspace: ws_id("ws-1")
        }
    );
}

/// Every rejected input leaves every table exactly as it was, and names what was wrong.
pub async fn every_rejected_input_changes_nothing<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    r.snapshot(&ctx(0), &base()).await.unwrap();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 2)]);
    r.delta(
        &ctx(1),
        &delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1), ("b", 1)])]),
        &b,
    )
    .await
    .unwrap();
    let before = store.dump_tables().await.unwrap();

    let mut bad_snapshots: Vec<(&str, DirectorySnapshot)> = Vec::new();
    bad_snapshots.push(("superseded", snapshot(9, base().workspaces)));
    let mut s = snapshot(20, base().workspaces);
    s.workspaces[1].members[0].normalized_email = "a@example.com".into();
    bad_snapshots.push(("email maps to two accounts", s));
    let mut s = snapshot(20, base().workspaces);
    s.workspaces[0].members[0].membership_uuid = m_id("m-new");
    bad_snapshots.push(("membership uuid changed", s));
    let mut s = snapshot(20, base().workspaces);
    s.workspaces[1].created_by_account_uuid = acc_id("ghost");
    bad_snapshots.push(("creator not projected", s));
    let mut s = snapshot(20, base().workspaces);
    s.workspaces[0].execution_generation = 0;
    s.workspaces[0].projection_revision = 3;
    bad_snapshots.push(("generation rollback", s));
    let mut s = snapshot(
        20,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("c", 1)]),
            workspace("ws-9", 1, &[("n", 1)]),
        ],
    );
    s.workspaces[2].members[0].normalized_email = "c@example.com".into();
    bad_snapshots.push((
        "new account collides by email (after other writes were planned)",
        s,
    ));
    let mut s = snapshot(20, base().workspaces);
    s.instance_uuid = tenantry_directory::InstanceUuid::parse("inst-2").unwrap();
    bad_snapshots.push(("other instance", s));
    for (name, s) in &bad_snapshots {
        let err = store.apply_snapshot(&ctx(9), s, &[]).await.expect_err(name);
        assert!(
            matches!(err, ProjectionStoreError::Rejected(_)),
            "{name}: {err}"
        );
        assert!(!err.to_string().is_empty());
        assert_tables_eq(&store.dump_tables().await.unwrap(), &before);
    }
    let small = ApplyContext {
        limits: ProjectionLimits {
            max_snapshot_workspaces: 10,
            max_snapshot_memberships: 100,
            max_active_workspaces: 1,
        },
        ..ctx(9)
    };
    let b2 = batch(11, 12, 12, vec![dir_event("e-12", 12, "ws-3", 1)]);
    let bad_deltas: Vec<(&str, ApplyContext, DirectoryDelta, DirectoryEventBatch)> = vec![
        (
            "committed capacity",
            small,
            delta(&["ws-3"], vec![workspace("ws-3", 1, &[("a", 1)])]),
            b2.clone(),
        ),
        (
            "older than event",
            ctx(9),
            delta(&["ws-3"], vec![workspace("ws-3", 0, &[("a", 1)])]),
            batch(11, 12, 12, vec![dir_event("e-12", 12, "ws-3", 1)]),
        ),
        (
            "receipt conflict",
            ctx(9),
            delta(&["ws-1"], vec![workspace("ws-1", 3, &[("a", 1)])]),
            batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 3)]),
        ),
        (
            "state cursor behind",
            ctx(9),
            delta(&["ws-1"], vec![workspace("ws-1", 3, &[("a", 1)])]),
            batch(12, 13, 13, vec![dir_event("e-13", 13, "ws-1", 3)]),
        ),
    ];
    for (name, c, d, b) in &bad_deltas {
        let err = store.apply_delta(c, d, b).await.expect_err(name);
        assert!(
            matches!(err, ProjectionStoreError::Rejected(_)),
            "{name}: {err}"
        );
        assert_tables_eq(&store.dump_tables().await.unwrap(), &before);
    }
    let err = store
        .apply_event_batch(
            &ctx(9),
            &batch(11, 12, 12, vec![dir_event("e-12", 12, "ws-1", 3)]),
        )
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ProjectionStoreError::Rejected(DirectoryError::DirectoryChangesNeedDelta)
    ));
    let err = store.touch_freshness(&ctx(9), 5).await.unwrap_err();
    assert!(matches!(
        err,
        ProjectionStoreError::Rejected(DirectoryError::ReplicaBehindHighWater { .. })
    ));
    assert_tables_eq(&store.dump_tables().await.unwrap(), &before);
}

/// Accounts are looked up in chunks: more accounts than one chunk, updated, collided and
/// inserted across chunk boundaries, still match the reference.
pub async fn accounts_are_looked_up_across_chunks<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    let mut seed = ProjectionTables::default();
    seed.accounts.insert(
        acc_id("local-x"),
        local_account("local-x", "zz-local@example.com"),
    );
    r.seed(seed).await;
    let names: Vec<String> = (0..1_234).map(|i| format!("acc{i:05}")).collect();
    let build = |cursor: i64, revision: i64, rename: bool| {
        let workspaces = names
            .chunks(10)
            .enumerate()
            .map(|(i, chunk)| {
                let pairs: Vec<(&str, i64)> =
                    chunk.iter().map(|n| (n.as_str(), revision)).collect();
                let mut w = workspace(&format!("ws-{i:04}"), revision, &pairs);
                if rename {
                    for m in w.members.iter_mut().step_by(2) {
                        m.display_name = format!("{} renamed", m.display_name);
                    }
                }
                w
            })
            .collect();
        snapshot(cursor, workspaces)
    };
    r.snapshot(&ctx(0), &build(10, 1, false)).await.unwrap();
    r.snapshot(&ctx(1), &build(11, 2, true)).await.unwrap();
    let mut collide = build(12, 3, true);
    let last = collide.workspaces.len() - 1;
    collide.workspaces[last].members[0].normalized_email = "zz-local@example.com".into();
    assert!(matches!(
        r.snapshot(&ctx(2), &collide).await,
        Err(DirectoryError::EmailCollision { .. })
    ));
    let dump = store.dump_tables().await.unwrap();
    assert_eq!(dump.accounts[&acc_id("acc00000")].projection_revision, 11);
    assert_eq!(dump.accounts[&acc_id("acc00001")].projection_revision, 10);
}

/// The committed active-workspace count is checked under the lock and rolls the delta back.
pub async fn committed_active_capacity_rolls_back<S: SuiteStore>(store: &S) {
    let mut r = Replay::new(store);
    let limited = ApplyContext {
        limits: ProjectionLimits {
            max_snapshot_workspaces: 10,
            max_snapshot_memberships: 100,
            max_active_workspaces: 2,
        },
        ..ctx(0)
    };
    r.snapshot(&limited, &base()).await.unwrap();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-3", 1)]);
    let d = delta(&["ws-3"], vec![workspace("ws-3", 1, &[("a", 1)])]);
    assert_eq!(
        r.delta(&limited, &d, &b).await.unwrap_err(),
        DirectoryError::ProjectedActiveWorkspaceCapacity { count: 3, limit: 2 }
    );
}

/// Two replicas applying at once serialize on the state row: the newer snapshot wins and the
/// older one is either applied first or superseded; the same delta twice is applied once.
pub async fn concurrent_replicas_serialize_on_the_state_row<S: SuiteStore>(store: &S) {
    store.apply_snapshot(&ctx(0), &base(), &[]).await.unwrap();
    let newer = snapshot(12, vec![workspace("ws-1", 2, &[("a", 1)])]);
    let older = snapshot(11, base().workspaces);
    let c1 = ctx(1);
    let c2 = ctx(2);
    let (a, b) = tokio::join!(
        store.apply_snapshot(&c1, &older, &[]),
        store.apply_snapshot(&c2, &newer, &[])
    );
    b.unwrap();
    if let Err(e) = a {
        assert!(e.is_superseded(), "{e}");
    }
    let state = store.projection_state(&instance()).await.unwrap().unwrap();
    assert_eq!(state.cursor, 12);
    let ev = batch(12, 13, 13, vec![dir_event("e-13", 13, "ws-1", 3)]);
    let d = delta(&["ws-1"], vec![workspace("ws-1", 3, &[("a", 1), ("b", 3)])]);
    let (x, y) = tokio::join!(
        store.apply_delta(&c1, &d, &ev),
        store.apply_delta(&c2, &d, &ev)
    );
    x.unwrap();
    y.unwrap();
    let dump = store.dump_tables().await.unwrap();
    assert_eq!(dump.states[&instance()].cursor, 13);
    assert_eq!(dump.memberships[&m_id("m-b-ws-1")].projection_revision, 3);
    assert_eq!(dump.receipts.len(), 1);
}

/// A 10,000-workspace / 100,000-membership snapshot applies correctly (and re-applies as a
/// no-op). This checks correctness at scale, not time.
pub async fn large_snapshot_applies<S: SuiteStore>(store: &S) {
    let workspaces_n = 10_000usize;
    let per_workspace = 10usize;
    let accounts_n = 25_000usize;
    let names: Vec<String> = (0..accounts_n).map(|i| format!("acc{i:06}")).collect();
    let workspaces = (0..workspaces_n)
        .map(|w| {
            let pairs: Vec<(&str, i64)> = (0..per_workspace)
                .map(|k| (names[(w * per_workspace + k) % accounts_n].as_str(), 1))
                .collect();
            workspace(&format!("ws-{w:06}"), 1, &pairs)
        })
        .collect();
    let big = snapshot(100, workspaces);
    let outcome = store.apply_snapshot(&ctx(0), &big, &[]).await.unwrap();
    assert_eq!(outcome.active_workspaces, Some(workspaces_n as u64));
    let cardinality = outcome.cardinality.unwrap();
    assert_eq!(
        (cardinality.workspaces, cardinality.memberships),
        (workspaces_n, workspaces_n * per_workspace)
    );
    let dump = store.dump_tables().await.unwrap();
    assert_eq!(dump.accounts.len(), accounts_n);
    assert_eq!(dump.workspaces.len(), workspaces_n);
    assert_eq!(dump.memberships.len(), workspaces_n * per_workspace);
    assert_eq!(dump.executions.len(), workspaces_n);
    // Every row, checked against the input (cheaper than replaying the reference at this size).
    for w in &big.workspaces {
        let row = &dump.workspaces[&w.uuid];
        assert_eq!(
            (row.status, row.projection_revision, row.name.as_str()),
            (WorkspaceStatus::Active, 1, w.name.as_str())
        );
        assert_eq!(
            row.created_by_account_uuid.as_ref(),
            Some(&w.created_by_account_uuid)
        );
        let exec = &dump.executions[&w.uuid];
        assert_eq!(
            (exec.state, exec.write_fenced, exec.active_generation),
            (ExecutionStatus::Active, false, 1)
        );
        for m in &w.members {
            let row = &dump.memberships[&m.membership_uuid];
            assert_eq!(
                (&row.workspace_uuid, &row.account_uuid),
                (&w.uuid, &m.account_uuid)
            );
            assert_eq!(
                (row.role, row.status, row.joined_at, row.projection_revision),
                (
                    MembershipRole::Developer,
                    MembershipStatus::Active,
                    m.joined_at,
                    1
                )
            );
            let account = &dump.accounts[&m.account_uuid];
            assert_eq!(
                (
                    account.normalized_email.as_str(),
                    account.display_name.as_str(),
                    account.projection_revision
                ),
                (m.normalized_email.as_str(), m.display_name.as_str(), 100)
            );
        }
    }
    // Re-applying the same snapshot changes nothing but the state row's freshness.
    let again = store.apply_snapshot(&ctx(1), &big, &[]).await.unwrap();
    assert_eq!(again.active_workspaces, Some(workspaces_n as u64));
    let mut after = store.dump_tables().await.unwrap();
    assert_eq!(after.states[&instance()].last_applied_at, at(1));
    after.states = dump.states.clone();
    assert_tables_eq(&after, &dump);
}

/// Instantiates the projection-store conformance suite: one `#[tokio::test]` per behaviour.
/// `$ctor` is an expression (evaluated inside an async test) yielding `(guard, store)`; the
/// guard lives as long as the test (e.g. a temporary database).
///
/// Invoke it at module level of an integration test (e.g. `tests/directory_store.rs`).
///
/// # What the store and the test crate need
/// - the store implements [`DirectoryProjectionStore`](crate::directory::DirectoryProjectionStore)
///   and [`DirectoryFixtureStore`](crate::directory::testing::DirectoryFixtureStore) (dump
///   every table, seed local rows: the suite compares whole tables with the reference);
/// - dev-dependencies: `tenantry-ports` with features `directory` (default) and `testing`, and
///   `tokio` with features `macros` and `rt-multi-thread` (the cases run on two workers).
///
/// # Example
/// The suite against the in-memory fake:
/// ```
/// use tenantry_ports::directory::testing::InMemoryProjectionStore;
///
/// tenantry_ports::directory_projection_store_conformance!(((), InMemoryProjectionStore::new()));
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! directory_projection_store_conformance {
    ($ctor:expr) => {
        $crate::directory_projection_store_conformance!(@tests $ctor;
            snapshot_apply_matches_reference,
            snapshot_superseded_and_conflict_are_rejected,
            delta_apply_matches_reference,
            delta_already_applied_by_another_replica_only_refreshes,
            entitlement_batches_and_freshness,
            inbox_skips_duplicates_and_rejects_conflicts,
            local_rows_are_never_taken_over,
            revision_zero_memberships_are_never_overwritten,
            local_workspaces_and_foreign_execution_rows_are_refused,
            every_rejected_input_changes_nothing,
            accounts_are_looked_up_across_chunks,
            committed_active_capacity_rolls_back,
            concurrent_replicas_serialize_on_the_state_row,
            large_snapshot_applies,
            projection_counts_match_the_tables,
            recent_receipts_are_the_newest_first,
            receipts_are_stamped_with_the_store_clock,
        );
    };
    (@tests $ctor:expr; $($name:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let (_guard, store) = $ctor;
                $crate::directory::testing::conformance::$name(&store).await;
            }
        )*
    };
}
