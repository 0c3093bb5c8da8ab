//! Delivery: the saga of one claimed command, from its body to the settlement it persisted.
//! The three operations (provision, delete, revoke) each start from a pure decision of the
//! saga ([`Step`]), make their remote call through one helper ([`Dispatcher::deliver`]: a
//! remote-call slot, the call under the lease, a remote failure settled) and settle the
//! answer; a deletion may also prove the space absent by a lookup.

use chrono::{DateTime, Utc};
use tenantry_kernel::{DispatchOutcome, TenantId};
use tenantry_lifecycle::saga::{
    AbsentOutcome, DeleteStart, DeletionTarget, ProvisionStart, Recovery, RevokeStart, Step,
};
use tenantry_lifecycle::{
    CommandBody, CommandOutcome, CommandStatus, ControlSpace, DeletePayload, ErrorCode,
    ErrorRecord, Operation, ProvisionPayload, RemoteSpace, RevokePayload, Settlement,
};
use tenantry_ports::lifecycle::{
    KnowledgeFs, LifecycleStore, RemoteError, SettleError, StoreError,
};
use tracing::{Instrument, info_span, warn};

use super::error::refusal_message;
use super::slots::{CallPermit, CallSlots, SlotsClosed};
use super::{DispatchError, Dispatcher};

/// A permit of `slots` for one remote call on behalf of `tenant` (`Ok(None)` without a bound).
/// The worker pool closes its slots when it shuts down: a dispatch still waiting then (or
/// arriving afterwards) gets [`SlotsClosed`] and hands its command back instead of calling.
async fn remote_slot<'a>(
    slots: Option<&'a CallSlots>,
    tenant: &TenantId,
) -> Result<Option<CallPermit<'a>>, SlotsClosed> {
    match slots {
        Some(slots) => slots.acquire(tenant).await.map(Some),
        None => Ok(None),
    }
}

/// A lookup by provisioning key as the remote answered it.
type LookupAnswer = Result<Option<RemoteSpace>, RemoteError>;

/// How a delivery's remote call ended ([`Dispatcher::deliver`]).
#[expect(
    clippy::large_enum_variant,
    reason = "a return value moved once, as the settlement it carries was before"
)]
enum Delivered<T> {
    /// KnowledgeFS answered with success; the caller settles the answer.
    Answer(T),
    /// The attempt is settled already: handed back before the call (the pool shut down), or a
    /// remote failure settled (as a retry or a failure, or a deletion's proof of absence).
    Settled(Settlement),
}
impl<S: LifecycleStore, R: KnowledgeFs> Dispatcher<S, R> {
    /// Runs the saga of one command and returns the settlement it persisted.
    ///
    /// Every attempt ends with a settle: a step error is settled by [`Step::step_error`]
    /// (immediate retry, or dead-letter for an identity conflict), a refused compare-and-set
    /// or supersede as a retry with `CONTROL_SPACE_CONFLICT` (nothing of the refused
    /// settlement was written and the lease is still held). Only a lost lease and a storage
    /// failure leave the command to lease expiry.
    pub(super) async fn run_saga(
        &self,
        step: &Step<'_>,
        product_enabled: bool,
        slots: Option<&CallSlots>,
    ) -> Result<Settlement, DispatchError> {
        let body = match step.command.body() {
            Ok(body) => body,
            Err(error) => {
                return self
                    .settle(step, step.invalid_payload(&error.to_string()))
                    .await;
            }
        };
        let result = match body {
            CommandBody::Provision(payload) => {
                self.provision(step, &payload, slots)
                    .instrument(info_span!("saga_step", step = "provision"))
                    .await
            }
            CommandBody::Delete(payload) => {
                self.delete(step, &payload, product_enabled, slots)
                    .instrument(info_span!("saga_step", step = "delete"))
                    .await
            }
            CommandBody::Revoke(payload) => {
                self.revoke(step, &payload, slots)
                    .instrument(info_span!("saga_step", step = "revoke"))
                    .await
            }
            CommandBody::Unsupported(name) => self.settle(step, step.unsupported(&name)).await,
        };
        match result {
            // A refusal is timed when it happened, not at the claim: after a slow call, its
            // retry waits from now and a dead-letter's `failed_at` is now.
            Err(DispatchError::Step(error)) => {
                warn!(%error, "saga step refused; settling the attempt");
                let step = &step.at(self.store_now());
                self.settle(step, step.step_error(&error)).await
            }
            Err(
                conflict @ (DispatchError::ControlSpaceConflict { .. }
                | DispatchError::SupersedeRefused { .. }
                | DispatchError::SettleRefused(_)),
            ) => {
                let message = refusal_message(&conflict);
                let step = &step.at(self.store_now());
                let retry = step.retry(ErrorCode::ControlSpaceConflict, message, None);
                self.settle(step, retry).await
            }
            other => other,
        }
    }

