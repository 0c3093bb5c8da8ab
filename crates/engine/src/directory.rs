//! The directory projector: keeps the local projection equal to the directory provider and
//! fails execution admission closed when it goes stale.
//!
//! [`DirectoryProjector`] owns the replica-local state the database cannot hold: this
//! replica's consumer cursor (every replica consumes the event stream itself, because the
//! post-commit hooks feed process-local caches), readiness, and gauges. The shared projection
//! (tables and the state row) lives behind the store ports; every rule is a pure function of
//! `tenantry_directory`.
//!
//! Cancellation: every apply is one store transaction and the consumer cursor moves only after
//! it committed, so dropping a sync (shutdown) at any await point leaves nothing half-applied.
//!
//! Specification: the repository's `docs/protocol.md`, section 4 "Directory projection" (sync
//! algorithm, apply rules, readiness, and the deviations from the reference behaviour).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use chrono::{DateTime, Utc};
use serde::Serialize;
use tenantry_directory::batch::{
    BatchCardinality, directory_event_revisions, empty_page_proves_freshness, validate_batch,
};
use tenantry_directory::config::{CapacityLimit, SNAPSHOT_ATTEMPTS};
use tenantry_directory::maps::WorkspaceStatus;
use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryError, DirectoryEventBatch,
    DirectorySnapshot, DirectoryWorkspace, NotReady, ProjectorConfig, Readiness, RefusalRule,
    WorkspaceUuid,
};
use tenantry_ports::clock::{Clock, SystemClock};
use tenantry_ports::directory::{
    AnySnapshotSource, DirectoryProjectionStore, DirectoryProvider, EntitlementReconciler, NoHooks,
    ProjectionStoreError, ProviderError, RuntimeExecutionPublisher,
};
use tenantry_ports::error::StoreError;
use tokio::time::Instant;

/// Why a projector step failed. Every variant is ordinary for the run loop: it logs, backs
/// off and tries again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProjectorError {
    /// The provider gave no usable answer.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// A projection rule refused the provider's answer (or another replica moved the shared
    /// projection); nothing was written.
    #[error("directory projection refused the answer: {0}")]
    Rejected(#[from] DirectoryError),
    /// The store failed; its transaction rolled back. Its source is the store's error (whose
    /// source is the driver's, if it kept one).
    #[error("directory projection storage failed: {0}")]
    Storage(#[source] StoreError),
    /// Every snapshot the provider served during initialization was older than the shared
    /// projection (a stale provider, or a race with other replicas lost every time).
    #[error(
        "the directory provider served a snapshot older than the shared projection {attempts} times in a row ({last}); the provider is probably serving a stale or cached snapshot: check its cursor against the projection cursor in /v1/directory/status"
    )]
    RepeatedlySuperseded {
        /// Attempts made.
        attempts: u32,
        /// The last refusal.
        last: DirectoryError,
    },
}

impl ProjectorError {
    /// The projection rule that refused the provider's answer, when this is a refusal (not an
    /// unavailable provider or a storage failure).
    pub fn refusal(&self) -> Option<&DirectoryError> {
        match self {
            Self::Rejected(e) | Self::RepeatedlySuperseded { last: e, .. } => Some(e),
            Self::Provider(_) | Self::Storage(_) => None,
        }
    }

    /// The capacity limit the provider's answer exceeds, when this is a capacity refusal: a
    /// projection limit ([`DirectoryError::capacity_limit`]) or the client's size cap
    /// ([`ProviderError::TooLarge`]). The run loop backs off longer after one
    /// ([`ProjectorConfig::next_delay_after_capacity`]).
    pub fn capacity_limit(&self) -> Option<CapacityLimit> {
        match self {
            Self::Provider(ProviderError::TooLarge { .. }) => Some(CapacityLimit::ResponseBytes),
            other => other.refusal().and_then(DirectoryError::capacity_limit),
        }
    }
}

