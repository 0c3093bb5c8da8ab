//! Builders of directory answers for tests (feature `testing`, and this crate's own tests).
//!
//! Conventions: the instance is `inst-1`; a member of account `a` in workspace `w` has
//! membership uuid `m-a-w`, email `a@example.com`, display name `A a`; timestamps are fixed.
#![allow(clippy::expect_used)]

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Map, json};

use crate::config::{ProjectionLimits, ProjectorConfig};
use crate::ids::{AccountUuid, EventUuid, InstanceUuid, MembershipUuid, WorkspaceUuid};
use crate::maps::{
    DirectoryAccountStatus, DirectoryMembershipStatus, DirectoryRole, WorkspaceStatus,
};
use crate::model::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectoryMember, DirectorySnapshot,
    DirectoryWorkspace, EventKind,
};

/// The instance every builder uses.
pub const INSTANCE: &str = "inst-1";

/// A projector configuration for `inst-1`: sync every 5 s, 60 s maximum staleness, 50 events
/// a page, default limits.
pub fn projector_config() -> ProjectorConfig {
    ProjectorConfig::new(
        INSTANCE,
        Duration::from_secs(5),
        Duration::from_secs(60),
        50,
        ProjectionLimits::default(),
    )
    .expect("valid literal configuration")
}

/// `inst-1`.
pub fn instance() -> InstanceUuid {
    InstanceUuid::parse(INSTANCE).expect("valid literal")
}

/// A workspace uuid.
pub fn ws_id(uuid: &str) -> WorkspaceUuid {
    WorkspaceUuid::parse(uuid).expect("valid test workspace uuid")
}

/// An account uuid.
pub fn acc_id(uuid: &str) -> AccountUuid {
    AccountUuid::parse(uuid).expect("valid test account uuid")
}

/// A membership uuid.
pub fn m_id(uuid: &str) -> MembershipUuid {
    MembershipUuid::parse(uuid).expect("valid test membership uuid")
}

/// A fixed point in time, `2026-01-01T00:00:00Z` plus `secs`.
pub fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_767_225_600 + secs, 0)
        .single()
        .expect("valid fixed timestamp")
}

/// An active member of `workspace` with account `account` at `revision`.
pub fn member(workspace: &str, account: &str, revision: i64) -> DirectoryMember {
    DirectoryMember {
        membership_uuid: m_id(&format!("m-{account}-{workspace}")),
        account_uuid: acc_id(account),
        normalized_email: format!("{account}@example.com"),
        display_name: format!("A {account}"),
        account_status: DirectoryAccountStatus::Active,
        role: DirectoryRole::Member,
        membership_status: DirectoryMembershipStatus::Active,
        joined_at: Some(at(0)),
        projection_revision: revision,
    }
}

/// An active workspace at `revision` whose members are `(account, membership revision)`; the
/// first member (or `acc-0` when there is none) is the creator; execution generation 1.
pub fn workspace(uuid: &str, revision: i64, members: &[(&str, i64)]) -> DirectoryWorkspace {
    let creator = members.first().map_or("acc-0", |(a, _)| *a);
    DirectoryWorkspace {
        uuid: ws_id(uuid),
        name: format!("Workspace {uuid}"),
        slug: uuid.to_owned(),
        workspace_type: "team".into(),
        status: WorkspaceStatus::Active,
        created_by_account_uuid: acc_id(creator),
        projection_revision: revision,
        execution_generation: 1,
        members: members
            .iter()
            .map(|(account, rev)| member(uuid, account, *rev))
            .collect(),
    }
}

/// An archived workspace at revision 1 without members.
pub fn archived(uuid: &str) -> DirectoryWorkspace {
    let mut w = workspace(uuid, 1, &[]);
    w.status = WorkspaceStatus::Archived;
    w
}

/// A snapshot of `inst-1` at `cursor`.
pub fn snapshot(cursor: i64, workspaces: Vec<DirectoryWorkspace>) -> DirectorySnapshot {
    DirectorySnapshot {
        instance_uuid: instance(),
        cursor,
        generated_at: at(cursor),
        workspaces,
    }
}

fn event(
    uuid: &str,
    cursor: i64,
    kind: EventKind,
    workspace: &str,
    revision: i64,
) -> DirectoryEvent {
    let mut payload = Map::new();
    payload.insert("workspace_uuid".into(), json!(workspace));
    payload.insert(kind.revision_key().into(), json!(revision));
    DirectoryEvent {
        uuid: EventUuid::parse(uuid).expect("valid test event uuid"),
        cursor,
        event_type: match kind {
            EventKind::DirectoryChanged => EventKind::DIRECTORY_CHANGED,
            EventKind::EntitlementChanged => EventKind::ENTITLEMENT_CHANGED,
        }
        .into(),
        aggregate_uuid: ws_id(workspace),
        revision,
        payload,
    }
}

/// A `directory.changed` event.
pub fn dir_event(uuid: &str, cursor: i64, workspace: &str, revision: i64) -> DirectoryEvent {
    event(
        uuid,
        cursor,
        EventKind::DirectoryChanged,
        workspace,
        revision,
    )
}

/// An `entitlement.changed` event.
pub fn ent_event(uuid: &str, cursor: i64, workspace: &str, revision: i64) -> DirectoryEvent {
    event(
        uuid,
        cursor,
        EventKind::EntitlementChanged,
        workspace,
        revision,
    )
}

/// An event batch of `inst-1`.
pub fn batch(
    after: i64,
    cursor: i64,
    high_water: i64,
    events: Vec<DirectoryEvent>,
) -> DirectoryEventBatch {
    DirectoryEventBatch {
        instance_uuid: instance(),
        after_cursor: after,
        cursor,
        high_water_cursor: high_water,
        events,
    }
}

/// A delta of `inst-1` that requested `requested` and returned `workspaces`.
pub fn delta(requested: &[&str], workspaces: Vec<DirectoryWorkspace>) -> DirectoryDelta {
    let mut requested: Vec<WorkspaceUuid> = requested.iter().map(|u| ws_id(u)).collect();
    requested.sort();
    DirectoryDelta {
        instance_uuid: instance(),
        generated_at: at(0),
        requested_workspace_uuids: requested,
        workspaces,
    }
}
