//! The worker loop: dispatch continuously, sleep when idle, stop on shutdown.
//!
//! An idle worker sleeps until the first of: a wake-up ([`Wakeups`]: a command enqueued in this
//! process, or a `NOTIFY` seen by the database listener), the moment the store says the next
//! waiting command becomes due (a retry after its backoff, an expired lease), its idle poll
//! (the backstop), or shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tenantry_kernel::LeaseOwner;
use tenantry_ports::lifecycle::{KnowledgeFs, LifecycleStore};
use tenantry_ports::wake::{WakeSubscription, Wakeups};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::dispatcher::Dispatcher;

/// Settings of one worker.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Longest sleep when nothing is due (default 1 s): the backstop when no wake-up comes
    /// (a command of another process on SQLite, a lost notification). A worker with
    /// [`Worker::with_wakeups`] is woken sooner by intake and the database listener, and
    /// always wakes when the store's next waiting command becomes due.
    pub idle_poll: Duration,
    /// Most commands claimed per statement and dispatched concurrently (default 16).
    pub claim_batch: u32,
    /// Whether the product is enabled (provision commands are claimed only then). Shared so an
    /// operator switch reaches running workers.
    pub product_enabled: Arc<AtomicBool>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            idle_poll: Duration::from_secs(1),
            claim_batch: 16,
            product_enabled: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// Builder-style setters over [`WorkerConfig::default`]:
/// `WorkerConfig::default().with_claim_batch(4)`.
impl WorkerConfig {
    /// Sets [`idle_poll`](Self::idle_poll).
    #[must_use]
    pub fn with_idle_poll(mut self, idle_poll: Duration) -> Self {
        self.idle_poll = idle_poll;
        self
    }

    /// Sets [`claim_batch`](Self::claim_batch) (a claim takes at least 1 command).
    #[must_use]
    pub fn with_claim_batch(mut self, claim_batch: u32) -> Self {
        self.claim_batch = claim_batch;
        self
    }

    /// Shares `product_enabled` with the caller (an operator switch), instead of the default
    /// flag that is always on.
    #[must_use]
    pub fn with_product_enabled(mut self, product_enabled: Arc<AtomicBool>) -> Self {
        self.product_enabled = product_enabled;
        self
    }
}

/// What a worker did before it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Commands claimed.
    pub claimed: u64,
    /// Commands acked.
    pub completed: u64,
    /// Dispatches that ended without a settlement.
    pub errors: u64,
}

impl WorkerReport {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &WorkerReport) {
        self.claimed += other.claimed;
        self.completed += other.completed;
        self.errors += other.errors;
    }
}

