//! The fake store's retention ([`RetentionStore`](crate::retention::RetentionStore)): finished
//! commands and operator action records pruned by the pure rules of
//! `tenantry_lifecycle::retention`.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tenantry_kernel::CommandId;
use tenantry_lifecycle::CommandRecord;

use super::{InMemoryLifecycleStore, StoreState, lock};
use crate::lifecycle::StoreError;

/// Finished commands and operator action records, by the pure rules of
/// `tenantry_lifecycle::retention`; the fake holds no inbox receipts (none removed, no oldest).
#[async_trait]
impl crate::retention::RetentionStore for InMemoryLifecycleStore {
    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        self.check_fault()?;
        Ok(self.clock.now())
    }

    async fn prune_batch(
        &self,
        kind: crate::retention::RetentionKind,
        now: DateTime<Utc>,
        window: std::time::Duration,
        limit: u32,
    ) -> Result<crate::retention::PruneBatch, StoreError> {
        self.check_fault()?;
        let mut state = lock(&self.state);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        match kind {
            crate::retention::RetentionKind::FinishedCommands => {
                let mut expired: Vec<(DateTime<Utc>, CommandId)> =
                    expired_commands(&state, now, window)
                        .map(|r| (r.completed_at.unwrap_or(now), r.id.clone()))
                        .collect();
                expired.sort();
                expired.truncate(limit);
                for (_, id) in &expired {
                    state.commands.remove(id);
                    state.prior_windows.remove(id);
                    // The command's attempt-error log goes with it (the SQL stores' cascade).
                    state.errors.retain(|e| &e.command_id != id);
                }
                Ok(crate::retention::PruneBatch::Removed(expired.len() as u64))
            }
            crate::retention::RetentionKind::OperatorActions => {
                let mut indexes: Vec<(DateTime<Utc>, usize)> = state
                    .actions
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| {
                        tenantry_lifecycle::retention::action_expired(a.action.at, now, window)
                    })
                    .map(|(i, a)| (a.action.at, i))
                    .collect();
                indexes.sort();
                indexes.truncate(limit);
                let mut remove: Vec<usize> = indexes.iter().map(|(_, i)| *i).collect();
                remove.sort_unstable_by(|a, b| b.cmp(a));
                for i in &remove {
                    state.actions.remove(*i);
                }
                Ok(crate::retention::PruneBatch::Removed(remove.len() as u64))
            }
            _ => Ok(crate::retention::PruneBatch::Removed(0)),
        }
    }

    async fn count_expired(
        &self,
        kind: crate::retention::RetentionKind,
        now: DateTime<Utc>,
        window: std::time::Duration,
    ) -> Result<u64, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        Ok(match kind {
            crate::retention::RetentionKind::FinishedCommands => {
                expired_commands(&state, now, window).count() as u64
            }
            crate::retention::RetentionKind::OperatorActions => state
                .actions
                .iter()
                .filter(|a| tenantry_lifecycle::retention::action_expired(a.action.at, now, window))
                .count() as u64,
            _ => 0,
        })
    }

    async fn oldest(
        &self,
        kind: crate::retention::RetentionKind,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        Ok(match kind {
            crate::retention::RetentionKind::FinishedCommands => state
                .commands
                .values()
                .filter(|r| tenantry_lifecycle::retention::PRUNABLE_STATUSES.contains(&r.status))
                .filter_map(|r| r.completed_at)
                .min(),
            crate::retention::RetentionKind::OperatorActions => {
                state.actions.iter().map(|a| a.action.at).min()
            }
            _ => None,
        })
    }
}

/// The commands `tenantry_lifecycle::retention::command_expired` lets go at `now`.
fn expired_commands(
    state: &StoreState,
    now: DateTime<Utc>,
    window: std::time::Duration,
) -> impl Iterator<Item = &CommandRecord> {
    state.commands.values().filter(move |r| {
        let space = state
            .spaces
            .get(&(r.tenant_id.clone(), r.control_space_id.clone()))
            .map(|cs| cs.state);
        tenantry_lifecycle::retention::command_expired(r, space, now, window)
    })
}
