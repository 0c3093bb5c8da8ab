//! The `ScopedWrites` runtime: writes serialized per (installation binding, scope), and
//! durable fences for mutations whose outcome is unknown.
//!
//! Platforms wrap every mutation of a remote or host store in [`ScopedWrites::run`]:
//! - one async lock per `(binding, scope)` in this process; entries of idle scopes are kept
//!   for their next run and swept when the map doubles, so it is bounded by about twice the
//!   scopes in use at once (at least 64 entries; [`ScopedWrites::lock_map_len`]). Run one
//!   runtime per process and share it (the admin API, the CLI and library callers), so an
//!   operator's clear takes the same lock as the writers;
//! - re-entrant: a run nested inside another run of the same scope, in the same task, reuses
//!   the held lock (and claim) instead of deadlocking;
//! - fences are shared by every process on the database: before each run the scope's record
//!   and the installation record are read from host storage (a failed read fails closed with
//!   [`ScopedWriteError::FenceStateUnavailable`]; an undecodable record counts as a fence).
//!   When this runtime's last run of the scope released its claim, the scope's record is not
//!   read first: the claim swaps from the tombstone, and the record is read only if that
//!   fails (the same decision; `docs/protocol.md`, "Claiming a released scope without reading
//!   it");
//! - cross-process claim: a run takes the scope's record by compare-and-set, writing a plain
//!   claim (an intent with `"dispatched": false`) with this runtime's owner and an expiry past
//!   the dispatch deadline, and releases it (JSON null, compare-and-set again) when it ends; a
//!   live intent of another process is waited for (at most [`FenceConfig::claim_wait`], then
//!   [`ScopedWriteError::ScopeBusy`]); an expired plain claim is taken over (nothing was sent
//!   under it), an expired write-ahead intent counts as a fence. No database transaction is
//!   held across the run;
//! - one clock: records are stamped and judged on the store's clock
//!   ([`HostStorage::now_ms`], the database's), read at most once a second and carried forward
//!   on this runtime's monotonic clock (`store_clock`), never on the process's wall clock;
//! - a write to a fenced scope (or to any scope of a binding whose installation scope is
//!   fenced) fails closed with [`ScopedWriteError::Fenced`], unless the run is
//!   [`FenceMode::AllowFenced`] (operator actions that delete or rebuild the fenced object);
//! - [`ScopeContext::dispatch`], [`ScopeContext::mutate`] and [`ScopeContext::write`] first
//!   renew the claim by compare-and-set as a write-ahead intent (reason, fresh expiry): the
//!   proof that the run still holds it ([`ScopedWriteError::ClaimLost`] otherwise, nothing
//!   sent). A dispatch is bounded by [`FenceConfig::dispatch_deadline`]; after an unknown
//!   outcome, an elapsed deadline or a panic it always writes the fence, recording the
//!   failure's kind and detail; `mutate` fences after a failure of unknown outcome; `write`
//!   does the same for one host-storage write;
//! - cancellation safety: once dispatched, a commit runs to completion in its own task, which
//!   holds the scope lock until the commit and its fence bookkeeping settled; a caller whose
//!   future is dropped simply stops waiting, and the claim is released after the last holder;
//! - fencing sets the in-process marker first, then persists it (a failure is logged; the
//!   in-process fence holds and is persisted again before the next write of the scope);
//! - [`ScopedWrites::revoke_installation`] releases a binding's locks, owners and fence cache;
//! - operator administration (list, clear, idempotent clear) lives in [`admin`].
//!
//! Specification: the repository's `docs/architecture.md` ("Reconciliation fences") and
//! `docs/protocol.md` ("Deviations of the fence runtime from the reference").
//! The rules (keys, records, claims, outcomes) are pure functions in `tenantry_fence`.

