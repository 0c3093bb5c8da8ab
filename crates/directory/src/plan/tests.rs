//! Behaviour tables of the apply planners, run through the in-memory reference store.

use std::time::Duration;

use super::*;
use crate::config::ProjectionLimits;
use crate::maps::{
    AccountStatus, DirectoryAccountStatus, DirectoryMembershipStatus, DirectoryRole,
    ExecutionStatus, MembershipRole, MembershipStatus, RowSource, WorkspaceStatus,
};
use crate::model::{DirectoryMember, DirectoryWorkspace};
use crate::rows::ProjectionTables;
use crate::testing::*;

struct Harness {
    tables: ProjectionTables,
    ctx: ApplyContext,
}

impl Harness {
    fn new() -> Self {
        Self {
            tables: ProjectionTables::default(),
            ctx: ApplyContext {
                instance: instance(),
                limits: ProjectionLimits::default(),
                now: at(100),
                max_staleness: Duration::from_secs(60),
            },
        }
    }

    fn snap(
        &mut self,
        s: &DirectorySnapshot,
    ) -> Result<crate::memory::ApplyOutcome, DirectoryError> {
        self.tables.apply_snapshot(&self.ctx, s, &[])
    }

    fn delta(
        &mut self,
        d: &DirectoryDelta,
        b: &DirectoryEventBatch,
    ) -> Result<crate::memory::ApplyOutcome, DirectoryError> {
        self.tables.apply_delta(&self.ctx, d, b)
    }

    /// Asserts `f` fails with `expected` and leaves every table as it was.
    fn rejects(
        &mut self,
        expected: DirectoryError,
        f: impl FnOnce(&mut Self) -> Result<crate::memory::ApplyOutcome, DirectoryError>,
    ) {
        let before = self.tables.clone();
        assert_eq!(f(self).map(|_| ()), Err(expected));
        assert_eq!(self.tables, before, "a rejected input changed the tables");
    }

    fn ws(&self, uuid: &str) -> &WorkspaceRow {
        &self.tables.workspaces[&ws_id(uuid)]
    }

    fn membership(&self, uuid: &str) -> &MembershipRow {
        &self.tables.memberships[&m_id(uuid)]
    }

    fn exec(&self, uuid: &str) -> &ExecutionRow {
        &self.tables.executions[&ws_id(uuid)]
    }

    fn account(&self, uuid: &str) -> &AccountRow {
        &self.tables.accounts[&acc_id(uuid)]
    }

    fn seed_local_account(&mut self, uuid: &str, email: &str) {
        self.tables.accounts.insert(
            acc_id(uuid),
            AccountRow {
                uuid: acc_id(uuid),
                normalized_email: email.into(),
                display_name: "Local".into(),
                status: AccountStatus::Active,
                source: RowSource::Local,
                projection_revision: 0,
            },
        );
    }
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

#[test]
fn snapshot_apply_projects_every_table() {
    let mut h = Harness::new();
    let outcome = h.snap(&base()).unwrap();
    assert_eq!(outcome.active_workspaces, Some(2));
    assert_eq!(
        outcome.cardinality,
        Some(BatchCardinality {
            workspaces: 2,
            memberships: 3
        })
    );
    assert!(outcome.caught_up);
    assert_eq!(h.tables.accounts.len(), 3);
    assert_eq!(h.account("a").projection_revision, 10);
    assert_eq!(h.account("a").source, RowSource::Directory);
    assert_eq!(h.ws("ws-1").created_by_account_uuid, Some(acc_id("a")));
    assert_eq!(h.ws("ws-1").instance_uuid, Some(instance()));
    assert_eq!(h.membership("m-a-ws-1").role, MembershipRole::Developer);
    assert_eq!(h.exec("ws-2").state, ExecutionStatus::Active);
    assert!(!h.exec("ws-2").write_fenced);
    let state = &h.tables.states[&instance()];
    assert_eq!((state.cursor, state.snapshot_coverage_cursor), (10, 10));
    assert_eq!(state.snapshot_fingerprint, snapshot_fingerprint(&base()));
    assert_eq!(state.last_applied_at, at(100));
    assert_eq!(state.lease_expires_at, at(160));
}

#[test]
fn reapplying_the_same_snapshot_writes_nothing_but_freshness() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let existing = h.tables.select(&snapshot_keys(&base(), &[]), &instance());
    let plan = plan_snapshot(
        &h.ctx,
        h.tables.states.get(&instance()),
        &existing,
        &base(),
        &[],
    )
    .unwrap();
    assert!(
        plan.accounts.is_empty()
            && plan.workspaces.is_empty()
            && plan.memberships.is_empty()
            && plan.executions.is_empty()
    );
}

