//! Per-scope async locks in a map that does not grow without bound.
//!
//! A lock entry exists only while some caller holds or waits for the scope: every holder and
//! waiter carries a [`LockLease`], and the last lease to go removes the entry (checked under
//! the state mutex, so no new caller can clone the lock meanwhile). A periodic sweep removes
//! any entry nobody references, in case a lease was dropped while another clone was alive.
//! The entry also names the run holding the lock (its owner token), so an uncontended run
//! hashes its key twice: once to take the lock, once to let it go.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tenantry_fence::{Binding, FenceCache, FenceKey};
use tokio::sync::OwnedMutexGuard;

use super::FastMap;

/// `(installation binding, fence key of the scope)`: the unit of serialization and fencing.
/// The fence key is the scope identity's SHA-256 (or the installation key), so locking on it
/// is locking on the scope, and an operator clearing a fence by key takes the same lock.
pub(crate) type ScopeKey = (Binding, FenceKey);

/// Map size below which no sweep runs.
const MIN_SWEEP_AT: usize = 64;

/// Process-local state shared by a runtime, its scope guards and its spawned commits.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) locks: FastMap<ScopeKey, LockEntry>,
    pub(crate) next_token: u64,
    pub(crate) fences: FenceCache,
    sweep_at: usize,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                locks: FastMap::default(),
                next_token: 1,
                fences: FenceCache::new(),
                sweep_at: MIN_SWEEP_AT,
            }),
        }
    }

    /// The state; a panic while holding the mutex leaves plain maps that are still usable, so
    /// poisoning is ignored.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One scope's lock and the token of the run holding it.
#[derive(Debug, Default)]
pub(crate) struct LockEntry {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Token of the run holding the lock; 0 when none does (tokens start at 1).
    owner: u64,
}

impl State {
    /// The token of the run holding the lock of `key`, if one does.
    pub(crate) fn owner(&self, key: &ScopeKey) -> Option<u64> {
        self.locks
            .get(key)
            .map(|entry| entry.owner)
            .filter(|&owner| owner != 0)
    }

    /// How many scopes have an owner (a run holding their lock).
    pub(crate) fn owner_count(&self) -> usize {
        self.locks.values().filter(|entry| entry.owner != 0).count()
    }
}

/// A caller's claim on one lock entry, held while waiting for and while holding the lock.
#[derive(Debug)]
pub(crate) struct LockLease {
    shared: Arc<Shared>,
    key: ScopeKey,
    lock: Option<Arc<tokio::sync::Mutex<()>>>,
    token: Option<u64>,
}

impl Drop for LockLease {
    fn drop(&mut self) {
        let Some(lock) = self.lock.take() else {
            return;
        };
        let mut state = self.shared.state();
        // One lookup: the entry is ours only if it still holds our lock (a revoked binding's
        // entry may have been replaced by a fresh one).
        if let std::collections::hash_map::Entry::Occupied(mut entry) =
            state.locks.entry(self.key.clone())
            && Arc::ptr_eq(&entry.get().lock, &lock)
        {
            if self.token.is_some_and(|token| entry.get().owner == token) {
                entry.get_mut().owner = 0;
            }
            // The map's reference and ours: nobody else holds or awaits the lock.
            if Arc::strong_count(&lock) == 2 {
                entry.remove();
            }
        }
    }
}

/// The held lock of one scope. Shared (`Arc`) between the run that took it, re-entrant runs
/// of the same task, and the commits it spawned: the lock is released when the last of them
/// lets go, so a dispatched commit always settles before the scope is released.
#[derive(Debug)]
pub(crate) struct ScopeGuard {
    // Field order matters: the mutex guard is released before the lease checks the entry.
    _held: OwnedMutexGuard<()>,
    lease: LockLease,
}

impl ScopeGuard {
    pub(crate) fn token(&self) -> Option<u64> {
        self.lease.token
    }
}

/// Waits for the lock of `key` and records the caller as its owner. Dropping the returned
/// future while it waits leaves no entry behind.
pub(crate) async fn acquire(shared: &Arc<Shared>, key: &ScopeKey) -> ScopeGuard {
    let mut lease = {
        let mut state = shared.state();
        if state.locks.len() >= state.sweep_at {
            state
                .locks
                .retain(|_, entry| Arc::strong_count(&entry.lock) > 1);
            state.sweep_at = (state.locks.len() * 2).max(MIN_SWEEP_AT);
        }
        let token = state.next_token;
        let entry = state.locks.entry(key.clone()).or_default();
        let lock = entry.lock.clone();
        // Uncontended (the common case): taken at once, owner recorded in the same lookup.
        if let Ok(held) = lock.clone().try_lock_owned() {
            entry.owner = token;
            state.next_token += 1;
            drop(state);
            return ScopeGuard {
                _held: held,
                lease: LockLease {
                    shared: shared.clone(),
                    key: key.clone(),
                    lock: Some(lock),
                    token: Some(token),
                },
            };
        }
        LockLease {
            shared: shared.clone(),
            key: key.clone(),
            lock: Some(lock),
            token: None,
        }
    };
    // Dropped field by field in declaration order: the waiting future (and its clone of the
    // lock) goes before the lease checks whether it was the last reference.
    struct Waiting<F> {
        fut: std::pin::Pin<Box<F>>,
        lease: LockLease,
    }
    let Some(lock) = lease.lock.clone() else {
        // The lease was built with a lock just above.
        unreachable!("lease without lock")
    };
    // Our lease keeps the lock alive: the pointer identifies our entry after the wait.
    let ours = Arc::as_ptr(&lock) as usize;
    let mut waiting = Waiting {
        fut: Box::pin(lock.lock_owned()),
        lease,
    };
    let held = (&mut waiting.fut).await;
    let Waiting {
        fut,
        lease: mut_lease,
    } = waiting;
    drop(fut);
    lease = mut_lease;
    let mut state = shared.state();
    let token = state.next_token;
    state.next_token += 1;
    // Our entry is in the map while our lease holds it (unless the binding was revoked
    // meanwhile: then no owner is recorded and nested runs take a fresh lock).
    if let Some(entry) = state.locks.get_mut(key)
        && Arc::as_ptr(&entry.lock) as usize == ours
    {
        entry.owner = token;
    }
    lease.token = Some(token);
    drop(state);
    ScopeGuard { _held: held, lease }
}

/// Forgets the locks and owners of `binding` (installation revoked). Holders keep their
/// guards; later callers get fresh locks.
pub(crate) fn release_binding(state: &mut State, binding: &Binding) {
    state.locks.retain(|(b, _), _| b != binding);
    state.fences.release(binding);
}
