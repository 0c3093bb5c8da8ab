//! Behaviour tables of account projection: one normalized email per account, conflicting
//! projections, collisions with local accounts, revision rollbacks and conflicts.

use super::*;

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