#[test]
fn snapshot_cursor_rollback_is_superseded() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let older = snapshot(9, base().workspaces);
    h.rejects(
        DirectoryError::SnapshotSuperseded {
            snapshot_cursor: 9,
            projected_cursor: 10,
        },
        |h| h.snap(&older),
    );
    assert!(
        DirectoryError::SnapshotSuperseded {
            snapshot_cursor: 9,
            projected_cursor: 10
        }
        .is_superseded()
    );
}

#[test]
fn same_cursor_with_different_fingerprint_is_conflict() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut other = base();
    other.workspaces[0].name = "changed".into();
    h.rejects(DirectoryError::SnapshotConflict { cursor: 10 }, |h| {
        h.snap(&other)
    });
}

#[test]
fn same_cursor_after_a_delta_accepts_any_fingerprint() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-1", 2)]);
    h.delta(
        &delta(&["ws-1"], vec![workspace("ws-1", 2, &[("a", 1), ("b", 1)])]),
        &b,
    )
    .unwrap();
    assert_eq!(
        h.tables.states[&instance()].snapshot_fingerprint,
        incremental_marker()
    );
    let mut at_same = base();
    at_same.cursor = 11;
    at_same.workspaces[0] = workspace("ws-1", 2, &[("a", 1), ("b", 1)]);
    h.snap(&at_same).unwrap();
    assert_eq!(
        h.tables.states[&instance()].snapshot_fingerprint,
        snapshot_fingerprint(&at_same)
    );
}

#[test]
fn snapshot_for_another_instance_is_rejected() {
    let mut h = Harness::new();
    let mut s = base();
    s.instance_uuid = InstanceUuid::parse("inst-2").unwrap();
    h.rejects(
        DirectoryError::WrongInstance {
            what: "snapshot",
            expected: instance(),
            actual: s.instance_uuid.clone(),
        },
        |h| h.snap(&s),
    );
}

#[test]
fn snapshot_capacity_limits_are_checked_before_and_after_writing() {
    let mut h = Harness::new();
    h.ctx.limits = ProjectionLimits {
        max_snapshot_workspaces: 1,
        max_snapshot_memberships: 100,
        max_active_workspaces: 100,
    };
    h.rejects(
        DirectoryError::SnapshotWorkspaceCapacity { count: 2, limit: 1 },
        |h| h.snap(&base()),
    );
    h.ctx.limits = ProjectionLimits {
        max_snapshot_workspaces: 10,
        max_snapshot_memberships: 2,
        max_active_workspaces: 100,
    };
    h.rejects(
        DirectoryError::MembershipCapacity { count: 3, limit: 2 },
        |h| h.snap(&base()),
    );
    h.ctx.limits = ProjectionLimits {
        max_snapshot_workspaces: 10,
        max_snapshot_memberships: 100,
        max_active_workspaces: 1,
    };
    h.rejects(
        DirectoryError::ActiveWorkspaceCapacity { count: 2, limit: 1 },
        |h| h.snap(&base()),
    );
    // A delta cannot see the instance total: the committed count catches it.
    h.snap(&snapshot(10, vec![workspace("ws-1", 1, &[("a", 1)])]))
        .unwrap();
    let b = batch(10, 11, 11, vec![dir_event("e-11", 11, "ws-2", 1)]);
    let d = delta(&["ws-2"], vec![workspace("ws-2", 1, &[("c", 1)])]);
    h.rejects(
        DirectoryError::ProjectedActiveWorkspaceCapacity { count: 2, limit: 1 },
        |h| h.delta(&d, &b),
    );
}

#[test]
fn absent_workspaces_are_archived_memberships_removed_and_execution_fenced() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let next = snapshot(12, vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])]);
    let outcome = h.snap(&next).unwrap();
    assert_eq!(outcome.active_workspaces, Some(1));
    assert_eq!(h.ws("ws-2").status, WorkspaceStatus::Archived);
    assert_eq!(
        h.ws("ws-2").projection_revision,
        1,
        "a snapshot proves absence, not a revision"
    );
    assert_eq!(h.membership("m-c-ws-2").status, MembershipStatus::Removed);
    assert_eq!(h.exec("ws-2").state, ExecutionStatus::Inactive);
    assert!(h.exec("ws-2").write_fenced);
    assert_eq!(h.ws("ws-1").status, WorkspaceStatus::Active);
}

#[test]
fn inbox_event_seen_again_with_same_contents_is_skipped() {
    let mut h = Harness::new();
    let events = vec![ent_event("e-1", 10, "ws-1", 1)];
    h.tables
        .apply_snapshot(&h.ctx.clone(), &base(), &events)
        .unwrap();
    let receipt = h.tables.receipts[&(instance(), events[0].uuid.clone())].clone();
    assert_eq!(receipt.applied_at, Some(at(100)));
    h.ctx.now = at(200);
    h.tables
        .apply_snapshot(&h.ctx.clone(), &base(), &events)
        .unwrap();
    let again = &h.tables.receipts[&(instance(), events[0].uuid.clone())];
    assert_eq!(
        again.received_at, receipt.received_at,
        "a duplicate is not received again"
    );
    assert_eq!(again.applied_at, Some(at(200)));
}

