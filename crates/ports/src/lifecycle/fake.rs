//! In-memory fakes of the lifecycle ports (feature `testing`).
//!
//! [`InMemoryLifecycleStore`] implements every storage role with the same rules as the SeaORM
//! adapter (it passes the same conformance suite). [`FakeKnowledgeFs`] is a scriptable remote:
//! it keeps spaces by provisioning key, drains deletions for a set number of polls, lags revoke
//! watermarks, and can fail or lose the answer of the next calls.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::intake::{ControlSpaceWrite, IntakePlan};
use tenantry_lifecycle::{
    CasUpdate, ClaimedCommand, ClaimedControlSpace, CommandOutcome, CommandRecord, CommandStatus,
    ControlSpace, DeletionPhase, DeletionProgress, DeletionRequest, LeaseToken, Operation,
    ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest, RevokeState, Settlement,
    SupersedeRule,
};

use crate::clock::{Clock, SystemClock};

use super::{
    ActionRecord, AttemptEnd, AttemptError, ClaimRequest, CommandAdmin, CommandCount,
    CommandFilter, CommandQueue, ControlSpaceReader, ErrorCodeCount, ErrorHistory, IntakeStore,
    IntakeStoreError, KnowledgeFs, LiveSummary, OperatorAction, OperatorActionError,
    OperatorActionKind, RemoteError, SettleError, SettledCommand, StoreError, Submitted,
    add_duration,
};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another test thread must not hide this test's result.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct StoreState {
    spaces: BTreeMap<(TenantId, ControlSpaceId), ControlSpace>,
    commands: BTreeMap<CommandId, CommandRecord>,
    /// Attempt window of each command before its current claim (the SQL column
    /// `prior_window_ends_at`), restored by a settle that sent nothing.
    prior_windows: HashMap<CommandId, Option<DateTime<Utc>>>,
    actions: Vec<ActionRecord>,
    /// The attempt-error log, in the order written.
    errors: Vec<AttemptError>,
}

