//! A run's claim on its scope ([`RunClaim`]), the task-local record of the scopes a task
//! holds, and the count of spawned work that has not settled ([`InFlight`]).

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;
use tenantry_fence::{Binding, FenceKey, ScopeIdentity};
use tenantry_ports::host_storage::HostStorage;
use tokio::sync::Notify;

use super::locks::{ScopeGuard, ScopeKey};
use super::{ClaimCache, ScopeKeys, ScopedWrites};

tokio::task_local! {
    /// The scopes whose locks the current task holds through an enclosing run.
    pub(super) static HELD: HeldScopes;
}

/// The scopes a task holds, innermost last. A run that is not nested (the common case) holds
/// one and allocates no list.
pub(super) enum HeldScopes {
    /// One run, not nested in another.
    One(Held),
    /// Nested runs, outermost first.
    Nested(Vec<Held>),
}

impl HeldScopes {
    /// The scopes of the enclosing runs of the current task (none outside a run) plus `held`.
    pub(super) fn enter(held: Held) -> Self {
        match HELD.try_with(|outer| outer.as_slice().to_vec()) {
            Ok(mut outer) => {
                outer.push(held);
                Self::Nested(outer)
            }
            Err(_) => Self::One(held),
        }
    }

    /// The held scopes, outermost first.
    pub(super) fn as_slice(&self) -> &[Held] {
        match self {
            Self::One(held) => std::slice::from_ref(held),
            Self::Nested(held) => held,
        }
    }
}

#[derive(Clone)]
pub(super) struct Held {
    pub(super) runtime: usize,
    /// The lock owner token of the run (its guard lives in the claim).
    pub(super) token: Option<u64>,
    /// The run's `Arc<RunClaim<S>>`, type-erased (the task-local cannot be generic); it
    /// carries the scope's key.
    pub(super) claim: Arc<dyn HeldClaim>,
}

/// A [`RunClaim`] of any store type, as the task-local holds it.
pub(super) trait HeldClaim: Any + Send + Sync {
    /// The binding and fence key the run holds.
    fn scope_key(&self) -> &ScopeKey;

    /// The claim as `Any`, to downcast to the caller's `RunClaim<S>`.
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

impl<S: HostStorage + ?Sized + 'static> HeldClaim for RunClaim<S> {
    fn scope_key(&self) -> &ScopeKey {
        &self.scope_key
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// A run's claim on its scope, shared by the run, its nested runs and the commits it spawned.
/// When the last holder lets go without having released it, the release is spawned (holding
/// the scope lock until it landed).
pub(super) struct RunClaim<S: HostStorage + ?Sized + 'static> {
    pub(super) writes: ScopedWrites<S>,
    /// The binding and fence key of the scope (the scope lock's key).
    pub(super) scope_key: ScopeKey,
    /// The scope's identity and cached claim, shared with the runtime's key cache (a run
    /// clones no identity text). The cached claim is told when the release lands (the record
    /// is the tombstone this runtime wrote, so the next run may claim without reading it
    /// first), and given the released value to stamp again.
    pub(super) keys: Arc<ScopeKeys>,
    /// The scope lock, held as long as the claim lives (and, when the claim is dropped
    /// unreleased, until the spawned release landed). Always `Some` until `drop`.
    pub(super) guard: Option<ScopeGuard>,
    pub(super) slot: Mutex<Slot>,
}

#[derive(Debug, Default)]
pub(super) struct Slot {
    /// Our claim as stored (to release by compare-and-set); `None`: nothing to release.
    pub(super) claim: Option<Arc<Value>>,
    /// Whether this run fenced its scope (the record is the fence now).
    pub(super) fenced: bool,
    /// Whether a dispatch replaced the claim the run was admitted with (by its intent): the
    /// released claim is then not the scope's cached claim and is not kept for the next run.
    pub(super) refreshed: bool,
    /// Whether a renewal of the claim found another record (cleared, or lapsed and taken
    /// over): every later mutation of the run fails with `ClaimLost`.
    pub(super) lost: bool,
}

impl<S: HostStorage + ?Sized + 'static> RunClaim<S> {
    /// The installation binding of the run.
    pub(super) fn binding(&self) -> &Binding {
        &self.scope_key.0
    }

