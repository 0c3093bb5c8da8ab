//! Time as a port: wall time, monotonic time and the timers set on it, so tests and simulations
//! control all three.
//!
//! Every engine component (lifecycle dispatcher, worker, intake, operator actions, group
//! commit, scoped writes, directory projector) reads the time and sleeps through one
//! [`Clock`]:
//! - [`Clock::now`] is wall time (UTC): what is stored, compared with other processes and
//!   signed (fence records, command timestamps, directory staleness against revisions);
//! - [`Clock::monotonic`] never goes back: local deadlines and elapsed durations (a lease's
//!   local deadline, how long a claim has been waited for, when the last sync succeeded);
//! - [`Clock::sleep_until`] / [`Clock::sleep`] wait until the *monotonic* reading reaches a
//!   deadline, so a clock that is moved by hand also wakes the timers set on it.
//!
//! Storage adapters that keep their own notion of "now" (the database clock) accept a
//! [`Clock`] override so tests and simulations can run on virtual time.
//!
//! Two implementations:
//! - [`SystemClock`]: the system's wall time; monotonic time and timers are tokio's
//!   (`tokio::time`), so on a paused runtime they are virtual while wall time is not;
//! - [`ManualClock`]: the one clock for tests and the deterministic simulation. Frozen
//!   ([`ManualClock::new`]): it moves only when told ([`ManualClock::advance`] moves wall and
//!   monotonic time together and wakes the sleepers that are due). Following tokio
//!   ([`ManualClock::following_tokio`]): it also moves with tokio's clock, so on a paused
//!   current-thread runtime (`tokio::time::pause`, `#[tokio::test(start_paused = true)]`)
//!   tokio's auto-advance and `tokio::time::advance` drive wall time, monotonic time and the
//!   engine's timers as one virtual time.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A timer of a [`Clock`]: completes once the clock's monotonic reading reached the deadline.
/// Owns what it needs (`'static`), so it can be stored, selected on and moved across tasks.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Source of wall time, monotonic time and timers. See the [module docs](self) for which
/// reading serves what.
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait Clock: Send + Sync {
    /// The current wall time (UTC). May step (backwards too) when the clock is set.
    fn now(&self) -> DateTime<Utc>;

    /// The current monotonic time: never goes back, unaffected by steps of the wall time.
    /// On the tokio time scale (`tokio::time::Instant`), so a reading plus a duration is a
    /// deadline for [`Clock::sleep_until`].
    fn monotonic(&self) -> Instant;

    /// A timer that completes when [`Clock::monotonic`] reaches `deadline` (at once when it
    /// already has). Engine code sleeps only through this, never with `tokio::time::sleep`,
    /// so a clock moved by hand wakes it.
    fn sleep_until(&self, deadline: Instant) -> Sleep;

    /// A timer that completes `duration` of monotonic time from now.
    fn sleep(&self, duration: Duration) -> Sleep {
        self.sleep_until(self.monotonic() + duration)
    }
}

/// The system clock: wall time from the operating system, monotonic time and timers from
/// `tokio::time` (real time, or tokio's virtual time on a paused runtime).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::<Utc>::from(std::time::SystemTime::now())
    }

    fn monotonic(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// The clock for tests and simulations: wall and monotonic time move together, by hand
/// ([`advance`](Self::advance)) and, when built with [`following_tokio`](Self::following_tokio),
/// with tokio's clock. [`set`](Self::set) steps the wall time alone. Timers
/// ([`Clock::sleep_until`]) complete when the monotonic time reaches them, however it got
/// there. Clones share the time and the timers.
///
/// Monotonic readings start at the tokio instant the clock was built at; they are only
/// comparable with readings of the same clock (and, when it follows tokio, with
/// `tokio::time::Instant::now()` plus the total of the manual advances).
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug)]
struct ManualInner {
    /// The tokio instant at construction: monotonic readings count from here.
    origin: Instant,
    /// Whether the clock also moves with tokio's clock.
    follows_tokio: bool,
    state: Mutex<ManualState>,
    /// Notified after every [`ManualClock::advance`], so timers re-check their deadline.
    moved: Notify,
}

#[derive(Debug, Clone, Copy)]
struct ManualState {
    /// Total of the manual advances.
    advanced: Duration,
    /// The wall time at monotonic reading `origin` (moves when the wall time is set).
    wall_at_origin: DateTime<Utc>,
}

impl ManualClock {
    /// A clock stopped at wall time `start`; it moves only when told to.
    pub fn new(start: DateTime<Utc>) -> Self {
        Self::build(start, false)
    }

    /// A clock at wall time `start` that moves with tokio's clock (plus any manual advance).
    /// Meant for a paused runtime (`#[tokio::test(start_paused = true)]`, the simulation):
    /// there a remote that answers after 8 s and a lease of 2 s run in microseconds, and wall
    /// time, monotonic time and timers stay one virtual time. On a running runtime it moves
    /// with real time.
    pub fn following_tokio(start: DateTime<Utc>) -> Self {
        Self::build(start, true)
    }