/// In-memory implementation of the lifecycle storage ports. Clones share state.
///
/// Its clock plays the database clock of the SQL adapters: claims, lease expiries, renewals,
/// supersede rules and the stamps of new commands read it ([`with_clock`](Self::with_clock);
/// the system clock by default).
///
/// # Example
/// A store on a manual clock, read through the ports (the engine's examples enqueue and
/// dispatch over it, with [`FakeKnowledgeFs`] as the remote):
/// ```
/// use std::sync::Arc;
///
/// use chrono::{TimeZone, Utc};
/// use tenantry_kernel::{ControlSpaceId, TenantId};
/// use tenantry_ports::clock::ManualClock;
/// use tenantry_ports::lifecycle::ControlSpaceReader;
/// use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = ManualClock::new(Utc.timestamp_opt(1_800_000_000, 0).unwrap());
/// let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
/// let (tenant, space) = (TenantId::parse("acme")?, ControlSpaceId::parse("cs-1")?);
/// assert_eq!(store.control_space(&tenant, &space).await?, None);
/// assert!(store.commands().is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct InMemoryLifecycleStore {
    state: Arc<Mutex<StoreState>>,
    fail_next: Arc<Mutex<Option<StoreError>>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for InMemoryLifecycleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryLifecycleStore")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Default for InMemoryLifecycleStore {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            fail_next: Arc::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl InMemoryLifecycleStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose "database clock" is `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }

    /// Makes the next store call fail with `error` (then the store works again).
    pub fn fail_next_call(&self, error: StoreError) {
        *lock(&self.fail_next) = Some(error);
    }

    /// Every command, for assertions.
    pub fn commands(&self) -> Vec<CommandRecord> {
        lock(&self.state).commands.values().cloned().collect()
    }

    /// One command, for assertions.
    pub fn command(&self, id: &CommandId) -> Option<CommandRecord> {
        lock(&self.state).commands.get(id).cloned()
    }

    /// Overwrites a command row (test setup, e.g. an unknown operation or a corrupt payload).
    pub fn put_command(&self, record: CommandRecord) {
        lock(&self.state).commands.insert(record.id.clone(), record);
    }

    /// Overwrites a control space (test setup).
    pub fn put_control_space(&self, space: ControlSpace) {
        lock(&self.state).spaces.insert(
            (space.tenant_id.clone(), space.control_space_id.clone()),
            space,
        );
    }

    fn check_fault(&self) -> Result<(), StoreError> {
        match lock(&self.fail_next).take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

fn is_due(record: &CommandRecord, now: DateTime<Utc>) -> bool {
    match record.status {
        CommandStatus::Pending => record.next_attempt_at <= now,
        CommandStatus::Processing => record.lease_expires_at.is_none_or(|at| at <= now),
        CommandStatus::Succeeded
        | CommandStatus::Superseded
        | CommandStatus::Failed
        | CommandStatus::Abandoned => false,
    }
}

fn holds_lease(record: &CommandRecord, lease: &LeaseToken) -> bool {
    record.status == CommandStatus::Processing
        && record.lease_owner.as_ref() == Some(&lease.owner)
        && record.lease_epoch == lease.epoch
}

fn cas_matches(state: &StoreState, cas: &CasUpdate) -> bool {
    let key = (
        cas.next.tenant_id.clone(),
        cas.next.control_space_id.clone(),
    );
    state.spaces.get(&key).is_some_and(|cs| {
        cs.resource_version == cas.expected_resource_version && cs.state == cas.expected_state
    })
}

fn release(record: &mut CommandRecord) {
    record.lease_owner = None;
    record.lease_expires_at = None;
}

/// Writes a settled outcome onto the claimed command.
fn apply_outcome(r: &mut CommandRecord, outcome: &CommandOutcome) {
    r.status = outcome.status();
    if let Some(completed_at) = outcome.completed_at() {
        r.completed_at = Some(completed_at);
    }
    if let CommandOutcome::Retry {
        next_attempt_at, ..
    } = outcome
    {
        r.next_attempt_at = *next_attempt_at;
    }
    if let Some(error) = outcome.error() {
        r.last_error_code = Some(error.code.clone());
        r.last_error_message = Some(error.message.clone());
    }
    release(r);
}

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
        due.sort_by(|a, b| {
            (a.next_attempt_at, a.created_at, &a.id).cmp(&(b.next_attempt_at, b.created_at, &b.id))
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
            .filter(|r| holds_lease(r, lease) && r.lease_expires_at.is_some_and(|at| at > now))
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
            let allowed =
                state
                    .commands
                    .get(&supersede.command_id)
                    .is_some_and(|r| match supersede.rule {
                        SupersedeRule::Unattempted => {
                            r.status == CommandStatus::Pending && r.attempt_count == 0
                        }
                        SupersedeRule::AfterRemoteAbsence { grace, observed_at } => {
                            let open = r.status == CommandStatus::Pending
                                || (r.status == CommandStatus::Processing
                                    && r.lease_expires_at.is_none_or(|at| at <= now));
                            // Quiet when the lookup was sent (and by the store's clock).
                            let quiet = r.attempt_count == 0
                                || r.attempt_window_ends_at.is_none_or(|end| {
                                    add_duration(end, grace) <= observed_at.min(now)
                                });
                            open && quiet
                        }
                    });
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

#[async_trait]
impl ControlSpaceReader for InMemoryLifecycleStore {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        self.check_fault()?;
        Ok(lock(&self.state)
            .spaces
            .get(&(tenant_id.clone(), control_space_id.clone()))
            .cloned())
    }
}

#[async_trait]
impl IntakeStore for InMemoryLifecycleStore {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        self.check_fault()?;
        let mut state = lock(&self.state);
        if let Some(existing) = state
            .commands
            .values()
            .find(|r| r.idempotency_key == plan.command.idempotency_key)
        {
            return Ok(Submitted::Existing(existing.clone()));
        }
        match &plan.control_space {
            ControlSpaceWrite::Insert(space) => {
                let key = (space.tenant_id.clone(), space.control_space_id.clone());
                if state.spaces.contains_key(&key) {
                    return Err(IntakeStoreError::ControlSpaceExists);
                }
                state.spaces.insert(key, space.clone());
            }
            ControlSpaceWrite::Update(cas) => {
                let key = (
                    cas.next.tenant_id.clone(),
                    cas.next.control_space_id.clone(),
                );
                if !state.spaces.contains_key(&key) {
                    return Err(IntakeStoreError::UnknownControlSpace);
                }
                if !cas_matches(&state, cas) {
                    return Err(IntakeStoreError::ControlSpaceConflict {
                        control_space_id: cas.next.control_space_id.clone(),
                    });
                }
                state.spaces.insert(key, cas.next.clone());
            }
            ControlSpaceWrite::BumpRevokeSequence {
                tenant_id,
                control_space_id,
                expected,
            } => {
                let Some(cs) = state
                    .spaces
                    .get_mut(&(tenant_id.clone(), control_space_id.clone()))
                else {
                    return Err(IntakeStoreError::UnknownControlSpace);
                };
                if cs.last_revoke_sequence != *expected {
                    return Err(IntakeStoreError::ControlSpaceConflict {
                        control_space_id: control_space_id.clone(),
                    });
                }
                cs.last_revoke_sequence = expected.saturating_add(1);
            }
        }
        let c = &plan.command;
        let now = self.clock.now();
        let record = CommandRecord::enqueued(c, now);
        state.commands.insert(record.id.clone(), record.clone());
        Ok(Submitted::Created(record))
    }

    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.check_fault()?;
        Ok(lock(&self.state)
            .commands
            .values()
            .find(|r| &r.idempotency_key == key)
            .cloned())
    }
}

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
fn matches_filter(r: &CommandRecord, filter: &CommandFilter) -> bool {
    filter.matches(r)
}

