//! Rows of the projected tables as the platform persists them, and an in-memory table set of
//! them (selecting and writing planned rows into it is the reference store transaction in
//! [`crate::memory`]; the SQL adapter does the same with queries and upserts).
//!
//! This module depends on no planner: [`crate::plan`] reads these rows, never the reverse.
//!
//! Ownership is explicit: [`RowSource::Local`] rows (accounts, workspaces, execution state)
//! were created by the platform and the projection refuses to take them over; a membership at
//! `projection_revision == 0` belongs to the platform and the projection never overwrites it.
//! Timestamps have millisecond precision (both databases store Unix milliseconds).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tenantry_kernel::Fingerprint;

use crate::ids::{AccountUuid, EventUuid, InstanceUuid, MembershipUuid, WorkspaceUuid};
use crate::maps::{
    AccountStatus, ExecutionStatus, MembershipRole, MembershipStatus, RowSource, WorkspaceStatus,
};

/// Truncates a timestamp to whole milliseconds (the stored precision).
pub fn to_millis(value: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(value.timestamp_millis()).unwrap_or(value)
}

/// A row of `accounts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountRow {
    /// Primary key.
    pub uuid: AccountUuid,
    /// Unique across all accounts, local and projected.
    pub normalized_email: String,
    /// Display name.
    pub display_name: String,
    /// Platform account status.
    pub status: AccountStatus,
    /// Who owns the row.
    pub source: RowSource,
    /// Directory cursor of the last change of this account's own projection (0 for local rows).
    pub projection_revision: i64,
}

/// A row of `workspaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceRow {
    /// Primary key.
    pub uuid: WorkspaceUuid,
    /// Who owns the row.
    pub source: RowSource,
    /// The instance that projects it (`None` for local workspaces).
    pub instance_uuid: Option<InstanceUuid>,
    /// Display name.
    pub name: String,
    /// URL slug.
    pub slug: String,
    /// Workspace type, as the directory sent it.
    pub workspace_type: String,
    /// Status.
    pub status: WorkspaceStatus,
    /// Creator, when projected.
    pub created_by_account_uuid: Option<AccountUuid>,
    /// Directory revision.
    pub projection_revision: i64,
}

/// A row of `workspace_memberships`; unique per `(workspace_uuid, account_uuid)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipRow {
    /// Primary key.
    pub uuid: MembershipUuid,
    /// The workspace.
    pub workspace_uuid: WorkspaceUuid,
    /// The account.
    pub account_uuid: AccountUuid,
    /// Platform role.
    pub role: MembershipRole,
    /// Platform status.
    pub status: MembershipStatus,
    /// When the account joined (milliseconds).
    pub joined_at: Option<DateTime<Utc>>,
    /// Directory revision; 0 means the platform owns this membership.
    pub projection_revision: i64,
}

/// A row of `workspace_execution_state`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionRow {
    /// Primary key (one row per workspace).
    pub workspace_uuid: WorkspaceUuid,
    /// Who owns the row.
    pub source: RowSource,
    /// The instance that projects it (`None` for local rows).
    pub instance_uuid: Option<InstanceUuid>,
    /// Active execution generation; never decreases.
    pub active_generation: i64,
    /// Desired state.
    pub state: ExecutionStatus,
    /// Writes are refused while true (`!active`).
    pub write_fenced: bool,
    /// Workspace revision the desired state comes from; never decreases.
    pub desired_state_revision: i64,
}

/// The row of `directory_projection_state` shared by every replica of one instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectionState {
    /// Primary key.
    pub instance_uuid: InstanceUuid,
    /// Shared projection cursor (high-water mark of what was applied).
    pub cursor: i64,
    /// Cursor of the last full snapshot; events at or below it need no receipt.
    pub snapshot_coverage_cursor: i64,
    /// Fingerprint of the last snapshot, or the incremental marker after a delta.
    pub snapshot_fingerprint: Fingerprint,
    /// When a replica last applied or confirmed the projection.
    pub last_applied_at: DateTime<Utc>,
    /// `last_applied_at + max_staleness`.
    pub lease_expires_at: DateTime<Utc>,
}

/// A row of `directory_projection_inbox`: the receipt of one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxReceipt {
    /// The instance.
    pub instance_uuid: InstanceUuid,
    /// The event (unique per instance).
    pub event_uuid: EventUuid,
    /// The event's cursor.
    pub cursor: i64,
    /// The event's type.
    pub event_type: String,
    /// The event's revision.
    pub revision: i64,
    /// Fingerprint of the event as received.
    pub fingerprint: Fingerprint,
    /// When first received, on the store's clock (the database's: the store stamps it in the
    /// apply's transaction, [`ProjectionWrite::stamp_new_receipts`](crate::ProjectionWrite::stamp_new_receipts)),
    /// so retention's cut-off and this time share one clock whatever a replica's wall clock
    /// reads.
    pub received_at: DateTime<Utc>,
    /// When its batch was last applied.
    pub applied_at: Option<DateTime<Utc>>,
}

