//! Wake-ups of idle workers: the signal an intake, a database listener or an operator action
//! sends when new work may be claimable, and what a sleeping worker waits on besides its idle
//! poll.
//!
//! [`Wakeups`] is one process's signal, shared by clones. Senders call [`Wakeups::wake`]:
//! the engine's `CommandIntake` after a command was created in this process, the PostgreSQL
//! listener of `tenantry-store-seaorm` when another process committed one (`NOTIFY`), and the
//! listener again after it reconnected (a catch-up: notifications sent while it was away are
//! lost). Every worker holds a [`WakeSubscription`]: it marks the signal seen *before* it
//! claims ([`WakeSubscription::mark_seen`]) and waits with [`WakeSubscription::woken`] when
//! the claim found nothing, so a wake that arrives between the claim and the sleep is never
//! missed. A wake reaches every subscriber (several wakes before they look count as one).
//!
//! A wake is only a hint to claim now: it carries no command, and the idle poll stays the
//! backstop for a wake that never comes (another process without a listener, a lost
//! notification).

use tokio::sync::watch;

/// The wake-up signal of one process. Cheap to clone; clones share the signal.
///
/// # Example
/// ```
/// use tenantry_ports::wake::Wakeups;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let wakeups = Wakeups::new();
/// let mut worker = wakeups.subscribe();
/// worker.mark_seen(); // before the claim
/// // ... the claim found nothing; meanwhile an intake committed a command:
/// wakeups.wake();
/// worker.woken().await; // returns at once: the wake came after `mark_seen`
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Wakeups {
    /// Counts the wakes; subscribers compare it with the value they saw last.
    sender: watch::Sender<u64>,
}

impl Default for Wakeups {
    fn default() -> Self {
        Self::new()
    }
}

impl Wakeups {
    /// A signal nobody has sent yet.
    pub fn new() -> Self {
        Self {
            sender: watch::Sender::new(0),
        }
    }

    /// Wakes every subscriber that is waiting, and makes the next [`WakeSubscription::woken`]
    /// of one that is not return at once. Never blocks; works without subscribers.
    pub fn wake(&self) {
        self.sender.send_modify(|sent| *sent = sent.wrapping_add(1));
    }

    /// How many wakes were sent since the signal was created (for tests and metrics).
    pub fn sent(&self) -> u64 {
        *self.sender.borrow()
    }

    /// A subscription for one waiting loop (a worker). It has seen nothing yet, so its first
    /// [`WakeSubscription::woken`] returns at once when a wake was ever sent; call
    /// [`WakeSubscription::mark_seen`] first.
    pub fn subscribe(&self) -> WakeSubscription {
        let mut receiver = self.sender.subscribe();
        receiver.mark_changed();
        WakeSubscription { receiver }
    }
}

/// One waiting loop's view of a [`Wakeups`] signal.
#[derive(Debug)]
pub struct WakeSubscription {
    receiver: watch::Receiver<u64>,
}

impl WakeSubscription {
    /// Marks every wake sent so far as seen. Call it before looking for work, so a wake sent
    /// while looking makes the following [`woken`](Self::woken) return at once.
    pub fn mark_seen(&mut self) {
        self.receiver.borrow_and_update();
    }

    /// Whether a wake was sent since the last [`mark_seen`](Self::mark_seen).
    pub fn pending(&self) -> bool {
        self.receiver.has_changed().unwrap_or(false)
    }

    /// Completes when a wake is sent after the last [`mark_seen`](Self::mark_seen) (at once if
    /// one was already). Never completes once every [`Wakeups`] handle is dropped (the idle
    /// poll is the backstop). Cancel safe: use it in `select!` beside the idle timer.
    pub async fn woken(&mut self) {
        if self.receiver.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_wake_after_mark_seen_is_not_missed() {
        let wakeups = Wakeups::new();
        let mut sub = wakeups.subscribe();
        sub.mark_seen();
        assert!(!sub.pending());
        wakeups.wake();
        assert!(sub.pending());
        tokio::time::timeout(Duration::from_secs(1), sub.woken())
            .await
            .expect("woken at once");
        // Seen: the next wait blocks until another wake.
        sub.mark_seen();
        let blocked = tokio::time::timeout(Duration::from_millis(20), sub.woken()).await;
        assert!(blocked.is_err(), "no new wake, no return");
    }

    #[tokio::test(start_paused = true)]
    async fn one_wake_reaches_every_subscriber_and_clones_share_the_signal() {
        let wakeups = Wakeups::new();
        let mut a = wakeups.subscribe();
        let mut b = wakeups.subscribe();
        a.mark_seen();
        b.mark_seen();
        let waiting = tokio::spawn(async move {
            a.woken().await;
            b.woken().await;
        });
        tokio::task::yield_now().await;
        wakeups.clone().wake();
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("both woken")
            .expect("task ran");
        assert_eq!(wakeups.sent(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_signal_never_wakes() {
        let wakeups = Wakeups::new();
        let mut sub = wakeups.subscribe();
        sub.mark_seen();
        drop(wakeups);
        let blocked = tokio::time::timeout(Duration::from_millis(20), sub.woken()).await;
        assert!(blocked.is_err(), "the idle poll stays the backstop");
    }
}
