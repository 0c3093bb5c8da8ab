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

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use crate::batch::{
    BatchCardinality, check_capacity, validate_batch, validate_delta, validate_workspaces,
};
use crate::config::ProjectionLimits;
use crate::error::DirectoryError;
use crate::fingerprint::{incremental_marker, snapshot_fingerprint};
use crate::ids::{EventUuid, InstanceUuid, WorkspaceUuid};
use crate::model::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectorySnapshot, EventKind,
};
use crate::rows::{
    AccountRow, ExecutionRow, ExistingRows, InboxReceipt, MembershipRow, ProjectionState,
    WorkspaceRow, to_millis,
};
use tenantry_kernel::Fingerprint;

/// The inputs every plan shares: who we are, the limits, and the time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyContext {
    /// The instance projected into.
    pub instance: InstanceUuid,
    /// Capacity limits.
    pub limits: ProjectionLimits,
    /// Wall-clock time of the apply (truncated to milliseconds when stored). New inbox
    /// receipts get it as `received_at` in the plan; a store replaces that with its own
    /// clock ([`ProjectionWrite::stamp_new_receipts`]).
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

impl ProjectionWrite {
    /// Stamps the receipts this write creates (those not among `existing`, the receipts the
    /// store read in the same transaction) with `received_at`, truncated to milliseconds.
    /// Receipts that already exist keep theirs. A store passes its own clock here (the
    /// database's `now` in the apply's transaction): `received_at` is what retention's
    /// cut-off compares ([`crate::retention`]), and like every retention time stamp it must
    /// not follow a replica's wall clock (issue 29). Returns how many were stamped.
    pub fn stamp_new_receipts(
        &mut self,
        existing: &ExistingRows,
        received_at: DateTime<Utc>,
    ) -> usize {
        let received_at = to_millis(received_at);
        let known = known_receipts(existing);
        let mut stamped = 0;
        for receipt in &mut self.receipts {
            if !known.contains(&(&receipt.instance_uuid, &receipt.event_uuid)) {
                receipt.received_at = received_at;
                stamped += 1;
            }
        }
        stamped
    }

    /// Whether this write creates a receipt not among `existing` (a store then reads its
    /// clock for [`stamp_new_receipts`](Self::stamp_new_receipts)).
    pub fn creates_receipts(&self, existing: &ExistingRows) -> bool {
        let known = known_receipts(existing);
        self.receipts
            .iter()
            .any(|receipt| !known.contains(&(&receipt.instance_uuid, &receipt.event_uuid)))
    }
}

/// The keys of the receipts a store read for an apply.
fn known_receipts(existing: &ExistingRows) -> BTreeSet<(&InstanceUuid, &EventUuid)> {
    existing
        .receipts
        .iter()
        .map(|receipt| (&receipt.instance_uuid, &receipt.event_uuid))
        .collect()
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
/// A snapshot the projection already holds ([`snapshot_already_projected`]: same cursor, same
/// fingerprint) skips the account and workspace steps: its rows are what the earlier apply of
/// the same contents wrote, so comparing them again would write nothing. Only receipts and
/// the state row's freshness are written, and the store need not load any other row
/// ([`snapshot_lookup_keys`]).
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
    plan_snapshot_with(ctx, state, existing, snapshot, events, None, Sequential)
}

/// Runs two independent pure computations and returns both results. [`plan_snapshot_with`]
/// hands the snapshot fingerprint and the row planning to it when neither needs the other;
/// [`Sequential`] runs them one after the other, a store may run them on two threads. The
/// plan does not depend on how.
pub trait Join {
    /// Both results, `a`'s first.
    fn join<A: Send, B: Send>(
        self,
        a: impl FnOnce() -> A + Send,
        b: impl FnOnce() -> B + Send,
    ) -> (A, B);
}

/// [`Join`] on the calling thread: `a`, then `b`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sequential;

impl Join for Sequential {
    fn join<A: Send, B: Send>(
        self,
        a: impl FnOnce() -> A + Send,
        b: impl FnOnce() -> B + Send,
    ) -> (A, B) {
        (a(), b())
    }
}

