//! The saga dispatcher: claim one due command, deliver it, settle it.
//!
//! The branches follow `seeds/lifecycle_saga.py`; each decision is a pure function of the
//! `tenantry-lifecycle` saga ([`Step`]). This module only sequences reads, remote calls and
//! settles, and reports metrics.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantry_kernel::{CommandId, LeaseOwner};
use tenantry_lifecycle::saga::{
    AbsentOutcome, DeleteStart, DeletionTarget, ProvisionStart, Recovery, RevokeStart, Step,
    StepError, codes,
};
use tenantry_lifecycle::{
    ClaimedCommand, CommandBody, CommandStatus, ControlSpace, DeletePayload, ProvisionPayload,
    RetryPolicy, RevokePayload, Settlement,
};
use tenantry_ports::lifecycle::{
    ClaimRequest, KnowledgeFs, LifecycleMetrics, LifecycleStore, NoMetrics, RemoteError,
    RemoteFailure, SettleError, StoreError, TaskMetric, TaskStatus,
};
use tracing::{Instrument, debug, info_span, warn};

/// Settings of the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatcherConfig {
    /// Lease length of a claim. Must exceed the remote call deadline (150 s by default), so a
    /// lease never expires while its call can still land. Default 300 s.
    pub lease_duration: Duration,
    /// Backoff of retries and the attempt budget (`max_attempts`, default 50).
    pub retry_policy: RetryPolicy,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(300),
            retry_policy: RetryPolicy::default(),
        }
    }
}

/// What one dispatch did (reference: `(claimed, completed, outbox_id)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchOutcome {
    /// Whether a command was claimed.
    pub claimed: bool,
    /// Whether it reached a terminal status (acked, dead-lettered as `failed`, or closed as
    /// moot).
    pub completed: bool,
    /// The claimed command.
    pub command_id: Option<CommandId>,
}

impl DispatchOutcome {
    fn idle() -> Self {
        Self {
            claimed: false,
            completed: false,
            command_id: None,
        }
    }
}

