//! The deterministic simulation of scoped writes (issue 12, part 3 of the simulation): the
//! engine's real [`ScopedWrites`] runtimes of two processes and an operator's, over one shared
//! in-memory host storage, on a paused current-thread runtime with one
//! [`ManualClock::following_tokio`].
//!
//! A seeded schedule starts fenced writes on two scopes of one binding (each a remote mutation
//! through [`ScopeContext::dispatch`](tenantry_engine::scoped_writes::ScopeContext::dispatch)
//! whose fate the run draws: answered, refused with a known outcome, never sent, outcome
//! unknown at once, or no answer before the request timeout), drops callers' futures
//! (cancellation), crashes a process (its storage calls fail from then on, its callers are
//! dropped, its requests in flight run to their end) and restarts it with a new owner, lets
//! an operator clear a scope's record, and lets virtual time pass.
//!
//! Checked against the remote's view of every request: writes to one scope never overlap; no
//! write is dispatched while an earlier unknown outcome of its scope is unresolved (not yet
//! cleared by an operator); while a request is in flight or its outcome is unresolved, host
//! storage holds a marker (intent or fence) for its scope; an operator's clear never erases
//! the record of a request still in flight.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tenantry_engine::scoped_writes::admin::ClearTarget;
use tenantry_engine::scoped_writes::{FenceConfig, FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::{Binding, DispatchOutcome, FenceMarker, RecordKind, ScopeIdentity};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::host_storage::fake::InMemoryHostStorage;
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings, HostStorageError};
use tokio::task::JoinHandle;

use super::SimFailure;

/// Writing processes.
pub const PROCESSES: usize = 2;
/// Object scopes written (of one binding).
pub const SCOPES: usize = 2;
/// The dispatch deadline of every runtime.
pub const DEADLINE: Duration = Duration::from_secs(20);
/// A request ends (answer or timeout) strictly before the dispatch deadline.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(19);
const TRACE: usize = 40;

/// A deliberately broken component, to show the run finds what it must (test-only switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopedWriteBug {
    /// Reads of host storage show an expired intent as free (a tombstone): the claim of a
    /// process that crashed mid-request lapses into "free" instead of a fence.
    ExpiredIntentCountsAsFree,
    /// The operator clears a record by writing the tombstone directly, without the clear's
    /// lock and age check.
    ClearWithoutAgeCheck,
}

/// One step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceOp {
    /// Process `p` starts a write of scope `s`.
    Write(usize, usize),
    /// The oldest pending caller of process `p` is dropped (cancellation).
    Cancel(usize),
    /// Process `p` crashes.
    Crash(usize),
    /// Process `p` (if crashed) restarts with a new owner.
    Restart(usize),
    /// The operator clears scope `s`'s record (after reconciling with the remote).
    Clear(usize),
    /// Virtual time passes, seconds (0: the ready tasks run).
    Run(u64),
}

/// Draws the next step.
pub fn draw(rng: &mut StdRng) -> FenceOp {
    match rng.random_range(0..16u8) {
        0..=4 => FenceOp::Write(rng.random_range(0..PROCESSES), rng.random_range(0..SCOPES)),
        5 => FenceOp::Cancel(rng.random_range(0..PROCESSES)),
        6 => FenceOp::Crash(rng.random_range(0..PROCESSES)),
        7 => FenceOp::Restart(rng.random_range(0..PROCESSES)),
        8 => FenceOp::Clear(rng.random_range(0..SCOPES)),
        _ => FenceOp::Run([0, 1, 5, 15, 60][rng.random_range(0..5usize)]),
    }
}

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceRunSummary {
    /// Steps of the schedule.
    pub steps: u64,
    /// Requests dispatched to the remote.
    pub dispatched: u64,
    /// Operator clears that removed a record.
    pub cleared: u64,
    /// The last events (equal seeds give equal traces).
    pub trace: Vec<String>,
}

/// A request as the remote sees it.
#[derive(Debug, Clone)]
struct Request {
    scope: usize,
    process: usize,
    generation: u32,
}

struct World {
    rng: StdRng,
    clock: ManualClock,
    /// Requests in flight, by id.
    in_flight: BTreeMap<u64, Request>,
    /// Scopes with an unknown outcome no operator has resolved yet.
    unresolved: BTreeSet<usize>,
    next_request: u64,
    dispatched: u64,
    cleared: u64,
    violations: Vec<String>,
    trace: VecDeque<String>,
}