    fn build(start: DateTime<Utc>, follows_tokio: bool) -> Self {
        Self {
            inner: Arc::new(ManualInner {
                origin: Instant::now(),
                follows_tokio,
                state: Mutex::new(ManualState {
                    advanced: Duration::ZERO,
                    wall_at_origin: start,
                }),
                moved: Notify::new(),
            }),
        }
    }

    /// Moves wall and monotonic time forward by `by` and wakes the timers now due.
    pub fn advance(&self, by: Duration) {
        {
            let mut state = self.inner.state();
            state.advanced = state.advanced.saturating_add(by);
        }
        self.inner.moved.notify_waiters();
    }

    /// Sets the wall time to `at` (a step, like an operator or NTP setting the system clock;
    /// backwards too). Monotonic time and timers do not move.
    pub fn set(&self, at: DateTime<Utc>) {
        let elapsed = self.inner.elapsed();
        self.inner.state().wall_at_origin = at - to_chrono(elapsed);
    }
}

impl ManualInner {
    fn state(&self) -> MutexGuard<'_, ManualState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Monotonic time since `origin`: the manual advances, plus tokio's elapsed time when the
    /// clock follows it.
    fn elapsed(&self) -> Duration {
        let advanced = self.state().advanced;
        if self.follows_tokio {
            advanced.saturating_add(Instant::now().saturating_duration_since(self.origin))
        } else {
            advanced
        }
    }

    fn monotonic(&self) -> Instant {
        self.origin + self.elapsed()
    }
}

fn to_chrono(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = self.inner.elapsed();
        self.inner.state().wall_at_origin + to_chrono(elapsed)
    }

    fn monotonic(&self) -> Instant {
        self.inner.monotonic()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            loop {
                // Registered before reading the time, so an advance in between is not missed.
                let moved = inner.moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                let now = inner.monotonic();
                if now >= deadline {
                    return;
                }
                if inner.follows_tokio {
                    // Tokio's clock reaches the deadline after the remaining monotonic time,
                    // unless a manual advance comes first.
                    tokio::select! {
                        () = tokio::time::sleep(deadline - now) => {}
                        () = &mut moved => {}
                    }
                } else {
                    moved.await;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn start() -> DateTime<Utc> {
        Utc.timestamp_opt(1_900_000_000, 0).single().unwrap()
    }

    #[tokio::test]
    async fn advance_moves_wall_and_monotonic_together_and_wakes_due_timers() {
        let clock = ManualClock::new(start());
        let t0 = clock.monotonic();
        let timer = tokio::spawn(clock.sleep(Duration::from_secs(5)));
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(4));
        tokio::task::yield_now().await;
        assert!(!timer.is_finished(), "4 s of 5: still sleeping");
        clock.advance(Duration::from_secs(1));
        timer.await.unwrap();
        assert_eq!(clock.monotonic() - t0, Duration::from_secs(5));
        assert_eq!(clock.now(), start() + chrono::Duration::seconds(5));
    }

    #[tokio::test]
    async fn a_frozen_clock_does_not_move_with_real_time() {
        let clock = ManualClock::new(start());
        let (wall, mono) = (clock.now(), clock.monotonic());
        tokio::time::sleep(Duration::from_millis(5)).await; // real time passes on purpose
        assert_eq!((clock.now(), clock.monotonic()), (wall, mono));
    }

    #[tokio::test]
    async fn set_steps_wall_time_only() {
        let clock = ManualClock::new(start());
        let mono = clock.monotonic();
        clock.set(start() - chrono::Duration::hours(1));
        assert_eq!(clock.now(), start() - chrono::Duration::hours(1));
        assert_eq!(clock.monotonic(), mono);
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            clock.now(),
            start() - chrono::Duration::hours(1) + chrono::Duration::seconds(2)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_clock_following_tokio_moves_with_virtual_time_and_manual_advances() {
        let clock = ManualClock::following_tokio(start());
        let t0 = clock.monotonic();
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(clock.now(), start() + chrono::Duration::seconds(3));
        // A timer 10 s out fires after 4 s of manual advance plus 6 s of tokio's time.
        let timer = tokio::spawn(clock.sleep(Duration::from_secs(10)));
        tokio::task::yield_now().await;
        clock.advance(Duration::from_secs(4));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!timer.is_finished());
        tokio::time::advance(Duration::from_secs(1)).await;
        timer.await.unwrap();
        assert_eq!(clock.monotonic() - t0, Duration::from_secs(13));
        assert_eq!(clock.now(), start() + chrono::Duration::seconds(13));
    }

    #[tokio::test(start_paused = true)]
    async fn system_clock_timers_and_monotonic_time_are_tokio_time() {
        let clock = SystemClock;
        let t0 = clock.monotonic();
        clock.sleep(Duration::from_secs(30)).await;
        assert_eq!(clock.monotonic() - t0, Duration::from_secs(30));
    }
}
