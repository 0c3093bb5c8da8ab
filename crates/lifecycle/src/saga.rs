//! Decisions of the lifecycle saga, one function per step.
//!
//! The engine drives a claimed command through these steps. At each step it feeds in what it
//! observed (the control space it read, the remote's answer) and gets back a decision: a
//! [`Settlement`] to persist in one transaction, a request to send, or a [`StepError`], which
//! the engine settles with [`Step::step_error`] (an immediate retry, or a dead-letter for an
//! identity conflict): every attempt ends with a settle.
//! The order of steps and every branch follow the saga protocol (`docs/protocol.md`, section 1,
//! "The saga"):
//!
//! - provision: [`Step::start_provision`] (settle without delivery when the control space is
//!   no longer provisioning for this operation), then [`Step::complete_provision`];
//! - delete: [`Step::start_delete`] (already deleted; never-provisioned cleanup while the
//!   product is disabled), [`Step::deletion_target`], lost-ACK recovery with
//!   [`Step::recover_identity`] or [`Step::complete_absent`], then [`Step::settle_deletion`];
//! - revoke: [`Step::start_revoke`] (moot once the control space is deleting or deleted), then
//!   [`Step::settle_revoke`];
//! - anything else: [`Step::unsupported`]; a remote error: [`Step::remote_failure`].
//!
//! Every retry goes through [`Step::retry`], which dead-letters the command instead once its
//! attempt budget is spent (rules in [`crate::failure`]).

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::ErrorCode;
use crate::command::{
    ClaimedCommand, CommandRecord, CommandStatus, DeletePayload, ErrorRecord, ProvisionPayload,
    RevokePayload, Settlement, Supersede, SupersedeRule,
};
use crate::control_space::{ControlSpace, ControlSpaceState, Transition, TransitionError};
use crate::failure::{self, Disposition};
use crate::remote::{
    DeletionPhase, DeletionProgress, DeletionRequest, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest, RevokeState,
};
use crate::retry::RetryPolicy;

/// Why a step could not reach its own settlement.
///
/// The engine settles it with [`Step::step_error`]: ownership loss and refused transitions
/// retry at once (the next attempt re-reads the control space), an identity conflict
/// dead-letters the command.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StepError {
    /// The control space moved on (another operation owns it, or it vanished): this command's
    /// view is stale.
    #[error("command no longer owns its control space: {reason}")]
    OwnershipLost {
        /// What was observed.
        reason: &'static str,
    },
    /// The recovered remote identity contradicts the registered one; an operator must reconcile.
    #[error("recovered deletion identity conflicts with the registered one")]
    IdentityConflict,
    /// The state machine refused the change.
    #[error(transparent)]
    Transition(#[from] TransitionError),
}

/// The inputs shared by every decision about one claimed command.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The claimed command.
    pub command: &'a ClaimedCommand,
    /// Current time, supplied by the engine's clock.
    pub now: DateTime<Utc>,
    /// Backoff policy for retries.
    pub policy: &'a RetryPolicy,
    /// Uniform random draw in `[0, 1)` for jitter, supplied by the engine.
    pub jitter_draw: f64,
}

/// First decision of a provision command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionStart {
    /// Send this request to KnowledgeFS.
    Deliver(ProvisionRequest),
    /// The control space no longer waits for this operation: settle without calling the remote
    /// (an ack when the control space is already active for this operation; otherwise the
    /// provision was overtaken, e.g. by a deletion, and closes as superseded with
    /// `SUPERSEDED_BY_DELETE`, so it is never shown as succeeded).
    SettleWithoutDelivery(Settlement),
}

/// First decision of a delete command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteStart {
    /// The control space is already deleted: ack.
    AlreadyDeleted(Settlement),
    /// The product is disabled and the space was never provisioned: supersede the unattempted
    /// provision, mark the control space deleted and ack, with no remote call.
    NeverProvisioned(Settlement),
    /// Go on to resolve the deletion target.
    Continue,
}

/// First decision of a revoke command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevokeStart {
    /// Send this request to KnowledgeFS.
    Deliver(RevokeRequest),
    /// The control space is deleting, deleted or gone: the revocation is moot (status
    /// `superseded`, code `CONTROL_SPACE_DELETING`), no remote call.
    Moot(Settlement),
}

