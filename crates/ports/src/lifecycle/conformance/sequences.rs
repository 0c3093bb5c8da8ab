//! Model-based check of a lifecycle store: seeded random sequences of intakes, claims,
//! renewals, settles (acks, retries, dead letters, moot closes, with control-space
//! compare-and-sets and supersedes, from live and from stale leases) and steps of the store's
//! clock, applied in lockstep to the store under test and to the in-memory store
//! ([`InMemoryLifecycleStore`], the executable model: its rules `is_due`, `holds_lease` and
//! `supersede_allowed` are the ones the lease model of `crates/verification` calls). Every
//! answer must be equal, and so must every command row and control space after every step.
//!
//! A divergence names the lease-model property its step touches ([`Divergence::property`]),
//! so a planted mutation of a store (e.g. a settle that skips its epoch predicate) is reported
//! as the property it breaks. The conformance case
//! [`random_sequences_agree_with_the_in_memory_model`] runs one sequence against each backend;
//! [`compare_sequence`] runs any seed (the verification crate runs many against SQLite and
//! PostgreSQL).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, OperationId};
use tenantry_lifecycle::intake::{NewIds, RequestDeletion};
use tenantry_lifecycle::{
    CommandRecord, ControlSpace, ControlSpaceState, ErrorRecord, LeaseToken, Settlement, Supersede,
    SupersedeRule, Transition,
};

use super::{
    ClaimRequest, CommandFilter, LifecycleStore, ManualClock, SettleError, create_plan, owner, t,
    tenant,
};
use crate::lifecycle::fake::InMemoryLifecycleStore;
use crate::lifecycle::{CommandQueue as _, ControlSpaceReader as _, IntakeStore as _};

/// Control spaces a sequence works on (`cs0` …); few, so commands meet each other.
const SPACES: u64 = 3;
/// Steps of the conformance case's sequence.
pub const CONFORMANCE_STEPS: usize = 160;

/// Where the store under test answered differently from the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The sequence's seed (run [`compare_sequence`] with it to reproduce).
    pub seed: u64,
    /// The step (0-based) whose answer or resulting state differed.
    pub step: usize,
    /// The step, as applied.
    pub action: String,
    /// The lease-model property the step touches, e.g. "no settle accepted from a stale
    /// epoch" for a settle the model refused and the store accepted.
    pub property: &'static str,
    /// The model's answer or state.
    pub model: String,
    /// The store's answer or state.
    pub store: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "property violated: {} (seed {}, step {}: {})\n  model: {}\n  store: {}",
            self.property, self.seed, self.step, self.action, self.model, self.store
        )
    }
}

/// What a sequence exercised (counted from the model's answers), so a test can show that it
/// reached the rules it claims to check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Commands handed out by claims.
    pub claimed: usize,
    /// Claims of a command whose earlier lease expired (epoch above 1).
    pub takeovers: usize,
    /// Renewals accepted / refused.
    pub renewed: usize,
    /// Renewals refused (stale, expired or settled lease).
    pub renewals_refused: usize,
    /// Settles accepted.
    pub settled: usize,
    /// Settles refused because the lease was no longer held.
    pub stale_settles_refused: usize,
    /// Settles refused by the control space's compare-and-set.
    pub control_space_conflicts: usize,
    /// Settles refused by a supersede rule.
    pub supersedes_refused: usize,
}

/// The conformance case: one seeded sequence of [`CONFORMANCE_STEPS`] steps against `store`
/// and the in-memory model agree in every answer and state, and the sequence reached every
/// rule it checks (takeovers, refused renewals and stale settles, control-space conflicts).
pub async fn random_sequences_agree_with_the_in_memory_model<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    match compare_sequence(&store, &clock, 7, CONFORMANCE_STEPS).await {
        Err(divergence) => panic!("{divergence}"),
        Ok(coverage) => {
            assert!(
                coverage.claimed > 5
                    && coverage.takeovers > 0
                    && coverage.renewed > 0
                    && coverage.renewals_refused > 0
                    && coverage.settled > 3
                    && coverage.stale_settles_refused > 0
                    && coverage.control_space_conflicts > 0,
                "the sequence did not reach every rule: {coverage:?}"
            );
        }
    }
}

/// Small deterministic generator (xorshift64*), so a seed reproduces its sequence everywhere.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// One step of a sequence.
#[derive(Debug, Clone)]
enum Action {
    Create { space: u64, key: String },
    Delete { space: u64, key: String },
    Claim(ClaimRequest),
    Renew(LeaseToken),
    Settle(LeaseToken, Box<Settlement>),
    Advance(u64),
}

