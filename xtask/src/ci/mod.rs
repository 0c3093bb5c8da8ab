//! `cargo xtask ci`: the single gate.
//!
//! Steps, in order, stopping at the first failure:
//! 1. `cargo fmt --all -- --check`
//! 2. `cargo clippy --workspace --all-targets --locked -- -D warnings`
//!    then `cargo check -p tenantry-store-seaorm --no-default-features --features sqlite` (and
//!    `postgres`): each one-driver build compiles ([`DRIVER_CHECKS`])
//! 3. `cargo test --workspace --locked` on SQLite (`TENANTRY_TEST_PG_URL` removed from the
//!    environment, so every test database is a SQLite file)
//! 4. a PostgreSQL server: the one named by `DATABASE_URL` when set, else a throwaway cluster
//!    ([`crate::pg::Cluster`])
//! 5. `cargo test --workspace --locked` again with `TENANTRY_TEST_PG_URL` set to that server
//!    (each test creates its own fresh database there)
//! 6. PostgreSQL over TLS (issue 26, budget [`PG_TLS_BUDGET`]): a TLS-only throwaway cluster
//!    ([`Cluster::start_tls`]; or the server named by `TENANTRY_TEST_PG_TLS_URL` with its CA
//!    file in `TENANTRY_TEST_PG_TLS_CA`) and `cargo test -p tenantry-store-seaorm --test
//!    pg_tls` with `TENANTRY_REQUIRE_PG_TLS=1` (a test that finds no TLS server fails)
//!
//! Then the packaging steps ([`PackagingStep`], issue 17), each with a time budget:
//! 7. each mechanism alone: `cargo check` of the crates with mechanism features
//!    (`--no-default-features --features lifecycle`, then `directory`);
//! 8. the fence runtime alone: `cargo test` of those crates with `--features fences` on SQLite
//!    (a fences-only build compiles and works without the saga and the directory);
//! 9. the model-based check of the SQL store built with a planted mutation of shipped code
//!    (`cargo test -p tenantry-verification --features planted-store-settle --test
//!    store_sequences`: the settle without its lease predicate), which must name the property
//!    it breaks; then every planted mutation of shipped rules switched on one at a time
//!    (`--features planted-mutations --test planted`), each found by its checkers;
//! 10. the operator console in headless Chromium: `cargo test -p tenantry-app --test
//!    ui_browser -- --ignored` with `TENANTRY_REQUIRE_BROWSER=1` (a missing browser fails);
//!    then `cargo doc --workspace --all-features --no-deps` with `RUSTDOCFLAGS=-D warnings`;
//! 11. `cargo test` of the outside fixture crate `fixtures/host-platform` (its own workspace
//!     and lockfile, the shared target folder): a platform that embeds the crates through
//!     their public API only (the runnable `examples/` already ran in steps 3 and 5);
//! 12. `cargo package` of every published crate (verified: each `.crate` builds on its own).
//!
//! Then the chaos steps ([`CHAOS_STEPS`], issue 11), each with a time budget:
//! 13. `cargo xtask chaos --debug`: 3 replicas on a throwaway PostgreSQL cluster, about 1,000
//!     commands, every fault kind (a ±10-minute wall-clock step of one replica among them,
//!     through libfaketime, which `.ci/run` installs), and two fence writer processes
//!     SIGKILLed mid-run;
//! 14. `cargo xtask chaos --debug --ha`: 3 replicas on a pg_auto_failover formation (monitor
//!     and two nodes, which `.ci/run` installs), about 600 commands, failing the primary over
//!     at least once (issue 30);
//! 15. the SQLite profile: one replica, killed and restarted;
//! 16. the planted bug (a settle without the lease check), which the harness must catch.
//!
//! A step that passes but takes longer than its budget is reported as `over budget` (not a
//! failure: the machine may be loaded), so a slow drift shows before CI hits its limit.
//!
//! Each step is announced by a banner; a summary with durations and test counts closes the run.
//! The throwaway cluster is a guard value, so it is stopped and removed on every exit path.

mod report;
mod steps;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use clap::ValueEnum;

use report::{Outcome, Report, display_command, redact, run_counting_tests, run_inherit};
use steps::{CHAOS_STEPS, PACKAGING_STEPS, PackagingStep, clear_stale_package_sources, words};

use crate::pg::Cluster;

