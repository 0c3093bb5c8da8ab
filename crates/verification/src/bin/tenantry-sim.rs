//! `tenantry-sim [--sim NAME] [--seed S] [--steps N] [--seeds K]`: runs a deterministic simulation
//! (`tenantry_verification::sim`) for seeds S..S+K, N steps each; prints the steps per second,
//! or the first failure (seed, step, trace) and exits 1; bad arguments (an unknown flag, zero
//! steps or seeds) exit 2 and run nothing. `--sim` is `all` (the default: each
//! simulation in turn), `lifecycle` (the saga through one dispatcher), `workers` (worker loops of several processes on
//! virtual time), `workers-sql` (the same over the real SQL store: a fresh SQLite database per
//! seed, or PostgreSQL in a PostgreSQL test run; not part of `all`), `fences` (scoped writes of
//! two processes and an operator), `projector` (two directory projector replicas against a
//! reordering directory). `cargo xtask sim` runs it.

use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use tenantry_verification::sim::{self, SimFailure};

/// Runs deterministic simulations for a range of seeds. Bad arguments (an unknown flag, a
/// value that is not a whole number, zero steps or seeds) exit 2 with clap's message.
#[derive(Debug, Parser)]
#[command(
    name = "tenantry-sim",
    about = "Deterministic simulations of Tenantry's mechanisms"
)]
struct Args {
    /// Which simulation to run.
    #[arg(long, value_enum, default_value_t = SimName::All)]
    sim: SimName,
    /// First seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Steps per seed (at least 1).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
    steps: u64,
    /// Number of seeds, from `--seed` on (at least 1).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: u64,
}

/// The simulations `--sim` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SimName {
    /// Each simulation in turn, except `workers-sql`.
    All,
    /// The saga through one dispatcher.
    Lifecycle,
    /// Worker loops of several processes on virtual time.
    Workers,
    /// The worker loops over the real SQL store.
    WorkersSql,
    /// Scoped writes of two processes and an operator.
    Fences,
    /// Two directory projector replicas against a reordering directory.
    Projector,
}

/// Runs one seed of a simulation for a number of steps.
type RunSeed = fn(u64, u64) -> Result<(), SimFailure>;

/// The simulations of `name`, each as "run one seed".
fn simulations(name: SimName) -> Vec<(&'static str, RunSeed)> {
    let lifecycle: RunSeed = |seed, steps| sim::run(seed, steps, None);
    let workers: RunSeed = |seed, steps| sim::workers::run(seed, steps, None).map(|_| ());
    let workers_sql: RunSeed = |seed, steps| sim::workers::run_over_sql(seed, steps).map(|_| ());
    let fences: RunSeed = |seed, steps| sim::fences::run(seed, steps, None).map(|_| ());
    let projector: RunSeed = |seed, steps| sim::projector::run(seed, steps, None).map(|_| ());
    match name {
        SimName::Lifecycle => vec![("lifecycle", lifecycle)],
        SimName::Projector => vec![("projector", projector)],
        SimName::Workers => vec![("workers", workers)],
        SimName::WorkersSql => vec![("workers-sql", workers_sql)],
        SimName::Fences => vec![("fences", fences)],
        SimName::All => vec![
            ("lifecycle", lifecycle),
            ("workers", workers),
            ("fences", fences),
            ("projector", projector),
        ],
    }
}

fn main() -> ExitCode {
    let Args {
        sim: name,
        seed,
        steps,
        seeds,
    } = Args::parse();
    for (name, run) in simulations(name) {
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