impl From<ProjectionStoreError> for ProjectorError {
    fn from(error: ProjectionStoreError) -> Self {
        match error {
            ProjectionStoreError::Rejected(e) => Self::Rejected(e),
            ProjectionStoreError::Storage(error) => Self::Storage(error),
            // A store failure this engine does not know yet: keep its message.
            other => Self::Storage(StoreError::unavailable(other.to_string())),
        }
    }
}

/// Tenant-free cardinality gauges for health checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ResourceSnapshot {
    /// Active projected workspaces after the last snapshot or delta.
    pub active_workspaces: u64,
    /// Configured `max_active_workspaces`.
    pub max_active_workspaces: usize,
    /// Workspaces in the last snapshot or delta.
    pub last_batch_workspaces: usize,
    /// Memberships in the last snapshot or delta.
    pub last_batch_memberships: usize,
    /// Configured `max_snapshot_workspaces`.
    pub max_snapshot_workspaces: usize,
    /// Configured `max_snapshot_memberships`.
    pub max_snapshot_memberships: usize,
}

/// The latest refusal of a provider answer by a projection rule, and how long it has lasted.
///
/// A refused answer is retried unchanged on every sync, so one bad workspace stalls the whole
/// projection (every workspace, not only the named one) until the provider serves another
/// answer; this record makes that visible (`/v1/directory/status`, logs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Refusal {
    /// The rule, [`DirectoryError::rule`] (serialized as its string, e.g.
    /// `membership_revision_conflict`).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub rule: RefusalRule,
    /// The workspace the rule names, if one.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub workspace: Option<WorkspaceUuid>,
    /// The full message of the latest occurrence.
    pub message: String,
    /// Wall-clock time of the first occurrence of this same refusal (same rule and
    /// workspace) in an unbroken run of failed syncs.
    pub since: DateTime<Utc>,
    /// Wall-clock time of the latest occurrence.
    pub last_at: DateTime<Utc>,
    /// Occurrences of this same refusal since `since`.
    pub count: u64,
    /// When a later sync succeeded (the projection moves again); `None` while it lasts.
    pub resolved_at: Option<DateTime<Utc>>,
}

/// Refusals seen by this replica since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RefusalReport {
    /// The latest refusal (kept after it is resolved, with `resolved_at`).
    pub last: Option<Refusal>,
    /// Refusals per rule since start (the `tenantry_directory_refusals_total{reason}` counter).
    pub total_by_rule: BTreeMap<RefusalRule, u64>,
}

/// The latest synchronization step of this replica that failed for a reason other than a
/// projection rule's refusal (the provider unreachable or answering an error, the store
/// failing), kept until a step succeeds. Operators see it in the directory status long before
/// staleness closes readiness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SyncFailure {
    /// The error, as logged.
    pub message: String,
    /// When the first failure of this run of failures happened.
    pub since: DateTime<Utc>,
    /// When the latest one happened.
    pub last_at: DateTime<Utc>,
    /// Failed steps in a row.
    pub count: u64,
}

#[derive(Debug, Default)]
struct ReplicaState {
    consumer_cursor: Option<i64>,
    readiness: Readiness,
    active_workspaces: u64,
    last_batch: BatchCardinality,
    refusals: RefusalReport,
    capacity_refusals: BTreeMap<CapacityLimit, u64>,
    sync_failure: Option<SyncFailure>,
    /// The shared projection was consulted for a cursor to resume from (once per process).
    resume_checked: bool,
    /// The cursor resumed from, until a step from it succeeds.
    resumed_from: Option<i64>,
}

