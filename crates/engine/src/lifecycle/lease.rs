//! What a dispatcher knows locally about the leases of its dispatches in flight.
//!
//! A lease's expiry is decided by the store's clock, which this process cannot read without a
//! round trip. The dispatcher therefore keeps a *local deadline* per dispatch on the monotonic
//! time of its clock port ([`tenantry_ports::clock::Clock::monotonic`]), counted from before the statement that took or renewed the lease: the store's expiry
//! can only be later. Before every remote call the dispatcher checks that the local deadline has
//! not passed and that no renewal was refused; otherwise it does not send (a paused or slow
//! worker never sends on a lease another worker may already hold). A call in flight is
//! cancelled when its lease ends ([`LeaseState::ended`]), and two attempts of one command in
//! this process never call at once ([`LeaseBook::call_turn`]; case 014).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tenantry_kernel::{CommandId, LeaseEpoch, LeaseOwner};
use tenantry_lifecycle::{CommandStatus, LeaseToken};
use tenantry_ports::lifecycle::RenewalOutcome;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The local view of one lease.
#[derive(Debug)]
pub(super) struct LeaseState {
    inner: Mutex<Local>,
    /// Woken when a renewal is refused (the lease ends at once).
    changed: Notify,
}

/// What [`LeaseState::refused`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// A refusal was already recorded for this lease: nothing more to report.
    AlreadyKnown,
    /// A settle of this attempt that ends the lease was already sent: the refusal may be that
    /// settle's own doing and is reported once the settle answered.
    Deferred,
    /// Report it now.
    Report,
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

    /// A renewal was refused: the lease is gone for good (a call in flight on it is cancelled,
    /// see [`ended`](Self::ended)). Says whether to report the refusal now; when a settle of
    /// this attempt that ends the lease was already sent, the refusal may be that settle's own
    /// doing and is only reported once the settle answered (it is remembered, see
    /// [`refusal_deferred`](Self::refusal_deferred)).
    pub(super) fn refused(&self) -> Refusal {
        let refusal = {
            let mut local = self.lock();
            if local.lost {
                return Refusal::AlreadyKnown;
            }
            local.lost = true;
            local.refusal_deferred = local.ending;
            if local.ending {
                Refusal::Deferred
            } else {
                Refusal::Report
            }
        };
        self.changed.notify_waiters();
        refusal
    }

    /// Whether a renewal of this lease was refused.
    pub(super) fn is_refused(&self) -> bool {
        self.lock().lost
    }

    /// Completes once this lease can no longer be proven live: its local deadline (moved by
    /// every renewal) passed on `clock`'s monotonic time, or a renewal was refused. A remote
    /// call selected against it is cancelled then (docs/protocol.md, "Leases, renewal and the
    /// attempt window").
    pub(super) async fn ended(&self, clock: &dyn tenantry_ports::clock::Clock) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let local = *self.lock();
            if local.lost || clock.monotonic() >= local.deadline {
                return;
            }
            tokio::select! {
                () = &mut changed => {}
                () = clock.sleep_until(local.deadline) => {}
            }
        }
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
    /// One lock per command with a remote call in flight (or waited for) in this process.
    calls: Mutex<HashMap<CommandId, Arc<tokio::sync::Mutex<()>>>>,
}

/// The right to call the remote for one command in this process: while it is held, no other
/// attempt of the command in this process starts a call (a re-claim after a lost lease waits
/// until the earlier attempt's call ended or was cancelled; case 014). Dropping it lets the
/// next one go and forgets the command's lock once nobody waits for it.
pub(super) struct CallTurn<'a> {
    book: &'a LeaseBook,
    command: CommandId,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for CallTurn<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut calls = self
            .book
            .calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Every clone is made under this lock: a count of one is the map's own, nobody holds
        // or waits for the command's lock.
        if calls
            .get(&self.command)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            calls.remove(&self.command);
        }
    }
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
            changed: Notify::new(),
        });
        self.lock()
            .insert((command.clone(), epoch), Arc::clone(&state));
        state
    }

    /// The lease (`command`, `epoch`), while its dispatch runs.
    pub(super) fn get(&self, command: &CommandId, epoch: LeaseEpoch) -> Option<Arc<LeaseState>> {
        self.lock().get(&(command.clone(), epoch)).cloned()
    }

    /// Waits until no other attempt of `command` in this process has a remote call in flight,
    /// and returns the turn that keeps it so until dropped.
    pub(super) async fn call_turn(&self, command: &CommandId) -> CallTurn<'_> {
        let lock = Arc::clone(
            self.calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(command.clone())
                .or_default(),
        );
        // Built before waiting, so a wait that is cancelled still tidies the map up.
        let mut turn = CallTurn {
            book: self,
            command: command.clone(),
            guard: None,
        };
        turn.guard = Some(lock.lock_owned().await);
        turn
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
/// or gone → settled, still ours and processing (at our epoch: nobody took it yet; at a later
/// epoch: this owner claimed it again, case 014) → expired, unreadable → failed.
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
            let same_owner = owner.as_ref() == Some(&ours.owner);
            if *epoch != ours.epoch {
                // A later claim: a takeover, unless this same owner claimed the command again
                // after its lease expired (case 014): its own re-claim is no takeover.
                if same_owner && *status == CommandStatus::Processing {
                    RenewalOutcome::Expired
                } else {
                    RenewalOutcome::Lost
                }
            } else if *status != CommandStatus::Processing {
                RenewalOutcome::Settled
            } else if same_owner {
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
            // Our own owner claimed it again after the lease expired: no takeover (case 014).
            (NotCommitted, row(Processing, "w-1", 4), Expired),
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
        assert_eq!(
            state.refused(),
            Refusal::Report,
            "no settle of the attempt was sent"
        );
        assert_eq!(state.refused(), Refusal::AlreadyKnown, "reported once");
        assert!(!book.is_live(&id, LeaseEpoch(1), clock.monotonic()));
    }
}
