//! The projection applied to an in-memory [`ProjectionTables`]: the reference semantics of a
//! store transaction (lock, select, plan, write, committed capacity check, commit), used by
//! the fake store of `tenantry-ports` and by this crate's tests.
//!
//! Each method is atomic: on error the tables are left exactly as they were.

use std::collections::BTreeSet;

use crate::batch::{BatchCardinality, check_committed_active};
use crate::error::DirectoryError;
use crate::ids::{InstanceUuid, WorkspaceUuid};
use crate::model::{
    DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectorySnapshot, DirectoryWorkspace,
};
use crate::plan::{
    ApplyContext, LookupKeys, PageWrite, PagedSnapshotApply, ProjectionWrite, SnapshotSurvey,
    batch_keys, delta_keys, plan_delta, plan_event_batch, plan_snapshot, plan_touch, snapshot_keys,
};
use crate::rows::{ExistingRows, ProjectionState, ProjectionTables, needs_absent_fence};

/// What one committed apply reports back to the projector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyOutcome {
    /// The state row after commit.
    pub state: ProjectionState,
    /// Active projected workspaces of the instance after commit (when counted).
    pub active_workspaces: Option<u64>,
    /// Sizes of the input (snapshots and deltas).
    pub cardinality: Option<BatchCardinality>,
    /// The projection reached the provider's high-water mark.
    pub caught_up: bool,
}

impl ApplyOutcome {
    /// The outcome of a committed `plan` with `active` counted workspaces.
    pub fn of(plan: &ProjectionWrite, active: Option<u64>) -> Self {
        Self {
            state: plan.state.clone(),
            active_workspaces: active,
            cardinality: plan.cardinality,
            caught_up: plan.caught_up,
        }
    }
}

impl ProjectionTables {
    /// Selects the rows a planner needs, exactly as the SQL adapter's queries do.
    pub fn select(&self, keys: &LookupKeys, instance: &InstanceUuid) -> ExistingRows {
        let account_uuids: BTreeSet<_> = keys.account_uuids.iter().collect();
        let emails: BTreeSet<_> = keys.emails.iter().map(String::as_str).collect();
        let accounts = self
            .accounts
            .values()
            .filter(|a| {
                account_uuids.contains(&a.uuid) || emails.contains(a.normalized_email.as_str())
            })
            .cloned()
            .collect();
        let mut workspace_uuids: BTreeSet<WorkspaceUuid> =
            keys.workspace_uuids.iter().cloned().collect();
        if keys.absent_candidates {
            for workspace in self.workspaces.values() {
                if needs_absent_fence(workspace, self.executions.get(&workspace.uuid), instance) {
                    workspace_uuids.insert(workspace.uuid.clone());
                }
            }
        }
        let workspaces = workspace_uuids
            .iter()
            .filter_map(|u| self.workspaces.get(u).cloned())
            .collect();
        let membership_uuids: BTreeSet<_> = keys.membership_uuids.iter().collect();
        let memberships = self
            .memberships
            .values()
            .filter(|m| {
                workspace_uuids.contains(&m.workspace_uuid) || membership_uuids.contains(&m.uuid)
            })
            .cloned()
            .collect();
        let executions = workspace_uuids
            .iter()
            .filter_map(|u| self.executions.get(u).cloned())
            .collect();
        let receipts = keys
            .event_uuids
            .iter()
            .filter_map(|e| self.receipts.get(&(instance.clone(), e.clone())).cloned())
            .collect();
        ExistingRows {
            accounts,
            workspaces,
            memberships,
            executions,
            receipts,
        }
    }

    /// The projected workspaces of `instance` that need an absent fence
    /// ([`needs_absent_fence`]), by uuid: what a paged snapshot's last step starts from
    /// ([`PagedSnapshotApply::finish_keys`]).
    pub fn absent_candidates(&self, instance: &InstanceUuid) -> Vec<WorkspaceUuid> {
        self.workspaces
            .values()
            .filter(|w| needs_absent_fence(w, self.executions.get(&w.uuid), instance))
            .map(|w| w.uuid.clone())
            .collect()
    }

    /// Writes one page of a paged snapshot: every row is an upsert by primary key.
    pub fn write_page(&mut self, page: &PageWrite) {
        for row in &page.accounts {
            self.accounts.insert(row.uuid.clone(), row.clone());
        }
        for row in &page.workspaces {
            self.workspaces.insert(row.uuid.clone(), row.clone());
        }
        for row in &page.memberships {
            self.memberships.insert(row.uuid.clone(), row.clone());
        }
        for row in &page.executions {
            self.executions
                .insert(row.workspace_uuid.clone(), row.clone());
        }
    }

