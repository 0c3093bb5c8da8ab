//! Apply planning: given the current rows and an incoming projection, the rows to write or the
//! rule that refuses it.
//!
//! Each `plan_*` function is the whole decision of one store transaction. The store adapter:
//! 1. takes the instance's `directory_projection_state` row lock (for a snapshot, after
//!    inserting the row if it is missing);
//! 2. loads the rows named by [`LookupKeys`] (see [`crate::rows::ExistingRows`]);
//! 3. calls the planner; on `Err` rolls back, so a refused input changes nothing;
//! 4. upserts every row of the returned [`ProjectionWrite`];
//! 5. when [`ProjectionWrite::check_active_capacity`] is set, counts the committed active
//!    projected workspaces and calls [`crate::batch::check_committed_active`];
//! 6. commits.
//!
//! Specification: `docs/protocol.md`, section 4, "Apply rules" (snapshot, delta, event batch
//! and freshness touch, with the deviations from the reference behaviour).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::batch::{
    BatchCardinality, check_capacity, validate_batch, validate_delta, validate_workspaces,
};
use crate::config::ProjectionLimits;
use crate::error::DirectoryError;
use crate::fingerprint::{event_fingerprint, incremental_marker, snapshot_fingerprint};
use crate::ids::{AccountUuid, EventUuid, InstanceUuid, MembershipUuid, WorkspaceUuid};
use crate::maps::{
    AccountStatus, ExecutionStatus, MembershipStatus, RowSource, WorkspaceStatus, execution_for,
    map_account_status, map_membership_status, map_role,
};
use crate::model::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectoryMember, DirectorySnapshot,
    DirectoryWorkspace, EventKind,
};
use crate::rows::{
    AccountRow, ExecutionRow, ExistingRows, InboxReceipt, MembershipRow, ProjectionState,
    WorkspaceRow, needs_absent_fence, to_millis,
};

/// The inputs every plan shares: who we are, the limits, and the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyContext {
    /// The instance projected into.
    pub instance: InstanceUuid,
    /// Capacity limits.
    pub limits: ProjectionLimits,
    /// Wall-clock time of the apply (truncated to milliseconds when stored).
    pub now: DateTime<Utc>,
    /// Lease written into the state row: `lease_expires_at = now + max_staleness`.
    pub max_staleness: Duration,
}

impl ApplyContext {
    fn now(&self) -> DateTime<Utc> {
        to_millis(self.now)
    }

    fn lease_expires_at(&self) -> DateTime<Utc> {
        let now = self.now();
        TimeDelta::from_std(self.max_staleness)
            .ok()
            .and_then(|d| now.checked_add_signed(d))
            .unwrap_or(now)
    }
}

/// Which rows a planner needs; the store loads them (accounts in chunks of 500 uuid/email
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

/// What one apply writes; every row is an upsert by primary key. Only rows whose contents
/// change are listed, sorted by primary key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectionWrite {
    /// `accounts` rows.
    pub accounts: Vec<AccountRow>,
    /// `workspaces` rows.
    pub workspaces: Vec<WorkspaceRow>,
    /// `workspace_memberships` rows.
    pub memberships: Vec<MembershipRow>,
    /// `workspace_execution_state` rows.
    pub executions: Vec<ExecutionRow>,
    /// `directory_projection_inbox` rows.
    pub receipts: Vec<InboxReceipt>,
    /// The new `directory_projection_state` row.
    pub state: ProjectionState,
    /// Count committed active workspaces before commit (snapshots and deltas).
    pub check_active_capacity: bool,
    /// Sizes of the input, for gauges (snapshots and deltas).
    pub cardinality: Option<BatchCardinality>,
    /// The projection now equals the provider's high-water mark: the replica may record
    /// readiness.
    pub caught_up: bool,
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