#[test]
fn inbox_event_seen_again_with_different_contents_is_rejected() {
    let mut h = Harness::new();
    let events = vec![ent_event("e-1", 10, "ws-1", 1)];
    h.tables
        .apply_snapshot(&h.ctx.clone(), &base(), &events)
        .unwrap();
    let changed = vec![ent_event("e-1", 10, "ws-1", 2)];
    let ctx = h.ctx.clone();
    h.rejects(
        DirectoryError::ReceiptConflict {
            event: changed[0].uuid.clone(),
        },
        |h| h.tables.apply_snapshot(&ctx, &base(), &changed),
    );
    let moved = vec![ent_event("e-1", 9, "ws-1", 1)];
    h.rejects(
        DirectoryError::ReceiptConflict {
            event: moved[0].uuid.clone(),
        },
        |h| h.tables.apply_snapshot(&ctx, &base(), &moved),
    );
}

#[test]
fn one_normalized_email_per_account_in_a_snapshot() {
    let mut h = Harness::new();
    let mut s = base();
    s.workspaces[1].members[0].normalized_email = "a@example.com".into();
    h.rejects(
        DirectoryError::EmailMapsToSeveralAccounts {
            email: "a@example.com".into(),
            first: acc_id("a"),
            second: acc_id("c"),
        },
        |h| h.snap(&s),
    );
}

#[test]
fn conflicting_projections_of_one_account_are_rejected() {
    let mut h = Harness::new();
    let mut s = snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("a", 1)]),
            workspace("ws-2", 1, &[("a", 1)]),
        ],
    );
    s.workspaces[1].members[0].display_name = "Other name".into();
    h.rejects(
        DirectoryError::ConflictingAccountProjections {
            account: acc_id("a"),
        },
        |h| h.snap(&s),
    );
    s.workspaces[1].members[0].display_name = "A a".into();
    s.workspaces[1].members[0].account_status = DirectoryAccountStatus::Blocked;
    h.rejects(
        DirectoryError::ConflictingAccountProjections {
            account: acc_id("a"),
        },
        |h| h.snap(&s),
    );
    // Blocked and disabled map to the same platform status: not a conflict.
    s.workspaces[0].members[0].account_status = DirectoryAccountStatus::Disabled;
    h.snap(&s).unwrap();
    assert_eq!(h.account("a").status, AccountStatus::Disabled);
}

#[test]
fn email_collision_with_another_local_account_is_rejected() {
    let mut h = Harness::new();
    h.seed_local_account("local-1", "a@example.com");
    h.rejects(
        DirectoryError::EmailCollision {
            account: acc_id("a"),
            other: acc_id("local-1"),
        },
        |h| h.snap(&base()),
    );
}

#[test]
fn local_account_with_the_same_id_is_rejected() {
    let mut h = Harness::new();
    h.seed_local_account("a", "a@example.com");
    h.rejects(
        DirectoryError::LocalAccountCollision {
            account: acc_id("a"),
        },
        |h| h.snap(&base()),
    );
}

#[test]
fn account_revision_rollback_is_rejected() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut s = snapshot(11, base().workspaces);
    s.workspaces[0].members[0].display_name = "New".into();
    h.snap(&s).unwrap();
    assert_eq!(h.account("a").projection_revision, 11);
    // Another replica's older delta (cursor 10 < account revision 11).
    let mut row = h.tables.states[&instance()].clone();
    row.cursor = 9;
    h.tables.states.insert(instance(), row);
    let b = batch(9, 10, 10, vec![dir_event("e-10", 10, "ws-1", 1)]);
    let d = delta(&["ws-1"], vec![base().workspaces[0].clone()]);
    h.rejects(
        DirectoryError::AccountRevisionRolledBack {
            account: acc_id("a"),
            stored: 11,
            incoming: 10,
        },
        |h| h.delta(&d, &b),
    );
}

#[test]
fn account_same_revision_with_different_contents_is_rejected() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut row = h.tables.states[&instance()].clone();
    row.snapshot_fingerprint = incremental_marker();
    h.tables.states.insert(instance(), row);
    let mut s = base();
    s.workspaces[0].members[0].display_name = "Renamed".into();
    h.rejects(
        DirectoryError::AccountRevisionConflict {
            account: acc_id("a"),
            revision: 10,
        },
        |h| h.snap(&s),
    );
}

