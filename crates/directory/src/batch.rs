//! Validation of provider answers before anything is written: event batches, deltas against
//! their batch, the internal consistency of a workspace list, and capacity limits.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde_json::Value;

use crate::config::ProjectionLimits;
use crate::error::DirectoryError;
use crate::ids::{InstanceUuid, MembershipUuid, WorkspaceUuid};
use crate::maps::WorkspaceStatus;
use crate::model::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectoryWorkspace, EventKind,
};

/// Checks an event batch against the instance and the cursor it was requested after.
///
/// Rules, in order: the batch is for `instance`; it answers `expected_after_cursor`; cursors
/// are ordered (`after_cursor <= cursor <= high_water_cursor`, event cursors strictly
/// increasing inside `(after_cursor, cursor]`); every event type is supported; every payload's
/// `workspace_uuid` equals the event aggregate; every payload revision
/// (`directory_revision` / `entitlement_revision`) is a JSON integer equal to the event revision.
///
/// # Errors
/// The first broken rule as a [`DirectoryError`].
pub fn validate_batch(
    batch: &DirectoryEventBatch,
    instance: &InstanceUuid,
    expected_after_cursor: i64,
) -> Result<(), DirectoryError> {
    if &batch.instance_uuid != instance {
        return Err(DirectoryError::WrongInstance {
            what: "event batch",
            expected: instance.clone(),
            actual: batch.instance_uuid.clone(),
        });
    }
    if batch.after_cursor != expected_after_cursor {
        return Err(DirectoryError::BatchCursorMismatch {
            expected: expected_after_cursor,
            actual: batch.after_cursor,
        });
    }
    if batch.cursor < batch.after_cursor || batch.high_water_cursor < batch.cursor {
        return Err(DirectoryError::MalformedBatch {
            reason: format!(
                "cursors must satisfy after_cursor ({}) <= cursor ({}) <= high_water_cursor ({})",
                batch.after_cursor, batch.cursor, batch.high_water_cursor
            ),
        });
    }
    let mut previous = batch.after_cursor;
    for event in &batch.events {
        if event.cursor <= previous || event.cursor > batch.cursor {
            return Err(DirectoryError::MalformedBatch {
                reason: format!(
                    "event {} cursor {} is not increasing inside ({}, {}]",
                    event.uuid, event.cursor, batch.after_cursor, batch.cursor
                ),
            });
        }
        previous = event.cursor;
    }
    for event in &batch.events {
        if event.kind().is_none() {
            return Err(DirectoryError::UnsupportedEventType {
                event: event.uuid.clone(),
                event_type: event.event_type.clone(),
            });
        }
    }
    for event in &batch.events {
        validate_payload(event)?;
    }
    Ok(())
}

/// Whether an event page without events proves that the replica is caught up: only when
/// `after_cursor == cursor == high_water_cursor` (nothing after the replica's cursor exists).
/// An empty page with a higher `cursor` or `high_water_cursor` reports changes it did not
/// serve (a lagging provider, or an old page replayed), so it must not renew readiness.
///
/// Deviation from the reference, which treats any empty page as freshness; see
/// docs/protocol.md "Freshness".
///
/// # Errors
/// [`DirectoryError::EmptyPageNotCaughtUp`] when the cursors differ.
pub fn empty_page_proves_freshness(batch: &DirectoryEventBatch) -> Result<(), DirectoryError> {
    if batch.after_cursor == batch.cursor && batch.cursor == batch.high_water_cursor {
        Ok(())
    } else {
        Err(DirectoryError::EmptyPageNotCaughtUp {
            after_cursor: batch.after_cursor,
            cursor: batch.cursor,
            high_water_cursor: batch.high_water_cursor,
        })
    }
}