    /// Makes the remote call of one operation, the shape the three deliveries share: waits for
    /// a permit of `slots` (the command is handed back when the pool shut down:
    /// [`Self::hand_back`]), then calls the remote under the lease ([`Self::call`]; `call` is
    /// invoked only once the permit is held), frees the permit, and settles a remote failure
    /// ([`Self::remote_failure`]). With `absence` (a deletion's payload), a `404
    /// KNOWLEDGE_FS_SPACE_NOT_FOUND` is instead the cue to prove the space absent
    /// ([`Self::confirm_gone`]).
    ///
    /// # Errors
    /// [`DispatchError`] when the lease could not be proven live for the call, or a settle
    /// failed.
    async fn deliver<T, F>(
        &self,
        step: &Step<'_>,
        slots: Option<&CallSlots>,
        absence: Option<&DeletePayload>,
        call: impl FnOnce() -> F,
    ) -> Result<Delivered<T>, DispatchError>
    where
        F: Future<Output = Result<T, RemoteError>>,
    {
        let Some(called) = self.call_in_slot(step, slots, call).await? else {
            return self.hand_back(step).await.map(Delivered::Settled);
        };
        let settled = match called {
            Ok(answer) => return Ok(Delivered::Answer(answer)),
            Err(error) => match absence {
                Some(payload) if remote_space_not_found(&error) => {
                    self.confirm_gone(step, payload, &error, slots).await
                }
                _ => self.remote_failure(step, &error).await,
            },
        };
        settled.map(Delivered::Settled)
    }

    /// One remote call of the attempt in a permit of `slots`: every call of a dispatch, the
    /// lookups by provisioning key included, counts against the pool's remote-call slots, so
    /// a process never has more calls open than its slots (nor queued inside the remote
    /// client with their deadline running). `call` is invoked only once the permit is held;
    /// the permit is freed when the call ends. `Ok(None)`: the pool closed its slots
    /// (shutdown) and nothing was sent; the caller settles without calling (a hand-back).
    ///
    /// # Errors
    /// As [`Self::call`]: the lease could not be proven live for the call.
    async fn call_in_slot<T, F>(
        &self,
        step: &Step<'_>,
        slots: Option<&CallSlots>,
        call: impl FnOnce() -> F,
    ) -> Result<Option<Result<T, RemoteError>>, DispatchError>
    where
        F: Future<Output = Result<T, RemoteError>>,
    {
        let Ok(slot) = remote_slot(slots, &step.command.tenant_id).await else {
            return Ok(None);
        };
        let called = self.call(step.command, call()).await?;
        drop(slot);
        Ok(Some(called))
    }

    /// A lookup by provisioning key in a permit of `slots` ([`Self::call_in_slot`]), with
    /// the store's time at its sending: absence is proven only as of then (docs/protocol.md,
    /// "Absence is judged when the lookup was sent"). `Ok(None)`: the slots closed.
    async fn lookup_in_slot(
        &self,
        step: &Step<'_>,
        payload: &DeletePayload,
        slots: Option<&CallSlots>,
    ) -> Result<Option<(LookupAnswer, DateTime<Utc>)>, DispatchError> {
        // Planted mutation (docs/verification.md): the lookup skips the slots, as before
        // issue 31's worker simulation found it.
        let slots = if tenantry_kernel::planted!("lookup-outside-slot") {
            None
        } else {
            slots
        };
        // Absence is judged at the lookup's sending; were it unknown, the earlier time is the
        // safe one (a provision must have been quiet for longer).
        let before = self.store_now();
        let mut sent_at = None;
        let found = self
            .call_in_slot(step, slots, || {
                sent_at = Some(self.store_now());
                self.remote.find_by_provisioning_key(
                    &step.command.tenant_id,
                    &payload.provisioning_key,
                    &step.command.control_space_id,
                )
            })
            .await?;
        Ok(found.map(|found| (found, sent_at.unwrap_or(before))))
    }