#[test]
fn account_revision_advances_only_when_its_own_projection_changed() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut s = snapshot(20, base().workspaces);
    s.workspaces[0].name = "Renamed workspace".into();
    s.workspaces[0].projection_revision = 2;
    s.workspaces[0].members[0].role = DirectoryRole::Admin;
    s.workspaces[0].members[0].projection_revision = 2;
    s.workspaces[0].members[1].display_name = "B renamed".into();
    h.snap(&s).unwrap();
    assert_eq!(
        h.account("a").projection_revision,
        10,
        "role and workspace changes leave the account alone"
    );
    assert_eq!(h.account("b").projection_revision, 20);
    assert_eq!(h.account("b").display_name, "B renamed");
}

fn seed_workspace(h: &mut Harness, uuid: &str, source: RowSource, instance_uuid: Option<&str>) {
    h.tables.workspaces.insert(
        ws_id(uuid),
        WorkspaceRow {
            uuid: ws_id(uuid),
            source,
            instance_uuid: instance_uuid.map(|i| InstanceUuid::parse(i).unwrap()),
            name: "x".into(),
            slug: "x".into(),
            workspace_type: "team".into(),
            status: WorkspaceStatus::Active,
            created_by_account_uuid: None,
            projection_revision: 0,
        },
    );
}

#[test]
fn workspace_of_another_instance_is_rejected() {
    let mut h = Harness::new();
    seed_workspace(&mut h, "ws-1", RowSource::Directory, Some("inst-2"));
    h.rejects(
        DirectoryError::WorkspaceOtherInstance {
            workspace: ws_id("ws-1"),
        },
        |h| h.snap(&base()),
    );
}

#[test]
fn workspace_colliding_with_a_local_workspace_is_rejected() {
    let mut h = Harness::new();
    seed_workspace(&mut h, "ws-2", RowSource::Local, None);
    h.rejects(
        DirectoryError::LocalWorkspaceCollision {
            workspace: ws_id("ws-2"),
        },
        |h| h.snap(&base()),
    );
}

#[test]
fn workspace_revision_rollback_and_same_revision_conflict_are_rejected() {
    let mut h = Harness::new();
    let mut s = base();
    s.workspaces[0].projection_revision = 5;
    h.snap(&s).unwrap();
    let mut older = snapshot(11, base().workspaces);
    older.workspaces[0].projection_revision = 4;
    h.rejects(
        DirectoryError::WorkspaceRevisionRolledBack {
            workspace: ws_id("ws-1"),
            stored: 5,
            incoming: 4,
        },
        |h| h.snap(&older),
    );
    let mut same = snapshot(11, s.workspaces.clone());
    same.workspaces[0].slug = "other-slug".into();
    h.rejects(
        DirectoryError::WorkspaceRevisionConflict {
            workspace: ws_id("ws-1"),
            revision: 5,
        },
        |h| h.snap(&same),
    );
}

#[test]
fn creator_of_an_active_workspace_must_be_projected() {
    let mut h = Harness::new();
    let mut s = base();
    s.workspaces[1].created_by_account_uuid = acc_id("nobody");
    h.rejects(
        DirectoryError::CreatorNotProjected {
            workspace: ws_id("ws-2"),
            creator: acc_id("nobody"),
        },
        |h| h.snap(&s),
    );
    s.workspaces[1].status = WorkspaceStatus::Suspended;
    h.snap(&s).unwrap();
    assert_eq!(h.ws("ws-2").created_by_account_uuid, None);
    // Re-applying the same snapshot is not a conflict although the creator was dropped.
    h.snap(&s).unwrap();
}

#[test]
fn inactive_workspace_memberships_become_disabled_or_removed() {
    let mut h = Harness::new();
    let mut s = base();
    s.workspaces[0].status = WorkspaceStatus::Suspended;
    s.workspaces[1].status = WorkspaceStatus::Archived;
    h.snap(&s).unwrap();
    assert_eq!(h.membership("m-a-ws-1").status, MembershipStatus::Disabled);
    assert_eq!(h.membership("m-c-ws-2").status, MembershipStatus::Removed);
    assert!(h.exec("ws-1").write_fenced);
    let mut invited = snapshot(11, base().workspaces);
    invited.workspaces[0].members[0].membership_status = DirectoryMembershipStatus::Invited;
    for w in &mut invited.workspaces {
        w.projection_revision = 2;
        for m in &mut w.members {
            m.projection_revision = 2;
        }
    }
    h.snap(&invited).unwrap();
    assert_eq!(h.membership("m-a-ws-1").status, MembershipStatus::Disabled);
    assert_eq!(h.membership("m-b-ws-1").status, MembershipStatus::Active);
}

