//! The saga dispatcher: claim one due command, deliver it, settle it.
//!
//! The branches follow the saga protocol (`docs/protocol.md`, section 1); each decision is a pure function of the
//! `tenantry-lifecycle` saga ([`Step`]). This module only sequences reads, remote calls and
//! settles, and reports metrics.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantry_kernel::{CommandId, ControlSpaceId, DispatchOutcome, LeaseOwner};
use tenantry_lifecycle::saga::{
    AbsentOutcome, DeleteStart, DeletionTarget, ProvisionStart, Recovery, RevokeStart, Step,
    StepError,
};
use tenantry_lifecycle::{
    ClaimedCommand, ClaimedControlSpace, CommandBody, CommandOutcome, CommandRecord, CommandStatus,
    ControlSpace, DeletePayload, ErrorCode, ErrorRecord, LeaseToken, Operation, ProvisionPayload,
    RetryPolicy, RevokePayload, Settlement,
};
use tenantry_ports::clock::{Clock, SystemClock};
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandFilter, KnowledgeFs, LifecycleMetrics, LifecycleStore, NoMetrics,
    RemoteError, RenewalOutcome, SettleError, StoreError, TaskMetric, TaskStatus,
};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::lease::{Holder, LeaseBook, LeaseState, OwnSettle, Refusal, classify_refusal};

/// Settings of the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatcherConfig {
    /// Lease length of a claim (default 30 s). With `renew_leases` the lease is renewed every
    /// third of this while a dispatch is in flight, so one remote call may take longer than the
    /// lease; without renewal it must exceed the remote call deadline (150 s by default).
    pub lease_duration: Duration,
    /// Renew the lease of a dispatch in flight every `lease_duration / 3` (default true).
    pub renew_leases: bool,
    /// How long after a provision's last attempt ended a request of it may still land remotely
    /// (a gateway answered 504 while the backend went on). A deletion that finds no remote
    /// space completes on that proof only after this grace period (default 600 s).
    pub absence_grace: Duration,
    /// Backoff of retries and the attempt budget (`max_attempts`, default 50).
    pub retry_policy: RetryPolicy,
    /// The remote call deadline (default 150 s, the HTTP client's default): a claim that takes
    /// over an expired lease extends the replaced attempt's window by it
    /// ([`ClaimRequest::call_deadline`]).
    pub call_deadline: Duration,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(30),
            renew_leases: true,
            absence_grace: Duration::from_secs(600),
            retry_policy: RetryPolicy::default(),
            call_deadline: Duration::from_secs(150),
        }
    }
}

/// Builder-style setters over [`DispatcherConfig::default`]:
/// `DispatcherConfig::default().with_lease_duration(Duration::from_secs(60))`.
impl DispatcherConfig {
    /// Sets [`lease_duration`](Self::lease_duration).
    #[must_use]
    pub fn with_lease_duration(mut self, lease_duration: Duration) -> Self {
        self.lease_duration = lease_duration;
        self
    }

    /// Sets [`renew_leases`](Self::renew_leases). Without renewal, `lease_duration` must exceed
    /// the remote call deadline (the app's configuration checks it).
    #[must_use]
    pub fn with_renew_leases(mut self, renew_leases: bool) -> Self {
        self.renew_leases = renew_leases;
        self
    }

    /// Sets [`absence_grace`](Self::absence_grace).
    #[must_use]
    pub fn with_absence_grace(mut self, absence_grace: Duration) -> Self {
        self.absence_grace = absence_grace;
        self
    }

    /// Sets [`retry_policy`](Self::retry_policy).
    #[must_use]
    pub fn with_retry_policy(mut self, retry_policy: RetryPolicy) -> Self {
        self.retry_policy = retry_policy;
        self
    }

    /// Sets [`call_deadline`](Self::call_deadline).
    #[must_use]
    pub fn with_call_deadline(mut self, call_deadline: Duration) -> Self {
        self.call_deadline = call_deadline;
        self
    }
}

/// What one dispatch did (reference: `(claimed, completed, outbox_id)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DispatchReport {
    /// Whether a command was claimed.
    pub claimed: bool,
    /// Whether it reached a terminal status (acked, dead-lettered as `failed`, or closed as
    /// moot).
    pub completed: bool,
    /// The claimed command.
    pub command_id: Option<CommandId>,
}

