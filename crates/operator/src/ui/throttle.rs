//! Sign-in throttling of the console: after [`ThrottleRule::max_failures`] failed sign-ins from
//! one client address within [`ThrottleRule::window`], further sign-ins from it are answered
//! 429 with `Retry-After` until the oldest of those failures leaves the window (so at most one
//! window). A successful sign-in forgets the address's failures.
//!
//! The rule is a pure function of the failure times and now ([`ThrottleRule::verdict`]); the
//! [`SignInThrottle`] keeps the failures per address on the clock port's monotonic time (tests
//! advance a manual clock; nothing sleeps). Clients are told apart by the connection's peer
//! address; behind a load balancer or proxy that is the proxy's, so the throttle then counts
//! every client together (which still bounds guessing).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The throttle's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleRule {
    /// Failed sign-ins allowed within the window (default 5).
    pub max_failures: usize,
    /// The window (default 5 minutes).
    pub window: Duration,
}

impl Default for ThrottleRule {
    fn default() -> Self {
        Self {
            max_failures: 5,
            window: Duration::from_secs(300),
        }
    }
}

/// Whether a sign-in may be tried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Try it.
    Allow,
    /// Refuse it (429); try again after this long.
    Wait(Duration),
}

impl ThrottleRule {
    /// The verdict for a client whose failed sign-ins happened at `failures` (oldest first),
    /// at `now`: [`Verdict::Wait`] until the count of failures within the window drops below
    /// `max_failures`, else [`Verdict::Allow`].
    pub fn verdict(&self, failures: &[Instant], now: Instant) -> Verdict {
        let recent: Vec<Instant> = failures
            .iter()
            .copied()
            .filter(|at| now.saturating_duration_since(*at) < self.window)
            .collect();
        if self.max_failures == 0 || recent.len() < self.max_failures {
            return Verdict::Allow;
        }
        // The failure whose leaving the window brings the count below the bound.
        let pivot = recent[recent.len() - self.max_failures];
        Verdict::Wait(
            self.window
                .saturating_sub(now.saturating_duration_since(pivot)),
        )
    }
}

/// Most client addresses remembered at once; beyond it, every unknown client counts as one.
pub const MAX_CLIENTS: usize = 10_000;

/// The failed sign-ins per client address (`None`: the peer address is unknown, or too many
/// clients are remembered).
#[derive(Debug, Default)]
pub struct SignInThrottle {
    rule: ThrottleRule,
    failures: Mutex<HashMap<Option<IpAddr>, VecDeque<Instant>>>,
}

impl SignInThrottle {
    /// A throttle with `rule`.
    pub fn new(rule: ThrottleRule) -> Self {
        Self {
            rule,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The verdict for `client` at `now`.
    pub fn check(&self, client: Option<IpAddr>, now: Instant) -> Verdict {
        let map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let failures = map
            .get(&client)
            .or_else(|| map.get(&None).filter(|_| map.len() >= MAX_CLIENTS))
            .map(|f| f.iter().copied().collect::<Vec<_>>())
            .unwrap_or_default();
        self.rule.verdict(&failures, now)
    }

    /// Records a failed sign-in of `client` at `now`.
    pub fn failed(&self, client: Option<IpAddr>, now: Instant) {
        let mut map = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
        let window = self.rule.window;
        map.retain(|_, f| {
            f.retain(|at| now.saturating_duration_since(*at) < window);
            !f.is_empty()
        });
        let key = if map.contains_key(&client) || map.len() < MAX_CLIENTS {
            client
        } else {
            None
        };
        let entry = map.entry(key).or_default();
        entry.push_back(now);
        // Only the newest `max_failures` matter to the rule.
        while entry.len() > self.rule.max_failures.max(1) {
            entry.pop_front();
        }
    }

    /// Forgets `client`'s failures (it signed in).
    pub fn succeeded(&self, client: Option<IpAddr>) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule as a table: (failure times as seconds before now, verdict).
    #[test]
    fn the_rule_allows_until_the_bound_then_waits_for_the_window() {
        let rule = ThrottleRule {
            max_failures: 3,
            window: Duration::from_secs(60),
        };
        let now = Instant::now() + Duration::from_secs(3600);
        let ago = |s: u64| now - Duration::from_secs(s);
        let cases: [(&[u64], Verdict); 6] = [
            (&[], Verdict::Allow),
            (&[30, 20], Verdict::Allow),
            (&[30, 20, 10], Verdict::Wait(Duration::from_secs(30))),
            (&[50, 40, 20, 10], Verdict::Wait(Duration::from_secs(20))),
            (&[90, 20, 10], Verdict::Allow),
            (&[60, 20, 10], Verdict::Allow),
        ];
        for (failures, expected) in cases {
            let times: Vec<Instant> = failures.iter().map(|s| ago(*s)).collect();
            assert_eq!(rule.verdict(&times, now), expected, "{failures:?}");
        }
    }

    #[test]
    fn the_throttle_counts_per_client_and_forgets_on_success() {
        let throttle = SignInThrottle::new(ThrottleRule {
            max_failures: 2,
            window: Duration::from_secs(60),
        });
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        let t0 = Instant::now();
        throttle.failed(a, t0);
        assert_eq!(throttle.check(a, t0), Verdict::Allow);
        throttle.failed(a, t0 + Duration::from_secs(10));
        assert_eq!(
            throttle.check(a, t0 + Duration::from_secs(10)),
            Verdict::Wait(Duration::from_secs(50))
        );
        assert_eq!(throttle.check(b, t0), Verdict::Allow, "another client");
        assert_eq!(
            throttle.check(a, t0 + Duration::from_secs(60)),
            Verdict::Allow,
            "the first failure left the window"
        );
        throttle.succeeded(a);
        assert!(throttle.failures.lock().unwrap().is_empty());
    }
}