#[test]
fn revision_zero_memberships_belong_to_the_platform() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    // The platform took this membership over (e.g. a local role decision).
    let mut row = h.membership("m-a-ws-1").clone();
    row.projection_revision = 0;
    row.role = MembershipRole::Viewer;
    h.tables.memberships.insert(row.uuid.clone(), row.clone());
    let mut next = snapshot(11, base().workspaces);
    next.workspaces[0].projection_revision = 2;
    next.workspaces[0].members[0].role = DirectoryRole::Owner;
    next.workspaces[0].members[0].projection_revision = 2;
    next.workspaces[0].members[0].membership_uuid = m_id("m-different");
    h.snap(&next).unwrap();
    assert_eq!(h.membership("m-a-ws-1"), &row, "never overwritten");
    // Nor removed when the directory drops the member.
    let mut dropped = snapshot(12, next.workspaces.clone());
    dropped.workspaces[0].projection_revision = 3;
    dropped.workspaces[0].members.remove(0);
    dropped.workspaces[0].created_by_account_uuid = acc_id("b");
    h.snap(&dropped).unwrap();
    assert_eq!(h.membership("m-a-ws-1"), &row);
}

#[test]
fn changed_membership_uuid_for_one_account_is_rejected() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut s = snapshot(11, base().workspaces);
    s.workspaces[0].members[0].membership_uuid = m_id("m-new");
    h.rejects(
        DirectoryError::MembershipUuidChanged {
            workspace: ws_id("ws-1"),
            account: acc_id("a"),
            stored: m_id("m-a-ws-1"),
            incoming: m_id("m-new"),
        },
        |h| h.snap(&s),
    );
}

#[test]
fn membership_uuid_reused_for_another_workspace_is_rejected() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut s = snapshot(11, base().workspaces);
    s.workspaces[1].members.push(member("ws-2", "d", 1));
    s.workspaces[1].members[1].membership_uuid = m_id("m-a-ws-1");
    s.workspaces[0].members.remove(0);
    s.workspaces[0].created_by_account_uuid = acc_id("b");
    s.workspaces[0].projection_revision = 2;
    s.workspaces[1].projection_revision = 2;
    h.rejects(
        DirectoryError::MembershipUuidCollision {
            membership: m_id("m-a-ws-1"),
        },
        |h| h.snap(&s),
    );
}

#[test]
fn membership_revision_rollback_and_conflict_are_rejected() {
    let mut h = Harness::new();
    let mut s = base();
    s.workspaces[0].members[0].projection_revision = 5;
    h.snap(&s).unwrap();
    let mut older = snapshot(11, base().workspaces);
    older.workspaces[0].members[0].projection_revision = 4;
    h.rejects(
        DirectoryError::MembershipRevisionRolledBack {
            membership: m_id("m-a-ws-1"),
            workspace: ws_id("ws-1"),
            stored: 5,
            incoming: 4,
        },
        |h| h.snap(&older),
    );
    let mut same = snapshot(11, s.workspaces.clone());
    same.workspaces[0].members[0].role = DirectoryRole::Viewer;
    h.rejects(
        DirectoryError::MembershipRevisionConflict {
            membership: m_id("m-a-ws-1"),
            workspace: ws_id("ws-1"),
            revision: 5,
        },
        |h| h.snap(&same),
    );
    let mut time = snapshot(11, s.workspaces.clone());
    time.workspaces[0].members[0].joined_at = Some(at(5));
    h.rejects(
        DirectoryError::MembershipRevisionConflict {
            membership: m_id("m-a-ws-1"),
            workspace: ws_id("ws-1"),
            revision: 5,
        },
        |h| h.snap(&time),
    );
}

/// `shared/cases/001-workspace-status-change.md`: the snapshot at cursor 40 of `ws-a` with
/// `mem-1` / `mem-2` at revision 40.
fn case_001_snapshot() -> DirectorySnapshot {
    let mut w = workspace("ws-a", 40, &[("acct-x", 40), ("acct-y", 40)]);
    w.members[0].role = DirectoryRole::Owner;
    w.members[0].membership_uuid = m_id("mem-1");
    w.members[1].membership_uuid = m_id("mem-2");
    snapshot(40, vec![w])
}

fn case_001_changed(status: WorkspaceStatus, revision: i64) -> DirectoryWorkspace {
    let mut w = case_001_snapshot().workspaces.remove(0);
    w.status = status;
    w.projection_revision = revision;
    w
}

