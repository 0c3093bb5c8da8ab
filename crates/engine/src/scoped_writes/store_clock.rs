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

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long one reading of the store's clock serves estimates before it is read again.
pub(super) const REFRESH: Duration = Duration::from_secs(1);

/// `at_ns` before the first reading.
const NO_READING: i64 = i64::MIN;

const NANOS_PER_MS: i64 = 1_000_000;

/// The store's clock as this runtime last read it, readable without a lock (every run reads
/// it).
///
/// A reading `store_ms` taken at monotonic time `at` is kept as two atomics, in nanoseconds
/// since `base`: `offset_ns = store_ms × 10⁶ − at` and `at_ns = at`. An estimate at monotonic
/// `t` is `(offset_ns + t) / 10⁶` (floored) = `store_ms` plus the milliseconds elapsed since
/// `at`, from one atomic, so it always comes from a single reading; `at_ns` says how old the
/// reading is, to judge [`REFRESH`]. (`offset_ns` is stored before `at_ns` and read after it,
/// so a reader that sees a reading's time sees that reading's offset or a later one.) Two
/// anchors at once may leave one reading's offset beside the other's time: the estimate is
/// still that reading's, and its age is judged by the other's time (a reading may then serve
/// a little past [`REFRESH`]). A `t` before `at` (a concurrent anchor) gives an estimate below
/// `store_ms`: records look younger, never older.
#[derive(Debug)]
pub(super) struct StoreClock {
    base: Instant,
    offset_ns: AtomicI64,
    at_ns: AtomicI64,
}

impl Default for StoreClock {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            offset_ns: AtomicI64::new(0),
            at_ns: AtomicI64::new(NO_READING),
        }
    }
}

impl StoreClock {
    /// The store's clock at `monotonic`, from the last reading when it is younger than
    /// [`REFRESH`]; `None`: read the store's clock.
    pub(super) fn estimate(&self, monotonic: Instant) -> Option<i64> {
        let (estimate, age_ns) = self.read(monotonic)?;
        (age_ns < nanos(REFRESH)).then_some(estimate)
    }

    /// The store's clock at `monotonic` from the last reading however old it is; `None`
    /// before the first reading. For stamps that nothing is judged by (a fence's
    /// `fenced_at_ms`, shown to operators).
    pub(super) fn estimate_any_age(&self, monotonic: Instant) -> Option<i64> {
        self.read(monotonic).map(|(estimate, _)| estimate)
    }

    /// Records a reading `store_ms` taken by `at` (the monotonic time once the answer
    /// arrived: an estimate can only lag the store's clock by the round trip, which makes
    /// records look younger, never older).
    pub(super) fn anchor(&self, store_ms: i64, at: Instant) {
        let at_ns = self.since_base(at);
        let offset = store_ms.saturating_mul(NANOS_PER_MS).saturating_sub(at_ns);
        self.offset_ns.store(offset, Ordering::Release);
        self.at_ns.store(at_ns, Ordering::Release);
    }

    /// The estimate at `monotonic` (Unix ms) and the age of the reading it comes from (ns;
    /// negative when `monotonic` is before the reading).
    fn read(&self, monotonic: Instant) -> Option<(i64, i64)> {
        let at_ns = self.at_ns.load(Ordering::Acquire);
        if at_ns == NO_READING {
            return None;
        }
        let offset = self.offset_ns.load(Ordering::Acquire);
        let now_ns = self.since_base(monotonic);
        let estimate = offset.saturating_add(now_ns).div_euclid(NANOS_PER_MS);
        Some((estimate, now_ns.saturating_sub(at_ns)))
    }

    /// `t` in nanoseconds since `base` (negative before it).
    fn since_base(&self, t: Instant) -> i64 {
        match t.checked_duration_since(self.base) {
            Some(after) => nanos(after),
            None => -nanos(self.base.duration_since(t)),
        }
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
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

    #[test]
    fn readings_taken_before_the_clock_was_built_and_estimates_before_a_reading() {
        // A runtime clock whose origin precedes the store clock (a clock moved by hand in
        // tests, or one shared with earlier work): times before `base` are negative offsets.
        let early = Instant::now();
        std::thread::sleep(Duration::from_millis(2));
        let clock = StoreClock::default();
        clock.anchor(1_700_000_000_000, early);
        assert_eq!(
            clock.estimate(early + Duration::from_micros(2_500)),
            Some(1_700_000_000_002),
            "milliseconds elapsed since the reading, floored"
        );
        // An estimate for a moment before the reading lags it (records look younger).
        let later = Instant::now();
        clock.anchor(5_000, later);
        assert_eq!(
            clock.estimate(later - Duration::from_micros(1)),
            Some(4_999)
        );
        assert_eq!(clock.estimate(later), Some(5_000));
        // A later reading replaces the earlier one entirely.
        clock.anchor(-10, later + Duration::from_secs(5));
        assert_eq!(clock.estimate(later + Duration::from_secs(5)), Some(-10));
        assert_eq!(clock.estimate(later + Duration::from_secs(6)), None);
        assert_eq!(
            clock.estimate_any_age(later + Duration::from_secs(6)),
            Some(990)
        );
    }
}
