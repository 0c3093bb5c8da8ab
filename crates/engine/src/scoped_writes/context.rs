//! [`ScopeContext`]: what a run's operation uses to dispatch remote mutations and write host
//! storage under its scope's claim, fencing the scope after an unknown outcome.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;
use serde_json::Value;
use tenantry_fence::{
    Binding, DispatchFailure, FailureRecord, FenceMarker, IntentAction, RecordKind, ScopeIdentity,
};
use tenantry_ports::host_storage::{HostStorage, HostStorageError, validate_key};

use super::claim::RunClaim;
use super::{ScopedWriteError, ScopedWrites};

/// A run's handle on its scope: the mutations it dispatches keep the scope lock until they
/// settle. Cheap to clone (one shared pointer: the runtime, binding and scope are the run
/// claim's).
pub struct ScopeContext<S: HostStorage + ?Sized + 'static> {
    pub(super) claim: Arc<RunClaim<S>>,
}

impl<S: HostStorage + ?Sized + 'static> Clone for ScopeContext<S> {
    fn clone(&self) -> Self {
        Self {
            claim: self.claim.clone(),
        }
    }
}

impl<S: HostStorage + ?Sized + 'static> std::fmt::Debug for ScopeContext<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScopeContext")
            .field("binding", self.binding())
            .field("scope", self.scope())
            .finish_non_exhaustive()
    }
}

