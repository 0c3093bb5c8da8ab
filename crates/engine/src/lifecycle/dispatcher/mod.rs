//! The saga dispatcher: claim one due command, deliver it, settle it.
//!
//! The branches follow the saga protocol (`docs/protocol.md`, section 1); each decision is a pure function of the
//! `tenantry-lifecycle` saga ([`Step`]). This module only sequences reads, remote calls and
//! settles, and reports metrics. By concern:
//! - `config`: [`DispatcherConfig`];
//! - `error`: [`DispatchError`], why an attempt ended without a settlement;
//! - `claim`: claiming, lease renewal, and remote calls only on a lease proven live;
//! - `deliver`: the saga of the three operations over one delivery helper;
//! - `telemetry`: metrics and the log lines of settles, refused renewals and lost leases;
//! - `slots`, `place`: the worker pool's remote-call slots, and a dispatch's place among its
//!   counted dispatches (given back when the settle begins);
//! - here: the [`Dispatcher`], its entry points (`dispatch_one`, `dispatch_batch`) and the
//!   settle every attempt ends with.

mod claim;
mod config;
mod deliver;
mod error;
mod place;
mod slots;
mod telemetry;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantry_kernel::{CommandId, LeaseOwner};
use tenantry_lifecycle::saga::Step;
use tenantry_lifecycle::{
    ClaimedCommand, ClaimedControlSpace, CommandOutcome, ControlSpace, ErrorCode, LeaseToken,
    Settlement,
};
use tenantry_ports::clock::{Clock, SystemClock};
use tenantry_ports::lifecycle::{
    KnowledgeFs, LifecycleMetrics, LifecycleStore, NoMetrics, SettleError, StoreError, TaskStatus,
};
use tokio::time::Instant;
use tracing::{Instrument, info_span};

pub use config::DispatcherConfig;
pub use error::DispatchError;
use error::error_code;
pub(crate) use place::SettlingPlaces;
pub(crate) use slots::CallSlots;

use super::lease::LeaseBook;

tokio::task_local! {
    /// Set around a dispatch of the worker pool's prompt lane
    /// ([`Dispatcher::dispatch_prompt`]): its remote calls take the lane's reserved slots and
    /// its settles are not queued for group commit.
    static PROMPT_LANE: ();
}

/// Whether the running task is a dispatch of the worker pool's prompt lane.
pub(crate) fn in_prompt_lane() -> bool {
    PROMPT_LANE.try_with(|()| ()).is_ok()
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

    /// [`dispatch_claimed`](Self::dispatch_claimed) in the worker pool's prompt lane: the
    /// remote call takes one of the slots `remote_slots` reserved for the lane
    /// (`CallSlots::reserve_for_prompt_lane`), and the settle goes to the store as a batch of
    /// one at once instead of queueing for group commit (docs/protocol.md, "The prompt lane").
    /// Every rule of the dispatch is unchanged.
    pub(in crate::lifecycle) async fn dispatch_prompt(
        &self,
        command: ClaimedCommand,
        claim_started: Instant,
        product_enabled: bool,
        remote_slots: &CallSlots,
    ) -> Result<DispatchReport, DispatchError> {
        PROMPT_LANE
            .scope(
                (),
                self.dispatch_claimed(command, claim_started, product_enabled, Some(remote_slots)),
            )
            .await
    }

    /// Delivers and settles one claimed command, renewing its lease while the saga runs.
    /// With `remote_slots`, the remote call waits for a permit of it (the lease is renewed
    /// meanwhile and checked again once the permit is held).
    pub(in crate::lifecycle) async fn dispatch_claimed(
        &self,
        command: ClaimedCommand,
        claim_started: Instant,
        product_enabled: bool,
        remote_slots: Option<&CallSlots>,
    ) -> Result<DispatchReport, DispatchError> {
        let span = info_span!(
            "lifecycle_dispatch",
            command_id = %command.id(),
            operation = %command.operation,
            operation_id = %command.operation_id,
            tenant = %command.tenant_id,
            control_space = %command.control_space_id,
            attempt = command.attempt_count,
            lease_owner = %command.lease.owner,
            epoch = command.lease.epoch.0,
        );
        // The command's life is one trace: every attempt, on any replica, continues the
        // context intake stored (docs/operations.md, "Tracing").
        if let Some(traceparent) = &command.trace_context {
            crate::trace_context::set_parent(&span, traceparent);
        }
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
            // The attempt's remote calls are over: its place in the worker pool is free. Not
            // so for a settlement that supersedes another command: a deletion whose supersede
            // is refused (the provision was claimed meanwhile) goes on to the remote.
            if settlement.supersede.is_none() {
                place::give_back();
            }
        }
        let span = info_span!(
            "lifecycle_settle",
            outcome = match &settlement.outcome {
                None => "held",
                Some(CommandOutcome::Ack { .. }) => "ack",
                Some(CommandOutcome::Retry { .. }) => "retry",
                Some(CommandOutcome::Fail { .. }) => "fail",
                Some(CommandOutcome::Moot { .. }) => "moot",
            },
        );
        if in_prompt_lane() {
            self.settle_at_once(lease, settlement)
                .instrument(span)
                .await
        } else {
            self.store.settle(lease, settlement).instrument(span).await
        }
    }

    /// A settle of the prompt lane: handed to the store as a batch of one
    /// ([`CommandQueue::settle_many`](tenantry_ports::lifecycle::CommandQueue::settle_many),
    /// same rules as `settle`), which a [`GroupCommitStore`](super::GroupCommitStore) executes
    /// at once on the wrapped store instead of queueing it behind the batches in flight.
    ///
    /// # Errors
    /// As `settle`; a store that answers a batch of one with another number of results is
    /// reported as [`SettleError::Store`] (nothing is known to be written).
    async fn settle_at_once(
        &self,
        lease: &LeaseToken,
        settlement: &Settlement,
    ) -> Result<(), SettleError> {
        let item = [(lease.clone(), settlement.clone())];
        let mut results = self.store.settle_many(&item).await?;
        match (results.pop(), results.is_empty()) {
            (Some(result), true) => result,
            _ => Err(SettleError::Store(StoreError::unavailable(
                "a settlement batch of one answered another number of results",
            ))),
        }
    }

    async fn control_space(&self, step: &Step<'_>) -> Result<Option<ControlSpace>, StoreError> {
        self.store
            .control_space(&step.command.tenant_id, &step.command.control_space_id)
            .await
    }

    /// The control space for the first step of an attempt: the one the claim carried when the
    /// store read it right after the claim (docs/protocol.md, "The control space comes with the
    /// claim"), else a read now. Later steps of the attempt read again, except that a
    /// provision first tries to complete on this row under a compare-and-set
    /// (docs/protocol.md, "A provision completes on the row it started from").
    async fn control_space_at_start(
        &self,
        step: &Step<'_>,
    ) -> Result<Option<ControlSpace>, StoreError> {
        match &step.command.control_space {
            ClaimedControlSpace::Read(space) => Ok(space.clone()),
            ClaimedControlSpace::NotRead => self.control_space(step).await,
        }
    }
}
