//! Command line of `tenantry-chaos` (the xtask passes the binary, the database and, for
//! PostgreSQL, the cluster's folders).

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// Which faults the schedule injects (and which fault profile the reference remotes use).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FaultLevel {
    /// No process or database faults, and reference remotes without faults.
    None,
    /// Every fault kind, one every 2 to 6 s; the remotes' default fault profile.
    Default,
    /// Every fault kind, one every 0.5 to 2 s; the remotes' heavy profile.
    Heavy,
    /// Only SIGSTOP past the lease, one every 1 to 3 s (the remotes' default profile): the
    /// profile of the planted-bug run, which needs many takeovers of paused replicas.
    Pauses,
}

impl FaultLevel {
    /// The demo's remote fault profile of the same name.
    pub fn remote(self) -> tenantry_demo::Faults {
        match self {
            FaultLevel::None => tenantry_demo::Faults::None,
            FaultLevel::Default | FaultLevel::Pauses => tenantry_demo::Faults::Default,
            FaultLevel::Heavy => tenantry_demo::Faults::Heavy,
        }
    }

    /// Lower-case name, as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultLevel::None => "none",
            FaultLevel::Default => "default",
            FaultLevel::Heavy => "heavy",
            FaultLevel::Pauses => "pauses",
        }
    }
}

/// Where Debian's package `libfaketime` (pulled in by `faketime`) puts the preload library.
pub const DEBIAN_LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

impl ChaosArgs {
    /// The libfaketime library to preload: `--faketime-lib`, else Debian's when it exists.
    pub fn libfaketime(&self) -> Option<PathBuf> {
        match &self.faketime_lib {
            Some(path) => Some(path.clone()),
            None => Some(PathBuf::from(DEBIAN_LIBFAKETIME)).filter(|p| p.exists()),
        }
    }
}

/// Options of one chaos run.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "tenantry-chaos",
    about = "N `tenantry serve` replicas, a seeded workload and fault schedule, exactly-once checks (docs/reliability.md)"
)]
pub struct ChaosArgs {
    /// The `tenantry` binary to run as `tenantry serve`.
    #[arg(long)]
    pub tenantry_bin: PathBuf,
    /// PostgreSQL server URL (a database `chaos_<run>` is created on it), or `sqlite` for a
    /// SQLite file in the run folder (then `--replicas` must be 1).
    #[arg(long)]
    pub database: String,
    /// Folder of the PostgreSQL server binaries (`pg_ctl`, `psql`); needed for PostgreSQL.
    #[arg(long)]
    pub pg_bindir: Option<PathBuf>,
    /// The cluster's data folder (for `pg_ctl restart`); without it the database is not
    /// restarted.
    #[arg(long)]
    pub pg_data: Option<PathBuf>,
    /// The server log `pg_ctl restart` appends to.
    #[arg(long)]
    pub pg_log: Option<PathBuf>,
    /// Run `pg_ctl` as the `postgres` user through `runuser` (when the harness runs as root).
    #[arg(long)]
    pub pg_as_postgres: bool,
    /// The monitor's data folder of a pg_auto_failover formation that serves `--database` (a
    /// multi-host URL): the schedule then fails the primary over (`pg_autoctl perform
    /// failover`), at least once per run (`cargo xtask chaos --ha` starts the formation).
    #[arg(long)]
    pub ha_monitor: Option<PathBuf>,
    /// `tenantry serve` processes.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Commands to enqueue (about; the demo's plan has about 1.85 commands per control space).
    #[arg(long, default_value_t = 10_000)]
    pub commands: u64,
    /// Seed of the workload, the remote's faults and the fault schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Minimum length of the fault phase in seconds (it lasts at least until the workload is
    /// submitted).
    #[arg(long, default_value_t = 0)]
    pub duration: u64,
    /// Fault level.
    #[arg(long, value_enum, default_value_t = FaultLevel::Default)]
    pub faults: FaultLevel,
    /// Keep the run folder (replica logs, SQLite file) and the database even when every check
    /// passed (they are always kept when one failed).
    #[arg(long)]
    pub keep: bool,
    /// Where the run folders and the JSON summaries go.
    #[arg(long, default_value = "target/chaos")]
    pub out: PathBuf,
    /// Longest wait for every command to settle after the fault phase, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Lifecycle workers per replica.
    #[arg(long, default_value_t = 8)]
    pub workers: u32,
    /// `TENANTRY_GROUP_COMMIT` of the replicas.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub group_commit: bool,
    /// libfaketime's preload library, for the wall-clock step fault (PostgreSQL only); by
    /// default Debian's (package `faketime`) at [`DEBIAN_LIBFAKETIME`] when it exists. Without
    /// it the schedule has no clock steps.
    #[arg(long)]
    pub faketime_lib: Option<PathBuf>,
    /// Fence writer processes of the fenced-writes workload (PostgreSQL, levels `default` and
    /// `heavy`; `tenantry-chaos-fence-writer` next to this binary); 0 for none.
    #[arg(long, default_value_t = 2)]
    pub fence_writers: usize,
    /// No progress bar (it is drawn only on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,
}
