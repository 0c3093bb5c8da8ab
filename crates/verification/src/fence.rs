//! Model of the reconciliation-fence protocol on one (binding, scope): two processes sharing
//! host storage, writers A1 and A2 in process A and writer B in process B, an operator clearing
//! records from process A, crashes and restarts.
//!
//! Every decision is the real rule of `tenantry_fence`: how a stored record bears on a write
//! (`record::classify`, over the JSON the real `FenceMarker::intent` / `FenceMarker::fence`
//! write), what an outcome means for the write-ahead intent (`IntentAction::after`), and when an
//! operator may clear (`record::clear_refusal` over `FenceMarker::from_value`). The runtime's
//! sequencing (`engine::scoped_writes`: in-process scope lock, claim by compare-and-set, intent
//! refresh before the request, fence or release after it, release by a spawned task on
//! cancellation) is written out in [`FenceProtocol::next_state`], one action per await point.
//!
//! Time is a tick of one second of the store's clock; the dispatch deadline is
//! [`DEADLINE_TICKS`] and a claim lasts the deadline plus one tick (the claim margin), as the
//! runtime sets it (deadline + 30 s). Each process also has its own clock: process A's runs
//! [`PROCESS_A_AHEAD_TICKS`] ahead of the store's, process B's agrees with it. The real rules
//! stamp and judge every record on the store's clock and never read a process clock; the
//! planted [`FenceBug::JudgedOnProcessClock`] (the behaviour before the issue "One clock and
//! bounded waits") stamps and judges them on the acting process's clock.
//!
//! A request in flight ends (answered, not dispatched, or outcome unknown) before its deadline,
//! or its writer stops waiting when the deadline elapses ([`FenceAction::DeadlineElapsed`]:
//! the scope is fenced) while the request itself goes on and may land until the claim's end
//! (deadline plus margin): requests outlive their deadlines. A process that crashes leaves its
//! request in flight likewise.

use serde_json::Value;
use stateright::{Model, Property};
use tenantry_fence::{
    ClearRefused, DispatchOutcome, FailureRecord, FenceMarker, Holder, IntentAction, ScopeIdentity,
    classify, clear_refusal,
};

/// The dispatch deadline, ticks.
pub const DEADLINE_TICKS: u8 = 2;
/// How long past its deadline a request may still land (the claim margin), ticks.
pub const MARGIN_TICKS: u8 = 1;
/// How far process A's clock runs ahead of the store's, ticks.
pub const PROCESS_A_AHEAD_TICKS: u8 = 2;
/// Writers: A1, A2 (process A), B (process B).
pub const WRITERS: usize = 3;
const PROCESS_OF: [usize; WRITERS] = [0, 0, 1];
const MS: i64 = 1000;

/// A deliberately broken rule, to show the checker finds what it must.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FenceBug {
    /// The real rules.
    None,
    /// A writer does not take the in-process scope lock: two writers of one process share the
    /// owner, so the second takes the first's claim over as its own.
    WriteWithoutScopeLock,
    /// No write-ahead intent is persisted before the request goes out.
    DispatchWithoutIntent,
    /// The operator's clear skips the young-intent refusal.
    ClearWithoutAgeCheck,
    /// An expired intent (its holder vanished mid-dispatch) is read as free, not fenced.
    ExpiredIntentCountsAsFree,
    /// A restarted process keeps its owner name, so it takes its dead predecessor's claim over.
    OwnerKeptAcrossRestart,
    /// Records are stamped and judged on the acting process's own clock, not the store's (the
    /// behaviour before "One clock and bounded waits"): process A, whose clock runs ahead,
    /// judges B's young intent expired.
    JudgedOnProcessClock,
    /// The fence written after an unknown outcome does not keep the intent's expiry, so an
    /// operator may clear it while the request can still land (the runtime before this
    /// model let requests outlive their deadline).
    FenceForgetsItsRequest,
}

