//! The working copy a plan edits: the loaded rows, the rows as they will be, the touched keys;
//! plus the receipt bookkeeping every plan shares.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use super::{ApplyContext, ProjectionWrite};
use crate::batch::BatchCardinality;
use crate::error::DirectoryError;
use crate::fingerprint::event_fingerprint;
use crate::ids::{AccountUuid, EventUuid, MembershipUuid, WorkspaceUuid};
use crate::model::DirectoryEvent;
use crate::rows::{
    AccountRow, ExecutionRow, ExistingRows, InboxReceipt, MembershipRow, ProjectionState,
    WorkspaceRow,
};

/// A table slice being edited: the rows as loaded, and the rows put since (a row put is read
/// back from there). The loaded rows are not copied: a plan against 1,000,000 stored
/// memberships would otherwise hold them twice.
pub(super) struct Table<K, V> {
    original: HashMap<K, V>,
    changes: HashMap<K, V>,
}

impl<K: Eq + Hash + Clone + Ord, V: Clone + PartialEq> Table<K, V> {
    pub(super) fn new(rows: impl IntoIterator<Item = (K, V)>) -> Self {
        Self {
            original: rows.into_iter().collect(),
            changes: HashMap::new(),
        }
    }

    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.changes.get(key).or_else(|| self.original.get(key))
    }

    pub(super) fn put(&mut self, key: K, value: V) {
        self.changes.insert(key, value);
    }

    /// Every row as it will be (put or loaded), in no particular order.
    pub(super) fn values(&self) -> impl Iterator<Item = &V> {
        self.changes.values().chain(
            self.original
                .iter()
                .filter(|(key, _)| !self.changes.contains_key(key))
                .map(|(_, value)| value),
        )
    }

    /// The loaded rows that a put replaced, each with its replacement.
    pub(super) fn replaced(&self) -> impl Iterator<Item = (&V, &V)> {
        self.changes
            .iter()
            .filter_map(|(key, value)| self.original.get(key).map(|before| (before, value)))
    }

    /// The rows put whose contents differ from the loaded ones, sorted by key.
    pub(super) fn changed(self) -> Vec<V> {
        let original = self.original;
        let mut changed: Vec<(K, V)> = self
            .changes
            .into_iter()
            .filter(|(key, value)| original.get(key) != Some(value))
            .collect();
        changed.sort_by(|a, b| a.0.cmp(&b.0));
        changed.into_iter().map(|(_, value)| value).collect()
    }
}

pub(super) struct Working<'a> {
    pub(super) ctx: &'a ApplyContext,
    pub(super) accounts: Table<AccountUuid, AccountRow>,
    pub(super) accounts_by_email: HashMap<String, AccountUuid>,
    pub(super) workspaces: Table<WorkspaceUuid, WorkspaceRow>,
    pub(super) memberships: Table<MembershipUuid, MembershipRow>,
    /// The loaded memberships by workspace and account; a workspace's entry is taken when its
    /// members are planned.
    pub(super) by_workspace: HashMap<WorkspaceUuid, BTreeMap<AccountUuid, MembershipUuid>>,
    pub(super) executions: Table<WorkspaceUuid, ExecutionRow>,
    pub(super) receipts: Table<EventUuid, InboxReceipt>,
}

impl<'a> Working<'a> {
    pub(super) fn new(ctx: &'a ApplyContext, existing: &ExistingRows) -> Self {
        let accounts_by_email = existing
            .accounts
            .iter()
            .map(|a| (a.normalized_email.clone(), a.uuid.clone()))
            .collect();
        let mut by_workspace: HashMap<WorkspaceUuid, BTreeMap<AccountUuid, MembershipUuid>> =
            HashMap::new();
        for m in &existing.memberships {
            by_workspace
                .entry(m.workspace_uuid.clone())
                .or_default()
                .insert(m.account_uuid.clone(), m.uuid.clone());
        }
        Self {
            ctx,
            accounts: Table::new(
                existing
                    .accounts
                    .iter()
                    .map(|a| (a.uuid.clone(), a.clone())),
            ),
            accounts_by_email,
            workspaces: Table::new(
                existing
                    .workspaces
                    .iter()
                    .map(|w| (w.uuid.clone(), w.clone())),
            ),
            memberships: Table::new(
                existing
                    .memberships
                    .iter()
                    .map(|m| (m.uuid.clone(), m.clone())),
            ),
            by_workspace,
            executions: Table::new(
                existing
                    .executions
                    .iter()
                    .map(|e| (e.workspace_uuid.clone(), e.clone())),
            ),
            receipts: Table::new(
                existing
                    .receipts
                    .iter()
                    .filter(|r| r.instance_uuid == ctx.instance)
                    .map(|r| (r.event_uuid.clone(), r.clone())),
            ),
        }
    }

    pub(super) fn finish(
        self,
        state: ProjectionState,
        check_active_capacity: bool,
        cardinality: Option<BatchCardinality>,
        caught_up: bool,
    ) -> ProjectionWrite {
        ProjectionWrite {
            accounts: self.accounts.changed(),
            workspaces: self.workspaces.changed(),
            memberships: self.memberships.changed(),
            executions: self.executions.changed(),
            receipts: self.receipts.changed(),
            state,
            check_active_capacity,
            cardinality,
            caught_up,
        }
    }

    /// The rows of one page of a paged snapshot ([`super::PageWrite`]).
    pub(super) fn finish_rows(self) -> super::PageWrite {
        super::PageWrite {
            accounts: self.accounts.changed(),
            workspaces: self.workspaces.changed(),
            memberships: self.memberships.changed(),
            executions: self.executions.changed(),
        }
    }

    /// Inbox receipts. A known event uuid must repeat its cursor and fingerprint and is then
    /// skipped; a new event with `allow_missing_through < cursor <= reject_missing_through` means
    /// the shared cursor passed it without a receipt.
    pub(super) fn record_events(
        &mut self,
        events: &[DirectoryEvent],
        allow_missing_through: i64,
        reject_missing_through: Option<i64>,
    ) -> Result<(), DirectoryError> {
        for event in events {
            let fingerprint = event_fingerprint(event);
            if let Some(receipt) = self.receipts.get(&event.uuid) {
                if receipt.cursor != event.cursor || receipt.fingerprint != fingerprint {
                    return Err(DirectoryError::ReceiptConflict {
                        event: event.uuid.clone(),
                    });
                }
                continue;
            }
            if let Some(reject) = reject_missing_through
                && allow_missing_through < event.cursor
                && event.cursor <= reject
            {
                return Err(DirectoryError::MissingReceipt {
                    event: event.uuid.clone(),
                    cursor: event.cursor,
                });
            }
            self.receipts.put(
                event.uuid.clone(),
                InboxReceipt {
                    instance_uuid: self.ctx.instance.clone(),
                    event_uuid: event.uuid.clone(),
                    cursor: event.cursor,
                    event_type: event.event_type.clone(),
                    revision: event.revision,
                    fingerprint,
                    received_at: self.ctx.now(),
                    applied_at: None,
                },
            );
        }
        Ok(())
    }

    pub(super) fn mark_applied(&mut self, events: &[DirectoryEvent]) {
        let now = self.ctx.now();
        for event in events {
            if let Some(receipt) = self.receipts.get(&event.uuid) {
                let mut receipt = receipt.clone();
                receipt.applied_at = Some(now);
                self.receipts.put(event.uuid.clone(), receipt);
            }
        }
    }
}