/// A lease owner unique to this process and worker: `<prefix>-<pid>-<uuid>`.
///
/// # Panics
/// Never: the generated value is always a valid lease owner when `prefix` is one.
pub fn unique_lease_owner(prefix: &str) -> LeaseOwner {
    let prefix: String = prefix
        .chars()
        .filter(|c| !c.is_whitespace() && !c.is_control())
        .take(64)
        .collect();
    let value = format!(
        "{prefix}-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    );
    // Invariant: non-empty, < 255 bytes, no whitespace or control characters.
    LeaseOwner::parse(value).unwrap_or_else(|_| unreachable!("generated lease owner is valid"))
}

/// Runs [`Dispatcher::dispatch_batch`] until shut down.
///
/// # Example
/// A worker over the fakes that is told to stop as soon as the remote is called; the dispatch
/// in flight still settles before [`run`](Self::run) returns:
/// ```
/// use std::sync::Arc;
///
/// use tenantry_engine::lifecycle::{
///     CommandIntake, Dispatcher, DispatcherConfig, SystemClock, Worker, WorkerConfig,
///     unique_lease_owner,
/// };
/// use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
/// use tenantry_lifecycle::intake::CreateControlSpace;
/// use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, InMemoryLifecycleStore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let store = InMemoryLifecycleStore::new();
/// # CommandIntake::new(store.clone(), Arc::new(SystemClock))
/// #     .create_control_space(&CreateControlSpace {
/// #         tenant_id: TenantId::parse("acme")?,
/// #         control_space_id: ControlSpaceId::parse("cs-1")?,
/// #         idempotency_key: IdempotencyKey::parse("create-cs-1")?,
/// #         name: "Docs".into(),
/// #         slug: "docs".into(),
/// #         icon: String::new(),
/// #         description: String::new(),
/// #         model_intent: None,
/// #         profile_intent: None,
/// #     })
/// #     .await?;
/// // ... one provision enqueued with `CommandIntake` (see its example) ...
/// let remote = FakeKnowledgeFs::new();
/// let (shutdown, stop) = tokio::sync::watch::channel(false);
/// remote.set_hook(move |_call| {
///     let _ = shutdown.send(true);
/// });
/// let dispatcher = Arc::new(Dispatcher::new(store, remote, DispatcherConfig::default()));
/// let worker = Worker::new(dispatcher, unique_lease_owner("worker"), WorkerConfig::default());
/// let report = worker.run(stop).await; // usually spawned, stopped on SIGTERM
/// assert_eq!((report.claimed, report.completed), (1, 1));
/// # Ok(())
/// # }
/// ```
pub struct Worker<S, R> {
    dispatcher: Arc<Dispatcher<S, R>>,
    owner: LeaseOwner,
    config: WorkerConfig,
    wake: Option<WakeSubscription>,
}

impl<S: LifecycleStore, R: KnowledgeFs> Worker<S, R> {
    /// A worker with its own lease owner. Claims are timed by the store's clock, so the
    /// worker needs none of its own; it sleeps on its dispatcher's clock
    /// ([`Dispatcher::with_clock`]) when idle.
    pub fn new(dispatcher: Arc<Dispatcher<S, R>>, owner: LeaseOwner, config: WorkerConfig) -> Self {
        Self {
            dispatcher,
            owner,
            config,
            wake: None,
        }
    }

    /// Wakes this worker from its idle sleep whenever `wakeups` is signalled (give the same
    /// signal to the process's `CommandIntake::with_wakeups` and database listener). A wake
    /// sent while the worker is claiming is not lost: it claims again at once.
    #[must_use]
    pub fn with_wakeups(mut self, wakeups: &Wakeups) -> Self {
        self.wake = Some(wakeups.subscribe());
        self
    }

    /// The lease owner of this worker.
    pub fn owner(&self) -> &LeaseOwner {
        &self.owner
    }

    /// Dispatches until `shutdown` turns true (or its sender is dropped: nothing could stop the
    /// worker any more). Shutdown stops claiming; a dispatch in flight is
    /// never cancelled and settles before this returns. Ordinary errors are logged and the loop
    /// goes on after the idle interval.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> WorkerReport {
        let mut report = WorkerReport::default();
        info!(owner = %self.owner, "lifecycle worker started");
        loop {
            // A dropped sender can never signal shutdown, and its `changed()` would return at
            // once in every wait below (a busy loop of claims): it stops the loop as well.
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            // Before the claim: a wake sent while claiming makes the sleep below end at once.
            if let Some(wake) = self.wake.as_mut() {
                wake.mark_seen();
            }
            let enabled = self.config.product_enabled.load(Ordering::Relaxed);
            let idle = match self
                .dispatcher
                .dispatch_batch(&self.owner, enabled, self.config.claim_batch.max(1))
                .await
            {
                Ok(results) => {
                    for result in &results {
                        report.claimed += 1;
                        match result {
                            Ok(outcome) if outcome.completed => report.completed += 1,
                            Ok(_) => {}
                            Err(_) => report.errors += 1,
                        }
                    }
                    if results.is_empty() {
                        Some(self.idle_sleep(enabled).await)
                    } else {
                        None
                    }
                }
                Err(error) => {
                    warn!(%error, "claim failed; retrying after the idle interval");
                    // No wake-up shortens this pause: the store is failing.
                    tokio::select! {
                        () = self.dispatcher.clock().sleep(self.config.idle_poll) => {}
                        _ = shutdown.changed() => {}
                    }
                    continue;
                }
            };
            if let Some(idle) = idle {
                let wake = async {
                    match self.wake.as_mut() {
                        Some(wake) => wake.woken().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = self.dispatcher.clock().sleep(idle) => {}
                    () = wake => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
        info!(owner = %self.owner, claimed = report.claimed, "lifecycle worker stopped");
        report
    }

    /// How long to sleep when idle: until the store's next waiting command is due, at most the
    /// idle poll. A failed look-up falls back to the idle poll.
    async fn idle_sleep(&self, product_enabled: bool) -> Duration {
        match self.dispatcher.next_due_in(product_enabled).await {
            Ok(Some(due)) => due.min(self.config.idle_poll),
            Ok(None) => self.config.idle_poll,
            Err(error) => {
                debug!(%error, "next due time unknown; sleeping the idle poll");
                self.config.idle_poll
            }
        }
    }
}