impl<S: HostStorage + ?Sized + 'static> ScopeContext<S> {
    /// The installation binding of this run.
    pub fn binding(&self) -> &Binding {
        self.claim.binding()
    }

    /// The scope of this run.
    pub fn scope(&self) -> &ScopeIdentity {
        self.claim.scope()
    }

    /// The runtime the run belongs to.
    fn writes(&self) -> &ScopedWrites<S> {
        &self.claim.writes
    }

    /// The host storage, for reads inside the run.
    pub fn storage(&self) -> &Arc<S> {
        self.writes().storage()
    }

    /// Dispatches a remote mutation under a write-ahead intent: the scope's record is
    /// rewritten (by compare-and-set on the run's claim) as an intent naming `reason`, with a
    /// fresh expiry on the store's clock, before `commit` runs. `commit` is bounded by the
    /// runtime's dispatch deadline ([`FenceConfig::dispatch_deadline`](super::FenceConfig::dispatch_deadline),
    /// on the runtime clock's monotonic time): when it elapses, `commit` is dropped, its
    /// outcome is unknown and the scope is fenced. When `commit` fails with an unknown
    /// outcome or panics, the fence is written over the intent (always, recording the
    /// failure's kind and detail); otherwise the intent stays the run's claim and is released
    /// when the run ends. `commit` runs in its own task holding the scope lock, so dropping
    /// the caller's future neither abandons it nor releases the lock early.
    ///
    /// # Errors
    /// [`ScopedWriteError::Fenced`] when this run already fenced its scope (not dispatched),
    /// [`ScopedWriteError::IntentNotPersisted`] (not dispatched, scope fenced),
    /// [`ScopedWriteError::ClaimLost`] (not dispatched, the claim was replaced or lapsed),
    /// [`ScopedWriteError::FenceStateUnavailable`] (not dispatched: the store's clock could
    /// not be read), [`ScopedWriteError::Operation`] for a known-outcome failure (scope
    /// writable), [`ScopedWriteError::OutcomeUnknown`] for an unknown outcome or an elapsed
    /// deadline (scope fenced).
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
        if self.claim.slot().fenced {
            // This run fenced its scope already: dispatching would overwrite the fence.
            return Err(ScopedWriteError::Fenced {
                binding: self.binding().clone(),
                scope: ScopeIdentity::clone(self.scope()),
                key: self.claim.key().clone(),
            });
        }
        let ctx = self.clone();
        let reason = reason.to_owned();
        let settled = self
            .writes()
            .spawn_settled(async move {
                ctx.hold_claim::<E>(&reason, true).await?;
                let deadline = ctx.writes().inner.config.dispatch_deadline;
                let timer = ctx.writes().inner.clock.sleep(deadline);
                let commit = std::pin::pin!(AssertUnwindSafe(commit).catch_unwind());
                match futures::future::select(commit, timer).await {
                    futures::future::Either::Left((result, _)) => {
                        ctx.settle_commit(&reason, "commit panicked", result).await
                    }
                    futures::future::Either::Right(((), _)) => {
                        ctx.deadline_elapsed(&reason, deadline).await
                    }
                }
            })
            .await;
        settled
            .unwrap_or_else(|panic| self.settling_panicked(&format!("{}: ", self.scope()), &panic))
    }

    /// Runs a mutation already dispatched to the host (or a remote) in its own task holding
    /// the scope lock; when it fails with an unknown outcome (or panics) the scope is fenced
    /// with `reason` and the failure. Dropping the caller's future does not abandon it.
    ///
    /// Before `commit` runs, the run proves it still holds its claim: the claim is rewritten
    /// by compare-and-set as a write-ahead intent naming `reason` with a fresh expiry (so it
    /// never lapses under a run that keeps writing, and a process that dies mid-write leaves
    /// a record that fails closed). A run passing through a fence (no claim) skips this.
    ///
    /// # Errors
    /// [`ScopedWriteError::ClaimLost`] when the claim was replaced or lapsed (not run),
    /// [`ScopedWriteError::IntentNotPersisted`] (not run, scope fenced),
    /// [`ScopedWriteError::FenceStateUnavailable`] (not run: the store's clock could not be
    /// read), [`ScopedWriteError::Operation`] for a known-outcome failure,
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
            .writes()
            .spawn_settled(async move {
                ctx.hold_claim::<E>(&reason, false).await?;
                let result = AssertUnwindSafe(commit).catch_unwind().await;
                ctx.settle_commit(&reason, "panicked", result).await
            })
            .await;
        settled.unwrap_or_else(|panic| self.settling_panicked("", &panic))
    }

    /// Proves the run still holds its claim and renews it: the claim is swapped (by
    /// compare-and-set on the value the run holds) for a write-ahead intent labelled
    /// `reason`, stamped and expiring on the store's clock (now + dispatch deadline + margin).
    /// A run without a claim (passing through a fence) writes the intent over the record when
    /// `pass_through_sets` (a dispatch: the intent replaces the fence), else does nothing.
    ///
    /// # Errors
    /// [`ScopedWriteError::ClaimLost`] when the swap finds another record (the claim was
    /// cleared, or lapsed and was taken over), now or earlier in the run;
    /// [`ScopedWriteError::IntentNotPersisted`] when storage failed (the scope is fenced in
    /// process: the intent may have been stored); [`ScopedWriteError::FenceStateUnavailable`]
    /// when the store's clock could not be read (nothing written).
    async fn hold_claim<E>(
        &self,
        reason: &str,
        pass_through_sets: bool,
    ) -> Result<(), ScopedWriteError<E>> {
        let (previous, lost) = {
            let slot = self.claim.slot();
            (slot.claim.clone(), slot.lost)
        };
        if lost {
            return Err(self.claim_lost());
        }
        if previous.is_none() && !pass_through_sets {
            return Ok(());
        }
        let now = self.writes().run_now(self.binding()).await?;
        let config = &self.writes().inner.config;
        let intent = FenceMarker::intent(
            self.scope(),
            reason,
            config.owner.clone(),
            now,
            now.saturating_add(config.claim_ttl_ms()),
        )
        .to_value();
        let storage = &self.writes().inner.storage;
        let key = self.claim.key().as_str();
        let stored = match &previous {
            Some(previous) => {
                storage
                    .compare_and_set(self.binding(), key, Some(previous), &intent)
                    .await
            }
            // Passing through a fence (AllowFenced): the intent replaces it.
            None => storage
                .set(self.binding(), key, &intent)
                .await
                .map(|()| true),
        };
        match stored {
            Ok(true) => {
                let mut slot = self.claim.slot();
                slot.claim = Some(Arc::new(intent));
                slot.refreshed = true;
                Ok(())
            }
            Ok(false) => {
                {
                    let mut slot = self.claim.slot();
                    slot.claim = None;
                    slot.lost = true;
                }
                tracing::warn!(binding = %self.binding(), scope = %self.scope(), reason,
                    "scope claim replaced or lapsed while held; mutation not run");
                Err(self.claim_lost())
            }
            Err(error) => {
                tracing::warn!(binding = %self.binding(), scope = %self.scope(), %error,
                    "write-ahead intent not persisted; mutation not run, scope fenced");
                let failure = FailureRecord {
                    kind: "intent_not_persisted".to_owned(),
                    detail: error.to_string(),
                };
                self.mark_fenced(reason, failure);
                Err(ScopedWriteError::IntentNotPersisted(error))
            }
        }
    }

    fn claim_lost<E>(&self) -> ScopedWriteError<E> {
        ScopedWriteError::ClaimLost {
            binding: self.binding().clone(),
            scope: ScopeIdentity::clone(self.scope()),
        }
    }

    /// A dispatch that did not settle within `deadline`: its outcome is unknown, the scope is
    /// fenced.
    async fn deadline_elapsed<T, E>(
        &self,
        reason: &str,
        deadline: std::time::Duration,
    ) -> Result<T, ScopedWriteError<E>> {
        let detail = format!(
            "no outcome within the dispatch deadline of {} ms",
            deadline.as_millis()
        );
        tracing::warn!(binding = %self.binding(), scope = %self.scope(), reason,
            "dispatch deadline elapsed; outcome unknown, scope fenced");
        let failure = FailureRecord {
            kind: "deadline_elapsed".to_owned(),
            detail: detail.clone(),
        };
        self.fence_now(reason, failure).await;
        Err(ScopedWriteError::OutcomeUnknown {
            scope: ScopeIdentity::clone(self.scope()),
            reason: format!("{reason}: {detail}"),
            error: None,
        })
    }

    /// What a dispatched commit's `result` leaves behind (shared by [`Self::dispatch`] and
    /// [`Self::mutate`]): its value; a known-outcome failure as it is
    /// ([`IntentAction::after`] clears); an unknown outcome or a panic fences the scope with
    /// `reason` and the failure. `panicked` labels a panic in the error's reason.
    async fn settle_commit<T, E>(
        &self,
        reason: &str,
        panicked: &str,
        result: std::thread::Result<Result<T, E>>,
    ) -> Result<T, ScopedWriteError<E>>
    where
        E: DispatchFailure + std::fmt::Display,
    {
        let error = match result {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error)) => error,
            Err(panic) => {
                let message = panic_message(&panic);
                let failure = FailureRecord {
                    kind: "panicked".to_owned(),
                    detail: message.clone(),
                };
                self.fence_now(reason, failure).await;
                return Err(ScopedWriteError::OutcomeUnknown {
                    scope: ScopeIdentity::clone(self.scope()),
                    reason: format!("{reason}: {panicked}: {message}"),
                    error: None,
                });
            }
        };
        if IntentAction::after(error.dispatch_outcome()) == IntentAction::Clear {
            return Err(ScopedWriteError::Operation(error));
        }
        tracing::warn!(binding = %self.binding(), scope = %self.scope(), %error,
            "dispatched mutation has an unknown outcome; scope fenced");
        let failure = FailureRecord {
            kind: "outcome_unknown".to_owned(),
            detail: error.to_string(),
        };
        self.fence_now(reason, failure).await;
        Err(ScopedWriteError::OutcomeUnknown {
            scope: ScopeIdentity::clone(self.scope()),
            reason: format!("{reason}: {error}"),
            error: Some(error),
        })
    }

    /// The error when the task settling a commit panicked itself; `prefix` starts its reason.
    fn settling_panicked<T, E>(
        &self,
        prefix: &str,
        panic: &dyn std::fmt::Display,
    ) -> Result<T, ScopedWriteError<E>> {
        Err(ScopedWriteError::OutcomeUnknown {
            scope: ScopeIdentity::clone(self.scope()),
            reason: format!("{prefix}settling panicked: {panic}"),
            error: None,
        })
    }

    /// Writes `value` under `key` of this run's binding (JSON null writes a tombstone), after
    /// proving the run still holds its claim (as [`Self::mutate`] does). A failed write
    /// fences the scope (the value may or may not be stored) and returns the failure; a key
    /// refused by [`validate_key`] fails without fencing (nothing was sent).
    ///
    /// # Errors
    /// [`ScopedWriteError::ClaimLost`] when the run no longer holds its claim (nothing
    /// written), [`ScopedWriteError::FenceStateUnavailable`] when the store's clock could not
    /// be read (nothing written), [`ScopedWriteError::HostWrite`] with the storage failure.
    pub async fn write<E>(&self, key: &str, value: Value) -> Result<(), ScopedWriteError<E>> {
        validate_key(key).map_err(ScopedWriteError::HostWrite)?;
        let storage = self.writes().inner.storage.clone();
        let (binding, key) = (self.binding().clone(), key.to_owned());
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
            ScopedWriteError::ClaimLost { binding, scope } => {
                ScopedWriteError::ClaimLost { binding, scope }
            }
            ScopedWriteError::FenceStateUnavailable { binding, source } => {
                ScopedWriteError::FenceStateUnavailable { binding, source }
            }
            other => {
                ScopedWriteError::HostWrite(HostStorageError::unavailable("set", other.to_string()))
            }
        })
    }

    /// Fences this scope on request (an operator hold): the in-process marker is set at once,
    /// then persisted in a task that holds the scope lock (a persist failure is logged; the
    /// in-process fence holds and is persisted again before the next write).
    pub async fn fence(&self, reason: &str) {
        let failure = FailureRecord {
            kind: "operator".to_owned(),
            detail: reason.to_owned(),
        };
        self.fence_with(reason, failure).await;
    }

    pub(super) async fn fence_with(&self, reason: &str, failure: FailureRecord) {
        let ctx = self.clone();
        let reason = reason.to_owned();
        // Set before anything can be cancelled.
        ctx.mark_fenced(&reason, failure.clone());
        let _ = self
            .writes()
            .spawn_settled(async move { ctx.fence_now(&reason, failure).await })
            .await;
    }

    /// Clears this scope's fence: the in-process marker at once, then a JSON null tombstone
    /// (a failure is logged; the stored record then still fences). For operator actions in an
    /// `AllowFenced` run; the run holds no claim afterwards.
    pub async fn clear_fence(&self) {
        let ctx = self.clone();
        ctx.unmark();
        let _ = self
            .writes()
            .spawn_settled(async move { ctx.clear_now().await })
            .await;
    }

    /// Marks the scope fenced in process (not yet persisted) and ends the run's claim.
    fn mark_fenced(&self, reason: &str, failure: FailureRecord) -> Value {
        // A request sent under the run's intent may still land until the intent's expiry (its
        // dispatch deadline plus the claim margin): the fence keeps that bound, and a clear is
        // refused before it (docs/protocol.md, "A fence is not cleared while its request may
        // still land").
        let lands_until = self
            .claim
            .slot()
            .claim
            .as_deref()
            .and_then(FenceMarker::from_value)
            .filter(|intent| intent.kind == RecordKind::Intent && intent.dispatched)
            .and_then(|intent| intent.expires_at_ms);
        let mut marker =
            FenceMarker::fence(self.scope(), reason, failure, self.writes().stamp_ms());
        marker.expires_at_ms = lands_until;
        let record = marker.to_value();
        self.writes().inner.shared.state().fences.mark(
            self.binding(),
            self.claim.key().clone(),
            record.clone(),
            false,
        );
        let mut slot = self.claim.slot();
        slot.fenced = true;
        slot.claim = None;
        record
    }

    fn unmark(&self) {
        self.writes()
            .inner
            .shared
            .state()
            .fences
            .clear(self.binding(), self.claim.key());
    }

    /// Writes the fence record (unconditionally: it replaces the run's intent) and marks it.
    async fn fence_now(&self, reason: &str, failure: FailureRecord) {
        let record = self.mark_fenced(reason, failure);
        let key = self.claim.key().clone();
        match self
            .writes()
            .inner
            .storage
            .set(self.binding(), key.as_str(), &record)
            .await
        {
            Ok(()) => {
                self.writes()
                    .inner
                    .shared
                    .state()
                    .fences
                    .mark(self.binding(), key, record, true);
                tracing::warn!(binding = %self.binding(), scope = %self.scope(), reason, "scope fenced");
            }
            Err(error) => {
                tracing::error!(binding = %self.binding(), scope = %self.scope(), reason, %error,
                "scope fenced in process, but the fence could not be persisted");
            }
        }
    }

    async fn clear_now(&self) {
        self.unmark();
        {
            let mut slot = self.claim.slot();
            slot.claim = None;
            slot.fenced = false;
        }
        let key = self.claim.key().clone();
        if let Err(error) = self
            .writes()
            .inner
            .storage
            .set(self.binding(), key.as_str(), &Value::Null)
            .await
        {
            tracing::warn!(binding = %self.binding(), scope = %self.scope(), %error,
                "fence cleared in process, but its tombstone could not be written");
        }
    }
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".to_owned())
}