pub mod admin;
mod admit;
mod claim;
mod config;
pub mod connector;
mod context;
mod error;
mod locks;
mod store_clock;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crossbeam_utils::atomic::AtomicCell;
use futures::FutureExt;
use serde_json::Value;
use tenantry_fence::{
    Binding, FailureRecord, FenceKey, FenceMarker, IntentTemplate, RecordKind, RecordRead,
    ScopeIdentity,
};
use tenantry_ports::clock::{Clock, SystemClock};
use tenantry_ports::host_storage::metrics::{
    FenceMetrics, FenceRefusal, FenceWriteOutcome, NoFenceMetrics,
};
use tenantry_ports::host_storage::{HostStorage, HostStorageError};
use tracing::Instrument;

use self::claim::{HELD, Held, HeldScopes, InFlight, RunClaim, Slot};

pub use self::config::FenceConfig;

/// Most scopes the runtime keeps keys for ([`ScopedWrites::scope_keys`]); past it the cache
/// starts over, so memory stays bounded however many scopes are written.
const KEY_CACHE_LIMIT: usize = 4096;

/// The reason written into every claim a run takes.
const CLAIM_REASON: &str = "write in progress";

/// What is the same on every run of one scope: its identity (shared) and fence key, and its
/// claim ([`ClaimCache`]).
pub(super) struct ScopeKeys {
    scope: ScopeIdentity,
    key: FenceKey,
    claim: ClaimCache,
}

/// This runtime's claim on one scope identity, kept between runs (shared by the scope of
/// that identity in every binding).
pub(super) struct ClaimCache {
    /// The claim's value apart from its stamps.
    template: IntentTemplate,
    /// The last claim released as it was issued (not refreshed by a dispatch), stamped again
    /// in place by the next run when nothing else shares it ([`IntentTemplate::restamp`]), so
    /// a claim allocates nothing. One atomic swap to take or keep it (no lock).
    spare: AtomicCell<Option<Arc<Value>>>,
    /// Whether the last run released its claim (wrote the tombstone): the hint that the next
    /// run may claim without reading the record first. Only a hint: the claim's
    /// compare-and-set checks it, and a stale hint costs one failed swap.
    pub(super) released: AtomicBool,
}

impl ClaimCache {
    /// The claim to write at `now_ms`, lapsing at `expires_at_ms`.
    fn at(&self, now_ms: i64, expires_at_ms: i64) -> Arc<Value> {
        if let Some(mut spare) = self.spare.take()
            && let Some(claim) = Arc::get_mut(&mut spare)
        {
            // Kept only as this template issued it (`keep`), and nobody else holds it.
            IntentTemplate::restamp(claim, now_ms, expires_at_ms);
            return spare;
        }
        Arc::new(self.template.at(now_ms, expires_at_ms))
    }

    /// Keeps `claim`, released, for the next run: only a claim [`Self::at`] issued and nobody
    /// changed since (a claim refreshed by a dispatch names another reason).
    pub(super) fn keep(&self, claim: Arc<Value>) {
        self.spare.store(Some(claim));
    }
}

/// Hash maps keyed by scopes and bindings: keys are the runtime's own (no attacker chooses
/// hash collisions to slow a lookup: bindings and scopes are validated identities, and the
/// maps are bounded), so a fast non-cryptographic hash replaces SipHash.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use self::config::duration_ms;
pub use self::context::ScopeContext;
use self::context::panic_message;
pub use self::error::ScopedWriteError;
use self::locks::{ScopeKey, Shared};

/// Whether a run honours fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMode {
    /// Fail closed when the scope (or its installation scope) is fenced. Every ordinary write.
    Enforce,
    /// Pass through a fence: only for operator actions that resolve it (deleting or
    /// rebuilding the fenced object, clearing the fence after reconciliation).
    AllowFenced,
}

/// One stored (or in-process) record at a fence key, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceEntry {
    /// The fence key.
    pub key: FenceKey,
    /// Fence (outcome unknown) or intent (a write holds the scope, a dispatch may be in
    /// flight). Unreadable records and in-process fences are fences.
    pub kind: RecordKind,
    /// The persisted marker, when it is readable and has the marker shape.
    pub marker: Option<FenceMarker>,
    /// Whether a non-null record is persisted (false: set in process only, the persist failed).
    pub persisted: bool,
}