impl World {
    fn event(&mut self, text: String) {
        if self.trace.len() == TRACE {
            self.trace.pop_front();
        }
        let at = self.clock.now().timestamp() - START;
        self.trace.push_back(format!("t={at}s {text}"));
    }
}

type Shared = Arc<Mutex<World>>;

fn world(shared: &Shared) -> MutexGuard<'_, World> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

const START: i64 = 1_900_000_000;

/// One process's view of the shared host storage: nothing after its crash.
struct ProcStorage {
    inner: Arc<InMemoryHostStorage>,
    dead: Arc<AtomicBool>,
    bug: Option<ScopedWriteBug>,
    clock: ManualClock,
    /// Whether it answers `get_now` / `compare_and_set_now` (as an in-memory store does) or
    /// leaves them to the async methods (as the SQL adapter does): the simulated processes
    /// alternate, so both paths of the runtime share the records.
    answers_now: bool,
}

impl ProcStorage {
    fn alive(&self, operation: &'static str) -> Result<(), HostStorageError> {
        if self.dead.load(Ordering::Relaxed) {
            Err(HostStorageError::unavailable(
                operation,
                "the process crashed",
            ))
        } else {
            Ok(())
        }
    }
}

impl ProcStorage {
    /// Whether the planted [`ScopedWriteBug::ExpiredIntentCountsAsFree`] shows `stored` as
    /// free: an intent past its expiry.
    fn shows_as_free(&self, stored: Option<&Value>) -> bool {
        self.bug == Some(ScopedWriteBug::ExpiredIntentCountsAsFree)
            && stored
                .and_then(FenceMarker::from_value)
                .is_some_and(|marker| {
                    marker.kind == RecordKind::Intent
                        && marker
                            .expires_at_ms
                            .is_some_and(|at| at <= self.clock.now().timestamp_millis())
                })
    }
}

#[async_trait]
impl HostStorage for ProcStorage {
    async fn now_ms(&self) -> Result<i64, HostStorageError> {
        self.alive("now")?;
        self.inner.now_ms().await
    }

    async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError> {
        self.alive("keys")?;
        self.inner.keys(binding).await
    }

    async fn get(&self, binding: &Binding, key: &str) -> Result<Option<Value>, HostStorageError> {
        self.alive("get")?;
        let value = self.inner.get(binding, key).await?;
        if self.shows_as_free(value.as_ref()) {
            return Ok(Some(Value::Null));
        }
        Ok(value)
    }

    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> Result<(), HostStorageError> {
        self.alive("set")?;
        self.inner.set(binding, key, value).await
    }

    async fn compare_and_set(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        value: &Value,
    ) -> Result<bool, HostStorageError> {
        self.alive("compare_and_set")?;
        if self.bug == Some(ScopedWriteBug::ExpiredIntentCountsAsFree)
            && expected.is_some_and(Value::is_null)
        {
            // A swap from the tombstone also takes over an expired intent (which reads as
            // free), whether or not the runtime read the record first; any other record
            // swaps as usual.
            let stored = self.inner.get(binding, key).await?;
            if self.shows_as_free(stored.as_ref()) {
                return self
                    .inner
                    .compare_and_set(binding, key, stored.as_ref(), value)
                    .await;
            }
        }
        self.inner
            .compare_and_set(binding, key, expected, value)
            .await
    }

    fn get_now(
        &self,
        binding: &Binding,
        key: &str,
    ) -> Option<Result<Option<Arc<Value>>, HostStorageError>> {
        if !self.answers_now {
            return None;
        }
        if let Err(error) = self.alive("get") {
            return Some(Err(error));
        }
        let read = self.inner.get_now(binding, key)?;
        Some(read.map(|value| {
            if self.shows_as_free(value.as_deref()) {
                Some(Arc::new(Value::Null))
            } else {
                value
            }
        }))
    }

    fn compare_and_set_now(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Arc<Value>>,
        value: &Arc<Value>,
    ) -> Option<Result<bool, HostStorageError>> {
        if !self.answers_now {
            return None;
        }
        if let Err(error) = self.alive("compare_and_set") {
            return Some(Err(error));
        }
        if self.bug == Some(ScopedWriteBug::ExpiredIntentCountsAsFree)
            && expected.is_some_and(|expected| expected.is_null())
        {
            // As in `compare_and_set`: the tombstone swap also takes over an expired intent.
            let stored = match self.inner.get_now(binding, key)? {
                Ok(stored) => stored,
                Err(error) => return Some(Err(error)),
            };
            if self.shows_as_free(stored.as_deref()) {
                return self
                    .inner
                    .compare_and_set_now(binding, key, stored.as_ref(), value);
            }
        }
        self.inner
            .compare_and_set_now(binding, key, expected, value)
    }
}

