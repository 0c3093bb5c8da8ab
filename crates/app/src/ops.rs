//! Operator commands that work on the database directly: `migrate`, `commands list`,
//! `fences list`, `fences clear`.

use std::process::ExitCode;
use std::sync::Arc;

use tenantry_fence::{Binding, FenceKey, ScopeIdentity};
use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};
use tenantry_store_seaorm::Database;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

use crate::admin::{CommandView, CommandsQuery, commands_filter};
use crate::cli::{CommandsListArgs, FencesClearArgs, FencesListArgs};
use crate::config::{Config, redact_url};
use crate::fences::{ClearTarget, FenceAdmin};

/// Opens (and migrates) the configured database; prints the error and returns the exit code
/// on failure.
///
/// # Errors
/// The exit code to return when the database cannot be opened.
pub async fn open(config: &Config) -> Result<Database, ExitCode> {
    tenantry_store_seaorm::connect(&config.database_url, config.database_max_connections)
        .await
        .map_err(|e| {
            eprintln!(
                "tenantry: cannot open database {}: {e}",
                redact_url(&config.database_url)
            );
            ExitCode::FAILURE
        })
}

/// Opens the configured database for an operator command: nothing is created or migrated,
/// and a missing database or an outdated schema is an error that says to run `tenantry migrate`.
///
/// # Errors
/// The exit code to return when the database cannot be opened.
pub async fn open_existing(config: &Config) -> Result<Database, ExitCode> {
    tenantry_store_seaorm::connect_existing(&config.database_url, config.database_max_connections)
        .await
        .map_err(|e| {
            eprintln!(
                "tenantry: cannot open database {}: {e}",
                redact_url(&config.database_url)
            );
            ExitCode::FAILURE
        })
}

/// `tenantry migrate`.
pub async fn migrate(config: &Config) -> ExitCode {
    match open(config).await {
        Ok(db) => {
            let _ = db.conn.close().await;
            println!(
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
    ExitCode::from(2)
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
    let store = SeaOrmLifecycleStore::new(&db);
    if let Err(e) = crate::admin::known_cursor(&store, filter.after.as_ref()).await {
        let _ = db.conn.close().await;
        return if e.status.is_client_error() {
            usage(format!("--after: {}", e.message))
        } else {
            eprintln!("tenantry: {}", e.message);
            ExitCode::FAILURE
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
                Ok(line) => println!("{line}"),
                Err(e) => {
                    eprintln!("tenantry: cannot encode command {}: {e}", c.id);
                    return ExitCode::FAILURE;
                }
            }
        }
    } else {
        println!(
            "{:<36}  {:<10}  {:<9}  {:<12}  {:<24}  {:>8}  {:<26}  LAST ERROR",
            "ID", "TENANT", "OPERATION", "STATUS", "CONTROL SPACE", "ATTEMPTS", "NEXT ATTEMPT"
        );
        for c in &commands {
            println!(
                "{:<36}  {:<10}  {:<9}  {:<12}  {:<24}  {:>8}  {:<26}  {}",
                c.id.as_str(),
                c.tenant_id.as_str(),
                c.operation.as_str(),
                c.status.as_str(),
                c.control_space_id.as_str(),
                c.attempt_count,
                c.next_attempt_at.to_rfc3339(),
                c.last_error_code.as_deref().unwrap_or("-"),
            );
        }
        if commands.len() == filter.limit as usize
            && let Some(last) = commands.last()
        {
            eprintln!("(more: --after {})", last.id.as_str());
        }
    }
    let _ = db.conn.close().await;
    ExitCode::SUCCESS
}

/// The store filter of `commands list`, built by the admin API's own parser so the CLI accepts
/// exactly what `GET /v1/commands` accepts.
fn command_filter(args: &CommandsListArgs) -> Result<CommandFilter, String> {
    let query = CommandsQuery {
        status: args.status.clone(),
        operation: args.operation.clone(),
        tenant_id: args.tenant.clone(),
        control_space_id: args.control_space.clone(),
        limit: Some(args.limit),
        after: args.after.clone(),
    };
    commands_filter(&query).map_err(|e| {
        // The API names its query parameters; say which option that is.
        const OPTIONS: [(&str, &str); 6] = [
            ("status", "--status"),
            ("operation", "--operation"),
            ("tenant_id", "--tenant"),
            ("control_space_id", "--control-space"),
            ("limit", "--limit"),
            ("after", "--after"),
        ];
        OPTIONS
            .iter()
            .find(|(field, _)| e.message.starts_with(&format!("{field} ")))
            .map_or_else(
                || e.message.clone(),
                |(field, option)| format!("{option}{}", &e.message[field.len()..]),
            )
    })
}

/// The CLI process's one scoped-writes runtime (it writes nothing else); intents may be
/// cleared once older than `knowledge_fs_deadline`, the dispatch deadline of `serve`.
fn fence_admin(config: &Config, db: &Database) -> FenceAdmin<SeaOrmHostStorage> {
    FenceAdmin::standalone(
        Arc::new(SeaOrmHostStorage::new(db.conn.clone())),
        config.knowledge_fs_deadline,
    )
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
    let fences = match fence_admin(config, &db).list(binding.as_ref()).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("tenantry: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.json {
        // One JSON array, `[]` when there are none.
        match serde_json::to_string_pretty(&fences) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("tenantry: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else if fences.is_empty() {
        println!("no fences");
    } else {
        println!(
            "{:<20}  {:<24}  {:<7}  {:<26}  {:<10}  REASON / FAILURE / KEY",
            "BINDING", "SCOPE", "KIND", "FENCED AT", "PERSISTED"
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
            println!(
                "{:<20}  {:<24}  {:<7}  {:<26}  {:<10}  {}{} [{}]",
                f.binding,
                scope,
                f.kind.as_str(),
                f.fenced_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
                f.persisted,
                f.reason.as_deref().unwrap_or("-"),
                failure,
                f.key,
            );
        }
    }
    let _ = db.conn.close().await;
    ExitCode::SUCCESS
}

/// A binding given to the fence commands: a valid id (the same rule as the admin API), then a
/// valid binding.
fn fence_binding(value: &str) -> Result<Binding, String> {
    tenantry_kernel::id::validate("binding", value).map_err(|e| e.to_string())?;
    Binding::parse(value).map_err(|e| e.to_string())
}

/// `tenantry fences clear`.
pub async fn fences_clear(config: &Config, args: &FencesClearArgs) -> ExitCode {
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
    let code = match fence_admin(config, &db)
        .clear(&binding, &target, reason)
        .await
    {
        Ok(outcome) if outcome.cleared => {
            println!("cleared fence {} of {}", outcome.key, outcome.binding);
            ExitCode::SUCCESS
        }
        Ok(outcome) => {
            println!(
                "no fence {} in {}; nothing written",
                outcome.key, outcome.binding
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tenantry: {e}");
            ExitCode::FAILURE
        }
    };
    let _ = db.conn.close().await;
    code
}