impl DispatchReport {
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
/// Only a lost or expired lease (nothing may be written) and a storage failure (nothing could
/// be written) reach the caller: the dispatcher settles step errors and refused compare-and-sets itself
/// (see [`Step::step_error`]; a refused compare-and-set retries with `CONTROL_SPACE_CONFLICT`),
/// so the `Step`, `ControlSpaceConflict`, `SupersedeRefused` and `SettleRefused` variants are
/// reported only when that settle itself could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DispatchError {
    /// Another worker took the lease over (or the command was settled already); this worker's
    /// result was dropped.
    #[error("lease on command {command_id} was lost before the result could be settled")]
    LeaseLost {
        /// The command.
        command_id: CommandId,
    },
    /// The attempt could no longer prove its lease live (its local deadline passed while the
    /// store did not renew it, or a renewal was refused) and nobody else holds the command:
    /// the attempt stopped, a remote call it had in flight was cancelled, nothing was written.
    /// The command is claimed again once the lease expired on the store's clock (case 014).
    #[error(
        "lease on command {command_id} expired before the attempt ended (nobody else holds it); \
         its remote call was cancelled or not made, and nothing was settled"
    )]
    LeaseExpired {
        /// The command.
        command_id: CommandId,
    },
    /// The control space moved on under the command.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The control space changed between read and settle (its compare-and-set failed).
    #[error("control space {control_space_id} changed concurrently")]
    ControlSpaceConflict {
        /// The control space whose compare-and-set failed.
        control_space_id: ControlSpaceId,
    },
    /// The command the settlement supersedes no longer meets its supersede rule.
    #[error("control space changed concurrently: command {command_id} can no longer be superseded")]
    SupersedeRefused {
        /// The command that could not be superseded.
        command_id: CommandId,
    },
    /// The store refused the settlement's compare-and-set for a reason this version does not
    /// name (a refusal added to [`SettleError`] later); handled like a control-space conflict.
    #[error("control space changed concurrently: {0}")]
    SettleRefused(SettleError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<SettleError> for DispatchError {
    fn from(error: SettleError) -> Self {
        match error {
            SettleError::LeaseLost { command_id } => Self::LeaseLost { command_id },
            SettleError::Store(e) => Self::Store(e),
            SettleError::ControlSpaceConflict { control_space_id } => {
                Self::ControlSpaceConflict { control_space_id }
            }
            SettleError::SupersedeRefused { command_id } => Self::SupersedeRefused { command_id },
            // Any refusal added later: a compare-and-set the store refused.
            other => Self::SettleRefused(other),
        }
    }
}

/// The pool closed its remote-call slots (shutdown): the dispatch must not call the remote.
struct SlotsClosed;

/// What one renewal did ([`Dispatcher::renew_once`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// The store extended the lease.
    Renewed,
    /// The store refused (now or before): the lease is gone.
    Refused,
    /// The store failed; the lease may still be live there.
    Failed,
}

/// A permit of `slots` for one remote call (`Ok(None)` without a bound). The worker pool closes
/// its semaphore when it shuts down: a dispatch still waiting then (or arriving afterwards)
/// gets [`SlotsClosed`] and hands its command back instead of calling.
async fn remote_slot(
    slots: Option<&Semaphore>,
) -> Result<Option<SemaphorePermit<'_>>, SlotsClosed> {
    match slots {
        Some(slots) => slots.acquire().await.map(Some).map_err(|_| SlotsClosed),
        None => Ok(None),
    }
}

