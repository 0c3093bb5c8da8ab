//! The fake store's command queue ([`CommandQueue`]): claims, lease renewal, settles, and the
//! reads the dispatcher makes, by the same rules as the SQL adapters.

use std::time::Duration;

use async_trait::async_trait;
use tenantry_kernel::{CommandId, ControlSpaceId, TenantId};
use tenantry_lifecycle::{
    ClaimedCommand, ClaimedControlSpace, CommandOutcome, CommandRecord, CommandStatus, LeaseToken,
    Operation, Settlement,
};

use super::admin::matches_filter;
use super::{
    InMemoryLifecycleStore, StoreState, apply_outcome, cas_matches, holds_lease, is_due, lock,
    release, supersede_allowed,
};
use crate::lifecycle::{
    AttemptEnd, AttemptError, ClaimRequest, CommandFilter, CommandQueue, SettleError, StoreError,
    add_duration,
};

#[async_trait]
impl CommandQueue for InMemoryLifecycleStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        self.check_fault()?;
        let now = self.clock.now();
        let mut state = lock(&self.state);
        let mut due: Vec<&CommandRecord> = state
            .commands
            .values()
            .filter(|r| is_due(r, now))
            .filter(|r| request.include_provision || r.operation != Operation::Provision)
            .collect();
        // Turn order, as the SQL stores' claim index (docs/protocol.md, "Fair claims across
        // tenants").
        due.sort_by(|a, b| {
            (a.turn_at, a.next_attempt_at, a.created_at, &a.id).cmp(&(
                b.turn_at,
                b.next_attempt_at,
                b.created_at,
                &b.id,
            ))
        });
        let ids: Vec<CommandId> = due
            .iter()
            .take(request.limit.max(1) as usize)
            .map(|r| r.id.clone())
            .collect();
        let expires_at = add_duration(now, request.lease_duration);
        let mut claimed = Vec::with_capacity(ids.len());
        for id in ids {
            let StoreState {
                spaces,
                commands,
                prior_windows,
                ..
            } = &mut *state;
            let Some(record) = commands.get_mut(&id) else {
                continue;
            };
            // As the SQL stores: a takeover of an expired lease extends the replaced attempt's
            // window by the call deadline, and the new window covers it.
            let replaced = if record.status == CommandStatus::Processing {
                record
                    .attempt_window_ends_at
                    .map(|end| add_duration(end, request.call_deadline))
            } else {
                record.attempt_window_ends_at
            };
            prior_windows.insert(id.clone(), replaced);
            record.status = CommandStatus::Processing;
            record.lease_owner = Some(request.owner.clone());
            record.lease_expires_at = Some(expires_at);
            record.attempt_window_ends_at =
                Some(replaced.map_or(expires_at, |end| end.max(expires_at)));
            record.lease_epoch = record.lease_epoch.next();
            record.attempt_count = record.attempt_count.saturating_add(1);
            claimed.push(ClaimedCommand {
                tenant_id: record.tenant_id.clone(),
                control_space_id: record.control_space_id.clone(),
                operation_id: record.operation_id.clone(),
                idempotency_key: record.idempotency_key.clone(),
                operation: record.operation.clone(),
                payload: record.payload.clone(),
                attempt_count: record.attempt_count,
                attempt_budget_base: record.attempt_budget_base,
                lease: LeaseToken {
                    command_id: record.id.clone(),
                    owner: request.owner.clone(),
                    epoch: record.lease_epoch,
                    expires_at,
                },
                claimed_at: now,
                created_at: record.created_at,
                // Read under the same lock as the claim (the SQL stores read right after it).
                trace_context: record.trace_context.clone(),
                control_space: ClaimedControlSpace::Read(
                    spaces
                        .get(&(record.tenant_id.clone(), record.control_space_id.clone()))
                        .cloned(),
                ),
            });
        }
        Ok(claimed)
    }

    async fn next_due_in(&self, include_provision: bool) -> Result<Option<Duration>, StoreError> {
        self.check_fault()?;
        let now = self.clock.now();
        let state = lock(&self.state);
        let next = state
            .commands
            .values()
            .filter(|r| include_provision || r.operation != Operation::Provision)
            .filter_map(|r| match r.status {
                CommandStatus::Pending => Some(r.next_attempt_at),
                CommandStatus::Processing => Some(r.lease_expires_at.unwrap_or(now)),
                CommandStatus::Succeeded
                | CommandStatus::Superseded
                | CommandStatus::Failed
                | CommandStatus::Abandoned => None,
            })
            .min();
        Ok(next.map(|at| (at - now).to_std().unwrap_or(Duration::ZERO)))
    }

    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: std::time::Duration,
    ) -> Result<LeaseToken, SettleError> {
        self.check_fault()?;
        let now = self.clock.now();
        let mut state = lock(&self.state);
        let Some(record) = state
            .commands
            .get_mut(&lease.command_id)
            // As the SQL stores: only a live lease (expiry after the store's now) is renewed.
            // Planted (verification only): the renewal without its expiry check.
            .filter(|r| {
                holds_lease(r, lease)
                    && (r.lease_expires_at.is_some_and(|at| at > now)
                        || tenantry_kernel::planted!("renewal-of-expired-lease"))
            })
        else {
            return Err(SettleError::LeaseLost {
                command_id: lease.command_id.clone(),
            });
        };
        let expires_at = add_duration(now, lease_duration);
        record.lease_expires_at = Some(expires_at);
        record.attempt_window_ends_at = Some(
            record
                .attempt_window_ends_at
                .map_or(expires_at, |end| end.max(expires_at)),
        );
        Ok(LeaseToken {
            expires_at,
            ..lease.clone()
        })
    }

    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        self.check_fault()?;
        let now = self.clock.now();
        let mut state = lock(&self.state);
        // Check everything first: a settlement is all or nothing.
        if !state
            .commands
            .get(&lease.command_id)
            .is_some_and(|r| holds_lease(r, lease))
        {
            return Err(SettleError::LeaseLost {
                command_id: lease.command_id.clone(),
            });
        }
        if let Some(cas) = &settlement.control_space
            && !cas_matches(&state, cas)
        {
            return Err(SettleError::ControlSpaceConflict {
                control_space_id: cas.next.control_space_id.clone(),
            });
        }
        if let Some(supersede) = &settlement.supersede {
            let allowed = state
                .commands
                .get(&supersede.command_id)
                .is_some_and(|r| supersede_allowed(r, supersede.rule, now));
            if !allowed {
                return Err(SettleError::SupersedeRefused {
                    command_id: supersede.command_id.clone(),
                });
            }
        }
        if let Some(cas) = &settlement.control_space {
            let key = (
                cas.next.tenant_id.clone(),
                cas.next.control_space_id.clone(),
            );
            state.spaces.insert(key, cas.next.clone());
        }
        if let Some(supersede) = &settlement.supersede
            && let Some(r) = state.commands.get_mut(&supersede.command_id)
        {
            r.status = CommandStatus::Superseded;
            r.completed_at = Some(supersede.completed_at);
            r.last_error_code = Some(supersede.error.code.clone());
            r.last_error_message = Some(supersede.error.message.clone());
            release(r);
        }
        let prior = state
            .prior_windows
            .get(&lease.command_id)
            .copied()
            .flatten();
        let mut logged = None;
        if let (Some(outcome), Some(r)) = (
            &settlement.outcome,
            state.commands.get_mut(&lease.command_id),
        ) {
            r.attempt_window_ends_at = if settlement.may_have_sent {
                Some(prior.map_or(now, |end| end.max(now)))
            } else {
                prior
            };
            if !settlement.spends_attempt {
                r.attempt_budget_base = r.attempt_budget_base.saturating_add(1);
            }
            apply_outcome(r, outcome);
            let end = match outcome {
                CommandOutcome::Retry { .. } => Some(AttemptEnd::Retry),
                CommandOutcome::Fail { .. } => Some(AttemptEnd::Failed),
                CommandOutcome::Ack { .. } | CommandOutcome::Moot { .. } => None,
            };
            if let (Some(end), Some(error)) = (end, outcome.error()) {
                let entry = AttemptError {
                    command_id: r.id.clone(),
                    attempt: r.attempt_count,
                    end,
                    code: error.code.clone(),
                    message: error.message.clone(),
                    recorded_at: now,
                    lease_owner: Some(lease.owner.as_str().to_owned()),
                    actor: None,
                };
                logged = Some(entry);
            }
        }
        state.errors.extend(logged);
        Ok(())
    }

    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        Ok(state
            .commands
            .values()
            .filter(|r| {
                &r.tenant_id == tenant_id
                    && &r.control_space_id == control_space_id
                    && r.operation == Operation::Provision
            })
            .max_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
            .cloned())
    }

    async fn list_commands(
        &self,
        filter: &CommandFilter,
    ) -> Result<Vec<CommandRecord>, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        let mut rows: Vec<CommandRecord> = state
            .commands
            .values()
            .filter(|r| matches_filter(r, filter))
            .cloned()
            .collect();
        rows.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        if let Some(after) = &filter.after {
            match rows.iter().position(|r| &r.id == after) {
                Some(pos) => drop(rows.drain(..=pos)),
                None => rows.clear(),
            }
        } else if let Some(before) = &filter.before {
            match rows.iter().position(|r| &r.id == before) {
                Some(pos) => {
                    rows.truncate(pos);
                    let skip = rows.len().saturating_sub(filter.limit as usize);
                    rows.drain(..skip);
                }
                None => rows.clear(),
            }
        }
        rows.truncate(filter.limit as usize);
        Ok(rows)
    }
}
