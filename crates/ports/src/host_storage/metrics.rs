//! Fence metrics: how the runs of the `ScopedWrites` runtime end, the fences they write after
//! an unknown outcome and the operators' clears, as reported by the engine, and the sink they
//! go to ([`FenceMetrics`]; [`NoFenceMetrics`] drops them).
//!
//! The service's sink turns them into `tenantry_fence_writes_total{outcome}`,
//! `tenantry_fence_refusals_total{reason}`, `tenantry_fence_unknown_outcomes_total` and
//! `tenantry_fence_clears_total` (docs/operations.md, "Metrics").

/// How a run that reached its operation ended with a known outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceWriteOutcome {
    /// The operation returned `Ok`.
    Succeeded,
    /// The operation failed with a known outcome (answered, or never dispatched); the scope
    /// stays writable.
    Failed,
}

impl FenceWriteOutcome {
    /// Every outcome, for registering each label value at 0.
    pub const ALL: [Self; 2] = [Self::Succeeded, Self::Failed];

    /// Label value: `succeeded` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

/// Why a run was refused before its mutation ran (nothing was sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceRefusal {
    /// The scope (or its installation) is fenced.
    Fenced,
    /// Another process held the scope's claim past the claim wait.
    ScopeBusy,
    /// The fence records or the store's clock could not be read (fail closed).
    StateUnavailable,
    /// The run lost its claim before a mutation (cleared, or taken over after it lapsed).
    ClaimLost,
}

impl FenceRefusal {
    /// Every reason, for registering each label value at 0.
    pub const ALL: [Self; 4] = [
        Self::Fenced,
        Self::ScopeBusy,
        Self::StateUnavailable,
        Self::ClaimLost,
    ];

    /// Label value: `fenced`, `scope_busy`, `state_unavailable` or `claim_lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fenced => "fenced",
            Self::ScopeBusy => "scope_busy",
            Self::StateUnavailable => "state_unavailable",
            Self::ClaimLost => "claim_lost",
        }
    }
}

/// Where fence metrics go. Called on the write path: a sink must be cheap and must not block
/// (no I/O); it cannot fail a write.
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait FenceMetrics: Send + Sync {
    /// A run's operation ended with a known outcome.
    fn record_write(&self, outcome: FenceWriteOutcome);

    /// A run was refused before its mutation ran.
    fn record_refusal(&self, reason: FenceRefusal);

    /// A mutation's outcome was unknown (a lost answer, an elapsed deadline, a panic, a failed
    /// host-storage write or intent): its scope is now fenced.
    fn record_unknown_outcome(&self);

    /// An operator cleared a fence or an expired intent (a clear that found nothing to clear
    /// is not counted).
    fn record_clear(&self);
}

/// A fence metrics sink that drops everything (the default of the runtime).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFenceMetrics;

impl FenceMetrics for NoFenceMetrics {
    fn record_write(&self, _outcome: FenceWriteOutcome) {}
    fn record_refusal(&self, _reason: FenceRefusal) {}
    fn record_unknown_outcome(&self) {}
    fn record_clear(&self) {}
}
