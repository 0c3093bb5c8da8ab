//! The worker pool: one claimer per process feeding a bounded set of dispatch slots.
//!
//! Where [`Worker`](super::Worker)s each claim their own batch (W racing `FOR UPDATE SKIP
//! LOCKED` statements, and a worker claims again only when the slowest command of its batch
//! has settled), a [`WorkerPool`] runs one claim loop for the whole process:
//! - **remote calls** are bounded by [`WorkerPool::slots`] (`workers × claim_batch`, the same
//!   bound as W workers that each dispatch their whole claim at once; at most the remote
//!   client's own concurrency limit, [`WorkerPool::with_remote_call_limit`], so no dispatch
//!   queues inside the client with its call deadline running);
//! - **one tenant's calls** are bounded too when [`WorkerPool::with_tenant_call_limit`] is set:
//!   a dispatch takes its tenant's permit before a slot, so a tenant at its limit waits
//!   (lease renewed) without taking a slot another tenant's command could use. Such a waiting
//!   dispatch holds no place among `max_in_flight`: the pool claims into its place, up to
//!   [`WorkerPool::max_held`] (`max_in_flight + slots`) commands before their settle, so
//!   another tenant's command is claimed when the next dispatch ends, not after the bounded
//!   tenant's waiting dispatches have drained;
//! - **dispatches** in flight (claimed, their settle not yet begun) are bounded by
//!   [`WorkerPool::max_in_flight`]: [`IN_FLIGHT_PER_SLOT`] (2) per remote-call slot, counted on
//!   the slots the pool really has (after the remote call limit). A dispatch beyond the slots is
//!   the local queue: it holds its lease (per command, as with workers) and waits for a slot
//!   before its remote call. Its lease is renewed meanwhile like that of any dispatch in
//!   flight, and checked again once it holds the slot, so a wait can never let a call start on
//!   an expired lease. The rest of a dispatch (reads, the settle waiting for its group commit)
//!   does not occupy a slot, which is what lets settles share larger transactions.
//!   A dispatcher that does not renew leases gets no such queue (`max_in_flight = slots`): its
//!   lease was sized for one remote call, not for a wait before it;
//! - **no hoarding** (issue 29): without a tenant bound the pool holds at most one waiting
//!   command per call slot, so a claimed command is behind at most the call its slot is making
//!   (the slot semaphore is first in, first out): it starts its own call as soon as one call
//!   ends, within one call time, not after a backlog of calls. Under a slow remote the other
//!   replicas' claims find the rest of the backlog still pending, and every replica sends its
//!   share; a replica holds `2 × slots` commands before their settle, never more (each
//!   replica's share of a backlog is capped at `2 × min(workers × claim_batch,
//!   knowledge_fs_max_concurrent_calls)`). With a tenant bound it holds up to `3 × slots`, the
//!   extra ones waiting for their tenant (a bounded tenant's last claimed command may then
//!   wait behind several of its own calls);
//! - **a settling dispatch holds no place**: once a dispatch has sent a settlement with an
//!   outcome its remote calls are over, and the pool claims into its place while the settle
//!   waits for its group commit, up to [`WorkerPool::max_held_settling`] commands in all
//!   (`max_held` and `max_in_flight` more; docs/protocol.md, "A settling dispatch holds no
//!   claim place");
//! - whenever at least half of `max_in_flight` is free (not counting the dispatches waiting
//!   for their tenant or settling), it claims as many commands as are free, in one statement,
//!   at most up to [`WorkerPool::max_held`] before their settle and
//!   [`WorkerPool::max_held_settling`] in all (so near those bounds claims can be as small as
//!   one), and starts a task for each at once;
//! - while it is saturated (its last claim took every place it asked for, or it waits for
//!   places), a **prompt lane**
//!   with up to [`PROMPT_PLACES`] places claims one command per wake-up in its own statement
//!   and takes a saturated claim's lone commands of a tenant; it calls the remote in slots
//!   reserved for it (the other calls share the rest, and the claimer holds
//!   [`IN_FLIGHT_PER_SLOT`] per slot of those) and settles each command on its own, not queued
//!   for group commit: another tenant's new command, at the head of the queue by its turn,
//!   does not wait for the backlog's claims and settle batches (issue 33; see [`WorkerPool::prompt_places`] and
//!   docs/protocol.md, "The prompt lane").
//!
//! Under a backlog this takes commands in claims of `max_in_flight / 2` or more instead of
//! `claim_batch`, and its statements no longer race each other (only the prompt lane's
//! one-command claims run beside them); under low load a command is
//! claimed as soon as a wake-up arrives, as by an idle worker.
//! A dispatch that finishes while the pool is idle ends the idle sleep, as a worker claims
//! again after its batch: the claim and the next due time are read again, so a retry is
//! claimed when its backoff ends, not at the next idle poll.
//!
//! Shutdown stops the claims and closes the slots: the dispatches still waiting for one hand
//! their commands back at once instead of calling the remote one slot at a time, so a stop
//! waits only for the calls already made (at most `slots` of them), not for `max_in_flight`.

