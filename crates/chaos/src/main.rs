//! `tenantry-chaos`: exactly-once under process faults, against real `tenantry serve` replicas.
//!
//! The harness runs the reference KnowledgeFS and the reference directory (the test kit's, with
//! the demo's fault profiles) inside its own process, so their ground truth is read directly at
//! the end; it starts N `tenantry serve` processes (the binary given by `--tenantry-bin`, real
//! configuration through `TENANTRY_*`) on one database, drives the demo's seeded workload
//! through all replicas' admin APIs while the directory changes, and runs a seeded fault
//! schedule on the processes, their wall clocks (libfaketime) and the database ([`schedule`]). Then it waits for every command
//! to settle and checks the end state ([`checks`]); the summary goes to the terminal and, as
//! JSON, under `--out` (default `target/chaos/`). Exit code 0 when every check passed, 1 when
//! one failed (the seed is printed), 2 when the run could not be set up.
//!
//! `cargo xtask chaos` builds the binaries, starts a throwaway PostgreSQL cluster and runs this;
//! docs/reliability.md explains the checks and how to reproduce a run.

mod args;
mod checks;
mod formation;
mod logs;
mod pg;
mod replica;
mod report;
mod run;
mod schedule;
mod writers;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let args = args::ChaosArgs::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tenantry-chaos: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run::main(args))
}
