//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask ci`: the single gate (fmt, clippy, tests on SQLite, tests on PostgreSQL, each
//!   mechanism alone, docs, packages); see [`ci`].
//! - `cargo xtask pg`: a throwaway PostgreSQL cluster for manual work; see [`pg`].
//! - `cargo xtask bench`: the benchmarks; see [`mod@bench`].
//! - `cargo xtask demo [ARGS]`: `cargo run --release -p tenantry-app -- demo [ARGS]`.
//! - `cargo xtask chaos [ARGS]`: replicas killed at random on a throwaway PostgreSQL; see
//!   [`chaos`].
//!
//! Add a subcommand by adding a variant to [`Command`] and a match arm in [`main`].

mod bench;
mod chaos;
mod ci;
mod interrupt;
mod package_sources;
mod pg;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Command line of `cargo xtask`.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Tenantry project automation", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// The gate: fmt, clippy, tests on SQLite, then tests on PostgreSQL (a throwaway cluster,
    /// or the server in DATABASE_URL), then each mechanism alone, the docs and the packages.
    Ci(ci::CiArgs),
    /// Start a throwaway PostgreSQL cluster, print its URL, and keep it running until Ctrl-C
    /// (or end of standard input); then stop it and remove its folder.
    Pg(PgArgs),
    /// Benchmarks: release build, throwaway PostgreSQL cluster, pgbench reference; results
    /// as JSON lines, in target/bench/ and in docs/benchmarks.md.
    Bench(bench::BenchArgs),
    /// The deterministic simulations: `cargo xtask sim [--sim all|lifecycle|workers|fences|projector]
    /// --seed S --steps N [--seeds K]` runs seeds S..S+K of N steps each and prints the failing
    /// seed, step and trace, if any (docs/verification.md).
    Sim {
        /// Arguments passed to `tenantry-sim`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The end-to-end demo: `cargo run --release -p tenantry-app -- demo [ARGS]` (see
    /// `tenantry demo --help` for ARGS, e.g. `--scale 0.1 --faults heavy`).
    Demo {
        /// Arguments passed to `tenantry demo`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Chaos: N `tenantry serve` replicas on a throwaway PostgreSQL cluster, killed, paused and
    /// cut off at random while a seeded workload runs; exactly-once checked at the end
    /// (docs/reliability.md). E.g. `cargo xtask chaos -- --replicas 3 --commands 10000`.
    Chaos(chaos::ChaosArgs),
}

/// Options of `cargo xtask pg`.
#[derive(Debug, clap::Args)]
struct PgArgs {
    /// Keep running when standard input ends (for `cargo xtask pg --ignore-stdin &`); stop
    /// with Ctrl-C or `kill <pid>` (SIGTERM).
    #[arg(long)]
    ignore_stdin: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    interrupt::install();
    let root = workspace_root();
    match cli.command {
        Command::Ci(args) => ci::run(&root, &args),
        Command::Pg(args) => run_pg(&args),
        Command::Bench(args) => bench::run(&root, &args),
        Command::Demo { args } => run_demo(&root, &args),
        Command::Sim { args } => run_sim(&root, &args),
        Command::Chaos(args) => chaos::run(&root, &args),
    }
}

/// Cargo's target folder for builds run from `root`: `CARGO_TARGET_DIR` when set (relative to
/// `root`, where the xtask runs cargo), otherwise `root/target`.
fn target_dir(root: &Path) -> PathBuf {
    target_dir_of(root, std::env::var_os("CARGO_TARGET_DIR"))
}

/// [`target_dir`] with the variable's value given.
fn target_dir_of(root: &Path, variable: Option<std::ffi::OsString>) -> PathBuf {
    variable.map_or_else(|| root.join("target"), |dir| root.join(dir))
}

/// The workspace root: the parent of this crate's folder.
fn workspace_root() -> PathBuf {
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    root.canonicalize().unwrap_or_else(|_| root.to_path_buf())
}

fn run_pg(args: &PgArgs) -> ExitCode {
    let cluster = match pg::Cluster::start() {
        Ok(cluster) => cluster,
        Err(e) => {
            eprintln!("xtask: {e}");
            return ExitCode::FAILURE;
        }
    };
    let url = cluster.url();
    println!("{} running (pid {})", cluster.version(), std::process::id());
    println!("  folder: {} (server.log inside)", cluster.dir().display());
    println!("  URL:    {url}");
    println!("Run the tests against it:");
    println!("  TENANTRY_TEST_PG_URL={url} cargo test");
    if args.ignore_stdin {
        println!(
            "Stop with Ctrl-C or `kill {}`; the cluster and its folder are then removed.",
            std::process::id()
        );
    } else {
        println!(
            "Stop with Ctrl-C or Ctrl-D (end of input); the cluster and its folder are then removed."
        );
    }
    let _ = std::io::Write::flush(&mut std::io::stdout());
    if args.ignore_stdin {
        loop {
            std::thread::park();
        }
    }
    // Read until end of input; Ctrl-C is handled by the interrupt thread.
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
    let dir = cluster.dir().display().to_string();
    drop(cluster);
    println!("stopped; removed {dir}");
    ExitCode::SUCCESS
}

fn run_sim(root: &Path, args: &[String]) -> ExitCode {
    run_cargo(
        root,
        &[
            "run",
            "-p",
            "tenantry-verification",
            "--bin",
            "tenantry-sim",
            "--",
        ],
        args,
    )
}

fn run_demo(root: &Path, args: &[String]) -> ExitCode {
    run_cargo(
        root,
        &["run", "--release", "-p", "tenantry-app", "--", "demo"],
        args,
    )
}

/// Runs `cargo <command> <args>` in `root` and exits as it does (failure when cargo cannot be
/// started).
fn run_cargo(root: &Path, command: &[&str], args: &[String]) -> ExitCode {
    let status =
        std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(root)
            .args(command)
            .args(args)
            .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => ExitCode::from(u8::try_from(s.code().unwrap_or(1)).unwrap_or(1)),
        Err(e) => {
            eprintln!("xtask: cannot run cargo: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::target_dir_of;

    #[test]
    fn the_target_folder_follows_cargo_target_dir() {
        let root = Path::new("/w");
        assert_eq!(target_dir_of(root, None), PathBuf::from("/w/target"));
        assert_eq!(
            target_dir_of(root, Some("out".into())),
            PathBuf::from("/w/out")
        );
        assert_eq!(target_dir_of(root, Some("/t".into())), PathBuf::from("/t"));
    }
}