/// The fence-protocol model.
#[derive(Debug, Clone)]
pub struct FenceProtocol {
    /// Planted bug, or [`FenceBug::None`].
    pub bug: FenceBug,
    /// Last tick time may reach.
    pub max_time: u8,
}

impl FenceProtocol {
    /// The real rules with the default bound (5 ticks: past an orphaned intent's expiry).
    pub fn correct() -> Self {
        Self::with_bug(FenceBug::None)
    }

    /// A planted-bug variant with the default bound.
    pub fn with_bug(bug: FenceBug) -> Self {
        Self { bug, max_time: 5 }
    }
}

/// The record at the scope's fence key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ScopeRecord {
    /// Never written.
    Absent,
    /// JSON null tombstone.
    Null,
    /// A write-ahead intent.
    Intent {
        /// Process and incarnation of the holder.
        owner: (u8, u8),
        /// When written, tick.
        at: u8,
        /// When the claim lapses, tick.
        expires: u8,
    },
    /// A fence (outcome unknown), written at this tick, with the tick until which its
    /// request may still land (the expiry of the intent it replaced), if any.
    Fence(u8, Option<u8>),
}

/// A writer's run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WriterRun {
    /// Not started (or restarted after its process crashed).
    Idle,
    /// Holds the scope (lock and claim), request not sent.
    Holding,
    /// Request in flight since this tick.
    InFlight(u8),
    /// Finished (known outcome, fenced, refused or cancelled).
    Done,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FenceState {
    /// Tick.
    pub now: u8,
    /// The scope's record.
    pub stored: ScopeRecord,
    /// Writers.
    pub writers: [WriterRun; WRITERS],
    /// Incarnation of each process (0, or 1 after its one crash).
    pub incarnation: [u8; 2],
    /// Start ticks of requests left in flight by crashed processes.
    pub orphans: Vec<u8>,
    /// Clears the operator made.
    pub clears: u8,
    /// Ghost: an unknown outcome no operator has reconciled yet.
    pub unresolved: bool,
    /// Ghost: two requests were in flight on the scope at once.
    pub concurrent: bool,
    /// Ghost: a request went out while an unknown outcome was unresolved.
    pub dispatched_unresolved: bool,
    /// Ghost: a clear erased the record of a request still in flight.
    pub erased_in_flight: bool,
}

/// One step of the system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum FenceAction {
    /// Time advances one tick.
    Tick,
    /// WriterRun takes the lock, reads the records and claims (or fails closed).
    Begin(u8),
    /// WriterRun's caller is cancelled before the request: the claim is released.
    Cancel(u8),
    /// WriterRun refreshes its intent and sends the request.
    Dispatch(u8),
    /// WriterRun's request ends: 0 not dispatched, 1 answered, 2 outcome unknown.
    Outcome(u8, u8),
    /// WriterRun's deadline elapsed: it stops waiting and fences the scope; its request goes
    /// on and may still land until the claim's end.
    DeadlineElapsed(u8),
    /// Process crashes and restarts.
    Crash(u8),
    /// The operator clears the record (from process A, under its scope lock).
    Clear,
}

fn scope() -> ScopeIdentity {
    ScopeIdentity::object("kb-1")
}

fn ms(tick: u8) -> i64 {
    i64::from(tick) * MS
}

/// The last tick a request started at `at` may land at (deadline plus margin, exclusive).
fn lands_until(at: u8) -> u8 {
    at + DEADLINE_TICKS + MARGIN_TICKS
}

impl FenceProtocol {
    fn owner(&self, state: &FenceState, process: usize) -> (u8, u8) {
        let incarnation = if self.bug == FenceBug::OwnerKeptAcrossRestart {
            0
        } else {
            state.incarnation[process]
        };
        (process as u8, incarnation)
    }

