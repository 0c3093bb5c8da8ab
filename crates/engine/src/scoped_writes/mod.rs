//! The `ScopedWrites` runtime: writes serialized per (installation binding, scope), and
//! durable fences for mutations whose outcome is unknown.
//!
//! Platforms wrap every mutation of a remote or host store in [`ScopedWrites::run`]:
//! - one async lock per `(binding, scope)`; entries of idle scopes are dropped, so the map is
//!   bounded by the scopes in use;
//! - re-entrant: a run nested inside another run of the same scope, in the same task, reuses
//!   the held lock instead of deadlocking;
//! - before the first write of a binding its persisted fences are loaded from host storage
//!   (once); if the key listing fails the write fails closed with
//!   [`ScopedWriteError::FenceStateUnavailable`] and the next call retries the load; a fence
//!   record that cannot be read counts as a fence;
//! - a write to a fenced scope (or to any scope of a binding whose installation scope is
//!   fenced) fails closed with [`ScopedWriteError::Fenced`], unless the run is
//!   [`FenceMode::AllowFenced`] (operator actions that delete or rebuild the fenced object);
//! - [`ScopeContext::dispatch`] persists the fence as write-ahead intent before a remote
//!   mutation goes out, clears it after a known outcome (answered, not dispatched) and keeps it
//!   after an unknown one or a cancellation; [`ScopeContext::mutate`] fences after a failure of
//!   unknown outcome; [`ScopeContext::write`] does the same for one host-storage write;
//! - cancellation safety: once dispatched, a commit runs to completion in its own task, which
//!   holds the scope lock until the commit and its fence bookkeeping settled; a caller whose
//!   future is dropped simply stops waiting;
//! - fencing sets the in-process marker first, then persists it best effort (a failure is
//!   logged; the in-process fence still holds); clearing writes a JSON null tombstone;
//! - [`ScopedWrites::revoke_installation`] releases a binding's locks, owners and fence cache.
//!
//! Reference behaviour: `seeds/kb_scoped_fences.py.txt`, `seeds/memory_scope_writes.py.txt`.
//! The rules (keys, cache, outcomes) are pure functions in `tenantry_fence`.

pub mod connector;
mod locks;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use serde_json::Value;
use tenantry_fence::{
    Binding, DispatchFailure, FenceKey, FenceMarker, IntentAction, RecordRead, ScopeIdentity,
};
use tenantry_ports::host_storage::{HostStorage, HostStorageError, validate_key};
use tokio::sync::Notify;

use self::locks::{ScopeGuard, ScopeKey, Shared};

/// Whether a run honours fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceMode {
    /// Fail closed when the scope (or its installation scope) is fenced. Every ordinary write.
    Enforce,
    /// Pass through a fence: only for operator actions that resolve it (deleting or
    /// rebuilding the fenced object, clearing the fence after reconciliation).
    AllowFenced,
}

/// Why a scoped write did not complete. `E` is the error type of the wrapped mutation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopedWriteError<E> {
    /// The scope needs reconciliation: an earlier mutation's outcome is unknown. Nothing was
    /// written. An operator must reconcile with the remote and clear the fence (or delete or
    /// rebuild the object with an `AllowFenced` run).
    #[error(
        "scope {scope} of installation {binding} is fenced ({key}) after a mutation with unknown outcome; reconcile with the remote, then clear the fence"
    )]
    Fenced {
        /// The installation binding.
        binding: Binding,
        /// The scope written to.
        scope: ScopeIdentity,
        /// The fence that blocks it (the scope's own or the installation's).
        key: FenceKey,
    },
    /// The persisted fences of the binding could not be read, so the write was refused (a
    /// failed read is no proof that no fence exists). The next call retries the read.
    #[error(
        "persisted fences of installation {binding} could not be read ({source}); write refused, retry after host storage recovers"
    )]
    FenceStateUnavailable {
        /// The installation binding.
        binding: Binding,
        /// The storage failure.
        source: HostStorageError,
    },
    /// A dispatched mutation's outcome is unknown; the scope is now fenced. Return this from
    /// an operation to fence its scope for an ambiguity detected by the caller.
    #[error(
        "mutation on scope {scope} has an unknown outcome ({reason}); the scope is fenced until reconciled"
    )]
    OutcomeUnknown {
        /// The scope now fenced.
        scope: ScopeIdentity,
        /// What was dispatched and what was observed.
        reason: String,
        /// The mutation's error, when it returned one (none after a panic).
        error: Option<E>,
    },
    /// The mutation failed with a known outcome (answered, or never dispatched); the scope
    /// stays writable.
    #[error("mutation failed: {0}")]
    Operation(E),
    /// A host-storage write failed; unless the key was refused outright, the scope is fenced
    /// because the write may or may not have been stored.
    #[error("host-storage write failed: {0}")]
    HostWrite(HostStorageError),
    /// The write-ahead intent could not be persisted, so the remote mutation was not
    /// dispatched. The scope is fenced in process (the intent may have been stored);
    /// retry after host storage recovers and clear the fence.
    #[error(
        "write-ahead intent could not be persisted ({0}); mutation not dispatched, scope fenced"
    )]
    IntentNotPersisted(HostStorageError),
}

