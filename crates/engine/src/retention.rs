//! Retention use cases: remove expired history in bounded batches ([`prune_once`]), count what
//! would go ([`dry_run`]), and the periodic [`Pruner`] task `tenantry serve` runs
//! (docs/operations.md, "Retention").
//!
//! The rules of what is expired live in the domain crates and the store
//! (`tenantry_ports::retention`); this module sequences batches, stops a run when a batch is
//! short or another replica is pruning, and reports per kind. A platform that embeds the crates
//! calls [`prune_once`] from its own scheduler, or runs a [`Pruner`].

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantry_ports::StoreError;
use tenantry_ports::clock::Clock;
use tenantry_ports::retention::{PruneBatch, RetentionKind, RetentionPolicy, RetentionStore};
use tokio::sync::watch;
use tracing::{info, warn};

/// What one run did to one kind of record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindReport {
    /// The kind.
    pub kind: RetentionKind,
    /// Records removed by this run (a dry run: records that would be removed).
    pub removed: u64,
    /// Delete statements run (0 in a dry run).
    pub batches: u32,
    /// Whether the run stopped because another replica holds the retention lock.
    pub busy: bool,
    /// Time stamp of the oldest record of the kind left after the run (`None`: none).
    pub oldest: Option<DateTime<Utc>>,
}

/// What one run ([`prune_once`] or [`dry_run`]) did, per kind in [`RetentionKind::ALL`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneReport {
    /// The `now` the windows were measured from.
    pub at: DateTime<Utc>,
    /// Whether nothing was removed (a [`dry_run`]).
    pub dry_run: bool,
    /// One entry per kind.
    pub kinds: Vec<KindReport>,
}

impl PruneReport {
    /// The entry of `kind`, if the run visited it.
    pub fn kind(&self, kind: RetentionKind) -> Option<&KindReport> {
        self.kinds.iter().find(|k| k.kind == kind)
    }

    /// Records removed (or, in a dry run, that would be removed) of every kind.
    pub fn total_removed(&self) -> u64 {
        self.kinds.iter().map(|k| k.removed).sum()
    }

    /// Age of the oldest record of `kind` at [`at`](Self::at) (zero if stamped later; `None`:
    /// no record).
    pub fn oldest_age(&self, kind: RetentionKind) -> Option<Duration> {
        let oldest = self.kind(kind)?.oldest?;
        Some((self.at - oldest).to_std().unwrap_or(Duration::ZERO))
    }
}

/// Why a retention run stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RetentionError {
    /// The policy cannot be used (a batch size of 0).
    #[error("invalid retention policy: {0}")]
    InvalidPolicy(String),
    /// The store failed on `kind`; the batches before it stay removed (each batch is its own
    /// transaction), and a later run continues where this one stopped.
    #[error("retention of {kind} failed: {error}")]
    Store {
        /// The kind being pruned or counted.
        kind: RetentionKind,
        /// The store's error.
        #[source]
        error: StoreError,
    },
}

fn check(policy: &RetentionPolicy) -> Result<(), RetentionError> {
    if policy.batch_size == 0 {
        return Err(RetentionError::InvalidPolicy(
            "batch_size must be at least 1".into(),
        ));
    }
    Ok(())
}

/// Removes every record expired at `now` under `policy`, kind by kind, in batches of
/// `policy.batch_size` (each one statement, one short transaction). A kind's run stops at the
/// first batch that removes fewer than the batch size, or when another replica holds the
/// retention lock ([`KindReport::busy`]).
///
/// # Errors
/// [`RetentionError::InvalidPolicy`] before anything is removed; [`RetentionError::Store`]
/// when a batch fails (earlier batches stay removed).
pub async fn prune_once<S: RetentionStore + ?Sized>(
    store: &S,
    policy: &RetentionPolicy,
    now: DateTime<Utc>,
) -> Result<PruneReport, RetentionError> {
    prune_until(store, policy, now, &|| false).await
}