#[test]
fn case_001_workspace_status_change_without_member_revisions_is_applied_by_delta() {
    for (status, membership) in [
        (WorkspaceStatus::Suspended, MembershipStatus::Disabled),
        (WorkspaceStatus::Archived, MembershipStatus::Removed),
        (WorkspaceStatus::Deleted, MembershipStatus::Removed),
    ] {
        let mut h = Harness::new();
        h.snap(&case_001_snapshot()).unwrap();
        let b = batch(40, 41, 41, vec![dir_event("e-41", 41, "ws-a", 41)]);
        let d = delta(&["ws-a"], vec![case_001_changed(status, 41)]);
        let outcome = h
            .delta(&d, &b)
            .unwrap_or_else(|e| panic!("{status:?}: {e}"));
        assert!(outcome.caught_up, "{status:?}");
        assert_eq!(h.ws("ws-a").status, status);
        for m in ["mem-1", "mem-2"] {
            assert_eq!(h.membership(m).status, membership, "{status:?} {m}");
            assert_eq!(h.membership(m).projection_revision, 40, "own revision kept");
        }
        assert_eq!(h.membership("mem-1").role, MembershipRole::Owner);
        assert_eq!(h.exec("ws-a").state, ExecutionStatus::Inactive);
        assert!(h.exec("ws-a").write_fenced);
        // And back: reactivated, still without member revisions.
        if status == WorkspaceStatus::Suspended {
            let b = batch(41, 42, 42, vec![dir_event("e-42", 42, "ws-a", 42)]);
            let d = delta(
                &["ws-a"],
                vec![case_001_changed(WorkspaceStatus::Active, 42)],
            );
            h.delta(&d, &b).unwrap();
            assert_eq!(h.membership("mem-1").status, MembershipStatus::Active);
            assert!(!h.exec("ws-a").write_fenced);
        }
    }
}

#[test]
fn case_001_workspace_status_change_without_member_revisions_is_applied_by_snapshot() {
    for (status, membership) in [
        (WorkspaceStatus::Suspended, MembershipStatus::Disabled),
        (WorkspaceStatus::Archived, MembershipStatus::Removed),
        (WorkspaceStatus::Deleted, MembershipStatus::Removed),
    ] {
        let mut h = Harness::new();
        h.snap(&case_001_snapshot()).unwrap();
        let next = snapshot(41, vec![case_001_changed(status, 41)]);
        h.snap(&next).unwrap_or_else(|e| panic!("{status:?}: {e}"));
        assert_eq!(h.ws("ws-a").status, status);
        assert_eq!(h.membership("mem-2").status, membership, "{status:?}");
        assert!(h.exec("ws-a").write_fenced);
    }
}

#[test]
fn case_001_own_field_conflicts_at_one_revision_are_still_refused() {
    let conflict = DirectoryError::MembershipRevisionConflict {
        membership: m_id("mem-2"),
        workspace: ws_id("ws-a"),
        revision: 40,
    };
    type Mutate = fn(&mut DirectoryMember);
    let mutations: [Mutate; 3] = [
        |m| m.role = DirectoryRole::Admin,
        |m| m.membership_status = DirectoryMembershipStatus::Removed,
        |m| m.joined_at = Some(at(7)),
    ];
    for mutate in mutations {
        // Together with a workspace status change: the own field still conflicts.
        let mut h = Harness::new();
        h.snap(&case_001_snapshot()).unwrap();
        let mut w = case_001_changed(WorkspaceStatus::Suspended, 41);
        mutate(&mut w.members[1]);
        let b = batch(40, 41, 41, vec![dir_event("e-41", 41, "ws-a", 41)]);
        h.rejects(conflict.clone(), |h| {
            h.delta(&delta(&["ws-a"], vec![w]), &b)
        });
        // And after the suspension was applied, against the derived status.
        let b = batch(40, 41, 41, vec![dir_event("e-41", 41, "ws-a", 41)]);
        let d = delta(
            &["ws-a"],
            vec![case_001_changed(WorkspaceStatus::Suspended, 41)],
        );
        h.delta(&d, &b).unwrap();
        let mut w = case_001_changed(WorkspaceStatus::Active, 42);
        mutate(&mut w.members[1]);
        let b = batch(41, 42, 42, vec![dir_event("e-42", 42, "ws-a", 42)]);
        if w.members[1].membership_status == DirectoryMembershipStatus::Removed {
            // Under a suspended workspace the stored row cannot show the member's own status
            // (every member is disabled), so that one change is not detectable there.
            continue;
        }
        h.rejects(conflict.clone(), |h| {
            h.delta(&delta(&["ws-a"], vec![w]), &b)
        });
    }
}

#[test]
fn members_missing_from_the_workspace_are_removed() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut s = snapshot(11, base().workspaces);
    s.workspaces[0].projection_revision = 3;
    s.workspaces[0].members.truncate(1);
    h.snap(&s).unwrap();
    assert_eq!(h.membership("m-b-ws-1").status, MembershipStatus::Removed);
    assert_eq!(h.membership("m-b-ws-1").projection_revision, 3);
    assert_eq!(h.membership("m-a-ws-1").status, MembershipStatus::Active);
}