    async fn provision(
        &self,
        step: &Step<'_>,
        payload: &ProvisionPayload,
        slots: Option<&CallSlots>,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space_at_start(step).await?;
        let request = match step.start_provision(payload, cs.as_ref()) {
            ProvisionStart::SettleWithoutDelivery(settlement) => {
                return self.settle(step, settlement).await;
            }
            ProvisionStart::Deliver(request) => request,
        };
        let space = match self
            .deliver(step, slots, None, || self.remote.provision(&request))
            .await?
        {
            Delivered::Answer(space) => space,
            Delivered::Settled(settlement) => return Ok(settlement),
        };
        let step = &step.at(self.store_now());
        if let Some(settlement) = self
            .complete_provision_as_read(step, cs.as_ref(), &space)
            .await?
        {
            return Ok(settlement);
        }
        let cs = self.control_space(step).await?;
        let settlement = step.complete_provision(cs.as_ref(), &space)?;
        self.settle(step, settlement).await
    }

    /// Completes a provision on the control space read before its call (`before`), without
    /// reading it again (docs/protocol.md, "A provision completes on the row it started
    /// from"): only when the settlement would write a compare-and-set, which itself proves the
    /// row unchanged since that read. Returns `Ok(None)` when the caller must read the control
    /// space again and decide on the fresh row: the decision on `before` writes no
    /// compare-and-set or is refused, or the store refused the compare-and-set (the row changed
    /// during the call; nothing was written and the lease is still held). A lost lease or a
    /// storage failure is returned as from [`Self::settle`].
    async fn complete_provision_as_read(
        &self,
        step: &Step<'_>,
        before: Option<&ControlSpace>,
        space: &RemoteSpace,
    ) -> Result<Option<Settlement>, DispatchError> {
        let settlement = match step.complete_provision(before, space) {
            Ok(settlement) if settlement.control_space.is_some() => settlement,
            _ => return Ok(None),
        };
        match self.store_settle(&step.command.lease, &settlement).await {
            Ok(()) => Ok(Some(settlement)),
            Err(SettleError::ControlSpaceConflict { .. }) => Ok(None),
            Err(other) => Err(other.into()),
        }
    }

    async fn delete(
        &self,
        step: &Step<'_>,
        payload: &DeletePayload,
        product_enabled: bool,
        slots: Option<&CallSlots>,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space_at_start(step).await?;
        let provision = if product_enabled {
            None
        } else {
            self.latest_provision(step).await?
        };
        match step.start_delete(cs.as_ref(), provision.as_ref(), product_enabled) {
            DeleteStart::AlreadyDeleted(settlement) => return self.settle(step, settlement).await,
            DeleteStart::NeverProvisioned(settlement) => {
                match self.store_settle(&step.command.lease, &settlement).await {
                    Ok(()) => return Ok(settlement),
                    // The provision was claimed meanwhile: go on with the remote deletion.
                    Err(SettleError::SupersedeRefused { .. }) => {}
                    Err(other) => return Err(other.into()),
                }
            }
            DeleteStart::Continue => {}
        }
        let cs = self.control_space(step).await?;
        let request = match step.deletion_target(payload, cs.as_ref())? {
            DeletionTarget::Known(request) => request,
            DeletionTarget::Lookup => {
                let Some((found, lookup_sent_at)) =
                    self.lookup_in_slot(step, payload, slots).await?
                else {
                    return self.hand_back(step).await;
                };
                let found = match found {
                    Ok(found) => found,
                    Err(error) => return self.remote_failure(step, &error).await,
                };
                let step = &step.at(self.store_now());
                let cs = self.control_space(step).await?;
                match step.recover_identity(payload, found.as_ref(), cs.as_ref())? {
                    Recovery::Retry(settlement) => return self.settle(step, settlement).await,
                    Recovery::Absent => {
                        return self
                            .complete_absent(step, cs.as_ref(), lookup_sent_at)
                            .await;
                    }
                    Recovery::Resolved {
                        request,
                        registration,
                    } => {
                        if let Some(registration) = registration {
                            self.store_settle(&step.command.lease, &registration)
                                .await?;
                        }
                        request
                    }
                }
            }
        };
        let progress = match self
            .deliver(step, slots, Some(payload), || {
                self.remote.request_deletion(&request)
            })
            .await?
        {
            Delivered::Answer(progress) => progress,
            Delivered::Settled(settlement) => return Ok(settlement),
        };
        let step = &step.at(self.store_now());
        let cs = self.control_space(step).await?;
        let settlement = step.settle_deletion(cs.as_ref(), &progress)?;
        self.settle(step, settlement).await
    }