#[async_trait]
impl HostStorageBindings for ProcStorage {
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Vec<Binding>, HostStorageError> {
        self.alive("bindings")?;
        self.inner.bindings_with_key_prefix(key_prefix).await
    }
}

/// What the network does to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Applied,
    Refused,
    NotSent,
    Unknown,
    NoAnswer,
}

struct Process {
    writes: ScopedWrites<ProcStorage>,
    dead: Arc<AtomicBool>,
    generation: u32,
    callers: VecDeque<JoinHandle<()>>,
}

/// The simulated system of one run.
struct FenceSim {
    world: Shared,
    clock: ManualClock,
    storage: Arc<InMemoryHostStorage>,
    operator: ScopedWrites<ProcStorage>,
    processes: Vec<Process>,
    binding: Binding,
    bug: Option<ScopedWriteBug>,
}

fn scope(s: usize) -> ScopeIdentity {
    ScopeIdentity::object(format!("kb-{s}"))
}

impl FenceSim {
    fn new(seed: u64, bug: Option<ScopedWriteBug>) -> Result<Self, String> {
        let start = Utc
            .timestamp_opt(START, 0)
            .single()
            .unwrap_or(chrono::DateTime::<Utc>::MIN_UTC);
        let clock = ManualClock::following_tokio(start);
        // The database's clock: the one every fence record is judged on.
        let storage = Arc::new(InMemoryHostStorage::new().with_clock(Arc::new(clock.clone())));
        let world = Arc::new(Mutex::new(World {
            rng: StdRng::seed_from_u64(seed ^ 0xfe_4ce5),
            clock: clock.clone(),
            in_flight: BTreeMap::new(),
            unresolved: BTreeSet::new(),
            next_request: 0,
            dispatched: 0,
            cleared: 0,
            violations: Vec::new(),
            trace: VecDeque::new(),
        }));
        let binding = Binding::parse("installation-1").map_err(|e| e.to_string())?;
        let operator = ScopedWrites::with_config(
            Arc::new(ProcStorage {
                inner: Arc::clone(&storage),
                dead: Arc::default(),
                bug: None,
                clock: clock.clone(),
                answers_now: false,
            }),
            Arc::new(clock.clone()),
            FenceConfig::with_deadline(DEADLINE).with_owner("operator"),
        );
        let mut sim = Self {
            world,
            clock,
            storage,
            operator,
            processes: Vec::new(),
            binding,
            bug,
        };
        for p in 0..PROCESSES {
            let process = sim.process(p, 1);
            sim.processes.push(process);
        }
        Ok(sim)
    }

    fn process(&self, p: usize, generation: u32) -> Process {
        let dead = Arc::new(AtomicBool::new(false));
        let writes = ScopedWrites::with_config(
            Arc::new(ProcStorage {
                inner: Arc::clone(&self.storage),
                dead: Arc::clone(&dead),
                bug: self.bug,
                clock: self.clock.clone(),
                answers_now: p % 2 == 1,
            }),
            Arc::new(self.clock.clone()),
            FenceConfig::with_deadline(DEADLINE)
                .with_owner(format!("p{p}g{generation}"))
                .with_claim_wait(Duration::from_secs(30)),
        );
        Process {
            writes,
            dead,
            generation,
            callers: VecDeque::new(),
        }
    }

    /// Starts a write of scope `s` in process `p`: a caller task running one scoped write.
    fn write(&mut self, p: usize, s: usize) {
        let process = &mut self.processes[p];
        if process.dead.load(Ordering::Relaxed) {
            return;
        }
        let writes = process.writes.clone();
        let generation = process.generation;
        let binding = self.binding.clone();
        let shared = Arc::clone(&self.world);
        let clock = self.clock.clone();
        let caller = tokio::spawn(async move {
            let result = writes
                .run(&binding, &scope(s), FenceMode::Enforce, |ctx| {
                    let commit = remote_mutation(shared.clone(), clock, s, p, generation);
                    async move { ctx.dispatch("update", commit).await }
                })
                .await;
            let outcome = match &result {
                Ok(()) => "ok".to_owned(),
                Err(ScopedWriteError::Fenced { .. }) => "refused: fenced".to_owned(),
                Err(ScopedWriteError::ScopeBusy { .. }) => "refused: scope busy".to_owned(),
                Err(ScopedWriteError::OutcomeUnknown { .. }) => "outcome unknown".to_owned(),
                Err(ScopedWriteError::Operation(e)) => format!("failed: {e}"),
                Err(other) => format!("error: {other}"),
            };
            world(&shared).event(format!("p{p}g{generation} write kb-{s} ends: {outcome}"));
        });
        process.callers.push_back(caller);
    }

