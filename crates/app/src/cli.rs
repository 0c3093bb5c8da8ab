//! The command line of `tenantry`: `serve`, `migrate`, `commands list`, `commands retry`, `commands abandon`, `fences list`, `fences clear`, `prune`.
//!
//! Operator commands (`commands`, `fences`, `prune`) open the configured database directly (the same
//! `database_url` as `serve`), so they work whether or not a service is running.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tenantry_ports::lifecycle::OperatorActionKind;

use crate::config::{self, Config};
use crate::ops::{CommandsActArgs, CommandsListArgs, FencesClearArgs, FencesListArgs, PruneArgs};
use crate::stores::Stores;
use crate::{logging, ops, service};

/// Tenantry: keeps a multi-tenant platform's database and the remote services it drives in
/// agreement.
///
/// To try it, `tenantry-demo demo` (a separate binary, crates/demo) runs the whole service
/// against a local reference remote with injected faults and checks the result.
///
/// Configuration of `serve` comes from a TOML file (`--config`, `$TENANTRY_CONFIG`, or
/// `./tenantry.toml`) and `TENANTRY_*` variables (which win); see docs/operations.md.
#[derive(Debug, Parser)]
#[command(name = "tenantry", version, propagate_version = true)]
pub struct Cli {
    /// Configuration file (TOML). Default: $TENANTRY_CONFIG, else ./tenantry.toml if present.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The configured operator the command acts as (default: $TENANTRY_OPERATOR). Required by
    /// the commands that change something (retry, abandon, mark-deleted, fences clear) when
    /// operators are configured (admin_token: operator `admin`; `[[operators]]`); its name is
    /// recorded as the actor and its role is enforced (a `read` operator changes nothing).
    #[arg(long, global = true, value_name = "NAME")]
    pub operator: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: migrations, lifecycle workers and the admin API, until SIGINT/SIGTERM.
    ///
    /// Requires knowledge_fs_url and knowledge_fs_token. Example:
    ///   TENANTRY_KNOWLEDGE_FS_URL=http://127.0.0.1:9000 TENANTRY_KNOWLEDGE_FS_TOKEN=secret tenantry serve
    Serve,
    /// Apply pending database migrations to database_url and exit.
    Migrate,
    /// Inspect lifecycle commands; retry or abandon failed (dead-lettered) or pending ones.
    #[command(subcommand)]
    Commands(CommandsCommand),
    /// Inspect and clear reconciliation fences.
    #[command(subcommand)]
    Fences(FencesCommand),
    /// Remove expired history now with the `[retention]` policy (finished commands, operator
    /// action records, directory inbox receipts, cleared fence records), in small batches;
    /// `--dry-run` only counts.
    /// `serve` does the same periodically.
    ///
    /// Example: tenantry prune --dry-run
    Prune(PruneArgs),
}

/// `tenantry commands ...`.
#[derive(Debug, Subcommand)]
pub enum CommandsCommand {
    /// List outbox commands, oldest first, with attempts, last error, next attempt and lease.
    ///
    /// Example: tenantry commands list --status failed --error-code INVALID_REQUEST
    List(CommandsListArgs),
    /// Retry a failed (or pending) command now, with a fresh attempt budget (its attempt count
    /// is kept). Give a command id, or filter flags (with --status failed or pending) to retry
    /// every matching command. Recorded with who, when and why.
    ///
    /// Examples: tenantry commands retry 6f1c…;
    ///   tenantry commands retry --status failed --error-code KFS_UNAVAILABLE --reason "outage over"
    Retry(CommandsActArgs),
    /// Give up a failed (or pending) command for good (status abandoned). Give a command id, or
    /// filter flags (with --status failed or pending). Requires --reason; recorded with who,
    /// when and why.
    ///
    /// Example: tenantry commands abandon 6f1c… --reason "tenant offboarded"
    Abandon(CommandsActArgs),
    /// Give up a failed (or pending) delete that owns its deleting control space and record
    /// the control space deleted (abandoning such a delete is refused: the control space would
    /// stay deleting for good). KnowledgeFS is not called: a remote space the deletion did not
    /// remove stays there. Requires a command id and --reason; recorded with who, when and why.
    ///
    /// Example: tenantry commands mark-deleted 6f1c… --reason "space removed in KnowledgeFS by hand"
    MarkDeleted(CommandsActArgs),
}

/// `tenantry fences ...`.
#[derive(Debug, Subcommand)]
pub enum FencesCommand {
    /// List fences (scopes whose last mutation had an unknown outcome) across bindings.
    List(FencesListArgs),
    /// Clear one fence after reconciling its scope with the remote. Writes a tombstone and
    /// logs the reason.
    ///
    /// Example: tenantry fences clear --binding inst-1 --scope kb-42 --reason "verified upload landed"
    Clear(FencesClearArgs),
}

