//! The fence metrics sink of the app: the [`FenceMetrics`] port over the `metrics` crate.
//!
//! Series (described in [`crate::metrics::SERIES`], registered at 0 with the others):
//! `tenantry_fence_writes_total{outcome}` (`succeeded`, `failed`),
//! `tenantry_fence_refusals_total{reason}` (`fenced`, `scope_busy`, `state_unavailable`,
//! `claim_lost`), `tenantry_fence_unknown_outcomes_total` and `tenantry_fence_clears_total`.

use metrics::Counter;
use tenantry_ports::{FenceMetrics, FenceRefusal, FenceWriteOutcome};

/// Counts the ends of scoped writes into the process's recorder. The counters are looked up
/// once, when the sink is built, so a write pays one atomic increment.
#[derive(Clone)]
pub struct AppFenceMetrics {
    writes: [Counter; FenceWriteOutcome::ALL.len()],
    refusals: [Counter; FenceRefusal::ALL.len()],
    unknown_outcomes: Counter,
    clears: Counter,
}

impl std::fmt::Debug for AppFenceMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppFenceMetrics").finish_non_exhaustive()
    }
}

impl Default for AppFenceMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl AppFenceMetrics {
    /// A sink over the process's recorder; installs the Prometheus recorder if needed.
    pub fn new() -> Self {
        let _ = crate::metrics::prometheus();
        Self {
            writes: FenceWriteOutcome::ALL.map(|outcome| {
                metrics::counter!("tenantry_fence_writes_total", "outcome" => outcome.as_str())
            }),
            refusals: FenceRefusal::ALL.map(|reason| {
                metrics::counter!("tenantry_fence_refusals_total", "reason" => reason.as_str())
            }),
            unknown_outcomes: metrics::counter!("tenantry_fence_unknown_outcomes_total"),
            clears: metrics::counter!("tenantry_fence_clears_total"),
        }
    }
}

impl FenceMetrics for AppFenceMetrics {
    fn record_write(&self, outcome: FenceWriteOutcome) {
        let index = FenceWriteOutcome::ALL
            .iter()
            .position(|o| *o == outcome)
            .unwrap_or_default();
        self.writes[index].increment(1);
    }

    fn record_refusal(&self, reason: FenceRefusal) {
        let index = FenceRefusal::ALL
            .iter()
            .position(|r| *r == reason)
            .unwrap_or_default();
        self.refusals[index].increment(1);
    }

    fn record_unknown_outcome(&self) {
        self.unknown_outcomes.increment(1);
    }

    fn record_clear(&self) {
        self.clears.increment(1);
    }
}
