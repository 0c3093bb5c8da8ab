//! `tenantry-sim [--sim NAME] --seed S --steps N [--seeds K]`: runs a deterministic simulation
//! (`tenantry_verification::sim`) for seeds S..S+K, N steps each; prints the steps per second,
//! or the first failure (seed, step, trace) and exits 1. `--sim` is `all` (the default: each
//! simulation in turn), `lifecycle` (the saga through one dispatcher), `workers` (worker loops of several processes on
//! virtual time), `workers-sql` (the same over the real SQL store: a fresh SQLite database per
//! seed, or PostgreSQL in a PostgreSQL test run; not part of `all`), `fences` (scoped writes of
//! two processes and an operator), `projector` (two directory projector replicas against a
//! reordering directory). `cargo xtask sim` runs it.

use std::process::ExitCode;
use std::time::Instant;

use tenantry_verification::sim::{self, SimFailure};

fn value(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a whole number, e.g. {name} 42")),
    }
}

/// Runs one seed of a simulation for a number of steps.
type RunSeed = fn(u64, u64) -> Result<(), SimFailure>;

/// The simulations by name, each as "run one seed".
fn simulations(name: &str) -> Result<Vec<(&'static str, RunSeed)>, String> {
    let lifecycle: RunSeed = |seed, steps| sim::run(seed, steps, None);
    let workers: RunSeed = |seed, steps| sim::workers::run(seed, steps, None).map(|_| ());
    let workers_sql: RunSeed = |seed, steps| sim::workers::run_over_sql(seed, steps).map(|_| ());
    let fences: RunSeed = |seed, steps| sim::fences::run(seed, steps, None).map(|_| ());
    let projector: RunSeed = |seed, steps| sim::projector::run(seed, steps, None).map(|_| ());
    match name {
        "lifecycle" => Ok(vec![("lifecycle", lifecycle)]),
        "projector" => Ok(vec![("projector", projector)]),
        "workers" => Ok(vec![("workers", workers)]),
        "workers-sql" => Ok(vec![("workers-sql", workers_sql)]),
        "fences" => Ok(vec![("fences", fences)]),
        "all" => Ok(vec![
            ("lifecycle", lifecycle),
            ("workers", workers),
            ("fences", fences),
            ("projector", projector),
        ]),
        other => Err(format!(
            "--sim {other} is not a simulation; use lifecycle, workers, workers-sql, fences, projector or all"
        )),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args
        .iter()
        .position(|a| a == "--sim")
        .and_then(|i| args.get(i + 1))
        .map_or("all", String::as_str);
    let parsed = (|| {
        Ok::<_, String>((
            value(&args, "--seed", 0)?,
            value(&args, "--steps", 1_000)?,
            value(&args, "--seeds", 1)?,
            simulations(name)?,
        ))
    })();
    let (seed, steps, seeds, sims) = match parsed {
        Ok(v) => v,
        Err(message) => {
            eprintln!(
                "tenantry-sim: {message}\nusage: tenantry-sim [--sim all|lifecycle|workers|workers-sql|fences|projector] [--seed S] [--steps N] [--seeds K]"
            );
            return ExitCode::from(2);
        }
    };
    for (name, run) in sims {
        let started = Instant::now();
        for s in seed..seed.saturating_add(seeds) {
            if let Err(failure) = run(s, steps) {
                eprintln!("{failure}");
                return ExitCode::FAILURE;
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let total = steps.saturating_mul(seeds);
        println!(
            "{name}: {seeds} seed(s) from {seed}, {total} steps in {elapsed:.2} s ({:.0} simulated steps/s): all invariants held",
            total as f64 / elapsed.max(1e-9)
        );
    }
    ExitCode::SUCCESS
}