/// The scoped writes runtime over host storage `S`. Cheap to clone (shared state).
///
/// # Example
/// A mutation whose outcome is unknown fences its scope; later writes to that scope fail
/// closed, other scopes keep working. Host storage is the in-memory fake here
/// (`tenantry-ports`, feature `testing`); a service uses `SeaOrmHostStorage` on the database
/// every replica shares, and maps its HTTP failures with `tenantry_remote_http::outcome`.
/// ```
/// use std::sync::Arc;
///
/// use tenantry_engine::scoped_writes::{FenceMode, ScopedWriteError, ScopedWrites};
/// use tenantry_fence::{Binding, DispatchOutcome, ScopeIdentity};
/// use tenantry_ports::host_storage::fake::InMemoryHostStorage;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let writes = ScopedWrites::new(Arc::new(InMemoryHostStorage::new()));
/// let binding = Binding::parse("installation-1")?;
/// let kb = ScopeIdentity::object("kb-42");
///
/// // The connection dropped after the request was sent: did the rename happen?
/// let lost = writes
///     .run(&binding, &kb, FenceMode::Enforce, |ctx| async move {
///         ctx.dispatch("rename kb-42", async { Err::<(), _>(DispatchOutcome::OutcomeUnknown) })
///             .await
///     })
///     .await;
/// assert!(matches!(lost, Err(ScopedWriteError::OutcomeUnknown { .. })));
///
/// // Until an operator reconciles and clears the fence, kb-42 refuses writes ...
/// let refused = writes
///     .run(&binding, &kb, FenceMode::Enforce, |ctx| async move {
///         ctx.dispatch("rename kb-42", async { Ok::<_, DispatchOutcome>(()) }).await
///     })
///     .await;
/// assert!(matches!(refused, Err(ScopedWriteError::Fenced { .. })));
///
/// // ... while every other scope of the installation is writable.
/// let other = ScopeIdentity::object("kb-7");
/// let renamed = writes
///     .run(&binding, &other, FenceMode::Enforce, |ctx| async move {
///         ctx.dispatch("rename kb-7", async { Ok::<_, DispatchOutcome>("renamed") }).await
///     })
///     .await?;
/// assert_eq!(renamed, "renamed");
/// # Ok(())
/// # }
/// ```
pub struct ScopedWrites<S: ?Sized> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: ?Sized> {
    /// Fence keys and claim templates of the scopes written recently
    /// ([`ScopedWrites::scope_keys`]).
    keys: Mutex<FastMap<ScopeIdentity, Arc<ScopeKeys>>>,
    shared: Arc<Shared>,
    in_flight: InFlight,
    clock: Arc<dyn Clock>,
    /// The store's clock as last read: every record is stamped and judged on it.
    store_clock: store_clock::StoreClock,
    config: FenceConfig,
    storage: Arc<S>,
    /// Where the ends of runs, unknown outcomes and clears are counted.
    metrics: Arc<dyn FenceMetrics>,
    /// JSON null, shared: the value of every release and the expected value of a claim from
    /// the tombstone (a store that keeps it compares it by pointer).
    tombstone: Arc<Value>,
}

impl<S: ?Sized> Clone for ScopedWrites<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<S: ?Sized> std::fmt::Debug for ScopedWrites<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopedWrites")
            .field("owner", &self.inner.config.owner)
            .finish_non_exhaustive()
    }
}

