//! The deterministic simulation (`tenantry_verification::sim`): many seeds hold every
//! invariant, a run is a pure function of its seed, and a planted bug is found.

use tenantry_verification::model_checks_run_here;
use tenantry_verification::sim::{SimBug, run};

/// One million simulated steps: 200 seeds of 5,000 steps (about 15 s in a debug build).
#[test]
fn a_million_seeded_steps_hold_every_invariant() {
    if !model_checks_run_here() {
        return;
    }
    let started = std::time::Instant::now();
    for seed in 0..200 {
        if let Err(failure) = run(seed, 5_000, None) {
            panic!("{failure}");
        }
    }
    println!("1,000,000 simulated steps in {:?}", started.elapsed());
}

#[test]
fn a_planted_non_idempotent_remote_is_found_and_reproduces_by_seed() {
    let failure = (0..200)
        .find_map(|seed| run(seed, 500, Some(SimBug::NonIdempotentProvision)).err())
        .expect("the planted bug is found within 200 seeds");
    println!("{failure}");
    assert!(failure.message.contains("remote spaces"), "{failure}");
    let again = run(failure.seed, 500, Some(SimBug::NonIdempotentProvision)).unwrap_err();
    assert_eq!(again, failure, "the same seed must fail the same way");
}