fn workspace_keys(
    workspaces: &[DirectoryWorkspace],
    workspace_uuids: impl Iterator<Item = WorkspaceUuid>,
) -> LookupKeys {
    let mut accounts = BTreeSet::new();
    let mut emails = BTreeSet::new();
    let mut memberships = Vec::new();
    for member in workspaces.iter().flat_map(|w| &w.members) {
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

/// Plans one full snapshot (with optional event receipts).
///
/// Rules, in order: capacity; instance; workspace-list consistency; `cursor < state.cursor`
/// is [`DirectoryError::SnapshotSuperseded`]; the same cursor with another fingerprint (unless
/// the state holds the incremental marker) is [`DirectoryError::SnapshotConflict`]; receipts;
/// accounts; workspaces with memberships and execution state; every projected workspace absent
/// from the snapshot is archived, its memberships removed and its execution fenced. The state
/// row gets `cursor = snapshot_coverage_cursor = snapshot.cursor` and the snapshot fingerprint.
///
/// `state` is `None` when no row exists yet (the store inserts it).
///
/// # Errors
/// The first broken rule.
pub fn plan_snapshot(
    ctx: &ApplyContext,
    state: Option<&ProjectionState>,
    existing: &ExistingRows,
    snapshot: &DirectorySnapshot,
    events: &[DirectoryEvent],
) -> Result<ProjectionWrite, DirectoryError> {
    let cardinality = check_capacity(&snapshot.workspaces, true, &ctx.limits)?;
    if snapshot.instance_uuid != ctx.instance {
        return Err(DirectoryError::WrongInstance {
            what: "snapshot",
            expected: ctx.instance.clone(),
            actual: snapshot.instance_uuid.clone(),
        });
    }
    validate_workspaces(&snapshot.workspaces)?;
    let fingerprint = snapshot_fingerprint(snapshot);
    if let Some(state) = state {
        if snapshot.cursor < state.cursor {
            return Err(DirectoryError::SnapshotSuperseded {
                snapshot_cursor: snapshot.cursor,
                projected_cursor: state.cursor,
            });
        }
        if snapshot.cursor == state.cursor
            && state.snapshot_fingerprint != fingerprint
            && state.snapshot_fingerprint != incremental_marker()
        {
            return Err(DirectoryError::SnapshotConflict {
                cursor: snapshot.cursor,
            });
        }
    }
    let mut work = Working::new(ctx, existing);
    work.record_events(events, -1, None)?;
    let projected = work.apply_accounts(&snapshot.workspaces, snapshot.cursor)?;
    work.apply_workspaces(&snapshot.workspaces, &projected)?;
    work.fence_absent(&snapshot.workspaces);
    work.mark_applied(events);
    let state = ProjectionState {
        instance_uuid: ctx.instance.clone(),
        cursor: snapshot.cursor,
        snapshot_coverage_cursor: snapshot.cursor,
        snapshot_fingerprint: fingerprint,
        last_applied_at: ctx.now(),
        lease_expires_at: ctx.lease_expires_at(),
    };
    Ok(work.finish(state, true, Some(cardinality), true))
}

/// Plans a delta for the workspaces named by the batch's `directory.changed` events.
///
/// Rules, in order: capacity (no workspace-count limit); the batch's own validation; the delta
/// matches the batch ([`validate_delta`]); workspace-list consistency; the state row exists and
/// its cursor is not behind `after_cursor`; receipts (a new event at or below the shared cursor
/// but above the snapshot coverage cursor is a [`DirectoryError::MissingReceipt`]). When the
/// shared cursor is behind `batch.cursor`: accounts and workspaces at revision `batch.cursor`,
/// requested-but-omitted workspaces tombstoned at their announced revision, and the state row
/// moves to `batch.cursor` with the incremental fingerprint marker. Otherwise another replica
/// already applied this page and only the receipts and freshness are written.
///
/// # Errors
/// The first broken rule.
pub fn plan_delta(
    ctx: &ApplyContext,
    state: Option<&ProjectionState>,
    existing: &ExistingRows,
    delta: &DirectoryDelta,
    batch: &DirectoryEventBatch,
) -> Result<ProjectionWrite, DirectoryError> {
    let cardinality = check_capacity(&delta.workspaces, false, &ctx.limits)?;
    validate_batch(batch, &ctx.instance, batch.after_cursor)?;
    let required = validate_delta(delta, batch, &ctx.instance)?;
    validate_workspaces(&delta.workspaces)?;
    let state = state.ok_or_else(|| DirectoryError::StateMissing {
        instance: ctx.instance.clone(),
    })?;
    if state.cursor < batch.after_cursor {
        return Err(DirectoryError::StateCursorRolledBack {
            state_cursor: state.cursor,
            expected: batch.after_cursor,
        });
    }
    let mut work = Working::new(ctx, existing);
    work.record_events(
        &batch.events,
        state.snapshot_coverage_cursor,
        Some(state.cursor),
    )?;
    let mut next = state.clone();
    if state.cursor < batch.cursor {
        let projected = work.apply_accounts(&delta.workspaces, batch.cursor)?;
        work.apply_workspaces(&delta.workspaces, &projected)?;
        let returned: HashSet<&WorkspaceUuid> = delta.workspaces.iter().map(|w| &w.uuid).collect();
        let tombstones: BTreeMap<&WorkspaceUuid, i64> = required
            .iter()
            .filter(|(uuid, _)| !returned.contains(uuid))
            .map(|(uuid, revision)| (uuid, *revision))
            .collect();
        for (uuid, revision) in tombstones {
            work.tombstone(uuid, revision)?;
        }
        next.cursor = batch.cursor;
        next.snapshot_fingerprint = incremental_marker();
    }
    next.last_applied_at = ctx.now();
    next.lease_expires_at = ctx.lease_expires_at();
    work.mark_applied(&batch.events);
    let caught_up = batch.cursor == batch.high_water_cursor && next.cursor == batch.cursor;
    Ok(work.finish(next, true, Some(cardinality), caught_up))
}

/// Plans a batch without `directory.changed` events: receipts, and the shared cursor moves to
/// `max(state.cursor, batch.cursor)`.
///
/// # Errors
/// The batch's own validation, [`DirectoryError::DirectoryChangesNeedDelta`],
/// [`DirectoryError::StateMissing`], [`DirectoryError::StateCursorRolledBack`] or a receipt rule.
pub fn plan_event_batch(
    ctx: &ApplyContext,
    state: Option<&ProjectionState>,
    existing: &ExistingRows,
    batch: &DirectoryEventBatch,
) -> Result<ProjectionWrite, DirectoryError> {
    validate_batch(batch, &ctx.instance, batch.after_cursor)?;
    if batch
        .events
        .iter()
        .any(|e| e.kind() == Some(EventKind::DirectoryChanged))
    {
        return Err(DirectoryError::DirectoryChangesNeedDelta);
    }
    let state = state.ok_or_else(|| DirectoryError::StateMissing {
        instance: ctx.instance.clone(),
    })?;
    if state.cursor < batch.after_cursor {
        return Err(DirectoryError::StateCursorRolledBack {
            state_cursor: state.cursor,
            expected: batch.after_cursor,
        });
    }
    let mut work = Working::new(ctx, existing);
    work.record_events(
        &batch.events,
        state.snapshot_coverage_cursor,
        Some(state.cursor),
    )?;
    let mut next = state.clone();
    next.cursor = state.cursor.max(batch.cursor);
    next.last_applied_at = ctx.now();
    next.lease_expires_at = ctx.lease_expires_at();
    work.mark_applied(&batch.events);
    let caught_up = batch.cursor == batch.high_water_cursor && next.cursor == batch.cursor;
    Ok(work.finish(next, false, None, caught_up))
}

/// Plans a freshness touch after an empty batch: the replica at `replica_cursor` confirms the
/// shared projection is current.
///
/// # Errors
/// [`DirectoryError::StateMissing`]; [`DirectoryError::StateCursorRolledBack`] when the shared
/// cursor is behind the replica; [`DirectoryError::ReplicaBehindHighWater`] when another replica
/// advanced it past this replica's cursor.
pub fn plan_touch(
    ctx: &ApplyContext,
    state: Option<&ProjectionState>,
    replica_cursor: i64,
) -> Result<ProjectionWrite, DirectoryError> {
    let state = state.ok_or_else(|| DirectoryError::StateMissing {
        instance: ctx.instance.clone(),
    })?;
    if state.cursor < replica_cursor {
        return Err(DirectoryError::StateCursorRolledBack {
            state_cursor: state.cursor,
            expected: replica_cursor,
        });
    }
    if state.cursor > replica_cursor {
        return Err(DirectoryError::ReplicaBehindHighWater {
            replica_cursor,
            shared_cursor: state.cursor,
        });
    }
    let mut next = state.clone();
    next.last_applied_at = ctx.now();
    next.lease_expires_at = ctx.lease_expires_at();
    Ok(ProjectionWrite {
        accounts: Vec::new(),
        workspaces: Vec::new(),
        memberships: Vec::new(),
        executions: Vec::new(),
        receipts: Vec::new(),
        state: next,
        check_active_capacity: false,
        cardinality: None,
        caught_up: true,
    })
}

/// A table slice being edited: the rows as loaded, the rows as they will be, and which keys
/// were touched.
struct Table<K, V> {
    original: HashMap<K, V>,
    current: HashMap<K, V>,
    touched: HashSet<K>,
}

impl<K: Eq + Hash + Clone + Ord, V: Clone + PartialEq> Table<K, V> {
    fn new(rows: impl IntoIterator<Item = (K, V)>) -> Self {
        let original: HashMap<K, V> = rows.into_iter().collect();
        Self {
            current: original.clone(),
            original,
            touched: HashSet::new(),
        }
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.current.get(key)
    }

    fn put(&mut self, key: K, value: V) {
        self.touched.insert(key.clone());
        self.current.insert(key, value);
    }

    fn changed(self) -> Vec<V> {
        let mut keys: Vec<K> = self.touched.into_iter().collect();
        keys.sort();
        keys.into_iter()
            .filter_map(|k| {
                let now = self.current.get(&k)?;
                (self.original.get(&k) != Some(now)).then(|| now.clone())
            })
            .collect()
    }
}

struct Working<'a> {
    ctx: &'a ApplyContext,
    accounts: Table<AccountUuid, AccountRow>,
    accounts_by_email: HashMap<String, AccountUuid>,
    workspaces: Table<WorkspaceUuid, WorkspaceRow>,
    memberships: Table<MembershipUuid, MembershipRow>,
    by_workspace: HashMap<WorkspaceUuid, BTreeMap<AccountUuid, MembershipUuid>>,
    executions: Table<WorkspaceUuid, ExecutionRow>,
    receipts: Table<EventUuid, InboxReceipt>,
}

type AccountProjection<'m> = (&'m str, &'m str, AccountStatus);

fn member_projection(member: &DirectoryMember) -> AccountProjection<'_> {
    (
        &member.normalized_email,
        &member.display_name,
        map_account_status(member.account_status),
    )
}

