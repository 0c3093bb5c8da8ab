//! The store of one simulated process: the shared in-memory store, recording leases as their
//! holders see them, checking settles, holding the lease statements of a stalled process, and
//! planting the store bugs.

use std::time::Duration;

use async_trait::async_trait;
use tenantry_lifecycle::{ClaimedCommand, CommandRecord, CommandStatus, LeaseToken, Settlement};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::forward;
use tenantry_ports::lifecycle::{ClaimRequest, SettleError, StoreError};

use super::backend::Backend;
use super::{LeaseView, Shared, WorkerBug, world};

#[cfg(doc)]
use super::WorkerOp;

#[derive(Clone)]
pub(super) struct SimStore<B> {
    pub(super) inner: B,
    pub(super) world: Shared,
    pub(super) process: usize,
    pub(super) generation: u32,
    /// The process's lease owner, for the trace.
    pub(super) owner: String,
    pub(super) clock: ManualClock,
    pub(super) bug: Option<WorkerBug>,
}

fn holds(record: &CommandRecord, lease: &LeaseToken) -> bool {
    record.status == CommandStatus::Processing
        && record.lease_owner.as_ref() == Some(&lease.owner)
        && record.lease_epoch == lease.epoch
}

impl<B: Backend> SimStore<B> {
    /// Holds a lease statement of this process while the process is stalled
    /// ([`WorkerOp::Stall`]): it reaches the store when the stall ends (a stall extended
    /// meanwhile holds it longer), however long after the dispatcher checked its lease. A
    /// statement of a generation that crashed never reaches the store: its dispatch tasks were
    /// dropped, but its group commit's flushers are tasks of their own, and what was queued
    /// for them dies with the process.
    async fn held_while_stalled(&self, statement: &str) {
        let mut counted = false;
        loop {
            let (until, db_clock, running) = {
                let w = world(&self.world);
                (
                    w.stalled_until[self.process],
                    w.db_clock.clone(),
                    w.running[self.process],
                )
            };
            if running != Some(self.generation) {
                std::future::pending::<()>().await;
            }
            let Some(until) = until.filter(|until| db_clock.monotonic() < *until) else {
                return;
            };
            if !counted {
                counted = true;
                let mut w = world(&self.world);
                w.stalled_statements += 1;
                w.event(format!("{} {statement} held by the stall", self.owner));
            }
            db_clock.sleep_until(until).await;
        }
    }
}

impl<B: Backend> forward::Decorator for SimStore<B> {
    type Inner = B;
    fn inner(&self) -> &B {
        &self.inner
    }
}

