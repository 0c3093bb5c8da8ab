//! Fault injection for the reference remotes: which fault (if any) a request meets.
//!
//! Each [`Route`] has a [`RoutePlan`]: a script of faults consumed one per request (tests
//! that need an exact sequence), then a seeded random draw with a probability and weighted
//! fault kinds (soak and end-to-end runs). The same seed and the same arrival order give the
//! same faults. Every injected fault is counted per route and kind.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A route of a reference remote that faults can be attached to: the four routes of the
/// KnowledgeFS lifecycle API v1 and the three of Directory API v1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Route {
    /// `POST /v1/namespaces/{namespace_id}/spaces`.
    Provision,
    /// `GET /v1/namespaces/{namespace_id}/spaces?provisioning_key=`.
    Lookup,
    /// `POST /v1/namespaces/{namespace_id}/spaces/{knowledge_space_id}/deletion`.
    Deletion,
    /// `POST .../spaces/{knowledge_space_id}/grants/{grant_id}/revocations`.
    Revocation,
    /// `GET /v1/instances/{instance_uuid}/directory/snapshot`.
    DirectorySnapshot,
    /// `GET /v1/instances/{instance_uuid}/directory/events?after=&limit=`.
    DirectoryEvents,
    /// `POST /v1/instances/{instance_uuid}/directory/workspaces`.
    DirectoryWorkspaces,
}

impl Route {
    /// Every route, in a fixed order.
    pub const ALL: [Route; 7] = [
        Route::Provision,
        Route::Lookup,
        Route::Deletion,
        Route::Revocation,
        Route::DirectorySnapshot,
        Route::DirectoryEvents,
        Route::DirectoryWorkspaces,
    ];

    /// Whether the route changes remote state (and so requires an `Idempotency-Key`).
    pub fn is_mutation(self) -> bool {
        matches!(self, Route::Provision | Route::Deletion | Route::Revocation)
    }

    /// Whether the route belongs to Directory API v1.
    pub fn is_directory(self) -> bool {
        matches!(
            self,
            Route::DirectorySnapshot | Route::DirectoryEvents | Route::DirectoryWorkspaces
        )
    }
}

/// One injected fault. "Commit" means the remote effect is applied and counted before the
/// fault hits, which is what makes the outcome ambiguous for the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Answer `503 {code: "KFS_UNAVAILABLE"}` with `Retry-After: retry_after_secs`, no effect.
    Unavailable {
        /// `Retry-After` in whole seconds.
        retry_after_secs: u32,
    },
    /// Answer `429 {code: "KFS_RATE_LIMITED"}` with `Retry-After: retry_after_secs`, no effect.
    RateLimited {
        /// `Retry-After` in whole seconds.
        retry_after_secs: u32,
    },
    /// Answer `400 {code: "INVALID_REQUEST"}`, no effect: a permanent refusal (a request the
    /// remote will never accept), for dead-letter tests.
    InvalidRequest,
    /// Commit, then close the connection without answering (lost ACK; the client sees the
    /// connection end before a response).
    LostAck,
    /// Commit, then reset the connection (TCP RST) without answering.
    ResetAfterCommit,
    /// Stall for the configured stall duration (longer than the client deadline), then answer.
    /// With `commit`, the effect is applied before stalling; without, only after.
    Stall {
        /// Whether the effect is applied before the stall begins.
        commit: bool,
    },
    /// Revocation route only: answer `pending` with the current watermark and do not advance
    /// it for this request (the revocation is recorded and applied by a later request).
    /// On other routes it has no effect.
    LagWatermark,
    /// Directory routes only: answer (correctly signed) with the body this route answered
    /// before (an older snapshot, an earlier events page, an earlier delta); answers normally
    /// when there is none yet.
    StalePage,
    /// Directory routes only: send the route's previous signed answer byte for byte (body,
    /// timestamp and signature as signed for its own request), as a replaying cache or
    /// attacker would; answers normally when there is none yet. Not drawn by any profile.
    ReplayedResponse,
    /// Directory routes only: sign with a key the client does not trust (its own key id).
    UntrustedSignature,
    /// Directory routes only: send a signature that does not verify (one bit flipped).
    BadSignature,
    /// Directory routes only: send no signature headers.
    Unsigned,
    /// Directory routes only: sign correctly with a timestamp one hour in the past.
    SkewedTimestamp,
}

