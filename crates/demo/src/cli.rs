//! The command line of `tenantry-demo`: `demo` and `reference-remote`. The service they run
//! is the app library's, started exactly as `tenantry serve` starts it.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tenantry_app::config::LogFormat;
use tenantry_app::{logging, service};

use crate::args::{DemoArgs, RemoteArgs};

/// Tenantry's end-to-end demo and reference remotes (the `tenantry` service binary ships
/// neither).
///
/// Start with `tenantry-demo demo`: it runs the whole service against a local reference remote
/// with injected faults and checks the result.
#[derive(Debug, Parser)]
#[command(name = "tenantry-demo", version, propagate_version = true)]
pub struct DemoCli {
    /// What to do.
    #[command(subcommand)]
    pub command: DemoCommand,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum DemoCommand {
    /// Run the end-to-end demo: a temporary database, a local reference KnowledgeFS with
    /// injected faults, the service, and a workload driven through the admin API over HTTP;
    /// then check every result against the remote's ground truth. Exits non-zero on failure.
    Demo(DemoArgs),
    /// Run the reference KnowledgeFS and reference directory on loopback ports (for trying
    /// `tenantry serve` by hand) until Ctrl-C; prints the TENANTRY_* settings that point
    /// `serve` at them.
    ReferenceRemote(RemoteArgs),
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let cli = DemoCli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenantry-demo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli))
}

/// Runs a parsed command line.
pub async fn run(cli: DemoCli) -> ExitCode {
    match cli.command {
        DemoCommand::Demo(args) => {
            logging::init(LogFormat::Human, "error");
            crate::main(&args).await
        }
        DemoCommand::ReferenceRemote(args) => {
            logging::init(LogFormat::Human, "info");
            crate::reference_remote::main(&args, service::shutdown_signal()).await
        }
    }
}
