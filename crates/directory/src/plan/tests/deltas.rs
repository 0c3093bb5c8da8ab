//! Behaviour tables of deltas: named workspaces, readiness at the high-water mark, tombstones,
//! replicas, missing receipts, entitlement-only batches, freshness, and receipt stamps.

use super::*;

#[test]
fn delta_applies_the_named_workspaces() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let b = batch(
        10,
        12,
        12,
        vec![
            dir_event("e-11", 11, "ws-1", 2),
            ent_event("e-12", 12, "ws-2", 1),
        ],
    );
    let mut w = workspace("ws-1", 2, &[("a", 1), ("b", 1), ("d", 2)]);
    w.name = "Renamed".into();
    let outcome = h.delta(&delta(&["ws-1"], vec![w]), &b).unwrap();
    assert!(outcome.caught_up);
    assert_eq!(outcome.active_workspaces, Some(2));
    assert_eq!(h.ws("ws-1").name, "Renamed");
    assert_eq!(h.account("d").projection_revision, 12);
    assert_eq!(h.account("a").projection_revision, 10);
    let state = &h.tables.states[&instance()];
    assert_eq!((state.cursor, state.snapshot_coverage_cursor), (12, 10));
    assert_eq!(
        state.snapshot_fingerprint,
        incremental_marker(),
        "the fingerprint becomes the incremental marker"
    );
    assert_eq!(h.tables.receipts.len(), 2);
    assert!(
        h.tables
            .receipts
            .values()
            .all(|r| r.applied_at == Some(at(100)))
    );
}

#[test]
fn readiness_is_recorded_only_when_caught_up_with_the_high_water_mark() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let b = batch(10, 11, 15, vec![dir_event("e-11", 11, "ws-1", 2)]);
    let outcome = h
        .delta(
            &delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1)])]),
            &b,
        )
        .unwrap();
    assert!(!outcome.caught_up);
}

#[test]
fn requested_but_omitted_workspaces_are_tombstoned() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-2", 4)]);
    h.delta(&delta(&["ws-2"], vec![]), &b).unwrap();
    assert_eq!(h.ws("ws-2").status, WorkspaceStatus::Archived);
    assert_eq!(h.ws("ws-2").projection_revision, 4);
    assert_eq!(h.membership("m-c-ws-2").status, MembershipStatus::Removed);
    assert_eq!(h.membership("m-c-ws-2").projection_revision, 4);
    assert_eq!(
        (
            h.exec("ws-2").state,
            h.exec("ws-2").write_fenced,
            h.exec("ws-2").desired_state_revision
        ),
        (ExecutionStatus::Inactive, true, 4)
    );
}

/// Found by the chaos harness on a failover formation: a projection that lagged its provider
/// applied a delta that answered a workspace's state after the batch's event (revision 4 for an
/// event at 2); the next page announced the workspace at revision 3 and the delta omitted it
/// (removed since, at revision 5). The reference refuses that tombstone as a rollback and the
/// projection never leaves the page; here the omission is tombstoned at the stored revision,
/// and the later removal event at its own.
#[test]
fn a_tombstone_below_a_delta_that_ran_ahead_archives_at_the_stored_revision() {
    for (entity, setup) in [
        (
            "workspace",
            (|h: &mut Harness| {
                let mut w = h.ws("ws-2").clone();
                w.projection_revision = 9;
                h.tables.workspaces.insert(w.uuid.clone(), w);
            }) as fn(&mut Harness),
        ),
        ("membership", |h: &mut Harness| {
            let mut m = h.membership("m-c-ws-2").clone();
            m.projection_revision = 9;
            h.tables.memberships.insert(m.uuid.clone(), m);
        }),
        ("execution state", |h: &mut Harness| {
            let mut e = h.exec("ws-2").clone();
            e.desired_state_revision = 9;
            h.tables.executions.insert(e.workspace_uuid.clone(), e);
        }),
    ] {
        let mut h = Harness::new();
        h.snap(&base()).unwrap();
        setup(&mut h);
        let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-2", 4)]);
        h.delta(&delta(&["ws-2"], vec![]), &b)
            .unwrap_or_else(|e| panic!("{entity} stored at 9: {e}"));
        assert_eq!(h.ws("ws-2").status, WorkspaceStatus::Archived, "{entity}");
        assert_eq!(h.ws("ws-2").projection_revision, 9, "{entity}");
        assert_eq!(h.membership("m-c-ws-2").status, MembershipStatus::Removed);
        assert_eq!(h.membership("m-c-ws-2").projection_revision, 9, "{entity}");
        let exec = h.exec("ws-2");
        assert_eq!(
            (exec.state, exec.write_fenced, exec.desired_state_revision),
            (ExecutionStatus::Inactive, true, 9),
            "{entity}"
        );
        assert_eq!(
            h.tables.states[&instance()].cursor,
            11,
            "{entity}: the page is consumed"
        );
        // The removal's own event, later in the stream, tombstones again at its revision.
        let later = batch(11, 12, 12, vec![dir_event("e-12", 12, "ws-2", 10)]);
        h.delta(&delta(&["ws-2"], vec![]), &later).unwrap();
        assert_eq!(h.ws("ws-2").projection_revision, 10, "{entity}");
        assert_eq!(h.membership("m-c-ws-2").projection_revision, 10, "{entity}");
    }
}