/// Where the remote deletion is aimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletionTarget {
    /// The identity is registered locally.
    Known(DeletionRequest),
    /// The identity is unknown (lost ACK?): look it up by provisioning key.
    Lookup,
}

/// Result of a lost-ACK identity lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Delete this identity; first persist `registration` if present (it keeps the lease).
    Resolved {
        /// The deletion request.
        request: DeletionRequest,
        /// The compare-and-set registering the recovered identity.
        registration: Option<Settlement>,
    },
    /// The authoritative lookup found nothing.
    Absent,
    /// The lookup answered with an identity of another namespace: retry.
    Retry(Settlement),
}

/// What to do once the remote proved the target absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AbsentOutcome {
    /// Complete the deletion locally.
    Complete(Settlement),
    /// A provision request may still land: look up again (`REMOTE_ABSENCE_UNCONFIRMED`).
    Unconfirmed(Settlement),
    /// The command does not own a deleting control space without identity, or there is no
    /// provision: retry with `KNOWLEDGE_FS_SPACE_NOT_FOUND`.
    NotFound(Settlement),
}

/// Whether `command` is processing under a lease that has not expired at `now`.
fn live(command: &CommandRecord, now: DateTime<Utc>) -> bool {
    command.status == CommandStatus::Processing
        && command.lease_expires_at.is_none_or(|at| at > now)
}

