//! Wire models of Directory API v1, as the provider sends them (after signature verification).
//!
//! - [`DirectorySnapshot`]: `GET /v1/instances/{instance_uuid}/directory/snapshot`;
//! - [`DirectoryEventBatch`]: `GET /v1/instances/{instance_uuid}/directory/events?after=&limit=`;
//! - [`DirectoryDelta`]: `POST /v1/instances/{instance_uuid}/directory/workspaces`.
//!
//! Parsing with serde enforces identifier syntax and the role / status vocabularies; the
//! rules that relate fields to each other live in [`crate::batch`] and [`crate::plan`].
//! Cursors and revisions are signed 64-bit integers because both databases store `BIGINT`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::ids::{AccountUuid, EventUuid, InstanceUuid, MembershipUuid, WorkspaceUuid};
use crate::maps::{
    DirectoryAccountStatus, DirectoryMembershipStatus, DirectoryRole, WorkspaceStatus,
};

/// A full, authoritative copy of one instance's directory at `cursor`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectorySnapshot {
    /// The instance this snapshot is for.
    pub instance_uuid: InstanceUuid,
    /// Event-stream position the snapshot covers (everything up to and including it).
    pub cursor: i64,
    /// When the provider produced it (informational; not part of the fingerprint).
    pub generated_at: DateTime<Utc>,
    /// Every workspace of the instance.
    pub workspaces: Vec<DirectoryWorkspace>,
}

/// One page of a paged snapshot: `GET …/directory/snapshot?page_size=N` answers the first,
/// `?page_token=T` the next (a Tenantry extension of the reference protocol; `docs/protocol.md`,
/// "Paged snapshots"). A provider that does not page answers one [`DirectorySnapshot`], which
/// parses as a page without [`page`](Self::page).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectorySnapshotPage {
    /// The instance the snapshot is for (the same on every page).
    pub instance_uuid: InstanceUuid,
    /// Event-stream position the whole snapshot covers (the same on every page).
    pub cursor: i64,
    /// When the provider produced the snapshot (informational).
    pub generated_at: DateTime<Utc>,
    /// This page's workspaces, whole, in ascending uuid order; every uuid is above the last of
    /// the previous page.
    pub workspaces: Vec<DirectoryWorkspace>,
    /// How the page links to its neighbours; absent when the answer is the whole snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<SnapshotPageLink>,
}

/// The links of a [`DirectorySnapshotPage`].
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPageLink {
    /// SHA-256 of the previous page's body as sent, lowercase hex (64 digits); `null` on the
    /// first page. It chains the pages: a stale or replayed page does not match.
    #[serde(default)]
    pub previous_page_digest: Option<String>,
    /// Opaque token of the next page (`?page_token=`); `null` on the last page.
    #[serde(default)]
    pub next_page_token: Option<String>,
}

/// One workspace with its members.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryWorkspace {
    /// Workspace identity.
    pub uuid: WorkspaceUuid,
    /// Display name.
    pub name: String,
    /// URL slug.
    pub slug: String,
    /// Workspace type (provider vocabulary, e.g. `personal`, `team`); stored as sent.
    #[serde(rename = "type")]
    pub workspace_type: String,
    /// Lifecycle status.
    pub status: WorkspaceStatus,
    /// The account that created it; must be a projected member when the workspace is active.
    pub created_by_account_uuid: AccountUuid,
    /// Monotonic revision of this workspace in the directory.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub projection_revision: i64,
    /// Execution generation (monotonic; a new generation retires older runtimes).
    pub execution_generation: i64,
    /// Members of the workspace.
    pub members: Vec<DirectoryMember>,
}

/// One member of a workspace: the membership and the account it belongs to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryMember {
    /// Membership identity (stable for one account in one workspace).
    pub membership_uuid: MembershipUuid,
    /// Account identity.
    pub account_uuid: AccountUuid,
    /// The account's email, already normalized (trimmed, lowercase) by the directory.
    pub normalized_email: String,
    /// The account's display name.
    pub display_name: String,
    /// Account status.
    pub account_status: DirectoryAccountStatus,
    /// Role in the workspace.
    pub role: DirectoryRole,
    /// Membership status.
    pub membership_status: DirectoryMembershipStatus,
    /// When the account joined, if known.
    #[serde(default)]
    pub joined_at: Option<DateTime<Utc>>,
    /// Monotonic revision of the membership; at least 1 (0 marks platform-owned rows).
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub projection_revision: i64,
}

/// One page of the directory event stream: the events in `(after_cursor, cursor]`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryEventBatch {
    /// The instance the page is for.
    pub instance_uuid: InstanceUuid,
    /// The `after` cursor the page answers.
    pub after_cursor: i64,
    /// The cursor after the last event of the page.
    pub cursor: i64,
    /// The newest cursor the provider knows (the page is the last one when `cursor` equals it).
    pub high_water_cursor: i64,
    /// Events in cursor order.
    pub events: Vec<DirectoryEvent>,
}

/// One event of the stream.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryEvent {
    /// Event identity (the inbox key).
    pub uuid: EventUuid,
    /// Position in the stream.
    pub cursor: i64,
    /// `directory.changed` or `entitlement.changed`; anything else is refused by batch validation.
    pub event_type: String,
    /// The workspace the event is about.
    pub aggregate_uuid: WorkspaceUuid,
    /// The aggregate's revision after the event.
    pub revision: i64,
    /// Event payload; must name `workspace_uuid` and the revision (`directory_revision` or
    /// `entitlement_revision`) again.
    pub payload: Map<String, Value>,
}