fn validate_payload(event: &DirectoryEvent) -> Result<(), DirectoryError> {
    let Some(kind) = event.kind() else {
        return Err(DirectoryError::UnsupportedEventType {
            event: event.uuid.clone(),
            event_type: event.event_type.clone(),
        });
    };
    match event.payload.get("workspace_uuid") {
        Some(Value::String(scope)) if scope == event.aggregate_uuid.as_str() => {}
        _ => {
            return Err(DirectoryError::EventScopeConflict {
                event: event.uuid.clone(),
                aggregate: event.aggregate_uuid.clone(),
            });
        }
    }
    let field = kind.revision_key();
    let matches = match event.payload.get(field) {
        Some(Value::Number(n)) if !n.is_f64() => n.as_i64() == Some(event.revision),
        _ => false,
    };
    if !matches {
        return Err(DirectoryError::EventRevisionConflict {
            event: event.uuid.clone(),
            field,
            revision: event.revision,
        });
    }
    Ok(())
}

/// The highest announced revision per workspace over the batch's `directory.changed` events
/// (sorted by workspace uuid). Empty when the batch has only entitlement events.
pub fn directory_event_revisions(events: &[DirectoryEvent]) -> BTreeMap<WorkspaceUuid, i64> {
    let mut revisions = BTreeMap::new();
    for event in events {
        if event.kind() == Some(EventKind::DirectoryChanged) {
            let entry = revisions.entry(event.aggregate_uuid.clone()).or_insert(0);
            *entry = (*entry).max(event.revision);
        }
    }
    revisions
}

/// Checks a delta against its (already validated) batch and returns the required revision per
/// requested workspace.
///
/// Rules: the delta is for `instance`; the batch has directory events; the delta requested
/// exactly the workspaces those events name; it returns only requested workspaces, each once,
/// and none older than its event notification.
///
/// # Errors
/// [`DirectoryError::WrongInstance`], [`DirectoryError::DeltaMismatch`],
/// [`DirectoryError::DeltaUnrequestedWorkspace`], [`DirectoryError::DuplicateWorkspace`] or
/// [`DirectoryError::DeltaOlderThanEvent`].
pub fn validate_delta(
    delta: &DirectoryDelta,
    batch: &DirectoryEventBatch,
    instance: &InstanceUuid,
) -> Result<BTreeMap<WorkspaceUuid, i64>, DirectoryError> {
    if &delta.instance_uuid != instance {
        return Err(DirectoryError::WrongInstance {
            what: "delta",
            expected: instance.clone(),
            actual: delta.instance_uuid.clone(),
        });
    }
    let required = directory_event_revisions(&batch.events);
    let requested: BTreeSet<&WorkspaceUuid> = delta.requested_workspace_uuids.iter().collect();
    if required.is_empty()
        || requested.len() != required.len()
        || !required.keys().all(|k| requested.contains(k))
    {
        return Err(DirectoryError::DeltaMismatch);
    }
    let mut seen = HashSet::new();
    for workspace in &delta.workspaces {
        let Some(&needed) = required.get(&workspace.uuid) else {
            return Err(DirectoryError::DeltaUnrequestedWorkspace {
                workspace: workspace.uuid.clone(),
            });
        };
        if !seen.insert(&workspace.uuid) {
            return Err(DirectoryError::DuplicateWorkspace {
                workspace: workspace.uuid.clone(),
            });
        }
        // Planted (verification only; the planner's rollback check carries the same switch):
        // a lagging answer is taken as current.
        if workspace.projection_revision < needed
            && !tenantry_kernel::planted!("older-revision-applied")
        {
            return Err(DirectoryError::DeltaOlderThanEvent {
                workspace: workspace.uuid.clone(),
                revision: workspace.projection_revision,
                required: needed,
            });
        }
    }
    Ok(required)
}

/// Counts of one validated input, reported as gauges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchCardinality {
    /// Workspaces in the input.
    pub workspaces: usize,
    /// Memberships in the input.
    pub memberships: usize,
}

