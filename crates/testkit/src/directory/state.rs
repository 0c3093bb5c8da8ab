//! The in-memory directory of one instance: workspaces with members, the event stream, and
//! the answers of the three routes (snapshot, events page, delta).
//!
//! Every change a test makes appends the event Directory API v1 would emit, with revisions
//! that satisfy the projection's rules: workspace and membership revisions only rise, a
//! `directory.changed` event carries the workspace's new revision (a removal one above the
//! last), and a delta's workspace is never older than the event that named it.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use tenantry_directory::maps::WorkspaceStatus;
use tenantry_directory::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectoryMember, DirectorySnapshot,
    DirectoryWorkspace, EventUuid, InstanceUuid, MembershipUuid, WorkspaceUuid,
};

/// Most events one page may hold (the client's `limit` is capped to it).
pub const MAX_PAGE: u32 = 100;

/// The directory of one instance.
#[derive(Debug)]
pub struct DirectoryModel {
    instance: InstanceUuid,
    workspaces: BTreeMap<WorkspaceUuid, DirectoryWorkspace>,
    /// Highest revision each workspace ever had (kept after removal).
    revisions: BTreeMap<WorkspaceUuid, i64>,
    entitlement_revisions: BTreeMap<WorkspaceUuid, i64>,
    events: Vec<DirectoryEvent>,
}

