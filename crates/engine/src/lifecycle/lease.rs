//! What a dispatcher knows locally about the leases of its dispatches in flight.
//!
//! A lease's expiry is decided by the store's clock, which this process cannot read without a
//! round trip. The dispatcher therefore keeps a *local deadline* per dispatch on the monotonic
//! time of its clock port ([`tenantry_ports::clock::Clock::monotonic`]), counted from before the statement that took or renewed the lease: the store's expiry
//! can only be later. Before every remote call the dispatcher checks that the local deadline has
//! not passed and that no renewal was refused; otherwise it does not send (a paused or slow
//! worker never sends on a lease another worker may already hold).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tenantry_kernel::{CommandId, LeaseEpoch};
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

    fn is_live(&self, now: Instant) -> bool {
        let local = *self.lock();
        !local.lost && now < local.deadline
    }
}

/// The leases of the dispatches in flight, by command and lease epoch (workers of one process
/// share a dispatcher: a stalled dispatch and the one that took its command over after the
/// lease expired are two entries, and neither can read the other's lease as its own).
#[derive(Debug, Default)]
pub(super) struct LeaseBook {
    leases: Mutex<HashMap<(CommandId, LeaseEpoch), Arc<LeaseState>>>,
}

impl LeaseBook {
    fn lock(&self) -> MutexGuard<'_, HashMap<(CommandId, LeaseEpoch), Arc<LeaseState>>> {
        self.leases.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a new lease (`command`, `epoch`) held until at least `deadline`.
    pub(super) fn open(
        &self,
        command: &CommandId,
        epoch: LeaseEpoch,
        deadline: Instant,
    ) -> Arc<LeaseState> {
        let state = Arc::new(LeaseState {
            inner: Mutex::new(Local {
                deadline,
                lost: false,
            }),
        });
        self.lock()
            .insert((command.clone(), epoch), Arc::clone(&state));
        state
    }

    /// Forgets the lease (`command`, `epoch`) (its dispatch ended).
    pub(super) fn close(&self, command: &CommandId, epoch: LeaseEpoch) {
        self.lock().remove(&(command.clone(), epoch));
    }

    /// Whether the dispatch holding (`command`, `epoch`) may still start a remote call at
    /// monotonic time `now`.
    pub(super) fn is_live(&self, command: &CommandId, epoch: LeaseEpoch, now: Instant) -> bool {
        self.lock()
            .get(&(command.clone(), epoch))
            .is_some_and(|state| state.is_live(now))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tenantry_ports::clock::{Clock, ManualClock};

    use super::*;

    fn clock() -> ManualClock {
        ManualClock::new(chrono::DateTime::UNIX_EPOCH)
    }

    /// Two workers of one process: the first stalls past its lease (epoch 1), the second takes
    /// the command over (epoch 2). The first must not read the second's lease as its own, and
    /// the first ending must not forget the second's.
    #[test]
    fn a_takeover_in_the_same_process_keeps_both_leases_apart() {
        let clock = clock();
        let book = LeaseBook::default();
        let id = CommandId::parse("c-1").unwrap_or_else(|_| unreachable!());
        book.open(
            &id,
            LeaseEpoch(1),
            clock.monotonic() + Duration::from_secs(2),
        );
        clock.advance(Duration::from_secs(3));
        book.open(
            &id,
            LeaseEpoch(2),
            clock.monotonic() + Duration::from_secs(2),
        );
        assert!(
            !book.is_live(&id, LeaseEpoch(1), clock.monotonic()),
            "the stalled lease expired"
        );
        assert!(book.is_live(&id, LeaseEpoch(2), clock.monotonic()));
        book.close(&id, LeaseEpoch(1));
        assert!(
            book.is_live(&id, LeaseEpoch(2), clock.monotonic()),
            "closing epoch 1 keeps epoch 2"
        );
        book.close(&id, LeaseEpoch(2));
        assert!(!book.is_live(&id, LeaseEpoch(2), clock.monotonic()));
    }

    #[test]
    fn a_refused_renewal_ends_the_lease_at_once() {
        let clock = clock();
        let book = LeaseBook::default();
        let id = CommandId::parse("c-1").unwrap_or_else(|_| unreachable!());
        let state = book.open(
            &id,
            LeaseEpoch(1),
            clock.monotonic() + Duration::from_secs(30),
        );
        assert!(book.is_live(&id, LeaseEpoch(1), clock.monotonic()));
        state.extend(clock.monotonic() + Duration::from_secs(60));
        clock.advance(Duration::from_secs(45));
        assert!(
            book.is_live(&id, LeaseEpoch(1), clock.monotonic()),
            "extended to 60 s"
        );
        state.lose();
        assert!(!book.is_live(&id, LeaseEpoch(1), clock.monotonic()));
    }
}