/// Checks capacity limits of an input before any database work: the workspace count (full
/// snapshots only), the membership count and the count of active workspaces.
///
/// # Errors
/// [`DirectoryError::SnapshotWorkspaceCapacity`], [`DirectoryError::MembershipCapacity`] or
/// [`DirectoryError::ActiveWorkspaceCapacity`].
pub fn check_capacity(
    workspaces: &[DirectoryWorkspace],
    full_snapshot: bool,
    limits: &ProjectionLimits,
) -> Result<BatchCardinality, DirectoryError> {
    let count = workspaces.len();
    if full_snapshot && count > limits.max_snapshot_workspaces {
        return Err(DirectoryError::SnapshotWorkspaceCapacity {
            count,
            limit: limits.max_snapshot_workspaces,
        });
    }
    let memberships: usize = workspaces.iter().map(|w| w.members.len()).sum();
    if memberships > limits.max_snapshot_memberships {
        return Err(DirectoryError::MembershipCapacity {
            count: memberships,
            limit: limits.max_snapshot_memberships,
        });
    }
    let active = workspaces
        .iter()
        .filter(|w| w.status == WorkspaceStatus::Active)
        .count();
    if active > limits.max_active_workspaces {
        return Err(DirectoryError::ActiveWorkspaceCapacity {
            count: active,
            limit: limits.max_active_workspaces,
        });
    }
    Ok(BatchCardinality {
        workspaces: count,
        memberships,
    })
}

/// Checks the committed count of active projected workspaces (taken under the state-row lock
/// after the input was written).
///
/// # Errors
/// [`DirectoryError::ProjectedActiveWorkspaceCapacity`] when `active > max_active_workspaces`.
pub fn check_committed_active(
    active: u64,
    limits: &ProjectionLimits,
) -> Result<(), DirectoryError> {
    if active > limits.max_active_workspaces as u64 {
        return Err(DirectoryError::ProjectedActiveWorkspaceCapacity {
            count: active,
            limit: limits.max_active_workspaces,
        });
    }
    Ok(())
}

/// Checks that a workspace list is internally consistent: no workspace twice, no account twice
/// in one workspace, no membership uuid twice, normalized non-empty emails, and directory
/// revisions of workspaces and memberships at least 1.
///
/// # Errors
/// [`DirectoryError::DuplicateWorkspace`], [`DirectoryError::DuplicateMember`],
/// [`DirectoryError::DuplicateMembershipUuid`], [`DirectoryError::InvalidEmail`] or
/// [`DirectoryError::InvalidRevision`].
pub fn validate_workspaces(workspaces: &[DirectoryWorkspace]) -> Result<(), DirectoryError> {
    let mut seen_workspaces = HashSet::new();
    let mut seen_memberships = HashSet::new();
    for workspace in workspaces {
        validate_workspace(
            workspace,
            |uuid| seen_workspaces.insert(uuid),
            |uuid| seen_memberships.insert(uuid),
        )?;
    }
    Ok(())
}