mod prompt_lane;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use tenantry_kernel::{LeaseOwner, TenantId};
use tenantry_ports::lifecycle::{KnowledgeFs, LifecycleStore};
use tenantry_ports::wake::{WakeSubscription, Wakeups};
use tokio::sync::{Notify, watch};
use tokio::task::{JoinError, JoinSet};
use tracing::{debug, info, warn};

use super::dispatcher::{CallSlots, DispatchError, DispatchReport, Dispatcher, SettlingPlaces};
use super::worker::{WorkerConfig, WorkerReport};
pub use prompt_lane::PROMPT_PLACES;
use prompt_lane::PromptLane;

/// Dispatches in flight per remote-call slot: one calling, one waiting with its lease (or
/// settling). One waiter per slot starts its call when the call ahead of it ends, so a replica
/// never holds claimed commands it cannot start within one call time: the rest of a backlog
/// stays pending for the other replicas (issue 29, "the pool does not hoard").
pub const IN_FLIGHT_PER_SLOT: u32 = 2;

/// One claimer, `workers × claim_batch` remote-call slots (at most the remote call limit) and
/// [`IN_FLIGHT_PER_SLOT`] times as many dispatches in flight, for a process (see the module
/// documentation). Settings are the
/// workers' ([`WorkerConfig`]): `claim_batch` sizes the slots, `idle_poll` and the wake-ups
/// time the claims when nothing is due.
pub struct WorkerPool<S, R> {
    dispatcher: Arc<Dispatcher<S, R>>,
    owner: LeaseOwner,
    config: WorkerConfig,
    /// `workers × claim_batch`: the slots before the remote call limit.
    batch_slots: u32,
    /// Remote calls at once: `batch_slots`, at most the remote client's own limit
    /// ([`WorkerPool::with_remote_call_limit`]).
    slots: u32,
    /// [`IN_FLIGHT_PER_SLOT`], or 1 when the dispatcher does not renew leases.
    in_flight_per_slot: u32,
    /// Remote calls at once for one tenant ([`WorkerPool::with_tenant_call_limit`]).
    tenant_calls: Option<u32>,
    wake: Option<WakeSubscription>,
    /// The prompt lane's own subscription to the same wake-ups.
    prompt_wake: Option<WakeSubscription>,
    /// Whether the prompt lane runs ([`WorkerPool::with_prompt_lane`]; default true).
    prompt_lane: bool,
}

impl<S, R> std::fmt::Debug for WorkerPool<S, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("owner", &self.owner)
            .field("slots", &self.slots)
            .finish_non_exhaustive()
    }
}

