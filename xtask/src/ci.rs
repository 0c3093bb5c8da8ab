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

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::Path;
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use clap::ValueEnum;

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

/// Crates that have the mechanism features `lifecycle`, `directory` and `fences`.
const MECHANISM_CRATES: &[&str] = &[
    "tenantry-ports",
    "tenantry-engine",
    "tenantry-store-seaorm",
    "tenantry-remote-http",
];

/// Workspace members that are not published (`publish = false`), left out of `cargo package`.
const UNPUBLISHED: &[&str] = &[
    "tenantry-app",
    "tenantry-bench",
    "tenantry-chaos",
    "tenantry-config",
    "tenantry-demo",
    "tenantry-examples",
    "tenantry-operator",
    "tenantry-verification",
    "xtask",
];

/// One of the packaging steps after the test runs, with its time budget.
struct PackagingStep {
    /// Name in the banner and summary.
    name: &'static str,
    /// What `--skip` names it by.
    kind: StepKind,
    /// Longest acceptable duration on 2 cores, from a cold target directory (docs/operations.md
    /// has the measured cold and warm times).
    budget: Duration,
    /// The cargo arguments.
    args: fn() -> Vec<String>,
    /// Extra environment.
    env: &'static [(&'static str, &'static str)],
    /// Whether to count libtest results.
    tests: bool,
}

/// The packaging steps, in order.
const PACKAGING_STEPS: &[PackagingStep] = &[
    PackagingStep {
        name: "check (lifecycle alone)",
        kind: StepKind::Features,
        budget: Duration::from_secs(120),
        args: || mechanism_args("check", "lifecycle"),
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "check (directory alone)",
        kind: StepKind::Features,
        budget: Duration::from_secs(120),
        args: || mechanism_args("check", "directory"),
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "test (fences alone)",
        kind: StepKind::Features,
        budget: Duration::from_secs(360),
        args: || mechanism_args("test", "fences"),
        env: &[],
        tests: true,
    },
    // The model-based check of the SQL store (`crates/verification/tests/store_sequences.rs`)
    // built with the store's settle missing its lease predicate: it must name the property.
    PackagingStep {
        name: "test (planted store mutation found)",
        kind: StepKind::Planted,
        budget: Duration::from_secs(240),
        args: || {
            [
                "test",
                "-p",
                "tenantry-verification",
                "--features",
                "planted-store-settle",
                "--test",
                "store_sequences",
                "--locked",
            ]
            .map(str::to_owned)
            .to_vec()
        },
        env: &[],
        tests: true,
    },
    // Every planted mutation of shipped rules (`crates/verification/tests/planted.rs`), each
    // switched on alone at run time: the models, simulations and the SQL store check must each
    // name the property it breaks.
    PackagingStep {
        name: "test (planted mutations found)",
        kind: StepKind::Planted,
        budget: Duration::from_secs(300),
        args: || {
            [
                "test",
                "-p",
                "tenantry-verification",
                "--features",
                "planted-mutations",
                "--test",
                "planted",
                "--locked",
            ]
            .map(str::to_owned)
            .to_vec()
        },
        env: &[],
        tests: true,
    },
    // The console in headless Chromium (`crates/app/tests/ui_browser.rs`): `#[ignore]`d in
    // the two test runs, run here once; a missing browser fails this step.
    PackagingStep {
        name: "test (browser)",
        kind: StepKind::Browser,
        budget: Duration::from_secs(240),
        args: || {
            [
                "test",
                "-p",
                "tenantry-app",
                "--test",
                "ui_browser",
                "--locked",
                "--",
                "--ignored",
            ]
            .map(str::to_owned)
            .to_vec()
        },
        env: &[("TENANTRY_REQUIRE_BROWSER", "1")],
        tests: true,
    },
    PackagingStep {
        name: "doc",
        kind: StepKind::Docs,
        budget: Duration::from_secs(180),
        args: || {
            [
                "doc",
                "--workspace",
                "--all-features",
                "--no-deps",
                "--locked",
            ]
            .map(str::to_owned)
            .to_vec()
        },
        env: &[("RUSTDOCFLAGS", "-D warnings")],
        tests: false,
    },
    PackagingStep {
        name: "test (outside fixture crate)",
        kind: StepKind::Embedding,
        budget: Duration::from_secs(300),
        args: || {
            [
                "test",
                "--manifest-path",
                "fixtures/host-platform/Cargo.toml",
                "--target-dir",
                "target",
                "--locked",
            ]
            .map(str::to_owned)
            .to_vec()
        },
        env: &[],
        tests: true,
    },
    PackagingStep {
        name: "package",
        kind: StepKind::Package,
        budget: Duration::from_secs(600),
        args: package_args,
        env: &[],
        tests: false,
    },
];