/// [`validate_workspaces`] for one workspace of a longer list: `first_workspace` and
/// `first_membership` record an identifier and answer whether the list had not named it
/// before (a paged snapshot keeps them across its pages, `crate::plan::SnapshotSurvey`).
///
/// # Errors
/// As [`validate_workspaces`].
pub(crate) fn validate_workspace<'w>(
    workspace: &'w DirectoryWorkspace,
    mut first_workspace: impl FnMut(&'w WorkspaceUuid) -> bool,
    mut first_membership: impl FnMut(&'w MembershipUuid) -> bool,
) -> Result<(), DirectoryError> {
    if !first_workspace(&workspace.uuid) {
        return Err(DirectoryError::DuplicateWorkspace {
            workspace: workspace.uuid.clone(),
        });
    }
    if workspace.projection_revision < 1 {
        return Err(DirectoryError::InvalidRevision {
            what: "workspace",
            id: workspace.uuid.to_string(),
            revision: workspace.projection_revision,
        });
    }
    let mut accounts = HashSet::new();
    for member in &workspace.members {
        if !accounts.insert(&member.account_uuid) {
            return Err(DirectoryError::DuplicateMember {
                workspace: workspace.uuid.clone(),
                account: member.account_uuid.clone(),
            });
        }
        if !first_membership(&member.membership_uuid) {
            return Err(DirectoryError::DuplicateMembershipUuid {
                membership: member.membership_uuid.clone(),
            });
        }
        if !is_normalized_email(&member.normalized_email) {
            return Err(DirectoryError::InvalidEmail {
                account: member.account_uuid.clone(),
            });
        }
        if member.projection_revision < 1 {
            return Err(DirectoryError::InvalidRevision {
                what: "membership",
                id: member.membership_uuid.to_string(),
                revision: member.projection_revision,
            });
        }
    }
    Ok(())
}

/// True for a non-empty email without surrounding whitespace or upper-case letters.
pub fn is_normalized_email(email: &str) -> bool {
    !email.is_empty() && email.trim() == email && email.to_lowercase() == email
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;
    use serde_json::json;

    fn inst() -> InstanceUuid {
        InstanceUuid::parse("inst-1").unwrap()
    }

    #[test]
    fn empty_page_proves_freshness_only_when_all_cursors_are_equal() {
        assert_eq!(empty_page_proves_freshness(&batch(7, 7, 7, vec![])), Ok(()));
        for (after, cursor, high_water) in [(7, 7, 9), (7, 9, 9), (7, 8, 9)] {
            assert_eq!(
                empty_page_proves_freshness(&batch(after, cursor, high_water, vec![])),
                Err(DirectoryError::EmptyPageNotCaughtUp {
                    after_cursor: after,
                    cursor,
                    high_water_cursor: high_water,
                })
            );
        }
    }

    #[test]
    fn batch_validation() {
        type Mutate = fn(&mut DirectoryEventBatch);
        type Check = fn(&DirectoryError) -> bool;
        let ok = batch(
            10,
            12,
            12,
            vec![
                dir_event("e-11", 11, "ws-1", 4),
                ent_event("e-12", 12, "ws-2", 2),
            ],
        );
        assert_eq!(validate_batch(&ok, &inst(), 10), Ok(()));
        let cases: Vec<(&str, Mutate, Check)> = vec![
            (
                "other instance",
                |b| b.instance_uuid = InstanceUuid::parse("inst-2").unwrap(),
                |e| {
                    matches!(
                        e,
                        DirectoryError::WrongInstance {
                            what: "event batch",
                            ..
                        }
                    )
                },
            ),
            (
                "after cursor",
                |b| b.after_cursor = 9,
                |e| {
                    matches!(
                        e,
                        DirectoryError::BatchCursorMismatch {
                            expected: 10,
                            actual: 9
                        }
                    )
                },
            ),
            (
                "cursor behind after",
                |b| {
                    b.cursor = 9;
                    b.events.clear();
                    b.after_cursor = 10
                },
                |e| matches!(e, DirectoryError::MalformedBatch { .. }),
            ),
            (
                "high water behind",
                |b| b.high_water_cursor = 11,
                |e| matches!(e, DirectoryError::MalformedBatch { .. }),
            ),
            (
                "event cursor outside",
                |b| b.events[1].cursor = 13,
                |e| matches!(e, DirectoryError::MalformedBatch { .. }),
            ),
            (
                "unsupported type",
                |b| b.events[1].event_type = "billing.changed".into(),
                |e| matches!(e, DirectoryError::UnsupportedEventType { .. }),
            ),
            (
                "payload scope",
                |b| {
                    b.events[0]
                        .payload
                        .insert("workspace_uuid".into(), json!("ws-9"));
                },
                |e| matches!(e, DirectoryError::EventScopeConflict { .. }),
            ),
            (
                "payload scope missing",
                |b| {
                    b.events[0].payload.remove("workspace_uuid");
                },
                |e| matches!(e, DirectoryError::EventScopeConflict { .. }),
            ),
            (
                "payload revision differs",
                |b| {
                    b.events[0]
                        .payload
                        .insert("directory_revision".into(), json!(5));
                },
                |e| {
                    matches!(
                        e,
                        DirectoryError::EventRevisionConflict {
                            field: "directory_revision",
                            ..
                        }
                    )
                },
            ),
            (
                "payload revision float",
                |b| {
                    b.events[0]
                        .payload
                        .insert("directory_revision".into(), json!(4.0));
                },
                |e| matches!(e, DirectoryError::EventRevisionConflict { .. }),
            ),
            (
                "payload revision string",
                |b| {
                    b.events[0]
                        .payload
                        .insert("directory_revision".into(), json!("4"));
                },
                |e| matches!(e, DirectoryError::EventRevisionConflict { .. }),
            ),
            (
                "payload revision bool",
                |b| {
                    b.events[1]
                        .payload
                        .insert("entitlement_revision".into(), json!(true));
                },
                |e| {
                    matches!(
                        e,
                        DirectoryError::EventRevisionConflict {
                            field: "entitlement_revision",
                            ..
                        }
                    )
                },
            ),
            (
                "wrong revision key",
                |b| {
                    b.events[1].payload.remove("entitlement_revision");
                    b.events[1]
                        .payload
                        .insert("directory_revision".into(), json!(2));
                },
                |e| matches!(e, DirectoryError::EventRevisionConflict { .. }),
            ),
        ];
        for (name, mutate, check) in cases {
            let mut b = ok.clone();
            mutate(&mut b);
            let err = validate_batch(&b, &inst(), 10).expect_err(name);
            assert!(check(&err), "{name}: {err:?}");
        }
    }

    #[test]
    fn directory_event_revisions_take_the_highest_per_workspace() {
        let events = vec![
            dir_event("e-1", 1, "ws-1", 4),
            dir_event("e-2", 2, "ws-1", 6),
            dir_event("e-3", 3, "ws-2", 1),
            ent_event("e-4", 4, "ws-3", 9),
        ];
        let revisions = directory_event_revisions(&events);
        assert_eq!(revisions.len(), 2);
        assert_eq!(revisions[&ws_id("ws-1")], 6);
        assert_eq!(revisions[&ws_id("ws-2")], 1);
        assert!(directory_event_revisions(&[ent_event("e-1", 1, "ws-1", 1)]).is_empty());
    }

    #[test]
    fn delta_must_cover_exactly_the_batch_revisions() {
        let b = batch(
            0,
            2,
            2,
            vec![
                dir_event("e-1", 1, "ws-1", 4),
                dir_event("e-2", 2, "ws-2", 3),
            ],
        );
        let ok = delta(
            &["ws-1", "ws-2"],
            vec![workspace("ws-1", 4, &[("acc-1", 1)])],
        );
        let required = validate_delta(&ok, &b, &inst()).unwrap();
        assert_eq!(required.len(), 2);

        let mut other = ok.clone();
        other.instance_uuid = InstanceUuid::parse("inst-2").unwrap();
        assert!(matches!(
            validate_delta(&other, &b, &inst()),
            Err(DirectoryError::WrongInstance { what: "delta", .. })
        ));

        let fewer = delta(&["ws-1"], vec![]);
        assert_eq!(
            validate_delta(&fewer, &b, &inst()),
            Err(DirectoryError::DeltaMismatch)
        );
        let more = delta(&["ws-1", "ws-2", "ws-3"], vec![]);
        assert_eq!(
            validate_delta(&more, &b, &inst()),
            Err(DirectoryError::DeltaMismatch)
        );
        let only_entitlements = batch(0, 1, 1, vec![ent_event("e-1", 1, "ws-1", 1)]);
        assert_eq!(
            validate_delta(&delta(&[], vec![]), &only_entitlements, &inst()),
            Err(DirectoryError::DeltaMismatch)
        );

        let unrequested = delta(&["ws-1", "ws-2"], vec![workspace("ws-9", 4, &[])]);
        assert!(matches!(
            validate_delta(&unrequested, &b, &inst()),
            Err(DirectoryError::DeltaUnrequestedWorkspace { .. })
        ));
        let older = delta(&["ws-1", "ws-2"], vec![workspace("ws-1", 3, &[])]);
        assert_eq!(
            validate_delta(&older, &b, &inst()),
            Err(DirectoryError::DeltaOlderThanEvent {
                workspace: ws_id("ws-1"),
                revision: 3,
                required: 4
            })
        );
        let twice = delta(
            &["ws-1", "ws-2"],
            vec![workspace("ws-1", 4, &[]), workspace("ws-1", 4, &[])],
        );
        assert!(matches!(
            validate_delta(&twice, &b, &inst()),
            Err(DirectoryError::DuplicateWorkspace { .. })
        ));
    }

    #[test]
    fn capacity_limits() {
        let limits = ProjectionLimits {
            max_snapshot_workspaces: 2,
            max_snapshot_memberships: 3,
            max_active_workspaces: 1,
        };
        let one = vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])];
        assert_eq!(
            check_capacity(&one, true, &limits),
            Ok(BatchCardinality {
                workspaces: 1,
                memberships: 2
            })
        );
        let mut three = vec![archived("ws-1"), archived("ws-2"), archived("ws-3")];
        assert_eq!(
            check_capacity(&three, true, &limits),
            Err(DirectoryError::SnapshotWorkspaceCapacity { count: 3, limit: 2 })
        );
        assert!(
            check_capacity(&three, false, &limits).is_ok(),
            "deltas have no workspace limit"
        );
        three[0].status = WorkspaceStatus::Active;
        three[1].status = WorkspaceStatus::Active;
        assert_eq!(
            check_capacity(&three, false, &limits),
            Err(DirectoryError::ActiveWorkspaceCapacity { count: 2, limit: 1 })
        );
        let many = vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)]), {
            let mut w = workspace("ws-2", 1, &[("c", 1), ("d", 1)]);
            w.status = WorkspaceStatus::Suspended;
            w
        }];
        assert_eq!(
            check_capacity(&many, false, &limits),
            Err(DirectoryError::MembershipCapacity { count: 4, limit: 3 })
        );
        assert_eq!(check_committed_active(1, &limits), Ok(()));
        assert_eq!(
            check_committed_active(2, &limits),
            Err(DirectoryError::ProjectedActiveWorkspaceCapacity { count: 2, limit: 1 })
        );
    }

    #[test]
    fn workspace_list_consistency() {
        assert_eq!(
            validate_workspaces(&[
                workspace("ws-1", 1, &[("a", 1)]),
                workspace("ws-2", 1, &[("a", 1)])
            ]),
            Ok(())
        );
        let twice = vec![workspace("ws-1", 1, &[]), workspace("ws-1", 1, &[])];
        assert!(matches!(
            validate_workspaces(&twice),
            Err(DirectoryError::DuplicateWorkspace { .. })
        ));
        let mut dup_member = workspace("ws-1", 1, &[("a", 1)]);
        let mut copy = dup_member.members[0].clone();
        copy.membership_uuid = crate::ids::MembershipUuid::parse("m-other").unwrap();
        dup_member.members.push(copy);
        assert!(matches!(
            validate_workspaces(&[dup_member]),
            Err(DirectoryError::DuplicateMember { .. })
        ));
        let mut dup_uuid = vec![
            workspace("ws-1", 1, &[("a", 1)]),
            workspace("ws-2", 1, &[("b", 1)]),
        ];
        dup_uuid[1].members[0].membership_uuid = dup_uuid[0].members[0].membership_uuid.clone();
        assert!(matches!(
            validate_workspaces(&dup_uuid),
            Err(DirectoryError::DuplicateMembershipUuid { .. })
        ));
        for bad in ["", " a@x.io", "A@x.io"] {
            let mut w = workspace("ws-1", 1, &[("a", 1)]);
            w.members[0].normalized_email = bad.into();
            assert!(
                matches!(
                    validate_workspaces(&[w]),
                    Err(DirectoryError::InvalidEmail { .. })
                ),
                "{bad:?}"
            );
        }
        let zero = workspace("ws-1", 1, &[("a", 0)]);
        assert!(matches!(
            validate_workspaces(&[zero]),
            Err(DirectoryError::InvalidRevision {
                what: "membership",
                ..
            })
        ));
        let zero_ws = workspace("ws-1", 0, &[]);
        assert!(matches!(
            validate_workspaces(&[zero_ws]),
            Err(DirectoryError::InvalidRevision {
                what: "workspace",
                ..
            })
        ));
    }
}
