//! Fingerprints of snapshots and events (canonical JSON, SHA-256; see
//! [`tenantry_kernel::fingerprint`]).

use serde_json::Value;
use tenantry_kernel::{CanonicalHasher, Fingerprint, fingerprint_json};

use crate::ids::{AccountUuid, InstanceUuid, WorkspaceUuid};
use crate::maps::WorkspaceStatus;
use crate::model::{DirectoryEvent, DirectoryMember, DirectorySnapshot, DirectoryWorkspace};

/// Marker stored as the snapshot fingerprint after a delta was applied: a per-workspace delta
/// cannot prove a full-directory fingerprint, so the next snapshot at the same cursor is
/// accepted whatever its contents (event receipts and entity revisions protect that path).
pub fn incremental_marker() -> Fingerprint {
    Fingerprint::of_bytes(b"tenantry-directory-incremental-v1")
}

/// Fingerprint of a snapshot's contents: the instance and its workspaces sorted by uuid, each
/// with members sorted by membership uuid. The cursor and `generated_at` are not part of it, so
/// the same directory served twice fingerprints the same.
///
/// The canonical form `{"instance_uuid":…,"workspaces":[…]}` is hashed one workspace at a
/// time ([`CanonicalHasher`]): memory is one workspace's JSON value, not the snapshot's (a
/// 1,000,000-membership snapshot as one JSON value is about a gigabyte).
pub fn snapshot_fingerprint(snapshot: &DirectorySnapshot) -> Fingerprint {
    let mut workspaces: Vec<_> = snapshot.workspaces.iter().collect();
    workspaces.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    let mut hasher = SnapshotFingerprinter::new(&snapshot.instance_uuid);
    for workspace in workspaces {
        hasher.push(workspace);
    }
    hasher.finish()
}

/// A [`DirectoryWorkspace`] as it serializes, lent, with its members in membership-uuid
/// order: hashing it needs no copy of the workspace. Same field names and renames as the
/// model (`fingerprints_are_stable` pins the result).
#[derive(serde::Serialize)]
struct SortedWorkspace<'a> {
    uuid: &'a WorkspaceUuid,
    name: &'a str,
    slug: &'a str,
    #[serde(rename = "type")]
    workspace_type: &'a str,
    status: WorkspaceStatus,
    created_by_account_uuid: &'a AccountUuid,
    projection_revision: i64,
    execution_generation: i64,
    members: Vec<&'a DirectoryMember>,
}

/// [`snapshot_fingerprint`] computed one workspace at a time, for a snapshot that arrives in
/// pages ([`crate::plan::SnapshotSurvey`]). Pushing the workspaces in ascending uuid order
/// gives the fingerprint of the whole snapshot; the order is the caller's to keep (a paged
/// snapshot's pages are in that order, [`crate::paging::SnapshotPages`] checks it).
pub struct SnapshotFingerprinter {
    hasher: CanonicalHasher,
    empty: bool,
}

impl SnapshotFingerprinter {
    /// Starts the fingerprint of a snapshot of `instance`.
    pub fn new(instance: &InstanceUuid) -> Self {
        let mut hasher = CanonicalHasher::new();
        // Keys in canonical (sorted) order: "instance_uuid" < "workspaces".
        hasher.raw("{\"instance_uuid\":");
        hasher.value(&serde_json::to_value(instance).unwrap_or(Value::Null));
        hasher.raw(",\"workspaces\":[");
        Self {
            hasher,
            empty: true,
        }
    }

    /// Appends the next workspace (its members are sorted by membership uuid here).
    pub fn push(&mut self, workspace: &DirectoryWorkspace) {
        if !self.empty {
            self.hasher.raw(",");
        }
        self.empty = false;
        let mut members: Vec<&DirectoryMember> = workspace.members.iter().collect();
        members.sort_by(|a, b| a.membership_uuid.cmp(&b.membership_uuid));
        let sorted = SortedWorkspace {
            uuid: &workspace.uuid,
            name: &workspace.name,
            slug: &workspace.slug,
            workspace_type: &workspace.workspace_type,
            status: workspace.status,
            created_by_account_uuid: &workspace.created_by_account_uuid,
            projection_revision: workspace.projection_revision,
            execution_generation: workspace.execution_generation,
            members,
        };
        // Serializing plain data structs cannot fail.
        self.hasher
            .value(&serde_json::to_value(sorted).unwrap_or(Value::Null));
    }