/// Environment variable that selects the PostgreSQL backend in the test harness.
const PG_URL_ENV: &str = "TENANTRY_TEST_PG_URL";
/// Environment variable naming an existing PostgreSQL server to use instead of a throwaway one.
const DATABASE_URL_ENV: &str = "DATABASE_URL";
/// The TLS-only PostgreSQL server of the TLS tests (`crates/store-seaorm/tests/pg_tls.rs`):
/// its URL without TLS parameters; set by the gate, or by hand for an existing server.
const PG_TLS_URL_ENV: &str = "TENANTRY_TEST_PG_TLS_URL";
/// The CA file (PEM) that signed the TLS server's certificate.
const PG_TLS_CA_ENV: &str = "TENANTRY_TEST_PG_TLS_CA";
/// Set by the gate so that a TLS test without a TLS server fails instead of skipping.
const PG_TLS_REQUIRE_ENV: &str = "TENANTRY_REQUIRE_PG_TLS";
/// Longest acceptable duration of the PostgreSQL TLS step on 2 cores, cluster start included
/// (docs/operations.md has the measured time).
const PG_TLS_BUDGET: Duration = Duration::from_secs(240);

/// Options of `cargo xtask ci`; without any, this is exactly the gate CI runs.
#[derive(Debug, clap::Args)]
pub struct CiArgs {
    /// Skip a step (repeatable). For local iteration only: the gate runs every step.
    #[arg(long, value_enum)]
    skip: Vec<StepKind>,
    /// Run the tests of these packages only, instead of `--workspace` (repeatable).
    #[arg(short, long = "package", value_name = "PACKAGE")]
    packages: Vec<String>,
    /// Arguments for the test binaries of both test runs, e.g. `-- lease` to filter by name.
    #[arg(last = true, value_name = "TEST_ARGS")]
    test_args: Vec<String>,
}

/// The steps that `--skip` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StepKind {
    /// `cargo fmt --check`.
    Fmt,
    /// `cargo clippy`.
    Clippy,
    /// The one-driver builds of the storage crate (`cargo check`, no tests).
    Drivers,
    /// The test run on SQLite.
    Sqlite,
    /// The PostgreSQL server and the test run on it.
    Postgres,
    /// The TLS-only PostgreSQL cluster and the TLS tests on it.
    PostgresTls,
    /// Each mechanism alone: the `cargo check` and fences-only test steps.
    Features,
    /// `cargo doc` with warnings denied.
    Docs,
    /// `cargo package` of the published crates.
    Package,
    /// The outside fixture crate (`fixtures/host-platform`), which embeds the crates through
    /// their public API only (the examples run in the test steps).
    Embedding,
    /// The operator console's browser tests (headless Chromium over chromedriver).
    Browser,
    /// The model-based checks built with planted mutations of shipped code, which they must
    /// find (docs/verification.md, "Properties and planted mutations").
    Planted,
    /// The chaos harness's short profiles (`cargo xtask chaos`, docs/reliability.md).
    Chaos,
}

/// Runs the gate from the workspace root `root`; the exit code is non-zero on any failure.
pub fn run(root: &Path, args: &CiArgs) -> ExitCode {
    let started = Instant::now();
    let mut report = Report::default();
    let passed = Gate {
        root,
        args,
        report: &mut report,
        next: 1,
    }
    .run()
    .is_ok();
    report.print(passed, started.elapsed());
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The driver features of `tenantry-store-seaorm` each built alone by the gate.
const DRIVER_CHECKS: [&str; 2] = ["sqlite", "postgres"];

/// Total number of steps, for the `[i/N]` banners.
const STEPS: usize = 6 + DRIVER_CHECKS.len() + PACKAGING_STEPS.len() + CHAOS_STEPS.len();

/// A failed step; its details are already in the report.
#[derive(Debug)]
struct StepFailed;

struct Gate<'a> {
    root: &'a Path,
    args: &'a CiArgs,
    report: &'a mut Report,
    next: usize,
}