/// The chaos steps after the packaging steps (issue 11, docs/reliability.md): the short
/// profile on a throwaway PostgreSQL cluster (3 replicas, about 1,000 commands), the SQLite
/// profile (one replica, killed and restarted), and the planted bug, which the harness must
/// catch. Debug binaries: the test steps already built the app (docs/reliability.md, "In CI").
const CHAOS_STEPS: &[PackagingStep] = &[
    PackagingStep {
        name: "chaos (PostgreSQL, 3 replicas)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(300),
        args: || {
            chaos_args(&[
                "--",
                "--replicas",
                "3",
                "--commands",
                "1000",
                "--duration",
                "60",
            ])
        },
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "chaos (PostgreSQL HA, failover)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(300),
        args: || {
            chaos_args(&[
                "--ha",
                "--",
                "--replicas",
                "3",
                "--commands",
                "600",
                "--duration",
                "40",
            ])
        },
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "chaos (SQLite, 1 replica)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(180),
        args: || chaos_args(&["--sqlite", "--", "--commands", "400"]),
        env: &[],
        tests: false,
    },
    PackagingStep {
        name: "chaos (planted bug caught)",
        kind: StepKind::Chaos,
        budget: Duration::from_secs(420),
        args: || {
            chaos_args(&[
                "--planted-bug",
                "--",
                "--replicas",
                "3",
                "--commands",
                "1000",
                "--faults",
                "pauses",
                "--duration",
                "45",
                "--timeout",
                "60",
            ])
        },
        env: &[],
        tests: false,
    },
];

/// `cargo xtask chaos --debug <extra> --no-progress` (the seed is the harness's default, 1).
fn chaos_args(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["xtask", "chaos", "--debug"].map(str::to_owned).to_vec();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    if !extra.contains(&"--") {
        args.push("--".to_owned());
    }
    args.push("--no-progress".to_owned());
    args
}

/// Clears stale extracted sources of our crates before `cargo package` (see
/// [`crate::package_sources`]); a failure is printed and the step runs anyway, since Cargo's
/// own error then shows what is wrong.
fn clear_stale_package_sources() {
    let Some(home) = crate::package_sources::cargo_home() else {
        return;
    };
    match crate::package_sources::clear_stale_extracted_sources(&home) {
        Ok(0) => {}
        Ok(removed) => println!(
            "package: removed {removed} stale extracted source folder(s) of our crates from {}",
            home.join("registry").join("src").display()
        ),
        Err(error) => eprintln!("package: could not clear stale extracted sources: {error}"),
    }
}

/// `cargo <command>` of the mechanism crates with only `feature`.
fn mechanism_args(command: &str, feature: &str) -> Vec<String> {
    let mut args = vec![command.to_owned(), "--locked".to_owned()];
    for package in MECHANISM_CRATES {
        args.extend(["--package".to_owned(), (*package).to_owned()]);
    }
    args.extend([
        "--no-default-features".to_owned(),
        "--features".to_owned(),
        feature.to_owned(),
    ]);
    args
}

