//! Admission of a run: reading the scope's and the installation's records until the scope is
//! free, fenced or busy for too long, taking the scope's claim by compare-and-set (or swapping
//! it from this runtime's tombstone without a read), and reconciling the fences this process
//! caches with what the store holds.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;
use tenantry_fence::{
    Binding, FenceKey, FenceMarker, Holder, Reconciled, RecordKind, ScopeIdentity,
};
use tenantry_ports::host_storage::{HostStorage, HostStorageError};

use super::error::ScopedWriteError;
use super::{ClaimCache, FenceMode, ScopedWrites};

impl<S: HostStorage + ?Sized + 'static> ScopedWrites<S> {
    /// Reads the records bearing on `(binding, scope)` until the scope is free, fenced or
    /// busy for too long; takes the claim when the run may proceed. Returns the claim as
    /// stored, or `None` when an `AllowFenced` run passes through a fence without claiming.
    ///
    /// Fast path (docs/protocol.md, "Claiming a released scope without reading it"): when
    /// this runtime's last run of the scope released its claim (`cache.released`) and this
    /// process cached no fence for it when the scope lock was taken (`cached_fence`), the
    /// installation record is read and the claim is taken by one compare-and-set expecting the
    /// tombstone, without reading the scope's record first; only if that swap fails (the
    /// record is absent, held, fenced or damaged) is the record read and classified.
    pub(super) async fn admit<E>(
        &self,
        binding: &Binding,
        scope: &ScopeIdentity,
        own_key: &FenceKey,
        cache: &ClaimCache,
        mode: FenceMode,
        cached_fence: bool,
    ) -> Result<Option<Arc<Value>>, ScopedWriteError<E>> {
        let config = &self.inner.config;
        let mut installation_read = false;
        // A load and a store, not a swap: the hint is per scope identity and only a hint.
        let released = cache.released.load(Ordering::Relaxed);
        if released {
            cache.released.store(false, Ordering::Relaxed);
        }
        if released && !cached_fence {
            let now = self.run_now(binding).await?;
            if !matches!(scope, ScopeIdentity::Installation) {
                self.check_installation(binding, scope, mode, now).await?;
                installation_read = true;
            }
            let claim = cache.at(now, now.saturating_add(config.claim_ttl_ms()));
            let (taken, claim) = self
                .take_claim(binding, own_key, Some(&self.inner.tombstone), claim)
                .await;
            if self.claim_taken(binding, scope, taken)? {
                return Ok(Some(claim));
            }
            // Not the tombstone: read the record and decide as below (the installation
            // record was just read and did not fence).
        }
        let waited_until = self.inner.clock.monotonic() + config.claim_wait;
        let mut pause = config.claim_poll;
        loop {
            let own = self.read_record(binding, own_key).await?;
            let (own, _) = self.reconcile(binding, own_key, own).await;
            let now = self.run_now(binding).await?;
            if !matches!(scope, ScopeIdentity::Installation) && !installation_read {
                self.check_installation(binding, scope, mode, now).await?;
            }
            installation_read = false;
            let holder = tenantry_fence::classify(stored_ref(own.as_ref()), &config.owner, now);
            let in_process = self.inner.shared.state().fences.contains(binding, own_key);
            match holder {
                Holder::Claimed {
                    owner,
                    expires_at_ms,
                } => {
                    if self.inner.clock.monotonic() >= waited_until {
                        return Err(ScopedWriteError::ScopeBusy {
                            binding: binding.clone(),
                            scope: scope.clone(),
                            owner,
                            expires_at_ms,
                        });
                    }
                    tracing::debug!(%binding, %scope, %owner, "scope held by another process; waiting");
                    self.inner.clock.sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    continue;
                }
                Holder::Fenced => {
                    if mode == FenceMode::Enforce {
                        return Err(ScopedWriteError::Fenced {
                            binding: binding.clone(),
                            scope: scope.clone(),
                            key: own_key.clone(),
                        });
                    }
                    return Ok(None);
                }
                Holder::Free | Holder::Own | Holder::Lapsed { .. } if in_process => {
                    if mode == FenceMode::Enforce {
                        return Err(ScopedWriteError::Fenced {
                            binding: binding.clone(),
                            scope: scope.clone(),
                            key: own_key.clone(),
                        });
                    }
                    return Ok(None);
                }
                Holder::Free | Holder::Own | Holder::Lapsed { .. } => {
                    if let Holder::Lapsed { owner } = &holder {
                        tracing::info!(%binding, %scope, %owner,
                            "taking over an expired claim under which nothing was sent");
                    }
                    let expected = match own {
                        None => None,
                        Some(Ok(value)) => Some(value),
                        // Classified as fenced above.
                        Some(Err(())) => return Ok(None),
                    };
                    let claim = cache.at(now, now.saturating_add(config.claim_ttl_ms()));
                    let (taken, claim) = self
                        .take_claim(binding, own_key, expected.as_ref(), claim)
                        .await;
                    if self.claim_taken(binding, scope, taken)? {
                        return Ok(Some(claim));
                    }
                    // Another process changed the record since we read it: read again.
                }
            }
        }
    }

    /// Reads (and reconciles) the installation record of `binding`; an `Enforce` run of
    /// `scope` fails with [`ScopedWriteError::Fenced`] when it (or this process's cache)
    /// fences the binding at `now` (Unix milliseconds).
    async fn check_installation<E>(
        &self,
        binding: &Binding,
        scope: &ScopeIdentity,
        mode: FenceMode,
        now: i64,
    ) -> Result<(), ScopedWriteError<E>> {
        let installation = FenceKey::installation();
        let inst = self.read_record(binding, &installation).await?;
        let (inst, cached) = self.reconcile(binding, &installation, inst).await;
        if mode == FenceMode::Enforce
            && (cached
                || tenantry_fence::classify(
                    stored_ref(inst.as_ref()),
                    &self.inner.config.owner,
                    now,
                ) == Holder::Fenced)
        {
            return Err(ScopedWriteError::Fenced {
                binding: binding.clone(),
                scope: scope.clone(),
                key: installation,
            });
        }
        Ok(())
    }

    /// Whether the claim's compare-and-set swapped; a failed one fails the run closed with
    /// [`ScopedWriteError::FenceStateUnavailable`].
    fn claim_taken<E>(
        &self,
        binding: &Binding,
        scope: &ScopeIdentity,
        taken: Result<bool, HostStorageError>,
    ) -> Result<bool, ScopedWriteError<E>> {
        taken.map_err(|source| {
            tracing::warn!(%binding, %scope, error = %source, "scope claim not taken; failing closed");
            ScopedWriteError::FenceStateUnavailable {
                binding: binding.clone(),
                source,
            }
        })
    }

    /// Takes the claim by compare-and-set; returns whether it was taken, and the claim.
    ///
    /// A compare-and-set that completes at its first poll (an in-memory store) is simply
    /// answered: nothing can cancel it half-way. One that must wait (a database statement in
    /// flight) is moved to its own task, so if the caller is dropped meanwhile and the claim
    /// was taken, the task releases it again (otherwise it would lapse into a fence for other
    /// processes). The fast path thus spawns nothing and crosses no thread.
    async fn take_claim(
        &self,
        binding: &Binding,
        key: &FenceKey,
        expected: Option<&Arc<Value>>,
        claim: Arc<Value>,
    ) -> (Result<bool, HostStorageError>, Arc<Value>) {
        if let Some(taken) =
            self.store()
                .compare_and_set_now(binding, key.as_str(), expected, &claim)
        {
            return (taken, claim);
        }
        let expected = expected.cloned();
        let storage = self.inner.storage.clone();
        let (binding, key) = (binding.clone(), key.clone());
        let mut attempt = Box::pin(async move {
            let taken = S::compare_and_set(
                &storage,
                &binding,
                key.as_str(),
                expected.as_deref(),
                &claim,
            )
            .await;
            (taken, storage, binding, key, claim)
        });
        if let std::task::Poll::Ready((taken, _, _, _, claim)) = futures::poll!(attempt.as_mut()) {
            return (taken, claim);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let token = self.inner.in_flight.enter();
        tokio::spawn(async move {
            let (taken, storage, binding, key, claim) = attempt.await;
            if let Err((Ok(true), claim)) = tx.send((taken, claim)) {
                // The run was dropped meanwhile: nobody will release the claim but us.
                let _ = S::compare_and_set(
                    &storage,
                    &binding,
                    key.as_str(),
                    Some(&claim),
                    &Value::Null,
                )
                .await;
            }
            drop(token);
        });
        rx.await.unwrap_or_else(|_| {
            (
                Err(HostStorageError::unavailable(
                    "compare_and_set",
                    "claim task ended without an answer",
                )),
                claim_lost(),
            )
        })
    }

    /// The stored record at `key`: `None` absent, `Some(Err(()))` undecodable. Read at once
    /// when the store can answer without waiting ([`HostStorage::get_now`]).
    async fn read_record<E>(
        &self,
        binding: &Binding,
        key: &FenceKey,
    ) -> Result<Option<Result<Arc<Value>, ()>>, ScopedWriteError<E>> {
        let read = match self.store().get_now(binding, key.as_str()) {
            Some(read) => read,
            None => S::get(self.store(), binding, key.as_str())
                .await
                .map(|value| value.map(Arc::new)),
        };
        match read {
            Ok(value) => Ok(value.map(Ok)),
            Err(HostStorageError::CorruptValue { .. }) => {
                tracing::warn!(%binding, %key, "undecodable fence record counts as a fence");
                Ok(Some(Err(())))
            }
            Err(source) => {
                tracing::warn!(%binding, %key, error = %source, "could not read fence record; failing closed");
                Err(ScopedWriteError::FenceStateUnavailable {
                    binding: binding.clone(),
                    source,
                })
            }
        }
    }

    /// Brings this process's cached fence of `key` in line with the stored record: dropped
    /// when cleared elsewhere, persisted again when it never reached storage. Returns the
    /// record as it now stands and whether this process still caches a fence of `key` (read
    /// under the same lock as the reconciliation, so a run locks the fence cache once per
    /// record).
    async fn reconcile(
        &self,
        binding: &Binding,
        key: &FenceKey,
        stored: Option<Result<Arc<Value>, ()>>,
    ) -> (Option<Result<Arc<Value>, ()>>, bool) {
        let stored_fence = match &stored {
            None => false,
            Some(Ok(value)) if value.is_null() => false,
            Some(Ok(value)) => {
                FenceMarker::from_value(value).is_none_or(|m| m.kind == RecordKind::Fence)
            }
            Some(Err(())) => true,
        };
        let action = self
            .inner
            .shared
            .state()
            .fences
            .reconcile(binding, key, stored_fence);
        match action {
            Reconciled::PersistAgain(record) => {
                let expected = stored.as_ref().and_then(|r| r.as_ref().ok()).cloned();
                let stored = match S::compare_and_set(
                    self.store(),
                    binding,
                    key.as_str(),
                    expected.as_deref(),
                    &record,
                )
                .await
                {
                    Ok(true) => {
                        tracing::warn!(%binding, %key, "in-process fence persisted again");
                        self.inner
                            .shared
                            .state()
                            .fences
                            .reconcile(binding, key, true);
                        Some(Ok(Arc::new(record)))
                    }
                    Ok(false) | Err(_) => stored,
                };
                // Rare: the cache was unlocked meanwhile, so ask it again.
                let cached = self.inner.shared.state().fences.contains(binding, key);
                (stored, cached)
            }
            Reconciled::ClearedElsewhere => {
                tracing::info!(%binding, %key, "fence cleared by another process");
                (stored, false)
            }
            Reconciled::NotCached => (stored, false),
            Reconciled::Persisted => (stored, true),
        }
    }
}

/// A stored record as read, as the pure rules take it.
fn stored_ref(stored: Option<&Result<Arc<Value>, ()>>) -> tenantry_fence::record::StoredRecord<'_> {
    stored.map(|read| read.as_ref().map(|value| &**value).map_err(|_| ()))
}

/// The claim handed back when the claim's task ended without an answer (nothing to release).
fn claim_lost() -> Arc<Value> {
    Arc::new(Value::Null)
}
