//! Behaviour tables of the apply planners, run through the in-memory reference store: the
//! harness and snapshots here; accounts, workspaces, deltas and the model check in their modules.

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

mod accounts;
mod deltas;
mod model_check;
mod paged;
mod workspaces;

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

    /// Applies `s` whole, and checks that the same snapshot applied page by page (pages of
    /// one, two and all workspaces, in uuid order) gives the same outcome and the same tables.
    fn snap(
        &mut self,
        s: &DirectorySnapshot,
    ) -> Result<crate::memory::ApplyOutcome, DirectoryError> {
        let before = self.tables.clone();
        let whole = self.tables.apply_snapshot(&self.ctx, s, &[]);
        // Pages come in uuid order; the one-body planner reports the first broken rule in
        // list order, so the pages are compared with the sorted list applied whole.
        let mut sorted = s.clone();
        sorted.workspaces.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        let mut reference = before.clone();
        let expected = reference.apply_snapshot(&self.ctx, &sorted, &[]);
        if whole.is_ok() {
            assert_eq!(
                expected, whole,
                "the list's order changed an applied snapshot"
            );
            assert_eq!(reference, self.tables);
        }
        for size in [1, 2, sorted.workspaces.len().max(1)] {
            let pages: Vec<Vec<DirectoryWorkspace>> = sorted
                .workspaces
                .chunks(size)
                .map(<[DirectoryWorkspace]>::to_vec)
                .collect();
            let mut paged = before.clone();
            let outcome =
                paged.apply_snapshot_pages(&self.ctx, &s.instance_uuid, s.cursor, &pages, &[]);
            if size == sorted.workspaces.len().max(1) || expected.is_ok() {
                assert_eq!(
                    outcome, expected,
                    "pages of {size} workspaces: another outcome"
                );
            } else {
                // Smaller pages report the first broken rule in page order (account rules
                // of a page before its workspace rules), so only the refusal must agree.
                assert!(
                    outcome.is_err(),
                    "pages of {size} workspaces applied: {outcome:?}"
                );
            }
            assert_eq!(paged, reference, "pages of {size} workspaces: other tables");
        }
        whole
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
    // (snapshot workspaces, snapshot memberships, active workspaces) allowed, and the refusal.
    for ((workspaces, memberships, active), refusal) in [
        (
            (1, 100, 100),
            DirectoryError::SnapshotWorkspaceCapacity { count: 2, limit: 1 },
        ),
        (
            (10, 2, 100),
            DirectoryError::MembershipCapacity { count: 3, limit: 2 },
        ),
        (
            (10, 100, 1),
            DirectoryError::ActiveWorkspaceCapacity { count: 2, limit: 1 },
        ),
    ] {
        h.ctx.limits = ProjectionLimits {
            max_snapshot_workspaces: workspaces,
            max_snapshot_memberships: memberships,
            max_active_workspaces: active,
        };
        h.rejects(refusal, |h| h.snap(&base()));
    }
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

/// Re-planning the snapshot the projection holds (same cursor, same fingerprint) writes no
/// row but the state row, and needs no row loaded but the receipts; planned against no loaded
/// rows at all it still writes nothing else (the rows are not compared again).
#[test]
fn an_already_projected_snapshot_writes_only_the_state_row() {
    let mut h = Harness::new();
    let s = snapshot(5, vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])]);
    h.snap(&s).unwrap();
    let state = h.tables.states[&instance()].clone();
    let fingerprint = crate::fingerprint::snapshot_fingerprint(&s);
    assert!(snapshot_already_projected(Some(&state), 5, &fingerprint));
    let keys = snapshot_lookup_keys(Some(&state), 5, &fingerprint, snapshot_keys(&s, &[]));
    assert_eq!(keys, LookupKeys::default());

    let write = plan_snapshot(&h.ctx, Some(&state), &ExistingRows::default(), &s, &[]).unwrap();
    assert!(write.accounts.is_empty() && write.workspaces.is_empty());
    assert!(write.memberships.is_empty() && write.executions.is_empty());
    assert_eq!(write.state.cursor, 5);
    assert!(write.caught_up);

    // A later cursor, or other contents at a later cursor, is planned in full.
    assert!(!snapshot_already_projected(Some(&state), 6, &fingerprint));
    let renamed = snapshot(6, vec![workspace("ws-1", 2, &[("a", 1), ("b", 1)])]);
    let other = crate::fingerprint::snapshot_fingerprint(&renamed);
    assert!(!snapshot_already_projected(Some(&state), 6, &other));
    assert_eq!(
        snapshot_lookup_keys(Some(&state), 6, &other, snapshot_keys(&renamed, &[])),
        snapshot_keys(&renamed, &[])
    );
    let renamed_write = plan_snapshot(
        &h.ctx,
        Some(&state),
        &ExistingRows::default(),
        &renamed,
        &[],
    )
    .unwrap();
    assert_eq!(renamed_write.workspaces.len(), 1);
    // No state row, or the incremental marker, is never "already projected".
    assert!(!snapshot_already_projected(None, 5, &fingerprint));
    let mut marked = state.clone();
    marked.snapshot_fingerprint = crate::fingerprint::incremental_marker();
    assert!(!snapshot_already_projected(
        Some(&marked),
        5,
        &crate::fingerprint::incremental_marker()
    ));
}

/// Re-applying the same snapshot through the reference store changes no row but the state's
/// freshness.
#[test]
fn reapplying_a_snapshot_changes_only_freshness() {
    let mut h = Harness::new();
    let s = snapshot(5, vec![workspace("ws-1", 1, &[("a", 1)]), archived("ws-2")]);
    h.snap(&s).unwrap();
    let before = h.tables.clone();
    h.ctx.now = at(200);
    h.snap(&s).unwrap();
    assert_eq!(h.tables.accounts, before.accounts);
    assert_eq!(h.tables.workspaces, before.workspaces);
    assert_eq!(h.tables.memberships, before.memberships);
    assert_eq!(h.tables.executions, before.executions);
    assert_eq!(h.tables.states[&instance()].last_applied_at, at(200));
}

/// The plan does not depend on how [`Join`] runs the fingerprint and the row planning (here:
/// the rows first), nor on a fingerprint handed in.
#[test]
fn the_snapshot_plan_does_not_depend_on_the_join() {
    struct Reversed;
    impl Join for Reversed {
        fn join<A: Send, B: Send>(
            self,
            a: impl FnOnce() -> A + Send,
            b: impl FnOnce() -> B + Send,
        ) -> (A, B) {
            let b = b();
            (a(), b)
        }
    }
    let h = Harness::new();
    let s = snapshot(5, vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])]);
    let none = ExistingRows::default();
    let sequential = plan_snapshot(&h.ctx, None, &none, &s, &[]).unwrap();
    let reversed = plan_snapshot_with(&h.ctx, None, &none, &s, &[], None, Reversed).unwrap();
    assert_eq!(sequential, reversed);
    let fingerprint = crate::fingerprint::snapshot_fingerprint(&s);
    let given =
        plan_snapshot_with(&h.ctx, None, &none, &s, &[], Some(fingerprint), Sequential).unwrap();
    assert_eq!(sequential, given);
}
