//! The worker pool's prompt lane: a newly enqueued command is claimed and settled beside the
//! backlog's batches while the pool is saturated (issue 33, fairness across tenants;
//! docs/protocol.md, "The prompt lane").
//!
//! Under a backlog the pool's one claimer runs claims of `max_in_flight / 2` commands or more
//! back to back, and a settle queues for group commit behind up to two batches in flight: a
//! command enqueued then waits for the claim running, for one more, and for a batch of
//! settles, although its turn puts it at the head of the queue. The lane removes those waits
//! for the few commands that arrive while the pool is saturated:
//! - it wakes on the same wake-ups as the claimer (an intake of this process, or a
//!   notification), and acts only while the claimer is saturated (its last claim took every
//!   place it asked for, or it waits for places to free); otherwise the claimer is idle or about
//!   to claim, claims the new command itself, and the lane does nothing;
//! - on each such wake-up it claims one command into a free place (it has at most
//!   [`PROMPT_PLACES`]) in its own small statement, in the same turn order, so it takes the
//!   head of the queue: the newly arrived tenant's command, or the backlog's next one when the
//!   claimer took that command first;
//! - the claimer gives the lane's free places to the lone commands of each saturated claim
//!   ([`lone_tenants`]: the only command of their tenant in it, of a tenant absent from the
//!   claimer's previous claim; a backlog's consecutive turns put its commands in claim after
//!   claim), so a new command that the claimer's own claim took is dispatched in the lane too;
//! - each dispatch calls the remote in one of the slots reserved for the lane and settles on
//!   its own (a batch of one, not queued for group commit); every rule of the dispatch is that
//!   of any other (leases, renewal, compare-and-sets, hand-back at shutdown).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tenantry_kernel::{LeaseOwner, TenantId};
use tenantry_lifecycle::ClaimedCommand;
use tenantry_ports::lifecycle::{KnowledgeFs, LifecycleStore};
use tenantry_ports::wake::WakeSubscription;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::debug;

use super::tally;
use crate::lifecycle::dispatcher::{CallSlots, DispatchError, DispatchReport, Dispatcher};
use crate::lifecycle::worker::WorkerReport;

/// Most commands the prompt lane holds at once (claimed, not yet settled), and the most remote
/// calls it makes at once: 4, fewer on a small pool (one per 16 remote-call slots; see
/// `WorkerPool::prompt_places`).
pub const PROMPT_PLACES: u32 = 4;

/// The lane's places for a pool of `slots` remote-call slots: one per 16 slots, at most
/// [`PROMPT_PLACES`] (8 workers × 16 with no lower remote call limit, as the benchmarks' pools:
/// 4). A pool of fewer than 16 slots has no lane (`tenantry serve`'s defaults: at most
/// `knowledge_fs_max_concurrent_calls` = 8 slots): every slot it reserved would be more than
/// a sixteenth of its calls.
pub(super) fn places(slots: u32) -> u32 {
    (slots / 16).min(PROMPT_PLACES)
}

/// The lane of one pool run.
pub(super) struct PromptLane<S, R> {
    pub(super) dispatcher: Arc<Dispatcher<S, R>>,
    pub(super) owner: LeaseOwner,
    pub(super) product_enabled: Arc<AtomicBool>,
    pub(super) wake: WakeSubscription,
    /// Set by the claimer: its last claim took every place it asked for.
    pub(super) saturated: Arc<AtomicBool>,
    /// The lane's places, shared with the claimer ([`take_place`]).
    pub(super) places: Arc<Semaphore>,
    pub(super) slots: Arc<CallSlots>,
    /// Told whenever one of the lane's dispatches ends, so an idle claimer looks again (a
    /// settled retry may be due).
    pub(super) finished: Arc<Notify>,
}

/// One dispatch counted in a counter while it lives.
pub(super) struct Counted(Arc<AtomicUsize>);