    /// The scope's fence key.
    pub(super) fn key(&self) -> &FenceKey {
        &self.scope_key.1
    }

    /// The scope of the run.
    pub(super) fn scope(&self) -> &ScopeIdentity {
        &self.keys.scope
    }

    fn cache(&self) -> &ClaimCache {
        &self.keys.claim
    }

    pub(super) fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Releases the claim (JSON null by compare-and-set) unless the run fenced the scope.
    /// When the run is the claim's only holder (nothing it dispatched still runs), the slot
    /// is read without locking it.
    pub(super) async fn release(self: &mut Arc<Self>) {
        let (claim, refreshed) = match Arc::get_mut(self) {
            Some(only) => {
                let slot = only.slot.get_mut().unwrap_or_else(PoisonError::into_inner);
                (slot.claim.take(), slot.refreshed)
            }
            None => {
                let mut slot = self.slot();
                (slot.claim.take(), slot.refreshed)
            }
        };
        let Some(claim) = claim else {
            return;
        };
        let tombstone = &self.writes.inner.tombstone;
        let store = self.writes.store();
        let released = match store.compare_and_set_now(
            self.binding(),
            self.key().as_str(),
            Some(&claim),
            tombstone,
        ) {
            Some(released) => released,
            None => {
                let mut release = std::pin::pin!(S::compare_and_set(
                    store,
                    self.binding(),
                    self.key().as_str(),
                    Some(&claim),
                    tombstone,
                ));
                match futures::poll!(release.as_mut()) {
                    std::task::Poll::Ready(released) => released,
                    std::task::Poll::Pending => {
                        // In flight: if this run is dropped now, `Drop` must still release it.
                        self.slot().claim = Some(claim.clone());
                        let released = release.await;
                        self.slot().claim = None;
                        released
                    }
                }
            }
        };
        match released {
            Ok(swapped) => {
                self.cache().released.store(swapped, Ordering::Relaxed);
                if swapped && !refreshed {
                    self.cache().keep(claim);
                }
            }
            Err(error) => {
                self.slot().claim = Some(claim);
                tracing::warn!(binding = %self.binding(), key = %self.key(), %error,
                    "scope claim not released; retried when the run's last holder lets go, else taken over by this process's next run");
            }
        }
    }
}

impl<S: HostStorage + ?Sized + 'static> Drop for RunClaim<S> {
    fn drop(&mut self) {
        let claim = self
            .slot
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .claim
            .take();
        let Some(claim) = claim else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let token = self.writes.inner.in_flight.enter();
        let guard = self.guard.take();
        let storage = self.writes.inner.storage.clone();
        let (binding, key) = (self.binding().clone(), self.key().clone());
        handle.spawn(async move {
            if let Err(error) =
                S::compare_and_set(&storage, &binding, key.as_str(), Some(&claim), &Value::Null)
                    .await
            {
                tracing::warn!(%binding, %key, %error,
                    "scope claim not released; it lapses into a fence for other processes unless this process's next run takes it over");
            }
            drop(guard);
            drop(token);
        });
    }
}

/// Counts spawned work that has not settled.
#[derive(Debug, Default)]
pub(super) struct InFlight {
    count: Arc<AtomicUsize>,
    idle: Arc<Notify>,
}

pub(super) struct InFlightToken {
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
    pub(super) fn enter(&self) -> InFlightToken {
        self.count.fetch_add(1, Ordering::AcqRel);
        InFlightToken {
            count: self.count.clone(),
            idle: self.idle.clone(),
        }
    }

    pub(super) async fn idle(&self) {
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