/// When no request of `provision` can land remotely any more: `grace` after its last attempt
/// window ended (a command that never sent anything has no window: the creation time).
fn quiet_from(provision: &CommandRecord, grace: Duration) -> DateTime<Utc> {
    let window_end = provision
        .attempt_window_ends_at
        .unwrap_or(provision.created_at);
    window_end
        .checked_add_signed(chrono::Duration::from_std(grace).unwrap_or(chrono::Duration::MAX))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Poll interval of a deletion in progress when the remote suggests none (`Retry-After`).
pub const DELETION_POLL_INTERVAL: Duration = Duration::from_secs(2);

fn owns(cs: &ControlSpace, command: &ClaimedCommand, state: ControlSpaceState) -> bool {
    cs.state == state && cs.lifecycle_operation_id == command.operation_id
}

impl<'a> Step<'a> {
    /// The same inputs at another time: the engine re-times a step after each remote call, so
    /// settle timestamps (`completed_at`, `next_attempt_at`) count from when the attempt ended,
    /// not from when it was claimed.
    #[must_use]
    pub fn at(&self, now: DateTime<Utc>) -> Step<'a> {
        Step { now, ..*self }
    }

    /// Ack of the claimed command at `now`.
    pub fn ack(&self) -> Settlement {
        Settlement::ack(self.now)
    }

    /// Retry of the claimed command after the policy's delay (or `retry_after` if later).
    ///
    /// The backoff step counts the claims since the last operator retry
    /// ([`ClaimedCommand::attempts_in_budget`]), as the budget does: the first failure after an
    /// operator retry waits the shortest step again, not the step its lifetime count reached.
    ///
    /// When the retry spends the attempt budget ([`failure::spends_budget`]) and the command
    /// has been claimed [`RetryPolicy::max_attempts`] times since its budget began, it is
    /// dead-lettered instead: status `failed` with the same code and a message saying so.
    pub fn retry(
        &self,
        code: impl Into<ErrorCode>,
        message: impl Into<String>,
        retry_after: Option<Duration>,
    ) -> Settlement {
        let delay = self.policy.delay(
            self.command.attempts_in_budget(),
            self.jitter_draw,
            retry_after,
        );
        let delay = chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX);
        let next = self
            .now
            .checked_add_signed(delay)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        self.retry_at(next, code.into(), message.into())
    }

    /// Retry at once (`next_attempt_at = now`), within the attempt budget like [`Self::retry`].
    pub fn retry_now(&self, code: impl Into<ErrorCode>, message: impl Into<String>) -> Settlement {
        self.retry_at(self.now, code.into(), message.into())
    }

    fn retry_at(&self, next: DateTime<Utc>, code: ErrorCode, message: String) -> Settlement {
        let budget = i32::try_from(self.policy.max_attempts.max(1)).unwrap_or(i32::MAX);
        let spent = self.command.attempts_in_budget();
        if failure::spends_budget(&code) && spent >= budget {
            return self.fail(
                code,
                format!(
                    "gave up after {spent} attempts (max_attempts = {budget}); last error: {message}"
                ),
            );
        }
        Settlement::retry(next, ErrorRecord::new(code, message))
    }

    /// Dead-letter the claimed command at `now` (status `failed`).
    pub fn fail(&self, code: impl Into<ErrorCode>, message: impl Into<String>) -> Settlement {
        Settlement::fail(self.now, ErrorRecord::new(code, message))
    }

    /// The settlement of a step that could not reach its own: [`StepError::OwnershipLost`] and
    /// [`StepError::Transition`] retry at once with `OWNERSHIP_LOST` / `FORBIDDEN_TRANSITION`
    /// (the next attempt re-reads the control space; the attempt budget still applies);
    /// [`StepError::IdentityConflict`] dead-letters with `KNOWLEDGE_FS_IDENTITY_CONFLICT`.
    pub fn step_error(&self, error: &StepError) -> Settlement {
        match error {
            StepError::OwnershipLost { reason } => self.retry_now(ErrorCode::OwnershipLost, *reason),
            StepError::Transition(e) => self.retry_now(ErrorCode::ForbiddenTransition, e.to_string()),
            StepError::IdentityConflict => self.fail(
                ErrorCode::KnowledgeFsIdentityConflict,
                "recovered deletion identity conflicts with the registered one; reconcile the control space with KnowledgeFS, then retry or abandon the command",
            ),
        }
    }

    /// Deliver the provision only while the control space is still provisioning for this
    /// operation. Otherwise settle without delivery: ack when it is already active for this
    /// operation (applied), else close as superseded (`SUPERSEDED_BY_DELETE`: the control space
    /// is deleting, deleted or gone), since the provision did not succeed.
    pub fn start_provision(
        &self,
        payload: &ProvisionPayload,
        cs: Option<&ControlSpace>,
    ) -> ProvisionStart {
        match self.provision_not_awaited(cs) {
            None => ProvisionStart::Deliver(ProvisionRequest::for_command(self.command, payload)),
            Some(settlement) => ProvisionStart::SettleWithoutDelivery(settlement),
        }
    }

    /// `None` while the control space waits for this provision (provisioning for this
    /// operation); otherwise how the provision closes without (further) delivery: ack when
    /// the control space is active for this operation, else superseded by its deletion.
    fn provision_not_awaited(&self, cs: Option<&ControlSpace>) -> Option<Settlement> {
        match cs {
            Some(cs) if owns(cs, self.command, ControlSpaceState::Provisioning) => None,
            Some(cs) if owns(cs, self.command, ControlSpaceState::Active) => {
                Some(self.ack().nothing_sent())
            }
            _ => Some(Settlement::moot(
                self.now,
                ErrorRecord::new(
                    ErrorCode::SupersededByDelete,
                    "the control space no longer waits for this provision (being deleted, deleted or gone); closed without delivery",
                ),
            )),
        }
    }

    /// A provision the remote refused for good (an answer with a permanent disposition, e.g.
    /// `409 KNOWLEDGE_FS_SPACE_DELETED`: it applied nothing), judged against the control space
    /// read after the answer (`cs`). Any other failure, and a refusal while the control space
    /// still waits for the provision, settles as [`Self::remote_failure`] says. When it no
    /// longer does, a deletion took the control space over while the attempt was in flight
    /// (or waiting for a remote-call slot) and deleted the space the provision was creating:
    /// the provision closes as its next attempt would ([`Self::start_provision`]: superseded
    /// by the deletion), not dead-lettered.
    ///
    /// Tenantry addition: the reference retries every remote error, so its next attempt closes
    /// the provision without delivery; Tenantry fails permanent `409`s at once, and without
    /// this rule a provision overtaken by its control space's deletion ended `failed`
    /// (docs/protocol.md, "A provision overtaken by a deletion").
    pub fn provision_failure(
        &self,
        cs: Option<&ControlSpace>,
        status: Option<u16>,
        code: &ErrorCode,
        message: &str,
        retry_after: Option<Duration>,
    ) -> Settlement {
        let settlement = self.remote_failure(status, code, message, retry_after);
        // Only a refusal the remote answered (it applied nothing): a failure because the
        // attempt budget ran out may follow a request that can still land, and keeps its
        // attempt window. Planted mutation (docs/verification.md): the refusal fails the
        // provision whatever became of its control space.
        let answered_refusal =
            status.is_some() && failure::remote_disposition(status, code) == Disposition::Permanent;
        if !answered_refusal || tenantry_kernel::planted!("overtaken-provision-fails") {
            return settlement;
        }
        self.provision_not_awaited(cs).unwrap_or(settlement)
    }

    /// Settle a provision the remote answered: namespace check, idempotent "already applied",
    /// otherwise compare-and-set to active with the knowledge space id and revision, and ack.
    ///
    /// # Errors
    /// [`StepError::OwnershipLost`] when the control space vanished, the answer is from another
    /// namespace, or another operation owns the control space; [`StepError::Transition`] when
    /// the control space is not provisioning.
    pub fn complete_provision(
        &self,
        cs: Option<&ControlSpace>,
        remote: &RemoteSpace,
    ) -> Result<Settlement, StepError> {
        let Some(cs) = cs else {
            return Err(StepError::OwnershipLost {
                reason: "provision response did not match its control space",
            });
        };
        if remote.namespace_id != self.command.tenant_id {
            return Err(StepError::OwnershipLost {
                reason: "provision response did not match its control space",
            });
        }
        let already_applied = owns(cs, self.command, ControlSpaceState::Active)
            && cs.knowledge_space_id.as_ref() == Some(&remote.knowledge_space_id)
            && cs.knowledge_space_revision >= remote.revision;
        if already_applied {
            return Ok(self.ack());
        }
        // Planted (verification only): a provision answered after its control space's
        // deletion began activates the control space anyway.
        let over_deletion = tenantry_kernel::planted!("provision-activates-over-deletion");
        if cs.lifecycle_operation_id != self.command.operation_id && !over_deletion {
            return Err(StepError::OwnershipLost {
                reason: "provision command no longer owns the control space",
            });
        }
        let cas = cs.plan(
            &[Transition::Activate {
                operation_id: self.command.operation_id.clone(),
                knowledge_space_id: remote.knowledge_space_id.clone(),
                revision: remote.revision,
            }],
            self.now,
        )?;
        Ok(self.ack().with_control_space(cas))
    }

    /// First decision of a delete: ack when already deleted; with the product disabled, a
    /// never-provisioned space whose provision was never attempted is superseded and deleted
    /// without any remote call.
    ///
    /// `provision` is the latest provision command of the control space.
    pub fn start_delete(
        &self,
        cs: Option<&ControlSpace>,
        provision: Option<&CommandRecord>,
        product_enabled: bool,
    ) -> DeleteStart {
        let Some(cs) = cs else {
            return DeleteStart::Continue;
        };
        if cs.state == ControlSpaceState::Deleted {
            return DeleteStart::AlreadyDeleted(self.ack().nothing_sent());
        }
        if product_enabled
            || !owns(cs, self.command, ControlSpaceState::Deleting)
            || cs.knowledge_space_id.is_some()
        {
            return DeleteStart::Continue;
        }
        let Some(provision) = provision else {
            return DeleteStart::Continue;
        };
        if provision.status != CommandStatus::Pending || provision.attempt_count != 0 {
            return DeleteStart::Continue;
        }
        match self.delete_locally(cs) {
            Ok(settlement) => DeleteStart::NeverProvisioned(settlement.with_supersede(Supersede {
                command_id: provision.id.clone(),
                rule: SupersedeRule::Unattempted,
                completed_at: self.now,
                error: ErrorRecord::new(
                    ErrorCode::SupersededByDelete,
                    "provision was cancelled before delivery by permanent cleanup",
                ),
            })),
            Err(_) => DeleteStart::Continue,
        }
    }

    fn delete_locally(&self, cs: &ControlSpace) -> Result<Settlement, TransitionError> {
        let cas = cs.plan(
            &[Transition::CompleteDeletion {
                operation_id: self.command.operation_id.clone(),
                revision: cs.knowledge_space_revision,
            }],
            self.now,
        )?;
        Ok(self.ack().with_control_space(cas))
    }

    /// Resolve the identity to delete from the local record.
    ///
    /// # Errors
    /// [`StepError::OwnershipLost`] unless the control space is deleting for this operation.
    pub fn deletion_target(
        &self,
        payload: &DeletePayload,
        cs: Option<&ControlSpace>,
    ) -> Result<DeletionTarget, StepError> {
        let cs = cs
            .filter(|cs| owns(cs, self.command, ControlSpaceState::Deleting))
            .ok_or(StepError::OwnershipLost {
                reason: "delete command no longer owns the control space",
            })?;
        Ok(match &cs.knowledge_space_id {
            Some(id) => DeletionTarget::Known(DeletionRequest::for_command(
                self.command,
                payload,
                id.clone(),
                cs.knowledge_space_revision,
            )),
            None => DeletionTarget::Lookup,
        })
    }

    /// Lost-ACK recovery: given the authoritative lookup by provisioning key and the control
    /// space re-read after it, register the recovered identity (compare-and-set) or use the one
    /// already registered.
    ///
    /// # Errors
    /// [`StepError::OwnershipLost`] unless the control space is still deleting for this
    /// operation; [`StepError::IdentityConflict`] when a different identity is registered.
    pub fn recover_identity(
        &self,
        payload: &DeletePayload,
        recovered: Option<&RemoteSpace>,
        cs: Option<&ControlSpace>,
    ) -> Result<Recovery, StepError> {
        // Planted (verification only): the lookup's answer is read as "no such space".
        let recovered =
            recovered.filter(|_| !tenantry_kernel::planted!("found-space-read-as-absent"));
        let Some(recovered) = recovered else {
            return Ok(Recovery::Absent);
        };
        if recovered.namespace_id != self.command.tenant_id {
            return Ok(Recovery::Retry(self.retry(
                ErrorCode::KnowledgeFsScopeMismatch,
                "recovered deletion identity belongs to another namespace",
                None,
            )));
        }
        let cs = cs
            .filter(|cs| owns(cs, self.command, ControlSpaceState::Deleting))
            .ok_or(StepError::OwnershipLost {
                reason: "delete command lost ownership during identity recovery",
            })?;
        match &cs.knowledge_space_id {
            None => {
                let cas = cs.plan(
                    &[Transition::RegisterRecoveredIdentity {
                        operation_id: self.command.operation_id.clone(),
                        knowledge_space_id: recovered.knowledge_space_id.clone(),
                        revision: recovered.revision,
                    }],
                    self.now,
                )?;
                Ok(Recovery::Resolved {
                    request: DeletionRequest::for_command(
                        self.command,
                        payload,
                        recovered.knowledge_space_id.clone(),
                        recovered.revision,
                    ),
                    registration: Some(Settlement {
                        outcome: None,
                        control_space: Some(cas),
                        supersede: None,
                        may_have_sent: true,
                        spends_attempt: true,
                    }),
                })
            }
            Some(registered) if registered != &recovered.knowledge_space_id => {
                Err(StepError::IdentityConflict)
            }
            Some(registered) => Ok(Recovery::Resolved {
                request: DeletionRequest::for_command(
                    self.command,
                    payload,
                    registered.clone(),
                    cs.knowledge_space_revision,
                ),
                registration: None,
            }),
        }
    }

    /// The authoritative lookup proved the remote space absent. `provision` is the control
    /// space's provision command; `grace` is how long a request may still land remotely after
    /// the attempt that sent it ended (e.g. a gateway answered 504 while the backend went on);
    /// `observed_at` is when the lookup was sent (the store's clock read just before sending).
    ///
    /// Quietness is judged at `observed_at` (or the step's time if earlier), not at the step's
    /// time: the lookup only proves absence as of its sending, and a provision request may
    /// land while the lookup is under way (docs/protocol.md, "Absence is judged when the lookup
    /// was sent"; a deviation from the reference, which judged at the answer).
    ///
    /// Absence completes the deletion locally (control space deleted, command acked) only when
    /// no provision request can still create the space (Tenantry rule, stricter than the
    /// reference; docs/protocol.md, "A deletion never orphans a remote space"):
    /// - the provision was never claimed (`attempt_count == 0`), or none of its attempts sent a
    ///   request (no attempt window, no live lease): it provably never reached the remote; if
    ///   still pending it is superseded ([`SupersedeRule::Unattempted`] or, when claimed
    ///   before, [`SupersedeRule::AfterRemoteAbsence`]);
    /// - or its last attempt window ended at least `grace` before `observed_at` and no live
    ///   lease holds it; if still open it is superseded with
    ///   [`SupersedeRule::AfterRemoteAbsence`] carrying `observed_at`, which the store re-checks
    ///   (the lease against its own clock, quietness against `observed_at`).
    ///
    /// Otherwise the lookup is repeated later: [`AbsentOutcome::Unconfirmed`] retries with
    /// `REMOTE_ABSENCE_UNCONFIRMED` at the policy's backoff, but no later than the end of the
    /// grace period. Without a deleting control space or a provision command it retries with
    /// `KNOWLEDGE_FS_SPACE_NOT_FOUND`.
    pub fn complete_absent(
        &self,
        cs: Option<&ControlSpace>,
        provision: Option<&CommandRecord>,
        grace: Duration,
        observed_at: DateTime<Utc>,
    ) -> AbsentOutcome {
        let cs = cs.filter(|cs| cs.knowledge_space_id.is_none());
        self.absent(cs, provision, grace, observed_at)
    }

    /// KnowledgeFS answered the deletion of the **registered** identity with
    /// `404 KNOWLEDGE_FS_SPACE_NOT_FOUND`, and an authoritative lookup by provisioning key sent
    /// at `observed_at` found nothing: the remote proves the target absent. The deletion
    /// completes under exactly the rules of [`Self::complete_absent`] (no provision request
    /// can still land: never sent, or quiet for `grace` before `observed_at`, no live lease);
    /// otherwise it looks up again ([`AbsentOutcome::Unconfirmed`]). Without a deleting control
    /// space owned by this command or without a provision command it retries with
    /// `KNOWLEDGE_FS_SPACE_NOT_FOUND` ([`AbsentOutcome::NotFound`]).
    ///
    /// Tenantry addition (case 012): the reference (and earlier versions) resent the deletion
    /// of a registered identity the remote no longer knows until the attempt budget ran out,
    /// and the command failed on every retry: the control space stayed `deleting` for good.
    pub fn complete_gone(
        &self,
        cs: Option<&ControlSpace>,
        provision: Option<&CommandRecord>,
        grace: Duration,
        observed_at: DateTime<Utc>,
    ) -> AbsentOutcome {
        self.absent(cs, provision, grace, observed_at)
    }

    /// The absence rule shared by [`Self::complete_absent`] and [`Self::complete_gone`].
    fn absent(
        &self,
        cs: Option<&ControlSpace>,
        provision: Option<&CommandRecord>,
        grace: Duration,
        observed_at: DateTime<Utc>,
    ) -> AbsentOutcome {
        // Planted (verification only): absence judged when the answer is acted on (the
        // reference's rule), not when the lookup was sent.
        let observed_at = if tenantry_kernel::planted!("absence-judged-at-answer") {
            self.now
        } else {
            observed_at.min(self.now)
        };
        // Planted (verification only): absence proven at once, without the grace period in
        // which a delivered provision request may still land.
        let grace = if tenantry_kernel::planted!("absence-without-grace") {
            Duration::ZERO
        } else {
            grace
        };
        let not_found = || AbsentOutcome::NotFound(self.not_found());
        let Some(cs) = cs.filter(|cs| owns(cs, self.command, ControlSpaceState::Deleting)) else {
            return not_found();
        };
        let Some(provision) = provision else {
            return not_found();
        };
        let rule = if provision.attempt_count == 0 {
            SupersedeRule::Unattempted
        } else if provision.attempt_window_ends_at.is_none() && !live(provision, self.now) {
            // Claimed, but no attempt ever sent a request (each settled as sending nothing).
            SupersedeRule::AfterRemoteAbsence { grace, observed_at }
        } else {
            let quiet_from = quiet_from(provision, grace);
            // Quiet when the lookup was sent, not merely now: a request of an attempt window
            // that ended (plus grace) between the lookup's send and its answer may have landed
            // after the lookup looked.
            if live(provision, self.now) || quiet_from > observed_at {
                return AbsentOutcome::Unconfirmed(self.absence_unconfirmed(quiet_from));
            }
            SupersedeRule::AfterRemoteAbsence { grace, observed_at }
        };
        let Ok(settlement) = self.delete_locally(cs) else {
            return not_found();
        };
        if provision.status.is_terminal() {
            return AbsentOutcome::Complete(settlement);
        }
        AbsentOutcome::Complete(settlement.with_supersede(Supersede {
            command_id: provision.id.clone(),
            rule,
            completed_at: self.now,
            error: ErrorRecord::new(
                ErrorCode::SupersededByDelete,
                "remote absence was confirmed by permanent cleanup",
            ),
        }))
    }

    /// Retry with `REMOTE_ABSENCE_UNCONFIRMED`: the lookup found nothing, but a provision
    /// request may still land until `quiet_from`. The next lookup follows the policy's backoff,
    /// capped so it happens right when the grace period ends.
    fn absence_unconfirmed(&self, quiet_from: DateTime<Utc>) -> Settlement {
        let backoff = self
            .policy
            .delay(self.command.attempts_in_budget(), self.jitter_draw, None);
        let until_quiet = (quiet_from - self.now)
            .to_std()
            .unwrap_or(Duration::ZERO)
            .max(Duration::from_secs(1));
        let delay =
            chrono::Duration::from_std(backoff.min(until_quiet)).unwrap_or(chrono::Duration::MAX);
        let next = self
            .now
            .checked_add_signed(delay)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        Settlement::retry(
            next,
            ErrorRecord::new(
                ErrorCode::RemoteAbsenceUnconfirmed,
                format!(
                    "KnowledgeFS has no space for the provisioning key, but the provision may \
                     still land until {}; looking up again",
                    quiet_from.to_rfc3339()
                ),
            ),
        )
    }

    /// Retry with `KNOWLEDGE_FS_SPACE_NOT_FOUND`: the deletion identity could not be recovered
    /// and absence does not prove the deletion complete.
    pub fn not_found(&self) -> Settlement {
        self.retry(
            ErrorCode::KnowledgeFsSpaceNotFound,
            "KnowledgeFS deletion identity could not be recovered",
            None,
        )
    }

    /// Settle a deletion answer: irreversible and completed phases record
    /// `deletion_irreversible_at` once (the remote's time, else `now`); completed moves the
    /// control space to deleted with revision max(local, remote) and acks; other phases retry
    /// with `REMOTE_DELETION_PENDING`.
    ///
    /// # Errors
    /// [`StepError::OwnershipLost`] when the control space vanished or another operation owns it.
    pub fn settle_deletion(
        &self,
        cs: Option<&ControlSpace>,
        progress: &DeletionProgress,
    ) -> Result<Settlement, StepError> {
        let cs = cs
            .filter(|cs| cs.lifecycle_operation_id == self.command.operation_id)
            .ok_or(StepError::OwnershipLost {
                reason: "delete command no longer owns the control space",
            })?;
        let mut transitions = Vec::new();
        let irreversible = matches!(
            progress.phase,
            DeletionPhase::Irreversible | DeletionPhase::Completed
        );
        if irreversible && cs.deletion_irreversible_at.is_none() {
            transitions.push(Transition::MarkDeletionIrreversible {
                operation_id: self.command.operation_id.clone(),
                at: progress.irreversible_at.unwrap_or(self.now),
            });
        }
        // Planted (verification only): a deletion the remote still drains counts as done.
        let completed = progress.phase == DeletionPhase::Completed
            || tenantry_kernel::planted!("deletion-done-while-draining");
        let settlement = if completed {
            transitions.push(Transition::CompleteDeletion {
                operation_id: self.command.operation_id.clone(),
                revision: progress.revision,
            });
            self.ack()
        } else {
            // A deletion in progress is polled at the interval the remote suggests (else
            // DELETION_POLL_INTERVAL), not with the failure backoff (Tenantry deviation: the
            // reference backs off exponentially, stretching a delete to minutes).
            let interval = progress
                .retry_after
                .unwrap_or(DELETION_POLL_INTERVAL)
                .min(self.policy.max_retry_after);
            let next = self
                .now
                .checked_add_signed(
                    chrono::Duration::from_std(interval).unwrap_or(chrono::Duration::MAX),
                )
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            self.retry_at(
                next,
                ErrorCode::RemoteDeletionPending,
                format!("KnowledgeFS deletion is {}", progress.phase.as_str()),
            )
        };
        if transitions.is_empty() {
            return Ok(settlement);
        }
        Ok(settlement.with_control_space(cs.plan(&transitions, self.now)?))
    }

    /// Deliver a revocation only while its control space exists and is not deleting or
    /// deleted; otherwise the grant goes away with the knowledge space and the revocation is
    /// moot (no remote call, never retried).
    pub fn start_revoke(&self, payload: &RevokePayload, cs: Option<&ControlSpace>) -> RevokeStart {
        match cs.map(|cs| cs.state) {
            Some(ControlSpaceState::Provisioning | ControlSpaceState::Active) => {
                RevokeStart::Deliver(RevokeRequest::for_command(self.command, payload))
            }
            state => RevokeStart::Moot(Settlement::moot(
                self.now,
                ErrorRecord::new(
                    ErrorCode::ControlSpaceDeleting,
                    match state {
                        Some(state) => format!(
                            "control space is {state}; the grant goes away with its knowledge space"
                        ),
                        None => "control space no longer exists".to_owned(),
                    },
                ),
            )),
        }
    }

    /// Ack a revocation only when the remote says revoked and its watermark reached the
    /// command's sequence; otherwise retry with `REMOTE_REVOKE_WATERMARK_LAG`.
    pub fn settle_revoke(&self, payload: &RevokePayload, ack: &RevokeAck) -> Settlement {
        if ack.state == RevokeState::Revoked
            && ack.highest_revoke_sequence >= payload.revoke_sequence
        {
            self.ack()
        } else {
            self.retry(
                ErrorCode::RemoteRevokeWatermarkLag,
                format!(
                    "grant revoke acknowledgment {} is below the command watermark {}",
                    ack.highest_revoke_sequence, payload.revoke_sequence
                ),
                None,
            )
        }
    }

    /// Retry an operation this version does not dispatch.
    pub fn unsupported(&self, operation: &str) -> Settlement {
        self.retry(
            ErrorCode::UnsupportedOperation,
            format!("lifecycle operation {operation} is not dispatched by this version"),
            None,
        )
        .nothing_sent()
    }

    /// Dead-letter a command whose stored payload does not parse (no attempt can change it).
    pub fn invalid_payload(&self, reason: &str) -> Settlement {
        self.fail(ErrorCode::InvalidCommandPayload, reason.to_owned())
            .nothing_sent()
    }

    /// Settle a remote error: dead-letter a permanent one ([`failure::remote_disposition`]:
    /// `status` is the HTTP status of an answer, `None` for a transport failure), otherwise
    /// retry with the remote's code and `Retry-After`.
    pub fn remote_failure(
        &self,
        status: Option<u16>,
        code: &ErrorCode,
        message: &str,
        retry_after: Option<Duration>,
    ) -> Settlement {
        match failure::remote_disposition(status, code) {
            Disposition::Permanent => self.fail(code.clone(), message.to_owned()),
            Disposition::Retry => self.retry(code.clone(), message.to_owned(), retry_after),
        }
    }
}

#[cfg(test)]
mod tests;
