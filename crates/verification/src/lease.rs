//! Model of the lifecycle saga's leased outbox: 3 workers, one control space, its provision
//! command and (once requested) its delete command.
//!
//! Every saga decision is the real pure function of `tenantry_lifecycle::saga::Step`
//! (`start_provision`, `complete_provision`, `start_delete`, `deletion_target`,
//! `recover_identity`, `complete_absent`, `settle_deletion`, `remote_failure`, `retry`), every
//! control-space change the real `ControlSpace::plan` / `apply`, every epoch
//! `LeaseEpoch::next`. The store's own rules (claim: due or lease expired; settle and renew:
//! compare-and-set on owner and epoch; the supersede rules re-checked on the store's clock and
//! the lookup's send time; the control-space compare-and-set) are SQL statements in
//! `store-seaorm`; the model applies them
//! as the in-memory store of `tenantry-ports` does (`is_due`, `holds_lease`, the supersede
//! check) — written out in [`LeaseProtocol`]'s store functions below, one line each.
//!
//! Time is a tick (one second of the store's clock). A worker judges its lease on its own
//! monotonic deadline, counted from before the claim (the engine's `lease` module); worker 2's
//! wall clock runs [`SKEW`] behind, which only matters to the planted bug that judges leases on
//! the wall clock. The remote is a KnowledgeFS that keeps one space per provisioning key and,
//! as the real one
//! does, refuses to provision a key whose space it deleted (409 `KNOWLEDGE_FS_SPACE_DELETED`,
//! permanent): the saga relies on that contract (docs/protocol.md).

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use stateright::{Model, Property};
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, LeaseEpoch, LeaseOwner,
    OperationId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::saga::{
    AbsentOutcome, DeleteStart, DeletionTarget, ProvisionStart, Recovery, Step,
};
use tenantry_lifecycle::{
    ClaimedCommand, CommandOutcome, CommandRecord, CommandStatus, ControlSpace, ControlSpaceState,
    DeletePayload, DeletionPhase, DeletionProgress, ErrorCode, LeaseToken, Operation,
    ProvisionPayload, RemoteSpace, RetryPolicy, Settlement, SupersedeRule, Transition,
};

/// Number of workers.
pub const WORKERS: usize = 3;
/// Lease duration, ticks.
pub const LEASE_TICKS: u8 = 2;
/// Grace period after a provision's attempt window before absence proves a deletion, ticks.
pub const GRACE_TICKS: u8 = 1;
/// How far each worker's wall clock runs behind the store's, ticks.
pub const SKEW: [u8; WORKERS] = [0, 0, 1];
/// Claims per command the model explores (a bound of the search, not a rule).
pub const MAX_CLAIMS: u8 = 2;

const PROVISION: usize = 0;
const DELETE: usize = 1;

/// A deliberately broken rule, to show the checker finds what it must.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseBug {
    /// The real rules.
    None,
    /// The store settles without comparing the lease epoch (and owner).
    SettleWithoutEpochCheck,
    /// The store claims a processing command whose lease has not expired.
    ClaimWithoutExpiryCheck,
    /// Workers judge their lease on their own wall clock against the lease's expiry instead of
    /// a monotonic deadline counted from before the claim.
    LeaseCheckOnWallClock,
    /// The absence rule (`complete_absent` and the store's `AfterRemoteAbsence` re-check) is
    /// judged when the lookup's answer is acted on instead of when the lookup was sent (the
    /// reference's rule; docs/verification.md, "Finding: slow lookups"). Only a slow lookup
    /// shows it, so [`LeaseProtocol::with_bug`] turns `slow_lookups` on for it.
    AbsenceJudgedAtAnswer,
}

/// The lease-protocol model: [`LeaseBug`] variant and how many ticks time may advance.
#[derive(Debug, Clone)]
pub struct LeaseProtocol {
    /// Planted bug, or [`LeaseBug::None`].
    pub bug: LeaseBug,
    /// Last tick time may reach.
    pub max_time: u8,
    /// Whether time may pass between a lookup's answer and the decision taken on it (a slow
    /// lookup). The engine decides on the store's clock *after* the answer but judges the
    /// absence rule at the time the lookup was sent, so a late provision landing meanwhile is
    /// not missed (docs/verification.md, "Finding: slow lookups"; the planted bug
    /// [`LeaseBug::AbsenceJudgedAtAnswer`] shows what judging at the answer misses). Off in
    /// the default model (it multiplies the states); `tests/models.rs` checks it on.
    pub slow_lookups: bool,
}

