//! The fake store's operator reads and actions ([`CommandAdmin`]): retry, abandon, the action and
//! error logs, counts and the live summary.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tenantry_kernel::CommandId;
use tenantry_lifecycle::{CommandRecord, CommandStatus};

use super::{InMemoryLifecycleStore, lock, release};
use crate::lifecycle::{
    ActionRecord, AttemptEnd, AttemptError, CommandAdmin, CommandCount, CommandFilter,
    ErrorCodeCount, ErrorHistory, LiveSummary, OperatorAction, OperatorActionError,
    OperatorActionKind, SettledCommand, StoreError,
};

#[async_trait]
impl CommandAdmin for InMemoryLifecycleStore {
    async fn act_on_command(
        &self,
        action: &OperatorAction,
    ) -> Result<CommandRecord, OperatorActionError> {
        self.check_fault()?;
        // Due at once by the store's clock (the database clock of the SQL adapters).
        let now = self.clock.now();
        let mut state = lock(&self.state);
        let Some(r) = state.commands.get_mut(&action.command_id) else {
            return Err(OperatorActionError::UnknownCommand {
                command_id: action.command_id.clone(),
            });
        };
        if !tenantry_lifecycle::operator::accepts_action(
            r.status,
            action.kind == OperatorActionKind::MarkDeleted,
        ) {
            return Err(OperatorActionError::NotActionable {
                command_id: r.id.clone(),
                status: r.status,
            });
        }
        let cs_key = (r.tenant_id.clone(), r.control_space_id.clone());
        let cs = state.spaces.get(&cs_key).cloned();
        let Some(r) = state.commands.get(&action.command_id).cloned() else {
            return Err(OperatorActionError::UnknownCommand {
                command_id: action.command_id.clone(),
            });
        };
        let mark_deleted =
            match action.kind {
                OperatorActionKind::Abandon => {
                    if let Some(refusal) =
                        tenantry_lifecycle::operator::abandon_refusal(&r, cs.as_ref())
                    {
                        return Err(refusal.into());
                    }
                    None
                }
                OperatorActionKind::MarkDeleted => Some(
                    tenantry_lifecycle::operator::mark_deleted(&r, cs.as_ref(), now)?,
                ),
                OperatorActionKind::Retry => None,
            };
        if let Some(cas) = mark_deleted {
            state.spaces.insert(cs_key, cas.next);
        }
        let Some(r) = state.commands.get_mut(&action.command_id) else {
            return Err(OperatorActionError::UnknownCommand {
                command_id: action.command_id.clone(),
            });
        };
        // As the SQL stores: recorded at the store's time, not the caller's.
        let record = ActionRecord {
            action: OperatorAction {
                at: now,
                ..action.clone()
            },
            previous_status: r.status,
            previous_error_code: r.last_error_code.clone(),
            attempt_count: r.attempt_count,
        };
        match action.kind {
            OperatorActionKind::Retry => {
                r.status = CommandStatus::Pending;
                r.next_attempt_at = now;
                r.attempt_budget_base = r.attempt_count;
                r.completed_at = None;
            }
            OperatorActionKind::Abandon | OperatorActionKind::MarkDeleted => {
                r.status = CommandStatus::Abandoned;
                r.completed_at = Some(now);
                r.last_error_code =
                    Some(tenantry_lifecycle::ErrorCode::AbandonedByOperator.to_owned());
                r.last_error_message = Some(action.reason.clone());
            }
        }
        release(r);
        let after = r.clone();
        state.actions.push(record);
        if action.kind.abandons() {
            state.errors.push(AttemptError {
                command_id: after.id.clone(),
                attempt: after.attempt_count,
                end: AttemptEnd::Abandoned,
                code: tenantry_lifecycle::ErrorCode::AbandonedByOperator.to_owned(),
                message: action.reason.clone(),
                recorded_at: now,
                lease_owner: None,
                actor: Some(action.actor.clone()),
            });
        }
        Ok(after)
    }

    async fn command_actions(
        &self,
        command_id: &CommandId,
    ) -> Result<Vec<ActionRecord>, StoreError> {
        self.check_fault()?;
        Ok(lock(&self.state)
            .actions
            .iter()
            .filter(|a| &a.action.command_id == command_id)
            .cloned()
            .collect())
    }