/// Why a dispatch ended without a settlement. The command stays processing under its lease and
/// is reclaimed once the lease expires (the next attempt re-reads everything).
///
/// Only a lost lease (nothing may be written) and a storage failure (nothing could be written)
/// reach the caller: the dispatcher settles step errors and refused compare-and-sets itself
/// (see [`Step::step_error`]), so the `Step` and `Conflict` variants are reported only when
/// that settle itself could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// Another worker took the lease over (or the command was settled already); this worker's
    /// result was dropped.
    #[error("lease on command {command_id} was lost before the result could be settled")]
    LeaseLost {
        /// The command.
        command_id: CommandId,
    },
    /// The control space moved on under the command.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The control space changed between read and settle (compare-and-set failed).
    #[error("control space changed concurrently: {0}")]
    Conflict(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<SettleError> for DispatchError {
    fn from(error: SettleError) -> Self {
        match error {
            SettleError::LeaseLost { command_id } => Self::LeaseLost { command_id },
            SettleError::Store(e) => Self::Store(e),
            other @ (SettleError::ControlSpaceConflict { .. }
            | SettleError::SupersedeRefused { .. }) => Self::Conflict(other.to_string()),
        }
    }
}

/// Claims, delivers and settles lifecycle commands.
pub struct Dispatcher<S, R> {
    store: S,
    remote: R,
    metrics: Arc<dyn LifecycleMetrics>,
    config: DispatcherConfig,
    jitter: Arc<dyn Fn() -> f64 + Send + Sync>,
}

impl<S, R> std::fmt::Debug for Dispatcher<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S: LifecycleStore, R: KnowledgeFs> Dispatcher<S, R> {
    /// A dispatcher with no metrics and no jitter.
    pub fn new(store: S, remote: R, config: DispatcherConfig) -> Self {
        Self {
            store,
            remote,
            metrics: Arc::new(NoMetrics),
            config,
            jitter: Arc::new(|| 0.0),
        }
    }

    /// Reports task states to `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<dyn LifecycleMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Draws jitter from `draw` (uniform in `[0, 1)`), used with the policy's jitter ratio.
    #[must_use]
    pub fn with_jitter(mut self, draw: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.jitter = Arc::new(draw);
        self
    }

    /// Claims the next due command (provision only while `product_enabled`), delivers it and
    /// settles it, all at time `now`.
    ///
    /// # Errors
    /// [`DispatchError`] when the attempt ended without a settlement (lease lost, storage
    /// failure); the command is then left to lease expiry. Remote failures are not errors:
    /// they settle as retries or, when permanent, as failures.
    pub async fn dispatch_one(
        &self,
        owner: &LeaseOwner,
        now: DateTime<Utc>,
        product_enabled: bool,
    ) -> Result<DispatchOutcome, DispatchError> {
        let mut claimed = self.claim(owner, now, product_enabled, 1).await?;
        match claimed.pop() {
            None => Ok(DispatchOutcome::idle()),
            Some(command) => self.dispatch_claimed(command, now, product_enabled).await,
        }
    }

    /// Claims up to `limit` due commands in one statement and dispatches them concurrently.
    /// Returns one result per claimed command (empty when nothing was due).
    ///
    /// # Errors
    /// [`StoreError`] when the claim itself failed.
    pub async fn dispatch_batch(
        &self,
        owner: &LeaseOwner,
        now: DateTime<Utc>,
        product_enabled: bool,
        limit: u32,
    ) -> Result<Vec<Result<DispatchOutcome, DispatchError>>, StoreError> {
        let claimed = self.claim(owner, now, product_enabled, limit).await?;
        let runs = claimed
            .into_iter()
            .map(|command| self.dispatch_claimed(command, now, product_enabled));
        Ok(futures::future::join_all(runs).await)
    }

    async fn claim(
        &self,
        owner: &LeaseOwner,
        now: DateTime<Utc>,
        product_enabled: bool,
        limit: u32,
    ) -> Result<Vec<ClaimedCommand>, StoreError> {
        self.store
            .claim(&ClaimRequest {
                owner: owner.clone(),
                now,
                lease_duration: self.config.lease_duration,
                include_provision: product_enabled,
                limit,
            })
            .await
    }

    /// Delivers and settles one claimed command.
    async fn dispatch_claimed(
        &self,
        command: ClaimedCommand,
        now: DateTime<Utc>,
        product_enabled: bool,
    ) -> Result<DispatchOutcome, DispatchError> {
        let span = info_span!(
            "lifecycle_dispatch",
            command_id = %command.id(),
            operation = %command.operation,
            operation_id = %command.operation_id,
            tenant = %command.tenant_id,
            control_space = %command.control_space_id,
            attempt = command.attempt_count,
        );
        async {
            self.record(&command, TaskStatus::Running, None, None);
            let step = Step {
                command: &command,
                now,
                policy: &self.config.retry_policy,
                jitter_draw: (self.jitter)(),
            };
            match self.run_saga(&step, product_enabled).await {
                Ok(settlement) => {
                    let completed = settlement.completes();
                    self.record_settled(&command, &settlement, now);
                    Ok(DispatchOutcome {
                        claimed: true,
                        completed,
                        command_id: Some(command.id().clone()),
                    })
                }
                Err(error) => {
                    warn!(%error, "dispatch ended without a settlement; the lease will expire");
                    self.record(
                        &command,
                        TaskStatus::DispatchError,
                        None,
                        Some(error_code(&error).to_owned()),
                    );
                    Err(error)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Runs the saga of one command and returns the settlement it persisted.
    ///
    /// Every attempt ends with a settle: a step error is settled by [`Step::step_error`]
    /// (immediate retry, or dead-letter for an identity conflict), a refused compare-and-set
    /// or supersede as a retry with `CONTROL_SPACE_CONFLICT` (nothing of the refused
    /// settlement was written and the lease is still held). Only a lost lease and a storage
    /// failure leave the command to lease expiry.
    async fn run_saga(
        &self,
        step: &Step<'_>,
        product_enabled: bool,
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
            CommandBody::Provision(payload) => self.provision(step, &payload).await,
            CommandBody::Delete(payload) => self.delete(step, &payload, product_enabled).await,
            CommandBody::Revoke(payload) => self.revoke(step, &payload).await,
            CommandBody::Unsupported(name) => self.settle(step, step.unsupported(&name)).await,
        };
        match result {
            Err(DispatchError::Step(error)) => {
                warn!(%error, "saga step refused; settling the attempt");
                self.settle(step, step.step_error(&error)).await
            }
            Err(DispatchError::Conflict(message)) => {
                let retry = step.retry(codes::CONTROL_SPACE_CONFLICT, message, None);
                self.settle(step, retry).await
            }
            other => other,
        }
    }

    async fn settle(
        &self,
        step: &Step<'_>,
        settlement: Settlement,
    ) -> Result<Settlement, DispatchError> {
        match self.store.settle(&step.command.lease, &settlement).await {
            Ok(()) => Ok(settlement),
            // The control space changed between read and settle (e.g. a deletion was requested
            // while a provision was in flight). The lease is still ours: hand the command back
            // as a retry so the next attempt re-reads, instead of idling until the lease expires.
            Err(SettleError::ControlSpaceConflict { control_space_id }) => {
                let retry = step.retry(
                    codes::CONTROL_SPACE_CONFLICT,
                    format!("control space {control_space_id} changed concurrently; re-reading on the next attempt"),
                    None,
                );
                self.store.settle(&step.command.lease, &retry).await?;
                Ok(retry)
            }
            Err(other) => Err(other.into()),
        }
    }

    async fn control_space(&self, step: &Step<'_>) -> Result<Option<ControlSpace>, StoreError> {
        self.store
            .control_space(&step.command.tenant_id, &step.command.control_space_id)
            .await
    }

    async fn remote_failure(
        &self,
        step: &Step<'_>,
        error: &RemoteError,
    ) -> Result<Settlement, DispatchError> {
        let status = match error.failure {
            RemoteFailure::Answered { status } => Some(status),
            RemoteFailure::NotDispatched | RemoteFailure::OutcomeUnknown => None,
        };
        self.settle(
            step,
            step.remote_failure(status, &error.code, &error.message, error.retry_after),
        )
        .await
    }

    async fn provision(
        &self,
        step: &Step<'_>,
        payload: &ProvisionPayload,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space(step).await?;
        let request = match step.start_provision(payload, cs.as_ref()) {
            ProvisionStart::SettleWithoutDelivery(settlement) => {
                return self.settle(step, settlement).await;
            }
            ProvisionStart::Deliver(request) => request,
        };
        let space = match self.remote.provision(&request).await {
            Ok(space) => space,
            Err(error) => return self.remote_failure(step, &error).await,
        };
        let cs = self.control_space(step).await?;
        let settlement = step.complete_provision(cs.as_ref(), &space)?;
        self.settle(step, settlement).await
    }

    async fn delete(
        &self,
        step: &Step<'_>,
        payload: &DeletePayload,
        product_enabled: bool,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space(step).await?;
        let provision = if product_enabled {
            None
        } else {
            self.latest_provision(step).await?
        };
        match step.start_delete(cs.as_ref(), provision.as_ref(), product_enabled) {
            DeleteStart::AlreadyDeleted(settlement) => return self.settle(step, settlement).await,
            DeleteStart::NeverProvisioned(settlement) => {
                match self.store.settle(&step.command.lease, &settlement).await {
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
                let found = match self
                    .remote
                    .find_by_provisioning_key(
                        &step.command.tenant_id,
                        &payload.provisioning_key,
                        &step.command.control_space_id,
                    )
                    .await
                {
                    Ok(found) => found,
                    Err(error) => return self.remote_failure(step, &error).await,
                };
                let cs = self.control_space(step).await?;
                match step.recover_identity(payload, found.as_ref(), cs.as_ref())? {
                    Recovery::Retry(settlement) => return self.settle(step, settlement).await,
                    Recovery::Absent => {
                        return self
                            .complete_absent(step, cs.as_ref(), product_enabled)
                            .await;
                    }
                    Recovery::Resolved {
                        request,
                        registration,
                    } => {
                        if let Some(registration) = registration {
                            self.store
                                .settle(&step.command.lease, &registration)
                                .await?;
                        }
                        request
                    }
                }
            }
        };
        let progress = match self.remote.request_deletion(&request).await {
            Ok(progress) => progress,
            Err(error) => return self.remote_failure(step, &error).await,
        };
        let cs = self.control_space(step).await?;
        let settlement = step.settle_deletion(cs.as_ref(), &progress)?;
        self.settle(step, settlement).await
    }

    async fn latest_provision(
        &self,
        step: &Step<'_>,
    ) -> Result<Option<tenantry_lifecycle::CommandRecord>, StoreError> {
        self.store
            .latest_provision(&step.command.tenant_id, &step.command.control_space_id)
            .await
    }

    async fn complete_absent(
        &self,
        step: &Step<'_>,
        cs: Option<&ControlSpace>,
        product_enabled: bool,
    ) -> Result<Settlement, DispatchError> {
        let provision = self.latest_provision(step).await?;
        match step.complete_absent(cs, provision.as_ref(), product_enabled) {
            AbsentOutcome::NotFound(settlement) => self.settle(step, settlement).await,
            AbsentOutcome::Complete(settlement) => {
                match self.store.settle(&step.command.lease, &settlement).await {
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

    async fn revoke(
        &self,
        step: &Step<'_>,
        payload: &RevokePayload,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space(step).await?;
        let request = match step.start_revoke(payload, cs.as_ref()) {
            RevokeStart::Moot(settlement) => return self.settle(step, settlement).await,
            RevokeStart::Deliver(request) => request,
        };
        match self.remote.revoke_grant(&request).await {
            Ok(ack) => self.settle(step, step.settle_revoke(payload, &ack)).await,
            Err(error) => self.remote_failure(step, &error).await,
        }
    }

    /// Reports a persisted settlement to metrics (and logs a dead-letter at `warn`).
    fn record_settled(
        &self,
        command: &ClaimedCommand,
        settlement: &Settlement,
        now: DateTime<Utc>,
    ) {
        let code = settlement
            .outcome
            .as_ref()
            .and_then(|o| o.error())
            .map(|e| e.code.clone());
        match settlement.status() {
            Some(CommandStatus::Succeeded) => {
                self.record(command, TaskStatus::Succeeded, Some(now), None);
            }
            Some(CommandStatus::Failed) => {
                warn!(
                    code = code.as_deref().unwrap_or(""),
                    "command failed for good (dead-lettered); an operator can retry or abandon it"
                );
                self.record(command, TaskStatus::Failed, None, code);
            }
            Some(CommandStatus::Superseded) => {
                debug!(
                    code = code.as_deref().unwrap_or(""),
                    "command closed as moot"
                );
                self.record(command, TaskStatus::Moot, None, code);
            }
            _ => {
                debug!(
                    code = code.as_deref().unwrap_or(""),
                    "command scheduled for retry"
                );
                self.record(command, TaskStatus::Retry, None, code);
            }
        }
    }

    fn record(
        &self,
        command: &ClaimedCommand,
        status: TaskStatus,
        settled_at: Option<DateTime<Utc>>,
        error_code: Option<String>,
    ) {
        let duration_seconds = settled_at
            .map(|at| ((at - command.created_at).num_milliseconds().max(0) as f64) / 1000.0);
        let metric = TaskMetric {
            operation: command.operation.to_string(),
            status,
            duration_seconds,
            error_code,
        };
        if let Err(error) = self.metrics.record_task(&metric) {
            warn!(%error, operation = %command.operation, status = status.as_str(), "lifecycle metric export failed");
        }
    }
}

fn error_code(error: &DispatchError) -> &'static str {
    match error {
        DispatchError::LeaseLost { .. } => "LEASE_LOST",
        DispatchError::Step(StepError::OwnershipLost { .. }) => "OWNERSHIP_LOST",
        DispatchError::Step(StepError::IdentityConflict) => "IDENTITY_CONFLICT",
        DispatchError::Step(StepError::Transition(_)) => "FORBIDDEN_TRANSITION",
        DispatchError::Conflict(_) => "CONTROL_SPACE_CONFLICT",
        DispatchError::Store(_) => "STORE_UNAVAILABLE",
    }
}