impl Counted {
    pub(super) fn enter(counter: &Arc<AtomicUsize>) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Self(counter.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A free place of the lane, if one is free: the claimer dispatches the lone commands of a
/// saturated claim ([`lone_tenants`]) in the lane while it has places, so a newly arrived
/// tenant's command that the claimer took first is not settled behind a batch either.
pub(super) fn take_place(places: &Arc<Semaphore>) -> Option<OwnedSemaphorePermit> {
    places.clone().try_acquire_owned().ok()
}

/// For each command of `claimed`, whether it is *lone*: its tenant's only command in the
/// claim, and its tenant had none in the claimer's `previous` claim. A tenant with a backlog
/// has consecutive turns, so claim after claim takes its commands (several per claim when few
/// tenants have backlogs, one per claim when up to a claim's size of them do); a lone command
/// arrived without a backlog behind it: the commands the lane exists for. (Beyond a claim's
/// size of tenants with backlogs, consecutive claims take different tenants and their
/// commands count as lone; the lane's places bound what that costs.)
pub(super) fn lone_tenants(claimed: &[ClaimedCommand], previous: &HashSet<TenantId>) -> Vec<bool> {
    let mut per_tenant: HashMap<&TenantId, usize> = HashMap::new();
    for command in claimed {
        *per_tenant.entry(&command.tenant_id).or_default() += 1;
    }
    claimed
        .iter()
        .map(|command| {
            per_tenant.get(&command.tenant_id) == Some(&1) && !previous.contains(&command.tenant_id)
        })
        .collect()
}

/// A dispatch of `command` in the lane (claimed at `claim`'s instant with the product enabled
/// or not), holding `held` (its place) until it ends; boxed, as every dispatch task of the
/// pool.
pub(super) fn dispatch<S, R, H>(
    dispatcher: Arc<Dispatcher<S, R>>,
    slots: Arc<CallSlots>,
    command: ClaimedCommand,
    (started, enabled): (Instant, bool),
    held: H,
) -> Pin<Box<dyn Future<Output = Result<DispatchReport, DispatchError>> + Send>>
where
    S: LifecycleStore + 'static,
    R: KnowledgeFs + 'static,
    H: Send + 'static,
{
    Box::pin(async move {
        let _held = held;
        dispatcher
            .dispatch_prompt(command, started, enabled, &slots)
            .await
    })
}

impl<S, R> PromptLane<S, R>
where
    S: LifecycleStore + 'static,
    R: KnowledgeFs + 'static,
{
    /// Runs until `shutdown` turns true (or its sender is dropped), then waits for its
    /// dispatches (the pool closes the slots, so those that have not called hand their
    /// commands back). Each wake-up while the claimer is saturated claims the head of the
    /// queue, one command, into a free place. A failed claim is logged and left to the
    /// claimer, which retries it.
    pub(super) async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> WorkerReport {
        let mut report = WorkerReport::default();
        let mut running: JoinSet<Result<DispatchReport, DispatchError>> = JoinSet::new();
        // Wake-ups sent before the pool started are the claimer's (its first claim finds
        // their commands); the lane acts on later ones only.
        self.wake.mark_seen();
        loop {
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            tokio::select! {
                biased;
                _ = shutdown.changed() => continue,
                Some(done) = running.join_next() => {
                    tally(&mut report, done);
                    self.finished.notify_one();
                    continue;
                }
                () = self.wake.woken() => {}
            }
            self.wake.mark_seen();
            if !self.saturated.load(Ordering::Acquire) {
                // The claimer is not saturated: it claims the new command itself.
                continue;
            }
            let Some(place) = take_place(&self.places) else {
                // Every place is taken: the claimer's next claim leads with the command.
                continue;
            };
            let enabled = self.product_enabled.load(Ordering::Relaxed);
            match self.dispatcher.claim(&self.owner, enabled, 1).await {
                Ok((claimed, started)) => {
                    report.claimed += claimed.len() as u64;
                    if let Some(command) = claimed.into_iter().next() {
                        running.spawn(dispatch(
                            self.dispatcher.clone(),
                            self.slots.clone(),
                            command,
                            (started, enabled),
                            place,
                        ));
                    }
                }
                Err(error) => debug!(%error, "prompt lane claim failed; left to the claimer"),
            }
        }
        while let Some(done) = running.join_next().await {
            tally(&mut report, done);
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use tenantry_ports::lifecycle::conformance::create_plan;
    use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
    use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue, IntakeStore};

    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::parse(name).unwrap()
    }

    /// Claimed commands of the given tenants, in that order.
    async fn claimed_of(tenants: &[&str]) -> Vec<ClaimedCommand> {
        let store = InMemoryLifecycleStore::new();
        let at = Utc.timestamp_opt(1_900_000_000, 0).single().unwrap();
        for i in 0..tenants.len() {
            store
                .submit(&create_plan(&format!("cs{i}"), &format!("k{i}"), at))
                .await
                .unwrap();
        }
        let mut claimed = store
            .claim(&ClaimRequest {
                owner: LeaseOwner::parse("w1").unwrap(),
                lease_duration: std::time::Duration::from_secs(60),
                include_provision: true,
                limit: u32::try_from(tenants.len()).unwrap(),
                call_deadline: std::time::Duration::ZERO,
            })
            .await
            .unwrap();
        assert_eq!(claimed.len(), tenants.len());
        for (command, name) in claimed.iter_mut().zip(tenants) {
            command.tenant_id = tenant(name);
        }
        claimed
    }

    #[tokio::test]
    async fn a_lone_command_is_its_tenants_only_one_and_new_since_the_previous_claim() {
        let cases: [(&[&str], &[&str], &[bool]); 5] = [
            (&[], &[], &[]),
            (&["a", "a", "b", "c"], &[], &[false, false, true, true]),
            (&["a", "a", "b", "c"], &["c"], &[false, false, true, false]),
            (&["a", "b", "c"], &["a", "b", "c"], &[false, false, false]),
            (&["b", "a", "b"], &["c"], &[false, true, false]),
        ];
        for (tenants, previous, expected) in cases {
            let claimed = claimed_of(tenants).await;
            let previous: HashSet<TenantId> = previous.iter().map(|t| tenant(t)).collect();
            assert_eq!(
                lone_tenants(&claimed, &previous),
                expected,
                "{tenants:?} after {previous:?}"
            );
        }
    }

    #[test]
    fn places_are_one_per_16_slots_up_to_4() {
        for (slots, expected) in [
            (0, 0),
            (15, 0),
            (16, 1),
            (31, 1),
            (32, 2),
            (64, 4),
            (1_000, 4),
        ] {
            assert_eq!(places(slots), expected, "{slots} slots");
        }
    }
}
