//! Conformance cases of what a store must protect or refuse: local rows and revision-0
//! memberships are never taken over, local workspaces and foreign execution rows are refused,
//! and every rejected input changes nothing.

use super::*;

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
