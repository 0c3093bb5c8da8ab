//! The projection applied to an in-memory [`ProjectionTables`]: the reference semantics of a
//! store transaction (lock, select, plan, write, committed capacity check, commit), used by
//! the fake store of `tenantry-ports` and by this crate's tests.
//!
//! Each method is atomic: on error the tables are left exactly as they were.

use crate::batch::{BatchCardinality, check_committed_active};
use crate::error::DirectoryError;
use crate::model::{DirectoryDelta, DirectoryEvent, DirectoryEventBatch, DirectorySnapshot};
use crate::plan::{
    ApplyContext, ProjectionWrite, batch_keys, delta_keys, plan_delta, plan_event_batch,
    plan_snapshot, plan_touch, snapshot_keys,
};
use crate::rows::{ProjectionState, ProjectionTables};

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
