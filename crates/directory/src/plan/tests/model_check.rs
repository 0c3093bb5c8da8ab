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