/// A scripted reaction of [`FakeKnowledgeFs`] to the next call of one kind.
#[derive(Debug, Clone)]
pub enum RemoteFault {
    /// Answer with this error and do nothing.
    Fail(RemoteError),
    /// Apply the call, then report an unknown outcome (lost ACK).
    LoseAck,
}

/// Which remote call a [`RemoteFault`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteCall {
    /// `provision`.
    Provision,
    /// `find_by_provisioning_key`.
    Lookup,
    /// `request_deletion`.
    Deletion,
    /// `revoke_grant`.
    Revoke,
}

/// Counters of remote effects and calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteCounters {
    /// Spaces created (a replayed provision does not count).
    pub spaces_created: u64,
    /// Calls per kind, including failed ones.
    pub calls: HashMap<&'static str, u64>,
}

#[derive(Debug, Clone)]
struct FakeSpace {
    namespace_id: TenantId,
    knowledge_space_id: KnowledgeSpaceId,
    revision: i64,
    deletion_polls: Option<u32>,
}

#[derive(Default)]
struct RemoteState {
    spaces: HashMap<ProvisioningKey, FakeSpace>,
    /// Spaces whose deletion completed (at the revision of the `completed` answer), kept to
    /// answer a re-delivered deletion `completed` again, as the reference KnowledgeFS does.
    deleted: HashMap<ProvisioningKey, FakeSpace>,
    faults: HashMap<RemoteCall, VecDeque<RemoteFault>>,
    drain_polls: u32,
    revoke_lag: i64,
    counters: RemoteCounters,
    next_id: u64,
    hook: Option<Arc<dyn Fn(RemoteCall) + Send + Sync>>,
}

/// Scriptable in-memory KnowledgeFS. Clones share state.
#[derive(Clone, Default)]
pub struct FakeKnowledgeFs {
    state: Arc<Mutex<RemoteState>>,
}

impl std::fmt::Debug for FakeKnowledgeFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKnowledgeFs").finish_non_exhaustive()
    }
}

impl FakeKnowledgeFs {
    /// A remote that answers every call at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a fault for the next call of `call`.
    pub fn push_fault(&self, call: RemoteCall, fault: RemoteFault) {
        lock(&self.state)
            .faults
            .entry(call)
            .or_default()
            .push_back(fault);
    }

    /// Deletions answer `accepted`, then `draining` for `polls - 1` polls, then `irreversible`
    /// once, then `completed`. 0 (the default) completes at once.
    pub fn set_deletion_polls(&self, polls: u32) {
        lock(&self.state).drain_polls = polls;
    }

    /// Revocations report a watermark `lag` below the requested sequence.
    pub fn set_revoke_lag(&self, lag: i64) {
        lock(&self.state).revoke_lag = lag;
    }

    /// Runs `hook` at the start of every call (e.g. to probe that no transaction is open).
    pub fn set_hook(&self, hook: impl Fn(RemoteCall) + Send + Sync + 'static) {
        lock(&self.state).hook = Some(Arc::new(hook));
    }

    /// Puts a space in place as if an earlier provision had been applied.
    pub fn insert_space(
        &self,
        namespace_id: TenantId,
        provisioning_key: ProvisioningKey,
        knowledge_space_id: KnowledgeSpaceId,
        revision: i64,
    ) {
        lock(&self.state).spaces.insert(
            provisioning_key,
            FakeSpace {
                namespace_id,
                knowledge_space_id,
                revision,
                deletion_polls: None,
            },
        );
    }

    /// Drops the space of `key` as if it vanished out of band (removed by hand, or lost by
    /// the remote): its deletion is then answered `404 KNOWLEDGE_FS_SPACE_NOT_FOUND` and a
    /// lookup finds nothing (case 012).
    pub fn forget_space(&self, key: &ProvisioningKey) {
        let mut state = lock(&self.state);
        state.spaces.remove(key);
        state.deleted.remove(key);
    }

    /// Whether a (not deleted) space exists for `key`.
    pub fn has_space(&self, key: &ProvisioningKey) -> bool {
        lock(&self.state).spaces.contains_key(key)
    }

    /// Effect counters.
    pub fn counters(&self) -> RemoteCounters {
        lock(&self.state).counters.clone()
    }

    fn begin(&self, call: RemoteCall, name: &'static str) -> Option<RemoteFault> {
        let hook = {
            let mut state = lock(&self.state);
            *state.counters.calls.entry(name).or_default() += 1;
            state.hook.clone()
        };
        if let Some(hook) = hook {
            hook(call);
        }
        lock(&self.state)
            .faults
            .get_mut(&call)
            .and_then(VecDeque::pop_front)
    }
}