impl Fault {
    /// Short stable name, used as a counter label.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Unavailable { .. } => "unavailable",
            Fault::RateLimited { .. } => "rate_limited",
            Fault::InvalidRequest => "invalid_request",
            Fault::LostAck => "lost_ack",
            Fault::ResetAfterCommit => "reset_after_commit",
            Fault::Stall { .. } => "stall",
            Fault::LagWatermark => "lag_watermark",
            Fault::StalePage => "stale_page",
            Fault::ReplayedResponse => "replayed_response",
            Fault::UntrustedSignature => "untrusted_signature",
            Fault::BadSignature => "bad_signature",
            Fault::Unsigned => "unsigned",
            Fault::SkewedTimestamp => "skewed_timestamp",
        }
    }
}

/// The fault plan of one route.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoutePlan {
    /// Consumed first, one entry per request; `None` entries let a request through.
    pub script: VecDeque<Option<Fault>>,
    /// After the script is exhausted: probability in `[0, 1]` that a request meets a fault.
    pub probability: f64,
    /// Fault kinds drawn from when a fault hits, with relative weights (weight 0 never drawn).
    pub faults: Vec<(Fault, u32)>,
}

impl RoutePlan {
    /// A plan that never injects a fault.
    pub fn none() -> Self {
        Self::default()
    }

    /// A plan that plays `script` and then lets every request through.
    pub fn scripted(script: impl IntoIterator<Item = Option<Fault>>) -> Self {
        Self {
            script: script.into_iter().collect(),
            ..Self::default()
        }
    }

    /// A plan that injects one of `faults` (weighted) with `probability`.
    pub fn random(probability: f64, faults: Vec<(Fault, u32)>) -> Self {
        Self {
            script: VecDeque::new(),
            probability,
            faults,
        }
    }
}

/// Ready-made fault plans for all routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultProfile {
    /// No faults.
    #[default]
    None,
    /// About one request in ten meets a fault: 503 / 429 with `Retry-After: 1`, lost ACKs,
    /// resets, watermark lag (revocations), stale pages and bad signatures (directory). No
    /// stalls, so runs stay fast whatever the client deadline.
    Default,
    /// About one request in three meets a fault, including stalls past the client deadline
    /// (configure a short client deadline and [`crate::knowledge_fs::RemoteConfig::stall`]).
    Heavy,
}

impl std::str::FromStr for FaultProfile {
    type Err = String;

    /// Parses `none`, `default` or `heavy`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "default" => Ok(Self::Default),
            "heavy" => Ok(Self::Heavy),
            other => Err(format!(
                "unknown fault profile {other:?}; use none, default or heavy"
            )),
        }
    }
}

impl FaultProfile {
    /// The plan of `route` under this profile.
    pub fn plan(self, route: Route) -> RoutePlan {
        let (probability, with_stalls) = match self {
            FaultProfile::None => return RoutePlan::none(),
            FaultProfile::Default => (0.1, false),
            FaultProfile::Heavy => (0.33, true),
        };
        let mut faults = vec![
            (
                Fault::Unavailable {
                    retry_after_secs: 1,
                },
                3,
            ),
            (
                Fault::RateLimited {
                    retry_after_secs: 1,
                },
                2,
            ),
            (Fault::LostAck, 3),
            (Fault::ResetAfterCommit, 2),
        ];
        if with_stalls {
            faults.push((Fault::Stall { commit: true }, 1));
            faults.push((Fault::Stall { commit: false }, 1));
        }
        if route == Route::Revocation {
            faults.push((Fault::LagWatermark, 3));
        }
        if route.is_directory() {
            faults.extend([
                (Fault::StalePage, 3),
                (Fault::UntrustedSignature, 1),
                (Fault::BadSignature, 1),
                (Fault::Unsigned, 1),
                (Fault::SkewedTimestamp, 1),
            ]);
        }
        RoutePlan::random(probability, faults)
    }
}

/// Draws faults per route from plans and a seeded random source, and counts them.
#[derive(Debug)]
pub struct FaultInjector {
    rng: StdRng,
    plans: BTreeMap<Route, RoutePlan>,
    injected: BTreeMap<(Route, &'static str), u64>,
}

impl FaultInjector {
    /// An injector with `profile` on every route and `seed` for the random draws.
    pub fn new(profile: FaultProfile, seed: u64) -> Self {
        Self {
            rng: StdRng::seed_from_u64(seed),
            plans: Route::ALL.iter().map(|r| (*r, profile.plan(*r))).collect(),
            injected: BTreeMap::new(),
        }
    }

    /// Replaces the plan of `route`.
    pub fn set_plan(&mut self, route: Route, plan: RoutePlan) {
        self.plans.insert(route, plan);
    }