/// `cargo package` of every published crate. `--allow-dirty`: the step checks that the
/// packages build, not that the work tree is committed.
fn package_args() -> Vec<String> {
    let mut args = ["package", "--workspace", "--locked", "--allow-dirty"]
        .map(str::to_owned)
        .to_vec();
    for package in UNPUBLISHED {
        args.extend(["--exclude".to_owned(), (*package).to_owned()]);
    }
    args
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
    [
        "test",
        "-p",
        "tenantry-store-seaorm",
        "--test",
        "pg_tls",
        "--locked",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Runs `cmd` with inherited stdout/stderr.
fn run_inherit(cmd: &mut Command) -> std::io::Result<ExitStatus> {
    let mut child = cmd.spawn()?;
    let _tracked = crate::interrupt::track_child(child.id());
    child.wait()
}

/// Runs `cmd` with stdout and stderr merged into one pipe (so their order is kept), echoing
/// it line by line to our stdout and adding up libtest's `test result:` lines.
fn run_counting_tests(cmd: &mut Command) -> std::io::Result<(ExitStatus, Option<TestCounts>)> {
    let (reader, writer) = std::io::pipe()?;
    cmd.stdout(writer.try_clone()?).stderr(writer);
    let mut child = cmd.spawn()?;
    // Our copies of the write end must go, or the reader never sees end of file.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let _tracked = crate::interrupt::track_child(child.id());
    let mut counts = TestCounts::default();
    let mut out = std::io::stdout();
    for line in BufReader::new(reader).split(b'\n') {
        let Ok(line) = line else { break };
        let _ = out.write_all(&line);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
        counts.add_line(&String::from_utf8_lossy(&line));
    }
    let status = child.wait()?;
    Ok((status, Some(counts)))
}

/// Sums of libtest's `test result: ok. 3 passed; 0 failed; 1 ignored; ...` lines.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct TestCounts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl TestCounts {
    fn add_line(&mut self, line: &str) {
        let Some(rest) = line.trim_start().strip_prefix("test result:") else {
            return;
        };
        let tokens: Vec<&str> = rest
            .split(|c: char| c == ';' || c.is_whitespace())
            .filter(|t| !t.is_empty())
            .collect();
        for pair in tokens.windows(2) {
            let Ok(n) = pair[0].parse::<u64>() else {
                continue;
            };
            match pair[1] {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }

    fn add(&mut self, other: TestCounts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }
}

impl std::fmt::Display for TestCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} passed, {} failed", self.passed, self.failed)?;
        if self.ignored > 0 {
            write!(f, ", {} skipped", self.ignored)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
    Skipped,
}

#[derive(Debug)]
struct Record {
    step: String,
    outcome: Outcome,
    elapsed: Option<Duration>,
    detail: String,
}

/// What each step did, for the closing summary.
#[derive(Debug, Default)]
struct Report {
    records: Vec<Record>,
    tests: Option<TestCounts>,
}

impl Report {
    fn push(&mut self, step: &str, outcome: Outcome, elapsed: Option<Duration>, detail: String) {
        self.records.push(Record {
            step: step.to_owned(),
            outcome,
            elapsed,
            detail,
        });
    }

    /// Notes in the summary when the last run of `step` passed but took longer than `budget`.
    fn check_budget(&mut self, step: &str, budget: Duration) {
        if let Some(record) = self.records.iter_mut().rev().find(|r| r.step == step)
            && let Some(elapsed) = record.elapsed
            && elapsed > budget
        {
            let note = format!("over budget ({})", format_duration(budget));
            record.detail = if record.detail.is_empty() {
                note
            } else {
                format!("{}; {note}", record.detail)
            };
        }
    }

    fn print(&self, passed: bool, elapsed: Duration) {
        println!("\n==> ci summary");
        for record in &self.records {
            let outcome = match record.outcome {
                Outcome::Passed => "ok",
                Outcome::Failed => "FAILED",
                Outcome::Skipped => "skipped",
            };
            let elapsed = record.elapsed.map(format_duration).unwrap_or_default();
            println!(
                "  {outcome:<8} {:<24} {elapsed:>8}  {}",
                record.step, record.detail
            );
        }
        let ran: Vec<&str> = [
            "fmt",
            "clippy",
            "check (sqlite only)",
            "check (postgres only)",
            "test (SQLite)",
            "PostgreSQL server",
            "test (PostgreSQL)",
        ]
        .into_iter()
        .chain(PACKAGING_STEPS.iter().map(|step| step.name))
        .filter(|step| !self.records.iter().any(|r| r.step == *step))
        .collect();
        if !passed && !ran.is_empty() {
            println!("  not run: {}", ran.join(", "));
        }
        let verdict = if passed { "passed" } else { "FAILED" };
        println!("ci {verdict} in {}", format_duration(elapsed));
        if let Some(tests) = self.tests {
            println!("tests: {tests}");
        }
        let _ = std::io::stdout().flush();
    }
}

fn format_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs < 60.0 {
        format!("{secs:.1}s")
    } else {
        let whole = d.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// The command line as one would type it (program name shortened to its file name).
fn display_command(cmd: &Command) -> String {
    let program = Path::new(cmd.get_program())
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut line = program;
    for arg in cmd.get_args() {
        line.push(' ');
        line.push_str(&arg.to_string_lossy());
    }
    line
}

/// Hides the password of a `scheme://user:password@host/...` URL.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let authority_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |i| scheme_end + i);
    let authority = &url[scheme_end..authority_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_owned();
    };
    let userinfo = &authority[..at];
    match userinfo.split_once(':') {
        Some((user, _)) => format!(
            "{}{user}:***{}",
            &url[..scheme_end],
            &url[scheme_end + at..]
        ),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_result_lines_are_summed() {
        let mut counts = TestCounts::default();
        counts.add_line(
            "test result: ok. 12 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s",
        );
        counts.add_line(
            "test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 5 filtered out",
        );
        counts.add_line("running 4 tests");
        counts.add_line("test passed ... ok");
        assert_eq!(
            counts,
            TestCounts {
                passed: 15,
                failed: 1,
                ignored: 2
            }
        );
        assert_eq!(counts.to_string(), "15 passed, 1 failed, 2 skipped");
    }

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db?x=1"),
            "postgres://u:***@h:5432/db?x=1"
        );
        assert_eq!(
            redact("postgres://postgres@127.0.0.1:5/postgres"),
            "postgres://postgres@127.0.0.1:5/postgres"
        );
        assert_eq!(redact("not a url"), "not a url");
    }

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

    #[test]
    fn durations_read_naturally() {
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_duration(Duration::from_secs(125)), "2m05s");
    }

    #[test]
    fn package_step_leaves_out_exactly_the_unpublished_members() {
        let output = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .current_dir(crate::workspace_root())
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .output()
            .expect("run cargo metadata");
        assert!(output.status.success(), "cargo metadata failed");
        let metadata: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
        let packages = metadata["packages"].as_array().expect("packages");
        // `publish = false` is `"publish": []` in cargo metadata; `null` means crates.io.
        let mut unpublished: Vec<&str> = packages
            .iter()
            .filter(|p| p["publish"].as_array().is_some_and(Vec::is_empty))
            .filter_map(|p| p["name"].as_str())
            .collect();
        unpublished.sort_unstable();
        let mut expected = UNPUBLISHED.to_vec();
        expected.sort_unstable();
        assert_eq!(unpublished, expected);

        let args = package_args();
        for package in UNPUBLISHED {
            assert!(
                args.windows(2)
                    .any(|w| w[0] == "--exclude" && w[1] == *package),
                "{args:?}"
            );
        }
        assert!(args.contains(&"--workspace".to_owned()));
    }

    #[test]
    fn mechanism_steps_name_every_mechanism_crate_and_one_feature() {
        let args = mechanism_args("check", "lifecycle");
        assert_eq!(args[0], "check");
        for package in MECHANISM_CRATES {
            assert!(args.iter().any(|a| a == package), "{args:?}");
        }
        assert!(
            args.ends_with(&[
                "--no-default-features".to_owned(),
                "--features".to_owned(),
                "lifecycle".to_owned()
            ]),
            "{args:?}"
        );
    }

    #[test]
    fn a_step_over_its_budget_is_noted_in_the_summary() {
        let mut report = Report::default();
        report.push(
            "doc",
            Outcome::Passed,
            Some(Duration::from_secs(200)),
            String::new(),
        );
        report.push(
            "package",
            Outcome::Passed,
            Some(Duration::from_secs(10)),
            "x".to_owned(),
        );
        report.check_budget("doc", Duration::from_secs(180));
        report.check_budget("package", Duration::from_secs(600));
        assert_eq!(report.records[0].detail, "over budget (3m00s)");
        assert_eq!(report.records[1].detail, "x");
    }
}