impl<S: HostStorage + ?Sized + 'static> ScopedWrites<S> {
    /// A runtime over `storage` on the system clock, with the default [`FenceConfig`].
    pub fn new(storage: Arc<S>) -> Self {
        Self::with_clock(storage, Arc::new(SystemClock))
    }

    /// A runtime over `storage` on `clock` and the default config.
    pub fn with_clock(storage: Arc<S>, clock: Arc<dyn Clock>) -> Self {
        Self::with_config(storage, clock, FenceConfig::default())
    }

    /// A runtime over `storage` on `clock`, with `config`. Fence records and claim expiries
    /// are stamped and judged on the store's clock ([`HostStorage::now_ms`], the database's),
    /// never on `clock`'s wall time: a reading of it is carried forward on `clock`'s monotonic
    /// time (and read again every second). The monotonic time and timers also time the wait
    /// for another process's claim ([`FenceConfig::claim_poll`], [`FenceConfig::claim_wait`])
    /// and bound a dispatch ([`FenceConfig::dispatch_deadline`]).
    pub fn with_config(storage: Arc<S>, clock: Arc<dyn Clock>, config: FenceConfig) -> Self {
        Self::with_metrics(storage, clock, config, Arc::new(NoFenceMetrics))
    }

    /// [`Self::with_config`], reporting to `metrics`: how every top-level run ends (a nested
    /// run of a held scope is part of its enclosing run and is not counted), each unknown
    /// outcome that fences a scope, and each operator clear that cleared a record.
    pub fn with_metrics(
        storage: Arc<S>,
        clock: Arc<dyn Clock>,
        config: FenceConfig,
        metrics: Arc<dyn FenceMetrics>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                keys: Mutex::new(FastMap::default()),
                shared: Arc::new(Shared::new()),
                in_flight: InFlight::default(),
                clock,
                store_clock: store_clock::StoreClock::default(),
                config,
                storage,
                metrics,
                tombstone: Arc::new(Value::Null),
            }),
        }
    }

    /// The host storage behind this runtime (for reads).
    pub fn storage(&self) -> &Arc<S> {
        &self.inner.storage
    }

    /// The host storage itself: its methods called on `S`, not on the `Arc` handle (whose
    /// forwarding would box a second future per call).
    pub(super) fn store(&self) -> &S {
        &self.inner.storage
    }

    /// This runtime's claim settings (owner id, dispatch deadline).
    pub fn config(&self) -> &FenceConfig {
        &self.inner.config
    }

    /// The fence key of `scope` (SHA-256 of its identity) and the template of its claim
    /// (this runtime's intent on it), computed once per scope and then read from a small
    /// cache: both are pure functions of the identity and the runtime's owner, so caching
    /// changes nothing but the time a run spends. The cache is emptied when it reaches
    /// [`KEY_CACHE_LIMIT`] entries.
    fn scope_keys(&self, scope: &ScopeIdentity) -> Arc<ScopeKeys> {
        let mut keys = self
            .inner
            .keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(cached) = keys.get(scope) {
            return cached.clone();
        }
        if keys.len() >= KEY_CACHE_LIMIT {
            keys.clear();
        }
        let cached = Arc::new(ScopeKeys {
            scope: scope.clone(),
            key: scope.fence_key(),
            claim: ClaimCache {
                template: IntentTemplate::new(scope, CLAIM_REASON, &self.inner.config.owner),
                spare: AtomicCell::new(None),
                released: AtomicBool::new(false),
            },
        });
        keys.insert(scope.clone(), cached.clone());
        cached
    }

    /// The store's clock now (Unix ms): the last reading carried forward on the monotonic
    /// clock, or a fresh reading when that is a second old.
    ///
    /// # Errors
    /// [`HostStorageError`] when the store's clock cannot be read.
    async fn store_now(&self) -> Result<i64, HostStorageError> {
        match self
            .inner
            .store_clock
            .estimate(self.inner.clock.monotonic())
        {
            Some(now) => Ok(now),
            None => self.read_store_clock().await,
        }
    }

    /// Reads the store's clock afresh (operator actions: clear, list, count).
    ///
    /// # Errors
    /// [`HostStorageError`] when the store's clock cannot be read.
    async fn read_store_clock(&self) -> Result<i64, HostStorageError> {
        let now = S::now_ms(self.store()).await?;
        self.inner
            .store_clock
            .anchor(now, self.inner.clock.monotonic());
        Ok(now)
    }

    /// [`Self::store_now`] where the store cannot be asked: for time stamps nothing is judged
    /// by (a fence's `fenced_at_ms`). The last reading carried forward, or the process's wall
    /// clock before any reading.
    fn stamp_ms(&self) -> i64 {
        self.inner
            .store_clock
            .estimate_any_age(self.inner.clock.monotonic())
            .unwrap_or_else(|| self.inner.clock.now().timestamp_millis())
    }

    /// [`Self::store_now`] for a run: a failure fails it closed.
    async fn run_now<E>(&self, binding: &Binding) -> Result<i64, ScopedWriteError<E>> {
        self.store_now().await.map_err(|source| {
            tracing::warn!(%binding, error = %source, "could not read the store's clock; failing closed");
            ScopedWriteError::FenceStateUnavailable {
                binding: binding.clone(),
                source,
            }
        })
    }

    /// Runs `operation` under the lock and claim of `(binding, scope)`.
    ///
    /// Reads the scope's record and the installation record first, waits while another
    /// process holds the scope, refuses a fenced scope unless `mode` is
    /// [`FenceMode::AllowFenced`], and takes the claim (unless passing through a fence). The
    /// operation gets a [`ScopeContext`] for its mutations. When it returns
    /// [`ScopedWriteError::OutcomeUnknown`] the scope is fenced (if the run did not fence it
    /// already). The claim is released when the run ends. A run nested in another run of the
    /// same scope and task reuses the held lock and claim and skips the checks, like the
    /// enclosing run already did them.
    ///
    /// # Errors
    /// [`ScopedWriteError::FenceStateUnavailable`], [`ScopedWriteError::Fenced`],
    /// [`ScopedWriteError::ScopeBusy`], or whatever the operation returns.
    pub async fn run<T, E, F, Fut>(
        &self,
        binding: &Binding,
        scope: &ScopeIdentity,
        mode: FenceMode,
        operation: F,
    ) -> Result<T, ScopedWriteError<E>>
    where
        F: FnOnce(ScopeContext<S>) -> Fut,
        Fut: Future<Output = Result<T, ScopedWriteError<E>>>,
    {
        // The `fenced_write` span exists only when a subscriber wants it (the service always
        // installs one): without one, tracing's `log` fallback would record the span's fields
        // on every run for nothing.
        // (`enabled!` asks the subscriber about a span at this module's target and level: a
        // cached answer, no `log` fallback.)
        if tracing::enabled!(kind: tracing::metadata::Kind::SPAN, tracing::Level::INFO) {
            let span = tracing::info_span!("fenced_write", mode = ?mode);
            self.run_in_span(binding, scope, mode, operation)
                .instrument(span)
                .await
        } else {
            self.run_in_span(binding, scope, mode, operation).await
        }
    }

    /// The body of [`Self::run`] (inside its span, when there is one).
    async fn run_in_span<T, E, F, Fut>(
        &self,
        binding: &Binding,
        scope: &ScopeIdentity,
        mode: FenceMode,
        operation: F,
    ) -> Result<T, ScopedWriteError<E>>
    where
        F: FnOnce(ScopeContext<S>) -> Fut,
        Fut: Future<Output = Result<T, ScopedWriteError<E>>>,
    {
        let keys = self.scope_keys(scope);
        let key: ScopeKey = (binding.clone(), keys.key.clone());
        if let Some(claim) = self.held_by_current_task(&key) {
            return operation(ScopeContext { claim }).await;
        }
        let guard = locks::acquire(&self.inner.shared, &key).await;
        let cached_fence = guard.cached_fence();
        let taken = match self
            .admit(binding, scope, &key.1, &keys.claim, mode, cached_fence)
            .await
        {
            Ok(taken) => taken,
            Err(refused) => {
                self.record_end(&refused);
                return Err(refused);
            }
        };
        let token = guard.token();
        let mut claim = Arc::new(RunClaim {
            writes: self.clone(),
            scope_key: key,
            keys,
            guard: Some(guard),
            slot: Mutex::new(Slot {
                claim: taken,
                fenced: false,
                refreshed: false,
                lost: false,
            }),
        });
        let held = HeldScopes::enter(Held {
            runtime: self.runtime_id(),
            token,
            claim: claim.clone(),
        });
        let ctx = ScopeContext {
            claim: claim.clone(),
        };
        let result = HELD.scope(held, operation(ctx)).await;
        if let Err(ScopedWriteError::OutcomeUnknown { reason, .. }) = &result
            && !claim.slot().fenced
        {
            let failure = FailureRecord {
                kind: "reported".to_owned(),
                detail: reason.clone(),
            };
            ScopeContext {
                claim: claim.clone(),
            }
            .fence_with(reason, failure)
            .await;
        }
        claim.release().await;
        match &result {
            Ok(_) => self
                .inner
                .metrics
                .record_write(FenceWriteOutcome::Succeeded),
            Err(error) => self.record_end(error),
        }
        result
    }

    /// Counts how a run ended in error: a refusal before the mutation, an unknown outcome
    /// (the scope fenced) or a known failure.
    fn record_end<E>(&self, error: &ScopedWriteError<E>) {
        let metrics = &self.inner.metrics;
        match error {
            ScopedWriteError::Fenced { .. } => metrics.record_refusal(FenceRefusal::Fenced),
            ScopedWriteError::ScopeBusy { .. } => metrics.record_refusal(FenceRefusal::ScopeBusy),
            ScopedWriteError::FenceStateUnavailable { .. } => {
                metrics.record_refusal(FenceRefusal::StateUnavailable);
            }
            ScopedWriteError::ClaimLost { .. } => metrics.record_refusal(FenceRefusal::ClaimLost),
            ScopedWriteError::OutcomeUnknown { .. }
            | ScopedWriteError::HostWrite(_)
            | ScopedWriteError::IntentNotPersisted(_) => metrics.record_unknown_outcome(),
            ScopedWriteError::Operation(_) => metrics.record_write(FenceWriteOutcome::Failed),
        }
    }

    /// Fences `(binding, scope)` from outside a run (for example an operator marking a scope
    /// for reconciliation). Takes the scope lock; passes through an existing fence.
    pub async fn fence(&self, binding: &Binding, scope: &ScopeIdentity, reason: &str) {
        let result: Result<(), ScopedWriteError<std::convert::Infallible>> = self
            .run(binding, scope, FenceMode::AllowFenced, |ctx| async move {
                ctx.fence(reason).await;
                Ok(())
            })
            .await;
        if let Err(error) = result {
            // The records could not be read; the in-process marker still holds the scope.
            let record = operator_fence(scope, reason, self.stamp_ms());
            self.inner
                .shared
                .state()
                .fences
                .mark(binding, scope.fence_key(), record, false);
            tracing::warn!(%binding, %scope, %error, "fence set in process only");
        }
    }

    /// The records of `binding` for operators: every non-null stored record at a fence key
    /// (fences and intents) plus the fences set in process only (persist failed).
    ///
    /// # Errors
    /// [`HostStorageError`] when the key listing fails.
    pub async fn list_fences(
        &self,
        binding: &Binding,
    ) -> Result<Vec<FenceEntry>, HostStorageError> {
        let storage = &self.inner.storage;
        let now_ms = self.read_store_clock().await?;
        let mut entries = Vec::new();
        for key in storage.keys(binding).await? {
            let Some(fence) = FenceKey::from_storage_key(&key) else {
                continue;
            };
            let read = match storage.get(binding, &key).await {
                Ok(Some(value)) => RecordRead::Value(value),
                Ok(None) | Err(_) => RecordRead::Unreadable,
            };
            if tenantry_fence::record_is_fence(&read) {
                let marker = match &read {
                    RecordRead::Value(value) => FenceMarker::from_value(value),
                    RecordRead::Unreadable => None,
                };
                entries.push(FenceEntry {
                    key: fence,
                    // An intent past its expiry is a fence (its holder is gone).
                    kind: marker
                        .as_ref()
                        .map_or(RecordKind::Fence, |m| tenantry_fence::kind_at(m, now_ms)),
                    marker,
                    persisted: true,
                });
            }
        }
        for (key, persisted) in self.inner.shared.state().fences.fenced_keys(binding) {
            if let Some(entry) = entries.iter_mut().find(|e| e.key == key) {
                // Fenced here even if the stored record is still this process's intent.
                entry.kind = RecordKind::Fence;
                entry.persisted = persisted;
            } else {
                entries.push(FenceEntry {
                    key,
                    kind: RecordKind::Fence,
                    marker: None,
                    persisted: false,
                });
            }
        }
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }

    /// Whether `(binding, scope)` is fenced in this process's cache (no storage read).
    pub fn is_fenced_in_process(&self, binding: &Binding, scope: &ScopeIdentity) -> bool {
        self.inner.shared.state().fences.is_fenced(binding, scope)
    }

    /// Drops the process-local state of `binding` after its installation was revoked: lock
    /// entries, owners and the fence cache (persisted fences still hold through storage).
    pub fn revoke_installation(&self, binding: &Binding) {
        locks::release_binding(&mut self.inner.shared.state(), binding);
    }

    /// Waits until every spawned commit, fence persist, claim release and tombstone write has
    /// settled. For graceful shutdown and tests.
    pub async fn settled(&self) {
        self.inner.in_flight.idle().await;
    }

    /// How many scopes are held or awaited in this process (lock entries some run or waiter
    /// references).
    pub fn lock_entries(&self) -> usize {
        self.inner.shared.state().entries_in_use()
    }

    /// How many lock entries the map holds, idle ones not yet swept included. Bounded: an
    /// idle entry is kept for the scope's next run until the map reaches twice the entries in
    /// use after the last sweep (at least 64), when every idle entry is removed.
    pub fn lock_map_len(&self) -> usize {
        self.inner.shared.state().locks.len()
    }

    /// How many scopes have an owner (a run holding their lock).
    pub fn owner_count(&self) -> usize {
        self.inner.shared.state().owner_count()
    }

    /// How many bindings the fence cache holds fences for.
    pub fn cached_bindings(&self) -> usize {
        self.inner.shared.state().fences.binding_count()
    }

    fn runtime_id(&self) -> usize {
        Arc::as_ptr(&self.inner.shared) as usize
    }

    fn held_by_current_task(&self, key: &ScopeKey) -> Option<Arc<RunClaim<S>>> {
        let runtime = self.runtime_id();
        let held = HELD
            .try_with(|held| {
                held.as_slice()
                    .iter()
                    .rev()
                    .find(|h| h.runtime == runtime && h.claim.scope_key() == key)
                    .cloned()
            })
            .ok()
            .flatten()?;
        // A revoked installation forgot its owners: the nested run then takes a fresh lock.
        let owner = self.inner.shared.state().owner(key);
        if owner.is_none() || owner != held.token {
            return None;
        }
        held.claim.into_any().downcast::<RunClaim<S>>().ok()
    }

    /// Runs `work` in its own task, counted as in flight, and waits for it. Dropping the
    /// returned future does not stop `work`.
    async fn spawn_settled<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, String> {
        let token = self.inner.in_flight.enter();
        let handle = tokio::spawn(async move {
            let result = AssertUnwindSafe(work).catch_unwind().await;
            drop(token);
            result
        });
        match handle.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(panic)) => Err(panic_message(&panic)),
            Err(join) => Err(join.to_string()),
        }
    }
}

fn operator_fence(scope: &ScopeIdentity, reason: &str, now: i64) -> Value {
    let failure = FailureRecord {
        kind: "operator".to_owned(),
        detail: reason.to_owned(),
    };
    FenceMarker::fence(scope, reason, failure, now).to_value()
}