/// Claims, delivers and settles lifecycle commands.
///
/// Time: claims are decided by the store's clock (the database clock). The dispatcher keeps the
/// store's time of the last claim with its own monotonic reading then, and computes every
/// timestamp it writes (`next_attempt_at`, `completed_at`, `failed_at`, a lookup's
/// `observed_at`) as that time plus the monotonic time elapsed, when the attempt ends: a retry
/// after a slow failure still waits its backoff, replicas with skewed clocks agree, and a step
/// of this process's wall clock mid-call moves nothing.
///
/// # Example
/// Enqueue a provision, then dispatch it once against a fake KnowledgeFS (a service uses
/// `SeaOrmLifecycleStore` and `HttpKnowledgeFs`, and runs a [`Worker`](super::Worker)):
/// ```
/// use std::sync::Arc;
///
/// use tenantry_engine::lifecycle::{CommandIntake, Dispatcher, DispatcherConfig, SystemClock};
/// use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
/// use tenantry_lifecycle::intake::CreateControlSpace;
/// use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, InMemoryLifecycleStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = InMemoryLifecycleStore::new();
/// let remote = FakeKnowledgeFs::new();
/// CommandIntake::new(store.clone(), Arc::new(SystemClock))
///     .create_control_space(&CreateControlSpace {
///         tenant_id: TenantId::parse("acme")?,
///         control_space_id: ControlSpaceId::parse("cs-1")?,
///         idempotency_key: IdempotencyKey::parse("create-cs-1")?,
///         name: "Docs".into(),
///         slug: "docs".into(),
///         icon: String::new(),
///         description: String::new(),
///         model_intent: None,
///         profile_intent: None,
///     })
///     .await?;
///
/// let dispatcher = Dispatcher::new(store, remote.clone(), DispatcherConfig::default());
/// let owner = LeaseOwner::parse("worker-1")?;
/// let outcome = dispatcher.dispatch_one(&owner, true).await?;
/// assert!(outcome.claimed && outcome.completed);
/// // Nothing else is due.
/// assert!(!dispatcher.dispatch_one(&owner, true).await?.claimed);
/// # Ok(())
/// # }
/// ```
pub struct Dispatcher<S, R> {
    store: S,
    remote: R,
    metrics: Arc<dyn LifecycleMetrics>,
    config: DispatcherConfig,
    jitter: Arc<dyn Fn() -> f64 + Send + Sync>,
    clock: Arc<dyn Clock>,
    /// The store's clock as of the last claim, against this dispatcher's monotonic clock:
    /// (`claimed_at`, the monotonic reading when the claim answered); `None` until the first
    /// claim.
    store_anchor: Mutex<Option<(DateTime<Utc>, Instant)>>,
    leases: LeaseBook,
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
            clock: Arc::new(SystemClock),
            store_anchor: Mutex::new(None),
            leases: LeaseBook::default(),
        }
    }

    /// Reads this process's time from `clock` (the system clock by default): its wall time
    /// only for the offset to the store's clock (claims never depend on it); its monotonic
    /// time for the local lease deadlines; its timers for the renewal ticks (and, through
    /// [`Dispatcher::clock`], the idle sleeps of the workers on this dispatcher).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The settings this dispatcher runs with.
    pub fn config(&self) -> &DispatcherConfig {
        &self.config
    }

    /// The clock this dispatcher reads and sleeps on (see [`Dispatcher::with_clock`]).
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The store's clock as estimated here: the store's time at the last claim plus the
    /// monotonic time elapsed since (before any claim: this process's wall clock). A step of
    /// the wall clock mid-call (an operator, NTP) therefore moves no timestamp the engine
    /// writes (docs/protocol.md, "Time comes from the database").
    fn store_now(&self) -> DateTime<Utc> {
        let anchor = *self
            .store_anchor
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match anchor {
            Some((claimed_at, at)) => {
                let elapsed = self.clock.monotonic().saturating_duration_since(at);
                claimed_at + chrono::Duration::from_std(elapsed).unwrap_or(chrono::Duration::MAX)
            }
            None => self.clock.now(),
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
    /// settles it. "Due" is decided by the store's clock.
    ///
    /// # Errors
    /// [`DispatchError`] when the attempt ended without a settlement (lease lost, storage
    /// failure); the command is then left to lease expiry. Remote failures are not errors:
    /// they settle as retries or, when permanent, as failures.
    pub async fn dispatch_one(
        &self,
        owner: &LeaseOwner,
        product_enabled: bool,
    ) -> Result<DispatchReport, DispatchError> {
        let (mut claimed, claim_started) = self.claim(owner, product_enabled, 1).await?;
        match claimed.pop() {
            None => Ok(DispatchReport::idle()),
            Some(command) => {
                self.dispatch_claimed(command, claim_started, product_enabled, None)
                    .await
            }
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
        product_enabled: bool,
        limit: u32,
    ) -> Result<Vec<Result<DispatchReport, DispatchError>>, StoreError> {
        let (claimed, claim_started) = self.claim(owner, product_enabled, limit).await?;
        let runs = claimed
            .into_iter()
            .map(|command| self.dispatch_claimed(command, claim_started, product_enabled, None));
        Ok(futures::future::join_all(runs).await)
    }

    /// How long until the next command becomes claimable, by the store's clock (see
    /// [`CommandQueue::next_due_in`](tenantry_ports::lifecycle::CommandQueue::next_due_in)):
    /// `None` when nothing is waiting or the store cannot tell.
    /// An idle worker sleeps no longer than this.
    ///
    /// # Errors
    /// [`StoreError`] when the store fails.
    pub async fn next_due_in(&self, product_enabled: bool) -> Result<Option<Duration>, StoreError> {
        self.store.next_due_in(product_enabled).await
    }

    /// Claims, and returns the claimed commands with the instant the claim started (the lease
    /// cannot have started before it).
    pub(super) async fn claim(
        &self,
        owner: &LeaseOwner,
        product_enabled: bool,
        limit: u32,
    ) -> Result<(Vec<ClaimedCommand>, Instant), StoreError> {
        let started = self.clock.monotonic();
        let claimed = self
            .store
            .claim(&ClaimRequest {
                owner: owner.clone(),
                lease_duration: self.config.lease_duration,
                include_provision: product_enabled,
                limit,
                call_deadline: self.config.call_deadline,
            })
            .await?;
        if let Some(first) = claimed.first() {
            *self
                .store_anchor
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((first.claimed_at, self.clock.monotonic()));
        }
        Ok((claimed, started))
    }

    /// Delivers and settles one claimed command, renewing its lease while the saga runs.
    /// With `remote_slots`, the remote call waits for a permit of it (the lease is renewed
    /// meanwhile and checked again once the permit is held).
    pub(super) async fn dispatch_claimed(
        &self,
        command: ClaimedCommand,
        claim_started: Instant,
        product_enabled: bool,
        remote_slots: Option<&Semaphore>,
    ) -> Result<DispatchReport, DispatchError> {
        let span = info_span!(
            "lifecycle_dispatch",
            command_id = %command.id(),
            operation = %command.operation,
            operation_id = %command.operation_id,
            tenant = %command.tenant_id,
            control_space = %command.control_space_id,
            attempt = command.attempt_count,
        );
        let lease = self.leases.open(
            command.id(),
            command.lease.epoch,
            claim_started + self.config.lease_duration,
        );
        let result = async {
            self.record(&command, TaskStatus::Running, None, None);
            let step = Step {
                command: &command,
                now: self.store_now(),
                policy: &self.config.retry_policy,
                jitter_draw: (self.jitter)(),
            };
            // The renewal loop runs in this same future: a dispatch that is not polled (a
            // paused process) does not renew, and its lease expires as it should.
            let outcome = tokio::select! {
                biased;
                outcome = self.run_saga(&step, product_enabled, remote_slots) => outcome,
                never = self.keep_renewed(&command, &lease) => match never {},
            };
            if lease.refusal_deferred() {
                // A renewal was refused after this attempt sent the settle that ends its
                // lease: now that the settle answered, say which of the two it was.
                self.report_deferred_refusal(&command, &outcome).await;
            }
            match outcome {
                Ok(settlement) => {
                    let completed = settlement.completes();
                    self.record_settled(&command, &settlement, self.store_now());
                    Ok(DispatchReport {
                        claimed: true,
                        completed,
                        command_id: Some(command.id().clone()),
                    })
                }
                Err(error) => {
                    let error = self.report_unsettled(&command, error).await;
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
        .await;
        self.leases.close(command.id(), command.lease.epoch);
        result
    }

    /// Renews the lease of `command` every third of the lease length, forever; after a renewal
    /// is refused it stops renewing (and waits forever). A refusal is reported by who has the
    /// command ([`classify_refusal`]): when this attempt already sent the settle that ends its
    /// lease, the report waits for that settle's answer ([`Self::report_deferred_refusal`]),
    /// since the refusal is most likely the settle's own doing. A failed renewal (storage
    /// error) is retried at the next tick; the local deadline is not moved then (once it
    /// passes, a call in flight is cancelled: [`Self::call`]).
    async fn keep_renewed(&self, command: &ClaimedCommand, lease: &LeaseState) -> Infallible {
        let period = self.config.lease_duration / 3;
        if !self.config.renew_leases || period.is_zero() {
            return std::future::pending().await;
        }
        loop {
            self.clock.sleep(period).await;
            if self.renew_once(command, lease).await == Renewal::Refused {
                return std::future::pending().await;
            }
        }
    }

    /// One renewal of `command`'s lease: extends the local deadline when the store renewed it,
    /// records and reports a refusal (once), counts a storage failure.
    async fn renew_once(&self, command: &ClaimedCommand, lease: &LeaseState) -> Renewal {
        if lease.is_refused() {
            return Renewal::Refused;
        }
        let started = self.clock.monotonic();
        match self
            .store
            .renew_lease(&command.lease, self.config.lease_duration)
            .await
        {
            Ok(_) => {
                lease.extend(started + self.config.lease_duration);
                self.record_renewal(command, RenewalOutcome::Renewed);
                Renewal::Renewed
            }
            Err(SettleError::LeaseLost { .. }) => {
                if lease.refused() == Refusal::Report {
                    let holder = self.holder(command).await;
                    let outcome =
                        classify_refusal(&command.lease, OwnSettle::NotCommitted, &holder);
                    self.report_refusal(command, outcome, &holder);
                }
                Renewal::Refused
            }
            Err(error) => {
                self.record_renewal(command, RenewalOutcome::Failed);
                warn!(%error, "lease renewal failed; trying again at the next tick");
                Renewal::Failed
            }
        }
    }

    /// Reports a renewal refused after this attempt sent the settle that ends its lease, once
    /// the attempt's `outcome` is known: a committed settle explains the refusal (`settled`,
    /// or `handed_back` at shutdown); otherwise the command is read as for any refusal.
    async fn report_deferred_refusal(
        &self,
        command: &ClaimedCommand,
        outcome: &Result<Settlement, DispatchError>,
    ) {
        let own = match outcome {
            Ok(settlement) if settlement.outcome.is_some() => OwnSettle::Committed {
                handed_back: is_hand_back(settlement),
            },
            _ => OwnSettle::NotCommitted,
        };
        let holder = match own {
            OwnSettle::Committed { .. } => Holder::Unknown,
            OwnSettle::NotCommitted => self.holder(command).await,
        };
        let classified = classify_refusal(&command.lease, own, &holder);
        self.report_refusal(command, classified, &holder);
    }

    /// Counts and logs a refused renewal as `outcome`: only [`RenewalOutcome::Lost`] is a
    /// `LEASE_LOST` warning (docs/operations.md).
    fn report_refusal(&self, command: &ClaimedCommand, outcome: RenewalOutcome, holder: &Holder) {
        self.record_renewal(command, outcome);
        match outcome {
            RenewalOutcome::Lost => {
                let (new_owner, new_epoch) = match holder {
                    Holder::Row { owner, epoch, .. } => {
                        (owner.as_ref().map_or("none", LeaseOwner::as_str), epoch.0)
                    }
                    Holder::Unknown | Holder::Gone => ("none", 0),
                };
                // No `our_epoch` here: that field marks a dropped attempt's line (the chaos
                // checks read it as a refused late settle).
                warn!(
                    code = "LEASE_LOST",
                    new_owner,
                    new_epoch,
                    "lease renewal refused: another worker took the command over; this \
                     attempt's result will be dropped"
                );
            }
            RenewalOutcome::Expired => warn!(
                our_epoch = command.lease.epoch.0,
                "lease renewal refused: the lease expired before it was renewed (a paused \
                 process or a slow store); nobody has taken the command over yet, and this \
                 attempt sends no further request"
            ),
            RenewalOutcome::Failed => warn!(
                our_epoch = command.lease.epoch.0,
                "lease renewal refused, and who holds the command could not be read; this \
                 attempt sends no further request"
            ),
            RenewalOutcome::Settled => debug!(
                "lease renewal met this attempt's own settle (the command is settled); renewal \
                 stopped"
            ),
            RenewalOutcome::HandedBack => {
                debug!("lease renewal met this attempt's hand-back at shutdown; renewal stopped")
            }
            RenewalOutcome::Renewed => {}
        }
    }

    /// The command's row as the store has it now, for a refused renewal or a lost lease.
    async fn holder(&self, command: &ClaimedCommand) -> Holder {
        match self.read_row(command).await {
            Ok(Some(row)) => Holder::Row {
                status: row.status,
                owner: row.lease_owner,
                epoch: row.lease_epoch,
            },
            Ok(None) => Holder::Gone,
            Err(error) => {
                debug!(%error, "reading the command after a refused renewal failed");
                Holder::Unknown
            }
        }
    }

    async fn read_row(
        &self,
        command: &ClaimedCommand,
    ) -> Result<Option<CommandRecord>, StoreError> {
        let rows = self
            .store
            .list_commands(&CommandFilter {
                tenant_id: Some(command.tenant_id.clone()),
                control_space_id: Some(command.control_space_id.clone()),
                limit: 1000,
                ..CommandFilter::default()
            })
            .await?;
        Ok(rows.into_iter().find(|r| &r.id == command.id()))
    }

    /// Settles through the store, first noting in the lease book that this attempt is ending
    /// its lease when `settlement` has an outcome (a renewal refused from then on may be this
    /// settle's own doing, see [`Self::keep_renewed`]).
    async fn store_settle(
        &self,
        lease: &LeaseToken,
        settlement: &Settlement,
    ) -> Result<(), SettleError> {
        if settlement.outcome.is_some() {
            self.leases.ending(&lease.command_id, lease.epoch);
        }
        self.store.settle(lease, settlement).await
    }

    /// Refuses to start a remote call on a lease this worker cannot prove live (a renewal was
    /// refused, or its local deadline, counted from before the claim or the last renewal,
    /// passed and a renewal now is refused or fails). A claim or a renewal that took long
    /// (a database that was slow to answer, case 014) thus costs one renewal, not the attempt.
    async fn ensure_lease(&self, command: &ClaimedCommand) -> Result<(), DispatchError> {
        let expired = || DispatchError::LeaseExpired {
            command_id: command.id().clone(),
        };
        let Some(lease) = self.leases.get(command.id(), command.lease.epoch) else {
            return Err(expired());
        };
        if self
            .leases
            .is_live(command.id(), command.lease.epoch, self.clock.monotonic())
        {
            return Ok(());
        }
        if lease.is_refused() || !self.config.renew_leases {
            return Err(expired());
        }
        match self.renew_once(command, &lease).await {
            Renewal::Renewed => Ok(()),
            Renewal::Refused | Renewal::Failed => Err(expired()),
        }
    }

    /// Makes one remote call of `command`'s attempt (docs/protocol.md, "Leases, renewal and
    /// the attempt window"): waits until no other attempt of the command in this process has a
    /// call in flight, checks the lease ([`Self::ensure_lease`]), and cancels the call (drops
    /// it) as soon as the lease can no longer be proven live. One process never has two
    /// requests of one command in flight (case 014).
    ///
    /// # Errors
    /// [`DispatchError::LeaseExpired`] when the lease could not be proven live before the call
    /// or ended during it (the caller classifies it by who holds the command now).
    async fn call<T>(
        &self,
        command: &ClaimedCommand,
        call: impl Future<Output = Result<T, RemoteError>>,
    ) -> Result<Result<T, RemoteError>, DispatchError> {
        let _turn = self.leases.call_turn(command.id()).await;
        self.ensure_lease(command).await?;
        let Some(lease) = self.leases.get(command.id(), command.lease.epoch) else {
            return Err(DispatchError::LeaseExpired {
                command_id: command.id().clone(),
            });
        };
        tokio::select! {
            biased;
            () = lease.ended(self.clock.as_ref()) => {
                warn!(
                    our_epoch = command.lease.epoch.0,
                    "the lease can no longer be proven live (renewals failed past its deadline, \
                     or one was refused): the remote call in flight was cancelled"
                );
                Err(DispatchError::LeaseExpired {
                    command_id: command.id().clone(),
                })
            }
            answer = call => Ok(answer),
        }
    }

    /// Logs an attempt that ended without a settlement. An attempt that ended on its lease
    /// (a refused settle, a lease it could not prove live) is classified by who holds the
    /// command now ([`classify_refusal`]): only when another attempt has it is the error
    /// [`DispatchError::LeaseLost`] and the line `LEASE_LOST` ("lease was taken over", with
    /// `our_epoch`); this owner's own re-claim, or nobody, gives
    /// [`DispatchError::LeaseExpired`] (docs/operations.md). Returns the error as classified.
    async fn report_unsettled(
        &self,
        command: &ClaimedCommand,
        error: DispatchError,
    ) -> DispatchError {
        let (DispatchError::LeaseLost { command_id } | DispatchError::LeaseExpired { command_id }) =
            &error
        else {
            warn!(%error, code = error_code(&error), "dispatch ended without a settlement; the command is retried once its lease expires");
            return error;
        };
        let holder = self.holder(command).await;
        let (new_owner, new_epoch, status) = match &holder {
            Holder::Row {
                status,
                owner,
                epoch,
            } => (
                owner.as_ref().map_or("none", LeaseOwner::as_str),
                epoch.0,
                status.as_str(),
            ),
            Holder::Unknown | Holder::Gone => ("none", 0, "unknown"),
        };
        match classify_refusal(&command.lease, OwnSettle::NotCommitted, &holder) {
            RenewalOutcome::Lost => {
                warn!(
                    code = "LEASE_LOST",
                    new_owner,
                    new_epoch,
                    status,
                    our_epoch = command.lease.epoch.0,
                    "lease was taken over by another worker (or the command was settled); this \
                     attempt's result was dropped and nothing it computed was written"
                );
                DispatchError::LeaseLost {
                    command_id: command_id.clone(),
                }
            }
            _ => {
                warn!(
                    code = "LEASE_EXPIRED",
                    owner = new_owner,
                    epoch = new_epoch,
                    status,
                    our_epoch = command.lease.epoch.0,
                    "dispatch ended without a settlement: its lease expired before the attempt \
                     ended and no other worker holds the command; its remote call was cancelled \
                     or not made, and the command is claimed again once the lease expired"
                );
                DispatchError::LeaseExpired {
                    command_id: command_id.clone(),
                }
            }
        }
    }

    fn record_renewal(&self, command: &ClaimedCommand, outcome: RenewalOutcome) {
        if let Err(error) = self
            .metrics
            .record_lease_renewal(command.operation.as_str(), outcome)
        {
            warn!(%error, "lifecycle metric export failed");
        }
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
        slots: Option<&Semaphore>,
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
            CommandBody::Provision(payload) => self.provision(step, &payload, slots).await,
            CommandBody::Delete(payload) => {
                self.delete(step, &payload, product_enabled, slots).await
            }
            CommandBody::Revoke(payload) => self.revoke(step, &payload, slots).await,
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

    async fn settle(
        &self,
        step: &Step<'_>,
        settlement: Settlement,
    ) -> Result<Settlement, DispatchError> {
        match self.store_settle(&step.command.lease, &settlement).await {
            Ok(()) => Ok(settlement),
            // The control space changed between read and settle (e.g. a deletion was requested
            // while a provision was in flight). The lease is still ours: hand the command back
            // as a retry so the next attempt re-reads, instead of idling until the lease expires.
            Err(SettleError::ControlSpaceConflict { control_space_id }) => {
                let mut retry = step.at(self.store_now()).retry(
                    ErrorCode::ControlSpaceConflict,
                    format!("control space {control_space_id} changed concurrently; re-reading on the next attempt"),
                    None,
                );
                retry.may_have_sent = settlement.may_have_sent;
                retry.spends_attempt = settlement.spends_attempt;
                self.store_settle(&step.command.lease, &retry).await?;
                Ok(retry)
            }
            Err(other) => Err(other.into()),
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

    async fn control_space(&self, step: &Step<'_>) -> Result<Option<ControlSpace>, StoreError> {
        self.store
            .control_space(&step.command.tenant_id, &step.command.control_space_id)
            .await
    }

    /// The control space for the first step of an attempt: the one the claim carried when the
    /// store read it right after the claim (docs/protocol.md, "The control space comes with the
    /// claim"), else a read now. Later steps of the attempt always read again.
    async fn control_space_at_start(
        &self,
        step: &Step<'_>,
    ) -> Result<Option<ControlSpace>, StoreError> {
        match &step.command.control_space {
            ClaimedControlSpace::Read(space) => Ok(space.clone()),
            ClaimedControlSpace::NotRead => self.control_space(step).await,
        }
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
        if step.command.operation == Operation::Provision && applied_nothing(error) {
            // The request never left, or KnowledgeFS refused it: nothing can land later.
            settlement = settlement.nothing_sent();
        }
        self.settle(step, settlement).await
    }

    async fn provision(
        &self,
        step: &Step<'_>,
        payload: &ProvisionPayload,
        slots: Option<&Semaphore>,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space_at_start(step).await?;
        let request = match step.start_provision(payload, cs.as_ref()) {
            ProvisionStart::SettleWithoutDelivery(settlement) => {
                return self.settle(step, settlement).await;
            }
            ProvisionStart::Deliver(request) => request,
        };
        let Ok(slot) = remote_slot(slots).await else {
            return self.hand_back(step).await;
        };
        let called = self
            .call(step.command, self.remote.provision(&request))
            .await?;
        drop(slot);
        let space = match called {
            Ok(space) => space,
            Err(error) => return self.remote_failure(step, &error).await,
        };
        let step = &step.at(self.store_now());
        let cs = self.control_space(step).await?;
        let settlement = step.complete_provision(cs.as_ref(), &space)?;
        self.settle(step, settlement).await
    }

    async fn delete(
        &self,
        step: &Step<'_>,
        payload: &DeletePayload,
        product_enabled: bool,
        slots: Option<&Semaphore>,
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
                // Absence is proven only as of the lookup's sending (docs/protocol.md, "Absence
                // is judged when the lookup was sent").
                let lookup_sent_at = self.store_now();
                let found = match self
                    .call(
                        step.command,
                        self.remote.find_by_provisioning_key(
                            &step.command.tenant_id,
                            &payload.provisioning_key,
                            &step.command.control_space_id,
                        ),
                    )
                    .await?
                {
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
        let Ok(slot) = remote_slot(slots).await else {
            return self.hand_back(step).await;
        };
        let called = self
            .call(step.command, self.remote.request_deletion(&request))
            .await?;
        drop(slot);
        let progress = match called {
            Ok(progress) => progress,
            Err(error) if remote_space_not_found(&error) => {
                return self.confirm_gone(step, payload, &error).await;
            }
            Err(error) => return self.remote_failure(step, &error).await,
        };
        let step = &step.at(self.store_now());
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

    /// KnowledgeFS answered the deletion `404 KNOWLEDGE_FS_SPACE_NOT_FOUND` (case 012): look the
    /// space up by provisioning key; when the lookup finds nothing, the deletion completes
    /// under the absence rules ([`Step::complete_gone`]); when it finds a space, or fails, the
    /// attempt settles as the remote error would have.
    async fn confirm_gone(
        &self,
        step: &Step<'_>,
        payload: &DeletePayload,
        not_found: &RemoteError,
    ) -> Result<Settlement, DispatchError> {
        // Absence is proven only as of the lookup's sending.
        let lookup_sent_at = self.store_now();
        let found = self
            .call(
                step.command,
                self.remote.find_by_provisioning_key(
                    &step.command.tenant_id,
                    &payload.provisioning_key,
                    &step.command.control_space_id,
                ),
            )
            .await?;
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

    async fn revoke(
        &self,
        step: &Step<'_>,
        payload: &RevokePayload,
        slots: Option<&Semaphore>,
    ) -> Result<Settlement, DispatchError> {
        let cs = self.control_space_at_start(step).await?;
        let request = match step.start_revoke(payload, cs.as_ref()) {
            RevokeStart::Moot(settlement) => return self.settle(step, settlement).await,
            RevokeStart::Deliver(request) => request,
        };
        let Ok(slot) = remote_slot(slots).await else {
            return self.hand_back(step).await;
        };
        let called = self
            .call(step.command, self.remote.revoke_grant(&request))
            .await?;
        drop(slot);
        match called {
            Ok(ack) => {
                let step = &step.at(self.store_now());
                self.settle(step, step.settle_revoke(payload, &ack)).await
            }
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
            .map(|e| e.code.to_string());
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

/// Whether KnowledgeFS answered that the space does not exist (`404
/// KNOWLEDGE_FS_SPACE_NOT_FOUND`): for a deletion, the cue to prove absence by a lookup.
fn remote_space_not_found(error: &RemoteError) -> bool {
    error.failure.status() == Some(404) && error.code == ErrorCode::KnowledgeFsSpaceNotFound
}

/// Whether `settlement` is a hand-back at shutdown ([`Dispatcher::hand_back`]).
fn is_hand_back(settlement: &Settlement) -> bool {
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

/// The message a refused compare-and-set is retried with: the store's refusal, as before the
/// refusal had typed variants (`control space X changed concurrently`, `command X can no longer
/// be superseded`).
fn refusal_message(error: &DispatchError) -> String {
    match error {
        DispatchError::ControlSpaceConflict { control_space_id } => {
            SettleError::ControlSpaceConflict {
                control_space_id: control_space_id.clone(),
            }
            .to_string()
        }
        DispatchError::SupersedeRefused { command_id } => SettleError::SupersedeRefused {
            command_id: command_id.clone(),
        }
        .to_string(),
        DispatchError::SettleRefused(refusal) => refusal.to_string(),
        other => other.to_string(),
    }
}

fn error_code(error: &DispatchError) -> &'static str {
    match error {
        DispatchError::LeaseLost { .. } => "LEASE_LOST",
        DispatchError::LeaseExpired { .. } => "LEASE_EXPIRED",
        DispatchError::Step(StepError::OwnershipLost { .. }) => "OWNERSHIP_LOST",
        DispatchError::Step(StepError::IdentityConflict) => "IDENTITY_CONFLICT",
        DispatchError::Step(StepError::Transition(_)) => "FORBIDDEN_TRANSITION",
        DispatchError::Step(_) => "STEP_REFUSED",
        DispatchError::ControlSpaceConflict { .. }
        | DispatchError::SupersedeRefused { .. }
        | DispatchError::SettleRefused(_) => "CONTROL_SPACE_CONFLICT",
        DispatchError::Store(_) => "STORE_UNAVAILABLE",
    }
}

#[cfg(test)]
mod conflict_tests {
    use super::*;

    /// A refused settle keeps its kind and typed fields, and the message the command is retried
    /// with stays the store's refusal.
    #[test]
    fn settle_refusals_become_typed_conflicts() {
        let Ok(space) = ControlSpaceId::parse("cs-1") else {
            panic!("valid id")
        };
        let Ok(command) = CommandId::parse("cmd-1") else {
            panic!("valid id")
        };
        let conflict = DispatchError::from(SettleError::ControlSpaceConflict {
            control_space_id: space.clone(),
        });
        assert_eq!(
            conflict,
            DispatchError::ControlSpaceConflict {
                control_space_id: space
            }
        );
        assert_eq!(
            refusal_message(&conflict),
            "control space cs-1 changed concurrently"
        );
        assert_eq!(
            conflict.to_string(),
            "control space cs-1 changed concurrently"
        );
        let refused = DispatchError::from(SettleError::SupersedeRefused {
            command_id: command.clone(),
        });
        assert_eq!(
            refused,
            DispatchError::SupersedeRefused {
                command_id: command
            }
        );
        assert_eq!(
            refusal_message(&refused),
            "command cmd-1 can no longer be superseded"
        );
        assert_eq!(error_code(&refused), "CONTROL_SPACE_CONFLICT");
        // Every code a dispatch error reports is its own metric label (a closed set, case 010).
        let Ok(command) = CommandId::parse("cmd-2") else {
            panic!("valid id")
        };
        for error in [
            DispatchError::LeaseLost {
                command_id: command.clone(),
            },
            DispatchError::LeaseExpired {
                command_id: command.clone(),
            },
            DispatchError::Step(StepError::OwnershipLost { reason: "r" }),
            DispatchError::Step(StepError::IdentityConflict),
            DispatchError::SupersedeRefused {
                command_id: command,
            },
            DispatchError::Store(StoreError::unavailable("down")),
        ] {
            let code = error_code(&error);
            assert_eq!(tenantry_lifecycle::code::metric_label(code), code);
        }
        // Lease loss and storage failures are not conflicts.
        assert!(matches!(
            DispatchError::from(SettleError::Store(StoreError::unavailable("down"))),
            DispatchError::Store(_)
        ));
    }
}