/// Projects a directory provider into the store; see the module documentation.
///
/// # Example
/// A scripted provider and the in-memory store (`tenantry-ports`, feature `testing`; the
/// snapshot builders come from `tenantry-directory`, feature `testing`). A service uses
/// `HttpDirectoryProvider`, `SeaOrmDirectoryStore` and [`run`](Self::run):
/// ```
/// use std::time::Duration;
///
/// use tenantry_directory::testing::{INSTANCE, snapshot, workspace};
/// use tenantry_directory::{ProjectionLimits, ProjectorConfig};
/// use tenantry_engine::directory::DirectoryProjector;
/// use tenantry_ports::directory::fake::{InMemoryProjectionStore, ScriptedProvider};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let config = ProjectorConfig::new(
///     INSTANCE,
///     Duration::from_secs(5),  // sync interval
///     Duration::from_secs(60), // max staleness
///     50,                      // events per page
///     ProjectionLimits::default(),
/// )?;
/// let provider = ScriptedProvider::new();
/// let projector = DirectoryProjector::new(config, provider.clone(), InMemoryProjectionStore::new());
/// assert!(projector.require_ready().is_err()); // never synced: execution is refused
///
/// provider.push_snapshot(Ok(snapshot(10, vec![workspace("ws-1", 1, &[("alice", 1)])])));
/// projector.sync_once().await?;
/// assert_eq!(projector.consumer_cursor(), Some(10));
/// assert!(projector.require_ready().is_ok());
/// # Ok(())
/// # }
/// ```
pub struct DirectoryProjector<P, S> {
    config: ProjectorConfig,
    provider: P,
    store: S,
    entitlements: Arc<dyn EntitlementReconciler>,
    runtime: Arc<dyn RuntimeExecutionPublisher>,
    clock: Arc<dyn Clock>,
    /// The clock's monotonic reading at construction; readiness counts from here.
    origin: Instant,
    /// Whether a starting replica resumes from the shared projection ([`Self::with_resume`]).
    resume: bool,
    /// Run after each [`Self::initialize`] ([`Self::with_memory_release`]).
    release_memory: fn() -> bool,
    replica: Mutex<ReplicaState>,
}

