//! Conversions between the private entities and the domain rows of `tenantry_directory`.
//!
//! Reading fails with a message when a stored value is not valid for the domain type (an
//! identifier, a vocabulary value, a timestamp): the row was written by something else.

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use tenantry_directory::maps::{
    AccountStatus, ExecutionStatus, MembershipRole, MembershipStatus, RowSource, WorkspaceStatus,
};
use tenantry_directory::{
    AccountRow, AccountUuid, EventUuid, ExecutionRow, InboxReceipt, InstanceUuid, MembershipRow,
    MembershipUuid, ProjectionState, WorkspaceRow, WorkspaceUuid,
};
use tenantry_kernel::Fingerprint;

use super::entity::{account, execution, inbox, membership, state, workspace};

/// Why a stored row could not be read as a domain row.
pub type Corrupt = String;

fn bad(what: &str, e: impl std::fmt::Display) -> Corrupt {
    format!("stored {what} is invalid: {e}")
}

pub fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn time(what: &str, ms: i64) -> Result<DateTime<Utc>, Corrupt> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| bad(what, ms))
}

macro_rules! parse {
    ($ty:ty, $value:expr) => {
        <$ty>::parse($value).map_err(|e| bad(stringify!($ty), e))
    };
}

pub fn to_account(m: account::Model) -> Result<AccountRow, Corrupt> {
    Ok(AccountRow {
        uuid: parse!(AccountUuid, m.uuid)?,
        normalized_email: m.normalized_email,
        display_name: m.display_name,
        status: parse!(AccountStatus, &m.status)?,
        source: parse!(RowSource, &m.source)?,
        projection_revision: m.projection_revision,
    })
}

pub fn from_account(r: &AccountRow) -> account::ActiveModel {
    account::ActiveModel {
        uuid: Set(r.uuid.to_string()),
        normalized_email: Set(r.normalized_email.clone()),
        display_name: Set(r.display_name.clone()),
        status: Set(r.status.as_str().to_owned()),
        source: Set(r.source.as_str().to_owned()),
        projection_revision: Set(r.projection_revision),
    }
}

pub fn to_workspace(m: workspace::Model) -> Result<WorkspaceRow, Corrupt> {
    Ok(WorkspaceRow {
        uuid: parse!(WorkspaceUuid, m.uuid)?,
        source: parse!(RowSource, &m.source)?,
        instance_uuid: m
            .instance_uuid
            .map(|i| parse!(InstanceUuid, i))
            .transpose()?,
        name: m.name,
        slug: m.slug,
        workspace_type: m.workspace_type,
        status: parse!(WorkspaceStatus, &m.status)?,
        created_by_account_uuid: m
            .created_by_account_uuid
            .map(|a| parse!(AccountUuid, a))
            .transpose()?,
        projection_revision: m.projection_revision,
    })
}

pub fn from_workspace(r: &WorkspaceRow) -> workspace::ActiveModel {
    workspace::ActiveModel {
        uuid: Set(r.uuid.to_string()),
        source: Set(r.source.as_str().to_owned()),
        instance_uuid: Set(r.instance_uuid.as_ref().map(ToString::to_string)),
        name: Set(r.name.clone()),
        slug: Set(r.slug.clone()),
        workspace_type: Set(r.workspace_type.clone()),
        status: Set(r.status.as_str().to_owned()),
        created_by_account_uuid: Set(r.created_by_account_uuid.as_ref().map(ToString::to_string)),
        projection_revision: Set(r.projection_revision),
    }
}

pub fn to_membership(m: membership::Model) -> Result<MembershipRow, Corrupt> {
    Ok(MembershipRow {
        uuid: parse!(MembershipUuid, m.uuid)?,
        workspace_uuid: parse!(WorkspaceUuid, m.workspace_uuid)?,
        account_uuid: parse!(AccountUuid, m.account_uuid)?,
        role: parse!(MembershipRole, &m.role)?,
        status: parse!(MembershipStatus, &m.status)?,
        joined_at: m.joined_at.map(|ms| time("joined_at", ms)).transpose()?,
        projection_revision: m.projection_revision,
    })
}

