//! Which stored rows a plan reads: the keys the store loads before it calls a planner.

use std::collections::BTreeSet;

use crate::ids::{AccountUuid, EventUuid, MembershipUuid, WorkspaceUuid};
use crate::model::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectorySnapshot, DirectoryWorkspace,
};

/// Which rows a planner needs; the store loads them (accounts in chunks of uuid/email
/// pairs, never one query per account).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LookupKeys {
    /// Accounts by uuid (loaded together with [`Self::emails`]).
    pub account_uuids: Vec<AccountUuid>,
    /// Accounts by normalized email.
    pub emails: Vec<String>,
    /// Workspaces (with their memberships and execution state).
    pub workspace_uuids: Vec<WorkspaceUuid>,
    /// Memberships by uuid (to detect a uuid reused for another workspace or account).
    pub membership_uuids: Vec<MembershipUuid>,
    /// Inbox receipts by event uuid.
    pub event_uuids: Vec<EventUuid>,
    /// Also load every projected workspace of the instance that needs an absent fence.
    pub absent_candidates: bool,
}

/// Keys a snapshot apply needs.
pub fn snapshot_keys(snapshot: &DirectorySnapshot, events: &[DirectoryEvent]) -> LookupKeys {
    let mut keys = workspace_keys(
        &snapshot.workspaces,
        snapshot.workspaces.iter().map(|w| w.uuid.clone()),
    );
    keys.event_uuids = events.iter().map(|e| e.uuid.clone()).collect();
    keys.absent_candidates = true;
    keys
}

/// Keys a delta apply needs (requested workspaces include the ones to tombstone).
pub fn delta_keys(delta: &DirectoryDelta, batch: &DirectoryEventBatch) -> LookupKeys {
    let mut keys = workspace_keys(
        &delta.workspaces,
        delta.requested_workspace_uuids.iter().cloned(),
    );
    keys.event_uuids = batch.events.iter().map(|e| e.uuid.clone()).collect();
    keys
}

/// Keys an entitlement-only batch needs.
pub fn batch_keys(batch: &DirectoryEventBatch) -> LookupKeys {
    LookupKeys {
        event_uuids: batch.events.iter().map(|e| e.uuid.clone()).collect(),
        ..LookupKeys::default()
    }
}

/// The rows the account and workspace steps read for `workspaces`, with the workspaces
/// `workspace_uuids` (their memberships and execution state).
pub(super) fn workspace_keys<'w>(
    workspaces: impl IntoIterator<Item = &'w DirectoryWorkspace>,
    workspace_uuids: impl Iterator<Item = WorkspaceUuid>,
) -> LookupKeys {
    let mut accounts = BTreeSet::new();
    let mut emails = BTreeSet::new();
    let mut memberships = Vec::new();
    for member in workspaces.into_iter().flat_map(|w| &w.members) {
        accounts.insert(member.account_uuid.clone());
        emails.insert(member.normalized_email.clone());
        memberships.push(member.membership_uuid.clone());
    }
    let mut workspace_uuids: Vec<_> = workspace_uuids.collect();
    workspace_uuids.sort();
    workspace_uuids.dedup();
    memberships.sort();
    memberships.dedup();
    LookupKeys {
        account_uuids: accounts.into_iter().collect(),
        emails: emails.into_iter().collect(),
        workspace_uuids,
        membership_uuids: memberships,
        event_uuids: Vec::new(),
        absent_candidates: false,
    }
}