    fn crash(&mut self, p: usize) {
        let process = &mut self.processes[p];
        if process.dead.swap(true, Ordering::Relaxed) {
            return;
        }
        for caller in process.callers.drain(..) {
            caller.abort();
        }
        let generation = process.generation;
        let mut w = world(&self.world);
        // Nobody will learn the outcome of this process's requests in flight.
        let orphaned: Vec<usize> = w
            .in_flight
            .values()
            .filter(|r| r.process == p && r.generation == generation)
            .map(|r| r.scope)
            .collect();
        w.unresolved.extend(orphaned);
        w.event(format!("p{p}g{generation} crashes"));
    }

    async fn clear(&mut self, s: usize) {
        let key = scope(s).fence_key();
        if self.bug == Some(ScopedWriteBug::ClearWithoutAgeCheck) {
            let stored = self.storage.get(&self.binding, key.as_str()).await;
            if matches!(stored, Ok(Some(ref v)) if !v.is_null()) {
                let _ = self
                    .storage
                    .set(&self.binding, key.as_str(), &Value::Null)
                    .await;
                self.cleared(s);
            }
            return;
        }
        let result = self
            .operator
            .clear(&self.binding, &ClearTarget::Scope(scope(s)), "reconciled")
            .await;
        match result {
            Ok(outcome) if outcome.cleared => self.cleared(s),
            Ok(_) => {}
            Err(e) => world(&self.world).event(format!("operator clear of kb-{s} refused: {e}")),
        }
    }

    /// The operator cleared scope `s`'s record: any unknown outcome there counts as reconciled,
    /// and no request may be in flight.
    fn cleared(&self, s: usize) {
        let mut w = world(&self.world);
        w.cleared += 1;
        w.unresolved.remove(&s);
        if let Some((id, r)) = w.in_flight.iter().find(|(_, r)| r.scope == s) {
            let message = format!(
                "the operator cleared kb-{s}'s record while request {id} of p{}g{} was in flight",
                r.process, r.generation
            );
            w.violations.push(message);
        }
        w.event(format!("operator clears kb-{s}"));
    }

    async fn apply(&mut self, op: FenceOp) {
        match op {
            FenceOp::Write(p, s) => self.write(p, s),
            FenceOp::Cancel(p) => {
                if let Some(caller) = self.processes[p].callers.pop_front() {
                    caller.abort();
                    world(&self.world).event(format!("a caller of p{p} is dropped"));
                }
            }
            FenceOp::Crash(p) => self.crash(p),
            FenceOp::Restart(p) => {
                if self.processes[p].dead.load(Ordering::Relaxed) {
                    let generation = self.processes[p].generation + 1;
                    self.processes[p] = self.process(p, generation);
                    world(&self.world).event(format!("p{p}g{generation} starts"));
                }
            }
            FenceOp::Clear(s) => self.clear(s).await,
            FenceOp::Run(0) => {
                for _ in 0..4 {
                    tokio::task::yield_now().await;
                }
            }
            FenceOp::Run(secs) => tokio::time::sleep(Duration::from_secs(secs)).await,
        }
        for process in &mut self.processes {
            process.callers.retain(|c| !c.is_finished());
        }
    }

    /// Markers: a request in flight or an unresolved outcome has a record in storage.
    async fn check(&self) -> Result<(), String> {
        let (violation, scopes) = {
            let w = world(&self.world);
            let mut scopes: BTreeSet<usize> = w.in_flight.values().map(|r| r.scope).collect();
            scopes.extend(w.unresolved.iter().copied());
            (w.violations.first().cloned(), scopes)
        };
        if let Some(violation) = violation {
            return Err(violation);
        }
        for s in scopes {
            let key = scope(s).fence_key();
            let stored = self.storage.get(&self.binding, key.as_str()).await;
            let marked = match stored {
                Ok(Some(value)) => !value.is_null(),
                Ok(None) => false,
                Err(_) => true,
            };
            if !marked {
                return Err(format!(
                    "kb-{s} has a request in flight or an unresolved outcome but no marker in storage"
                ));
            }
        }
        Ok(())
    }