    /// The fingerprint of the workspaces pushed.
    pub fn finish(mut self) -> Fingerprint {
        self.hasher.raw("]}");
        self.hasher.finish()
    }
}

/// Fingerprint of an event as received (every field, canonical form); the inbox compares it
/// when an event uuid is seen again.
pub fn event_fingerprint(event: &DirectoryEvent) -> Fingerprint {
    fingerprint_json(&serde_json::to_value(event).unwrap_or(Value::Null))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    #[test]
    fn snapshot_fingerprint_ignores_order_cursor_and_time() {
        let a = snapshot(
            5,
            vec![
                workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
                workspace("ws-2", 1, &[]),
            ],
        );
        let mut b = a.clone();
        b.workspaces.reverse();
        b.workspaces[1].members.reverse();
        b.cursor = 6;
        b.generated_at = at(99);
        assert_eq!(snapshot_fingerprint(&a), snapshot_fingerprint(&b));
        let mut c = a.clone();
        c.workspaces[0].name = "renamed".into();
        assert_ne!(snapshot_fingerprint(&a), snapshot_fingerprint(&c));
        assert_ne!(snapshot_fingerprint(&a), incremental_marker());
    }

    #[test]
    fn snapshot_fingerprint_hashed_in_parts_equals_the_whole_value() {
        let s = snapshot(
            5,
            vec![
                workspace("ws-2", 1, &[("b", 1), ("a", 2)]),
                workspace("ws-1", 1, &[]),
            ],
        );
        let mut workspaces = s.workspaces.clone();
        workspaces.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        for w in &mut workspaces {
            w.members
                .sort_by(|a, b| a.membership_uuid.cmp(&b.membership_uuid));
        }
        let whole = serde_json::json!({
            "instance_uuid": s.instance_uuid,
            "workspaces": workspaces,
        });
        assert_eq!(snapshot_fingerprint(&s), fingerprint_json(&whole));
    }

    #[test]
    fn the_lent_workspace_serializes_as_the_model() {
        let mut w = workspace("ws-1", 3, &[("b", 1), ("a", 2)]);
        w.workspace_type = "personal".into();
        w.members[0].joined_at = None;
        let mut members: Vec<&DirectoryMember> = w.members.iter().collect();
        members.sort_by(|a, b| a.membership_uuid.cmp(&b.membership_uuid));
        let lent = SortedWorkspace {
            uuid: &w.uuid,
            name: &w.name,
            slug: &w.slug,
            workspace_type: &w.workspace_type,
            status: w.status,
            created_by_account_uuid: &w.created_by_account_uuid,
            projection_revision: w.projection_revision,
            execution_generation: w.execution_generation,
            members,
        };
        let mut owned = w.clone();
        owned
            .members
            .sort_by(|a, b| a.membership_uuid.cmp(&b.membership_uuid));
        assert_eq!(
            serde_json::to_value(&lent).unwrap(),
            serde_json::to_value(&owned).unwrap()
        );
    }

    #[test]
    fn fingerprints_are_stable() {
        // A change here changes every stored fingerprint: review it as a format change.
        let s = snapshot(5, vec![workspace("ws-1", 1, &[("a", 1), ("b", 2)])]);
        insta::assert_snapshot!("snapshot_fingerprint", snapshot_fingerprint(&s).as_str());
        insta::assert_snapshot!(
            "event_fingerprint",
            event_fingerprint(&dir_event("e-1", 1, "ws-1", 2)).as_str()
        );
        insta::assert_snapshot!("incremental_marker", incremental_marker().as_str());
    }

    #[test]
    fn event_fingerprint_covers_every_field() {
        let e = dir_event("e-1", 1, "ws-1", 2);
        let mut other = e.clone();
        other.cursor = 2;
        assert_ne!(event_fingerprint(&e), event_fingerprint(&other));
        assert_eq!(event_fingerprint(&e), event_fingerprint(&e.clone()));
    }
}
