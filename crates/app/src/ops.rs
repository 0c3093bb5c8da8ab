//! Operator commands that work on the database directly: `migrate`, `commands list`,
//! `commands retry`, `commands abandon`, `fences list`, `fences clear`, `prune`, with their
//! command-line options (the `cli` module embeds them in its `Command` enum).
//!
//! Their output goes through [`write_line`]: when standard output is a pipe whose reader has
//! gone (`tenantry prune | head -1`), the command ends quietly with exit code 0, as other
//! command-line tools do, instead of panicking on the broken pipe.

use std::borrow::Cow;
use std::process::ExitCode;

use clap::Args;

use tenantry_fence::{Binding, FenceKey, ScopeIdentity};
use tenantry_kernel::CommandId;
use tenantry_kernel::text::{MAX_CODE_BYTES, MAX_MESSAGE_BYTES, bounded};
use tenantry_operator::identity::Caller;
use tenantry_operator::ports::Fences;
use tenantry_operator::refusal::USAGE_EXIT;
use tenantry_operator::{CommandFilterInput, FilterError, FilterField};
use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};

use tenantry_engine::lifecycle::{OperatorActions, OperatorRequestError};
use tenantry_ports::lifecycle::OperatorActionKind;

use crate::admin::CommandView;
use crate::config::{self, Config, redact_url};
use tenantry_engine::scoped_writes::admin::ClearTarget;
use tenantry_engine::scoped_writes::{FenceConfig, ScopedWrites};

/// `println!` through [`write_line`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::ops::write_line(format_args!($($arg)*))
    };
}

/// Writes one line of command output to standard output. A reader that went away (broken
/// pipe) ends the process quietly with exit code 0: everything the command did is done, and
/// nobody reads the rest. Any other write failure ends it with exit code 1 and a message on
/// standard error.
///
/// Every control (but line feed and tab) or invisible format character of the line is written
/// as a visible `\uXXXX` escape ([`tenantry_kernel::text::escape_controls`], case 010): stored text (a remote's
/// message, a row an older version wrote) never reaches the terminal as an escape sequence,
/// and a `--json` line keeps its value.
pub fn write_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let line = line.to_string();
    let line = tenantry_kernel::text::escape_controls(&line);
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_all(line.as_bytes())
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "tenantry: cannot write to standard output: {e}"
            );
            std::process::exit(1);
        }
    }
}

/// Options of `tenantry commands retry` and `tenantry commands abandon`.
#[derive(Debug, Clone, Args)]
pub struct CommandsActArgs {
    /// The command to act on (omit it and give filter flags to act on every matching command).
    pub id: Option<String>,
    /// Filter: only this status (failed or pending).
    #[arg(long)]
    pub status: Option<String>,
    /// Filter: only this operation: provision, delete, revoke.
    #[arg(long)]
    pub operation: Option<String>,
    /// Filter: only this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Filter: only this control space (with --tenant).
    #[arg(long)]
    pub control_space: Option<String>,
    /// Filter: only commands whose last error code is this.
    #[arg(long)]
    pub error_code: Option<String>,
    /// Why (recorded; required for abandon).
    #[arg(long)]
    pub reason: Option<String>,
    /// Who (recorded). With operators configured the `--operator`'s name is recorded, and
    /// another name here is refused; without, default `cli:$USER`.
    #[arg(long)]
    pub actor: Option<String>,
}

/// Options of `tenantry commands list`.
#[derive(Debug, Clone, Args)]
pub struct CommandsListArgs {
    /// Only this status: pending, processing, succeeded, superseded, failed, abandoned.
    #[arg(long)]
    pub status: Option<String>,
    /// Only this operation: provision, delete, revoke.
    #[arg(long)]
    pub operation: Option<String>,
    /// Only this tenant.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Only this control space (with --tenant).
    #[arg(long)]
    pub control_space: Option<String>,
    /// Only commands whose last error code is this (e.g. INVALID_REQUEST).
    #[arg(long)]
    pub error_code: Option<String>,
    /// Most commands shown: 1..=1000, default 100 (the admin API's page limits, same
    /// constants).
    #[arg(
        long,
        default_value_t = crate::admin::DEFAULT_PAGE,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::admin::MAX_PAGE))
    )]
    pub limit: u32,
    /// Start after this command id (the last id of the previous page); an id that names no
    /// command is refused.
    #[arg(long)]
    pub after: Option<String>,
    /// Print JSON lines instead of a table: one command per line, in the shape of an item of
    /// the admin API's `GET /v1/commands`.
    #[arg(long)]
    pub json: bool,
}