/// [`plan_snapshot`] with the snapshot's fingerprint when the caller already computed it
/// ([`snapshot_fingerprint`]), and a [`Join`] for the work that may run at once: when the
/// state row is absent or at another cursor, no rule needs the fingerprint before the rows are
/// planned, so the fingerprint is computed beside the row planning. (The SQL store applies
/// snapshots page by page, [`PagedSnapshotApply`]; this one-body plan is the reference the
/// pages are checked against.)
///
/// # Errors
/// As [`plan_snapshot`], in the same order.
pub fn plan_snapshot_with(
    ctx: &ApplyContext,
    state: Option<&ProjectionState>,
    existing: &ExistingRows,
    snapshot: &DirectorySnapshot,
    events: &[DirectoryEvent],
    fingerprint: Option<Fingerprint>,
    join: impl Join,
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
    if let Some(state) = state
        && snapshot.cursor < state.cursor
        // Planted (verification only): a snapshot older than the projection is applied.
        && !tenantry_kernel::planted!("older-snapshot-applied")
    {
        return Err(DirectoryError::SnapshotSuperseded {
            snapshot_cursor: snapshot.cursor,
            projected_cursor: state.cursor,
        });
    }
    let same_cursor = state.is_some_and(|state| state.cursor == snapshot.cursor);
    let (fingerprint, work) = match fingerprint {
        Some(fingerprint) => (fingerprint, None),
        None if same_cursor => (snapshot_fingerprint(snapshot), None),
        None => {
            // No rule reads the fingerprint at another cursor: plan the rows beside it.
            let (fingerprint, work) = join.join(
                || snapshot_fingerprint(snapshot),
                || plan_snapshot_rows(ctx, existing, snapshot, events, false),
            );
            (fingerprint, Some(work))
        }
    };
    if let Some(state) = state
        && snapshot.cursor == state.cursor
        && state.snapshot_fingerprint != fingerprint
        && state.snapshot_fingerprint != incremental_marker()
    {
        return Err(DirectoryError::SnapshotConflict {
            cursor: snapshot.cursor,
        });
    }
    let work = match work {
        Some(work) => work?,
        None => {
            let unchanged = snapshot_already_projected(state, snapshot.cursor, &fingerprint);
            plan_snapshot_rows(ctx, existing, snapshot, events, unchanged)?
        }
    };
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

/// The row steps of a snapshot: receipts, then (unless `already_projected`) accounts,
/// workspaces and the fencing of absent workspaces.
fn plan_snapshot_rows<'a>(
    ctx: &'a ApplyContext,
    existing: &ExistingRows,
    snapshot: &DirectorySnapshot,
    events: &[DirectoryEvent],
    already_projected: bool,
) -> Result<Working<'a>, DirectoryError> {
    let mut work = Working::new(ctx, existing);
    work.record_events(events, -1, None)?;
    if !already_projected {
        let projected = work.apply_accounts(&snapshot.workspaces, snapshot.cursor)?;
        work.apply_workspaces(&snapshot.workspaces, |account| projected.contains(account))?;
        let included: HashSet<&WorkspaceUuid> =
            snapshot.workspaces.iter().map(|w| &w.uuid).collect();
        work.fence_absent(|uuid| included.contains(uuid));
    }
    work.mark_applied(events);
    Ok(work)
}

/// Whether writing `incoming` over a stored `stored` would move a row's revision (or an
/// execution generation) back: the rule every projected row's rollback check applies
/// (accounts, workspaces, memberships, execution state; the `*RolledBack` errors of
/// [`DirectoryError`]).
pub(crate) fn rolls_back(stored: i64, incoming: i64) -> bool {
    // Planted (verification only; `validate_delta` carries the same switch): a lagging
    // answer's older revision is written over a newer one.
    stored > incoming && !tenantry_kernel::planted!("older-revision-applied")
}

/// Whether a snapshot at `cursor` with `fingerprint` is the directory the projection already
/// holds: the state row stands at that cursor with that (full-snapshot, not incremental)
/// fingerprint. Only the directory projection writes the projected rows, and a delta replaces
/// the fingerprint with the incremental marker, so the rows are then exactly what planning the
/// same contents wrote before; planning them again would write nothing. The same contents at a
/// later cursor are planned in full: that apply also re-checks the stored rows against the
/// directory (a row changed behind the projection's back is refused, not kept).
pub fn snapshot_already_projected(
    state: Option<&ProjectionState>,
    cursor: i64,
    fingerprint: &Fingerprint,
) -> bool {
    state.is_some_and(|state| {
        state.cursor == cursor
            && &state.snapshot_fingerprint == fingerprint
            && state.snapshot_fingerprint != incremental_marker()
    })
}