fn lost_ack() -> RemoteError {
    RemoteError::outcome_unknown("connection closed after the request was sent")
}

#[async_trait]
impl KnowledgeFs for FakeKnowledgeFs {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let fault = self.begin(RemoteCall::Provision, "provision");
        if let Some(RemoteFault::Fail(e)) = fault {
            return Err(e);
        }
        let mut state = lock(&self.state);
        let space = match state.spaces.get(&request.provisioning_key) {
            Some(existing) => existing.clone(),
            None => {
                state.next_id += 1;
                let space = FakeSpace {
                    namespace_id: request.namespace_id.clone(),
                    knowledge_space_id: KnowledgeSpaceId::parse(format!("ks-{}", state.next_id))
                        .map_err(|e| RemoteError::answered(500, "INTERNAL", e.to_string()))?,
                    revision: 1,
                    deletion_polls: None,
                };
                state.counters.spaces_created += 1;
                state
                    .spaces
                    .insert(request.provisioning_key.clone(), space.clone());
                space
            }
        };
        if let Some(RemoteFault::LoseAck) = fault {
            return Err(lost_ack());
        }
        Ok(RemoteSpace {
            namespace_id: space.namespace_id,
            knowledge_space_id: space.knowledge_space_id,
            revision: space.revision,
        })
    }

    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        _control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        match self.begin(RemoteCall::Lookup, "lookup") {
            Some(RemoteFault::Fail(e)) => return Err(e),
            Some(RemoteFault::LoseAck) => return Err(lost_ack()),
            None => {}
        }
        let state = lock(&self.state);
        // The namespace is not filtered here on purpose: the saga checks it.
        let _ = namespace_id;
        Ok(state.spaces.get(provisioning_key).map(|s| RemoteSpace {
            namespace_id: s.namespace_id.clone(),
            knowledge_space_id: s.knowledge_space_id.clone(),
            revision: s.revision,
        }))
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        let fault = self.begin(RemoteCall::Deletion, "deletion");
        if let Some(RemoteFault::Fail(e)) = fault {
            return Err(e);
        }
        let mut state = lock(&self.state);
        let drain = state.drain_polls;
        let key = request.provisioning_key.clone();
        let Some(space) = state
            .spaces
            .get_mut(&key)
            .filter(|s| s.knowledge_space_id == request.knowledge_space_id)
        else {
            // A re-delivered deletion of a space whose deletion completed (e.g. its answer was
            // lost) is answered `completed` again, as by the reference KnowledgeFS
            // (`tenantry_testkit::knowledge_fs`); only an unknown space is 404.
            let replay = state
                .deleted
                .get(&key)
                .filter(|s| s.knowledge_space_id == request.knowledge_space_id)
                .map(|s| DeletionProgress {
                    phase: DeletionPhase::Completed,
                    irreversible_at: None,
                    revision: s.revision,
                    retry_after: None,
                });
            return match (replay, fault) {
                (Some(_), Some(RemoteFault::LoseAck)) => Err(lost_ack()),
                (Some(progress), _) => Ok(progress),
                (None, _) => Err(RemoteError::answered(
                    404,
                    "KNOWLEDGE_FS_SPACE_NOT_FOUND",
                    "no such knowledge space",
                )),
            };
        };
        let polls = space.deletion_polls.map_or(1, |p| p + 1);
        space.deletion_polls = Some(polls);
        let revision = space.revision + 1;
        let phase = if polls > drain + 1 {
            DeletionPhase::Completed
        } else if polls == drain + 1 {
            DeletionPhase::Irreversible
        } else if polls == 1 {
            DeletionPhase::Accepted
        } else {
            DeletionPhase::Draining
        };
        let phase = if drain == 0 {
            DeletionPhase::Completed
        } else {
            phase
        };
        if phase == DeletionPhase::Completed
            && let Some(mut gone) = state.spaces.remove(&key)
        {
            gone.revision = revision;
            state.deleted.insert(key, gone);
        }
        if let Some(RemoteFault::LoseAck) = fault {
            return Err(lost_ack());
        }
        Ok(DeletionProgress {
            phase,
            irreversible_at: None,
            revision,
            retry_after: None,
        })
    }

    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        let fault = self.begin(RemoteCall::Revoke, "revoke");
        if let Some(RemoteFault::Fail(e)) = fault {
            return Err(e);
        }
        let lag = {
            let mut state = lock(&self.state);
            let lag = state.revoke_lag;
            state.revoke_lag = (lag - 1).max(0);
            lag
        };
        if let Some(RemoteFault::LoseAck) = fault {
            return Err(lost_ack());
        }
        Ok(RevokeAck {
            state: RevokeState::Revoked,
            highest_revoke_sequence: request.revoke_sequence - lag,
        })
    }
}

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
