//! Readiness: execution admission fails closed when the projection was never ready or is stale.
//!
//! Monotonic time is a [`Duration`] since an origin the caller chooses (the engine uses the
//! projector's start), so the rule is a pure function of its inputs.

use std::time::Duration;

/// Why execution admission must be refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NotReady {
    /// No sync has completed yet (or none has caught up with the high-water mark).
    #[error("directory projection is not ready: no successful sync yet")]
    NeverReady,
    /// The last successful sync is older than `max_staleness`.
    #[error("directory projection is stale: last success {age:?} ago, limit {max_staleness:?}")]
    Stale {
        /// Time since the last success.
        age: Duration,
        /// Configured limit.
        max_staleness: Duration,
    },
}

/// The readiness of one replica's projection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readiness {
    last_success: Option<Duration>,
}

impl Readiness {
    /// Records a successful, caught-up sync at monotonic time `now`.
    pub fn record_success(&mut self, now: Duration) {
        self.last_success = Some(match self.last_success {
            Some(previous) => previous.max(now),
            None => now,
        });
    }

    /// Monotonic time of the last success, if any.
    pub fn last_success(&self) -> Option<Duration> {
        self.last_success
    }

    /// Whether execution may be admitted at monotonic time `now`.
    ///
    /// # Errors
    /// [`NotReady::NeverReady`] before the first success; [`NotReady::Stale`] when
    /// `now - last_success >= max_staleness`.
    pub fn check(&self, now: Duration, max_staleness: Duration) -> Result<(), NotReady> {
        let Some(last) = self.last_success else {
            return Err(NotReady::NeverReady);
        };
        let age = now.saturating_sub(last);
        if age >= max_staleness {
            return Err(NotReady::Stale { age, max_staleness });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_evaluation() {
        let max = Duration::from_secs(60);
        let never = Readiness::default();
        assert_eq!(
            never.check(Duration::from_secs(1), max),
            Err(NotReady::NeverReady)
        );
        let mut ready = Readiness::default();
        ready.record_success(Duration::from_secs(10));
        let cases = [
            (10, Ok(())),
            (69, Ok(())),
            (
                70,
                Err(NotReady::Stale {
                    age: Duration::from_secs(60),
                    max_staleness: max,
                }),
            ),
            (
                100,
                Err(NotReady::Stale {
                    age: Duration::from_secs(90),
                    max_staleness: max,
                }),
            ),
            (5, Ok(())),
        ];
        for (now, expected) in cases {
            assert_eq!(
                ready.check(Duration::from_secs(now), max),
                expected,
                "now {now}"
            );
        }
        ready.record_success(Duration::from_secs(3));
        assert_eq!(ready.last_success(), Some(Duration::from_secs(10)));
    }
}