impl<P, S> std::fmt::Debug for DirectoryProjector<P, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryProjector")
            .field("config", &self.config)
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl<P: DirectoryProvider, S: DirectoryProjectionStore> DirectoryProjector<P, S> {
    /// A projector without hooks, on the system clock.
    pub fn new(config: ProjectorConfig, provider: P, store: S) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        Self {
            config,
            provider,
            store,
            entitlements: Arc::new(NoHooks),
            runtime: Arc::new(NoHooks),
            origin: clock.monotonic(),
            clock,
            resume: true,
            release_memory: crate::memory::return_freed,
            replica: Mutex::new(ReplicaState::default()),
        }
    }

    /// Sets what runs after each [`Self::initialize`], once the snapshot it fetched is dropped,
    /// whatever its result: by default glibc's `malloc_trim(0)`, which hands the freed pages
    /// back to the operating system (without it a process keeps most of its snapshot peak
    /// resident, about 0.8 KiB per membership; elsewhere than glibc it does nothing). It runs on a blocking
    /// thread (`tokio::task::spawn_blocking`). A platform with its own global allocator may
    /// pass that allocator's purge, or `|| false` to do nothing. Returns whether memory was
    /// given back (only traced).
    #[must_use]
    pub fn with_memory_release(mut self, release: fn() -> bool) -> Self {
        self.release_memory = release;
        self
    }

    /// Sets the entitlement hook run after each commit. Turns resuming off
    /// ([`Self::with_resume`]): the hook's process-local caches need the full snapshot's
    /// active set at start.
    #[must_use]
    pub fn with_entitlements(mut self, hook: Arc<dyn EntitlementReconciler>) -> Self {
        self.entitlements = hook;
        self.resume = false;
        self
    }

    /// Sets the runtime-execution hook run after each commit. Turns resuming off
    /// ([`Self::with_resume`]), as [`Self::with_entitlements`] does.
    #[must_use]
    pub fn with_runtime_publisher(mut self, hook: Arc<dyn RuntimeExecutionPublisher>) -> Self {
        self.runtime = hook;
        self.resume = false;
        self
    }

    /// Whether a starting replica (no consumer cursor yet) resumes from the projection it
    /// finds in the store instead of fetching and applying a full snapshot: its first step
    /// reads the shared state row once and, when there is one, takes its cursor (the
    /// high-water mark of what the tables hold) as its consumer cursor and fetches the events
    /// after it. On by default, off once a hook is set (the hooks' caches are fed by
    /// snapshots); call this after the hooks to override. Readiness is not taken from the
    /// row: a resumed replica is ready only after its first caught-up sync, as any other. If
    /// the first step from the resumed cursor is refused (by a rule, or the provider answers
    /// a client error), the replica forgets the cursor and starts from a snapshot.
    #[must_use]
    pub fn with_resume(mut self, resume: bool) -> Self {
        self.resume = resume;
        self
    }

    /// Sets the clock (the system clock by default): its wall time stamps `last_applied_at`,
    /// leases, receipts and refusals; its monotonic time measures staleness
    /// ([`Self::require_ready`]); its timers pace [`Self::run`]. Set it before the first sync
    /// (readiness recorded earlier was measured on the previous clock and is forgotten).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.origin = clock.monotonic();
        self.clock = clock;
        *self.replica() = ReplicaState::default();
        self
    }

    /// The configuration.
    pub fn config(&self) -> &ProjectorConfig {
        &self.config
    }

    /// This replica's consumer cursor; `None` until initialized.
    pub fn consumer_cursor(&self) -> Option<i64> {
        self.replica().consumer_cursor
    }

    /// Fails execution admission closed: refuses when this replica never completed a
    /// caught-up sync, or its last one is `max_staleness` old or older (the monotonic time of
    /// the projector's clock, [`Self::with_clock`]).
    ///
    /// # Errors
    /// [`NotReady`].
    pub fn require_ready(&self) -> Result<(), NotReady> {
        self.require_ready_at(self.clock.monotonic())
    }

    /// [`Self::require_ready`] at monotonic time `now` (a reading of the projector's clock).
    ///
    /// # Errors
    /// [`NotReady`].
    pub fn require_ready_at(&self, now: Instant) -> Result<(), NotReady> {
        let since_origin = now.saturating_duration_since(self.origin);
        self.replica()
            .readiness
            .check(since_origin, self.config.max_staleness)
    }

    /// Aggregate gauges (no tenant data).
    pub fn resource_snapshot(&self) -> ResourceSnapshot {
        let replica = self.replica();
        let limits = &self.config.limits;
        ResourceSnapshot {
            active_workspaces: replica.active_workspaces,
            max_active_workspaces: limits.max_active_workspaces,
            last_batch_workspaces: replica.last_batch.workspaces,
            last_batch_memberships: replica.last_batch.memberships,
            max_snapshot_workspaces: limits.max_snapshot_workspaces,
            max_snapshot_memberships: limits.max_snapshot_memberships,
        }
    }

    /// Refusals of provider answers seen by this replica (latest one, counts per rule).
    pub fn refusals(&self) -> RefusalReport {
        self.replica().refusals.clone()
    }

    /// Steps refused for a capacity limit since this replica started, per limit (the
    /// `tenantry_directory_capacity_refusals_total{limit}` counter): a projection limit's
    /// refusal (also counted by rule in [`Self::refusals`]) or an answer over the client's
    /// size cap.
    pub fn capacity_refusals(&self) -> BTreeMap<CapacityLimit, u64> {
        self.replica().capacity_refusals.clone()
    }

    /// The failure of this replica's latest synchronization steps when they failed for a
    /// reason other than a refusal (see [`Self::refusals`] for those); `None` once a step
    /// succeeds.
    pub fn sync_failure(&self) -> Option<SyncFailure> {
        self.replica().sync_failure.clone()
    }

    /// Fetches and applies a full snapshot; when another replica's newer projection
    /// supersedes it, fetches again, up to [`SNAPSHOT_ATTEMPTS`] times. Then, whatever the
    /// result, the memory the snapshot used is handed back ([`Self::with_memory_release`]).
    ///
    /// # Errors
    /// The first provider, rule or storage error; [`ProjectorError::RepeatedlySuperseded`]
    /// after the last superseded attempt.
    pub async fn initialize(&self) -> Result<(), ProjectorError> {
        let result = self.fetch_and_apply_snapshot().await;
        let release = self.release_memory;
        match tokio::task::spawn_blocking(release).await {
            Ok(released) => tracing::debug!(released, "memory freed by the snapshot handed back"),
            Err(error) => tracing::warn!(%error, "handing the snapshot's memory back failed"),
        }
        result
    }

    /// [`Self::initialize`] without the memory release.
    async fn fetch_and_apply_snapshot(&self) -> Result<(), ProjectorError> {
        let mut last = None;
        for _ in 0..SNAPSHOT_ATTEMPTS {
            let snapshot = self
                .provider
                .fetch_snapshot_source(&self.config.instance)
                .await?;
            match self.apply_snapshot_source(snapshot.as_ref()).await {
                Ok(()) => return Ok(()),
                Err(ProjectorError::Rejected(e)) if e.is_superseded() => {
                    tracing::info!(error = %e, "directory provider served a snapshot older than the shared projection; fetching again");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(ProjectorError::RepeatedlySuperseded {
            attempts: SNAPSHOT_ATTEMPTS,
            last: last.unwrap_or(DirectoryError::SnapshotSuperseded {
                snapshot_cursor: 0,
                projected_cursor: 0,
            }),
        })
    }

    /// One synchronization step: when this replica has no cursor yet, resume from the shared
    /// projection found in the store ([`Self::with_resume`]) or else initialize; then
    /// fetch the events after its own cursor, validate the batch, then apply a delta for the
    /// workspaces named by `directory.changed` events, or advance the cursor for entitlement
    /// events, or (empty batch) confirm freshness.
    ///
    /// # Errors
    /// Any [`ProjectorError`]; nothing is half-applied. A refusal by a projection rule is
    /// also recorded (see [`Self::refusals`]) and logged with its rule and workspace.
    #[tracing::instrument(name = "directory_sync", skip_all)]
    pub async fn sync_once(&self) -> Result<(), ProjectorError> {
        let result = self.sync_step().await;
        self.note_result(&result);
        match &result {
            Ok(()) => self.replica().resumed_from = None,
            Err(error) => self.reinitialize_after(error),
        }
        result
    }

    /// The cursor a starting replica resumes from: the shared projection's, read once per
    /// process when resuming is on ([`Self::with_resume`]); `None` when resuming is off, was
    /// already consulted, or the store holds no projection of the instance yet.
    ///
    /// # Errors
    /// [`ProjectorError::Storage`] when the state row cannot be read (consulted again at the
    /// next step).
    async fn resume_cursor(&self) -> Result<Option<i64>, ProjectorError> {
        if !self.resume || self.replica().resume_checked {
            return Ok(None);
        }
        let state = self.store.projection_state(&self.config.instance).await?;
        let mut replica = self.replica();
        replica.resume_checked = true;
        let Some(state) = state else {
            return Ok(None);
        };
        tracing::info!(
            cursor = state.cursor,
            last_applied_at = %state.last_applied_at,
            "resuming the directory projection found in the database; fetching the events after its cursor instead of a snapshot"
        );
        replica.consumer_cursor = Some(state.cursor);
        replica.resumed_from = Some(state.cursor);
        Ok(Some(state.cursor))
    }

    /// After [`DirectoryError::MissingReceipt`] this replica re-reads events whose receipts are
    /// gone (retention removes receipts past their window at or below the shared projection
    /// cursor: docs/operations.md, "Retention"): it lags more than the inbox window, so it
    /// forgets its consumer cursor and its next step initializes from a snapshot, as a
    /// starting replica does. Nothing was applied by the refused step.
    ///
    /// A replica that resumed from the shared projection ([`Self::with_resume`]) and whose
    /// first step from there is refused (by a rule, or a client error of the provider) starts
    /// from a snapshot too: the stored cursor may be one the provider no longer serves.
    fn reinitialize_after(&self, error: &ProjectorError) {
        let mut replica = self.replica();
        if let Some(resumed) = replica.resumed_from {
            let answer_refused = match error {
                ProjectorError::Provider(ProviderError::Refused { status, .. }) => {
                    (400..500).contains(status) && *status != 429
                }
                ProjectorError::Provider(ProviderError::InvalidResponse { .. }) => true,
                other => other.refusal().is_some(),
            };
            if answer_refused {
                tracing::warn!(
                    cursor = resumed,
                    %error,
                    "the first directory step from the cursor found in the database was refused; this replica starts from a snapshot"
                );
                replica.resumed_from = None;
                replica.consumer_cursor = None;
                return;
            }
        }
        if let Some(DirectoryError::MissingReceipt { cursor, .. }) = error.refusal() {
            tracing::warn!(
                cursor,
                "directory events re-read without their receipts (removed by retention); this replica starts again from a snapshot"
            );
            replica.consumer_cursor = None;
        }
    }

    async fn sync_step(&self) -> Result<(), ProjectorError> {
        let cursor = match self.consumer_cursor() {
            Some(cursor) => cursor,
            None => match self.resume_cursor().await? {
                Some(cursor) => cursor,
                None => return self.initialize().await,
            },
        };
        let instance = &self.config.instance;
        let batch = self
            .provider
            .fetch_events(instance, cursor, self.config.event_limit)
            .await?;
        validate_batch(&batch, instance, cursor)?;
        if batch.events.is_empty() {
            // Only `after == cursor == high_water` proves there is nothing newer; an empty page
            // claiming more (lagging provider, replayed page) must not renew readiness.
            empty_page_proves_freshness(&batch)?;
            return self.touch_freshness(cursor).await;
        }
        let revisions = directory_event_revisions(&batch.events);
        if revisions.is_empty() {
            self.apply_event_batch(&batch).await
        } else {
            let requested: Vec<WorkspaceUuid> = revisions.into_keys().collect();
            let delta = self.provider.fetch_workspaces(instance, &requested).await?;
            self.apply_delta(&delta, &batch).await
        }
    }

    /// Syncs at once, then every `sync_interval`; after a failure waits twice as long as
    /// before (at least the interval, at most `max_staleness / 2`; after a capacity refusal at
    /// most [`ProjectorConfig::capacity_retry_max_delay`], 5 minutes unless half the staleness
    /// is longer: a directory over its limit is downloaded and parsed whole at every try).
    /// Never returns on an error;
    /// returns when `shutdown` completes (also in the middle of a sync, which is
    /// cancellation-safe).
    ///
    /// The first sync runs when `run` starts (not one interval later), so a replica started
    /// without a prior `initialize` becomes ready as soon as the provider answers.
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut delay = self.config.sync_interval;
        let mut first = true;
        loop {
            if !first {
                tokio::select! {
                    () = &mut shutdown => return,
                    () = self.clock.sleep(delay) => {}
                }
            }
            first = false;
            let result = tokio::select! {
                () = &mut shutdown => return,
                result = self.sync_once() => result,
            };
            delay = match result {
                Ok(()) => self.config.next_delay(delay, false),
                Err(error) => {
                    if let Some(limit) = error.capacity_limit() {
                        let next = self.config.next_delay_after_capacity(delay);
                        tracing::warn!(
                            limit = limit.as_str(),
                            setting = limit.setting(),
                            retry_in_seconds = next.as_secs_f64(),
                            %error,
                            "the directory exceeds a capacity limit; retrying with a longer backoff"
                        );
                        next
                    } else {
                        if error.refusal().is_none() {
                            // A refusal is logged by sync_once.
                            tracing::warn!(%error, "directory synchronization failed; backing off");
                        }
                        self.config.next_delay(delay, true)
                    }
                }
            };
        }
    }

    /// Applies a full snapshot, then runs the hooks; records readiness.
    ///
    /// # Errors
    /// A rule or storage error; nothing was written.
    pub async fn apply_snapshot(&self, snapshot: &DirectorySnapshot) -> Result<(), ProjectorError> {
        self.apply_snapshot_source(snapshot).await
    }

    /// [`Self::apply_snapshot`] for a snapshot read page by page ([`SnapshotSource`](tenantry_ports::directory::SnapshotSource): a paged
    /// snapshot spooled by the provider client, or a whole one). The hooks read the pages once
    /// more for the active workspaces.
    ///
    /// # Errors
    /// A rule or storage error; nothing was written.
    #[tracing::instrument(name = "directory_apply", skip_all, fields(kind = "snapshot", cursor = source.cursor()))]
    pub async fn apply_snapshot_source(
        &self,
        source: &AnySnapshotSource,
    ) -> Result<(), ProjectorError> {
        let outcome = self
            .store
            .apply_snapshot_source(&self.context(), source, &[])
            .await?;
        match source.active_generations() {
            Ok(generations) => {
                let active: BTreeSet<WorkspaceUuid> = generations.keys().cloned().collect();
                if let Err(error) = self
                    .entitlements
                    .reconcile_active_workspaces(&self.config.instance, &active)
                    .await
                {
                    tracing::error!(%error, "entitlement reconcile after a directory snapshot failed; the projection stays committed");
                }
                self.publish_generations(&generations, None).await;
            }
            Err(error) => {
                tracing::error!(%error, "reading the applied snapshot back for the entitlement and runtime hooks failed; the projection stays committed, call-time fences stay authoritative");
            }
        }
        self.record(&outcome, Some(source.cursor()), true);
        Ok(())
    }

    /// Applies a delta for `batch`, then runs the hooks; records readiness when caught up.
    ///
    /// # Errors
    /// A rule or storage error; nothing was written.
    #[tracing::instrument(name = "directory_apply", skip_all, fields(kind = "delta", cursor = batch.cursor))]
    pub async fn apply_delta(
        &self,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<(), ProjectorError> {
        let outcome = self
            .store
            .apply_delta(&self.context(), delta, batch)
            .await?;
        let requested: BTreeSet<WorkspaceUuid> =
            delta.requested_workspace_uuids.iter().cloned().collect();
        let active = active_uuids(&delta.workspaces);
        let inactive = requested.difference(&active).cloned().collect();
        if let Err(error) = self
            .entitlements
            .update_workspace_activity(&self.config.instance, &active, &inactive)
            .await
        {
            tracing::error!(%error, "entitlement update after a directory delta failed; the projection stays committed");
        }
        self.publish(&delta.workspaces, Some(&requested)).await;
        self.record(&outcome, Some(batch.cursor), outcome.caught_up);
        Ok(())
    }

    /// Applies a batch without directory changes; records readiness when caught up.
    ///
    /// # Errors
    /// A rule or storage error; nothing was written.
    #[tracing::instrument(name = "directory_apply", skip_all, fields(kind = "events", cursor = batch.cursor))]
    pub async fn apply_event_batch(
        &self,
        batch: &DirectoryEventBatch,
    ) -> Result<(), ProjectorError> {
        let outcome = self.store.apply_event_batch(&self.context(), batch).await?;
        self.record(&outcome, Some(batch.cursor), outcome.caught_up);
        Ok(())
    }

    async fn touch_freshness(&self, cursor: i64) -> Result<(), ProjectorError> {
        let outcome = self.store.touch_freshness(&self.context(), cursor).await?;
        self.record(&outcome, None, true);
        Ok(())
    }

    async fn publish(
        &self,
        workspaces: &[DirectoryWorkspace],
        affected: Option<&BTreeSet<WorkspaceUuid>>,
    ) {
        let generations: BTreeMap<WorkspaceUuid, i64> = workspaces
            .iter()
            .filter(|w| w.status == WorkspaceStatus::Active)
            .map(|w| (w.uuid.clone(), w.execution_generation))
            .collect();
        self.publish_generations(&generations, affected).await;
    }

    /// Publishes the active workspaces' execution generations to the runtimes.
    async fn publish_generations(
        &self,
        generations: &BTreeMap<WorkspaceUuid, i64>,
        affected: Option<&BTreeSet<WorkspaceUuid>>,
    ) {
        if let Err(error) = self
            .runtime
            .publish_execution_projection(&self.config.instance, generations, affected)
            .await
        {
            tracing::error!(%error, "publishing the execution projection to runtimes failed; call-time fences stay authoritative");
        }
    }

    fn record(&self, outcome: &ApplyOutcome, cursor: Option<i64>, success: bool) {
        let now = self
            .clock
            .monotonic()
            .saturating_duration_since(self.origin);
        let mut replica = self.replica();
        if let Some(active) = outcome.active_workspaces {
            replica.active_workspaces = active;
        }
        if let Some(cardinality) = outcome.cardinality {
            replica.last_batch = cardinality;
        }
        if let Some(cursor) = cursor {
            replica.consumer_cursor = Some(cursor);
        }
        if success {
            replica.readiness.record_success(now);
        }
    }

    /// Records a refusal (or the success that ends one) and logs it with rule and workspace.
    fn note_result(&self, result: &Result<(), ProjectorError>) {
        let now = self.clock.now();
        let mut replica = self.replica();
        if let Some(limit) = result
            .as_ref()
            .err()
            .and_then(ProjectorError::capacity_limit)
        {
            *replica.capacity_refusals.entry(limit).or_default() += 1;
        }
        match result {
            Ok(()) => replica.sync_failure = None,
            Err(error) if error.refusal().is_none() => {
                let message = error.to_string();
                let failure = replica.sync_failure.get_or_insert_with(|| SyncFailure {
                    message: message.clone(),
                    since: now,
                    last_at: now,
                    count: 0,
                });
                failure.message = message;
                failure.last_at = now;
                failure.count += 1;
            }
            Err(_) => {}
        }
        let refusals = &mut replica.refusals;
        match result {
            Ok(()) => {
                if let Some(last) = refusals.last.as_mut().filter(|r| r.resolved_at.is_none()) {
                    last.resolved_at = Some(now);
                    tracing::info!(
                        rule = last.rule.as_str(),
                        workspace = last.workspace.as_ref().map(WorkspaceUuid::as_str),
                        refused = last.count,
                        since = %last.since,
                        "directory projection moves again after a refused answer"
                    );
                }
            }
            Err(error) => {
                let Some(refusal) = error.refusal() else {
                    return;
                };
                let rule = refusal.rule();
                let workspace = refusal.workspace().cloned();
                *refusals.total_by_rule.entry(rule).or_default() += 1;
                let same = refusals.last.as_ref().is_some_and(|r| {
                    r.resolved_at.is_none() && r.rule == rule && r.workspace == workspace
                });
                let message = error.to_string();
                let entry = match refusals.last.as_mut() {
                    Some(last) if same => {
                        last.count += 1;
                        last.last_at = now;
                        last.message = message;
                        last
                    }
                    _ => refusals.last.insert(Refusal {
                        rule,
                        workspace,
                        message,
                        since: now,
                        last_at: now,
                        count: 1,
                        resolved_at: None,
                    }),
                };
                tracing::warn!(
                    rule = entry.rule.as_str(),
                    workspace = entry.workspace.as_ref().map(WorkspaceUuid::as_str),
                    count = entry.count,
                    since = %entry.since,
                    error = %error,
                    "directory answer refused by a projection rule; the whole projection waits \
                     until the provider serves an answer the rules accept"
                );
            }
        }
    }

    fn context(&self) -> ApplyContext {
        ApplyContext {
            instance: self.config.instance.clone(),
            limits: self.config.limits,
            now: self.clock.now(),
            max_staleness: self.config.max_staleness,
        }
    }

    fn replica(&self) -> MutexGuard<'_, ReplicaState> {
        // The guarded state is plain data updated in single assignments; a panic elsewhere
        // cannot leave it inconsistent, so a poisoned lock is still usable.
        self.replica.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn active_uuids(workspaces: &[DirectoryWorkspace]) -> BTreeSet<WorkspaceUuid> {
    workspaces
        .iter()
        .filter(|w| w.status == WorkspaceStatus::Active)
        .map(|w| w.uuid.clone())
        .collect()
}

#[cfg(test)]
mod tests;