#[test]
fn execution_generation_and_desired_state_revision_never_roll_back() {
    let mut h = Harness::new();
    let mut s = base();
    s.workspaces[0].execution_generation = 4;
    s.workspaces[0].projection_revision = 3;
    h.snap(&s).unwrap();
    let mut lower_gen = snapshot(11, s.workspaces.clone());
    lower_gen.workspaces[0].execution_generation = 3;
    lower_gen.workspaces[0].projection_revision = 4;
    h.rejects(
        DirectoryError::ExecutionGenerationRolledBack {
            workspace: ws_id("ws-1"),
            stored: 4,
            incoming: 3,
        },
        |h| h.snap(&lower_gen),
    );
    // The workspace row is newer than the execution row only if the platform wrote it: fake it.
    let mut row = h.exec("ws-1").clone();
    row.desired_state_revision = 7;
    h.tables.executions.insert(ws_id("ws-1"), row);
    let mut newer_ws = snapshot(11, s.workspaces.clone());
    newer_ws.workspaces[0].projection_revision = 6;
    h.rejects(
        DirectoryError::DesiredStateRevisionRolledBack {
            workspace: ws_id("ws-1"),
            stored: 7,
            incoming: 6,
        },
        |h| h.snap(&newer_ws),
    );
}

#[test]
fn execution_conflicting_contents_at_one_revision_are_rejected() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut row = h.exec("ws-1").clone();
    row.active_generation = 0;
    h.tables.executions.insert(ws_id("ws-1"), row);
    let s = snapshot(11, base().workspaces);
    h.rejects(
        DirectoryError::ExecutionRevisionConflict {
            workspace: ws_id("ws-1"),
            revision: 1,
        },
        |h| h.snap(&s),
    );
}

#[test]
fn execution_owned_by_the_platform_is_rejected() {
    let mut h = Harness::new();
    h.tables.executions.insert(
        ws_id("ws-1"),
        ExecutionRow {
            workspace_uuid: ws_id("ws-1"),
            source: RowSource::Local,
            instance_uuid: None,
            active_generation: 0,
            state: ExecutionStatus::Active,
            write_fenced: false,
            desired_state_revision: 0,
        },
    );
    h.rejects(
        DirectoryError::ExecutionOwnerInvalid {
            workspace: ws_id("ws-1"),
        },
        |h| h.snap(&base()),
    );
}

// ----- deltas -----

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

mod model_check {
    //! Property: any sequence of snapshots with growing cursors and revisions leaves the
    //! tables equal to the last snapshot (present workspaces projected, absent ones archived).
    use super::*;
    use proptest::prelude::*;

    fn arb_snapshot_contents() -> impl Strategy<Value = Vec<(usize, u8, Vec<usize>)>> {
        prop::collection::vec(
            (0usize..6, 0u8..4, prop::collection::vec(0usize..5, 0..4)),
            0..6,
        )
    }

    fn build(step: i64, contents: &[(usize, u8, Vec<usize>)]) -> DirectorySnapshot {
        let mut seen = std::collections::BTreeSet::new();
        let mut workspaces = Vec::new();
        for (w, status, members) in contents {
            if !seen.insert(*w) {
                continue;
            }
            let uuid = format!("ws-{w}");
            let mut accounts: Vec<String> = members.iter().map(|m| format!("acc{m}")).collect();
            accounts.sort();
            accounts.dedup();
            let pairs: Vec<(&str, i64)> = accounts.iter().map(|a| (a.as_str(), step)).collect();
            let mut ws = workspace(&uuid, step, &pairs);
            ws.execution_generation = step;
            ws.status = [
                WorkspaceStatus::Active,
                WorkspaceStatus::Suspended,
                WorkspaceStatus::Archived,
                WorkspaceStatus::Deleted,
            ][*status as usize];
            if pairs.is_empty() && ws.status == WorkspaceStatus::Active {
                ws.status = WorkspaceStatus::Suspended;
            }
            workspaces.push(ws);
        }
        snapshot(step * 10, workspaces)
    }

    /// One delta step: requested workspaces (index, returned?, status, members).
    type Step = Vec<(usize, bool, u8, Vec<usize>)>;

    fn arb_step() -> impl Strategy<Value = Step> {
        prop::collection::vec(
            (
                0usize..5,
                any::<bool>(),
                0u8..4,
                prop::collection::vec(0usize..4, 1..3),
            ),
            1..4,
        )
    }

