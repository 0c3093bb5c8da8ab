//! Conformance cases of scale and concurrency: accounts looked up across chunks, committed
//! capacity rolled back, replicas serialized on the state row, and a large snapshot.

use super::*;

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