/// Options of `tenantry fences list`.
#[derive(Debug, Clone, Args)]
pub struct FencesListArgs {
    /// Only this installation binding.
    #[arg(long)]
    pub binding: Option<String>,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `tenantry fences clear`.
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["scope", "key"])))]
pub struct FencesClearArgs {
    /// Installation binding of the fence.
    #[arg(long)]
    pub binding: String,
    /// Scope identity whose fence to clear (e.g. a knowledge-base id).
    #[arg(long)]
    pub scope: Option<String>,
    /// Fence key as shown by `fences list` (for the installation fence or an unreadable marker).
    #[arg(long)]
    pub key: Option<String>,
    /// What you reconciled (kept in the log).
    #[arg(long)]
    pub reason: String,
}

pub use crate::stores::{DATABASE_IN_USE_EXIT, lock, open, open_existing};
use crate::stores::{Database, Stores, close};

/// `tenantry migrate`: under the SQLite database's lock ([`lock`]). Ctrl-C (SIGINT) stops it
/// with exit code 130 and says what is left: each migration commits in one transaction with its
/// history row, so the ones applied stay applied and the next `migrate` does the rest (case 008).
pub async fn migrate(config: &Config) -> ExitCode {
    let _lock = match lock(config) {
        Ok(lock) => lock,
        Err(code) => return code,
    };
    let opened = tokio::select! {
        opened = open(config) => opened,
        _ = tokio::signal::ctrl_c() => {
            eprintln!(
                "tenantry: migrate interrupted; the migrations applied so far are committed (each in one transaction with its history row), the one in progress was rolled back: run `tenantry migrate` again to finish"
            );
            return ExitCode::from(130);
        }
    };
    match opened {
        Ok(db) => {
            close(db).await;
            out!(
                "database {} is migrated to the latest schema",
                redact_url(&config.database_url)
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn usage(message: String) -> ExitCode {
    eprintln!("tenantry: {message}");
    ExitCode::from(USAGE_EXIT)
}

/// `tenantry commands list`.
pub async fn commands_list(config: &Config, args: &CommandsListArgs) -> ExitCode {
    let filter = match command_filter(args) {
        Ok(f) => f,
        Err(message) => return usage(message),
    };
    let db = match open_existing(config).await {
        Ok(db) => db,
        Err(code) => return code,
    };
    let store = Stores::new(&db).lifecycle;
    if let Err(e) = crate::admin::known_cursor(&store, filter.after.as_ref()).await {
        close(db).await;
        // The refusal's one CLI mapping: an unknown cursor is a usage error (exit 2).
        return if e.exit_code() == USAGE_EXIT {
            usage(format!("--after: {}", e.message))
        } else {
            eprintln!("tenantry: {}", e.message);
            ExitCode::from(e.exit_code())
        };
    }
    let commands = match store.list_commands(&filter).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("tenantry: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        for c in &commands {
            match serde_json::to_string(&CommandView::from(c)) {
                Ok(line) => out!("{line}"),
                Err(e) => {
                    eprintln!("tenantry: cannot encode command {}: {e}", c.id);
                    return ExitCode::FAILURE;
                }
            }
        }
    } else {
        out!(
            "{:<36}  {:<10}  {:<9}  {:<12}  {:<24}  {:>8}  {:<26}  LAST ERROR",
            "ID",
            "TENANT",
            "OPERATION",
            "STATUS",
            "CONTROL SPACE",
            "ATTEMPTS",
            "NEXT ATTEMPT"
        );
        for c in &commands {
            out!(
                "{:<36}  {:<10}  {:<9}  {:<12}  {:<24}  {:>8}  {:<26}  {}",
                c.id.as_str(),
                c.tenant_id.as_str(),
                c.operation.as_str(),
                c.status.as_str(),
                c.control_space_id.as_str(),
                c.attempt_count,
                // Only an open command has a next attempt.
                if c.status.is_terminal() {
                    "-".to_owned()
                } else {
                    c.next_attempt_at.to_rfc3339()
                },
                // Bounded for the table (an old row may hold a code of any length).
                c.last_error_code
                    .as_ref()
                    .map_or(Cow::Borrowed("-"), |code| {
                        bounded(code.as_str(), MAX_CODE_BYTES)
                    }),
            );
        }
        if commands.len() == filter.limit as usize
            && let Some(last) = commands.last()
        {
            eprintln!("(more: --after {})", last.id.as_str());
        }
    }
    close(db).await;
    ExitCode::SUCCESS
}

/// The store filter of `commands list`: the operator façade's parser, the one
/// `GET /v1/commands` and the console use, so the CLI accepts exactly what they accept.
fn command_filter(args: &CommandsListArgs) -> Result<CommandFilter, String> {
    CommandFilterInput {
        status: args.status.clone(),
        operation: args.operation.clone(),
        tenant_id: args.tenant.clone(),
        control_space_id: args.control_space.clone(),
        error_code: args.error_code.clone(),
        limit: Some(args.limit),
        after: args.after.clone(),
        before: None,
    }
    .page()
    .map_err(|e| refusal(&e))
}

/// A refused filter in the CLI's words: the option instead of the API's field name.
fn refusal(error: &FilterError) -> String {
    let option = match error.field {
        FilterField::Status => "--status",
        FilterField::Operation => "--operation",
        FilterField::TenantId => "--tenant",
        FilterField::ControlSpaceId => "--control-space",
        FilterField::Limit => "--limit",
        FilterField::After => "--after",
        FilterField::Before => "--before",
    };
    format!("{option} is invalid: {}", error.reason)
}

/// The CLI process's one scoped-writes runtime (it writes nothing else), with the fence
/// dispatch deadline of `serve` (`fence_dispatch_deadline_ms`). A clear is judged on the
/// database's clock against the intent's own expiry.
fn fence_admin(config: &Config, db: &Database) -> Fences {
    ScopedWrites::with_config(
        Stores::new(db).fences,
        crate::service::system_clock(),
        FenceConfig::with_deadline(config.fence_dispatch_deadline),
    )
}

/// Who a CLI command that changes something acts as: with operators configured, the operator
/// named by `--operator` / `TENANTRY_OPERATOR` (required; its role must be `operate`);
/// without, nobody in particular ([`Caller::Open`]). The CLI's authority is its access to the
/// database; the name says who acts and the role what that operator may do.
///
/// # Errors
/// The message and exit code: 2 for a missing or unknown operator, 1 for a `read` one.
pub fn cli_caller(config: &Config, operator: Option<&str>) -> Result<Caller, (String, ExitCode)> {
    let operators = config.all_operators();
    let usage = |message: String| (message, ExitCode::from(USAGE_EXIT));
    let caller = match (operators.is_empty(), operator.map(str::trim)) {
        (true, None) => return Ok(Caller::Open),
        (true, Some(name)) => {
            return Err(usage(format!(
                "--operator {name:?}: no operator is configured (admin_token, [[operators]]); drop --operator"
            )));
        }
        (false, None) => {
            let names: Vec<&str> = operators.iter().map(|o| o.name.as_str()).collect();
            return Err(usage(format!(
                "operators are configured: say who acts with --operator NAME or {} (one of: {})",
                config::OPERATOR_ENV,
                names.join(", ")
            )));
        }
        (false, Some(name)) => match operators.by_name(name) {
            Some(found) => Caller::of(found),
            None => {
                return Err(usage(format!(
                    "--operator {name:?} is not a configured operator"
                )));
            }
        },
    };
    if let Err(refusal) = caller.may_mutate() {
        let code = ExitCode::from(refusal.exit_code());
        return Err((refusal.message, code));
    }
    Ok(caller)
}

/// `tenantry commands retry`, `tenantry commands abandon` and `tenantry commands mark-deleted`,
/// acting as `operator` ([`cli_caller`]).
pub async fn commands_act(
    config: &Config,
    args: &CommandsActArgs,
    kind: OperatorActionKind,
    operator: Option<&str>,
) -> ExitCode {
    let verb = kind.as_str();
    let reason = match (&args.reason, kind) {
        (Some(reason), _) => reason.clone(),
        (None, OperatorActionKind::Retry) => "retried by operator".to_owned(),
        (None, _) => {
            return usage(format!(
                "{} needs --reason saying why the command is given up",
                kind.as_str()
            ));
        }
    };
    if kind == OperatorActionKind::MarkDeleted && args.id.is_none() {
        return usage("mark_deleted acts on one command: give its id".to_owned());
    }
    let caller = match cli_caller(config, operator) {
        Ok(caller) => caller,
        Err((message, code)) => {
            eprintln!("tenantry: {message}");
            return code;
        }
    };
    let default_actor = format!(
        "cli:{}",
        std::env::var("USER").unwrap_or_else(|_| "unknown".to_owned())
    );
    let actor = match caller.actor(args.actor.as_deref(), Some(&default_actor)) {
        Ok(actor) => actor,
        Err(refusal) => {
            eprintln!("tenantry: {}", refusal.message);
            return ExitCode::from(refusal.exit_code());
        }
    };
    let has_filter = args.status.is_some()
        || args.operation.is_some()
        || args.tenant.is_some()
        || args.control_space.is_some()
        || args.error_code.is_some();
    let target = match (&args.id, has_filter) {
        (Some(id), false) => match CommandId::parse(id.as_str()) {
            Ok(id) => Ok(id),
            Err(e) => return usage(format!("command id: {e}")),
        },
        (None, true) => match (CommandFilterInput {
            status: args.status.clone(),
            operation: args.operation.clone(),
            tenant_id: args.tenant.clone(),
            control_space_id: args.control_space.clone(),
            error_code: args.error_code.clone(),
            ..CommandFilterInput::default()
        })
        .selection()
        {
            Ok(filter) => Err(filter),
            Err(e) => return usage(refusal(&e)),
        },
        (Some(_), true) => {
            return usage(format!(
                "give a command id or filter flags to {verb}, not both"
            ));
        }
        (None, false) => {
            return usage(format!(
                "give a command id, or filter flags (e.g. --status failed --error-code CODE) to {verb} every matching command"
            ));
        }
    };
    let db = match open_existing(config).await {
        Ok(db) => db,
        Err(code) => return code,
    };
    let actions = OperatorActions::new(Stores::new(&db).lifecycle, crate::service::system_clock());
    let code = match target {
        Ok(id) => match actions.act(&id, kind, &actor, &reason).await {
            Ok(after) => {
                out!(
                    "{verb}: command {} is now {} (attempts so far: {})",
                    after.id.as_str(),
                    after.status,
                    after.attempt_count
                );
                ExitCode::SUCCESS
            }
            // A bad --actor or --reason is a usage error (exit 2), like a missing one.
            Err(e @ OperatorRequestError::InvalidField { .. }) => usage(e.to_string()),
            Err(e) => {
                eprintln!("tenantry: {e}");
                ExitCode::FAILURE
            }
        },
        Err(filter) => match actions
            .act_on_matching(&filter, kind, &actor, &reason)
            .await
        {
            Ok(report) => {
                for after in &report.acted {
                    out!(
                        "{verb}: command {} is now {}",
                        after.id.as_str(),
                        after.status
                    );
                }
                for (id, why) in &report.refused {
                    eprintln!("tenantry: {verb} refused for {}: {why}", id.as_str());
                }
                let past = match kind {
                    OperatorActionKind::Retry => "retried",
                    OperatorActionKind::Abandon | OperatorActionKind::MarkDeleted => "abandoned",
                };
                out!(
                    "{} command(s) {past}, {} refused{}",
                    report.acted.len(),
                    report.refused.len(),
                    if report.truncated {
                        "; more match: run it again"
                    } else {
                        ""
                    }
                );
                if report.refused.is_empty() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("tenantry: {e}");
                ExitCode::from(2)
            }
        },
    };
    close(db).await;
    code
}

/// `tenantry fences list`.
pub async fn fences_list(config: &Config, args: &FencesListArgs) -> ExitCode {
    let binding = match args.binding.as_deref().map(fence_binding).transpose() {
        Ok(b) => b,
        Err(e) => return usage(format!("--binding: {e}")),
    };
    let db = match open_existing(config).await {
        Ok(db) => db,
        Err(code) => return code,
    };
    let fences = match fence_admin(config, &db).fence_views(binding.as_ref()).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("tenantry: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        // One JSON array, `[]` when there are none.
        match serde_json::to_string_pretty(&fences) {
            Ok(json) => out!("{json}"),
            Err(e) => {
                eprintln!("tenantry: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else if fences.is_empty() {
        out!("no fences");
    } else {
        out!(
            "{:<20}  {:<24}  {:<7}  {:<26}  {:<10}  REASON / FAILURE / KEY",
            "BINDING",
            "SCOPE",
            "KIND",
            "FENCED AT",
            "PERSISTED"
        );
        for f in &fences {
            let scope = if f.installation {
                "(installation)".to_owned()
            } else {
                f.scope.clone().unwrap_or_else(|| "(unknown)".to_owned())
            };
            let failure = match (&f.failure_kind, &f.failure_detail) {
                (Some(kind), Some(detail)) => format!(" ({kind}: {detail})"),
                (Some(kind), None) => format!(" ({kind})"),
                _ => String::new(),
            };
            out!(
                "{:<20}  {:<24}  {:<7}  {:<26}  {:<10}  {}{} [{}]",
                f.binding,
                scope,
                f.kind.as_str(),
                f.fenced_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
                f.persisted,
                bounded(f.reason.as_deref().unwrap_or("-"), MAX_MESSAGE_BYTES),
                bounded(&failure, MAX_MESSAGE_BYTES),
                f.key,
            );
        }
    }
    close(db).await;
    ExitCode::SUCCESS
}

/// A binding given to the fence commands: a valid id (the same rule as the admin API), then a
/// valid binding.
fn fence_binding(value: &str) -> Result<Binding, String> {
    tenantry_kernel::id::validate("binding", value).map_err(|e| e.to_string())?;
    Binding::parse(value).map_err(|e| e.to_string())
}

/// `tenantry fences clear`.
pub async fn fences_clear(
    config: &Config,
    args: &FencesClearArgs,
    operator: Option<&str>,
) -> ExitCode {
    let caller = match cli_caller(config, operator) {
        Ok(caller) => caller,
        Err((message, code)) => {
            eprintln!("tenantry: {message}");
            return code;
        }
    };
    let binding = match fence_binding(args.binding.as_str()) {
        Ok(b) => b,
        Err(e) => return usage(format!("--binding: {e}")),
    };
    let target = match (&args.scope, &args.key) {
        (Some(scope), None) => match tenantry_kernel::id::validate("scope", scope) {
            Ok(()) => ClearTarget::Scope(ScopeIdentity::object(scope.as_str())),
            Err(e) => return usage(format!("--scope: {e}")),
        },
        (None, Some(key)) => match FenceKey::from_storage_key(key) {
            Some(k) => ClearTarget::Key(k),
            None => return usage(format!("--key {key:?} is not a fence key (ke.fence.v1.…)")),
        },
        _ => return usage("give exactly one of --scope and --key".to_owned()),
    };
    let reason = args.reason.trim();
    if reason.is_empty() {
        return usage("--reason must say what was reconciled".to_owned());
    }
    let db = match open_existing(config).await {
        Ok(db) => db,
        Err(code) => return code,
    };
    tracing::info!(%binding, actor = caller.name().unwrap_or("cli"), reason, "fence clear requested through the CLI");
    let code = match fence_admin(config, &db)
        .clear(&binding, &target, reason)
        .await
    {
        Ok(outcome) if outcome.cleared => {
            out!("cleared fence {} of {}", outcome.key, outcome.binding);
            ExitCode::SUCCESS
        }
        Ok(outcome) => {
            out!(
                "no fence {} in {}; nothing written",
                outcome.key,
                outcome.binding
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tenantry: {e}");
            ExitCode::FAILURE
        }
    };
    close(db).await;
    code
}

/// Options of `tenantry prune`.
#[derive(Debug, Clone, Args)]
pub struct PruneArgs {
    /// Only count what would be removed (per kind, with the oldest record); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Exit code of `tenantry prune` when another replica held the retention lock for at least one
/// kind, so that kind was not pruned (EX_TEMPFAIL of sysexits: run it again later). The other
/// kinds were pruned; the report says which were busy.
pub const PRUNE_BUSY_EXIT: u8 = 75;

/// `tenantry prune`: one retention run with the configured `[retention]` policy (or, with
/// `--dry-run`, the counts it would remove), then a table per kind. Exits
/// [`PRUNE_BUSY_EXIT`] when another replica was pruning a kind meanwhile.
pub async fn prune(config: &Config, args: &PruneArgs) -> ExitCode {
    use tenantry_engine::retention;
    use tenantry_ports::retention::RetentionStore;

    let db = match open_existing(config).await {
        Ok(db) => db,
        Err(code) => return code,
    };
    let store = Stores::new(&db).retention;
    let policy = config.retention.policy;
    // Windows are measured on the database's clock, which stamped the records (case 013).
    let now = match store.now().await {
        Ok(now) => now,
        Err(e) => {
            close(db).await;
            eprintln!("tenantry: cannot read the database's clock: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = if args.dry_run {
        retention::dry_run(&store, &policy, now).await
    } else {
        retention::prune_once(&store, &policy, now).await
    };
    close(db).await;
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            eprintln!("tenantry: {e}");
            return ExitCode::FAILURE;
        }
    };
    let rows: Vec<serde_json::Value> = report
        .kinds
        .iter()
        .map(|k| {
            serde_json::json!({
                "kind": k.kind.as_str(),
                "window_days": policy.window(k.kind).as_secs() / 86_400,
                if report.dry_run { "would_remove" } else { "removed" }: k.removed,
                "busy": k.busy,
                "oldest": k.oldest.map(|t| t.to_rfc3339()),
                "oldest_age_seconds": report.oldest_age(k.kind).map(|a| a.as_secs()),
            })
        })
        .collect();
    let busy: Vec<&str> = report
        .kinds
        .iter()
        .filter(|k| k.busy)
        .map(|k| k.kind.as_str())
        .collect();
    let exit = if busy.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "tenantry: another replica was pruning ({}): not pruned by this run; run `tenantry prune` again later (exit code {PRUNE_BUSY_EXIT})",
            busy.join(", ")
        );
        ExitCode::from(PRUNE_BUSY_EXIT)
    };
    if args.json {
        let doc = serde_json::json!({
            "dry_run": report.dry_run,
            "at": report.at.to_rfc3339(),
            "kinds": rows,
        });
        match serde_json::to_string_pretty(&doc) {
            Ok(json) => out!("{json}"),
            Err(e) => {
                eprintln!("tenantry: {e}");
                return ExitCode::FAILURE;
            }
        }
        return exit;
    }
    out!(
        "{:<18}  {:>6}  {:>12}  {:<26}  {:>10}",
        "KIND",
        "WINDOW",
        if report.dry_run {
            "WOULD REMOVE"
        } else {
            "REMOVED"
        },
        "OLDEST",
        "AGE (DAYS)"
    );
    for k in &report.kinds {
        out!(
            "{:<18}  {:>5}d  {:>12}  {:<26}  {:>10}{}",
            k.kind.as_str(),
            policy.window(k.kind).as_secs() / 86_400,
            k.removed,
            k.oldest
                .map(|t| t.to_rfc3339())
                .unwrap_or_else(|| "-".into()),
            report
                .oldest_age(k.kind)
                .map(|a| format!("{:.1}", a.as_secs_f64() / 86_400.0))
                .unwrap_or_else(|| "-".into()),
            if k.busy {
                "  (another replica is pruning; run again later)"
            } else {
                ""
            },
        );
    }
    if report.dry_run {
        out!("dry run: nothing was removed");
    }
    exit
}