    /// Appends `faults` to the script of `route` (played before any random draw).
    pub fn script(&mut self, route: Route, faults: impl IntoIterator<Item = Option<Fault>>) {
        self.plans.entry(route).or_default().script.extend(faults);
    }

    /// The fault the next request on `route` meets, if any; counts it.
    pub fn next(&mut self, route: Route) -> Option<Fault> {
        let plan = self.plans.entry(route).or_default();
        let fault = match plan.script.pop_front() {
            Some(scripted) => scripted,
            None => draw(&mut self.rng, plan),
        };
        if let Some(f) = fault {
            *self.injected.entry((route, f.name())).or_default() += 1;
        }
        fault
    }

    /// Faults injected so far, per route and fault name.
    pub fn injected(&self) -> BTreeMap<(Route, &'static str), u64> {
        self.injected.clone()
    }
}

fn draw(rng: &mut StdRng, plan: &RoutePlan) -> Option<Fault> {
    let total: u64 = plan.faults.iter().map(|(_, w)| u64::from(*w)).sum();
    if total == 0 || plan.probability <= 0.0 {
        return None;
    }
    if rng.random::<f64>() >= plan.probability {
        return None;
    }
    let mut pick = rng.random_range(0..total);
    for (fault, weight) in &plan.faults {
        let weight = u64::from(*weight);
        if pick < weight {
            return Some(*fault);
        }
        pick -= weight;
    }
    None
}

/// How long a stalled request waits by default before answering: far beyond any sane test
/// deadline, short enough not to pin a task forever if nobody shuts the server down.
pub const DEFAULT_STALL: Duration = Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_faults_play_in_order_then_stop() {
        let mut inj = FaultInjector::new(FaultProfile::None, 1);
        inj.script(
            Route::Provision,
            [Some(Fault::LostAck), None, Some(Fault::ResetAfterCommit)],
        );
        assert_eq!(inj.next(Route::Provision), Some(Fault::LostAck));
        assert_eq!(inj.next(Route::Lookup), None);
        assert_eq!(inj.next(Route::Provision), None);
        assert_eq!(inj.next(Route::Provision), Some(Fault::ResetAfterCommit));
        assert_eq!(inj.next(Route::Provision), None);
        assert_eq!(
            inj.injected().get(&(Route::Provision, "lost_ack")),
            Some(&1)
        );
    }

    #[test]
    fn same_seed_same_faults() {
        let run = |seed| {
            let mut inj = FaultInjector::new(FaultProfile::Heavy, seed);
            (0..200)
                .map(|_| inj.next(Route::Revocation))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn profile_probability_is_roughly_respected() {
        let mut inj = FaultInjector::new(FaultProfile::Default, 42);
        let hits = (0..10_000)
            .filter(|_| inj.next(Route::Provision).is_some())
            .count();
        assert!(
            (700..1300).contains(&hits),
            "{hits} faults in 10000 requests"
        );
    }

    #[test]
    fn default_profile_never_stalls_and_none_never_faults() {
        let mut def = FaultInjector::new(FaultProfile::Default, 3);
        let mut none = FaultInjector::new(FaultProfile::None, 3);
        for route in Route::ALL {
            for _ in 0..2_000 {
                assert!(!matches!(def.next(route), Some(Fault::Stall { .. })));
                assert_eq!(none.next(route), None);
            }
        }
    }

    #[test]
    fn watermark_lag_is_only_drawn_on_revocations() {
        let mut inj = FaultInjector::new(FaultProfile::Heavy, 9);
        for _ in 0..5_000 {
            assert_ne!(inj.next(Route::Provision), Some(Fault::LagWatermark));
        }
        assert!((0..5_000).any(|_| inj.next(Route::Revocation) == Some(Fault::LagWatermark)));
    }

    #[test]
    fn directory_faults_are_only_drawn_on_directory_routes() {
        let mut inj = FaultInjector::new(FaultProfile::Heavy, 11);
        let directory_only = |f: Option<Fault>| {
            matches!(
                f,
                Some(
                    Fault::StalePage
                        | Fault::UntrustedSignature
                        | Fault::BadSignature
                        | Fault::Unsigned
                        | Fault::SkewedTimestamp
                )
            )
        };
        for route in [
            Route::Provision,
            Route::Lookup,
            Route::Deletion,
            Route::Revocation,
        ] {
            assert!((0..3_000).all(|_| !directory_only(inj.next(route))));
        }
        assert!((0..3_000).any(|_| directory_only(inj.next(Route::DirectoryEvents))));
    }
}