    fn trace(&self) -> Vec<String> {
        world(&self.world).trace.iter().cloned().collect()
    }
}

/// The remote mutation of one write: checked when it goes out, in flight until its answer or
/// its request timeout, then applied or not as its fate says.
async fn remote_mutation(
    shared: Shared,
    clock: ManualClock,
    s: usize,
    p: usize,
    generation: u32,
) -> Result<(), DispatchOutcome> {
    {
        let (id, fate, answer_after) = {
            let mut w = world(&shared);
            let fate = match w.rng.random_range(0..10u8) {
                0..=4 => Fate::Applied,
                5 => Fate::Refused,
                6 => Fate::NotSent,
                7 | 8 => Fate::Unknown,
                _ => Fate::NoAnswer,
            };
            if fate == Fate::NotSent {
                w.event(format!("p{p}g{generation} kb-{s}: connection refused"));
                return Err(DispatchOutcome::NotDispatched);
            }
            if let Some((other, r)) = w.in_flight.iter().find(|(_, r)| r.scope == s) {
                let message = format!(
                    "p{p}g{generation} dispatched a write of kb-{s} while request {other} of p{}g{} is in flight",
                    r.process, r.generation
                );
                w.violations.push(message);
            }
            if w.unresolved.contains(&s) {
                w.violations.push(format!(
                    "p{p}g{generation} dispatched a write of kb-{s} while an unknown outcome there is unresolved"
                ));
            }
            let id = w.next_request;
            w.next_request += 1;
            w.dispatched += 1;
            w.in_flight.insert(
                id,
                Request {
                    scope: s,
                    process: p,
                    generation,
                },
            );
            let answer_after = Duration::from_millis(w.rng.random_range(0..25_000));
            w.event(format!(
                "p{p}g{generation} sends request {id} on kb-{s}: {fate:?}"
            ));
            (id, fate, answer_after)
        };
        let answer_after = if fate == Fate::NoAnswer {
            REQUEST_TIMEOUT
        } else {
            answer_after.min(REQUEST_TIMEOUT)
        };
        clock.sleep(answer_after).await;
        let mut w = world(&shared);
        w.in_flight.remove(&id);
        let result = match fate {
            Fate::Applied => Ok(()),
            Fate::Refused => Err(DispatchOutcome::answered(409)),
            Fate::NotSent => Err(DispatchOutcome::NotDispatched),
            Fate::Unknown | Fate::NoAnswer => Err(DispatchOutcome::OutcomeUnknown),
        };
        if result == Err(DispatchOutcome::OutcomeUnknown) {
            w.unresolved.insert(s);
        }
        w.event(format!("request {id} on kb-{s} ends: {result:?}"));
        result
    }
}

/// Runs `steps` seeded steps of the scoped-writes simulation with `bug` planted or none.
///
/// # Errors
/// The first broken invariant, with the seed, the step and the last events.
pub fn run(
    seed: u64,
    steps: u64,
    bug: Option<ScopedWriteBug>,
) -> Result<FenceRunSummary, SimFailure> {
    let fail = SimFailure::of("fences", seed);
    let runtime = super::paused_runtime("fences", seed)?;
    runtime.block_on(async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sim = FenceSim::new(seed, bug).map_err(|e| fail(0, e, Vec::new()))?;
        for step in 0..steps {
            let op = draw(&mut rng);
            world(&sim.world).event(format!("step {step}: {op:?}"));
            sim.apply(op).await;
            if let Err(message) = sim.check().await {
                return Err(fail(step + 1, message, sim.trace()));
            }
        }
        // Every request ends; the markers must still be there for the unresolved ones.
        tokio::time::sleep(DEADLINE * 2).await;
        if let Err(message) = sim.check().await {
            return Err(fail(steps, message, sim.trace()));
        }
        let (dispatched, cleared) = {
            let w = world(&sim.world);
            (w.dispatched, w.cleared)
        };
        for p in 0..PROCESSES {
            sim.crash(p);
        }
        Ok(FenceRunSummary {
            steps,
            dispatched,
            cleared,
            trace: sim.trace(),
        })
    })
}
