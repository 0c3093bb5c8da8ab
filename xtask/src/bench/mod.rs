//! `cargo xtask bench`: builds `tenantry-bench` in release mode, runs its parts against a
//! throwaway PostgreSQL cluster (or `--database-url`) and SQLite, runs `pgbench -N` on the
//! same server at the same connection counts, and reports.
//!
//! Output:
//! - standard output: one JSON object per result, as the parts print them, plus one
//!   `lifecycle_ratio` line per PostgreSQL lifecycle result (commands settled per second ÷
//!   pgbench transactions per second at the same connection count) and one `machine` line;
//! - `target/bench/bench-<unix seconds>.json` and `target/bench/latest.json`: every line of
//!   the run in one JSON document;
//! - `docs/benchmarks.md`: the generated section between the `bench:results` markers is
//!   replaced with the tables of this run and the machine description (only for a full run of
//!   every part, so a partial run never leaves a half-updated table; pass `--write-docs` to
//!   force).
//!
//! pgbench runs twice per connection count, before and after the lifecycle part, and the
//! mean is the reference, since absolute rates drift on shared machines.

mod fairness;
mod peers;
mod pgbench;
mod report;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use clap::ValueEnum;
use serde_json::{Value, json};

use crate::pg::Cluster;

/// Options of `cargo xtask bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// PostgreSQL server to measure (a URL with the right to create databases). Default: a
    /// throwaway cluster started for the run.
    #[arg(long)]
    database_url: Option<String>,
    /// Worker counts of the lifecycle part (and pgbench connection counts), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    workers: Vec<u32>,
    /// Commands per lifecycle run on PostgreSQL (SQLite runs a quarter of it).
    #[arg(long, default_value_t = 20_000)]
    commands: usize,
    /// Run only these parts (repeatable); default all.
    #[arg(long, value_enum)]
    only: Vec<PartName>,
    /// Seconds of each pgbench run.
    #[arg(long, default_value_t = 10)]
    pgbench_seconds: u32,
    /// Extra arguments for the lifecycle part's drains (e.g. `--claim-batch=64`).
    #[arg(long, allow_hyphen_values = true)]
    drain_args: Vec<String>,
    /// Rewrite the tables of docs/benchmarks.md even when not every part ran.
    #[arg(long)]
    write_docs: bool,
    /// Measure nothing: rewrite the tables of docs/benchmarks.md from a saved run
    /// (`target/bench/latest.json` or `bench-<unix seconds>.json`).
    #[arg(long, value_name = "FILE")]
    from_json: Option<PathBuf>,
    /// The peer bench of part `peers` (its `run.sh`). Default: `../shared/peer-bench` beside
    /// the workspace; the part is skipped with a note when it is not there.
    #[arg(long, value_name = "DIR")]
    peer_bench: Option<PathBuf>,
}

/// The parts `--only` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PartName {
    /// Lifecycle throughput with pgbench -N reference (PostgreSQL and SQLite).
    Lifecycle,
    /// Claim latency at low load.
    Latency,
    /// Directory snapshot apply vs bulk INSERT.
    Directory,
    /// Fence overhead.
    Fence,
    /// Peak RSS while draining 200,000 commands.
    Memory,
    /// Claim latency and drain throughput with 1,000,000 finished commands vs none; pruner
    /// rows/s (issue 18).
    History,
    /// Bulk intake: 20,000 provision requests through `CommandIntake::submit_many` (batches of
    /// 1,000) and 2,000 through `submit` (issue 14).
    Intake,
    /// Simulated steps per second of the deterministic simulations (issue 12).
    Sim,
    /// Another tenant's latency during one tenant's backlog of 100,000, and the backlog's
    /// throughput with and without it (issue 33; PostgreSQL).
    Fairness,
    /// Tenantry's service defaults beside graphile_worker's local queue and pgbench on the
    /// peer bench's own fsync-on cluster (issue 14; needs `../shared/peer-bench`).
    Peers,
}