    /// The clock records are stamped and judged on when `process` acts: the store's, or with
    /// the planted bug the process's own.
    fn clock(&self, state: &FenceState, process: usize) -> u8 {
        if self.bug == FenceBug::JudgedOnProcessClock && process == 0 {
            state.now + PROCESS_A_AHEAD_TICKS
        } else {
            state.now
        }
    }

    fn owner_name(owner: (u8, u8)) -> String {
        format!("process-{}-run-{}", owner.0, owner.1)
    }

    /// The JSON the runtime stores for `stored`.
    fn value(stored: &ScopeRecord) -> Option<Value> {
        match stored {
            ScopeRecord::Absent => None,
            ScopeRecord::Null => Some(Value::Null),
            ScopeRecord::Intent { owner, at, expires } => Some(
                FenceMarker::intent(
                    &scope(),
                    "upload",
                    Self::owner_name(*owner),
                    ms(*at),
                    ms(*expires),
                )
                .to_value(),
            ),
            ScopeRecord::Fence(at, until) => {
                let mut fence = FenceMarker::fence(
                    &scope(),
                    "upload",
                    FailureRecord {
                        kind: "outcome_unknown".into(),
                        detail: "answer lost".into(),
                    },
                    ms(*at),
                );
                fence.expires_at_ms = until.map(ms);
                Some(fence.to_value())
            }
        }
    }

    fn in_flight(state: &FenceState) -> usize {
        let live = state
            .writers
            .iter()
            .filter(|w| matches!(w, WriterRun::InFlight(_)))
            .count();
        let orphans = state
            .orphans
            .iter()
            .filter(|at| lands_until(**at) > state.now)
            .count();
        live + orphans
    }

    fn lock_free(&self, state: &FenceState, process: usize, except: usize) -> bool {
        self.bug == FenceBug::WriteWithoutScopeLock
            || state.writers.iter().enumerate().all(|(i, w)| {
                i == except
                    || PROCESS_OF[i] != process
                    || !matches!(w, WriterRun::Holding | WriterRun::InFlight(_))
            })
    }

    /// The fence the runtime writes over `process`'s intent after an unknown outcome: it keeps
    /// the intent's expiry (the request may still land until then), unless the planted
    /// [`FenceBug::FenceForgetsItsRequest`] drops it.
    fn fence_over_intent(&self, state: &FenceState, process: usize) -> ScopeRecord {
        let until = match state.stored {
            ScopeRecord::Intent { expires, .. } if self.our_intent(state, process) => Some(expires),
            _ => None,
        };
        let until = until.filter(|_| self.bug != FenceBug::FenceForgetsItsRequest);
        ScopeRecord::Fence(self.clock(state, process), until)
    }

    fn our_intent(&self, state: &FenceState, process: usize) -> bool {
        matches!(state.stored, ScopeRecord::Intent { owner, .. } if owner == self.owner(state, process))
    }
}

impl Model for FenceProtocol {
    type State = FenceState;
    type Action = FenceAction;

    fn init_states(&self) -> Vec<FenceState> {
        vec![FenceState {
            now: 0,
            stored: ScopeRecord::Absent,
            writers: [WriterRun::Idle, WriterRun::Idle, WriterRun::Idle],
            incarnation: [0, 0],
            orphans: Vec::new(),
            clears: 0,
            unresolved: false,
            concurrent: false,
            dispatched_unresolved: false,
            erased_in_flight: false,
        }]
    }

