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

use tenantry_kernel::{CommandId, LeaseEpoch, LeaseOwner};
use tenantry_lifecycle::{CommandStatus, LeaseToken};
use tenantry_ports::lifecycle::RenewalOutcome;
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
    /// A settle that ends the lease (an outcome) was sent by this attempt: a renewal refused
    /// from then on may have met that settle.
    ending: bool,
    /// A renewal was refused after `ending`: it is reported once the attempt's settle answered.
    refusal_deferred: bool,
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

    /// This attempt is sending a settle that ends the lease (status leaves `processing`).
    pub(super) fn ending(&self) {
        self.lock().ending = true;
    }

    /// A renewal was refused: the lease is gone for good. Returns whether a settle of this
    /// attempt that ends the lease was already sent, in which case the refusal may be that
    /// settle's own doing and is only reported once the settle answered (it is remembered,
    /// see [`refusal_deferred`](Self::refusal_deferred)).
    pub(super) fn refused(&self) -> bool {
        let mut local = self.lock();
        local.lost = true;
        local.refusal_deferred = local.ending;
        local.ending
    }

    /// Whether a refused renewal waits for the attempt's settle to be reported.
    pub(super) fn refusal_deferred(&self) -> bool {
        self.lock().refusal_deferred
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
                ending: false,
                refusal_deferred: false,
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

    /// The dispatch holding (`command`, `epoch`) is sending a settle that ends its lease.
    pub(super) fn ending(&self, command: &CommandId, epoch: LeaseEpoch) {
        if let Some(state) = self.lock().get(&(command.clone(), epoch)) {
            state.ending();
        }
    }

    /// Whether the dispatch holding (`command`, `epoch`) may still start a remote call at
    /// monotonic time `now`.
    pub(super) fn is_live(&self, command: &CommandId, epoch: LeaseEpoch, now: Instant) -> bool {
        self.lock()
            .get(&(command.clone(), epoch))
            .is_some_and(|state| state.is_live(now))
    }
}

/// What this attempt knows of its own settle when a renewal of its lease was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum OwnSettle {
    /// A settle of this attempt that ends the lease committed (its answer arrived).
    Committed {
        /// It handed the command back at shutdown (`SHUTDOWN_BEFORE_CALL`).
        handed_back: bool,
    },
    /// No settle of this attempt is known to have committed (none sent, refused, or failed).
    NotCommitted,
}

/// Who has the command, as read after a refused renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Holder {
    /// The read failed.
    Unknown,
    /// No such command any more (settled and pruned).
    Gone,
    /// The command's row.
    Row {
        /// Its status.
        status: CommandStatus,
        /// Its lease owner, if leased.
        owner: Option<LeaseOwner>,
        /// Its lease epoch (the epoch of the last claim).
        epoch: LeaseEpoch,
    },
}

/// Classifies a refused renewal of `ours` (docs/protocol.md, "Leases, renewal and the attempt
/// window"): [`RenewalOutcome::Lost`] (logged as `LEASE_LOST`) only when another attempt (a
/// later epoch) has claimed the command. A committed settle of this attempt explains the
/// refusal by itself; otherwise the row read after the refusal decides: settled at our epoch
/// or gone → settled, still ours and processing → expired (nobody took it yet), unreadable →
/// failed.
pub(super) fn classify_refusal(
    ours: &LeaseToken,
    own_settle: OwnSettle,
    holder: &Holder,
) -> RenewalOutcome {
    match (own_settle, holder) {
        (OwnSettle::Committed { handed_back: true }, _) => RenewalOutcome::HandedBack,
        (OwnSettle::Committed { handed_back: false }, _)
        | (OwnSettle::NotCommitted, Holder::Gone) => RenewalOutcome::Settled,
        (OwnSettle::NotCommitted, Holder::Unknown) => RenewalOutcome::Failed,
        (
            OwnSettle::NotCommitted,
            Holder::Row {
                status,
                owner,
                epoch,
            },
        ) => {
            if *epoch != ours.epoch {
                RenewalOutcome::Lost
            } else if *status != CommandStatus::Processing {
                RenewalOutcome::Settled
            } else if owner.as_ref() == Some(&ours.owner) {
                RenewalOutcome::Expired
            } else {
                RenewalOutcome::Lost
            }
        }
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

    /// The rule that classifies a refused renewal, case by case.
    #[test]
    fn case_015_a_refused_renewal_is_lost_only_to_another_holder() {
        use CommandStatus::{Failed, Pending, Processing, Succeeded};
        use OwnSettle::{Committed, NotCommitted};
        use RenewalOutcome::{Expired, HandedBack, Lost, Settled};
        let ours = LeaseToken {
            command_id: CommandId::parse("c-1").unwrap_or_else(|_| unreachable!()),
            owner: LeaseOwner::parse("w-1").unwrap_or_else(|_| unreachable!()),
            epoch: LeaseEpoch(3),
            expires_at: chrono::DateTime::UNIX_EPOCH,
        };
        let row = |status, owner: &str, epoch| Holder::Row {
            status,
            owner: (!owner.is_empty())
                .then(|| LeaseOwner::parse(owner).unwrap_or_else(|_| unreachable!())),
            epoch: LeaseEpoch(epoch),
        };
        let table = [
            // Our settle committed: whatever the row shows now (even a later claim).
            (
                Committed { handed_back: false },
                row(Succeeded, "", 3),
                Settled,
            ),
            (
                Committed { handed_back: false },
                row(Processing, "w-2", 4),
                Settled,
            ),
            (
                Committed { handed_back: true },
                row(Pending, "", 3),
                HandedBack,
            ),
            (Committed { handed_back: true }, Holder::Unknown, HandedBack),
            // No settle of ours committed: the row decides.
            (NotCommitted, row(Processing, "w-2", 4), Lost),
            (NotCommitted, row(Processing, "w-1", 4), Lost),
            (NotCommitted, row(Pending, "", 4), Lost),
            (NotCommitted, row(Succeeded, "", 4), Lost),
            (NotCommitted, row(Processing, "w-1", 3), Expired),
            (NotCommitted, row(Succeeded, "", 3), Settled),
            (NotCommitted, row(Pending, "", 3), Settled),
            (NotCommitted, row(Failed, "", 3), Settled),
            (NotCommitted, row(Processing, "w-9", 3), Lost),
            (NotCommitted, Holder::Gone, Settled),
            (NotCommitted, Holder::Unknown, RenewalOutcome::Failed),
        ];
        for (own, holder, expected) in table {
            assert_eq!(
                classify_refusal(&ours, own, &holder),
                expected,
                "{own:?} / {holder:?}"
            );
        }
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
        assert!(!state.refused(), "no settle of the attempt was sent");
        assert!(!book.is_live(&id, LeaseEpoch(1), clock.monotonic()));
    }
}
