//! Model checks of Tenantry's protocols (issue 12): exhaustive searches with
//! [stateright](https://docs.rs/stateright) over small systems whose every step calls the real
//! pure rules of the domain crates (`tenantry-lifecycle`, `tenantry-fence`,
//! `tenantry-directory`, `tenantry-kernel`), not a rewrite of them.
//!
//! - [`lease`]: the lifecycle saga's leased outbox (3 workers, a provision and a delete of one
//!   control space, crashes, lost answers, clock skew, lease expiry);
//! - [`fence`]: reconciliation fences (two writers on one scope, cancellation, unknown
//!   outcomes, restart, operator clear);
//! - [`revisions`]: directory revisions (two replicas applying snapshots, event batches and
//!   deltas out of order).
//!
//! Each model has planted-bug variants; the tests in `tests/` assert that the checker finds a
//! counterexample for each, so no property is vacuous. What is modelled, the bounds, the state
//! counts and what is not checked: `docs/verification.md`.
//!
//! Test-only: `publish = false`, and no crate of the service depends on this one.

pub mod fence;
pub mod lease;
pub mod revisions;

/// Runs a breadth-first check of `model` on one thread to completion (or until every property
/// has a discovery) and returns the checker, for assertions and state counts.
pub fn check<M>(model: M) -> impl stateright::Checker<M>
where
    M: stateright::Model + Send + Sync + 'static,
    M::State: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
    M::Action: Clone + std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static,
{
    use stateright::Checker as _;
    model.checker().spawn_bfs().join()
}