impl LeaseProtocol {
    /// The real rules with the default bound (3 ticks: a lease, its expiry and a reclaim).
    pub fn correct() -> Self {
        Self::with_bug(LeaseBug::None)
    }

    /// A planted-bug variant with the default bound (slow lookups on for
    /// [`LeaseBug::AbsenceJudgedAtAnswer`], which only they show).
    pub fn with_bug(bug: LeaseBug) -> Self {
        Self {
            bug,
            max_time: 3,
            slow_lookups: bug == LeaseBug::AbsenceJudgedAtAnswer,
        }
    }
}

/// One outbox row, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutboxRow {
    /// Whether intake created it (the delete row appears on request).
    pub enqueued: bool,
    /// Status.
    pub status: CommandStatus,
    /// Current lease owner (worker index).
    pub owner: Option<u8>,
    /// Lease epoch.
    pub epoch: u8,
    /// Lease expiry, tick.
    pub expires: u8,
    /// Earliest next claim, tick.
    pub next_at: u8,
    /// Claims so far.
    pub claims: u8,
    /// Attempt window end (see `CommandRecord::attempt_window_ends_at`), tick.
    pub window_end: Option<u8>,
    /// The window before the current claim (restored by a settle that sent nothing).
    pub prior_window: Option<u8>,
}

impl OutboxRow {
    fn new(enqueued: bool) -> Self {
        Self {
            enqueued,
            status: CommandStatus::Pending,
            owner: None,
            epoch: 0,
            expires: 0,
            next_at: 0,
            claims: 0,
            window_end: None,
            prior_window: None,
        }
    }
}

/// The control space, abstracted to what the rules read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpaceView {
    /// State.
    pub state: ControlSpaceState,
    /// Whether the delete operation owns it (else the provision).
    pub owned_by_delete: bool,
    /// Resource version.
    pub version: u8,
    /// Registered remote space (index).
    pub space: Option<u8>,
    /// Registered revision.
    pub revision: u8,
    /// Whether `deletion_irreversible_at` is set.
    pub irreversible: bool,
}

/// A remote call a worker is about to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KfsCall {
    /// Provision by provisioning key.
    Provision,
    /// Lookup by provisioning key (lost-ACK recovery).
    Lookup,
    /// Delete the space with this index.
    Delete(u8),
}

/// What a call answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallAnswer {
    /// The provision answered with the space of this index.
    Provisioned(u8),
    /// The lookup answered (a space or none); the provision row read right after it.
    Looked {
        /// The tick the lookup was sent (and, in the model, answered).
        sent_at: u8,
        /// The space found.
        found: Option<u8>,
        /// The provision row read after the lookup.
        provision: OutboxRow,
    },
    /// The deletion completed.
    Deleted,
    /// The answer was lost: outcome unknown.
    Unknown,
    /// The provision was refused: the key's space was deleted (409).
    SpaceDeleted,
}

/// Where a worker is in its attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttemptPhase {
    /// Claimed, nothing read yet.
    Claimed,
    /// Read the control space and decided to call.
    ToCall(KfsCall),
    /// The call ended.
    Answered(CallAnswer),
}

/// A worker holding a lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeldLease {
    /// Command index.
    pub cmd: u8,
    /// Epoch of the claim.
    pub epoch: u8,
    /// Lease expiry (and the worker's monotonic deadline), tick.
    pub expires: u8,
    /// Claim tick.
    pub claimed_at: u8,
    /// Claims of the command including this one.
    pub claims: u8,
    /// Progress.
    pub phase: AttemptPhase,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseState {
    /// Store clock, tick.
    pub now: u8,
    /// Outbox rows: provision, delete.
    pub rows: [OutboxRow; 2],
    /// The control space.
    pub cs: SpaceView,
    /// Remote spaces ever created for the provisioning key.
    pub created: u8,
    /// The remote space that exists now (index), if any.
    pub alive: Option<u8>,
    /// KnowledgeFS keeps a tombstone of a deleted key and refuses to provision it again (409
    /// `KNOWLEDGE_FS_SPACE_DELETED`, permanent).
    pub tombstone: bool,
    /// Workers: `None` idle (or crashed and restarted).
    pub workers: [Option<HeldLease>; WORKERS],
    /// A settle was accepted from a lease epoch that was not the command's current one.
    pub stale_settle_accepted: bool,
}