    fn actions(&self, state: &FenceState, actions: &mut Vec<FenceAction>) {
        // A writer stops waiting when its deadline elapses (on its process's monotonic
        // clock, which runs at the store clock's rate): time does not pass a deadline before
        // the writer has noticed it.
        let deadline_ok = state.writers.iter().all(|w| match w {
            WriterRun::InFlight(at) => state.now < at + DEADLINE_TICKS,
            _ => true,
        });
        if state.now < self.max_time && deadline_ok {
            actions.push(FenceAction::Tick);
        }
        for (i, w) in state.writers.iter().enumerate() {
            let i8 = i as u8;
            match w {
                WriterRun::Idle => {
                    if self.lock_free(state, PROCESS_OF[i], i) {
                        actions.push(FenceAction::Begin(i8));
                    }
                }
                WriterRun::Holding => {
                    actions.push(FenceAction::Cancel(i8));
                    actions.push(FenceAction::Dispatch(i8));
                }
                WriterRun::InFlight(at) => {
                    if state.now < at + DEADLINE_TICKS {
                        for outcome in 0..3 {
                            actions.push(FenceAction::Outcome(i8, outcome));
                        }
                    } else {
                        actions.push(FenceAction::DeadlineElapsed(i8));
                    }
                }
                WriterRun::Done => {}
            }
        }
        for process in 0..2u8 {
            if state.incarnation[usize::from(process)] == 0 {
                actions.push(FenceAction::Crash(process));
            }
        }
        if state.clears < 2
            && matches!(
                state.stored,
                ScopeRecord::Intent { .. } | ScopeRecord::Fence(..)
            )
            && self.lock_free(state, 0, usize::MAX)
        {
            actions.push(FenceAction::Clear);
        }
    }

