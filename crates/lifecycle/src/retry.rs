//! Backoff between attempts of a command.
//!
//! The default is the reference rule: `min(300 s, 2^min(attempt_count, 8) s)`, where
//! `attempt_count` is the number of claims so far (so the first retry waits 2 s). The saga passes
//! the claims since the last operator retry
//! ([`ClaimedCommand::attempts_in_budget`](crate::ClaimedCommand::attempts_in_budget)), so after an
//! operator retry the backoff starts again from the shortest step (*deviation:* the reference
//! has no operator retry; see docs/protocol.md, "Backoff"). Jitter is
//! optional; the random draw is an argument so the rule stays deterministic. A remote
//! `Retry-After` pushes the next attempt later, never earlier, and never more than
//! [`DEFAULT_MAX_RETRY_AFTER`] (1 hour) later: a remote cannot park a command for years.

use std::time::Duration;

/// Default upper bound honoured for a remote `Retry-After` (on a failure and as a deletion's
/// poll interval): 1 hour. A later `Retry-After` (`Retry-After: 99999999999`, an HTTP date
/// in year 9999) is read as 1 hour.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

/// Backoff policy of the lifecycle saga.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Upper bound of the exponential delay (reference: 300 s).
    pub max_delay: Duration,
    /// Largest exponent (reference: 8, i.e. 256 s).
    pub max_exponent: u32,
    /// Fraction of the delay removed at most by jitter, in `0.0..=1.0` (0 disables jitter).
    pub jitter_ratio: f64,
    /// Upper bound honoured for a remote `Retry-After` (default [`DEFAULT_MAX_RETRY_AFTER`],
    /// 1 hour).
    pub max_retry_after: Duration,
    /// Attempt budget: a retry after this many claims (counted since the last operator retry,
    /// progress polls excepted) dead-letters the command instead (default
    /// [`DEFAULT_MAX_ATTEMPTS`](crate::failure::DEFAULT_MAX_ATTEMPTS) = 50). At least 1.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_delay: Duration::from_secs(300),
            max_exponent: 8,
            jitter_ratio: 0.0,
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
            max_attempts: crate::failure::DEFAULT_MAX_ATTEMPTS,
        }
    }
}

impl RetryPolicy {
    /// Delay before the next attempt of a command claimed `attempt_count` times (since its last
    /// operator retry, as the saga counts them).
    ///
    /// `jitter_draw` is a uniform random number in `[0, 1)` supplied by the caller; with a
    /// jitter ratio `r` the delay is multiplied by `1 - r * jitter_draw`. `retry_after` (from
    /// the remote) is a lower bound, capped at `max_retry_after`.
    pub fn delay(
        &self,
        attempt_count: i32,
        jitter_draw: f64,
        retry_after: Option<Duration>,
    ) -> Duration {
        let exponent = u32::try_from(attempt_count.max(0))
            .unwrap_or(0)
            .min(self.max_exponent)
            .min(62);
        let base = Duration::from_secs(1u64 << exponent).min(self.max_delay);
        let ratio = self.jitter_ratio.clamp(0.0, 1.0);
        let draw = if jitter_draw.is_finite() {
            jitter_draw.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let jittered = base.mul_f64(1.0 - ratio * draw);
        match retry_after {
            Some(after) => jittered.max(after.min(self.max_retry_after)),
            None => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_follows_the_reference_formula() {
        let policy = RetryPolicy::default();
        let table = [
            (0, 1),
            (1, 2),
            (2, 4),
            (5, 32),
            (8, 256),
            (9, 256),
            (100, 256),
            (-3, 1),
        ];
        for (attempt, seconds) in table {
            assert_eq!(
                policy.delay(attempt, 0.5, None),
                Duration::from_secs(seconds),
                "attempt {attempt}"
            );
        }
        let capped = RetryPolicy {
            max_delay: Duration::from_secs(60),
            ..policy
        };
        assert_eq!(capped.delay(8, 0.0, None), Duration::from_secs(60));
    }

    #[test]
    fn jitter_scales_by_the_draw() {
        let policy = RetryPolicy {
            jitter_ratio: 0.5,
            ..RetryPolicy::default()
        };
        assert_eq!(policy.delay(3, 0.0, None), Duration::from_secs(8));
        assert_eq!(policy.delay(3, 1.0, None), Duration::from_secs(4));
        assert_eq!(policy.delay(3, 0.5, None), Duration::from_secs(6));
        assert_eq!(policy.delay(3, f64::NAN, None), Duration::from_secs(8));
    }

    #[test]
    fn retry_after_is_honoured_as_a_lower_bound() {
        let policy = RetryPolicy::default();
        assert_eq!(
            policy.delay(1, 0.0, Some(Duration::from_secs(30))),
            Duration::from_secs(30)
        );
        assert_eq!(
            policy.delay(5, 0.0, Some(Duration::from_secs(1))),
            Duration::from_secs(32)
        );
        assert_eq!(
            policy.delay(1, 0.0, Some(Duration::from_secs(86_400))),
            Duration::from_secs(3600)
        );
    }
}