impl Gate<'_> {
    fn run(&mut self) -> Result<(), StepFailed> {
        if !self.skipped(StepKind::Fmt, "fmt") {
            let mut cmd = self.cargo();
            cmd.args(["fmt", "--all", "--", "--check"]);
            self.command_step("fmt", cmd, false)?;
        }

        if !self.skipped(StepKind::Clippy, "clippy") {
            let mut cmd = self.cargo();
            cmd.args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ]);
            self.command_step("clippy", cmd, false)?;
        }

        for driver in DRIVER_CHECKS {
            let step = format!("check ({driver} only)");
            if !self.skipped(StepKind::Drivers, &step) {
                let mut cmd = self.cargo();
                cmd.args([
                    "check",
                    "-p",
                    "tenantry-store-seaorm",
                    "--no-default-features",
                    "--features",
                    driver,
                    "--locked",
                ]);
                self.command_step(&step, cmd, false)?;
            }
        }

        if !self.skipped(StepKind::Sqlite, "test (SQLite)") {
            let mut cmd = self.cargo_test();
            cmd.env_remove(PG_URL_ENV);
            self.command_step("test (SQLite)", cmd, true)?;
        }

        self.postgres_steps()?;
        self.postgres_tls_step()?;
        self.packaging_steps()?;
        self.budgeted_steps(CHAOS_STEPS)
    }

    /// The PostgreSQL server and the test run on it.
    fn postgres_steps(&mut self) -> Result<(), StepFailed> {
        if self.skipped(StepKind::Postgres, "PostgreSQL server") {
            self.skipped(StepKind::Postgres, "test (PostgreSQL)");
            return Ok(());
        }
        // The cluster (if any) lives until the end of this function: dropping it on any return
        // path, including `?`, stops the server and removes its folder.
        let (url, cluster) = self.postgres_step()?;
        let mut cmd = self.cargo_test();
        cmd.env(PG_URL_ENV, &url);
        let result = self.command_step("test (PostgreSQL)", cmd, true);
        if let Some(cluster) = cluster {
            let dir = cluster.dir().display().to_string();
            drop(cluster);
            println!("xtask: stopped the throwaway cluster and removed {dir}");
        }
        result
    }

    /// The PostgreSQL TLS tests on a TLS-only throwaway cluster (or the server named by
    /// `TENANTRY_TEST_PG_TLS_URL` / `_CA`), checked against [`PG_TLS_BUDGET`] (the cluster's
    /// start included).
    fn postgres_tls_step(&mut self) -> Result<(), StepFailed> {
        let step = "test (PostgreSQL over TLS)";
        if self.skipped(StepKind::PostgresTls, step) {
            return Ok(());
        }
        let started = Instant::now();
        let given = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        // The cluster (if any) lives until the end of this function, as in `postgres_steps`.
        let (url, ca, cluster) = match (given(PG_TLS_URL_ENV), given(PG_TLS_CA_ENV)) {
            (Some(url), Some(ca)) => {
                println!(
                    "xtask: PostgreSQL over TLS at {PG_TLS_URL_ENV}={}",
                    redact(&url)
                );
                (url, ca, None)
            }
            _ => {
                println!("xtask: starting a TLS-only throwaway cluster (initdb, pg_ctl)");
                match Cluster::start_tls() {
                    Ok(cluster) => {
                        let ca = cluster
                            .ca_file()
                            .map(|p| p.display().to_string())
                            .unwrap_or_default();
                        println!(
                            "xtask: {} over TLS at {} (CA {ca})",
                            cluster.version(),
                            cluster.url()
                        );
                        (cluster.url(), ca, Some(cluster))
                    }
                    Err(e) => {
                        self.banner(step, "a TLS-only throwaway cluster");
                        eprintln!("xtask: {e}");
                        let detail = e.to_string().lines().next().unwrap_or_default().to_owned();
                        self.report
                            .push(step, Outcome::Failed, Some(started.elapsed()), detail);
                        return Err(StepFailed);
                    }
                }
            }
        };
        let mut cmd = self.cargo();
        cmd.args(pg_tls_test_args())
            .env_remove(PG_URL_ENV)
            .env(PG_TLS_URL_ENV, &url)
            .env(PG_TLS_CA_ENV, &ca)
            .env(PG_TLS_REQUIRE_ENV, "1");
        let result = self.command_step(step, cmd, true);
        if let Some(cluster) = cluster {
            let dir = cluster.dir().display().to_string();
            drop(cluster);
            println!("xtask: stopped the TLS throwaway cluster and removed {dir}");
        }
        if let Some(record) = self
            .report
            .records
            .iter_mut()
            .rev()
            .find(|r| r.step == step)
        {
            record.elapsed = Some(started.elapsed());
        }
        self.report.check_budget(step, PG_TLS_BUDGET);
        result
    }

    /// Each mechanism alone, the documentation and the packages ([`PACKAGING_STEPS`]).
    fn packaging_steps(&mut self) -> Result<(), StepFailed> {
        self.budgeted_steps(PACKAGING_STEPS)
    }

    /// Runs `steps` in order, each checked against its budget.
    fn budgeted_steps(&mut self, steps: &[PackagingStep]) -> Result<(), StepFailed> {
        for step in steps {
            if self.skipped(step.kind, step.name) {
                continue;
            }
            if step.kind == StepKind::Package {
                clear_stale_package_sources();
            }
            let mut cmd = self.cargo();
            cmd.args((step.args)());
            for (key, value) in step.env {
                cmd.env(key, value);
            }
            if step.tests {
                cmd.env_remove(PG_URL_ENV);
            }
            self.command_step(step.name, cmd, step.tests)?;
            self.report.check_budget(step.name, step.budget);
        }
        Ok(())
    }

    /// Records `step` as skipped when `--skip kind` was given.
    fn skipped(&mut self, kind: StepKind, step: &str) -> bool {
        if !self.args.skip.contains(&kind) {
            return false;
        }
        self.next += 1;
        self.report
            .push(step, Outcome::Skipped, None, "--skip".to_owned());
        true
    }

    fn banner(&mut self, step: &str, what: &str) {
        println!("\n==> [{}/{STEPS}] {step}: {what}", self.next);
        let _ = std::io::stdout().flush();
        self.next += 1;
    }

    fn cargo(&self) -> Command {
        let mut cmd = crate::cargo_command();
        cmd.current_dir(self.root).stdin(Stdio::null());
        cmd
    }

    fn cargo_test(&self) -> Command {
        let mut cmd = self.cargo();
        cmd.arg("test");
        if self.args.packages.is_empty() {
            cmd.arg("--workspace");
        } else {
            for package in &self.args.packages {
                cmd.args(["--package", package]);
            }
        }
        cmd.arg("--locked");
        if !self.args.test_args.is_empty() {
            cmd.arg("--").args(&self.args.test_args);
        }
        cmd
    }

    /// Runs one command step; `count_tests` pipes its stdout through us to count test results.
    fn command_step(
        &mut self,
        step: &str,
        mut cmd: Command,
        count_tests: bool,
    ) -> Result<(), StepFailed> {
        let env_note = if count_tests {
            match cmd.get_envs().find(|(k, _)| *k == PG_URL_ENV) {
                Some((_, Some(url))) => format!("{PG_URL_ENV}={} ", redact(&url.to_string_lossy())),
                _ => format!("(no {PG_URL_ENV}) "),
            }
        } else {
            String::new()
        };
        self.banner(step, &format!("{env_note}{}", display_command(&cmd)));
        let started = Instant::now();
        let result = if count_tests {
            run_counting_tests(&mut cmd)
        } else {
            run_inherit(&mut cmd).map(|status| (status, None))
        };
        let elapsed = started.elapsed();
        if let Ok((_, Some(counts))) = &result {
            self.report.tests.get_or_insert_default().add(*counts);
        }
        match result {
            Ok((status, counts)) if status.success() => {
                let detail = counts.map(|c| c.to_string()).unwrap_or_default();
                self.report
                    .push(step, Outcome::Passed, Some(elapsed), detail);
                Ok(())
            }
            Ok((status, counts)) => {
                let mut detail = format!("failed ({status})");
                if let Some(c) = counts {
                    detail = format!("{detail}; {c}");
                }
                self.report
                    .push(step, Outcome::Failed, Some(elapsed), detail);
                Err(StepFailed)
            }
            Err(e) => {
                let detail = format!("could not run {:?}: {e}", cmd.get_program());
                self.report
                    .push(step, Outcome::Failed, Some(elapsed), detail);
                Err(StepFailed)
            }
        }
    }

    /// Picks the PostgreSQL server: `DATABASE_URL`, else a new throwaway cluster.
    fn postgres_step(&mut self) -> Result<(String, Option<Cluster>), StepFailed> {
        let step = "PostgreSQL server";
        if let Ok(url) = std::env::var(DATABASE_URL_ENV)
            && !url.is_empty()
        {
            let shown = redact(&url);
            self.banner(step, &format!("using {DATABASE_URL_ENV}={shown}"));
            let detail = format!("{DATABASE_URL_ENV} {shown}");
            self.report.push(step, Outcome::Passed, None, detail);
            return Ok((url, None));
        }
        self.banner(step, "starting a throwaway cluster (initdb, pg_ctl)");
        let started = Instant::now();
        match Cluster::start() {
            Ok(cluster) => {
                let url = cluster.url();
                println!(
                    "xtask: {} at {url} (folder {})",
                    cluster.version(),
                    cluster.dir().display()
                );
                let detail = format!("throwaway {}", cluster.version());
                self.report
                    .push(step, Outcome::Passed, Some(started.elapsed()), detail);
                Ok((url, Some(cluster)))
            }
            Err(e) => {
                eprintln!("xtask: {e}");
                let detail = e.to_string().lines().next().unwrap_or_default().to_owned();
                self.report
                    .push(step, Outcome::Failed, Some(started.elapsed()), detail);
                Err(StepFailed)
            }
        }
    }
}

/// The cargo arguments of the PostgreSQL TLS tests.
fn pg_tls_test_args() -> Vec<String> {
    words(&[
        "test",
        "-p",
        "tenantry-store-seaorm",
        "--test",
        "pg_tls",
        "--locked",
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The TLS step runs the storage crate's TLS test binary with the guard set, so a missing
    /// TLS server fails the gate instead of skipping the tests.
    #[test]
    fn the_tls_step_runs_the_pg_tls_tests() {
        assert_eq!(
            pg_tls_test_args(),
            [
                "test",
                "-p",
                "tenantry-store-seaorm",
                "--test",
                "pg_tls",
                "--locked"
            ]
        );
        assert_eq!(PG_TLS_REQUIRE_ENV, "TENANTRY_REQUIRE_PG_TLS");
    }
}