const ALL_PARTS: [PartName; 10] = [
    PartName::Lifecycle,
    PartName::Latency,
    PartName::Directory,
    PartName::Fence,
    PartName::Memory,
    PartName::History,
    PartName::Intake,
    PartName::Sim,
    PartName::Fairness,
    PartName::Peers,
];

/// Runs the benchmark from the workspace root `root`.
pub fn run(root: &Path, args: &BenchArgs) -> ExitCode {
    if let Some(file) = &args.from_json {
        return match rerender(root, file) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let started = Instant::now();
    match Bench::new(root, args).and_then(|mut bench| bench.run().map(|()| bench)) {
        Ok(bench) => {
            eprintln!(
                "xtask bench: done in {:.0} s; results in {}",
                started.elapsed().as_secs_f64(),
                bench.out_dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("xtask bench: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Bench<'a> {
    root: &'a Path,
    args: &'a BenchArgs,
    parts: Vec<PartName>,
    binary: PathBuf,
    out_dir: PathBuf,
    results: Vec<Value>,
}

impl<'a> Bench<'a> {
    fn new(root: &'a Path, args: &'a BenchArgs) -> Result<Self, String> {
        let target_dir = crate::target_dir(root);
        let parts = if args.only.is_empty() {
            ALL_PARTS.to_vec()
        } else {
            args.only.clone()
        };
        Ok(Self {
            root,
            args,
            parts,
            binary: target_dir.join("release").join("tenantry-bench"),
            out_dir: target_dir.join("bench"),
            results: Vec::new(),
        })
    }

    fn run(&mut self) -> Result<(), String> {
        self.build()?;
        let cluster;
        let url = match &self.args.database_url {
            Some(url) => url.clone(),
            None => {
                eprintln!("==> starting a throwaway PostgreSQL cluster");
                cluster = Cluster::start().map_err(|e| e.to_string())?;
                eprintln!("    {} at {}", cluster.version(), cluster.url());
                cluster.url()
            }
        };
        let machine = report::machine(&url);
        self.push(json!({"part": "machine", "machine": machine}));
        for part in self.parts.clone() {
            let started = Instant::now();
            eprintln!("==> part {part:?}");
            match part {
                PartName::Lifecycle => self.lifecycle(&url)?,
                PartName::Latency => {
                    for backend in ["postgres", "sqlite"] {
                        self.bench(&url, backend, &["latency"])?;
                    }
                }
                PartName::Directory => {
                    // One process per size and backend, so sizes do not share a heap.
                    for memberships in directory_sizes()? {
                        let workspaces = (memberships / 10).max(1).to_string();
                        let accounts = (memberships / 4).max(1).to_string();
                        for backend in ["postgres", "sqlite"] {
                            // The store's apply against a bulk INSERT, then the same snapshot
                            // through the HTTP path into the projector (issue 34).
                            for part in ["directory", "directory-http"] {
                                self.bench(
                                    &url,
                                    backend,
                                    &[
                                        part,
                                        "--workspaces",
                                        &workspaces,
                                        "--members",
                                        "10",
                                        "--accounts",
                                        &accounts,
                                    ],
                                )?;
                            }
                        }
                    }
                }
                PartName::Fence => {
                    // The in-memory measures, then fenced writes on each database.
                    self.bench(&url, "sqlite", &["fence"])?;
                    for backend in ["postgres", "sqlite"] {
                        self.bench(&url, backend, &["fence", "--database"])?;
                    }
                }
                PartName::Memory => drop(self.bench(&url, "postgres", &["memory"])?),
                PartName::History => drop(self.bench(&url, "postgres", &["history"])?),
                PartName::Intake => drop(self.bench(&url, "postgres", &["intake"])?),
                PartName::Sim => drop(self.bench(&url, "sqlite", &["sim"])?),
                PartName::Fairness => drop(self.bench(&url, "postgres", &["fairness"])?),
                PartName::Peers => {
                    let dir =
                        self.args.peer_bench.clone().unwrap_or_else(|| {
                            self.root.join("..").join("shared").join("peer-bench")
                        });
                    let line = peers::run(
                        &dir,
                        &self.binary,
                        &std::env::var_os("PEER_BENCH_OUT")
                            .map_or_else(|| self.out_dir.join("peer-bench"), PathBuf::from),
                        self.args.commands,
                        self.args.workers.iter().copied().max().unwrap_or(8),
                    )?;
                    self.push(line);
                }
            }
            eprintln!(
                "    part {part:?} took {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
        self.write_outputs()
    }

    fn build(&self) -> Result<(), String> {
        eprintln!("==> cargo build --release -p tenantry-bench");
        let status = crate::cargo_command()
            .current_dir(self.root)
            .args(["build", "--release", "--quiet", "-p", "tenantry-bench"])
            .status()
            .map_err(|e| format!("could not run cargo: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("building tenantry-bench failed ({status})"))
        }
    }

    fn lifecycle(&mut self, url: &str) -> Result<(), String> {
        let workers: Vec<String> = self.args.workers.iter().map(u32::to_string).collect();
        let workers = workers.join(",");
        let before = pgbench::run_all(
            &self.binary,
            url,
            &self.args.workers,
            self.args.pgbench_seconds,
        )?;
        let pg_commands = self.args.commands.to_string();
        let sqlite_commands = (self.args.commands / 4).max(1).to_string();
        let mut common: Vec<&str> = vec!["lifecycle", "--workers", &workers];
        let extra: Vec<&str> = self.args.drain_args.iter().map(String::as_str).collect();
        common.extend(extra.iter().copied());
        let mut pg_args = common.clone();
        pg_args.extend(["--commands", &pg_commands]);
        let mut pg_results = self.bench(url, "postgres", &pg_args)?;
        // Labelled extra rows: the bench's tuned settings (claims of 64, short idle poll) at
        // the largest worker count, beside the service defaults measured above.
        if self.args.drain_args.is_empty()
            && let Some(top) = self.args.workers.iter().max()
        {
            let top = top.to_string();
            let tuned = [
                "lifecycle",
                "--workers",
                &top,
                "--commands",
                &pg_commands,
                "--claim-batch",
                "64",
                "--idle-poll-ms",
                "20",
            ];
            pg_results.extend(self.bench(url, "postgres", &tuned)?);
        }
        let after = pgbench::run_all(
            &self.binary,
            url,
            &self.args.workers,
            self.args.pgbench_seconds,
        )?;
        for (connections, (tps_before, tps_after)) in self
            .args
            .workers
            .iter()
            .zip(before.iter().zip(after.iter()))
        {
            let tps = (tps_before + tps_after) / 2.0;
            self.push(json!({
                "part": "pgbench",
                "connections": connections,
                "mode": "-N (simple-update, no branch/teller contention)",
                "seconds": self.args.pgbench_seconds,
                "tps_before": round1(*tps_before),
                "tps_after": round1(*tps_after),
                "tps": round1(tps),
            }));
        }
        for result in pg_results {
            let (Some(workers), Some(cps)) = (
                result.get("workers").and_then(Value::as_u64),
                result.get("commands_per_second").and_then(Value::as_f64),
            ) else {
                continue;
            };
            let Some(index) = self
                .args
                .workers
                .iter()
                .position(|w| u64::from(*w) == workers)
            else {
                continue;
            };
            let tps = (before[index] + after[index]) / 2.0;
            self.push(json!({
                "part": "lifecycle_ratio",
                "workload": result.get("workload"),
                "settings": result.get("settings"),
                "service_defaults": result.get("service_defaults"),
                "workers": workers,
                "commands_per_second": cps,
                "pgbench_tps": round1(tps),
                "ratio": (cps / tps * 100.0).round() / 100.0,
            }));
        }
        let mut sqlite_args = common;
        sqlite_args.extend(["--commands", &sqlite_commands]);
        self.bench(url, "sqlite", &sqlite_args)?;
        Ok(())
    }

    /// Runs one part of the bench binary; prints and keeps its result lines.
    fn bench(&mut self, url: &str, backend: &str, args: &[&str]) -> Result<Vec<Value>, String> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--backend", backend, "--database-url", url])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("could not run {}: {e}", self.binary.display()))?;
        let _tracked = crate::interrupt::track_child(child.id());
        let mut lines = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            for line in BufReader::new(stdout).lines() {
                let line = line.map_err(|e| format!("reading tenantry-bench output: {e}"))?;
                match serde_json::from_str::<Value>(&line) {
                    Ok(value) => {
                        lines.push(value.clone());
                        self.push(value);
                    }
                    Err(_) => eprintln!("{line}"),
                }
            }
        }
        let status = child
            .wait()
            .map_err(|e| format!("waiting for tenantry-bench: {e}"))?;
        if status.success() {
            Ok(lines)
        } else {
            Err(format!(
                "tenantry-bench {backend} {} failed ({status})",
                args.join(" ")
            ))
        }
    }

    /// Prints a result line and keeps it.
    fn push(&mut self, value: Value) {
        println!("{value}");
        self.results.push(value);
    }

    fn write_outputs(&self) -> Result<(), String> {
        std::fs::create_dir_all(&self.out_dir)
            .map_err(|e| format!("create {}: {e}", self.out_dir.display()))?;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default();
        let document = json!({ "results": self.results });
        let text = serde_json::to_string_pretty(&document)
            .map_err(|e| format!("serialize results: {e}"))?;
        for name in [format!("bench-{stamp}.json"), "latest.json".to_owned()] {
            let path = self.out_dir.join(name);
            std::fs::write(&path, &text).map_err(|e| format!("write {}: {e}", path.display()))?;
        }
        let complete = ALL_PARTS.iter().all(|p| self.parts.contains(p));
        if complete || self.args.write_docs {
            let path = self.root.join("docs").join("benchmarks.md");
            report::update_docs(&path, &report::render(&self.results))?;
            eprintln!("    tables written to {}", path.display());
        } else {
            eprintln!(
                "    partial run: docs/benchmarks.md left as is (pass --write-docs to update it)"
            );
        }
        Ok(())
    }
}

/// Rewrites the tables of docs/benchmarks.md from the results saved in `file`.
fn rerender(root: &Path, file: &Path) -> Result<(), String> {
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("read {}: {e}", file.display()))?;
    let document: Value =
        serde_json::from_str(&text).map_err(|e| format!("parse {}: {e}", file.display()))?;
    let results = document["results"]
        .as_array()
        .ok_or_else(|| format!("{} has no `results` array", file.display()))?;
    let path = root.join("docs").join("benchmarks.md");
    report::update_docs(&path, &report::render(results))?;
    eprintln!(
        "tables of {} rewritten from {}",
        path.display(),
        file.display()
    );
    Ok(())
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Environment variable naming the directory part's sizes: memberships, comma-separated (10
/// members per workspace, a quarter as many accounts). Default [`DIRECTORY_SIZES`].
pub const DIRECTORY_SIZES_ENV: &str = "TENANTRY_BENCH_DIRECTORY_MEMBERSHIPS";

/// The directory part's default sizes, memberships: issue 34's three (about 6 minutes on 2
/// cores for both backends and both parts, and about 0.8 GiB of RAM for the bulk baseline's
/// planned rows at 1,000,000).
pub const DIRECTORY_SIZES: [usize; 3] = [100_000, 500_000, 1_000_000];

/// The directory part's sizes ([`DIRECTORY_SIZES_ENV`]).
fn directory_sizes() -> Result<Vec<usize>, String> {
    let Ok(list) = std::env::var(DIRECTORY_SIZES_ENV) else {
        return Ok(DIRECTORY_SIZES.to_vec());
    };
    list.split(',')
        .map(|n| {
            n.trim()
                .replace('_', "")
                .parse::<usize>()
                .ok()
                .filter(|n| *n >= 10)
                .ok_or_else(|| {
                    format!("{DIRECTORY_SIZES_ENV}: {n:?} is not a count of at least 10")
                })
        })
        .collect()
}