    /// Writes a plan: every row is an upsert by primary key.
    pub fn write(&mut self, plan: &ProjectionWrite) {
        // Planted (verification only): the workspace rows are replaced by the plan's instead
        // of upserted, so rows the plan does not carry vanish.
        if tenantry_kernel::planted!("write-replaces-workspaces") && !plan.workspaces.is_empty() {
            self.workspaces.clear();
        }
        for row in &plan.accounts {
            self.accounts.insert(row.uuid.clone(), row.clone());
        }
        for row in &plan.workspaces {
            self.workspaces.insert(row.uuid.clone(), row.clone());
        }
        for row in &plan.memberships {
            self.memberships.insert(row.uuid.clone(), row.clone());
        }
        for row in &plan.executions {
            self.executions
                .insert(row.workspace_uuid.clone(), row.clone());
        }
        for row in &plan.receipts {
            self.receipts.insert(
                (row.instance_uuid.clone(), row.event_uuid.clone()),
                row.clone(),
            );
        }
        self.states
            .insert(plan.state.instance_uuid.clone(), plan.state.clone());
    }

    fn commit(
        &mut self,
        ctx: &ApplyContext,
        plan: Result<ProjectionWrite, DirectoryError>,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let plan = plan?;
        let mut next = self.clone();
        next.write(&plan);
        let active = if plan.check_active_capacity {
            let active = next.count_active(&ctx.instance);
            check_committed_active(active, &ctx.limits)?;
            Some(active)
        } else {
            None
        };
        *self = next;
        Ok(ApplyOutcome::of(&plan, active))
    }

    /// Applies a full snapshot (see [`plan_snapshot`]).
    ///
    /// # Errors
    /// The rule that refused it; nothing changed.
    pub fn apply_snapshot(
        &mut self,
        ctx: &ApplyContext,
        snapshot: &DirectorySnapshot,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, DirectoryError> {
        let existing = self.select(&snapshot_keys(snapshot, events), &ctx.instance);
        let state = self.states.get(&ctx.instance).cloned();
        let plan = plan_snapshot(ctx, state.as_ref(), &existing, snapshot, events);
        self.commit(ctx, plan)
    }

    /// Applies a snapshot of `instance_uuid` at `cursor` that arrives as `pages` (each page's
    /// workspaces, in the order received), page by page ([`PagedSnapshotApply`]): the same
    /// result as [`apply_snapshot`](Self::apply_snapshot) of the joined pages.
    ///
    /// # Errors
    /// The rule that refused it; nothing changed.
    pub fn apply_snapshot_pages(
        &mut self,
        ctx: &ApplyContext,
        instance_uuid: &InstanceUuid,
        cursor: i64,
        pages: &[Vec<DirectoryWorkspace>],
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, DirectoryError> {
        let mut survey = SnapshotSurvey::new(instance_uuid.clone(), cursor);
        let pages: Vec<Vec<&DirectoryWorkspace>> =
            pages.iter().map(|page| page.iter().collect()).collect();
        for page in &pages {
            survey.push(page);
        }
        let survey = survey.finish(ctx)?;
        let state = self.states.get(&ctx.instance).cloned();
        let mut apply = PagedSnapshotApply::begin(ctx, state.as_ref(), survey)?;
        let mut next = self.clone();
        if apply.rows_needed() {
            for page in &pages {
                let existing = next.select(&apply.page_keys(page), &ctx.instance);
                let rows = apply.plan_page(&existing, page)?;
                next.write_page(&rows);
            }
        }
        let keys = apply.finish_keys(next.absent_candidates(&ctx.instance), events);
        let existing = next.select(&keys, &ctx.instance);
        let plan = apply.finish(&existing, events);
        let outcome = next.commit(ctx, plan)?;
        *self = next;
        Ok(outcome)
    }

    /// Applies a delta (see [`plan_delta`]).
    ///
    /// # Errors
    /// The rule that refused it; nothing changed.
    pub fn apply_delta(
        &mut self,
        ctx: &ApplyContext,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let existing = self.select(&delta_keys(delta, batch), &ctx.instance);
        let state = self.states.get(&ctx.instance).cloned();
        let plan = plan_delta(ctx, state.as_ref(), &existing, delta, batch);
        self.commit(ctx, plan)
    }

    /// Applies an entitlement-only batch (see [`plan_event_batch`]).
    ///
    /// # Errors
    /// The rule that refused it; nothing changed.
    pub fn apply_event_batch(
        &mut self,
        ctx: &ApplyContext,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let existing = self.select(&batch_keys(batch), &ctx.instance);
        let state = self.states.get(&ctx.instance).cloned();
        let plan = plan_event_batch(ctx, state.as_ref(), &existing, batch);
        self.commit(ctx, plan)
    }

    /// Confirms freshness for a replica at `replica_cursor` (see [`plan_touch`]).
    ///
    /// # Errors
    /// The rule that refused it; nothing changed.
    pub fn touch_freshness(
        &mut self,
        ctx: &ApplyContext,
        replica_cursor: i64,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let state = self.states.get(&ctx.instance).cloned();
        let plan = plan_touch(ctx, state.as_ref(), replica_cursor);
        self.commit(ctx, plan)
    }
}