impl DirectoryModel {
    /// An empty directory at cursor 0.
    pub fn new(instance: InstanceUuid) -> Self {
        Self {
            instance,
            workspaces: BTreeMap::new(),
            revisions: BTreeMap::new(),
            entitlement_revisions: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    /// The instance.
    pub fn instance(&self) -> &InstanceUuid {
        &self.instance
    }

    /// The newest cursor (0 before any event).
    pub fn cursor(&self) -> i64 {
        self.events.last().map_or(0, |e| e.cursor)
    }

    /// Current workspaces.
    pub fn workspaces(&self) -> Vec<DirectoryWorkspace> {
        self.workspaces.values().cloned().collect()
    }

    /// Adds or replaces a workspace. Its revision becomes at least one above any revision it
    /// had; members without a revision get the workspace's. Emits `directory.changed`.
    pub fn upsert_workspace(&mut self, mut workspace: DirectoryWorkspace) -> i64 {
        let floor = self.revisions.get(&workspace.uuid).map_or(1, |r| r + 1);
        workspace.projection_revision = workspace.projection_revision.max(floor);
        for member in &mut workspace.members {
            member.projection_revision = member.projection_revision.max(1);
        }
        self.store(workspace)
    }

    /// Adds or replaces a member (by account) of an existing workspace, bumping the
    /// workspace's revision; the member's revision becomes the workspace's new revision.
    /// Returns the new revision, or `None` when the workspace does not exist.
    pub fn upsert_member(
        &mut self,
        workspace: &WorkspaceUuid,
        mut member: DirectoryMember,
    ) -> Option<i64> {
        let mut ws = self.workspaces.get(workspace)?.clone();
        let revision = ws.projection_revision + 1;
        ws.projection_revision = revision;
        member.projection_revision = revision;
        ws.members.retain(|m| m.account_uuid != member.account_uuid);
        ws.members.push(member);
        Some(self.store(ws))
    }

    /// Changes only a workspace's status (suspend, archive, delete, reactivate): the
    /// workspace's revision rises by one, every member keeps its own revision and fields, as
    /// a directory does when the workspace, not the membership, changed (the projection must
    /// then re-derive the members' status without a membership revision). Emits `directory.changed`; `None`
    /// when the workspace does not exist.
    pub fn set_workspace_status(
        &mut self,
        workspace: &WorkspaceUuid,
        status: WorkspaceStatus,
    ) -> Option<i64> {
        let mut ws = self.workspaces.get(workspace)?.clone();
        ws.projection_revision += 1;
        ws.status = status;
        Some(self.store(ws))
    }

    /// Removes a membership, bumping the workspace's revision; `None` when the workspace does
    /// not exist.
    pub fn remove_member(
        &mut self,
        workspace: &WorkspaceUuid,
        membership: &MembershipUuid,
    ) -> Option<i64> {
        let mut ws = self.workspaces.get(workspace)?.clone();
        ws.projection_revision += 1;
        ws.members.retain(|m| m.membership_uuid != *membership);
        Some(self.store(ws))
    }

    /// Removes a workspace (the delta then omits it: a tombstone). Emits `directory.changed`
    /// one revision above its last; `None` when it does not exist.
    pub fn remove_workspace(&mut self, workspace: &WorkspaceUuid) -> Option<i64> {
        let removed = self.workspaces.remove(workspace)?;
        let revision = removed.projection_revision + 1;
        self.revisions.insert(workspace.clone(), revision);
        self.emit(
            "directory.changed",
            workspace,
            "directory_revision",
            revision,
        );
        Some(revision)
    }

    /// Emits `entitlement.changed` for a workspace with its next entitlement revision.
    pub fn entitlement_changed(&mut self, workspace: &WorkspaceUuid) -> i64 {
        let revision = self
            .entitlement_revisions
            .entry(workspace.clone())
            .and_modify(|r| *r += 1)
            .or_insert(1);
        let revision = *revision;
        self.emit(
            "entitlement.changed",
            workspace,
            "entitlement_revision",
            revision,
        );
        revision
    }

    /// The full snapshot at the current cursor.
    pub fn snapshot(&self, now: DateTime<Utc>) -> DirectorySnapshot {
        DirectorySnapshot {
            instance_uuid: self.instance.clone(),
            cursor: self.cursor(),
            generated_at: now,
            workspaces: self.workspaces(),
        }
    }

    /// The events in `(after, ...]`, at most `limit` (capped to [`MAX_PAGE`], at least 1).
    pub fn events(&self, after: i64, limit: u32) -> DirectoryEventBatch {
        let limit = usize::try_from(limit.clamp(1, MAX_PAGE)).unwrap_or(1);
        let events: Vec<DirectoryEvent> = self
            .events
            .iter()
            .filter(|e| e.cursor > after)
            .take(limit)
            .cloned()
            .collect();
        let high_water = self.cursor();
        DirectoryEventBatch {
            instance_uuid: self.instance.clone(),
            after_cursor: after,
            cursor: events
                .last()
                .map_or(after.min(high_water).max(after), |e| e.cursor),
            high_water_cursor: high_water.max(after),
            events,
        }
    }

    /// The current state of the requested workspaces (sorted, deduplicated); missing ones are
    /// omitted (tombstones).
    pub fn delta(&self, requested: &[WorkspaceUuid], now: DateTime<Utc>) -> DirectoryDelta {
        let mut requested = requested.to_vec();
        requested.sort();
        requested.dedup();
        let workspaces = requested
            .iter()
            .filter_map(|u| self.workspaces.get(u).cloned())
            .collect();
        DirectoryDelta {
            instance_uuid: self.instance.clone(),
            generated_at: now,
            requested_workspace_uuids: requested,
            workspaces,
        }
    }

    fn store(&mut self, workspace: DirectoryWorkspace) -> i64 {
        let revision = workspace.projection_revision;
        let uuid = workspace.uuid.clone();
        self.revisions.insert(uuid.clone(), revision);
        self.workspaces.insert(uuid.clone(), workspace);
        self.emit("directory.changed", &uuid, "directory_revision", revision);
        revision
    }

    fn emit(&mut self, event_type: &str, workspace: &WorkspaceUuid, field: &str, revision: i64) {
        let cursor = self.cursor() + 1;
        let mut payload = Map::new();
        payload.insert("workspace_uuid".into(), json!(workspace.as_str()));
        payload.insert(field.into(), Value::from(revision));
        // The event id is derived from the instance and cursor: unique and deterministic.
        let Ok(uuid) = EventUuid::parse(format!("evt-{}-{cursor:08}", self.instance)) else {
            return;
        };
        self.events.push(DirectoryEvent {
            uuid,
            cursor,
            event_type: event_type.to_owned(),
            aggregate_uuid: workspace.clone(),
            revision,
            payload,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantry_directory::batch::{validate_batch, validate_delta};
    use tenantry_directory::testing as fixtures;

    fn ws(uuid: &str) -> DirectoryWorkspace {
        fixtures::workspace(uuid, 1, &[("acc-1", 1)])
    }

    #[test]
    fn changes_emit_valid_batches_and_deltas() {
        let instance = InstanceUuid::parse("inst-1").unwrap();
        let mut m = DirectoryModel::new(instance.clone());
        m.upsert_workspace(ws("ws-1"));
        m.upsert_workspace(ws("ws-2"));
        let ws1 = WorkspaceUuid::parse("ws-1").unwrap();
        m.entitlement_changed(&ws1);
        m.remove_workspace(&WorkspaceUuid::parse("ws-2").unwrap());
        assert_eq!(m.cursor(), 4);
        let page = m.events(0, 3);
        assert_eq!(
            (page.after_cursor, page.cursor, page.high_water_cursor),
            (0, 3, 4)
        );
        validate_batch(&page, &instance, 0).unwrap();
        let rest = m.events(3, 100);
        validate_batch(&rest, &instance, 3).unwrap();
        assert_eq!(rest.events.len(), 1);
        let now = DateTime::from_timestamp(0, 0).unwrap();
        let all = m.events(0, 100);
        let requested: Vec<_> = tenantry_directory::batch::directory_event_revisions(&all.events)
            .into_keys()
            .collect();
        let delta = m.delta(&requested, now);
        validate_delta(&delta, &all, &instance).unwrap();
        assert_eq!(delta.workspaces.len(), 1, "ws-2 is a tombstone");
        let empty = m.events(4, 10);
        assert_eq!((empty.cursor, empty.events.len()), (4, 0));
    }

    #[test]
    fn status_change_keeps_member_revisions() {
        let mut m = DirectoryModel::new(InstanceUuid::parse("i").unwrap());
        let uuid = WorkspaceUuid::parse("ws-1").unwrap();
        let r1 = m.upsert_workspace(fixtures::workspace("ws-1", 40, &[("acc-1", 40)]));
        let r2 = m
            .set_workspace_status(&uuid, WorkspaceStatus::Suspended)
            .unwrap();
        assert_eq!(r2, r1 + 1);
        let ws = &m.workspaces()[0];
        assert_eq!(ws.status, WorkspaceStatus::Suspended);
        assert_eq!(ws.members[0].projection_revision, 40, "member untouched");
        let page = m.events(1, 10);
        assert_eq!(page.events.len(), 1);
        assert_eq!(page.events[0].revision, r2);
        assert_eq!(
            m.set_workspace_status(
                &WorkspaceUuid::parse("nope").unwrap(),
                WorkspaceStatus::Active
            ),
            None
        );
    }

    #[test]
    fn revisions_only_rise() {
        let mut m = DirectoryModel::new(InstanceUuid::parse("i").unwrap());
        let r1 = m.upsert_workspace(ws("ws-1"));
        let uuid = WorkspaceUuid::parse("ws-1").unwrap();
        let r2 = m.upsert_workspace(ws("ws-1"));
        let r3 = m.remove_workspace(&uuid).unwrap();
        let r4 = m.upsert_workspace(ws("ws-1"));
        assert!(r1 < r2 && r2 < r3 && r3 < r4, "{r1} {r2} {r3} {r4}");
        let member = m.workspaces()[0].members[0].clone();
        let r5 = m.upsert_member(&uuid, member.clone()).unwrap();
        assert_eq!(m.workspaces()[0].members.len(), 1, "replaced by account");
        assert_eq!(m.workspaces()[0].members[0].projection_revision, r5);
        let r6 = m.remove_member(&uuid, &member.membership_uuid).unwrap();
        assert!(r5 < r6);
        assert!(m.workspaces()[0].members.is_empty());
    }
}
