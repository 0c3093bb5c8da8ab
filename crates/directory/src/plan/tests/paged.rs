//! The page-by-page apply of a snapshot ([`PagedSnapshotApply`]) against the one-body planner:
//! the rules that span pages, and a property over random snapshot sequences with emails that
//! move between accounts. (Every `Harness::snap` of the other tables also checks pages of one,
//! two and all workspaces against the one-body result.)

use proptest::prelude::*;

use super::*;

/// An account whose email an earlier page changes is still the stored owner of that email for
/// a later page: the result must not depend on where the pages split.
#[test]
fn an_email_freed_by_an_earlier_page_is_still_taken_for_a_later_page() {
    let mut h = Harness::new();
    h.snap(&snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("b", 1)]),
            workspace("ws-2", 1, &[("a", 1)]),
        ],
    ))
    .unwrap();
    // b moves from b@ to z@ (ws-1, first page); new account c takes b@ (ws-2, second page).
    let mut next = snapshot(
        11,
        vec![
            workspace("ws-1", 2, &[("b", 2)]),
            workspace("ws-2", 2, &[("a", 1), ("c", 2)]),
        ],
    );
    next.workspaces[0].members[0].normalized_email = "z@example.com".into();
    next.workspaces[1].members[1].normalized_email = "b@example.com".into();
    h.rejects(
        DirectoryError::EmailCollision {
            account: acc_id("c"),
            other: acc_id("b"),
        },
        |h| h.snap(&next),
    );
    // Without the new claimant, the move itself applies, whatever the pages.
    next.workspaces[1].members.pop();
    h.snap(&next).unwrap();
    assert_eq!(h.account("b").normalized_email, "z@example.com");
}

#[test]
fn rules_across_pages_refuse_what_one_page_cannot_see() {
    let two = || {
        snapshot(
            10,
            vec![
                workspace("ws-1", 1, &[("a", 1)]),
                workspace("ws-2", 1, &[("b", 1)]),
            ],
        )
    };
    let mut h = Harness::new();
    let mut s = two();
    s.workspaces[1].members[0].normalized_email = "a@example.com".into();
    h.rejects(
        DirectoryError::EmailMapsToSeveralAccounts {
            email: "a@example.com".into(),
            first: acc_id("a"),
            second: acc_id("b"),
        },
        |h| h.snap(&s),
    );
    let mut s = two();
    s.workspaces[1].members[0].membership_uuid = m_id("m-a-ws-1");
    h.rejects(
        DirectoryError::DuplicateMembershipUuid {
            membership: m_id("m-a-ws-1"),
        },
        |h| h.snap(&s),
    );
    let mut s = two();
    s.workspaces[1] = workspace("ws-1", 1, &[("b", 1)]);
    h.rejects(
        DirectoryError::DuplicateWorkspace {
            workspace: ws_id("ws-1"),
        },
        |h| h.snap(&s),
    );
    // A creator projected only through another page's member is projected.
    let mut s = two();
    s.workspaces[1].created_by_account_uuid = acc_id("a");
    h.snap(&s).unwrap();
    assert_eq!(h.ws("ws-2").created_by_account_uuid, Some(acc_id("a")));
}

#[test]
fn capacity_is_reported_before_a_broken_rule_of_any_page() {
    let mut h = Harness::new();
    h.ctx.limits.max_snapshot_memberships = 1;
    let mut s = snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("a", 1)]),
            workspace("ws-2", 1, &[("b", 1)]),
        ],
    );
    s.workspaces[0].members[0].normalized_email = "Not Normalized".into();
    h.rejects(
        DirectoryError::MembershipCapacity { count: 2, limit: 1 },
        |h| h.snap(&s),
    );
}

#[test]
fn a_paged_reapply_of_the_projected_snapshot_plans_no_page() {
    let mut h = Harness::new();
    h.snap(&base()).unwrap();
    let mut survey = SnapshotSurvey::new(instance(), 10);
    let s = base();
    let page: Vec<_> = s.workspaces.iter().collect();
    survey.push(&page);
    let survey = survey.finish(&h.ctx).unwrap();
    let state = h.tables.states.get(&instance()).cloned();
    let mut apply = PagedSnapshotApply::begin(&h.ctx, state.as_ref(), survey).unwrap();
    assert!(!apply.rows_needed());
    assert_eq!(apply.page_keys(&page), LookupKeys::default());
    let existing = crate::rows::ExistingRows::default();
    assert_eq!(apply.plan_page(&existing, &page), Ok(PageWrite::default()));
}

/// One account of a random step: (account, email from a small pool, display name variant).
type AccountPick = (usize, usize, u8);
/// One workspace of a random step: (workspace, status, creator, members).
type WorkspacePick = (usize, u8, usize, Vec<AccountPick>);

fn arb_step() -> impl Strategy<Value = Vec<WorkspacePick>> {
    prop::collection::vec(
        (
            0usize..6,
            0u8..4,
            0usize..5,
            prop::collection::vec((0usize..5, 0usize..4, 0u8..2), 0..4),
        ),
        0..6,
    )
}

fn build(step: i64, picks: &[WorkspacePick]) -> DirectorySnapshot {
    let mut workspaces = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (w, status, creator, members) in picks {
        if !seen.insert(*w) {
            continue;
        }
        let uuid = format!("ws-{w}");
        let mut ws = workspace(&uuid, step, &[]);
        ws.execution_generation = step;
        ws.status = [
            WorkspaceStatus::Active,
            WorkspaceStatus::Suspended,
            WorkspaceStatus::Archived,
            WorkspaceStatus::Deleted,
        ][*status as usize];
        ws.created_by_account_uuid = acc_id(&format!("acc{creator}"));
        let mut listed = std::collections::BTreeSet::new();
        for (account, email, name) in members {
            if !listed.insert(*account) {
                continue;
            }
            let mut m = member(&uuid, &format!("acc{account}"), step);
            m.normalized_email = format!("e{email}@example.com");
            m.display_name = format!("Name {name}");
            ws.members.push(m);
        }
        workspaces.push(ws);
    }
    snapshot(step * 10, workspaces)
}

proptest! {
    /// Any sequence of snapshots (emails shared, moved and swapped between accounts, creators
    /// projected or not), each applied whole and page by page at every page size: the same
    /// outcome, and the same tables after each step.
    #[test]
    fn paged_applies_equal_whole_applies(
        steps in prop::collection::vec(arb_step(), 1..5),
    ) {
        let mut h = Harness::new();
        for (i, picks) in steps.iter().enumerate() {
            let s = build(i as i64 + 1, picks);
            // `snap` asserts the equality for pages of one, two and all workspaces.
            let before = h.tables.clone();
            if h.snap(&s).is_err() {
                prop_assert_eq!(&h.tables, &before);
            }
        }
    }
}
