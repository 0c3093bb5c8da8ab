//! Lifecycle metrics: task states and lease-renewal outcomes as reported by the engine, and the
//! sink they go to ([`LifecycleMetrics`]; [`NoMetrics`] drops them).

/// State of a dispatched task, as reported to metrics (reference: running, succeeded, retry,
/// dispatch_error).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Claimed, about to dispatch.
    Running,
    /// Acked.
    Succeeded,
    /// Scheduled for another attempt.
    Retry,
    /// Dead-lettered (status `failed`): a non-retryable outcome or the attempt budget spent.
    Failed,
    /// Closed as moot without a remote call (status `superseded`).
    Moot,
    /// The attempt ended with an error and no settlement (the lease will expire).
    DispatchError,
}

impl TaskStatus {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Retry => "retry",
            Self::Failed => "failed",
            Self::Moot => "moot",
            Self::DispatchError => "dispatch_error",
        }
    }
}

/// One lifecycle task record.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskMetric {
    /// Operation name.
    pub operation: String,
    /// Task state.
    pub status: TaskStatus,
    /// Seconds since the command was created, for settled tasks (succeeded).
    pub duration_seconds: Option<f64>,
    /// Error code of a retry, failure, moot close or dispatch error.
    pub error_code: Option<String>,
}

/// What became of one lease renewal, as reported to metrics
/// (`tenantry_lifecycle_lease_renewals_total{outcome}`). A refused renewal is classified by
/// who has the command now (docs/protocol.md, "Leases, renewal and the attempt window"): only
/// [`Lost`](Self::Lost) means another holder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenewalOutcome {
    /// The lease was extended.
    Renewed,
    /// Refused: another owner's attempt (a later lease epoch) has claimed the command. Renewal
    /// stopped; the only outcome logged as `LEASE_LOST`.
    Lost,
    /// Refused because this attempt's own settle ended the lease first (or the command was
    /// settled at this attempt's epoch): nothing was lost. Renewal stopped.
    Settled,
    /// Refused because this attempt handed its command back at shutdown
    /// (`SHUTDOWN_BEFORE_CALL`) first: nothing was lost. Renewal stopped.
    HandedBack,
    /// Refused because the lease had expired on the store's clock (a paused process or a slow
    /// store) and nobody else has claimed the command (nobody at all, or this same owner again
    /// after the expiry: its own re-claim is no takeover, case 014): this attempt sends nothing
    /// more and its call in flight is cancelled. Renewal stopped.
    Expired,
    /// The store failed (or, after a refusal, who has the command could not be read);
    /// renewal is tried again at the next tick unless it was refused.
    Failed,
}

impl RenewalOutcome {
    /// Every outcome, in label order of the documentation.
    pub const ALL: [Self; 6] = [
        Self::Renewed,
        Self::Lost,
        Self::Settled,
        Self::HandedBack,
        Self::Expired,
        Self::Failed,
    ];

    /// Label value: `renewed`, `lost`, `settled`, `handed_back`, `expired` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Renewed => "renewed",
            Self::Lost => "lost",
            Self::Settled => "settled",
            Self::HandedBack => "handed_back",
            Self::Expired => "expired",
            Self::Failed => "failed",
        }
    }
}

crate::error::message_error! {
    /// A metrics sink refused a record. Build it with [`MetricsError::new`], and keep the sink's
    /// own error with [`with_source`](MetricsError::with_source).
    pub struct MetricsError;
    display: "metrics sink failed";
    source: " The sink's own error (e.g. its exporter's), if any."
}

/// Where lifecycle task metrics go. A failure is logged by the engine and never breaks dispatch.
#[cfg_attr(feature = "mocks", mockall::automock)]
pub trait LifecycleMetrics: Send + Sync {
    /// Records one task state.
    ///
    /// # Errors
    /// [`MetricsError`] when the sink fails.
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError>;

    /// Records one lease renewal of a dispatch in flight of `operation`. The default ignores it.
    ///
    /// # Errors
    /// [`MetricsError`] when the sink fails.
    fn record_lease_renewal(
        &self,
        operation: &str,
        outcome: RenewalOutcome,
    ) -> Result<(), MetricsError> {
        let _ = (operation, outcome);
        Ok(())
    }
}

/// A metrics sink that drops everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoMetrics;

impl LifecycleMetrics for NoMetrics {
    fn record_task(&self, _metric: &TaskMetric) -> Result<(), MetricsError> {
        Ok(())
    }
}
