//! The store's clock as a runtime reads it ([`StoreClock`]): every fence record is stamped and
//! judged on the store's (the database's) clock, never on the process's wall clock.
//!
//! Reading the database's clock costs a round trip, so the runtime anchors one reading to its
//! monotonic clock and estimates "store now" as that reading plus the monotonic time elapsed
//! since ([`StoreClock::estimate`]). The estimate is immune to steps of the process's wall
//! clock (it never reads it), and it is read again once the anchor is [`REFRESH`] old, so
//! drift between the monotonic clock and the database's clock, or a step of the database's
//! clock, is picked up within that time. Operator actions (clear, list, count) read the
//! store's clock afresh.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How long one reading of the store's clock serves estimates before it is read again.
pub(super) const REFRESH: Duration = Duration::from_secs(1);

/// One reading of the store's clock and the monotonic time it was taken at.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    store_ms: i64,
    at: Instant,
}

/// The store's clock as this runtime last read it.
#[derive(Debug, Default)]
pub(super) struct StoreClock {
    anchor: Mutex<Option<Anchor>>,
}

impl StoreClock {
    /// The store's clock at `monotonic`, from the last reading when it is younger than
    /// [`REFRESH`]; `None`: read the store's clock.
    pub(super) fn estimate(&self, monotonic: Instant) -> Option<i64> {
        let anchor = (*self.anchor.lock().unwrap_or_else(PoisonError::into_inner))?;
        let elapsed = monotonic.saturating_duration_since(anchor.at);
        (elapsed < REFRESH).then(|| anchor.store_ms.saturating_add(millis(elapsed)))
    }

    /// The store's clock at `monotonic` from the last reading however old it is; `None`
    /// before the first reading. For stamps that nothing is judged by (a fence's
    /// `fenced_at_ms`, shown to operators).
    pub(super) fn estimate_any_age(&self, monotonic: Instant) -> Option<i64> {
        let anchor = (*self.anchor.lock().unwrap_or_else(PoisonError::into_inner))?;
        let elapsed = monotonic.saturating_duration_since(anchor.at);
        Some(anchor.store_ms.saturating_add(millis(elapsed)))
    }

    /// Records a reading `store_ms` taken by `at` (the monotonic time once the answer
    /// arrived: an estimate can only lag the store's clock by the round trip, which makes
    /// records look younger, never older).
    pub(super) fn anchor(&self, store_ms: i64, at: Instant) {
        *self.anchor.lock().unwrap_or_else(PoisonError::into_inner) = Some(Anchor { store_ms, at });
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_follow_the_monotonic_clock_until_the_reading_is_stale() {
        let clock = StoreClock::default();
        let t0 = Instant::now();
        assert_eq!(clock.estimate(t0), None);
        assert_eq!(clock.estimate_any_age(t0), None);
        clock.anchor(1_000, t0);
        assert_eq!(clock.estimate(t0), Some(1_000));
        assert_eq!(clock.estimate(t0 + Duration::from_millis(999)), Some(1_999));
        assert_eq!(clock.estimate(t0 + REFRESH), None);
        assert_eq!(
            clock.estimate_any_age(t0 + Duration::from_secs(60)),
            Some(61_000)
        );
    }
}
