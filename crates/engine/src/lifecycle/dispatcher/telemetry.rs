//! Telemetry of a dispatch: task and lease-renewal metrics, and the log lines of a settled
//! command, a refused renewal and an attempt that ended without a settlement
//! (docs/operations.md).

use chrono::{DateTime, Utc};
use tenantry_kernel::LeaseOwner;
use tenantry_lifecycle::{ClaimedCommand, CommandStatus, Settlement};
use tenantry_ports::lifecycle::{
    KnowledgeFs, LifecycleStore, RenewalOutcome, TaskMetric, TaskStatus,
};
use tracing::{debug, warn};

use super::deliver::is_hand_back;
use super::error::error_code;
use super::{DispatchError, Dispatcher};
use crate::lifecycle::lease::{Holder, OwnSettle, classify_refusal};

impl<S: LifecycleStore, R: KnowledgeFs> Dispatcher<S, R> {
    /// Reports a persisted settlement to metrics (and logs a dead-letter at `warn`).
    pub(super) fn record_settled(
        &self,
        command: &ClaimedCommand,
        settlement: &Settlement,
        now: DateTime<Utc>,
    ) {
        let code = settlement
            .outcome
            .as_ref()
            .and_then(|o| o.error())
            .map(|e| e.code.to_string());
        match settlement.status() {
            Some(CommandStatus::Succeeded) => {
                self.record(command, TaskStatus::Succeeded, Some(now), None);
            }
            Some(CommandStatus::Failed) => {
                warn!(
                    code = code.as_deref().unwrap_or(""),
                    "command failed for good (dead-lettered); an operator can retry or abandon it"
                );
                self.record(command, TaskStatus::Failed, None, code);
            }
            Some(CommandStatus::Superseded) => {
                debug!(
                    code = code.as_deref().unwrap_or(""),
                    "command closed as moot"
                );
                self.record(command, TaskStatus::Moot, None, code);
            }
            _ => {
                debug!(
                    code = code.as_deref().unwrap_or(""),
                    "command scheduled for retry"
                );
                self.record(command, TaskStatus::Retry, None, code);
            }
        }
    }

    pub(super) fn record(
        &self,
        command: &ClaimedCommand,
        status: TaskStatus,
        settled_at: Option<DateTime<Utc>>,
        error_code: Option<String>,
    ) {
        let duration_seconds = settled_at
            .map(|at| ((at - command.created_at).num_milliseconds().max(0) as f64) / 1000.0);
        let metric = TaskMetric {
            operation: command.operation.to_string(),
            status,
            duration_seconds,
            error_code,
        };
        if let Err(error) = self.metrics.record_task(&metric) {
            warn!(%error, operation = %command.operation, status = status.as_str(), "lifecycle metric export failed");
        }
    }

    pub(super) fn record_renewal(&self, command: &ClaimedCommand, outcome: RenewalOutcome) {
        if let Err(error) = self
            .metrics
            .record_lease_renewal(command.operation.as_str(), outcome)
        {
            warn!(%error, "lifecycle metric export failed");
        }
    }

    /// Counts and logs a refused renewal as `outcome`: only [`RenewalOutcome::Lost`] is a
    /// `LEASE_LOST` warning (docs/operations.md).
    pub(super) fn report_refusal(
        &self,
        command: &ClaimedCommand,
        outcome: RenewalOutcome,
        holder: &Holder,
    ) {
        self.record_renewal(command, outcome);
        match outcome {
            RenewalOutcome::Lost => {
                let (new_owner, new_epoch) = match holder {
                    Holder::Row { owner, epoch, .. } => {
                        (owner.as_ref().map_or("none", LeaseOwner::as_str), epoch.0)
                    }
                    Holder::Unknown | Holder::Gone => ("none", 0),
                };
                // No `our_epoch` here: that field marks a dropped attempt's line (the chaos
                // checks read it as a refused late settle).
                warn!(
                    code = "LEASE_LOST",
                    new_owner,
                    new_epoch,
                    "lease renewal refused: another worker took the command over; this \
                     attempt's result will be dropped"
                );
            }
            RenewalOutcome::Expired => warn!(
                our_epoch = command.lease.epoch.0,
                "lease renewal refused: the lease expired before it was renewed (a paused \
                 process or a slow store); nobody has taken the command over yet, and this \
                 attempt sends no further request"
            ),
            RenewalOutcome::Failed => warn!(
                our_epoch = command.lease.epoch.0,
                "lease renewal refused, and who holds the command could not be read; this \
                 attempt sends no further request"
            ),
            RenewalOutcome::Settled => debug!(
                "lease renewal met this attempt's own settle (the command is settled); renewal \
                 stopped"
            ),
            RenewalOutcome::HandedBack => {
                debug!("lease renewal met this attempt's hand-back at shutdown; renewal stopped")
            }
            RenewalOutcome::Renewed => {}
        }
    }