/// One step of the system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LeaseAction {
    /// Time advances one tick.
    Tick,
    /// A user requests the deletion (intake: `BeginDeletion`, delete command enqueued).
    RequestDelete,
    /// Worker claims command.
    Claim(u8, u8),
    /// Worker renews its lease.
    Renew(u8),
    /// Worker reads the control space and decides.
    Read(u8),
    /// Worker makes its call; `answered`: the answer arrives; `landed`: the request took
    /// effect (a lost answer may or may not have).
    Call {
        /// Worker.
        worker: u8,
        /// The answer arrives.
        answered: bool,
        /// The request took effect remotely.
        landed: bool,
    },
    /// Worker settles.
    Settle(u8),
    /// Worker crashes (its attempt is dropped; restarts idle).
    Crash(u8),
}

fn t(tick: u8) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + i64::from(tick), 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn tick_of(at: DateTime<Utc>) -> u8 {
    u8::try_from(at.timestamp() - 1_800_000_000).unwrap_or(u8::MAX)
}

// The literals below are valid ids; a parse failure would be a defect of this model.
#[allow(clippy::expect_used)]
mod ids {
    use super::*;
    pub fn tenant() -> TenantId {
        TenantId::parse("t1").expect("valid id")
    }
    pub fn space() -> ControlSpaceId {
        ControlSpaceId::parse("cs1").expect("valid id")
    }
    pub fn op(cmd: usize) -> OperationId {
        OperationId::parse(if cmd == PROVISION { "op-p" } else { "op-d" }).expect("valid id")
    }
    pub fn command(cmd: usize) -> CommandId {
        CommandId::parse(if cmd == PROVISION { "c-p" } else { "c-d" }).expect("valid id")
    }
    pub fn key(cmd: usize) -> IdempotencyKey {
        IdempotencyKey::parse(if cmd == PROVISION { "k-p" } else { "k-d" }).expect("valid id")
    }
    pub fn pk() -> ProvisioningKey {
        ProvisioningKey::parse("pk").expect("valid id")
    }
    pub fn ks(index: u8) -> KnowledgeSpaceId {
        KnowledgeSpaceId::parse(format!("ks-{index}")).expect("valid id")
    }
    pub fn owner(worker: u8) -> LeaseOwner {
        LeaseOwner::parse(format!("w{worker}")).expect("valid id")
    }
}

