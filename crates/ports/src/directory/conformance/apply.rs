//! Conformance cases of applying directory input: snapshots and deltas against the reference,
//! projection counts, recent receipts, superseded and conflicting input, entitlement batches
//! and freshness, the inbox, and receipts stamped with the store's clock.

use super::*;

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