    async fn command_errors(
        &self,
        command_id: &CommandId,
        limit: u32,
    ) -> Result<ErrorHistory, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        let mut entries: Vec<AttemptError> = state
            .errors
            .iter()
            .filter(|e| &e.command_id == command_id)
            .cloned()
            .collect();
        let total = entries.len() as u64;
        // Newest first; entries written in the same instant keep their write order, reversed.
        entries.reverse();
        entries.sort_by_key(|e| std::cmp::Reverse((e.recorded_at, e.attempt)));
        entries.truncate(limit as usize);
        Ok(ErrorHistory { entries, total })
    }

    async fn command_by_id(
        &self,
        command_id: &CommandId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.check_fault()?;
        Ok(lock(&self.state).commands.get(command_id).cloned())
    }

    async fn count_commands(
        &self,
        statuses: &[CommandStatus],
    ) -> Result<Vec<CommandCount>, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        let mut counts: BTreeMap<(&'static str, String), CommandCount> = BTreeMap::new();
        for r in state.commands.values() {
            if !statuses.contains(&r.status) {
                continue;
            }
            counts
                .entry((r.status.as_str(), r.operation.as_str().to_owned()))
                .or_insert_with(|| CommandCount {
                    status: r.status,
                    operation: r.operation.clone(),
                    count: 0,
                })
                .count += 1;
        }
        Ok(counts.into_values().collect())
    }

    async fn count_matching(&self, filter: &CommandFilter) -> Result<u64, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        Ok(state
            .commands
            .values()
            .filter(|r| matches_filter(r, filter))
            .count() as u64)
    }

    async fn count_by_error_code(
        &self,
        status: CommandStatus,
        limit: u32,
    ) -> Result<Vec<ErrorCodeCount>, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        let mut groups: BTreeMap<Option<String>, u64> = BTreeMap::new();
        for r in state.commands.values().filter(|r| r.status == status) {
            *groups
                .entry(r.last_error_code.as_ref().map(|c| c.as_str().to_owned()))
                .or_default() += 1;
        }
        let mut counts: Vec<ErrorCodeCount> = groups
            .into_iter()
            .map(|(code, count)| ErrorCodeCount {
                code: code.map(tenantry_lifecycle::ErrorCode::from),
                count,
            })
            .collect();
        counts.sort_by(|a, b| {
            b.count.cmp(&a.count).then_with(|| {
                let key = |c: &ErrorCodeCount| c.code.as_ref().map(|c| c.as_str().to_owned());
                key(a).cmp(&key(b))
            })
        });
        counts.truncate(limit as usize);
        Ok(counts)
    }

    async fn settled_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<SettledCommand>, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        let mut settled: Vec<SettledCommand> = state
            .commands
            .values()
            .filter(|r| r.status == CommandStatus::Succeeded)
            .filter_map(|r| {
                r.completed_at
                    .filter(|at| *at >= since)
                    .map(|completed_at| SettledCommand {
                        created_at: r.created_at,
                        completed_at,
                    })
            })
            .collect();
        settled.sort_by_key(|s| std::cmp::Reverse(s.completed_at));
        settled.truncate(limit as usize);
        Ok(settled)
    }

    async fn live_summary(&self) -> Result<LiveSummary, StoreError> {
        self.check_fault()?;
        let state = lock(&self.state);
        let oldest_pending_created_at = state
            .commands
            .values()
            .filter(|r| r.status == CommandStatus::Pending)
            .map(|r| r.created_at)
            .min();
        let mut owners: BTreeMap<String, u64> = BTreeMap::new();
        for r in state.commands.values() {
            if r.status == CommandStatus::Processing
                && let Some(owner) = &r.lease_owner
            {
                *owners.entry(owner.as_str().to_owned()).or_default() += 1;
            }
        }
        Ok(LiveSummary {
            oldest_pending_created_at,
            lease_owners: owners.into_iter().collect(),
        })
    }
}

/// Whether `r` matches every field of `filter` but the cursor and the limit.
pub(super) fn matches_filter(r: &CommandRecord, filter: &CommandFilter) -> bool {
    filter.matches(r)
}