/// The current state of the workspaces named by directory events.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectoryDelta {
    /// The instance the delta is for.
    pub instance_uuid: InstanceUuid,
    /// When the provider produced it.
    pub generated_at: DateTime<Utc>,
    /// The workspaces that were asked for (sorted); a requested workspace missing from
    /// `workspaces` no longer exists and is tombstoned.
    pub requested_workspace_uuids: Vec<WorkspaceUuid>,
    /// The requested workspaces that still exist.
    pub workspaces: Vec<DirectoryWorkspace>,
}

/// Request body of `POST .../directory/workspaces`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspacesRequest {
    /// The workspaces to fetch, sorted and without duplicates.
    pub workspace_uuids: Vec<WorkspaceUuid>,
}

/// The two event types of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A workspace, its members or their accounts changed: fetch a delta.
    DirectoryChanged,
    /// A workspace's entitlements changed: the adapter refreshes its cache; only the cursor moves.
    EntitlementChanged,
}

impl EventKind {
    /// Wire name of `directory.changed`.
    pub const DIRECTORY_CHANGED: &'static str = "directory.changed";
    /// Wire name of `entitlement.changed`.
    pub const ENTITLEMENT_CHANGED: &'static str = "entitlement.changed";

    /// Parses a wire event type; `None` for an unsupported one.
    pub fn parse(event_type: &str) -> Option<Self> {
        match event_type {
            Self::DIRECTORY_CHANGED => Some(Self::DirectoryChanged),
            Self::ENTITLEMENT_CHANGED => Some(Self::EntitlementChanged),
            _ => None,
        }
    }

    /// The payload key that must repeat the event revision.
    pub fn revision_key(self) -> &'static str {
        match self {
            Self::DirectoryChanged => "directory_revision",
            Self::EntitlementChanged => "entitlement_revision",
        }
    }
}

impl DirectoryEvent {
    /// The event's kind, `None` when its type is unsupported.
    pub fn kind(&self) -> Option<EventKind> {
        EventKind::parse(&self.event_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn sample_snapshot_json() -> Value {
        json!({
            "instance_uuid": "inst-1",
            "cursor": 7,
            "generated_at": "2026-01-02T03:04:05Z",
            "workspaces": [{
                "uuid": "ws-1",
                "name": "Acme",
                "slug": "acme",
                "type": "team",
                "status": "active",
                "created_by_account_uuid": "acc-1",
                "projection_revision": 3,
                "execution_generation": 2,
                "members": [{
                    "membership_uuid": "m-1",
                    "account_uuid": "acc-1",
                    "normalized_email": "ada@example.com",
                    "display_name": "Ada",
                    "account_status": "active",
                    "role": "owner",
                    "membership_status": "active",
                    "joined_at": "2025-12-31T23:59:59.123Z",
                    "projection_revision": 3
                }]
            }]
        })
    }

    #[test]
    fn snapshot_round_trips_with_wire_names() {
        let snapshot: DirectorySnapshot = serde_json::from_value(sample_snapshot_json()).unwrap();
        assert_eq!(snapshot.workspaces[0].workspace_type, "team");
        insta::assert_json_snapshot!("snapshot_wire", snapshot);
        let again: DirectorySnapshot =
            serde_json::from_value(serde_json::to_value(&snapshot).unwrap()).unwrap();
        assert_eq!(again, snapshot);
    }

    #[test]
    fn event_batch_and_delta_round_trip() {
        let batch: DirectoryEventBatch = serde_json::from_value(json!({
            "instance_uuid": "inst-1",
            "after_cursor": 7,
            "cursor": 9,
            "high_water_cursor": 9,
            "events": [
                {"uuid": "e-8", "cursor": 8, "event_type": "directory.changed",
                 "aggregate_uuid": "ws-1", "revision": 4,
                 "payload": {"workspace_uuid": "ws-1", "directory_revision": 4}},
                {"uuid": "e-9", "cursor": 9, "event_type": "entitlement.changed",
                 "aggregate_uuid": "ws-1", "revision": 2,
                 "payload": {"workspace_uuid": "ws-1", "entitlement_revision": 2}}
            ]
        }))
        .unwrap();
        insta::assert_json_snapshot!("event_batch_wire", batch);
        assert_eq!(batch.events[0].kind(), Some(EventKind::DirectoryChanged));
        let delta: DirectoryDelta = serde_json::from_value(json!({
            "instance_uuid": "inst-1",
            "generated_at": "2026-01-02T03:04:05Z",
            "requested_workspace_uuids": ["ws-1", "ws-2"],
            "workspaces": []
        }))
        .unwrap();
        insta::assert_json_snapshot!("delta_wire", delta);
        let again: DirectoryDelta =
            serde_json::from_value(serde_json::to_value(&delta).unwrap()).unwrap();
        assert_eq!(again, delta);
    }

    #[test]
    fn unknown_vocabulary_is_refused_at_parse() {
        let mut value = sample_snapshot_json();
        value["workspaces"][0]["members"][0]["role"] = json!("superuser");
        assert!(serde_json::from_value::<DirectorySnapshot>(value).is_err());
        let mut value = sample_snapshot_json();
        value["workspaces"][0]["status"] = json!("frozen");
        assert!(serde_json::from_value::<DirectorySnapshot>(value).is_err());
        let mut value = sample_snapshot_json();
        value["workspaces"][0]["uuid"] = json!("");
        assert!(serde_json::from_value::<DirectorySnapshot>(value).is_err());
    }
}