/// Every projected table, keyed by primary key: what the fake store holds, and what a dump of
/// the SQL store returns for before/after comparisons.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectionTables {
    /// `accounts`.
    pub accounts: BTreeMap<AccountUuid, AccountRow>,
    /// `workspaces`.
    pub workspaces: BTreeMap<WorkspaceUuid, WorkspaceRow>,
    /// `workspace_memberships`.
    pub memberships: BTreeMap<MembershipUuid, MembershipRow>,
    /// `workspace_execution_state`.
    pub executions: BTreeMap<WorkspaceUuid, ExecutionRow>,
    /// `directory_projection_state`.
    pub states: BTreeMap<InstanceUuid, ProjectionState>,
    /// `directory_projection_inbox`.
    pub receipts: BTreeMap<(InstanceUuid, EventUuid), InboxReceipt>,
}

/// Rows a planner reads, selected by the lookup keys the planner asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExistingRows {
    /// Accounts whose uuid or email is among the keys.
    pub accounts: Vec<AccountRow>,
    /// Workspaces among the keys, plus (for snapshots) every projected workspace of the
    /// instance that [`needs_absent_fence`].
    pub workspaces: Vec<WorkspaceRow>,
    /// Memberships of those workspaces, plus memberships whose uuid is among the keys.
    pub memberships: Vec<MembershipRow>,
    /// Execution state of those workspaces.
    pub executions: Vec<ExecutionRow>,
    /// Receipts of the instance whose event uuid is among the keys.
    pub receipts: Vec<InboxReceipt>,
}

/// Whether a snapshot that omits `workspace` must archive and fence it: a workspace projected
/// by `instance` that is not yet archived or deleted, or whose execution is still active or
/// not write-fenced.
pub fn needs_absent_fence(
    workspace: &WorkspaceRow,
    execution: Option<&ExecutionRow>,
    instance: &InstanceUuid,
) -> bool {
    workspace.source == RowSource::Directory
        && workspace.instance_uuid.as_ref() == Some(instance)
        && (!matches!(
            workspace.status,
            WorkspaceStatus::Archived | WorkspaceStatus::Deleted
        ) || execution.is_some_and(|e| e.state == ExecutionStatus::Active || !e.write_fenced))
}

/// Whether `workspace` counts against `max_active_workspaces` of `instance`.
pub fn is_active_projected(workspace: &WorkspaceRow, instance: &InstanceUuid) -> bool {
    workspace.source == RowSource::Directory
        && workspace.instance_uuid.as_ref() == Some(instance)
        && workspace.status == WorkspaceStatus::Active
}

impl ProjectionTables {
    /// Active projected workspaces of `instance` (the committed capacity check).
    pub fn count_active(&self, instance: &InstanceUuid) -> u64 {
        self.workspaces
            .values()
            .filter(|w| is_active_projected(w, instance))
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::*;

    #[test]
    fn rows_serialize_in_stable_shape() {
        let membership = MembershipRow {
            uuid: m_id("m-1"),
            workspace_uuid: ws_id("ws-1"),
            account_uuid: acc_id("acc-1"),
            role: MembershipRole::Developer,
            status: MembershipStatus::Active,
            joined_at: Some(at(0)),
            projection_revision: 3,
        };
        insta::assert_json_snapshot!("membership_row", membership);
        let state = ProjectionState {
            instance_uuid: instance(),
            cursor: 9,
            snapshot_coverage_cursor: 7,
            snapshot_fingerprint: crate::fingerprint::incremental_marker(),
            last_applied_at: at(1),
            lease_expires_at: at(61),
        };
        insta::assert_json_snapshot!("projection_state_row", state);
        let back: ProjectionState =
            serde_json::from_value(serde_json::to_value(&state).unwrap()).unwrap();
        assert_eq!(back, state);
    }

    #[test]
    fn absent_fence_predicate() {
        let inst = instance();
        let mut ws = WorkspaceRow {
            uuid: ws_id("ws-1"),
            source: RowSource::Directory,
            instance_uuid: Some(inst.clone()),
            name: "n".into(),
            slug: "s".into(),
            workspace_type: "team".into(),
            status: WorkspaceStatus::Active,
            created_by_account_uuid: None,
            projection_revision: 1,
        };
        let fenced = ExecutionRow {
            workspace_uuid: ws_id("ws-1"),
            source: RowSource::Directory,
            instance_uuid: Some(inst.clone()),
            active_generation: 1,
            state: ExecutionStatus::Inactive,
            write_fenced: true,
            desired_state_revision: 1,
        };
        let open = ExecutionRow {
            write_fenced: false,
            ..fenced.clone()
        };
        assert!(needs_absent_fence(&ws, None, &inst));
        ws.status = WorkspaceStatus::Archived;
        assert!(!needs_absent_fence(&ws, None, &inst));
        assert!(!needs_absent_fence(&ws, Some(&fenced), &inst));
        assert!(needs_absent_fence(&ws, Some(&open), &inst));
        ws.status = WorkspaceStatus::Suspended;
        ws.source = RowSource::Local;
        assert!(!needs_absent_fence(&ws, None, &inst));
        ws.source = RowSource::Directory;
        ws.instance_uuid = Some(InstanceUuid::parse("other").unwrap());
        assert!(!needs_absent_fence(&ws, None, &inst));
    }
}