    /// Reports a renewal refused after this attempt sent the settle that ends its lease, once
    /// the attempt's `outcome` is known: a committed settle explains the refusal (`settled`,
    /// or `handed_back` at shutdown); otherwise the command is read as for any refusal.
    pub(super) async fn report_deferred_refusal(
        &self,
        command: &ClaimedCommand,
        outcome: &Result<Settlement, DispatchError>,
    ) {
        let own = match outcome {
            Ok(settlement) if settlement.outcome.is_some() => OwnSettle::Committed {
                handed_back: is_hand_back(settlement),
            },
            _ => OwnSettle::NotCommitted,
        };
        let holder = match own {
            OwnSettle::Committed { .. } => Holder::Unknown,
            OwnSettle::NotCommitted => self.holder(command).await,
        };
        let classified = classify_refusal(&command.lease, own, &holder);
        self.report_refusal(command, classified, &holder);
    }

    /// Logs an attempt that ended without a settlement. An attempt that ended on its lease
    /// (a refused settle, a lease it could not prove live) is classified by who holds the
    /// command now ([`classify_refusal`]): only when another attempt has it is the error
    /// [`DispatchError::LeaseLost`] and the line `LEASE_LOST` ("lease was taken over", with
    /// `our_epoch`); this owner's own re-claim, or nobody, gives
    /// [`DispatchError::LeaseExpired`] (docs/operations.md). Returns the error as classified.
    pub(super) async fn report_unsettled(
        &self,
        command: &ClaimedCommand,
        error: DispatchError,
    ) -> DispatchError {
        let (DispatchError::LeaseLost { command_id } | DispatchError::LeaseExpired { command_id }) =
            &error
        else {
            warn!(%error, code = error_code(&error), "dispatch ended without a settlement; the command is retried once its lease expires");
            return error;
        };
        let holder = self.holder(command).await;
        let (new_owner, new_epoch, status) = match &holder {
            Holder::Row {
                status,
                owner,
                epoch,
            } => (
                owner.as_ref().map_or("none", LeaseOwner::as_str),
                epoch.0,
                status.as_str(),
            ),
            Holder::Unknown | Holder::Gone => ("none", 0, "unknown"),
        };
        match classify_refusal(&command.lease, OwnSettle::NotCommitted, &holder) {
            RenewalOutcome::Lost => {
                warn!(
                    code = "LEASE_LOST",
                    new_owner,
                    new_epoch,
                    status,
                    our_epoch = command.lease.epoch.0,
                    "lease was taken over by another worker (or the command was settled); this \
                     attempt's result was dropped and nothing it computed was written"
                );
                DispatchError::LeaseLost {
                    command_id: command_id.clone(),
                }
            }
            _ => {
                warn!(
                    code = "LEASE_EXPIRED",
                    owner = new_owner,
                    epoch = new_epoch,
                    status,
                    our_epoch = command.lease.epoch.0,
                    "dispatch ended without a settlement: its lease expired before the attempt \
                     ended and no other worker holds the command; its remote call was cancelled \
                     or not made, and the command is claimed again once the lease expired"
                );
                DispatchError::LeaseExpired {
                    command_id: command_id.clone(),
                }
            }
        }
    }
}
