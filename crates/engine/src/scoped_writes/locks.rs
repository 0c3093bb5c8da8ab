//! Per-scope async locks in a map that does not grow without bound.
//!
//! A lock entry is a shared cell ([`LockCell`]): the scope's async lock (a fair, first-come
//! first-served semaphore of one permit) and the token of the run holding it. Every holder
//! and waiter carries a [`LockLease`] with its own reference to the cell, so letting go of a
//! lock touches only the cell (the owner cleared by compare-and-set, the permit given back),
//! never the map: an uncontended run hashes its key once, to find the cell. The map is a
//! [`SweptMap`]: the cells of idle scopes stay until it doubles, so it holds at most about
//! twice the scopes in use at once (or 64), and a scope written again soon reuses its cell
//! without an allocation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tenantry_fence::{Binding, FenceCache, FenceKey};

use crate::swept::{SweptMap, is_idle};

/// `(installation binding, fence key of the scope)`: the unit of serialization and fencing.
/// The fence key is the scope identity's SHA-256 (or the installation key), so locking on it
/// is locking on the scope, and an operator clearing a fence by key takes the same lock.
pub(crate) type ScopeKey = (Binding, FenceKey);

/// Process-local state shared by a runtime, its scope guards and its spawned commits.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

#[derive(Debug)]
pub(crate) struct State {
    pub(crate) locks: SweptMap<ScopeKey, LockCell, foldhash::fast::RandomState>,
    pub(crate) next_token: u64,
    pub(crate) fences: FenceCache,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            state: Mutex::new(State {
                locks: SweptMap::default(),
                next_token: 1,
                fences: FenceCache::new(),
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
#[derive(Debug)]
pub(crate) struct LockCell {
    /// One permit: the lock. Waiters are served first come, first served. A holder's permit
    /// is forgotten when taken and added back by its [`ScopeGuard`]'s drop, so holding the
    /// lock costs no reference of its own (the lease already holds the cell).
    lock: tokio::sync::Semaphore,
    /// Token of the run holding the lock; 0 when none does (tokens start at 1). Written by
    /// the run that took the lock (under the state mutex) and by its [`ScopeGuard`] when it
    /// lets go.
    owner: AtomicU64,
}

impl Default for LockCell {
    fn default() -> Self {
        Self {
            lock: tokio::sync::Semaphore::new(1),
            owner: AtomicU64::new(0),
        }
    }
}

impl State {
    /// The token of the run holding the lock of `key`, if one does.
    pub(crate) fn owner(&self, key: &ScopeKey) -> Option<u64> {
        self.locks
            .get(key)
            .map(|cell| cell.owner.load(Ordering::Acquire))
            .filter(|&owner| owner != 0)
    }

    /// How many scopes have an owner (a run holding their lock).
    pub(crate) fn owner_count(&self) -> usize {
        self.locks
            .values()
            .filter(|cell| cell.owner.load(Ordering::Acquire) != 0)
            .count()
    }

    /// How many scopes are held or awaited (an entry some lease references).
    pub(crate) fn entries_in_use(&self) -> usize {
        // A lease (a holder or a waiter) references the cell besides the map.
        self.locks.values().filter(|cell| !is_idle(cell)).count()
    }
}

/// A caller's claim on one lock cell, held while waiting for and while holding the lock.
#[derive(Debug)]
pub(crate) struct LockLease {
    cell: Arc<LockCell>,
    token: Option<u64>,
}

/// The held lock of one scope. Shared (`Arc`) between the run that took it, re-entrant runs
/// of the same task, and the commits it spawned: the lock is released when the last of them
/// lets go, so a dispatched commit always settles before the scope is released.
#[derive(Debug)]
pub(crate) struct ScopeGuard {
    /// The lease of the cell whose permit this guard holds.
    lease: LockLease,
    /// Whether this process cached a fence of the scope when the lock was taken (read under
    /// the state mutex that recorded the owner, so admission need not lock it again).
    cached_fence: bool,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        // The owner is cleared before the permit is given back, so a waiter that takes the
        // lock next never sees the previous run's token cleared after it recorded its own.
        // Only the holder clears it, and only its own token (a cell forgotten by a revoked
        // binding is no longer in the map: clearing it is harmless).
        if let Some(token) = self.lease.token.take() {
            let _ = self.lease.cell.owner.compare_exchange(
                token,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        self.lease.cell.lock.add_permits(1);
    }
}

impl ScopeGuard {
    pub(crate) fn token(&self) -> Option<u64> {
        self.lease.token
    }

    /// Whether this process cached a fence of the scope when the lock was taken.
    pub(crate) fn cached_fence(&self) -> bool {
        self.cached_fence
    }
}

/// Waits for the lock of `key` and records the caller as its owner. Dropping the returned
/// future while it waits leaves nothing behind but an idle entry (removed by the next sweep).
pub(crate) async fn acquire(shared: &Arc<Shared>, key: &ScopeKey) -> ScopeGuard {
    let cell = {
        let mut state = shared.state();
        let cell = state.locks.get_or_insert_with(key, LockCell::default);
        // Uncontended (the common case): taken at once, owner recorded under the same mutex.
        let taken = cell
            .lock
            .try_acquire()
            .map(tokio::sync::SemaphorePermit::forget)
            .is_ok();
        if taken {
            let token = state.next_token;
            state.next_token += 1;
            cell.owner.store(token, Ordering::Release);
            let cached_fence = state.fences.contains(&key.0, &key.1);
            drop(state);
            return ScopeGuard {
                lease: LockLease {
                    cell,
                    token: Some(token),
                },
                cached_fence,
            };
        }
        cell
    };
    // The lease (our reference to the cell) keeps the entry from being swept while we wait.
    let mut lease = LockLease { cell, token: None };
    match lease.cell.lock.acquire().await {
        Ok(permit) => permit.forget(),
        Err(_) => unreachable!("a scope's lock semaphore is never closed"),
    }
    let mut state = shared.state();
    let token = state.next_token;
    state.next_token += 1;
    // Recorded only while the cell is still the scope's entry (a binding revoked meanwhile
    // forgot it: then no owner is recorded and nested runs take a fresh lock).
    if state
        .locks
        .get(key)
        .is_some_and(|entry| Arc::ptr_eq(entry, &lease.cell))
    {
        lease.cell.owner.store(token, Ordering::Release);
        lease.token = Some(token);
    }
    let cached_fence = state.fences.contains(&key.0, &key.1);
    drop(state);
    ScopeGuard {
        lease,
        cached_fence,
    }
}

/// Forgets the locks and owners of `binding` (installation revoked). Holders keep their
/// guards; later callers get fresh locks.
pub(crate) fn release_binding(state: &mut State, binding: &Binding) {
    state.locks.retain(|(b, _), _| b != binding);
    state.fences.release(binding);
}
