//! `cargo xtask`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! - `cargo xtask ci`: the single gate (fmt, clippy, tests on SQLite, tests on PostgreSQL, each
//!   mechanism alone, docs, packages); see [`ci`].
//! - `cargo xtask pg [--tls]`: a throwaway PostgreSQL cluster for manual work (`--tls`: TLS
//!   only); see [`pg`].
//! - `cargo xtask bench`: the benchmarks; see [`mod@bench`].
//! - `cargo xtask demo [ARGS]`: `cargo run --release -p tenantry-demo -- demo [ARGS]`.
//! - `cargo xtask chaos [ARGS]`: replicas killed at random on a throwaway PostgreSQL; see
//!   [`chaos`].
//!
//! Add a subcommand by adding a variant to [`Command`] and a match arm in [`main`].

mod bench;
mod chaos;
mod ci;
mod ha;
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
    /// The deterministic simulations: `cargo xtask sim [--sim all|lifecycle|workers|workers-sql|fences|projector]
    /// --seed S --steps N [--seeds K]` runs seeds S..S+K of N steps each and prints the failing
    /// seed, step and trace, if any (docs/verification.md).
    Sim {
        /// Arguments passed to `tenantry-sim`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The end-to-end demo: `cargo run --release -p tenantry-demo -- demo [ARGS]` (see
    /// `tenantry-demo demo --help` for ARGS, e.g. `--scale 0.1 --faults heavy`).
    Demo {
        /// Arguments passed to `tenantry-demo demo`.
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
    /// The TLS-only variant: `ssl = on`, a certificate signed by a CA made for it, and no
    /// connection without TLS over TCP (`hostssl` lines only in `pg_hba.conf`).
    #[arg(long)]
    tls: bool,
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
    let started = if args.tls {
        pg::Cluster::start_tls()
    } else {
        pg::Cluster::start()
    };
    let cluster = match started {
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
    if let Some(ca) = cluster.ca_file() {
        println!("  CA:     {} (TLS only)", ca.display());
        println!("  verified URL: {}", cluster.verified_url());
        println!("Run the PostgreSQL TLS tests against it:");
        println!(
            "  TENANTRY_TEST_PG_TLS_URL={url} TENANTRY_TEST_PG_TLS_CA={} cargo test -p tenantry-store-seaorm --test pg_tls",
            ca.display()
        );
    } else {
        println!("Run the tests against it:");
        println!("  TENANTRY_TEST_PG_URL={url} cargo test");
    }
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
        &["run", "--release", "-p", "tenantry-demo", "--", "demo"],
        args,
    )
}

/// A `cargo` command (the cargo that runs us) without the variables `cargo run` set for the
/// xtask itself (`CARGO_PKG_*`, `CARGO_MANIFEST_*`, `CARGO_CRATE_NAME`, ...). Build scripts
/// such as ring's rerun when one of those changes, so a cargo started with them would rebuild
/// ring and everything above it, and the next plain `cargo` (or `cargo xtask`, which builds
/// ring for rcgen) would rebuild it back.
pub(crate) fn cargo_command() -> std::process::Command {
    let mut cmd =
        std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if is_cargo_run_variable(&name.to_string_lossy()) {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// Whether `name` is one of the variables `cargo run` sets for the program it runs.
/// The trimmed stdout of `cmd` (no stdin, stderr dropped), or `None` when it cannot run or
/// fails.
pub(crate) fn stdout_of(cmd: &mut std::process::Command) -> Option<String> {
    let out = cmd
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn is_cargo_run_variable(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || matches!(
            name,
            "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
        )
}

/// Runs `cargo <command> <args>` in `root` and exits as it does (failure when cargo cannot be
/// started).
fn run_cargo(root: &Path, command: &[&str], args: &[String]) -> ExitCode {
    let status = cargo_command()
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
    /// Only what `cargo run` sets for the xtask is removed; `CARGO` (which cargo) and the
    /// user's cargo settings stay.
    #[test]
    fn cargo_run_variables_are_recognised() {
        for name in ["CARGO_PKG_NAME", "CARGO_MANIFEST_DIR", "CARGO_CRATE_NAME"] {
            assert!(super::is_cargo_run_variable(name), "{name}");
        }
        for name in [
            "CARGO",
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "CARGO_INCREMENTAL",
        ] {
            assert!(!super::is_cargo_run_variable(name), "{name}");
        }
    }

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
