//! What a dispatcher knows locally about the leases of its dispatches in flight.
//!
//! A lease's expiry is decided by the store's clock, which this process cannot read without a
//! round trip. The dispatcher therefore keeps a *local deadline* per dispatch on the monotonic
//! clock, counted from before the statement that took or renewed the lease: the store's expiry
//! can only be later. Before every remote call the dispatcher checks that the local deadline has
//! not passed and that no renewal was refused; otherwise it does not send (a paused or slow
//! worker never sends on a lease another worker may already hold).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tenantry_kernel::CommandId;
use tokio::time::Instant;

/// The local view of one lease.
#[derive(Debug)]
pub(super) struct LeaseState {
    inner: Mutex<Local>,
}

#[derive(Debug, Clone, Copy)]
struct Local {
    deadline: Instant,
    lost: bool,
}

impl LeaseState {
    fn lock(&self) -> MutexGuard<'_, Local> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A renewal that started at `deadline - lease` succeeded: the lease is held until at
    /// least `deadline`.
    pub(super) fn extend(&self, deadline: Instant) {
        let mut local = self.lock();
        local.deadline = local.deadline.max(deadline);
    }

    /// A renewal was refused: the lease is gone for good.
    pub(super) fn lose(&self) {
        self.lock().lost = true;
    }

    fn is_live(&self) -> bool {
        let local = *self.lock();
        !local.lost && Instant::now() < local.deadline
    }
}

/// The leases of the dispatches in flight, by command.
#[derive(Debug, Default)]
pub(super) struct LeaseBook {
    leases: Mutex<HashMap<CommandId, Arc<LeaseState>>>,
}

impl LeaseBook {
    fn lock(&self) -> MutexGuard<'_, HashMap<CommandId, Arc<LeaseState>>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new lease of `command` held until at least `deadline`.
    pub(super) fn open(&self, command: &CommandId, deadline: Instant) -> Arc<LeaseState> {
        let state = Arc::new(LeaseState {
            inner: Mutex::new(Local {
                deadline,
                lost: false,
            }),
        });
        self.lock().insert(command.clone(), Arc::clone(&state));
        state
    }

    /// Forgets the lease of `command` (its dispatch ended).
    pub(super) fn close(&self, command: &CommandId) {
        self.lock().remove(command);
    }

    /// Whether the dispatch of `command` may still start a remote call.
    pub(super) fn is_live(&self, command: &CommandId) -> bool {
        self.lock()
            .get(command)
            .is_some_and(|state| state.is_live())
    }
}