/// Runs the sequence of `seed` (`steps` steps) against `store`, whose clock is `clock`, and a
/// fresh in-memory model on its own clock; both clocks start at the suite's base time.
///
/// Returns what the sequence exercised.
///
/// # Errors
/// The first [`Divergence`] between the two.
///
/// # Panics
/// When the model itself fails (it has no I/O), or the store's rows cannot be listed.
pub async fn compare_sequence<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    seed: u64,
    steps: usize,
) -> Result<Coverage, Divergence> {
    let mut coverage = Coverage::default();
    let model_clock = ManualClock::new(t(0));
    let model = InMemoryLifecycleStore::with_clock(Arc::new(model_clock.clone()));
    let mut rng = Rng::new(seed);
    let mut now = t(0);
    clock.set(now);
    // Every lease handed out, and those not yet settled with an outcome.
    let mut leases: Vec<LeaseToken> = Vec::new();
    let mut live: Vec<LeaseToken> = Vec::new();
    for step in 0..steps {
        let action = next_action(&mut rng, &model, now, &leases, &live).await;
        let diverged = |property: &'static str, model: String, store: String| Divergence {
            seed,
            step,
            action: describe(&action),
            property,
            model,
            store,
        };
        match &action {
            Action::Advance(seconds) => {
                now += chrono::Duration::seconds(i64::try_from(*seconds).unwrap_or(1));
                clock.set(now);
                model_clock.set(now);
            }
            Action::Create { space, key } => {
                let plan = create_plan(&format!("cs{space}"), key, now);
                let (m, s) = (model.submit(&plan).await, store.submit(&plan).await);
                if m != s {
                    return Err(diverged(
                        "intake is idempotent on the key",
                        format!("{m:?}"),
                        format!("{s:?}"),
                    ));
                }
            }
            Action::Delete { space, key } => {
                let id = ControlSpaceId::parse(format!("cs{space}")).unwrap();
                let read = model.control_space(&tenant(), &id).await.unwrap();
                let plan = RequestDeletion {
                    tenant_id: tenant(),
                    control_space_id: id,
                    idempotency_key: IdempotencyKey::parse(key.as_str()).unwrap(),
                }
                .plan(read.as_ref(), ids(key), now);
                if let Ok(plan) = plan {
                    let (m, s) = (model.submit(&plan).await, store.submit(&plan).await);
                    if m != s {
                        return Err(diverged(
                            "intake is idempotent on the key",
                            format!("{m:?}"),
                            format!("{s:?}"),
                        ));
                    }
                }
            }
            Action::Claim(request) => {
                // The port names which commands a claim takes (turn order, up to the limit)
                // and the order it hands them over in (the same turn order; docs/protocol.md,
                // "Claim").
                let m = model.claim(request).await.map_err(|e| e.to_string());
                let s = store.claim(request).await.map_err(|e| e.to_string());
                if m != s {
                    return Err(diverged(
                        "at most one live lease per command",
                        format!("{m:?}"),
                        format!("{s:?}"),
                    ));
                }
                for claimed in m.into_iter().flatten() {
                    coverage.claimed += 1;
                    if claimed.lease.epoch.0 > 1 {
                        coverage.takeovers += 1;
                    }
                    live.push(claimed.lease.clone());
                    leases.push(claimed.lease);
                }
            }
            Action::Renew(lease) => {
                let duration = Duration::from_secs(60);
                let m = model
                    .renew_lease(lease, duration)
                    .await
                    .map_err(|e| e.to_string());
                let s = store
                    .renew_lease(lease, duration)
                    .await
                    .map_err(|e| e.to_string());
                if m != s {
                    return Err(diverged(
                        "no renewal of a stale or expired lease is accepted",
                        format!("{m:?}"),
                        format!("{s:?}"),
                    ));
                }
                match m {
                    Ok(renewed) => {
                        coverage.renewed += 1;
                        live.retain(|l| l != lease);
                        live.push(renewed.clone());
                        leases.push(renewed);
                    }
                    Err(_) => coverage.renewals_refused += 1,
                }
            }
            Action::Settle(lease, settlement) => {
                let answer = model.settle(lease, settlement).await;
                match &answer {
                    Ok(()) => {
                        coverage.settled += 1;
                        if settlement.outcome.is_some() {
                            live.retain(|l| l.command_id != lease.command_id);
                        }
                    }
                    Err(SettleError::LeaseLost { .. }) => coverage.stale_settles_refused += 1,
                    Err(SettleError::ControlSpaceConflict { .. }) => {
                        coverage.control_space_conflicts += 1;
                    }
                    Err(SettleError::SupersedeRefused { .. }) => coverage.supersedes_refused += 1,
                    Err(SettleError::Store(_)) => {}
                }
                let m = answer.map_err(|e| e.to_string());
                let s = store
                    .settle(lease, settlement)
                    .await
                    .map_err(|e| e.to_string());
                if m != s {
                    let property = if m.is_err() && s.is_ok() && settlement.supersede.is_some() {
                        "a deleted control space has no remote space"
                    } else if m.is_err() && s.is_ok() {
                        "no settle accepted from a stale epoch"
                    } else {
                        "a settle is applied all or nothing"
                    };
                    return Err(diverged(property, format!("{m:?}"), format!("{s:?}")));
                }
            }
        }
        let (m, s) = (state(&model).await, state(store).await);
        if m != s {
            let (m, s) = first_difference(&m, &s);
            return Err(diverged("the store holds what the model holds", m, s));
        }
    }
    Ok(coverage)
}