/// One fence as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceEntry {
    /// The fence key.
    pub key: FenceKey,
    /// The persisted marker, when it is readable and has the marker shape.
    pub marker: Option<FenceMarker>,
    /// Whether a non-null record is persisted (false: set in process only, the persist failed).
    pub persisted: bool,
}

/// Milliseconds since the Unix epoch, for fence markers.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The scoped writes runtime over host storage `S`. Cheap to clone (shared state).
pub struct ScopedWrites<S: ?Sized> {
    inner: Arc<Inner<S>>,
}

struct Inner<S: ?Sized> {
    shared: Arc<Shared>,
    in_flight: InFlight,
    clock: Clock,
    storage: Arc<S>,
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
        f.debug_struct("ScopedWrites").finish_non_exhaustive()
    }
}

tokio::task_local! {
    /// The scopes whose locks the current task holds through an enclosing run.
    static HELD: Vec<Held>;
}

#[derive(Clone)]
struct Held {
    runtime: usize,
    key: ScopeKey,
    guard: Arc<ScopeGuard>,
}

impl<S: HostStorage + ?Sized + 'static> ScopedWrites<S> {
    /// A runtime over `storage` that stamps fence markers with the system clock.
    pub fn new(storage: Arc<S>) -> Self {
        Self::with_clock(storage, Arc::new(system_now_ms))
    }

    /// A runtime over `storage` with `clock` (Unix milliseconds) for fence markers.
    pub fn with_clock(storage: Arc<S>, clock: Clock) -> Self {
        Self {
            inner: Arc::new(Inner {
                shared: Arc::new(Shared::new()),
                in_flight: InFlight::default(),
                clock,
                storage,
            }),
        }
    }

    /// The host storage behind this runtime (for reads).
    pub fn storage(&self) -> &Arc<S> {
        &self.inner.storage
    }

    /// Runs `operation` under the lock of `(binding, scope)`.
    ///
    /// Loads the binding's persisted fences first (once), then refuses a fenced scope unless
    /// `mode` is [`FenceMode::AllowFenced`]. The operation gets a [`ScopeContext`] for its
    /// mutations. When it returns [`ScopedWriteError::OutcomeUnknown`] the scope is fenced (if
    /// it is not already). A run nested in another run of the same scope and task reuses the
    /// held lock and skips the fence check, like the enclosing run already did.
    ///
    /// # Errors
    /// [`ScopedWriteError::FenceStateUnavailable`], [`ScopedWriteError::Fenced`], or whatever
    /// the operation returns.
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
        let key: ScopeKey = (binding.clone(), scope.clone());
        if let Some(held) = self.held_by_current_task(&key) {
            let ctx = self.context(binding, scope, held.guard.clone());
            return operation(ctx).await;
        }
        let guard = Arc::new(locks::acquire(&self.inner.shared, &key).await);
        self.ensure_fences_loaded(binding).await?;
        if mode == FenceMode::Enforce
            && let Some(fence) = self.inner.shared.state().fences.fenced_by(binding, scope)
        {
            return Err(ScopedWriteError::Fenced {
                binding: binding.clone(),
                scope: scope.clone(),
                key: fence,
            });
        }
        let mut held = HELD.try_with(Clone::clone).unwrap_or_default();
        held.push(Held {
            runtime: self.runtime_id(),
            key,
            guard: guard.clone(),
        });
        let ctx = self.context(binding, scope, guard);
        let fence_ctx = ctx.clone();
        let result = HELD.scope(held, operation(ctx)).await;
        if let Err(ScopedWriteError::OutcomeUnknown { reason, .. }) = &result {
            let already = self.inner.shared.state().fences.fenced_by(binding, scope)
                == Some(scope.fence_key());
            if !already {
                fence_ctx.fence(reason).await;
            }
        }
        result
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
            // The load failed; the in-process marker still holds the scope.
            self.inner
                .shared
                .state()
                .fences
                .mark(binding, scope.fence_key());
            tracing::warn!(%binding, %scope, %error, "fence set in process only");
        }
    }

    /// The operator path out of a fence, after reconciling with the remote: clears the fence
    /// of `(binding, scope)` under its lock (tombstone in storage, marker in process). `reason`
    /// is logged.
    ///
    /// # Errors
    /// [`ScopedWriteError::FenceStateUnavailable`] when the binding's fences cannot be loaded.
    pub async fn clear_fence(
        &self,
        binding: &Binding,
        scope: &ScopeIdentity,
        reason: &str,
    ) -> Result<(), ScopedWriteError<std::convert::Infallible>> {
        tracing::info!(%binding, %scope, reason, "operator clears fence");
        self.run(binding, scope, FenceMode::AllowFenced, |ctx| async move {
            ctx.clear_fence().await;
            Ok(())
        })
        .await
    }

    /// Clears a fence by key, for a record whose scope identity is unknown (unreadable or
    /// foreign marker). Writes the tombstone without taking a scope lock. `reason` is logged.
    ///
    /// # Errors
    /// [`HostStorageError`] when the tombstone cannot be written; the in-process marker is
    /// cleared anyway and the persisted one fences again after a restart.
    pub async fn clear_fence_key(
        &self,
        binding: &Binding,
        key: &FenceKey,
        reason: &str,
    ) -> Result<(), HostStorageError> {
        tracing::info!(%binding, %key, reason, "operator clears fence by key");
        self.inner.shared.state().fences.clear(binding, key);
        let storage = self.inner.storage.clone();
        let (binding, key) = (binding.clone(), key.clone());
        self.spawn_settled(async move { storage.set(&binding, key.as_str(), &Value::Null).await })
            .await
            .unwrap_or_else(|panic| Err(panicked("set", &panic)))
    }

    /// The fences of `binding` for operators: every non-null persisted fence record plus the
    /// fences set in process only (persist failed).
    ///
    /// # Errors
    /// [`HostStorageError`] when the key listing fails.
    pub async fn list_fences(
        &self,
        binding: &Binding,
    ) -> Result<Vec<FenceEntry>, HostStorageError> {
        let storage = &self.inner.storage;
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
                    marker,
                    persisted: true,
                });
            }
        }
        for key in self.inner.shared.state().fences.fenced_keys(binding) {
            if !entries.iter().any(|e| e.key == key) {
                entries.push(FenceEntry {
                    key,
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
    /// entries, owners and the fence cache (a later write reloads fences from storage).
    pub fn revoke_installation(&self, binding: &Binding) {
        locks::release_binding(&mut self.inner.shared.state(), binding);
    }

    /// Waits until every spawned commit, fence persist and tombstone write has settled. For
    /// graceful shutdown and tests.
    pub async fn settled(&self) {
        self.inner.in_flight.idle().await;
    }

    /// How many scope lock entries exist (held or awaited scopes only).
    pub fn lock_entries(&self) -> usize {
        self.inner.shared.state().locks.len()
    }

    /// How many scopes have an owner (a run holding their lock).
    pub fn owner_count(&self) -> usize {
        self.inner.shared.state().owners.len()
    }

    /// How many bindings the fence cache holds state for.
    pub fn cached_bindings(&self) -> usize {
        self.inner.shared.state().fences.binding_count()
    }

    fn runtime_id(&self) -> usize {
        Arc::as_ptr(&self.inner.shared) as usize
    }

    fn held_by_current_task(&self, key: &ScopeKey) -> Option<Held> {
        let runtime = self.runtime_id();
        let held = HELD
            .try_with(|held| {
                held.iter()
                    .rev()
                    .find(|h| h.runtime == runtime && &h.key == key)
                    .cloned()
            })
            .ok()
            .flatten()?;
        // A revoked installation forgot its owners: the nested run then takes a fresh lock.
        let owner = self.inner.shared.state().owners.get(key).copied();
        (owner.is_some() && owner == held.guard.token()).then_some(held)
    }

    fn context(
        &self,
        binding: &Binding,
        scope: &ScopeIdentity,
        guard: Arc<ScopeGuard>,
    ) -> ScopeContext<S> {
        ScopeContext {
            writes: self.clone(),
            binding: binding.clone(),
            scope: scope.clone(),
            guard,
        }
    }

    async fn ensure_fences_loaded<E>(&self, binding: &Binding) -> Result<(), ScopedWriteError<E>> {
        if self.inner.shared.state().fences.is_loaded(binding) {
            return Ok(());
        }
        let storage = &self.inner.storage;
        let keys = storage.keys(binding).await.map_err(|source| {
            tracing::warn!(%binding, error = %source, "could not list persisted fences; failing closed");
            ScopedWriteError::FenceStateUnavailable {
                binding: binding.clone(),
                source,
            }
        })?;
        let mut records = Vec::new();
        for key in keys {
            let Some(fence) = FenceKey::from_storage_key(&key) else {
                continue;
            };
            let read = match storage.get(binding, &key).await {
                Ok(Some(value)) => RecordRead::Value(value),
                Ok(None) => RecordRead::Unreadable,
                Err(error) => {
                    tracing::warn!(%binding, %key, %error, "unreadable fence record counts as a fence");
                    RecordRead::Unreadable
                }
            };
            records.push((fence, read));
        }
        self.inner
            .shared
            .state()
            .fences
            .apply_load(binding, records);
        Ok(())
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

/// A run's handle on its scope: the mutations it dispatches keep the scope lock until they
/// settle. Cheap to clone.
pub struct ScopeContext<S: ?Sized> {
    writes: ScopedWrites<S>,
    binding: Binding,
    scope: ScopeIdentity,
    guard: Arc<ScopeGuard>,
}

impl<S: ?Sized> Clone for ScopeContext<S> {
    fn clone(&self) -> Self {
        Self {
            writes: self.writes.clone(),
            binding: self.binding.clone(),
            scope: self.scope.clone(),
            guard: self.guard.clone(),
        }
    }
}

impl<S: ?Sized> std::fmt::Debug for ScopeContext<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeContext")
            .field("binding", &self.binding)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl<S: HostStorage + ?Sized + 'static> ScopeContext<S> {
    /// The installation binding of this run.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// The scope of this run.
    pub fn scope(&self) -> &ScopeIdentity {
        &self.scope
    }

    /// The host storage, for reads inside the run.
    pub fn storage(&self) -> &Arc<S> {
        self.writes.storage()
    }

    /// Dispatches a remote mutation under a write-ahead intent: the scope's fence is set in
    /// process and persisted before `commit` runs; it is cleared (tombstone) when `commit`
    /// succeeds or fails with a known outcome, and kept when the outcome is unknown or
    /// `commit` panics. `commit` runs in its own task holding the scope lock, so dropping the
    /// caller's future neither abandons it nor releases the lock early.
    ///
    /// # Errors
    /// [`ScopedWriteError::IntentNotPersisted`] (not dispatched, scope fenced),
    /// [`ScopedWriteError::Operation`] for a known-outcome failure (scope writable),
    /// [`ScopedWriteError::OutcomeUnknown`] for an unknown outcome (scope fenced).
    pub async fn dispatch<T, E, Fut>(
        &self,
        reason: &str,
        commit: Fut,
    ) -> Result<T, ScopedWriteError<E>>
    where
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: DispatchFailure + std::fmt::Display + Send + 'static,
    {
        let fence_key = self.scope.fence_key();
        let marker = FenceMarker::new(&self.scope, reason, (self.writes.inner.clock)()).to_value();
        self.writes
            .inner
            .shared
            .state()
            .fences
            .mark(&self.binding, fence_key.clone());
        let ctx = self.clone();
        let reason = reason.to_owned();
        let settled = self
            .writes
            .spawn_settled(async move {
                let storage = ctx.writes.inner.storage.clone();
                if let Err(error) = storage.set(&ctx.binding, fence_key.as_str(), &marker).await {
                    tracing::warn!(binding = %ctx.binding, scope = %ctx.scope, %error,
                        "write-ahead intent not persisted; mutation not dispatched, scope fenced");
                    return Err(ScopedWriteError::IntentNotPersisted(error));
                }
                let result = AssertUnwindSafe(commit).catch_unwind().await;
                match result {
                    Ok(Ok(value)) => {
                        ctx.clear_now().await;
                        Ok(value)
                    }
                    Ok(Err(error)) => match error.dispatch_outcome().intent_action() {
                        IntentAction::Clear => {
                            ctx.clear_now().await;
                            Err(ScopedWriteError::Operation(error))
                        }
                        IntentAction::Keep => {
                            tracing::warn!(binding = %ctx.binding, scope = %ctx.scope, %error,
                                "dispatched mutation has an unknown outcome; scope stays fenced");
                            Err(ScopedWriteError::OutcomeUnknown {
                                scope: ctx.scope.clone(),
                                reason: format!("{reason}: {error}"),
                                error: Some(error),
                            })
                        }
                    },
                    Err(panic) => Err(ScopedWriteError::OutcomeUnknown {
                        scope: ctx.scope.clone(),
                        reason: format!("{reason}: commit panicked: {}", panic_message(&panic)),
                        error: None,
                    }),
                }
            })
            .await;
        settled.unwrap_or_else(|panic| {
            Err(ScopedWriteError::OutcomeUnknown {
                scope: self.scope.clone(),
                reason: format!("{}: settling panicked: {panic}", self.scope),
                error: None,
            })
        })
    }

    /// Runs a mutation already dispatched to the host (or a remote) in its own task holding
    /// the scope lock; when it fails with an unknown outcome (or panics) the scope is fenced
    /// with `reason`. Dropping the caller's future does not abandon it.
    ///
    /// # Errors
    /// [`ScopedWriteError::Operation`] for a known-outcome failure,
    /// [`ScopedWriteError::OutcomeUnknown`] (scope fenced) otherwise.
    pub async fn mutate<T, E, Fut>(
        &self,
        reason: &str,
        commit: Fut,
    ) -> Result<T, ScopedWriteError<E>>
    where
        Fut: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: DispatchFailure + std::fmt::Display + Send + 'static,
    {
        let ctx = self.clone();
        let reason = reason.to_owned();
        let settled = self
            .writes
            .spawn_settled(async move {
                let result = AssertUnwindSafe(commit).catch_unwind().await;
                match result {
                    Ok(Ok(value)) => Ok(value),
                    Ok(Err(error)) if !error.dispatch_outcome().fences() => {
                        Err(ScopedWriteError::Operation(error))
                    }
                    Ok(Err(error)) => {
                        let reason = format!("{reason}: {error}");
                        ctx.fence_now(&reason).await;
                        Err(ScopedWriteError::OutcomeUnknown {
                            scope: ctx.scope.clone(),
                            reason,
                            error: Some(error),
                        })
                    }
                    Err(panic) => {
                        let reason = format!("{reason}: panicked: {}", panic_message(&panic));
                        ctx.fence_now(&reason).await;
                        Err(ScopedWriteError::OutcomeUnknown {
                            scope: ctx.scope.clone(),
                            reason,
                            error: None,
                        })
                    }
                }
            })
            .await;
        settled.unwrap_or_else(|panic| {
            Err(ScopedWriteError::OutcomeUnknown {
                scope: self.scope.clone(),
                reason: format!("settling panicked: {panic}"),
                error: None,
            })
        })
    }

    /// Writes `value` under `key` of this run's binding (JSON null writes a tombstone). A
    /// failed write fences the scope (the value may or may not be stored) and returns the
    /// failure; a key refused by [`validate_key`] fails without fencing (nothing was sent).
    ///
    /// # Errors
    /// [`ScopedWriteError::HostWrite`] with the storage failure.
    pub async fn write<E>(&self, key: &str, value: Value) -> Result<(), ScopedWriteError<E>> {
        validate_key(key).map_err(ScopedWriteError::HostWrite)?;
        let storage = self.writes.inner.storage.clone();
        let (binding, key) = (self.binding.clone(), key.to_owned());
        let result: Result<(), ScopedWriteError<HostStorageError>> = self
            .mutate("host write outcome unknown", async move {
                storage.set(&binding, &key, &value).await
            })
            .await;
        result.map_err(|error| match error {
            ScopedWriteError::Operation(e)
            | ScopedWriteError::OutcomeUnknown { error: Some(e), .. } => {
                ScopedWriteError::HostWrite(e)
            }
            other => ScopedWriteError::HostWrite(HostStorageError::Unavailable {
                operation: "set",
                message: other.to_string(),
            }),
        })
    }

    /// Fences this scope: the in-process marker is set at once, then persisted best effort in
    /// a task that holds the scope lock (a persist failure is logged; the in-process fence
    /// still holds until this process restarts).
    pub async fn fence(&self, reason: &str) {
        let ctx = self.clone();
        let reason = reason.to_owned();
        // Set before anything can be cancelled.
        ctx.mark();
        let _ = self
            .writes
            .spawn_settled(async move { ctx.fence_now(&reason).await })
            .await;
    }

    /// Clears this scope's fence: the in-process marker at once, then a JSON null tombstone
    /// best effort (a failure is logged; the persisted fence then holds again after a
    /// restart). For operator actions in an `AllowFenced` run.
    pub async fn clear_fence(&self) {
        let ctx = self.clone();
        ctx.unmark();
        let _ = self
            .writes
            .spawn_settled(async move { ctx.clear_now().await })
            .await;
    }

    fn mark(&self) {
        self.writes
            .inner
            .shared
            .state()
            .fences
            .mark(&self.binding, self.scope.fence_key());
    }

    fn unmark(&self) {
        self.writes
            .inner
            .shared
            .state()
            .fences
            .clear(&self.binding, &self.scope.fence_key());
    }

    async fn fence_now(&self, reason: &str) {
        self.mark();
        let marker = FenceMarker::new(&self.scope, reason, (self.writes.inner.clock)()).to_value();
        let key = self.scope.fence_key();
        match self
            .writes
            .inner
            .storage
            .set(&self.binding, key.as_str(), &marker)
            .await
        {
            Ok(()) => {
                tracing::warn!(binding = %self.binding, scope = %self.scope, reason, "scope fenced")
            }
            Err(error) => {
                tracing::error!(binding = %self.binding, scope = %self.scope, reason, %error,
                "scope fenced in process, but the fence could not be persisted")
            }
        }
    }

    async fn clear_now(&self) {
        self.unmark();
        let key = self.scope.fence_key();
        if let Err(error) = self
            .writes
            .inner
            .storage
            .set(&self.binding, key.as_str(), &Value::Null)
            .await
        {
            tracing::warn!(binding = %self.binding, scope = %self.scope, %error,
                "fence cleared in process, but its tombstone could not be written");
        }
    }
}

/// Counts spawned work that has not settled.
#[derive(Debug, Default)]
struct InFlight {
    count: Arc<AtomicUsize>,
    idle: Arc<Notify>,
}

struct InFlightToken {
    count: Arc<AtomicUsize>,
    idle: Arc<Notify>,
}

impl Drop for InFlightToken {
    fn drop(&mut self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }
}

impl InFlight {
    fn enter(&self) -> InFlightToken {
        self.count.fetch_add(1, Ordering::AcqRel);
        InFlightToken {
            count: self.count.clone(),
            idle: self.idle.clone(),
        }
    }

    async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}

fn panicked(operation: &'static str, message: &str) -> HostStorageError {
    HostStorageError::Unavailable {
        operation,
        message: format!("storage task panicked: {message}"),
    }
}
