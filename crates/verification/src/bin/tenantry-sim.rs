//! `tenantry-sim --seed S --steps N [--seeds K]`: runs the deterministic lifecycle simulation
//! (`tenantry_verification::sim`) for seeds S..S+K, N steps each; prints the steps per second,
//! or the first failure (seed, step, trace) and exits 1. `cargo xtask sim` runs it.

use std::process::ExitCode;
use std::time::Instant;

fn value(args: &[String], name: &str, default: u64) -> Result<u64, String> {
    match args.iter().position(|a| a == name) {
        None => Ok(default),
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{name} needs a whole number, e.g. {name} 42")),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = (|| {
        Ok::<_, String>((
            value(&args, "--seed", 0)?,
            value(&args, "--steps", 1_000)?,
            value(&args, "--seeds", 1)?,
        ))
    })();
    let (seed, steps, seeds) = match parsed {
        Ok(v) => v,
        Err(message) => {
            eprintln!(
                "tenantry-sim: {message}\nusage: tenantry-sim [--seed S] [--steps N] [--seeds K]"
            );
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    for s in seed..seed.saturating_add(seeds) {
        if let Err(failure) = tenantry_verification::sim::run(s, steps, None) {
            eprintln!("{failure}");
            return ExitCode::FAILURE;
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let total = steps.saturating_mul(seeds);
    println!(
        "{seeds} seed(s) from {seed}, {total} steps in {elapsed:.2} s ({:.0} simulated steps/s): all invariants held",
        total as f64 / elapsed.max(1e-9)
    );
    ExitCode::SUCCESS
}
