//! Claim and lease: claiming due commands, renewing the lease of a dispatch in flight, and
//! making each remote call only on a lease this worker can prove live (docs/protocol.md,
//! "Leases, renewal and the attempt window").

use std::convert::Infallible;

use tenantry_kernel::LeaseOwner;
use tenantry_lifecycle::{ClaimedCommand, CommandRecord};
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandFilter, KnowledgeFs, LifecycleStore, RemoteError, RenewalOutcome,
    SettleError, StoreError,
};
use tokio::time::Instant;
use tracing::{Instrument, debug, info_span, warn};

use super::{DispatchError, Dispatcher};
use crate::lifecycle::lease::{Holder, LeaseState, OwnSettle, Refusal, classify_refusal};

/// What one renewal did ([`Dispatcher::renew_once`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// The store extended the lease.
    Renewed,
    /// The store refused (now or before): the lease is gone.
    Refused,
    /// The store failed; the lease may still be live there.
    Failed,
}

impl<S: LifecycleStore, R: KnowledgeFs> Dispatcher<S, R> {
    /// Claims, and returns the claimed commands with the instant the claim started (the lease
    /// cannot have started before it).
    pub(in crate::lifecycle) async fn claim(
        &self,
        owner: &LeaseOwner,
        product_enabled: bool,
        limit: u32,
    ) -> Result<(Vec<ClaimedCommand>, Instant), StoreError> {
        let started = self.clock.monotonic();
        let span = info_span!(
            "lifecycle_claim",
            lease_owner = %owner,
            limit,
            claimed = tracing::field::Empty,
        );
        let claimed = self
            .store
            .claim(&ClaimRequest {
                owner: owner.clone(),
                lease_duration: self.config.lease_duration,
                include_provision: product_enabled,
                limit,
                call_deadline: self.config.call_deadline,
            })
            .instrument(span.clone())
            .await?;
        span.record("claimed", claimed.len());
        if let Some(first) = claimed.first() {
            *self
                .store_anchor
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) =
                Some((first.claimed_at, self.clock.monotonic()));
        }
        Ok((claimed, started))
    }

    /// Renews the lease of `command` every third of the lease length, forever; after a renewal
    /// is refused it stops renewing (and waits forever). A refusal is reported by who has the
    /// command ([`classify_refusal`]): when this attempt already sent the settle that ends its
    /// lease, the report waits for that settle's answer ([`Self::report_deferred_refusal`]),
    /// since the refusal is most likely the settle's own doing. A failed renewal (storage
    /// error) is retried at the next tick; the local deadline is not moved then (once it
    /// passes, a call in flight is cancelled: [`Self::call`]).
    pub(super) async fn keep_renewed(
        &self,
        command: &ClaimedCommand,
        lease: &LeaseState,
    ) -> Infallible {
        let period = self.config.lease_duration / 3;
        if !self.config.renew_leases || period.is_zero() {
            return std::future::pending().await;
        }
        loop {
            self.clock.sleep(period).await;
            if self.renew_once(command, lease).await == Renewal::Refused {
                return std::future::pending().await;
            }
        }
    }

    /// One renewal of `command`'s lease: extends the local deadline when the store renewed it,
    /// records and reports a refusal (once), counts a storage failure.
    async fn renew_once(&self, command: &ClaimedCommand, lease: &LeaseState) -> Renewal {
        if lease.is_refused() {
            return Renewal::Refused;
        }
        let started = self.clock.monotonic();
        let span = info_span!("lease_renewal", epoch = command.lease.epoch.0);
        match self
            .store
            .renew_lease(&command.lease, self.config.lease_duration)
            .instrument(span)
            .await
        {
            Ok(_) => {
                lease.extend(started + self.config.lease_duration);
                self.record_renewal(command, RenewalOutcome::Renewed);
                Renewal::Renewed
            }
            Err(SettleError::LeaseLost { .. }) => {
                if lease.refused() == Refusal::Report {
                    let holder = self.holder(command).await;
                    let outcome =
                        classify_refusal(&command.lease, OwnSettle::NotCommitted, &holder);
                    self.report_refusal(command, outcome, &holder);
                }
                Renewal::Refused
            }
            Err(error) => {
                self.record_renewal(command, RenewalOutcome::Failed);
                warn!(%error, "lease renewal failed; trying again at the next tick");
                Renewal::Failed
            }
        }
    }

    /// Refuses to start a remote call on a lease this worker cannot prove live (a renewal was
    /// refused, or its local deadline, counted from before the claim or the last renewal,
    /// passed and a renewal now is refused or fails). A claim or a renewal that took long
    /// (a database that was slow to answer, case 014) thus costs one renewal, not the attempt.
    async fn ensure_lease(&self, command: &ClaimedCommand) -> Result<(), DispatchError> {
        let expired = || DispatchError::LeaseExpired {
            command_id: command.id().clone(),
        };
        let Some(lease) = self.leases.get(command.id(), command.lease.epoch) else {
            return Err(expired());
        };
        if self
            .leases
            .is_live(command.id(), command.lease.epoch, self.clock.monotonic())
        {
            return Ok(());
        }
        if lease.is_refused() || !self.config.renew_leases {
            return Err(expired());
        }
        match self.renew_once(command, &lease).await {
            Renewal::Renewed => Ok(()),
            Renewal::Refused | Renewal::Failed => Err(expired()),
        }
    }

    /// Makes one remote call of `command`'s attempt (docs/protocol.md, "Leases, renewal and
    /// the attempt window"): waits until no other attempt of the command in this process has a
    /// call in flight, checks the lease ([`Self::ensure_lease`]), and cancels the call (drops
    /// it) as soon as the lease can no longer be proven live. One process never has two
    /// requests of one command in flight (case 014).
    ///
    /// # Errors
    /// [`DispatchError::LeaseExpired`] when the lease could not be proven live before the call
    /// or ended during it (the caller classifies it by who holds the command now).
    pub(super) async fn call<T>(
        &self,
        command: &ClaimedCommand,
        call: impl Future<Output = Result<T, RemoteError>>,
    ) -> Result<Result<T, RemoteError>, DispatchError> {
        let _turn = self.leases.call_turn(command.id()).await;
        if tenantry_kernel::planted!("call-without-lease-check") {
            // Planted (verification only): the call goes out without proving the lease live
            // and is not cancelled when it ends.
            return Ok(call.await);
        }
        self.ensure_lease(command).await?;
        let Some(lease) = self.leases.get(command.id(), command.lease.epoch) else {
            return Err(DispatchError::LeaseExpired {
                command_id: command.id().clone(),
            });
        };
        let span = info_span!("remote_call", epoch = command.lease.epoch.0);
        let call = call.instrument(span);
        tokio::select! {
            biased;
            () = lease.ended(self.clock.as_ref()) => {
                warn!(
                    our_epoch = command.lease.epoch.0,
                    "the lease can no longer be proven live (renewals failed past its deadline, \
                     or one was refused): the remote call in flight was cancelled"
                );
                Err(DispatchError::LeaseExpired {
                    command_id: command.id().clone(),
                })
            }
            answer = call => Ok(answer),
        }
    }

    /// The command's row as the store has it now, for a refused renewal or a lost lease.
    pub(super) async fn holder(&self, command: &ClaimedCommand) -> Holder {
        match self.read_row(command).await {
            Ok(Some(row)) => Holder::Row {
                status: row.status,
                owner: row.lease_owner,
                epoch: row.lease_epoch,
            },
            Ok(None) => Holder::Gone,
            Err(error) => {
                debug!(%error, "reading the command after a refused renewal failed");
                Holder::Unknown
            }
        }
    }

    async fn read_row(
        &self,
        command: &ClaimedCommand,
    ) -> Result<Option<CommandRecord>, StoreError> {
        let rows = self
            .store
            .list_commands(&CommandFilter {
                tenant_id: Some(command.tenant_id.clone()),
                control_space_id: Some(command.control_space_id.clone()),
                limit: 1000,
                ..CommandFilter::default()
            })
            .await?;
        Ok(rows.into_iter().find(|r| &r.id == command.id()))
    }
}