    async fn revoke(
        &self,
        step: &Step<'_>,
        payload: &RevokePayload,
        slots: Option<&CallSlots>,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space_at_start(step).await?;
        let request = match step.start_revoke(payload, cs.as_ref()) {
            RevokeStart::Moot(settlement) => return self.settle(step, settlement).await,
            RevokeStart::Deliver(request) => request,
        };
        let ack = match self
            .deliver(step, slots, None, || self.remote.revoke_grant(&request))
            .await?
        {
            Delivered::Answer(ack) => ack,
            Delivered::Settled(settlement) => return Ok(settlement),
        };
        let step = &step.at(self.store_now());
        self.settle(step, step.settle_revoke(payload, &ack)).await
    }

    async fn latest_provision(
        &self,
        step: &Step<'_>,
    ) -> Result<Option<tenantry_lifecycle::CommandRecord>, StoreError> {
        self.store
            .latest_provision(&step.command.tenant_id, &step.command.control_space_id)
            .await
    }

    /// KnowledgeFS answered the deletion `404 KNOWLEDGE_FS_SPACE_NOT_FOUND` (case 012): look
    /// the space up by provisioning key (in a remote-call slot of its own); when the lookup
    /// finds nothing, the deletion completes under the absence rules ([`Step::complete_gone`]);
    /// when it finds a space, or fails, the attempt settles as the remote error would have.
    async fn confirm_gone(
        &self,
        step: &Step<'_>,
        payload: &DeletePayload,
        not_found: &RemoteError,
        slots: Option<&CallSlots>,
    ) -> Result<Settlement, DispatchError> {
        // The pool shut down before the lookup: the deletion reached the remote (which
        // applied nothing), so the attempt retries with the 404's code, due at once; like a
        // hand-back it gives its attempt back, so a stop never dead-letters a deletion.
        let Some((found, lookup_sent_at)) = self.lookup_in_slot(step, payload, slots).await? else {
            let now = self.store_now();
            let settlement = Settlement::retry(
                now,
                ErrorRecord::new(
                    not_found.code.clone(),
                    "the worker pool shut down before the lookup that follows a deletion's 404",
                ),
            )
            .gives_attempt_back();
            return self.settle(&step.at(now), settlement).await;
        };
        match found {
            Ok(None) => {}
            Ok(Some(_)) => return self.remote_failure(step, not_found).await,
            Err(error) => return self.remote_failure(step, &error).await,
        }
        let step = &step.at(self.store_now());
        let cs = self.control_space(step).await?;
        let provision = self.latest_provision(step).await?;
        let outcome = step.complete_gone(
            cs.as_ref(),
            provision.as_ref(),
            self.config.absence_grace,
            lookup_sent_at,
        );
        self.settle_absent(step, outcome).await
    }

    async fn complete_absent(
        &self,
        step: &Step<'_>,
        cs: Option<&ControlSpace>,
        lookup_sent_at: DateTime<Utc>,
    ) -> Result<Settlement, DispatchError> {
        let provision = self.latest_provision(step).await?;
        let outcome = step.complete_absent(
            cs,
            provision.as_ref(),
            self.config.absence_grace,
            lookup_sent_at,
        );
        self.settle_absent(step, outcome).await
    }

    async fn settle_absent(
        &self,
        step: &Step<'_>,
        outcome: AbsentOutcome,
    ) -> Result<Settlement, DispatchError> {
        match outcome {
            AbsentOutcome::NotFound(settlement) | AbsentOutcome::Unconfirmed(settlement) => {
                self.settle(step, settlement).await
            }
            AbsentOutcome::Complete(settlement) => {
                match self.store_settle(&step.command.lease, &settlement).await {
                    Ok(()) => Ok(settlement),
                    // A live lease may still deliver the provision: absence is no proof yet.
                    Err(SettleError::SupersedeRefused { .. }) => {
                        self.settle(step, step.not_found()).await
                    }
                    Err(other) => Err(other.into()),
                }
            }
        }
    }