/// How `serve` may change the stores it runs on before the service starts
/// ([`crate::stores::Stores::map_lifecycle`]); the `tenantry` binary changes nothing.
pub type StoreDecorator = fn(Stores) -> Stores;

/// Entry point of the binary.
pub fn main() -> ExitCode {
    main_with(std::convert::identity)
}

/// Entry point of a binary that is `tenantry` with its `serve` running on the stores
/// `decorate` returns (the chaos harness's planted-bug replica,
/// `crates/chaos/src/bin/planted_replica.rs`).
pub fn main_with(decorate: StoreDecorator) -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tenantry: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run_with(cli, decorate))
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> ExitCode {
    run_with(cli, std::convert::identity).await
}

/// Runs a parsed command line; `serve` runs on the stores `decorate` returns.
pub async fn run_with(cli: Cli, decorate: StoreDecorator) -> ExitCode {
    let env = |name: &str| std::env::var(name).ok();
    let config = match config::load(cli.config.as_deref(), env) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("tenantry: configuration refused: {e}");
            return ExitCode::from(2);
        }
    };
    // Traces only for `serve` (docs/operations.md, "Tracing"); a failure leaves them off.
    let traces = if matches!(cli.command, Command::Serve) {
        logging::init_serve_logging(&config)
    } else {
        logging::init(config.log_format, &config.log_filter);
        None
    };
    let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
    for unknown in config::unknown_variables(names) {
        eprintln!("tenantry: warning: {unknown}");
    }
    let operator = cli
        .operator
        .clone()
        .or_else(|| env(config::OPERATOR_ENV).filter(|v| !v.trim().is_empty()));
    let operator = operator.as_deref();
    match cli.command {
        Command::Serve => {
            let code = serve(&config, decorate).await;
            // After the graceful shutdown: export what is batched.
            if let Some(traces) = traces {
                traces.shutdown().await;
            }
            code
        }
        Command::Migrate => ops::migrate(&config).await,
        Command::Commands(CommandsCommand::List(args)) => ops::commands_list(&config, &args).await,
        Command::Commands(CommandsCommand::Retry(args)) => {
            ops::commands_act(&config, &args, OperatorActionKind::Retry, operator).await
        }
        Command::Commands(CommandsCommand::Abandon(args)) => {
            ops::commands_act(&config, &args, OperatorActionKind::Abandon, operator).await
        }
        Command::Commands(CommandsCommand::MarkDeleted(args)) => {
            ops::commands_act(&config, &args, OperatorActionKind::MarkDeleted, operator).await
        }
        Command::Fences(FencesCommand::List(args)) => ops::fences_list(&config, &args).await,
        Command::Fences(FencesCommand::Clear(args)) => {
            ops::fences_clear(&config, &args, operator).await
        }
        Command::Prune(args) => ops::prune(&config, &args).await,
    }
}

/// `tenantry serve`. Start-up order: configuration (done by the caller), then the remote
/// clients and the listener ([`service::Service::prepare`]: a bad URL or a port in use exits 2
/// before any database work), then the SQLite database's lock ([`ops::lock`]: another `serve`
/// or `migrate` on it exits 75), then the database (opened and migrated), then the workers on
/// its stores as `decorate` returns them.
async fn serve(config: &Config, decorate: StoreDecorator) -> ExitCode {
    // What travels in clear text, at every start (docs/operations.md, "TLS").
    for warning in config.start_warnings() {
        tracing::warn!("{warning}");
    }
    let prepared = match service::Service::prepare(config).await {
        Ok(prepared) => prepared,
        Err(e) => {
            eprintln!("tenantry: configuration refused: {e}");
            return ExitCode::from(2);
        }
    };
    // One serving process per SQLite database; held until `serve` returns (or the process
    // dies: the lock is the operating system's).
    let _lock = match ops::lock(config) {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    let db = match ops::open(config).await {
        Ok(db) => db,
        Err(code) => return code,
    };
    let service = service::Service::launch_with(config, prepared, decorate(Stores::new(&db)));
    let scheme = if config.admin_tls.is_some() {
        "https"
    } else {
        "http"
    };
    eprintln!(
        "tenantry: admin API on {scheme}://{} (Ctrl-C to stop)",
        service.addr()
    );
    service::shutdown_signal().await;
    service.shutdown().await;
    service::close_pool(db).await;
    ExitCode::SUCCESS
}