    proptest! {
        #[test]
        fn delta_sequences_match_a_per_workspace_model(steps in prop::collection::vec(arb_step(), 1..6)) {
            let mut h = Harness::new();
            h.snap(&snapshot(10, vec![])).unwrap();
            // workspace -> Some((status, accounts)) when projected, None when tombstoned.
            let mut model: std::collections::BTreeMap<usize, Option<(WorkspaceStatus, Vec<String>)>> = Default::default();
            let mut cursor = 10;
            for (i, step) in steps.iter().enumerate() {
                let revision = i as i64 + 1;
                let mut seen = std::collections::BTreeSet::new();
                let mut events = Vec::new();
                let mut returned = Vec::new();
                for (w, keep, status, members) in step {
                    if !seen.insert(*w) {
                        continue;
                    }
                    cursor += 1;
                    let uuid = format!("ws-{w}");
                    events.push(dir_event(&format!("e-{cursor}"), cursor, &uuid, revision));
                    if *keep {
                        let mut accounts: Vec<String> = members.iter().map(|m| format!("acc{m}")).collect();
                        accounts.sort();
                        accounts.dedup();
                        let pairs: Vec<(&str, i64)> = accounts.iter().map(|a| (a.as_str(), revision)).collect();
                        let mut ws = workspace(&uuid, revision, &pairs);
                        ws.execution_generation = revision;
                        ws.status = [WorkspaceStatus::Active, WorkspaceStatus::Suspended, WorkspaceStatus::Archived, WorkspaceStatus::Deleted][*status as usize];
                        model.insert(*w, Some((ws.status, accounts)));
                        returned.push(ws);
                    } else if model.contains_key(w) {
                        model.insert(*w, None);
                    }
                }
                let requested: Vec<String> = seen.iter().map(|w| format!("ws-{w}")).collect();
                let requested: Vec<&str> = requested.iter().map(String::as_str).collect();
                let b = batch(cursor - events.len() as i64, cursor, cursor, events);
                let outcome = h.delta(&delta(&requested, returned), &b).unwrap();
                prop_assert!(outcome.caught_up);
                for (w, expected) in &model {
                    let uuid = format!("ws-{w}");
                    let row = h.ws(&uuid);
                    let exec = h.exec(&uuid);
                    match expected {
                        Some((status, accounts)) => {
                            prop_assert_eq!(row.status, *status);
                            prop_assert_eq!(exec.write_fenced, *status != WorkspaceStatus::Active);
                            for m in h.tables.memberships.values().filter(|m| m.workspace_uuid.as_str() == uuid) {
                                let listed = accounts.iter().any(|a| a == m.account_uuid.as_str());
                                if !listed || *status != WorkspaceStatus::Active {
                                    prop_assert_ne!(m.status, MembershipStatus::Active);
                                } else {
                                    prop_assert_eq!(m.status, MembershipStatus::Active);
                                }
                            }
                        }
                        None => {
                            prop_assert_eq!(row.status, WorkspaceStatus::Archived);
                            prop_assert!(exec.write_fenced);
                            prop_assert!(h.tables.memberships.values().filter(|m| m.workspace_uuid.as_str() == uuid).all(|m| m.status == MembershipStatus::Removed));
                        }
                    }
                }
                prop_assert_eq!(h.tables.states[&instance()].cursor, cursor);
            }
        }
    }

    proptest! {
        #[test]
        fn snapshot_sequences_match_the_last_snapshot(steps in prop::collection::vec(arb_snapshot_contents(), 1..5)) {
            let mut h = Harness::new();
            let mut ever = std::collections::BTreeSet::new();
            for (i, contents) in steps.iter().enumerate() {
                let s = build(i as i64 + 1, contents);
                h.snap(&s).unwrap();
                let present: std::collections::BTreeSet<_> = s.workspaces.iter().map(|w| w.uuid.clone()).collect();
                for w in &s.workspaces {
                    ever.insert(w.uuid.clone());
                    let row = h.ws(w.uuid.as_str());
                    prop_assert_eq!(row.status, w.status);
                    prop_assert_eq!(row.projection_revision, w.projection_revision);
                    let exec = h.exec(w.uuid.as_str());
                    prop_assert_eq!(exec.write_fenced, w.status != WorkspaceStatus::Active);
                    for m in &w.members {
                        let row = h.membership(m.membership_uuid.as_str());
                        prop_assert_eq!(row.status, crate::maps::map_membership_status(m.membership_status, w.status));
                    }
                    let listed: std::collections::BTreeSet<_> = w.members.iter().map(|m| m.account_uuid.clone()).collect();
                    for row in h.tables.memberships.values().filter(|m| m.workspace_uuid == w.uuid && !listed.contains(&m.account_uuid)) {
                        prop_assert_eq!(row.status, MembershipStatus::Removed);
                    }
                }
                for uuid in ever.iter().filter(|u| !present.contains(*u)) {
                    let row = h.ws(uuid.as_str());
                    prop_assert!(matches!(row.status, WorkspaceStatus::Archived | WorkspaceStatus::Deleted));
                    prop_assert!(h.exec(uuid.as_str()).write_fenced);
                }
                let active = s.workspaces.iter().filter(|w| w.status == WorkspaceStatus::Active).count() as u64;
                prop_assert_eq!(h.tables.count_active(&instance()), active);
            }
        }
    }
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