fn ks_index(id: &KnowledgeSpaceId) -> u8 {
    id.as_str()
        .strip_prefix("ks-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u8::MAX)
}

fn control_space(cs: &SpaceView) -> ControlSpace {
    ControlSpace {
        tenant_id: ids::tenant(),
        control_space_id: ids::space(),
        state: cs.state,
        lifecycle_operation_id: ids::op(if cs.owned_by_delete {
            DELETE
        } else {
            PROVISION
        }),
        resource_version: i64::from(cs.version),
        provisioning_key: ids::pk(),
        knowledge_space_id: cs.space.map(ids::ks),
        knowledge_space_revision: i64::from(cs.revision),
        deletion_irreversible_at: cs.irreversible.then(|| t(0)),
        last_revoke_sequence: 0,
        created_at: t(0),
        updated_at: t(0),
    }
}

fn abstract_cs(cs: &ControlSpace) -> SpaceView {
    SpaceView {
        state: cs.state,
        owned_by_delete: cs.lifecycle_operation_id == ids::op(DELETE),
        version: u8::try_from(cs.resource_version).unwrap_or(u8::MAX),
        space: cs.knowledge_space_id.as_ref().map(ks_index),
        revision: u8::try_from(cs.knowledge_space_revision).unwrap_or(u8::MAX),
        irreversible: cs.deletion_irreversible_at.is_some(),
    }
}

fn record(cmd: usize, row: &OutboxRow) -> CommandRecord {
    CommandRecord {
        id: ids::command(cmd),
        tenant_id: ids::tenant(),
        control_space_id: ids::space(),
        operation_id: ids::op(cmd),
        idempotency_key: ids::key(cmd),
        request_fingerprint: tenantry_kernel::fingerprint_json(&json!(cmd)),
        operation: operation(cmd),
        payload: payload(cmd),
        status: row.status,
        attempt_count: i32::from(row.claims),
        attempt_budget_base: 0,
        lease_owner: row.owner.map(ids::owner),
        lease_expires_at: row.owner.map(|_| t(row.expires)),
        lease_epoch: LeaseEpoch(i64::from(row.epoch)),
        next_attempt_at: t(row.next_at),
        last_error_code: None,
        last_error_message: None,
        created_at: t(0),
        completed_at: None,
        attempt_window_ends_at: row.window_end.map(t),
    }
}

fn operation(cmd: usize) -> Operation {
    if cmd == PROVISION {
        Operation::Provision
    } else {
        Operation::Delete
    }
}

fn payload(cmd: usize) -> serde_json::Value {
    if cmd == PROVISION {
        json!({"provisioning_key": "pk", "name": "Docs", "slug": "docs"})
    } else {
        json!({"provisioning_key": "pk"})
    }
}

fn provision_payload() -> ProvisionPayload {
    ProvisionPayload {
        provisioning_key: ids::pk(),
        name: "Docs".into(),
        slug: "docs".into(),
        icon: String::new(),
        description: String::new(),
        model_intent: None,
        profile_intent: None,
    }
}

fn delete_payload() -> DeletePayload {
    DeletePayload {
        provisioning_key: ids::pk(),
    }
}

fn claimed(worker: u8, held: &HeldLease) -> ClaimedCommand {
    let cmd = usize::from(held.cmd);
    ClaimedCommand {
        tenant_id: ids::tenant(),
        control_space_id: ids::space(),
        operation_id: ids::op(cmd),
        idempotency_key: ids::key(cmd),
        operation: operation(cmd),
        payload: payload(cmd),
        attempt_count: i32::from(held.claims),
        attempt_budget_base: 0,
        lease: LeaseToken {
            command_id: ids::command(cmd),
            owner: ids::owner(worker),
            epoch: LeaseEpoch(i64::from(held.epoch)),
            expires_at: t(held.expires),
        },
        claimed_at: t(held.claimed_at),
        created_at: t(0),
        control_space: tenantry_lifecycle::ClaimedControlSpace::NotRead,
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: u32::from(MAX_CLAIMS),
        ..RetryPolicy::default()
    }
}

fn remote_space(index: u8) -> RemoteSpace {
    RemoteSpace {
        namespace_id: ids::tenant(),
        knowledge_space_id: ids::ks(index),
        revision: 1,
    }
}

/// Why the store refused a settlement.
enum Refused {
    LeaseLost,
    Conflict,
}

impl LeaseProtocol {
    /// Whether `worker` believes the lease it holds is live (and so may call the remote).
    fn believes_live(&self, state: &LeaseState, worker: usize, held: &HeldLease) -> bool {
        match self.bug {
            LeaseBug::LeaseCheckOnWallClock => {
                held.expires > state.now.saturating_sub(SKEW[worker])
            }
            _ => held.expires > state.now,
        }
    }

    /// Store rule: a command is claimable when pending and due, or processing with an expired
    /// lease (`is_due` / the claim statement's `WHERE`).
    fn claimable(&self, state: &LeaseState, row: &OutboxRow) -> bool {
        row.enqueued
            && row.claims < MAX_CLAIMS
            && match row.status {
                CommandStatus::Pending => row.next_at <= state.now,
                CommandStatus::Processing => {
                    self.bug == LeaseBug::ClaimWithoutExpiryCheck || row.expires <= state.now
                }
                _ => false,
            }
    }

    /// Store rule: a settle or renewal matches the row only with the same owner and epoch
    /// while processing (`holds_lease` / the settle statement's compare-and-set).
    fn holds_lease(row: &OutboxRow, worker: u8, epoch: u8) -> bool {
        row.status == CommandStatus::Processing && row.owner == Some(worker) && row.epoch == epoch
    }

    /// Store rule: whether a supersede of `row` may be written now.
    fn supersede_allowed(&self, state: &LeaseState, row: &OutboxRow, rule: SupersedeRule) -> bool {
        match rule {
            SupersedeRule::Unattempted => row.status == CommandStatus::Pending && row.claims == 0,
            SupersedeRule::AfterRemoteAbsence { grace, observed_at } => {
                let grace = u8::try_from(grace.as_secs()).unwrap_or(u8::MAX);
                let observed = tick_of(observed_at).min(state.now);
                let open = row.status == CommandStatus::Pending
                    || (row.status == CommandStatus::Processing && row.expires <= state.now);
                let quiet = row.claims == 0
                    || row
                        .window_end
                        .is_none_or(|end| end.saturating_add(grace) <= observed);
                open && quiet
            }
        }
    }

    /// The settle statement: all or nothing.
    fn apply(
        &self,
        state: &mut LeaseState,
        worker: u8,
        held: &HeldLease,
        settlement: &Settlement,
    ) -> Result<(), Refused> {
        let cmd = usize::from(held.cmd);
        let row = &state.rows[cmd];
        if !Self::holds_lease(row, worker, held.epoch) {
            if self.bug != LeaseBug::SettleWithoutEpochCheck || row.status.is_terminal() {
                return Err(Refused::LeaseLost);
            }
            state.stale_settle_accepted = true;
        }
        if let Some(cas) = &settlement.control_space
            && (i64::from(state.cs.version) != cas.expected_resource_version
                || state.cs.state != cas.expected_state)
        {
            return Err(Refused::Conflict);
        }
        if let Some(supersede) = &settlement.supersede {
            let target = if supersede.command_id == ids::command(PROVISION) {
                PROVISION
            } else {
                DELETE
            };
            if !self.supersede_allowed(state, &state.rows[target], supersede.rule) {
                return Err(Refused::Conflict);
            }
            let r = &mut state.rows[target];
            r.status = CommandStatus::Superseded;
            r.owner = None;
        }
        if let Some(cas) = &settlement.control_space {
            state.cs = abstract_cs(&cas.next);
        }
        if let Some(outcome) = &settlement.outcome {
            let now = state.now;
            let r = &mut state.rows[cmd];
            r.window_end = if settlement.may_have_sent {
                Some(now)
            } else {
                r.prior_window
            };
            r.status = outcome.status();
            r.owner = None;
            if let CommandOutcome::Retry {
                next_attempt_at, ..
            } = outcome
            {
                r.next_at = tick_of(*next_attempt_at);
            }
        }
        Ok(())
    }

    /// Settles `settlement`; a refused compare-and-set settles a retry instead, as the
    /// dispatcher does (`CONTROL_SPACE_CONFLICT`).
    fn settle(
        &self,
        state: &mut LeaseState,
        worker: u8,
        held: &HeldLease,
        settlement: &Settlement,
    ) {
        if let Err(Refused::Conflict) = self.apply(state, worker, held, settlement) {
            let command = claimed(worker, held);
            let policy = policy();
            let step = self.step(&command, &policy, state.now);
            let retry = step.retry(ErrorCode::ControlSpaceConflict, "refused", None);
            let _ = self.apply(state, worker, held, &retry);
        }
    }

    fn step<'a>(&self, command: &'a ClaimedCommand, policy: &'a RetryPolicy, now: u8) -> Step<'a> {
        Step {
            command,
            now: t(now),
            policy,
            jitter_draw: 0.0,
        }
    }

    /// What `worker` does when it reads the control space (and the provision row) in
    /// `AttemptPhase::Claimed`: a call to make, or a settlement to write without calling.
    fn read(
        &self,
        state: &LeaseState,
        worker: u8,
        held: &HeldLease,
    ) -> Result<KfsCall, Box<Settlement>> {
        let command = claimed(worker, held);
        let policy = policy();
        let step = self.step(&command, &policy, state.now);
        let cs = control_space(&state.cs);
        if usize::from(held.cmd) == PROVISION {
            return match step.start_provision(&provision_payload(), Some(&cs)) {
                ProvisionStart::Deliver(_) => Ok(KfsCall::Provision),
                ProvisionStart::SettleWithoutDelivery(s) => Err(Box::new(s)),
            };
        }
        let provision = record(PROVISION, &state.rows[PROVISION]);
        match step.start_delete(Some(&cs), Some(&provision), true) {
            DeleteStart::AlreadyDeleted(s) | DeleteStart::NeverProvisioned(s) => {
                return Err(Box::new(s));
            }
            DeleteStart::Continue => {}
        }
        match step.deletion_target(&delete_payload(), Some(&cs)) {
            Ok(DeletionTarget::Known(request)) => {
                Ok(KfsCall::Delete(ks_index(&request.knowledge_space_id)))
            }
            Ok(DeletionTarget::Lookup) => Ok(KfsCall::Lookup),
            Err(e) => Err(Box::new(step.step_error(&e))),
        }
    }

    /// What an answered attempt leads to, computed on the control space as it is now: a
    /// settlement, or (a recovered identity) a registration to write keeping the lease and the
    /// deletion call to make next.
    fn conclude(
        &self,
        state: &LeaseState,
        worker: u8,
        held: &HeldLease,
        answer: &CallAnswer,
    ) -> Conclusion {
        let command = claimed(worker, held);
        let policy = policy();
        let step = self.step(&command, &policy, state.now);
        let cs = control_space(&state.cs);
        match answer {
            CallAnswer::Unknown => Conclusion::Settle(step.remote_failure(
                None,
                &ErrorCode::RemoteOutcomeUnknown,
                "answer lost",
                None,
            )),
            CallAnswer::SpaceDeleted => Conclusion::Settle(step.remote_failure(
                Some(409),
                &ErrorCode::KnowledgeFsSpaceDeleted,
                "the space of this provisioning key was deleted",
                None,
            )),
            CallAnswer::Provisioned(index) => Conclusion::Settle(
                step.complete_provision(Some(&cs), &remote_space(*index))
                    .unwrap_or_else(|e| step.step_error(&e)),
            ),
            CallAnswer::Deleted => Conclusion::Settle(
                step.settle_deletion(
                    Some(&cs),
                    &DeletionProgress {
                        phase: DeletionPhase::Completed,
                        irreversible_at: None,
                        revision: 1,
                        retry_after: None,
                    },
                )
                .unwrap_or_else(|e| step.step_error(&e)),
            ),
            CallAnswer::Looked {
                sent_at,
                found,
                provision,
            } => {
                let found = found.map(remote_space);
                match step.recover_identity(&delete_payload(), found.as_ref(), Some(&cs)) {
                    Ok(Recovery::Resolved {
                        request,
                        registration,
                    }) => Conclusion::Continue(
                        registration,
                        KfsCall::Delete(ks_index(&request.knowledge_space_id)),
                    ),
                    Ok(Recovery::Retry(s)) => Conclusion::Settle(s),
                    Err(e) => Conclusion::Settle(step.step_error(&e)),
                    Ok(Recovery::Absent) => {
                        let provision = record(PROVISION, provision);
                        let grace = Duration::from_secs(u64::from(GRACE_TICKS));
                        let observed_at = match self.bug {
                            LeaseBug::AbsenceJudgedAtAnswer => step.now,
                            _ => t(*sent_at),
                        };
                        Conclusion::Settle(
                            match step.complete_absent(
                                Some(&cs),
                                Some(&provision),
                                grace,
                                observed_at,
                            ) {
                                AbsentOutcome::Complete(s)
                                | AbsentOutcome::Unconfirmed(s)
                                | AbsentOutcome::NotFound(s) => s,
                            },
                        )
                    }
                }
            }
        }
    }
}

/// What an answered attempt leads to.
enum Conclusion {
    /// Settle this and end the attempt.
    Settle(Settlement),
    /// Write the registration (if any) keeping the lease, then make this call.
    Continue(Option<Settlement>, KfsCall),
}

impl Model for LeaseProtocol {
    type State = LeaseState;
    type Action = LeaseAction;

    fn init_states(&self) -> Vec<LeaseState> {
        // Intake created the control space (provisioning, owned by the provision) and its
        // provision command in one transaction.
        vec![LeaseState {
            now: 0,
            rows: [OutboxRow::new(true), OutboxRow::new(false)],
            cs: SpaceView {
                state: ControlSpaceState::Provisioning,
                owned_by_delete: false,
                version: 1,
                space: None,
                revision: 0,
                irreversible: false,
            },
            created: 0,
            alive: None,
            tombstone: false,
            workers: [None, None, None],
            stale_settle_accepted: false,
        }]
    }

    fn actions(&self, state: &LeaseState, actions: &mut Vec<LeaseAction>) {
        let deciding = state.workers.iter().any(|h| {
            h.as_ref().is_some_and(|h| {
                matches!(h.phase, AttemptPhase::Answered(CallAnswer::Looked { .. }))
            })
        });
        if state.now < self.max_time && (self.slow_lookups || !deciding) {
            actions.push(LeaseAction::Tick);
        }
        if !state.rows[DELETE].enqueued
            && matches!(
                state.cs.state,
                ControlSpaceState::Provisioning | ControlSpaceState::Active
            )
        {
            actions.push(LeaseAction::RequestDelete);
        }
        for (w, slot) in state.workers.iter().enumerate() {
            let worker = w as u8;
            match slot {
                None => {
                    for (c, row) in state.rows.iter().enumerate() {
                        if self.claimable(state, row) {
                            actions.push(LeaseAction::Claim(worker, c as u8));
                        }
                    }
                }
                Some(held) => {
                    actions.push(LeaseAction::Crash(worker));
                    let live = self.believes_live(state, w, held);
                    // The engine renews every lease/3; renewing earlier than the last tick
                    // before expiry reaches no state a later renewal does not.
                    if live && held.expires == state.now + 1 {
                        actions.push(LeaseAction::Renew(worker));
                    }
                    match &held.phase {
                        AttemptPhase::Claimed => actions.push(LeaseAction::Read(worker)),
                        // The engine checks its lease before every remote call.
                        AttemptPhase::ToCall(call) if live => {
                            let outcomes: &[(bool, bool)] = if *call == KfsCall::Lookup {
                                &[(true, true), (false, true)]
                            } else {
                                &[(true, true), (false, true), (false, false)]
                            };
                            for &(answered, landed) in outcomes {
                                actions.push(LeaseAction::Call {
                                    worker,
                                    answered,
                                    landed,
                                });
                            }
                        }
                        AttemptPhase::ToCall(_) => {}
                        AttemptPhase::Answered(_) => actions.push(LeaseAction::Settle(worker)),
                    }
                }
            }
        }
    }

    fn next_state(&self, last: &LeaseState, action: LeaseAction) -> Option<LeaseState> {
        let mut s = last.clone();
        match action {
            LeaseAction::Tick => s.now += 1,
            LeaseAction::RequestDelete => {
                let cs = control_space(&s.cs);
                let next = cs
                    .apply(
                        &Transition::BeginDeletion {
                            operation_id: ids::op(DELETE),
                        },
                        t(s.now),
                    )
                    .ok()?;
                s.cs = abstract_cs(&next);
                s.rows[DELETE] = OutboxRow {
                    next_at: s.now,
                    ..OutboxRow::new(true)
                };
            }
            LeaseAction::Claim(worker, c) => {
                let now = s.now;
                let row = &mut s.rows[usize::from(c)];
                row.prior_window = row.window_end;
                row.status = CommandStatus::Processing;
                row.owner = Some(worker);
                row.expires = now + LEASE_TICKS;
                row.window_end = Some(row.expires);
                row.epoch = u8::try_from(LeaseEpoch(i64::from(row.epoch)).next().0).ok()?;
                row.claims += 1;
                s.workers[usize::from(worker)] = Some(HeldLease {
                    cmd: c,
                    epoch: row.epoch,
                    expires: row.expires,
                    claimed_at: now,
                    claims: row.claims,
                    phase: AttemptPhase::Claimed,
                });
            }
            LeaseAction::Renew(worker) => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                let now = s.now;
                let row = &mut s.rows[usize::from(held.cmd)];
                if Self::holds_lease(row, worker, held.epoch) {
                    row.expires = now + LEASE_TICKS;
                    row.window_end = Some(row.expires);
                    held.expires = row.expires;
                    s.workers[w] = Some(held);
                } else {
                    // Renewal refused: the dispatcher abandons the attempt.
                    s.workers[w] = None;
                }
            }
            LeaseAction::Read(worker) => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                match self.read(&s, worker, &held) {
                    Ok(call) => {
                        held.phase = AttemptPhase::ToCall(call);
                        s.workers[w] = Some(held);
                    }
                    Err(settlement) => {
                        self.settle(&mut s, worker, &held, &settlement);
                        s.workers[w] = None;
                    }
                }
            }
            LeaseAction::Call {
                worker,
                answered,
                landed,
            } => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                let AttemptPhase::ToCall(call) = held.phase else {
                    return None;
                };
                let answer = match call {
                    KfsCall::Provision if s.tombstone => {
                        if answered {
                            CallAnswer::SpaceDeleted
                        } else {
                            CallAnswer::Unknown
                        }
                    }
                    KfsCall::Provision => {
                        if landed && s.alive.is_none() {
                            s.created += 1;
                            s.alive = Some(s.created);
                        }
                        match (answered, s.alive) {
                            (true, Some(index)) => CallAnswer::Provisioned(index),
                            _ => CallAnswer::Unknown,
                        }
                    }
                    KfsCall::Lookup => {
                        if answered {
                            CallAnswer::Looked {
                                sent_at: s.now,
                                found: s.alive,
                                provision: s.rows[PROVISION].clone(),
                            }
                        } else {
                            CallAnswer::Unknown
                        }
                    }
                    KfsCall::Delete(index) => {
                        if landed && s.alive == Some(index) {
                            s.alive = None;
                            s.tombstone = true;
                        }
                        if answered {
                            CallAnswer::Deleted
                        } else {
                            CallAnswer::Unknown
                        }
                    }
                };
                held.phase = AttemptPhase::Answered(answer);
                s.workers[w] = Some(held);
            }
            LeaseAction::Settle(worker) => {
                let w = usize::from(worker);
                let mut held = s.workers[w].clone()?;
                let AttemptPhase::Answered(answer) = &held.phase else {
                    return None;
                };
                match self.conclude(&s, worker, &held, answer) {
                    Conclusion::Settle(settlement) => {
                        self.settle(&mut s, worker, &held, &settlement);
                        s.workers[w] = None;
                    }
                    Conclusion::Continue(registration, call) => {
                        if let Some(registration) = registration {
                            match self.apply(&mut s, worker, &held, &registration) {
                                Ok(()) => {}
                                Err(Refused::LeaseLost) => {
                                    s.workers[w] = None;
                                    return Some(s);
                                }
                                Err(Refused::Conflict) => {
                                    self.settle(&mut s, worker, &held, &registration);
                                    s.workers[w] = None;
                                    return Some(s);
                                }
                            }
                        }
                        held.phase = AttemptPhase::ToCall(call);
                        s.workers[w] = Some(held);
                    }
                }
            }
            LeaseAction::Crash(worker) => s.workers[usize::from(worker)] = None,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "at most one live lease per command",
                |m: &Self, s: &LeaseState| {
                    (0..2u8).all(|c| {
                        s.workers
                            .iter()
                            .enumerate()
                            .filter(|(w, h)| {
                                h.as_ref()
                                    .is_some_and(|h| h.cmd == c && m.believes_live(s, *w, h))
                            })
                            .count()
                            <= 1
                    })
                },
            ),
            Property::always(
                "no settle accepted from a stale epoch",
                |_, s: &LeaseState| !s.stale_settle_accepted,
            ),
            Property::always(
                "at most one remote space per provisioning key",
                |_, s: &LeaseState| s.created <= 1,
            ),
            Property::always(
                "a deleted control space has no remote space",
                |_, s: &LeaseState| s.cs.state != ControlSpaceState::Deleted || s.alive.is_none(),
            ),
            Property::sometimes("every command completes", |_, s: &LeaseState| {
                s.rows[DELETE].enqueued && s.rows.iter().all(|r| r.status.is_terminal())
            }),
        ]
    }
}
