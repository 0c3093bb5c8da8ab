//! Timing and identity of a runtime's cross-process claims ([`FenceConfig`]) and its clock.

use std::time::Duration;

/// Timing and identity of a runtime's cross-process claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceConfig {
    /// Longest a dispatched remote mutation may run (default 150 s; the app's
    /// `fence_dispatch_deadline_ms`): [`ScopeContext::dispatch`](super::ScopeContext::dispatch)
    /// stops waiting then (on the runtime clock's monotonic time), and the outcome is unknown:
    /// the scope is fenced. Every intent expires this plus [`claim_margin`](Self::claim_margin)
    /// after it was written (store clock), and an operator clear is refused before that. An
    /// intent written without an expiry (older versions) is clearable once this old.
    pub dispatch_deadline: Duration,
    /// How much longer than the dispatch deadline a claim lives (default 30 s), so a live
    /// holder's dispatch always ends before its claim lapses.
    pub claim_margin: Duration,
    /// First pause between reads while another process holds the scope (default 50 ms;
    /// doubles up to 1 s).
    pub claim_poll: Duration,
    /// Longest a run waits for another process's claim before failing with
    /// [`ScopedWriteError::ScopeBusy`](super::ScopedWriteError::ScopeBusy) (default: dispatch deadline + margin).
    pub claim_wait: Duration,
    /// This runtime's owner id in its claims; unique per runtime (default
    /// `scoped-writes-<pid>-<uuid>`).
    pub owner: String,
}

impl Default for FenceConfig {
    fn default() -> Self {
        Self::with_deadline(Duration::from_secs(150))
    }
}

impl FenceConfig {
    /// The defaults with `dispatch_deadline` (the wait limit follows it).
    pub fn with_deadline(dispatch_deadline: Duration) -> Self {
        let claim_margin = Duration::from_secs(30);
        Self {
            dispatch_deadline,
            claim_margin,
            claim_poll: Duration::from_millis(50),
            claim_wait: dispatch_deadline + claim_margin,
            owner: format!(
                "scoped-writes-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ),
        }
    }

    /// Sets [`claim_margin`](Self::claim_margin) and moves
    /// [`claim_wait`](Self::claim_wait) to the new dispatch deadline + margin.
    #[must_use]
    pub fn with_claim_margin(mut self, claim_margin: Duration) -> Self {
        self.claim_margin = claim_margin;
        self.claim_wait = self.dispatch_deadline + claim_margin;
        self
    }

    /// Sets [`claim_poll`](Self::claim_poll).
    #[must_use]
    pub fn with_claim_poll(mut self, claim_poll: Duration) -> Self {
        self.claim_poll = claim_poll;
        self
    }

    /// Sets [`claim_wait`](Self::claim_wait).
    #[must_use]
    pub fn with_claim_wait(mut self, claim_wait: Duration) -> Self {
        self.claim_wait = claim_wait;
        self
    }

    /// Sets [`owner`](Self::owner); it must be unique per runtime.
    #[must_use]
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    pub(super) fn claim_ttl_ms(&self) -> i64 {
        duration_ms(self.dispatch_deadline + self.claim_margin)
    }
}

pub(super) fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