impl<S, R> WorkerPool<S, R>
where
    S: LifecycleStore + 'static,
    R: KnowledgeFs + 'static,
{
    /// A pool with the concurrency of `workers` workers of `config`: at most
    /// `workers × claim_batch` remote calls at once (both at least 1). Every command it claims
    /// is leased to `owner`.
    pub fn new(
        dispatcher: Arc<Dispatcher<S, R>>,
        owner: LeaseOwner,
        workers: u32,
        config: WorkerConfig,
    ) -> Self {
        let slots = workers.max(1).saturating_mul(config.claim_batch.max(1));
        // Without renewal a lease covers one remote call (it must outlive the call deadline),
        // not a wait for a slot on top of it: keep no dispatch waiting.
        let in_flight_per_slot = if dispatcher.config().renew_leases {
            IN_FLIGHT_PER_SLOT
        } else {
            1
        };
        Self {
            dispatcher,
            owner,
            config,
            batch_slots: slots,
            slots,
            in_flight_per_slot,
            tenant_calls: None,
            wake: None,
            prompt_wake: None,
            prompt_lane: true,
        }
    }

    /// Most dispatches in flight (claimed, their settle not yet begun): [`IN_FLIGHT_PER_SLOT`] per
    /// remote-call slot outside the prompt lane when the dispatcher renews leases (one calling
    /// and one waiting per slot, so the pool never holds more than it can start within one
    /// call time and leaves the rest of a backlog to other replicas), else one (a lease that is
    /// not renewed must not wait for a slot: it was sized for the remote call alone), plus the
    /// [prompt lane's places](Self::prompt_places), one per slot reserved for it. Without a
    /// lane: [`slots`](Self::slots) × [`IN_FLIGHT_PER_SLOT`] (or × 1).
    pub fn max_in_flight(&self) -> u32 {
        let places = self.prompt_places();
        (self.slots - places)
            .saturating_mul(self.in_flight_per_slot)
            .saturating_add(places)
    }

    /// Bounds the remote calls at once by `limit` as well (at least 1): the concurrency limit
    /// of the remote client (`knowledge_fs_max_concurrent_calls` in `tenantry serve`). A
    /// dispatch then waits for its call here, where its lease is renewed and checked again
    /// before the call, instead of inside a client whose call deadline already runs while it
    /// queues (a slow remote would turn that wait into timeouts after sending, outcome
    /// unknown, and re-sends). The dispatches in flight shrink with it
    /// ([`max_in_flight`](Self::max_in_flight)): a replica claims no more than its slots can
    /// start, whatever `workers × claim_batch` says.
    #[must_use]
    pub fn with_remote_call_limit(mut self, limit: usize) -> Self {
        let limit = u32::try_from(limit).unwrap_or(u32::MAX).max(1);
        self.slots = self.batch_slots.min(limit);
        self
    }

    /// Bounds the remote calls at once on behalf of any one tenant by `limit` (at least 1;
    /// `None`, the default, or a limit at or above [`slots`](Self::slots): no bound). A dispatch
    /// of a tenant at its limit waits for that tenant's previous call to end (its lease renewed,
    /// as in the local queue) without taking a slot, so one tenant's backlog cannot take every
    /// slot while another tenant's command waits (`knowledge_fs_max_concurrent_calls_per_tenant`
    /// in `tenantry serve`; docs/operations.md). Claims still follow the tenants' turns
    /// (docs/protocol.md, "Fair claims across tenants"); the dispatches waiting for their
    /// tenant do not count among [`max_in_flight`](Self::max_in_flight), and the pool holds up
    /// to [`max_held`](Self::max_held) commands.
    #[must_use]
    pub fn with_tenant_call_limit(mut self, limit: Option<usize>) -> Self {
        self.tenant_calls = limit.map(|l| u32::try_from(l).unwrap_or(u32::MAX).max(1));
        self
    }

    /// The bound on one tenant's remote calls at once, when it bounds anything: below
    /// [`slots`](Self::slots), and only when the dispatcher renews leases (a lease that is not
    /// renewed covers one remote call, not a wait for a tenant's previous call; `tenantry
    /// serve` refuses that combination of settings).
    pub fn tenant_call_limit(&self) -> Option<u32> {
        self.tenant_calls
            .filter(|&limit| limit < self.slots && self.in_flight_per_slot > 1)
    }

    /// Most commands the pool holds before their settle when a tenant's bound leaves slots
    /// idle: [`max_in_flight`](Self::max_in_flight) plus [`slots`](Self::slots) (with the
    /// bound; without it, [`max_in_flight`](Self::max_in_flight)). With those whose settle
    /// has begun: [`max_held_settling`](Self::max_held_settling).
    pub fn max_held(&self) -> u32 {
        match self.tenant_call_limit() {
            Some(_) => self.max_in_flight().saturating_add(self.slots),
            None => self.max_in_flight(),
        }
    }

    /// Most commands the pool holds in all: [`max_held`](Self::max_held) before their settle,
    /// and [`max_in_flight`](Self::max_in_flight) more whose settle has begun (a dispatch
    /// that has sent its settle holds no place among `max_in_flight`: its remote calls are
    /// over, and the pool claims into its place while the settle waits for its group commit;
    /// docs/protocol.md, "A settling dispatch holds no claim place"). An upper bound: the
    /// prompt lane's places never count as settling (its dispatches give no place back), so
    /// with a lane the pool holds at most this less [`prompt_places`](Self::prompt_places).
    pub fn max_held_settling(&self) -> u32 {
        self.max_held().saturating_add(self.max_in_flight())
    }

    /// Wakes the claimer from its idle sleep whenever `wakeups` is signalled (as
    /// [`Worker::with_wakeups`](super::Worker::with_wakeups)).
    #[must_use]
    pub fn with_wakeups(mut self, wakeups: &Wakeups) -> Self {
        self.wake = Some(wakeups.subscribe());
        self.prompt_wake = Some(wakeups.subscribe());
        self
    }

    /// Turns the prompt lane on (the default) or off (see the module documentation and
    /// [`prompt_places`](Self::prompt_places)).
    #[must_use]
    pub fn with_prompt_lane(mut self, enabled: bool) -> Self {
        self.prompt_lane = enabled;
        self
    }

    /// The prompt lane's places: the commands it holds at once and the remote-call slots
    /// reserved for it out of [`slots`](Self::slots) (the rest of the pool's calls share
    /// `slots - prompt_places`). One per 16 slots, at most [`PROMPT_PLACES`]; 0, no lane, when
    /// the pool has fewer than 16 slots, no wake-ups ([`with_wakeups`](Self::with_wakeups):
    /// the lane acts on them) or the lane is turned off.
    pub fn prompt_places(&self) -> u32 {
        if self.prompt_lane && self.prompt_wake.is_some() {
            prompt_lane::places(self.slots)
        } else {
            0
        }
    }

    /// Most remote calls at once: `workers × claim_batch`, at most the
    /// [remote call limit](Self::with_remote_call_limit).
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Free places at which the claimer claims again while dispatches are in flight: half of
    /// its own (of [`max_in_flight`](Self::max_in_flight), less the prompt lane's), rounded up.
    pub fn refill_at(&self) -> u32 {
        (self.max_in_flight() - self.prompt_places()).div_ceil(2)
    }

    /// The lease owner of this pool's claims.
    pub fn owner(&self) -> &LeaseOwner {
        &self.owner
    }

    /// Claims and dispatches until `shutdown` turns true (or its sender is dropped: nothing
    /// could stop the pool any more). Shutdown stops claiming and closes the
    /// remote-call slots: a dispatch that has not started its remote call hands its command
    /// back (pending, due at once, code
    /// [`SHUTDOWN_BEFORE_CALL`](tenantry_lifecycle::ErrorCode::ShutdownBeforeCall),
    /// nothing sent), the calls already made settle before this returns; none is cancelled. A
    /// failed claim is logged and retried after the idle interval.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) -> WorkerReport {
        let mut report = WorkerReport::default();
        let mut running: JoinSet<Result<DispatchReport, DispatchError>> = JoinSet::new();
        let refill_at = self.refill_at() as usize;
        let prompt_places = self.prompt_places();
        // The claimer's own bounds: the prompt lane's places are the lane's.
        let max_in_flight = (self.max_in_flight() - prompt_places) as usize;
        let remote_slots = Arc::new(
            CallSlots::new(
                self.slots as usize,
                self.tenant_call_limit().map(|limit| limit as usize),
            )
            .reserve_for_prompt_lane(prompt_places as usize),
        );
        let max_held = (self.max_held() - prompt_places) as usize;
        // `max_held_settling` less the lane's places, which never count as settling.
        let max_held_settling = max_held + max_in_flight;
        // The claimer's dispatches that have begun their settle (and hold no place).
        let settling_places = Arc::new(SettlingPlaces::default());
        // The prompt lane runs in a task of this future's own set: dropping the pool's future
        // aborts it, and with it (once aborted) every dispatch of its own.
        let saturated = Arc::new(AtomicBool::new(false));
        let lane_places = Arc::new(tokio::sync::Semaphore::new(prompt_places as usize));
        let lane_finished = Arc::new(Notify::new());
        // Lone commands dispatched by the claimer in the lane's places (not its own).
        let lone_running = Arc::new(AtomicUsize::new(0));
        let mut last_claim_tenants: HashSet<TenantId> = HashSet::new();
        let mut lanes: JoinSet<WorkerReport> = JoinSet::new();
        if let (true, Some(wake)) = (prompt_places > 0, self.prompt_wake.take()) {
            let lane = PromptLane {
                dispatcher: self.dispatcher.clone(),
                owner: self.owner.clone(),
                product_enabled: self.config.product_enabled.clone(),
                wake,
                saturated: saturated.clone(),
                places: lane_places.clone(),
                slots: remote_slots.clone(),
                finished: lane_finished.clone(),
            };
            lanes.spawn(lane.run(shutdown.clone()));
        }
        info!(owner = %self.owner, slots = self.slots, max_in_flight,
            per_tenant = ?remote_slots.per_tenant(), "lifecycle worker pool started");
        loop {
            while let Some(done) = running.try_join_next() {
                tally(&mut report, done);
            }
            // A dropped sender can never signal shutdown, and its `changed()` would return at
            // once in every wait below (a busy loop of claims): it stops the loop as well.
            if *shutdown.borrow() || shutdown.has_changed().is_err() {
                break;
            }
            // Dispatches waiting for their tenant's previous call (a tenant bound) hold no place:
            // the places they would take are claimed again, up to `max_held` commands before
            // their settle (the claimer looks again as soon as one starts waiting), so another
            // tenant's command is not claimed only after the bounded tenant's waiting
            // dispatches have drained. Without a bound none wait so.
            // The lone commands in the lane's places are the lane's, not the claimer's.
            // Settling dispatches (their settle sent, their calls over) hold no place either,
            // up to `max_held_settling` commands in all.
            let own = running
                .len()
                .saturating_sub(lone_running.load(Ordering::Acquire));
            let before_settle = own.saturating_sub(settling_places.settling());
            let counted = before_settle.saturating_sub(remote_slots.waiting_for_tenant());
            let counted_free = max_in_flight.saturating_sub(counted);
            let free = counted_free
                .min(max_held.saturating_sub(before_settle))
                .min(max_held_settling.saturating_sub(own));
            if counted_free < refill_at || free == 0 {
                // Busy: wait for dispatches to finish (or shutdown). A new command cannot be
                // claimed here meanwhile: the prompt lane may.
                saturated.store(true, Ordering::Release);
                // Biased (a fixed polling order): no branch order drawn from tokio's unseeded
                // generator, so a simulated run depends on its seed alone.
                tokio::select! {
                    biased;
                    Some(done) = running.join_next() => tally(&mut report, done),
                    _ = shutdown.changed() => {}
                    () = remote_slots.tenant_waiter_arrived() => {}
                    () = settling_places.freed() => {}
                }
                continue;
            }
            // Before the claim: a wake sent while claiming makes the sleep below end at once.
            if let Some(wake) = self.wake.as_mut() {
                wake.mark_seen();
            }
            let enabled = self.config.product_enabled.load(Ordering::Relaxed);
            // `free` ≤ `max_in_flight`, a u32.
            let limit = u32::try_from(free).unwrap_or(u32::MAX);
            let claim = self.dispatcher.claim(&self.owner, enabled, limit).await;
            // Saturated: the claim took every place it asked for, so more is due than the pool
            // has room for, and the next claim waits for places (the prompt lane acts).
            let saturated_now = matches!(&claim, Ok((claimed, _)) if claimed.len() >= free);
            saturated.store(saturated_now, Ordering::Release);
            match claim {
                Ok((claimed, started)) if !claimed.is_empty() => {
                    report.claimed += claimed.len() as u64;
                    let lone = if saturated_now && prompt_places > 0 {
                        prompt_lane::lone_tenants(&claimed, &last_claim_tenants)
                    } else {
                        Vec::new()
                    };
                    if prompt_places > 0 {
                        last_claim_tenants = claimed.iter().map(|c| c.tenant_id.clone()).collect();
                    }
                    for (i, command) in claimed.into_iter().enumerate() {
                        let dispatcher = self.dispatcher.clone();
                        let slots = remote_slots.clone();
                        // A saturated claim's lone command of a tenant (not one of a
                        // backlog's) takes a free place of the prompt lane.
                        if let Some(place) = lone
                            .get(i)
                            .copied()
                            .unwrap_or(false)
                            .then(|| prompt_lane::take_place(&lane_places))
                            .flatten()
                        {
                            let counted = prompt_lane::Counted::enter(&lone_running);
                            running.spawn(prompt_lane::dispatch(
                                dispatcher,
                                slots,
                                command,
                                (started, enabled),
                                (place, counted),
                            ));
                            continue;
                        }
                        // Boxed: a dispatch's future is several kilobytes, and the task
                        // would otherwise copy it whole into its cell, out of the cell for
                        // its first poll's stage and again when its output is read
                        // (`memmove` was the client's largest single cost in the
                        // lifecycle bench's profile).
                        running.spawn(Box::pin(SettlingPlaces::scope(
                            settling_places.clone(),
                            async move {
                                dispatcher
                                    .dispatch_claimed(command, started, enabled, Some(&slots))
                                    .await
                            },
                        )));
                    }
                }
                Ok(_) => {
                    let idle = self.idle_sleep(enabled).await;
                    let sleep = self.dispatcher.clock().sleep(idle);
                    let wake = async {
                        match self.wake.as_mut() {
                            Some(wake) => wake.woken().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        biased;
                        () = sleep => {}
                        () = wake => {}
                        _ = shutdown.changed() => {}
                        Some(done) = running.join_next() => {
                            // A settle may have made a command due (a retry): look again,
                            // and sleep until the store's next due time.
                            tally(&mut report, done);
                        }
                        // The same for a dispatch of the prompt lane.
                        () = lane_finished.notified() => {}
                    }
                }
                Err(error) => {
                    warn!(%error, "claim failed; retrying after the idle interval");
                    // No wake-up shortens this pause: the store is failing.
                    let sleep = self.dispatcher.clock().sleep(self.config.idle_poll);
                    tokio::pin!(sleep);
                    loop {
                        tokio::select! {
                            biased;
                            () = &mut sleep => break,
                            _ = shutdown.changed() => break,
                            Some(done) = running.join_next() => tally(&mut report, done),
                        }
                    }
                }
            }
        }
        // Dispatches still waiting for a slot (or not yet at it) hand their commands back
        // without calling the remote; only the calls already made are waited for.
        remote_slots.close();
        while let Some(done) = running.join_next().await {
            tally(&mut report, done);
        }
        while let Some(lane) = lanes.join_next().await {
            match lane {
                Ok(lane) => report.add(&lane),
                Err(error) => warn!(%error, "the prompt lane ended abnormally"),
            }
        }
        info!(owner = %self.owner, claimed = report.claimed, "lifecycle worker pool stopped");
        report
    }

    /// How long to sleep when idle: until the store's next waiting command is due, at most the
    /// idle poll. A failed look-up falls back to the idle poll.
    async fn idle_sleep(&self, product_enabled: bool) -> std::time::Duration {
        match self.dispatcher.next_due_in(product_enabled).await {
            Ok(Some(due)) => due.min(self.config.idle_poll),
            Ok(None) => self.config.idle_poll,
            Err(error) => {
                debug!(%error, "next due time unknown; sleeping the idle poll");
                self.config.idle_poll
            }
        }
    }
}

/// Counts one finished dispatch (`claimed` is counted at the claim).
fn tally(
    report: &mut WorkerReport,
    done: Result<Result<DispatchReport, DispatchError>, JoinError>,
) {
    match done {
        Ok(Ok(outcome)) if outcome.completed => report.completed += 1,
        Ok(Ok(_)) => {}
        Ok(Err(_)) => report.errors += 1,
        Err(error) => {
            // A dispatch task panicked (a bug): its command stays leased until expiry.
            warn!(%error, "a dispatch task ended abnormally; its command is retried after its lease expires");
            report.errors += 1;
        }
    }
}