/// The rows a snapshot apply loads, once the store holds the state row's lock: all of `keys`
/// ([`snapshot_keys`]), or only the receipts when the snapshot is already projected
/// ([`snapshot_already_projected`]).
pub fn snapshot_lookup_keys(
    state: Option<&ProjectionState>,
    cursor: i64,
    fingerprint: &Fingerprint,
    keys: LookupKeys,
) -> LookupKeys {
    if snapshot_already_projected(state, cursor, fingerprint) {
        LookupKeys {
            event_uuids: keys.event_uuids,
            ..LookupKeys::default()
        }
    } else {
        keys
    }
}

/// Plans a delta for the workspaces named by the batch's `directory.changed` events.
///
/// Rules, in order: capacity (no workspace-count limit); the batch's own validation; the delta
/// matches the batch ([`validate_delta`]); workspace-list consistency; the state row exists and
/// its cursor is not behind `after_cursor`; receipts (a new event at or below the shared cursor
/// but above the snapshot coverage cursor is a [`DirectoryError::MissingReceipt`]). When the
/// shared cursor is behind `batch.cursor`: accounts and workspaces at revision `batch.cursor`,
/// requested-but-omitted workspaces tombstoned (at the highest of their announced and stored revisions), and the state row
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
    let (mut work, mut next) = begin_incremental(ctx, state, existing, batch)?;
    if next.cursor < batch.cursor {
        let projected = work.apply_accounts(&delta.workspaces, batch.cursor)?;
        work.apply_workspaces(&delta.workspaces, |account| projected.contains(account))?;
        let returned: HashSet<&WorkspaceUuid> = delta.workspaces.iter().map(|w| &w.uuid).collect();
        let tombstones: BTreeMap<&WorkspaceUuid, i64> = required
            .iter()
            .filter(|(uuid, _)| !returned.contains(uuid))
            .map(|(uuid, revision)| (uuid, *revision))
            .collect();
        for (uuid, revision) in tombstones {
            work.tombstone(uuid, revision);
        }
        next.cursor = batch.cursor;
        next.snapshot_fingerprint = incremental_marker();
    } else if tenantry_kernel::planted!("cursor-follows-batch") {
        // Planted (verification only; the event-batch path carries the same switch): the
        // shared cursor takes a batch's cursor behind it.
        next.cursor = batch.cursor;
    }
    Ok(end_incremental(work, next, batch, true, Some(cardinality)))
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
    let (work, mut next) = begin_incremental(ctx, state, existing, batch)?;
    next.cursor = if tenantry_kernel::planted!("cursor-follows-batch") {
        // Planted (verification only): the shared cursor takes the batch's, even a lower one.
        batch.cursor
    } else {
        next.cursor.max(batch.cursor)
    };
    Ok(end_incremental(work, next, batch, false, None))
}

/// Starts an incremental apply (a delta or an event batch) once the input's own checks
/// passed: the state row must exist and its cursor must not be behind `batch.after_cursor`;
/// then the batch's receipts are recorded (a new event at or below the shared cursor but above
/// the snapshot coverage cursor was passed without one). Returns the working copy and the
/// state row to update.
fn begin_incremental<'a>(
    ctx: &'a ApplyContext,
    state: Option<&ProjectionState>,
    existing: &ExistingRows,
    batch: &DirectoryEventBatch,
) -> Result<(Working<'a>, ProjectionState), DirectoryError> {
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
    Ok((work, state.clone()))
}

/// Ends an incremental apply: the state row's freshness is renewed, the batch's receipts are
/// marked applied, and the projection is caught up when the batch reached the provider's
/// high-water mark and the shared cursor stands at the batch's cursor.
fn end_incremental(
    mut work: Working<'_>,
    mut next: ProjectionState,
    batch: &DirectoryEventBatch,
    check_active_capacity: bool,
    cardinality: Option<BatchCardinality>,
) -> ProjectionWrite {
    next.last_applied_at = work.ctx.now();
    next.lease_expires_at = work.ctx.lease_expires_at();
    work.mark_applied(&batch.events);
    let caught_up = batch.cursor == batch.high_water_cursor && next.cursor == batch.cursor;
    work.finish(next, check_active_capacity, cardinality, caught_up)
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

mod accounts;
mod keys;
mod paged;
mod survey;
mod working;
mod workspaces;

pub use keys::{LookupKeys, batch_keys, delta_keys, snapshot_keys};
pub use paged::{PageWrite, PagedSnapshotApply};
pub use survey::{SnapshotSurvey, SurveyedSnapshot};
use working::Working;

#[cfg(test)]
mod tests;