    /// Hands the command back without calling the remote (the pool shut down while the
    /// dispatch waited for a remote-call slot): pending, due at once, nothing sent. Outside the
    /// attempt budget's dead-letter rule: the attempt never reached the remote, so it must not
    /// be the one that gives the command up; and it gives its attempt back
    /// ([`Settlement::gives_attempt_back`]), so it spends neither the budget of later attempts
    /// nor a backoff step.
    async fn hand_back(&self, step: &Step<'_>) -> Result<Settlement, DispatchError> {
        let now = self.store_now();
        let settlement = Settlement::retry(
            now,
            ErrorRecord::new(
                ErrorCode::ShutdownBeforeCall,
                "the worker pool shut down before this attempt's remote call; nothing was sent",
            ),
        )
        .gives_attempt_back();
        self.settle(&step.at(now), settlement).await
    }

    async fn remote_failure(
        &self,
        step: &Step<'_>,
        error: &RemoteError,
    ) -> Result<Settlement, DispatchError> {
        let step = &step.at(self.store_now());
        let status = error.failure.status();
        let mut settlement =
            step.remote_failure(status, &error.code, &error.message, error.retry_after);
        if step.command.operation == Operation::Provision
            && settlement.status() == Some(CommandStatus::Failed)
        {
            // A permanent refusal: judged against the control space as it is now (a deletion
            // may have taken it over while the call was in flight).
            let cs = self.control_space(step).await?;
            settlement = step.provision_failure(
                cs.as_ref(),
                status,
                &error.code,
                &error.message,
                error.retry_after,
            );
        }
        if step.command.operation == Operation::Provision && applied_nothing(error) {
            // The request never left, or KnowledgeFS refused it: nothing can land later.
            settlement = settlement.nothing_sent();
        }
        self.settle(step, settlement).await
    }
}

/// Whether KnowledgeFS answered that the space does not exist (`404
/// KNOWLEDGE_FS_SPACE_NOT_FOUND`): for a deletion, the cue to prove absence by a lookup.
fn remote_space_not_found(error: &RemoteError) -> bool {
    error.failure.status() == Some(404) && error.code == ErrorCode::KnowledgeFsSpaceNotFound
}

/// Whether `settlement` is a hand-back at shutdown ([`Dispatcher::hand_back`]).
pub(super) fn is_hand_back(settlement: &Settlement) -> bool {
    matches!(
        &settlement.outcome,
        Some(CommandOutcome::Retry { error, .. }) if error.code == ErrorCode::ShutdownBeforeCall
    )
}

/// Whether a failed call provably applied nothing remotely: it never left, or KnowledgeFS
/// answered with a refusal its protocol defines as effect-free (docs/protocol.md, "Errors and
/// `Retry-After`"): any 4xx, except that a `429` or `503` counts only with KnowledgeFS's own
/// error (`KFS_RATE_LIMITED`, `KFS_UNAVAILABLE`): the same status from a gateway (its page, no
/// such code) may have come while the backend went on (issue 29). Other 5xx (500, 502, 504)
/// may come from a gateway too, so they count as possibly applied; so does an answer without a
/// status (a remote that does not speak HTTP: nothing proves it refused).
fn applied_nothing(error: &RemoteError) -> bool {
    match error.failure {
        DispatchOutcome::NotDispatched => true,
        DispatchOutcome::Answered { status: Some(429) } => {
            error.code.as_str() == "KFS_RATE_LIMITED"
        }
        DispatchOutcome::Answered {
            status: Some(status @ 502..=504),
        } => {
            // The kernel's gateway rule, shared with the fences; of the three statuses only
            // KnowledgeFS's own 503 is a refusal its protocol defines as effect-free.
            let own_error = status == 503 && error.code.as_str() == "KFS_UNAVAILABLE";
            own_error && !tenantry_kernel::outcome::gateway_may_have_applied(status, own_error)
        }
        DispatchOutcome::Answered {
            status: Some(status),
        } => (400..500).contains(&status),
        DispatchOutcome::Answered { status: None } | DispatchOutcome::OutcomeUnknown => false,
    }
}