#[async_trait]
impl<B: Backend> forward::CommandQueue for SimStore<B> {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        let started = self.clock.monotonic();
        self.held_while_stalled("claim").await;
        if self.bug == Some(WorkerBug::ClaimWithoutExpiryCheck) {
            let now = world(&self.world).db_clock.now();
            self.inner.expire_one_live_lease(now);
        }
        let claimed = self.inner.claim(request).await?;
        let mut w = world(&self.world);
        for command in &claimed {
            w.leases.insert(
                (command.id().clone(), command.lease.epoch.0),
                LeaseView {
                    process: self.process,
                    generation: self.generation,
                    owner: request.owner.to_string(),
                    deadline: started + request.lease_duration,
                    lost: false,
                    closed: false,
                },
            );
            w.event(format!(
                "{} claims {} {} (epoch {}, attempt {})",
                request.owner,
                command.operation,
                command.control_space_id,
                command.lease.epoch.0,
                command.attempt_count
            ));
        }
        // Judged at the claim itself, before the new holder or the old one sends anything:
        // a claim that took a lease its holder still sees live is the first fault, not the
        // call one of them makes next under it.
        if let Some(violation) = w.two_live_leases() {
            w.violations.push(violation);
        }
        Ok(claimed)
    }
    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: Duration,
    ) -> Result<LeaseToken, SettleError> {
        let started = self.clock.monotonic();
        self.held_while_stalled(&format!(
            "renewal of {} epoch {}",
            lease.command_id, lease.epoch.0
        ))
        .await;
        let current = self.inner.command(&lease.command_id);
        let result = self.inner.renew_lease(lease, lease_duration).await;
        let mut w = world(&self.world);
        let key = (lease.command_id.clone(), lease.epoch.0);
        match &result {
            Ok(_) => {
                let now = w.db_clock.now();
                let live = current.as_ref().is_some_and(|r| {
                    holds(r, lease) && r.lease_expires_at.is_some_and(|at| at > now)
                });
                if !live {
                    w.violations.push(format!(
                        "a renewal of a stale or expired lease was accepted: {} epoch {} of {} \
                         (command: {:?})",
                        lease.owner,
                        lease.epoch.0,
                        lease.command_id,
                        current.map(|r| (
                            r.status,
                            r.lease_owner,
                            r.lease_epoch.0,
                            r.lease_expires_at
                        ))
                    ));
                }
                w.renewals += 1;
                if let Some(view) = w.leases.get_mut(&key) {
                    view.deadline = view.deadline.max(started + lease_duration);
                }
            }
            Err(SettleError::LeaseLost { .. }) => {
                w.leases_lost += 1;
                if let Some(view) = w.leases.get_mut(&key) {
                    view.lost = true;
                }
                w.event(format!(
                    "{} renewal of {} epoch {} refused",
                    lease.owner, lease.command_id, lease.epoch.0
                ));
            }
            Err(_) => {}
        }
        result
    }
    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        self.held_while_stalled(&format!(
            "settle of {} epoch {}",
            lease.command_id, lease.epoch.0
        ))
        .await;
        self.settle_checked(lease, settlement).await
    }
    /// The group commit's batch: one statement (held as one by a stall), each item settled
    /// and checked as a single settle, as the trait's rule for `settle_many` has it.
    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        self.held_while_stalled(&format!("batch of {} settles", items.len()))
            .await;
        if items.len() > 1 {
            world(&self.world).batched_settles += items.len() as u64;
        }
        let mut results = Vec::with_capacity(items.len());
        for (lease, settlement) in items {
            results.push(self.settle_checked(lease, settlement).await);
        }
        Ok(results)
    }
}

impl<B: Backend> SimStore<B> {
    /// A settle as the shared store answers it, checked: a settle the store accepts from a
    /// lease that is not the command's current one is a violation.
    async fn settle_checked(
        &self,
        lease: &LeaseToken,
        settlement: &Settlement,
    ) -> Result<(), SettleError> {
        let current = self.inner.command(&lease.command_id);
        let held = current.as_ref().is_some_and(|r| holds(r, lease));
        let token = match (&current, self.bug) {
            (Some(r), Some(WorkerBug::SettleWithoutEpochCheck))
                if !held && r.status == CommandStatus::Processing =>
            {
                LeaseToken {
                    owner: r.lease_owner.clone().unwrap_or_else(|| lease.owner.clone()),
                    epoch: r.lease_epoch,
                    ..lease.clone()
                }
            }
            _ => lease.clone(),
        };
        let result = self.inner.settle(&token, settlement).await;
        let mut w = world(&self.world);
        let key = (lease.command_id.clone(), lease.epoch.0);
        let status = settlement
            .status()
            .map_or_else(|| "no change".to_owned(), |s| s.to_string());
        match &result {
            Ok(()) => {
                if !held {
                    let now_epoch = current.map_or(0, |r| r.lease_epoch.0);
                    w.violations.push(format!(
                        "a settle from a stale lease was accepted: {} epoch {} settled {} as {status} \
                         while the current epoch is {now_epoch}",
                        lease.owner, lease.epoch.0, lease.command_id
                    ));
                }
                if settlement.outcome.is_some()
                    && let Some(view) = w.leases.get_mut(&key)
                {
                    view.closed = true;
                }
                w.event(format!(
                    "{} settles {} epoch {} as {status}",
                    lease.owner, lease.command_id, lease.epoch.0
                ));
            }
            Err(SettleError::LeaseLost { .. }) => {
                w.leases_lost += 1;
                if let Some(view) = w.leases.get_mut(&key) {
                    view.closed = true;
                }
                w.event(format!(
                    "{} settle of {} epoch {} refused: lease lost",
                    lease.owner, lease.command_id, lease.epoch.0
                ));
            }
            Err(other) => w.event(format!(
                "{} settle of {} refused: {other}",
                lease.owner, lease.command_id
            )),
        }
        result
    }
}

impl<B: Backend> forward::ControlSpaceReader for SimStore<B> {}

impl<B: Backend> forward::IntakeStore for SimStore<B> {}