impl<'a> Working<'a> {
    fn new(ctx: &'a ApplyContext, existing: &ExistingRows) -> Self {
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

    fn finish(
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

    /// Inbox receipts. A known event uuid must repeat its cursor and fingerprint and is then
    /// skipped; a new event with `allow_missing_through < cursor <= reject_missing_through` means
    /// the shared cursor passed it without a receipt.
    fn record_events(
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

    fn mark_applied(&mut self, events: &[DirectoryEvent]) {
        let now = self.ctx.now();
        for event in events {
            if let Some(receipt) = self.receipts.get(&event.uuid) {
                let mut receipt = receipt.clone();
                receipt.applied_at = Some(now);
                self.receipts.put(event.uuid.clone(), receipt);
            }
        }
    }

    /// Accounts of every member, at revision `cursor`. Returns the projected account uuids.
    fn apply_accounts(
        &mut self,
        workspaces: &[DirectoryWorkspace],
        cursor: i64,
    ) -> Result<HashSet<AccountUuid>, DirectoryError> {
        let mut selected: Vec<&DirectoryMember> = Vec::new();
        let mut by_account: HashMap<&AccountUuid, &DirectoryMember> = HashMap::new();
        let mut email_owner: HashMap<&str, &AccountUuid> = HashMap::new();
        for member in workspaces.iter().flat_map(|w| &w.members) {
            let owner = *email_owner
                .entry(member.normalized_email.as_str())
                .or_insert(&member.account_uuid);
            if owner != &member.account_uuid {
                return Err(DirectoryError::EmailMapsToSeveralAccounts {
                    email: member.normalized_email.clone(),
                    first: owner.clone(),
                    second: member.account_uuid.clone(),
                });
            }
            match by_account.get(&member.account_uuid) {
                Some(previous) => {
                    if member_projection(previous) != member_projection(member) {
                        return Err(DirectoryError::ConflictingAccountProjections {
                            account: member.account_uuid.clone(),
                        });
                    }
                }
                None => {
                    by_account.insert(&member.account_uuid, member);
                    selected.push(member);
                }
            }
        }
        for member in selected {
            let account = &member.account_uuid;
            if let Some(owner) = self.accounts_by_email.get(&member.normalized_email)
                && owner != account
            {
                return Err(DirectoryError::EmailCollision {
                    account: account.clone(),
                    other: owner.clone(),
                });
            }
            let status = map_account_status(member.account_status);
            let Some(row) = self.accounts.get(account) else {
                self.accounts.put(
                    account.clone(),
                    AccountRow {
                        uuid: account.clone(),
                        normalized_email: member.normalized_email.clone(),
                        display_name: member.display_name.clone(),
                        status,
                        source: RowSource::Directory,
                        projection_revision: cursor,
                    },
                );
                self.accounts_by_email
                    .insert(member.normalized_email.clone(), account.clone());
                continue;
            };
            if row.source != RowSource::Directory {
                return Err(DirectoryError::LocalAccountCollision {
                    account: account.clone(),
                });
            }
            if row.projection_revision > cursor {
                return Err(DirectoryError::AccountRevisionRolledBack {
                    account: account.clone(),
                    stored: row.projection_revision,
                    incoming: cursor,
                });
            }
            let persisted = (
                row.normalized_email.as_str(),
                row.display_name.as_str(),
                row.status,
            );
            let unchanged = persisted == member_projection(member);
            if row.projection_revision == cursor && !unchanged {
                return Err(DirectoryError::AccountRevisionConflict {
                    account: account.clone(),
                    revision: cursor,
                });
            }
            if unchanged {
                // A rename of the workspace or another member's change must not bump this
                // account's revision: it advances only when its own projection changes.
                continue;
            }
            let mut row = row.clone();
            row.normalized_email = member.normalized_email.clone();
            row.display_name = member.display_name.clone();
            row.status = status;
            row.projection_revision = cursor;
            self.accounts.put(account.clone(), row);
        }
        Ok(by_account.into_keys().cloned().collect())
    }

    fn apply_workspaces(
        &mut self,
        workspaces: &[DirectoryWorkspace],
        projected_accounts: &HashSet<AccountUuid>,
    ) -> Result<(), DirectoryError> {
        for candidate in workspaces {
            let creator = if projected_accounts.contains(&candidate.created_by_account_uuid) {
                Some(candidate.created_by_account_uuid.clone())
            } else if candidate.status == WorkspaceStatus::Active {
                return Err(DirectoryError::CreatorNotProjected {
                    workspace: candidate.uuid.clone(),
                    creator: candidate.created_by_account_uuid.clone(),
                });
            } else {
                None
            };
            let next = WorkspaceRow {
                uuid: candidate.uuid.clone(),
                source: RowSource::Directory,
                instance_uuid: Some(self.ctx.instance.clone()),
                name: candidate.name.clone(),
                slug: candidate.slug.clone(),
                workspace_type: candidate.workspace_type.clone(),
                status: candidate.status,
                created_by_account_uuid: creator,
                projection_revision: candidate.projection_revision,
            };
            if let Some(row) = self.workspaces.get(&candidate.uuid) {
                let uuid = &candidate.uuid;
                if row.source != RowSource::Directory {
                    return Err(DirectoryError::LocalWorkspaceCollision {
                        workspace: uuid.clone(),
                    });
                }
                if row.instance_uuid.as_ref() != Some(&self.ctx.instance) {
                    return Err(DirectoryError::WorkspaceOtherInstance {
                        workspace: uuid.clone(),
                    });
                }
                if row.projection_revision > candidate.projection_revision {
                    return Err(DirectoryError::WorkspaceRevisionRolledBack {
                        workspace: uuid.clone(),
                        stored: row.projection_revision,
                        incoming: candidate.projection_revision,
                    });
                }
                if row.projection_revision == candidate.projection_revision && row != &next {
                    return Err(DirectoryError::WorkspaceRevisionConflict {
                        workspace: uuid.clone(),
                        revision: candidate.projection_revision,
                    });
                }
            }
            let previous_status = self.workspaces.get(&candidate.uuid).map(|w| w.status);
            self.workspaces.put(candidate.uuid.clone(), next);
            self.apply_memberships(candidate, previous_status)?;
            self.apply_execution(candidate)?;
        }
        Ok(())
    }

    /// Projects the members of `candidate`. `previous_status` is the status of the stored
    /// workspace row before this apply (`None` when there was none): a stored membership's
    /// status was derived from it, so the member's own fields are compared under it.
    fn apply_memberships(
        &mut self,
        candidate: &DirectoryWorkspace,
        previous_status: Option<WorkspaceStatus>,
    ) -> Result<(), DirectoryError> {
        let existing = self
            .by_workspace
            .get(&candidate.uuid)
            .cloned()
            .unwrap_or_default();
        let mut included = HashSet::new();
        for member in &candidate.members {
            included.insert(&member.account_uuid);
            let role = map_role(member.role);
            let status = map_membership_status(member.membership_status, candidate.status);
            let joined_at = member.joined_at.map(to_millis);
            let Some(row) = existing
                .get(&member.account_uuid)
                .and_then(|uuid| self.memberships.get(uuid))
            else {
                if self.memberships.get(&member.membership_uuid).is_some() {
                    return Err(DirectoryError::MembershipUuidCollision {
                        membership: member.membership_uuid.clone(),
                    });
                }
                self.memberships.put(
                    member.membership_uuid.clone(),
                    MembershipRow {
                        uuid: member.membership_uuid.clone(),
                        workspace_uuid: candidate.uuid.clone(),
                        account_uuid: member.account_uuid.clone(),
                        role,
                        status,
                        joined_at,
                        projection_revision: member.projection_revision,
                    },
                );
                self.by_workspace
                    .entry(candidate.uuid.clone())
                    .or_default()
                    .insert(member.account_uuid.clone(), member.membership_uuid.clone());
                continue;
            };
            if row.projection_revision == 0 {
                // Revision 0 is platform-owned collaboration state (invitations, role and
                // removal decisions made locally): the directory seeds, never overwrites.
                continue;
            }
            if row.uuid != member.membership_uuid {
                return Err(DirectoryError::MembershipUuidChanged {
                    workspace: candidate.uuid.clone(),
                    account: member.account_uuid.clone(),
                    stored: row.uuid.clone(),
                    incoming: member.membership_uuid.clone(),
                });
            }
            if row.projection_revision > member.projection_revision {
                return Err(DirectoryError::MembershipRevisionRolledBack {
                    membership: row.uuid.clone(),
                    workspace: candidate.uuid.clone(),
                    stored: row.projection_revision,
                    incoming: member.projection_revision,
                });
            }
            // Own fields vs derived status (a deviation from the reference, see
            // docs/protocol.md "Membership conflicts"): at one membership revision the
            // member's own fields (role, membership status, joined_at) must not change, but the
            // stored status is derived from the workspace status too, and a workspace may be
            // suspended, archived or deleted without new member revisions. So the stored row
            // is compared with what the incoming own fields give under the workspace status
            // the row was derived from, and the derived status may then follow the workspace.
            let own_status = map_membership_status(
                member.membership_status,
                previous_status.unwrap_or(candidate.status),
            );
            if row.projection_revision == member.projection_revision
                && (row.role, row.status, row.joined_at) != (role, own_status, joined_at)
            {
                return Err(DirectoryError::MembershipRevisionConflict {
                    membership: row.uuid.clone(),
                    workspace: candidate.uuid.clone(),
                    revision: member.projection_revision,
                });
            }
            let mut row = row.clone();
            row.role = role;
            row.status = status;
            row.joined_at = joined_at;
            row.projection_revision = member.projection_revision;
            self.memberships.put(row.uuid.clone(), row);
        }
        for (account, uuid) in &existing {
            if included.contains(account) {
                continue;
            }
            let Some(row) = self.memberships.get(uuid) else {
                continue;
            };
            if row.projection_revision == 0 {
                continue;
            }
            let mut row = row.clone();
            row.status = MembershipStatus::Removed;
            row.projection_revision = row.projection_revision.max(candidate.projection_revision);
            self.memberships.put(uuid.clone(), row);
        }
        Ok(())
    }

    fn apply_execution(&mut self, candidate: &DirectoryWorkspace) -> Result<(), DirectoryError> {
        let (state, write_fenced) = execution_for(candidate.status);
        let uuid = &candidate.uuid;
        if let Some(row) = self.executions.get(uuid) {
            if row.source != RowSource::Directory
                || row.instance_uuid.as_ref() != Some(&self.ctx.instance)
            {
                return Err(DirectoryError::ExecutionOwnerInvalid {
                    workspace: uuid.clone(),
                });
            }
            if row.active_generation > candidate.execution_generation {
                return Err(DirectoryError::ExecutionGenerationRolledBack {
                    workspace: uuid.clone(),
                    stored: row.active_generation,
                    incoming: candidate.execution_generation,
                });
            }
            if row.desired_state_revision > candidate.projection_revision {
                return Err(DirectoryError::DesiredStateRevisionRolledBack {
                    workspace: uuid.clone(),
                    stored: row.desired_state_revision,
                    incoming: candidate.projection_revision,
                });
            }
            if row.desired_state_revision == candidate.projection_revision
                && (row.active_generation, row.state, row.write_fenced)
                    != (candidate.execution_generation, state, write_fenced)
            {
                return Err(DirectoryError::ExecutionRevisionConflict {
                    workspace: uuid.clone(),
                    revision: candidate.projection_revision,
                });
            }
        }
        self.executions.put(
            uuid.clone(),
            ExecutionRow {
                workspace_uuid: uuid.clone(),
                source: RowSource::Directory,
                instance_uuid: Some(self.ctx.instance.clone()),
                active_generation: candidate.execution_generation,
                state,
                write_fenced,
                desired_state_revision: candidate.projection_revision,
            },
        );
        Ok(())
    }

    /// Archives and fences every loaded projected workspace of the instance that the snapshot
    /// omits (revisions unchanged: a snapshot proves absence, not a revision).
    fn fence_absent(&mut self, included: &[DirectoryWorkspace]) {
        let included: HashSet<&WorkspaceUuid> = included.iter().map(|w| &w.uuid).collect();
        let mut absent: Vec<WorkspaceUuid> = self
            .workspaces
            .current
            .values()
            .filter(|w| !included.contains(&w.uuid))
            .filter(|w| needs_absent_fence(w, self.executions.get(&w.uuid), &self.ctx.instance))
            .map(|w| w.uuid.clone())
            .collect();
        absent.sort();
        for uuid in absent {
            if let Some(row) = self.workspaces.get(&uuid) {
                let mut row = row.clone();
                row.status = WorkspaceStatus::Archived;
                self.workspaces.put(uuid.clone(), row);
            }
            self.remove_memberships(&uuid, None);
            if let Some(row) = self.executions.get(&uuid) {
                let mut row = row.clone();
                row.state = ExecutionStatus::Inactive;
                row.write_fenced = true;
                self.executions.put(uuid.clone(), row);
            }
        }
    }

    /// Tombstones a requested workspace the delta omitted, at its announced revision.
    fn tombstone(&mut self, uuid: &WorkspaceUuid, revision: i64) -> Result<(), DirectoryError> {
        let Some(row) = self.workspaces.get(uuid) else {
            return Ok(());
        };
        if row.source != RowSource::Directory
            || row.instance_uuid.as_ref() != Some(&self.ctx.instance)
        {
            return Ok(());
        }
        let rolled_back = |entity, stored| DirectoryError::TombstoneRolledBack {
            workspace: uuid.clone(),
            entity,
            stored,
            tombstone: revision,
        };
        if row.projection_revision > revision {
            return Err(rolled_back("workspace", row.projection_revision));
        }
        let members: Vec<MembershipUuid> = self
            .by_workspace
            .get(uuid)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for member in &members {
            if let Some(m) = self.memberships.get(member)
                && m.projection_revision > revision
            {
                return Err(rolled_back("membership", m.projection_revision));
            }
        }
        if let Some(e) = self.executions.get(uuid)
            && e.desired_state_revision > revision
        {
            return Err(rolled_back("execution state", e.desired_state_revision));
        }
        let mut row = row.clone();
        row.status = WorkspaceStatus::Archived;
        row.projection_revision = row.projection_revision.max(revision);
        self.workspaces.put(uuid.clone(), row);
        self.remove_memberships(uuid, Some(revision));
        if let Some(e) = self.executions.get(uuid) {
            let mut e = e.clone();
            e.state = ExecutionStatus::Inactive;
            e.write_fenced = true;
            e.desired_state_revision = e.desired_state_revision.max(revision);
            self.executions.put(uuid.clone(), e);
        }
        Ok(())
    }

    /// Marks every membership of a workspace removed; with a tombstone revision, raises each
    /// membership's revision to at least it.
    fn remove_memberships(&mut self, workspace: &WorkspaceUuid, revision: Option<i64>) {
        let members: Vec<MembershipUuid> = self
            .by_workspace
            .get(workspace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for uuid in members {
            if let Some(row) = self.memberships.get(&uuid) {
                let mut row = row.clone();
                row.status = MembershipStatus::Removed;
                if let Some(revision) = revision {
                    row.projection_revision = row.projection_revision.max(revision);
                }
                self.memberships.put(uuid, row);
            }
        }
    }
}

#[cfg(test)]
mod tests;
