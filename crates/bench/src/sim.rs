//! Simulated steps per second of the deterministic simulations (`tenantry_verification::sim`,
//! docs/verification.md): each simulation runs `seeds` seeds of `steps` steps on a thread of
//! its own (each run builds its own paused current-thread runtime), timed on the wall clock.
//! One result line per simulation: `{"part": "sim", "sim", "seeds", "steps", "seconds",
//! "steps_per_second"}`.

use std::time::Instant;

use serde_json::json;
use tenantry_verification::sim;

use crate::{BenchResult, emit};

/// One simulation: its name and "run one seed of n steps".
type Simulation = (&'static str, fn(u64, u64) -> Result<(), sim::SimFailure>);

const SIMULATIONS: [Simulation; 4] = [
    ("lifecycle", |seed, steps| sim::run(seed, steps, None)),
    ("workers", |seed, steps| {
        sim::workers::run(seed, steps, None).map(|_| ())
    }),
    ("fences", |seed, steps| {
        sim::fences::run(seed, steps, None).map(|_| ())
    }),
    ("projector", |seed, steps| {
        sim::projector::run(seed, steps, None).map(|_| ())
    }),
];

/// Runs every simulation for `seeds` seeds of `steps` steps and reports its steps per second.
///
/// # Errors
/// A broken invariant (the simulation's failure report, with its seed) or a thread that
/// could not run.
pub fn run(seeds: u64, steps: u64) -> BenchResult<()> {
    for (name, run_seed) in SIMULATIONS {
        // A plain thread: each run starts its own runtime, which tokio refuses inside this
        // binary's runtime.
        let timed = std::thread::spawn(move || {
            let started = Instant::now();
            for seed in 0..seeds {
                run_seed(seed, steps).map_err(|failure| failure.to_string())?;
            }
            Ok::<_, String>(started.elapsed().as_secs_f64())
        })
        .join()
        .map_err(|_| format!("the {name} simulation panicked"))??;
        let total = seeds.saturating_mul(steps);
        emit(&json!({
            "part": "sim",
            "sim": name,
            "seeds": seeds,
            "steps": total,
            "seconds": (timed * 100.0).round() / 100.0,
            "steps_per_second": (total as f64 / timed.max(1e-9)).round(),
        }));
    }
    Ok(())
}
