//! The command-line arguments of `tenantry-demo demo` and `tenantry-demo reference-remote`
//! ([`crate::cli::DemoCommand`] embeds them).

use clap::{Args, ValueEnum};

/// Fault profile of the reference remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Faults {
    /// No faults.
    None,
    /// About one request in ten: 503/429 with Retry-After, lost ACKs, resets, lagging revokes.
    Default,
    /// About one request in three, including stalls past the client deadline.
    Heavy,
}

impl Faults {
    /// The profile's name as the command line spells it (`none`, `default`, `heavy`).
    pub fn name(self) -> &'static str {
        match self {
            Faults::None => "none",
            Faults::Default => "default",
            Faults::Heavy => "heavy",
        }
    }
}

/// Options of `tenantry-demo demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Run on this database instead of a temporary SQLite file (e.g. postgres://user@host/db;
    /// the database should be empty).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// Seed of the workload and of the fault draws (same seed, same workload).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Size of the workload: 1.0 is 5 tenants and 300 control spaces; 0.1 is a quick run.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Fault profile of the reference remote.
    #[arg(long, value_enum, default_value_t = Faults::Default)]
    pub faults: Faults,
    /// Give up waiting for commands to settle after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
    /// Lifecycle workers.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// No progress bar (it is also hidden when standard error is not a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// After the checks, keep the service and its operator console (`/ui`) running until
    /// Ctrl-C, then print the summary.
    #[arg(long)]
    pub keep_open: bool,
    /// Serve both reference remotes over HTTPS with a certificate of a CA made for the run;
    /// the service trusts that CA through its CA file settings (its own admin API stays
    /// plain HTTP on loopback).
    #[arg(long)]
    pub tls: bool,
}

/// Options of `tenantry-demo reference-remote`.
#[derive(Debug, Clone, Args)]
pub struct RemoteArgs {
    /// Fault profile of both servers.
    #[arg(long, value_enum, default_value_t = Faults::None)]
    pub faults: Faults,
    /// Seed of the fault draws and of the directory's signing keys.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Address of the reference KnowledgeFS (use port 0 for any free port).
    #[arg(long, default_value = "127.0.0.1:8701")]
    pub knowledge_fs_addr: std::net::SocketAddr,
    /// Address of the reference directory.
    #[arg(long, default_value = "127.0.0.1:8702")]
    pub directory_addr: std::net::SocketAddr,
    /// Directory instance served.
    #[arg(long, default_value = "instance-1")]
    pub instance: String,
    /// Serve HTTPS: a CA is made at start (rcgen), both servers present a certificate it
    /// issued for 127.0.0.1, ::1 and localhost, and the CA certificate is written to
    /// `--tls-dir` (printed, with the settings that trust it).
    #[arg(long)]
    pub tls: bool,
    /// Folder the CA certificate (`reference-remote-ca.pem`) is written to with `--tls`
    /// (default: the system's temporary folder).
    #[arg(long, value_name = "DIR", requires = "tls")]
    pub tls_dir: Option<std::path::PathBuf>,
}
