//! The dispatcher's settings ([`DispatcherConfig`]): lease length and renewal, the absence
//! grace of deletions, the retry policy and the remote call deadline.

use std::time::Duration;

use tenantry_lifecycle::RetryPolicy;
#[cfg(doc)]
use tenantry_ports::lifecycle::ClaimRequest;

/// Settings of the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DispatcherConfig {
    /// Lease length of a claim (default 30 s). With `renew_leases` the lease is renewed every
    /// third of this while a dispatch is in flight, so one remote call may take longer than the
    /// lease; without renewal it must exceed the remote call deadline (150 s by default).
    pub lease_duration: Duration,
    /// Renew the lease of a dispatch in flight every `lease_duration / 3` (default true).
    pub renew_leases: bool,
    /// How long after a provision's last attempt ended a request of it may still land remotely
    /// (a gateway answered 504 while the backend went on). A deletion that finds no remote
    /// space completes on that proof only after this grace period (default 600 s).
    pub absence_grace: Duration,
    /// Backoff of retries and the attempt budget (`max_attempts`, default 50).
    pub retry_policy: RetryPolicy,
    /// The remote call deadline (default 150 s, the HTTP client's default): a claim that takes
    /// over an expired lease extends the replaced attempt's window by it
    /// ([`ClaimRequest::call_deadline`]).
    pub call_deadline: Duration,
}

impl Default for DispatcherConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(30),
            renew_leases: true,
            absence_grace: Duration::from_secs(600),
            retry_policy: RetryPolicy::default(),
            call_deadline: Duration::from_secs(150),
        }
    }
}

/// Builder-style setters over [`DispatcherConfig::default`]:
/// `DispatcherConfig::default().with_lease_duration(Duration::from_secs(60))`.
impl DispatcherConfig {
    /// Sets [`lease_duration`](Self::lease_duration).
    #[must_use]
    pub fn with_lease_duration(mut self, lease_duration: Duration) -> Self {
        self.lease_duration = lease_duration;
        self
    }

    /// Sets [`renew_leases`](Self::renew_leases). Without renewal, `lease_duration` must exceed
    /// the remote call deadline (the app's configuration checks it).
    #[must_use]
    pub fn with_renew_leases(mut self, renew_leases: bool) -> Self {
        self.renew_leases = renew_leases;
        self
    }

    /// Sets [`absence_grace`](Self::absence_grace).
    #[must_use]
    pub fn with_absence_grace(mut self, absence_grace: Duration) -> Self {
        self.absence_grace = absence_grace;
        self
    }

    /// Sets [`retry_policy`](Self::retry_policy).
    #[must_use]
    pub fn with_retry_policy(mut self, retry_policy: RetryPolicy) -> Self {
        self.retry_policy = retry_policy;
        self
    }

    /// Sets [`call_deadline`](Self::call_deadline).
    #[must_use]
    pub fn with_call_deadline(mut self, call_deadline: Duration) -> Self {
        self.call_deadline = call_deadline;
        self
    }
}