/// The rows of a store: every command (with its lease and attempt window) and every control
/// space of the sequence.
#[derive(Debug, PartialEq)]
struct State {
    commands: Vec<CommandRecord>,
    spaces: Vec<Option<ControlSpace>>,
}

async fn state<S: LifecycleStore>(store: &S) -> State {
    let commands = store
        .list_commands(&CommandFilter {
            limit: 10_000,
            ..CommandFilter::default()
        })
        .await
        .expect("commands can be listed");
    let mut spaces = Vec::new();
    for space in 0..SPACES {
        let id = ControlSpaceId::parse(format!("cs{space}")).unwrap();
        spaces.push(
            store
                .control_space(&tenant(), &id)
                .await
                .expect("control spaces can be read"),
        );
    }
    State { commands, spaces }
}

/// The first command or control space that differs, as text.
fn first_difference(model: &State, store: &State) -> (String, String) {
    if model.commands.len() != store.commands.len() {
        return (
            format!("{} commands", model.commands.len()),
            format!("{} commands", store.commands.len()),
        );
    }
    for (m, s) in model.commands.iter().zip(&store.commands) {
        if m != s {
            return (format!("{m:?}"), format!("{s:?}"));
        }
    }
    for (m, s) in model.spaces.iter().zip(&store.spaces) {
        if m != s {
            return (format!("{m:?}"), format!("{s:?}"));
        }
    }
    (format!("{model:?}"), format!("{store:?}"))
}

fn ids(key: &str) -> NewIds {
    NewIds {
        command_id: CommandId::parse(format!("cmd-{key}")).unwrap(),
        operation_id: OperationId::parse(format!("op-{key}")).unwrap(),
    }
}

fn describe(action: &Action) -> String {
    match action {
        Action::Create { space, key } => format!("create cs{space} under key {key}"),
        Action::Delete { space, key } => format!("delete cs{space} under key {key}"),
        Action::Claim(r) => format!(
            "claim by {} (limit {}, provision {}, call deadline {:?})",
            r.owner.as_str(),
            r.limit,
            r.include_provision,
            r.call_deadline
        ),
        Action::Renew(l) => format!(
            "renew {} by {} at epoch {}",
            l.command_id.as_str(),
            l.owner.as_str(),
            l.epoch.0
        ),
        Action::Settle(l, s) => format!(
            "settle {} by {} at epoch {}: {:?}, control space {}, supersede {:?}, sent {}, spends {}",
            l.command_id.as_str(),
            l.owner.as_str(),
            l.epoch.0,
            s.outcome
                .as_ref()
                .map(tenantry_lifecycle::CommandOutcome::status),
            s.control_space.as_ref().map_or("-".to_owned(), |c| format!(
                "v{}",
                c.expected_resource_version
            )),
            s.supersede
                .as_ref()
                .map(|x| (x.command_id.as_str(), x.rule)),
            s.may_have_sent,
            s.spends_attempt
        ),
        Action::Advance(seconds) => format!("advance the clock {seconds} s"),
    }
}

fn error(code: &str) -> ErrorRecord {
    ErrorRecord::new(code, format!("sequence {code}"))
}