#[test]
fn delta_already_applied_by_another_replica_only_records_freshness() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 2)]);
    let d = delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1)])]);
    h.delta(&d, &b).unwrap();
    let before = h.tables.clone();
    h.ctx.now = at(130);
    // Replica B consumes the same page (its own cursor was 10).
    let outcome = h.delta(&d, &b).unwrap();
    assert!(outcome.caught_up);
    assert_eq!(h.tables.workspaces, before.workspaces);
    assert_eq!(h.tables.memberships, before.memberships);
    assert_eq!(h.tables.states[&instance()].last_applied_at, at(130));
}

#[test]
fn missing_receipts_below_the_shared_cursor_are_an_error() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    // Another replica moved the shared cursor to 12 without receipts (it cannot, but a bug could).
    let mut row = h.tables.states[&instance()].clone();
    row.cursor = 12;
    h.tables.states.insert(instance(), row);
    let b = batch(10, 11, 12, vec![dir_event("e-11", 11, "ws-1", 2)]);
    let d = delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1)])]);
    h.rejects(
        DirectoryError::MissingReceipt {
            event: b.events[0].uuid.clone(),
            cursor: 11,
        },
        |h| h.delta(&d, &b),
    );
}

#[test]
fn delta_requires_a_projection_state_not_behind_the_batch() {
    let mut h = Harness::new();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 2)]);
    let d = delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1)])]);
    h.rejects(
        DirectoryError::StateMissing {
            instance: instance(),
        },
        |h| h.delta(&d, &b),
    );
    h.snap(&snapshot(9, base().workspaces)).unwrap();
    h.rejects(
        DirectoryError::StateCursorRolledBack {
            state_cursor: 9,
            expected: 10,
        },
        |h| h.delta(&d, &b),
    );
}

#[test]
fn entitlement_only_batch_advances_the_cursor() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let ctx = h.ctx.clone();
    let b = batch(10, 12, 12, vec![ent_event("e-11", 11, "ws-1", 3)]);
    let outcome = h.tables.apply_event_batch(&ctx, &b).unwrap();
    assert!(outcome.caught_up);
    assert_eq!(h.tables.states[&instance()].cursor, 12);
    assert_eq!(
        h.tables.states[&instance()].snapshot_fingerprint,
        snapshot_fingerprint(&base())
    );
    let with_directory = batch(12, 13, 13, vec![dir_event("e-13", 13, "ws-1", 3)]);
    h.rejects(DirectoryError::DirectoryChangesNeedDelta, |h| {
        h.tables.apply_event_batch(&ctx, &with_directory)
    });
}

#[test]
fn freshness_touch_fails_when_this_replica_has_not_consumed_the_high_water_mark() {
    let mut h = Harness::new();
    let ctx = h.ctx.clone();
    h.rejects(
        DirectoryError::StateMissing {
            instance: instance(),
        },
        |h| h.tables.touch_freshness(&ctx, 10),
    );
    h.snap(&base()).unwrap();
    let later = ApplyContext {
        now: at(150),
        ..ctx.clone()
    };
    h.tables.touch_freshness(&later, 10).unwrap();
    assert_eq!(h.tables.states[&instance()].last_applied_at, at(150));
    h.rejects(
        DirectoryError::ReplicaBehindHighWater {
            replica_cursor: 9,
            shared_cursor: 10,
        },
        |h| h.tables.touch_freshness(&later, 9),
    );
    h.rejects(
        DirectoryError::StateCursorRolledBack {
            state_cursor: 10,
            expected: 11,
        },
        |h| h.tables.touch_freshness(&later, 11),
    );
}

#[test]
fn joined_at_is_compared_at_millisecond_precision() {
    let mut h = Harness::new();
    let mut s = base();
    s.workspaces[0].members[0].joined_at = Some(at(0) + chrono::TimeDelta::microseconds(1_500));
    h.snap(&s).unwrap();
    assert_eq!(
        h.membership("m-a-ws-1").joined_at,
        Some(at(0) + chrono::TimeDelta::milliseconds(1))
    );
    h.snap(&s).unwrap();
}

/// A store stamps the receipts a write creates with its own clock (the database's); a receipt
/// it read keeps its `received_at`, even when the batch marks it applied again.
#[test]
fn stamp_new_receipts_times_only_the_receipts_a_write_creates() {
    let mut h = Harness::new();
    let first = vec![ent_event("e-1", 10, "ws-1", 1)];
    h.tables
        .apply_snapshot(&h.ctx.clone(), &base(), &first)
        .unwrap();
    h.ctx.now = at(200);
    let both = vec![
        ent_event("e-1", 10, "ws-1", 1),
        ent_event("e-2", 11, "ws-1", 2),
    ];
    let keys = snapshot_keys(&base(), &both);
    let existing = h.tables.select(&keys, &instance());
    let state = h.tables.states.get(&instance()).cloned();
    let mut write = plan_snapshot(&h.ctx, state.as_ref(), &existing, &base(), &both).unwrap();
    assert_eq!(write.receipts.len(), 2, "e-1 applied again, e-2 new");
    assert!(write.creates_receipts(&existing));
    let database_now = at(5000) + chrono::TimeDelta::microseconds(1500);
    assert_eq!(write.stamp_new_receipts(&existing, database_now), 1);
    let received: Vec<_> = write
        .receipts
        .iter()
        .map(|r| (r.event_uuid.to_string(), r.received_at))
        .collect();
    assert_eq!(
        received,
        vec![
            ("e-1".to_owned(), at(100)),
            (
                "e-2".to_owned(),
                at(5000) + chrono::TimeDelta::milliseconds(1)
            ),
        ]
    );
    let nothing_new = ExistingRows {
        receipts: write.receipts.clone(),
        ..ExistingRows::default()
    };
    assert!(!write.creates_receipts(&nothing_new));
}
