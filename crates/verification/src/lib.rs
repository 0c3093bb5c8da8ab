//! Model checks of Tenantry's protocols (issue 12): exhaustive searches with
//! [stateright](https://docs.rs/stateright) over small systems whose steps call the real pure
//! rules of the domain crates (`tenantry-lifecycle`, `tenantry-fence`, `tenantry-directory`,
//! `tenantry-kernel`) for every decision those crates hold; what no pure function holds (the
//! store's SQL rules, the remote, the engine's sequencing) each model writes out again
//! (`docs/verification.md` lists what each model calls and what it re-writes).
//!
//! - [`lease`]: the lifecycle saga's leased outbox (3 workers, a provision and a delete of one
//!   control space, crashes, lost answers, clock skew, lease expiry);
//! - [`fence`]: reconciliation fences (two writers on one scope, cancellation, unknown
//!   outcomes, restart, operator clear);
//! - [`revisions`]: directory revisions (two replicas applying snapshots, event batches and
//!   deltas out of order).
//!
//! - [`planted_settle`]: the planted bug of the chaos harness and the store check, a lifecycle
//!   store decorator whose settle skips the lease check (deliberately broken, never in a
//!   shipped build);
//! - [`sim`]: a seeded deterministic simulation of the lifecycle saga through the real engine
//!   (`cargo xtask sim --seed S --steps N`).
//!
//! Each model has planted-bug variants (mutations of the model's copies of a rule or of the
//! simulations' wrappers, not of shipped code); the tests in `tests/` assert that the checker
//! finds a counterexample for each, naming the property it breaks. What is modelled, the bounds, the state
//! counts and what is not checked: `docs/verification.md`.
//!
//! Test-only: `publish = false`, and no crate of the service depends on this one.

pub mod fence;
pub mod lease;
pub mod planted_settle;
pub mod revisions;
pub mod sim;

use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

/// What a complete check found and how long it took.
#[derive(Debug)]
pub struct CheckReport {
    /// Distinct states explored.
    pub unique_states: usize,
    /// Longest path explored.
    pub max_depth: usize,
    /// Wall time of the check.
    pub elapsed: Duration,
}

/// Explores every reachable state of `model` (breadth first, on the machine's cores) and
/// asserts its properties: no counterexample to an `always` property, an example of every
/// `sometimes` property. Prints and returns the state count and time.
///
/// # Panics
/// With the counterexample path when a property fails (the purpose of the check).
pub fn check_holds<M>(name: &str, model: M) -> CheckReport
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + Hash + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + Eq + Hash + Send + Sync + 'static,
{
    let started = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    let report = CheckReport {
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed: started.elapsed(),
    };
    println!("{name}: {report:?}");
    checker.assert_properties();
    report
}

/// Explores `model` (a planted-bug variant) until it finds a counterexample to the `always`
/// property `property`, and returns the path that breaks it (rendered for the test output).
///
/// # Panics
/// When the whole state space holds `property`: the planted bug went unnoticed, so the check
/// is vacuous for it.
pub fn find_counterexample<M>(model: M, property: &'static str) -> String
where
    M: Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + Hash + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + Eq + Hash + Send + Sync + 'static,
{
    let checker = model
        .checker()
        .finish_when(HasDiscoveries::AnyOf([property].into_iter().collect()))
        .spawn_bfs()
        .join();
    let Some(path) = checker.discovery(property) else {
        panic!(
            "no counterexample to {property:?} in {} states: the planted bug went unnoticed",
            checker.unique_state_count()
        );
    };
    let actions: Vec<String> = path
        .into_actions()
        .iter()
        .map(|a| format!("{a:?}"))
        .collect();
    println!(
        "{property}: counterexample in {} steps: {actions:?}",
        actions.len()
    );
    actions.join("\n")
}