    fn next_state(&self, last: &FenceState, action: FenceAction) -> Option<FenceState> {
        let mut s = last.clone();
        match action {
            FenceAction::Tick => {
                s.now += 1;
                let now = s.now;
                s.orphans.retain(|at| lands_until(*at) > now);
            }
            FenceAction::Begin(i) => {
                let w = usize::from(i);
                let process = PROCESS_OF[w];
                let owner = self.owner(&s, process);
                let value = Self::value(&s.stored);
                let clock = self.clock(&s, process);
                let holder = classify(value.as_ref().map(Ok), &Self::owner_name(owner), ms(clock));
                let expired_intent =
                    matches!(s.stored, ScopeRecord::Intent { expires, .. } if expires <= clock);
                let holder = match holder {
                    Holder::Fenced
                        if self.bug == FenceBug::ExpiredIntentCountsAsFree && expired_intent =>
                    {
                        Holder::Free
                    }
                    other => other,
                };
                match holder {
                    Holder::Free | Holder::Own | Holder::Lapsed { .. } => {
                        if self.bug != FenceBug::DispatchWithoutIntent {
                            s.stored = ScopeRecord::Intent {
                                owner,
                                at: clock,
                                expires: clock + DEADLINE_TICKS + MARGIN_TICKS,
                            };
                        }
                        s.writers[w] = WriterRun::Holding;
                    }
                    // Waits for the other process (no state change: not a step).
                    Holder::Claimed { .. } => return None,
                    // Fails closed.
                    Holder::Fenced => s.writers[w] = WriterRun::Done,
                }
            }
            FenceAction::Cancel(i) => {
                let w = usize::from(i);
                // The spawned release: compare-and-set of our intent to null.
                if self.our_intent(&s, PROCESS_OF[w]) {
                    s.stored = ScopeRecord::Null;
                }
                s.writers[w] = WriterRun::Done;
            }
            FenceAction::Dispatch(i) => {
                let w = usize::from(i);
                let process = PROCESS_OF[w];
                if self.bug != FenceBug::DispatchWithoutIntent {
                    if !self.our_intent(&s, process) {
                        // The intent could not be refreshed: nothing is sent.
                        s.writers[w] = WriterRun::Done;
                        return Some(s);
                    }
                    let clock = self.clock(&s, process);
                    s.stored = ScopeRecord::Intent {
                        owner: self.owner(&s, process),
                        at: clock,
                        expires: clock + DEADLINE_TICKS + MARGIN_TICKS,
                    };
                }
                if Self::in_flight(&s) > 0 {
                    s.concurrent = true;
                }
                if s.unresolved {
                    s.dispatched_unresolved = true;
                }
                s.writers[w] = WriterRun::InFlight(s.now);
            }
            FenceAction::Outcome(i, outcome) => {
                let w = usize::from(i);
                let outcome = match outcome {
                    0 => DispatchOutcome::NotDispatched,
                    1 => DispatchOutcome::answered(200),
                    _ => DispatchOutcome::OutcomeUnknown,
                };
                // What the outcome is, observed from the outcome itself (not from what the
                // runtime's rule makes of it): an unknown outcome is unresolved until an
                // operator clears it, and its request may still be on its way and land until
                // its claim's end.
                if outcome == DispatchOutcome::OutcomeUnknown {
                    if let WriterRun::InFlight(at) = s.writers[w] {
                        s.orphans.push(at);
                        s.orphans.sort_unstable();
                    }
                    s.unresolved = true;
                }
                match IntentAction::after(outcome) {
                    IntentAction::Keep => {
                        s.stored = self.fence_over_intent(&s, PROCESS_OF[w]);
                    }
                    IntentAction::Clear => {
                        if self.our_intent(&s, PROCESS_OF[w]) {
                            s.stored = ScopeRecord::Null;
                        }
                    }
                }
                s.writers[w] = WriterRun::Done;
            }
            FenceAction::DeadlineElapsed(i) => {
                let w = usize::from(i);
                if let WriterRun::InFlight(at) = s.writers[w] {
                    s.orphans.push(at);
                    s.orphans.sort_unstable();
                }
                s.stored = self.fence_over_intent(&s, PROCESS_OF[w]);
                s.unresolved = true;
                s.writers[w] = WriterRun::Done;
            }
            FenceAction::Crash(process) => {
                let p = usize::from(process);
                s.incarnation[p] = 1;
                for (i, w) in s.writers.iter_mut().enumerate() {
                    if PROCESS_OF[i] != p {
                        continue;
                    }
                    match w {
                        WriterRun::InFlight(at) => {
                            s.orphans.push(*at);
                            s.unresolved = true;
                            *w = WriterRun::Idle;
                        }
                        WriterRun::Holding => *w = WriterRun::Idle,
                        WriterRun::Idle | WriterRun::Done => {}
                    }
                }
                s.orphans.sort_unstable();
            }
            FenceAction::Clear => {
                let value = Self::value(&s.stored)?;
                let marker = FenceMarker::from_value(&value)?;
                let refused: Result<(), ClearRefused> =
                    clear_refusal(&marker, ms(self.clock(&s, 0)), ms(DEADLINE_TICKS));
                if refused.is_err() && self.bug != FenceBug::ClearWithoutAgeCheck {
                    return None;
                }
                if Self::in_flight(&s) > 0 {
                    s.erased_in_flight = true;
                } else {
                    // The operator reconciled with the remote before clearing.
                    s.unresolved = false;
                }
                s.stored = ScopeRecord::Null;
                s.clears += 1;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("writes to one scope are serialized", |_, s: &FenceState| {
                !s.concurrent
            }),
            Property::always(
                "no write dispatched while an earlier unknown outcome is unresolved",
                |_, s: &FenceState| !s.dispatched_unresolved,
            ),
            Property::always(
                "no dispatched mutation without a durable marker",
                |_, s: &FenceState| {
                    let needs = Self::in_flight(s) > 0 || s.unresolved;
                    !needs
                        || matches!(
                            s.stored,
                            ScopeRecord::Intent { .. } | ScopeRecord::Fence(..)
                        )
                },
            ),
            Property::always(
                "clearing never erases the only record of an in-flight outcome",
                |_, s: &FenceState| !s.erased_in_flight,
            ),
            Property::sometimes("a fence is set and cleared", |_, s: &FenceState| {
                s.clears > 0 && s.stored == ScopeRecord::Null
            }),
            Property::sometimes("both processes complete a write", |_, s: &FenceState| {
                s.writers.iter().all(|w| *w == WriterRun::Done) && s.stored == ScopeRecord::Null
            }),
        ]
    }
}
