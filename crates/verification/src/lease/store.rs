//! The store's own rules as the model applies them: claim (due or lease expired), settle and
//! renew (compare-and-set on owner and epoch) and the supersede rules are the in-memory store's
//! own functions (`tenantry_ports::lifecycle::fake`); the settle statement's sequence and
//! writes and the control-space compare-and-set are written out here. Also a worker's view of
//! its lease, and how an answered attempt concludes through the real saga functions.

use std::time::Duration;

use tenantry_lifecycle::saga::{
    AbsentOutcome, DeleteStart, DeletionTarget, ProvisionStart, Recovery, Step,
};
use tenantry_lifecycle::{
    ClaimedCommand, CommandOutcome, CommandStatus, DeletionPhase, DeletionProgress, ErrorCode,
    RetryPolicy, Settlement, SupersedeRule,
};

use tenantry_kernel::LeaseEpoch;
use tenantry_lifecycle::LeaseToken;
use tenantry_ports::lifecycle::fake;

use super::domain::{
    abstract_cs, claimed, control_space, delete_payload, ids, ks_index, policy, provision_payload,
    record, remote_space, store_view, t, tick_of,
};
use super::{
    CallAnswer, DELETE, GRACE_TICKS, HeldLease, KfsCall, LeaseBug, LeaseProtocol, LeaseState,
    MAX_CLAIMS, OutboxRow, PROVISION, SKEW,
};

/// Why the store refused a settlement.
pub(super) enum Refused {
    LeaseLost,
    Conflict,
}

impl LeaseProtocol {
    /// Whether `worker` believes the lease it holds is live (and so may call the remote).
    pub(super) fn believes_live(
        &self,
        state: &LeaseState,
        worker: usize,
        held: &HeldLease,
    ) -> bool {
        match self.bug {
            LeaseBug::LeaseCheckOnWallClock => {
                held.expires > state.now.saturating_sub(SKEW[worker])
            }
            _ => held.expires > state.now,
        }
    }

    /// Store rule: a command is claimable when pending and due, or processing with an expired
    /// lease: the in-memory store's own rule (`tenantry_ports::lifecycle::fake::is_due`, the
    /// claim statement's `WHERE`), within the model's claim bound.
    pub(super) fn claimable(&self, state: &LeaseState, row: &OutboxRow) -> bool {
        row.enqueued
            && row.claims < MAX_CLAIMS
            && match (self.bug, row.status) {
                (LeaseBug::ClaimWithoutExpiryCheck, CommandStatus::Processing) => true,
                _ => fake::is_due(&store_view(row), t(state.now)),
            }
    }

    /// Store rule: a settle or renewal matches the row only with the same owner and epoch
    /// while processing: the in-memory store's own `holds_lease` (the settle statement's
    /// compare-and-set).
    pub(super) fn holds_lease(row: &OutboxRow, worker: u8, epoch: u8) -> bool {
        let lease = LeaseToken {
            command_id: ids::command(PROVISION),
            owner: ids::owner(worker),
            epoch: LeaseEpoch(i64::from(epoch)),
            expires_at: t(row.expires),
        };
        fake::holds_lease(&store_view(row), &lease)
    }

    /// Store rule: whether a supersede of `row` may be written now: the in-memory store's own
    /// `supersede_allowed`.
    fn supersede_allowed(state: &LeaseState, row: &OutboxRow, rule: SupersedeRule) -> bool {
        fake::supersede_allowed(&store_view(row), rule, t(state.now))
    }

    /// The settle statement: all or nothing.
    pub(super) fn apply(
        &self,
        state: &mut LeaseState,
        worker: u8,
        held: &HeldLease,
        settlement: &Settlement,
    ) -> Result<(), Refused> {
        let cmd = usize::from(held.cmd);
        let row = &state.rows[cmd];
        let lease_matches = match self.bug {
            // The planted bug: the statement's `WHERE` keeps only "not yet terminal".
            LeaseBug::SettleWithoutEpochCheck => !row.status.is_terminal(),
            _ => Self::holds_lease(row, worker, held.epoch),
        };
        if !lease_matches {
            return Err(Refused::LeaseLost);
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
            if !Self::supersede_allowed(state, &state.rows[target], supersede.rule) {
                return Err(Refused::Conflict);
            }
            let r = &mut state.rows[target];
            r.status = CommandStatus::Superseded;
            r.owner = None;
        }
        if let Some(cas) = &settlement.control_space {
            state.cs = abstract_cs(&cas.next);
        }
        state.rows[cmd].settled_epoch = Some(held.epoch);
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
    pub(super) fn settle(
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
    pub(super) fn read(
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
    pub(super) fn conclude(
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
            // The dispatcher judges a provision's refusal against the control space as it is
            // now (`Step::provision_failure`): superseded when a deletion took it over.
            CallAnswer::SpaceDeleted => Conclusion::Settle(step.provision_failure(
                Some(&cs),
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
pub(super) enum Conclusion {
    /// Settle this and end the attempt.
    Settle(Settlement),
    /// Write the registration (if any) keeping the lease, then make this call.
    Continue(Option<Settlement>, KfsCall),
}