pub fn from_membership(r: &MembershipRow) -> membership::ActiveModel {
    membership::ActiveModel {
        uuid: Set(r.uuid.to_string()),
        workspace_uuid: Set(r.workspace_uuid.to_string()),
        account_uuid: Set(r.account_uuid.to_string()),
        role: Set(r.role.as_str().to_owned()),
        status: Set(r.status.as_str().to_owned()),
        joined_at: Set(r.joined_at.map(millis)),
        projection_revision: Set(r.projection_revision),
    }
}

pub fn to_execution(m: execution::Model) -> Result<ExecutionRow, Corrupt> {
    Ok(ExecutionRow {
        workspace_uuid: parse!(WorkspaceUuid, m.workspace_uuid)?,
        source: parse!(RowSource, &m.source)?,
        instance_uuid: m
            .instance_uuid
            .map(|i| parse!(InstanceUuid, i))
            .transpose()?,
        active_generation: m.active_generation,
        state: parse!(ExecutionStatus, &m.state)?,
        write_fenced: m.write_fenced,
        desired_state_revision: m.desired_state_revision,
    })
}

pub fn from_execution(r: &ExecutionRow) -> execution::ActiveModel {
    execution::ActiveModel {
        workspace_uuid: Set(r.workspace_uuid.to_string()),
        source: Set(r.source.as_str().to_owned()),
        instance_uuid: Set(r.instance_uuid.as_ref().map(ToString::to_string)),
        active_generation: Set(r.active_generation),
        state: Set(r.state.as_str().to_owned()),
        write_fenced: Set(r.write_fenced),
        desired_state_revision: Set(r.desired_state_revision),
    }
}

pub fn to_state(m: state::Model) -> Result<ProjectionState, Corrupt> {
    Ok(ProjectionState {
        instance_uuid: parse!(InstanceUuid, m.instance_uuid)?,
        cursor: m.cursor,
        snapshot_coverage_cursor: m.snapshot_coverage_cursor,
        snapshot_fingerprint: Fingerprint::from_stored(m.snapshot_fingerprint),
        last_applied_at: time("last_applied_at", m.last_applied_at)?,
        lease_expires_at: time("lease_expires_at", m.lease_expires_at)?,
    })
}

pub fn from_state(r: &ProjectionState) -> state::ActiveModel {
    state::ActiveModel {
        instance_uuid: Set(r.instance_uuid.to_string()),
        cursor: Set(r.cursor),
        snapshot_coverage_cursor: Set(r.snapshot_coverage_cursor),
        snapshot_fingerprint: Set(r.snapshot_fingerprint.as_str().to_owned()),
        last_applied_at: Set(millis(r.last_applied_at)),
        lease_expires_at: Set(millis(r.lease_expires_at)),
    }
}

pub fn to_receipt(m: inbox::Model) -> Result<InboxReceipt, Corrupt> {
    Ok(InboxReceipt {
        instance_uuid: parse!(InstanceUuid, m.instance_uuid)?,
        event_uuid: parse!(EventUuid, m.event_uuid)?,
        cursor: m.cursor,
        event_type: m.event_type,
        revision: m.revision,
        fingerprint: Fingerprint::from_stored(m.fingerprint),
        received_at: time("received_at", m.received_at)?,
        applied_at: m.applied_at.map(|ms| time("applied_at", ms)).transpose()?,
    })
}

pub fn from_receipt(r: &InboxReceipt) -> inbox::ActiveModel {
    inbox::ActiveModel {
        instance_uuid: Set(r.instance_uuid.to_string()),
        event_uuid: Set(r.event_uuid.to_string()),
        cursor: Set(r.cursor),
        event_type: Set(r.event_type.clone()),
        revision: Set(r.revision),
        fingerprint: Set(r.fingerprint.as_str().to_owned()),
        received_at: Set(millis(r.received_at)),
        applied_at: Set(r.applied_at.map(millis)),
    }
}