/// [`prune_once`] that also stops, between two batches, as soon as `stop()` is true.
async fn prune_until<S: RetentionStore + ?Sized>(
    store: &S,
    policy: &RetentionPolicy,
    now: DateTime<Utc>,
    stop: &(dyn Fn() -> bool + Send + Sync),
) -> Result<PruneReport, RetentionError> {
    check(policy)?;
    let mut kinds = Vec::with_capacity(RetentionKind::ALL.len());
    for kind in RetentionKind::ALL {
        let window = policy.window(kind);
        let store_error = |error| RetentionError::Store { kind, error };
        let mut report = KindReport {
            kind,
            removed: 0,
            batches: 0,
            busy: false,
            oldest: None,
        };
        while !stop() {
            let batch = store
                .prune_batch(kind, now, window, policy.batch_size)
                .await
                .map_err(store_error)?;
            match batch {
                PruneBatch::Busy => {
                    report.busy = true;
                    break;
                }
                PruneBatch::Removed(n) => {
                    report.batches += 1;
                    report.removed += n;
                    if n < u64::from(policy.batch_size) {
                        break;
                    }
                }
                _ => break,
            }
        }
        report.oldest = store.oldest(kind).await.map_err(store_error)?;
        kinds.push(report);
    }
    Ok(PruneReport {
        at: now,
        dry_run: false,
        kinds,
    })
}

/// What [`prune_once`] would remove at `now` under `policy`, and the oldest record per kind;
/// writes nothing.
///
/// # Errors
/// [`RetentionError::InvalidPolicy`]; [`RetentionError::Store`] when a count fails.
pub async fn dry_run<S: RetentionStore + ?Sized>(
    store: &S,
    policy: &RetentionPolicy,
    now: DateTime<Utc>,
) -> Result<PruneReport, RetentionError> {
    check(policy)?;
    let mut kinds = Vec::with_capacity(RetentionKind::ALL.len());
    for kind in RetentionKind::ALL {
        let store_error = |error| RetentionError::Store { kind, error };
        kinds.push(KindReport {
            kind,
            removed: store
                .count_expired(kind, now, policy.window(kind))
                .await
                .map_err(store_error)?,
            batches: 0,
            busy: false,
            oldest: store.oldest(kind).await.map_err(store_error)?,
        });
    }
    Ok(PruneReport {
        at: now,
        dry_run: true,
        kinds,
    })
}

/// The periodic pruner: [`prune_once`] at once, then every `interval` on the clock port, until
/// shut down. Each run measures the windows from the store's clock
/// ([`RetentionStore::now`]: the database's clock for SQL stores), never from the clock port,
/// which only times the interval. Each report goes to the observer (the app's metrics); a failed run is logged
/// and retried at the next interval. Replicas need no coordination of their own: the store's
/// retention lock lets one prune at a time, and the others' runs end `busy`.
pub struct Pruner<S> {
    store: S,
    policy: RetentionPolicy,
    interval: Duration,
    clock: Arc<dyn Clock>,
}

impl<S: RetentionStore> Pruner<S> {
    /// A pruner over `store` with `policy`, running every `interval` on `clock`.
    pub fn new(
        store: S,
        policy: RetentionPolicy,
        interval: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            store,
            policy,
            interval,
            clock,
        }
    }

    /// Runs until `shutdown` turns true; a run in progress stops after its current batch (a
    /// statement is never cancelled halfway). Returns how many runs completed.
    pub async fn run(
        self,
        mut shutdown: watch::Receiver<bool>,
        mut observe: impl FnMut(&PruneReport) + Send,
    ) -> u64 {
        let mut runs = 0;
        info!(
            interval_s = self.interval.as_secs(),
            "retention pruner started"
        );
        loop {
            if *shutdown.borrow() {
                break;
            }
            let stop_flag = shutdown.clone();
            let stop = move || *stop_flag.borrow();
            // Windows are measured on the store's clock, the one that stamped the records
            // (case 013): a process clock running ahead would remove records early.
            let run = match self.store.now().await {
                Ok(now) => prune_until(&self.store, &self.policy, now, &stop).await,
                Err(error) => Err(RetentionError::Store {
                    kind: RetentionKind::FinishedCommands,
                    error,
                }),
            };
            match run {
                Ok(report) => {
                    runs += 1;
                    if report.total_removed() > 0 {
                        info!(
                            removed = report.total_removed(),
                            "retention run removed expired history"
                        );
                    }
                    observe(&report);
                }
                Err(error) => warn!(%error, "retention run failed; retrying at the next interval"),
            }
            tokio::select! {
                () = self.clock.sleep(self.interval) => {}
                _ = shutdown.changed() => {}
            }
        }
        info!(runs, "retention pruner stopped");
        runs
    }
}

#[cfg(test)]
mod tests;
