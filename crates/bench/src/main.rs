//! `tenantry-bench`: the measurements behind `cargo xtask bench`.
//!
//! Each subcommand is one part of the benchmark; each result is printed to standard output
//! as one JSON object per line (progress goes to standard error). `cargo xtask bench` builds
//! this binary in release mode, starts a throwaway PostgreSQL cluster, runs the parts (plus
//! `pgbench -N` on the same cluster), and writes the JSON and the table of
//! `docs/benchmarks.md`. Run it directly to measure against another server:
//!
//! ```text
//! tenantry-bench --database-url postgres://user@host/db lifecycle --workers 1,4,8
//! tenantry-bench --backend sqlite lifecycle --commands 5000
//! ```

mod directory;
mod directory_http;
mod fairness;
mod fence;
mod fixtures;
mod history;
mod intake;
mod lifecycle;
mod remote;
mod rss;
mod sim;

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tenantry_engine::lifecycle::{GroupCommitConfig, WorkerConfig};
use tenantry_store_seaorm::throwaway;

use crate::fixtures::{Target, Workload};
use crate::lifecycle::{DrainOptions, WakeMode};

/// Errors of a benchmark run: reported and the run fails.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Command line.
#[derive(Debug, Parser)]
#[command(
    name = "tenantry-bench",
    about = "Tenantry benchmarks (one JSON line per result)"
)]
struct Cli {
    /// Database engine of the database-backed parts.
    #[arg(long, value_enum, default_value_t = BackendArg::Postgres, global = true)]
    backend: BackendArg,
    /// PostgreSQL server (a database URL with the right to create databases); each run
    /// creates and drops its own database `tenantry_bench_*` there. Required for postgres.
    #[arg(long, global = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    part: Part,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    Postgres,
    Sqlite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WakeArg {
    /// Polling only.
    None,
    /// The intake wakes the worker of its process.
    InProcess,
    /// The PostgreSQL listener wakes the worker on another process's `NOTIFY`.
    Listener,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum WorkloadArg {
    Revoke,
    Provision,
}

/// The parts.
/// The size of the directory parts' snapshot: `workspaces` × `members` memberships, the
/// members drawn round-robin from `accounts` accounts.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct SnapshotSize {
    /// Workspaces in the snapshot.
    #[arg(long, default_value_t = 10_000)]
    pub workspaces: usize,
    /// Members per workspace.
    #[arg(long, default_value_t = 10)]
    pub members: usize,
    /// Distinct accounts the members are drawn from.
    #[arg(long, default_value_t = 25_000)]
    pub accounts: usize,
}

#[derive(Debug, Subcommand)]
enum Part {
    /// Lifecycle throughput: drain N commands with 1, 4, 8 workers.
    Lifecycle {
        /// Worker counts (comma separated); the pool has as many connections.
        #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
        workers: Vec<u32>,
        /// Commands per run (default 20,000 on PostgreSQL, 5,000 on SQLite).
        #[arg(long)]
        commands: Option<usize>,
        /// Workloads (comma separated).
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "revoke,provision"
        )]
        workload: Vec<WorkloadArg>,
        #[command(flatten)]
        drain: DrainArgs,
    },
    /// Claim latency at low load: enqueue one command at a time, time enqueue to claim, with
    /// each way a worker can learn of it.
    Latency {
        /// Commands per idle-poll setting.
        #[arg(long, default_value_t = 200)]
        commands: usize,
        /// Enqueue rate (commands per second).
        #[arg(long, default_value_t = 20.0)]
        rate: f64,
        /// Worker idle-poll intervals to measure, in milliseconds (comma separated; default:
        /// the service's default idle poll, `WorkerConfig::default()`).
        #[arg(long, value_delimiter = ',')]
        idle_poll_ms: Vec<u64>,
        /// Wake-ups to measure (comma separated; `listener` only on PostgreSQL).
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "listener,in-process,none"
        )]
        wake: Vec<WakeArg>,
    },
    /// Peak RSS while one process drains a large backlog.
    Memory {
        /// Commands in the backlog.
        #[arg(long, default_value_t = 200_000)]
        commands: usize,
        /// Workers (and pool connections).
        #[arg(long, default_value_t = 8)]
        workers: u32,
        #[command(flatten)]
        drain: DrainArgs,
    },
    /// Directory snapshot apply (10,000 workspaces, 100,000 memberships) vs bulk INSERT.
    Directory {
        #[command(flatten)]
        size: SnapshotSize,
    },
    /// A snapshot through the real HTTP path: the reference directory (a child process)
    /// serving it to the engine's projector over the HTTP client, into the SQL store; time to
    /// ready and this process's resident set (idle, peak, after).
    DirectoryHttp {
        #[command(flatten)]
        size: SnapshotSize,
    },
    /// The reference directory serving the part `directory-http`'s snapshot (run by that
    /// part as a child process; serves until stdin closes).
    #[command(hide = true)]
    DirectorySource {
        #[command(flatten)]
        size: SnapshotSize,
    },
    /// Fence overhead: ScopedWrites around a no-op vs the bare call; 1,000-scope throughput.
    Fence {
        /// Uncontended operations.
        #[arg(long, default_value_t = 1_000_000)]
        ops: u64,
        /// Concurrent scopes (one task each).
        #[arg(long, default_value_t = 1_000)]
        scopes: u64,
        /// Operations per scope in the concurrent measurement.
        #[arg(long, default_value_t = 1_000)]
        ops_per_scope: u64,
        /// Measure fenced writes on the `--backend` database instead of the in-memory store:
        /// `--db-scopes` tasks (one scope each) doing `--db-ops-per-scope` no-op writes, and
        /// one task alone doing `--db-ops-per-scope` writes.
        #[arg(long)]
        database: bool,
        /// Concurrent scopes of the database measurement.
        #[arg(long, default_value_t = 64)]
        db_scopes: u64,
        /// Writes per scope of the database measurement.
        #[arg(long, default_value_t = 200)]
        db_ops_per_scope: u64,
    },
    /// History and retention: claim latency and drain throughput with N finished commands in
    /// the outbox vs none, and the pruner's rows per second over them.
    History {
        /// Finished commands in the outbox (the second run; the first has none).
        #[arg(long, default_value_t = 1_000_000)]
        history: usize,
        /// Pending commands claimed and drained on top of the history (100,000: a drain of
        /// about 5 s on 2 cores; one of 20,000 lasted a second and swung by a third run to run).
        #[arg(long, default_value_t = 100_000)]
        live: usize,
        /// Single claim statements timed (the rest is drained by the workers).
        #[arg(long, default_value_t = 500)]
        claims: usize,
        /// Workers of the drain (and pool connections).
        #[arg(long, default_value_t = 4)]
        workers: u32,
        #[command(flatten)]
        drain: DrainArgs,
    },
    /// Bulk intake: N provision requests through `CommandIntake::submit_many` (batches) and
    /// some through `submit` one at a time; commands per second of each.
    Intake {
        /// Requests through `submit_many`.
        #[arg(long, default_value_t = 20_000)]
        commands: usize,
        /// Requests per `submit_many` call (the peers' bulk enqueue uses 1,000 per call).
        #[arg(long, default_value_t = 1_000)]
        batch: usize,
        /// Requests through `submit`, one per call (0: skip).
        #[arg(long, default_value_t = 2_000)]
        single: usize,
    },
    /// Fairness across tenants: another tenant's enqueue-to-settle times on an empty outbox
    /// and during one tenant's backlog, and the backlog's throughput with and without it.
    Fairness {
        /// Commands in the one tenant's backlog.
        #[arg(long, default_value_t = 100_000)]
        backlog: usize,
        /// Commands the other tenant enqueues (one every 10 ms).
        #[arg(long, default_value_t = 100)]
        others: usize,
        /// Workers (remote-call slots) of the pool.
        #[arg(long, default_value_t = 8)]
        workers: u32,
        #[command(flatten)]
        drain: DrainArgs,
    },
    /// Simulated steps per second of the deterministic simulations (no database).
    Sim {
        /// Seeds per simulation.
        #[arg(long, default_value_t = 10)]
        seeds: u64,
        /// Steps per seed.
        #[arg(long, default_value_t = 2_000)]
        steps: u64,
    },
    /// Creates (prints its URL) or drops a scratch database on the PostgreSQL server of
    /// `--database-url`, for tools outside this binary (`cargo xtask bench` runs pgbench in
    /// one). Not a measurement: prints no result line.
    ScratchDatabase {
        /// `create` (dropping an existing one first) or `drop`.
        #[arg(value_enum)]
        action: ScratchAction,
        /// Database name (letters, digits, `_`).
        name: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ScratchAction {
    Create,
    Drop,
}

/// Worker settings of a drain. Every default is the service's (`tenantry serve`): the
/// engine's `WorkerConfig::default()` and `GroupCommitConfig::default()`, which the app's
/// configuration defaults are too.
#[derive(Debug, Clone, clap::Args)]
struct DrainArgs {
    /// Who claims: `pool` (one claimer per process, the service's) or `per-worker`.
    #[arg(long, value_enum, default_value_t = lifecycle::Claimer::Pool)]
    claimer: lifecycle::Claimer,
    /// Commands each worker claims per statement and dispatches concurrently.
    #[arg(long, default_value_t = WorkerConfig::default().claim_batch)]
    claim_batch: u32,
    /// Longest worker sleep when nothing is due, in milliseconds.
    #[arg(long, default_value_t = default_idle_poll_ms())]
    idle_poll_ms: u64,
    /// Give up on a drain after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout_s: u64,
    /// How settles reach the database: `group` (group commit: concurrent settles share a
    /// transaction) or `direct` (one transaction each).
    #[arg(long, value_enum, default_value_t = SettleArg::Group)]
    settle: SettleArg,
    /// Group commit: most settles per transaction.
    #[arg(long, default_value_t = GroupCommitConfig::default().max_batch)]
    group_max_batch: usize,
    /// Group commit: wait for more settles, in microseconds (0: only what is queued).
    #[arg(long, default_value_t = default_group_max_wait_us())]
    group_max_wait_us: u64,
    /// Group commit: batches settled concurrently.
    #[arg(long, default_value_t = GroupCommitConfig::default().max_in_flight)]
    group_in_flight: usize,
    /// Group commit: leave control-space reads uncoalesced.
    #[arg(long, default_value_t = !GroupCommitConfig::default().coalesce_reads)]
    no_coalesce_reads: bool,
    /// Group commit: wait `group_max_wait_us` even when no other batch is executing.
    #[arg(long, default_value_t = !GroupCommitConfig::default().wait_only_when_busy)]
    group_wait_always: bool,
    /// Pool connections beyond one per worker (default 0: as many connections as workers,
    /// the pgbench comparison).
    #[arg(long, default_value_t = 0)]
    extra_connections: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SettleArg {
    Direct,
    Group,
}

fn default_idle_poll_ms() -> u64 {
    u64::try_from(WorkerConfig::default().idle_poll.as_millis()).unwrap_or(u64::MAX)
}

fn default_group_max_wait_us() -> u64 {
    u64::try_from(GroupCommitConfig::default().max_wait.as_micros()).unwrap_or(u64::MAX)
}

impl DrainArgs {
    fn options(&self) -> DrainOptions {
        DrainOptions {
            claimer: self.claimer,
            claim_batch: self.claim_batch.max(1),
            idle_poll: Duration::from_millis(self.idle_poll_ms),
            timeout: Duration::from_secs(self.timeout_s),
            extra_connections: self.extra_connections,
            group_commit: (self.settle == SettleArg::Group).then(|| GroupCommitConfig {
                max_batch: self.group_max_batch.max(1),
                max_wait: Duration::from_micros(self.group_max_wait_us),
                max_in_flight: self.group_in_flight.max(1),
                coalesce_reads: !self.no_coalesce_reads,
                wait_only_when_busy: !self.group_wait_always,
            }),
        }
    }
}

/// Prints one result line to standard output.
pub fn emit(value: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{value}");
    let _ = out.flush();
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("tenantry-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> BenchResult<()> {
    let target = || -> BenchResult<Target> {
        match cli.backend {
            BackendArg::Sqlite => Ok(Target::Sqlite),
            BackendArg::Postgres => match cli
                .database_url
                .clone()
                .or_else(|| std::env::var("DATABASE_URL").ok())
            {
                Some(url) => Ok(Target::Postgres { server_url: url }),
                None => Err(
                    "PostgreSQL needs --database-url (or DATABASE_URL); or pass --backend sqlite"
                        .into(),
                ),
            },
        }
    };
    match &cli.part {
        Part::Lifecycle {
            workers,
            commands,
            workload,
            drain,
        } => {
            let target = target()?;
            let commands = commands.unwrap_or(match target {
                Target::Postgres { .. } => 20_000,
                Target::Sqlite => 5_000,
            });
            let workloads: Vec<Workload> = workload
                .iter()
                .map(|w| match w {
                    WorkloadArg::Revoke => Workload::Revoke,
                    WorkloadArg::Provision => Workload::Provision,
                })
                .collect();
            lifecycle::throughput(&target, &workloads, workers, commands, &drain.options()).await
        }
        Part::Latency {
            commands,
            rate,
            idle_poll_ms,
            wake,
        } => {
            let polls: Vec<Duration> = if idle_poll_ms.is_empty() {
                vec![WorkerConfig::default().idle_poll]
            } else {
                idle_poll_ms
                    .iter()
                    .map(|ms| Duration::from_millis(*ms))
                    .collect()
            };
            let wakes: Vec<WakeMode> = wake
                .iter()
                .map(|w| match w {
                    WakeArg::None => WakeMode::None,
                    WakeArg::InProcess => WakeMode::InProcess,
                    WakeArg::Listener => WakeMode::Listener,
                })
                .collect();
            lifecycle::latency(&target()?, *commands, *rate, &polls, &wakes).await
        }
        Part::Memory {
            commands,
            workers,
            drain,
        } => lifecycle::memory(&target()?, *commands, *workers, &drain.options()).await,
        Part::Directory { size } => directory::run(&target()?, *size).await,
        Part::DirectoryHttp { size } => directory_http::run(&target()?, *size).await,
        Part::DirectorySource { size } => directory_http::serve(*size).await,
        Part::Fence {
            database: true,
            db_scopes,
            db_ops_per_scope,
            ..
        } => fence::database(&target()?, *db_scopes, *db_ops_per_scope).await,
        Part::Fence {
            ops,
            scopes,
            ops_per_scope,
            ..
        } => fence::run(*ops, *scopes, *ops_per_scope).await,
        Part::History {
            history,
            live,
            claims,
            workers,
            drain,
        } => {
            history::run(
                &target()?,
                *history,
                *live,
                *claims,
                *workers,
                &drain.options(),
            )
            .await
        }
        Part::Intake {
            commands,
            batch,
            single,
        } => intake::run(&target()?, *commands, *batch, *single).await,
        Part::Fairness {
            backlog,
            others,
            workers,
            drain,
        } => fairness::run(&target()?, *backlog, *others, *workers, &drain.options()).await,
        Part::Sim { seeds, steps } => sim::run(*seeds, *steps),
        Part::ScratchDatabase { action, name } => {
            let Target::Postgres { server_url } = target()? else {
                return Err("scratch-database needs --backend postgres".into());
            };
            match action {
                ScratchAction::Create => {
                    let url = throwaway::create_postgres_database(&server_url, name).await?;
                    println!("{url}");
                }
                ScratchAction::Drop => throwaway::drop_postgres_database(&server_url, name).await?,
            }
            Ok(())
        }
    }
}