/// Picks the next step: the model's current rows decide which control-space changes and
/// supersedes make sense; leases are taken from every lease handed out so far (stale ones
/// included).
async fn next_action(
    rng: &mut Rng,
    model: &InMemoryLifecycleStore,
    now: DateTime<Utc>,
    leases: &[LeaseToken],
    live: &[LeaseToken],
) -> Action {
    let roll = rng.below(100);
    if roll < 12 {
        let space = rng.below(SPACES);
        // Mostly the space's own key (an idempotent replay after the first), sometimes a new
        // key for an existing space (refused).
        let key = if rng.chance(80) {
            format!("c{space}")
        } else {
            format!("c{space}-{}", rng.below(1000))
        };
        return Action::Create { space, key };
    }
    if roll < 18 {
        let space = rng.below(SPACES);
        return Action::Delete {
            space,
            key: format!("d{space}-{}", rng.below(2)),
        };
    }
    if roll < 42 || leases.is_empty() {
        if roll >= 42 && rng.chance(50) {
            return Action::Advance(advance(rng));
        }
        return Action::Claim(ClaimRequest {
            owner: owner(["w0", "w1", "w2"][usize::try_from(rng.below(3)).unwrap_or(0)]),
            lease_duration: Duration::from_secs(30 + rng.below(60)),
            include_provision: rng.chance(85),
            limit: u32::try_from(1 + rng.below(3)).unwrap_or(1),
            call_deadline: Duration::from_secs(rng.below(2) * 20),
        });
    }
    // Mostly a lease not yet settled (likely still held), sometimes any (likely stale).
    let pool = if live.is_empty() || rng.chance(25) {
        leases
    } else {
        live
    };
    let lease = pool[usize::try_from(rng.below(pool.len() as u64)).unwrap_or(0)].clone();
    if roll < 52 {
        return Action::Renew(lease);
    }
    if roll < 82 {
        let settlement = settlement(rng, model, now, &lease).await;
        return Action::Settle(lease, Box::new(settlement));
    }
    Action::Advance(advance(rng))
}

/// Seconds the clock moves: mostly a little (leases stay live), sometimes past every lease.
fn advance(rng: &mut Rng) -> u64 {
    if rng.chance(75) {
        1 + rng.below(15)
    } else {
        30 + rng.below(90)
    }
}

/// A settlement a saga step could write for `lease`'s command: an outcome, and sometimes the
/// control-space change of its operation (from the current row or a stale copy) or a
/// supersede of another command.
async fn settlement(
    rng: &mut Rng,
    model: &InMemoryLifecycleStore,
    now: DateTime<Utc>,
    lease: &LeaseToken,
) -> Settlement {
    let mut settlement = match rng.below(10) {
        0..=3 => Settlement::ack(now),
        4..=6 => Settlement::retry(
            now + chrono::Duration::seconds(10),
            error("KFS_UNAVAILABLE"),
        ),
        7 => Settlement::fail(now, error("KFS_REJECTED")),
        8 => Settlement::moot(now, error("CONTROL_SPACE_DELETING")),
        _ => Settlement {
            outcome: None,
            ..Settlement::ack(now)
        },
    };
    if rng.chance(15) {
        settlement = settlement.nothing_sent();
    }
    if rng.chance(10) {
        settlement = settlement.gives_attempt_back();
    }
    let commands = model
        .list_commands(&CommandFilter {
            limit: 10_000,
            ..CommandFilter::default()
        })
        .await
        .expect("the model lists its commands");
    let Some(command) = commands.iter().find(|c| c.id == lease.command_id) else {
        return settlement;
    };
    if rng.chance(40)
        && let Some(space) = model
            .control_space(&command.tenant_id, &command.control_space_id)
            .await
            .expect("the model reads its control spaces")
    {
        let transition = match space.state {
            ControlSpaceState::Provisioning => Some(Transition::Activate {
                operation_id: command.operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse(format!("ks-{}", command.id.as_str()))
                    .unwrap(),
                revision: 1,
            }),
            ControlSpaceState::Deleting => Some(Transition::CompleteDeletion {
                operation_id: command.operation_id.clone(),
                revision: 2,
            }),
            _ => None,
        };
        if let Some(Ok(mut cas)) = transition.map(|t| space.plan(&[t], now)) {
            if rng.chance(30) {
                // A copy read before another change: the compare-and-set must fail.
                cas.expected_resource_version -= 1;
            }
            settlement = settlement.with_control_space(cas);
        }
    }
    if rng.chance(15) && commands.len() > 1 {
        let other = &commands[usize::try_from(rng.below(commands.len() as u64)).unwrap_or(0)];
        if other.id != command.id {
            let rule = if rng.chance(50) {
                SupersedeRule::Unattempted
            } else {
                SupersedeRule::AfterRemoteAbsence {
                    grace: Duration::from_secs(30),
                    observed_at: now
                        - chrono::Duration::seconds(i64::try_from(rng.below(60)).unwrap_or(0)),
                }
            };
            settlement = settlement.with_supersede(Supersede {
                command_id: other.id.clone(),
                rule,
                completed_at: now,
                error: error("SUPERSEDED"),
            });
        }
    }
    settlement
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_numbers_every_time() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        let first: Vec<u64> = (0..5).map(|_| a.below(100)).collect();
        let second: Vec<u64> = (0..5).map(|_| b.below(100)).collect();
        assert_eq!(first, second);
        let mut c = Rng::new(4);
        assert_ne!(first, (0..5).map(|_| c.below(100)).collect::<Vec<_>>());
    }
}
