//! The `TENANTRY_*` environment: the setting names, the overlay over the file, and the check
//! for variables that name no setting.

use std::collections::BTreeMap;

use super::raw::RawOperator;
use super::validate::validate;
use super::{CONFIG_ENV, Config, ConfigError, ENV_PREFIX, RawConfig};

/// `TENANTRY_OPERATORS`: `name:role:token_file` entries separated by commas (blank entries
/// ignored; an empty value configures no named operator). The tokens themselves never travel
/// in the environment, only the files that hold them.
///
/// # Errors
/// What is wrong with which entry.
pub fn parse_operators_env(value: &str) -> Result<Vec<RawOperator>, String> {
    if value.trim().is_empty() {
        // An empty list would switch authentication off (docs/operations.md, "Operators and
        // roles"): refused, not read as "no operators".
        return Err(
            "is empty; name at least one operator as name:role:token_file, or unset the variable"
                .to_owned(),
        );
    }
    value
        .split(',')
        .map(str::trim)
        .map(|entry| {
            if entry.is_empty() {
                return Err(
                    "has an empty entry (two commas, or a comma at an end); entries are name:role:token_file separated by single commas"
                        .to_owned(),
                );
            }
            let mut parts = entry.splitn(3, ':');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(name), Some(role), Some(file)) if !file.trim().is_empty() => {
                    Ok(RawOperator {
                        name: name.trim().to_owned(),
                        role: role.trim().to_owned(),
                        token: None,
                        token_file: Some(file.trim().to_owned()),
                    })
                }
                _ => Err(format!(
                    "entry {entry:?} is not name:role:token_file (e.g. alice:operate:/run/secrets/alice)"
                )),
            }
        })
        .collect()
}

/// Where each setting came from, for error messages.
pub(super) type Sources = BTreeMap<&'static str, String>;

/// Every setting's name: the TOML key, and (upper-cased, prefixed with [`ENV_PREFIX`]) the
/// environment variable. A unit test checks that it is exactly what the environment overlay
/// reads.
pub const SETTINGS: [&str; 64] = [
    "database_url",
    "database_max_connections",
    "listen",
    "admin_token",
    "log_format",
    "log_filter",
    "workers",
    "claim_batch",
    "group_commit",
    "lease_renewal",
    "deletion_absence_grace_seconds",
    "idle_poll_ms",
    "lease_seconds",
    "retry_max_delay_ms",
    "max_attempts",
    "shutdown_grace_seconds",
    "product_enabled",
    "knowledge_fs_url",
    "knowledge_fs_token",
    "knowledge_fs_deadline_ms",
    "knowledge_fs_max_concurrent_calls",
    "knowledge_fs_max_concurrent_calls_per_tenant",
    "fence_dispatch_deadline_ms",
    "directory_url",
    "directory_token",
    "directory_instance",
    "directory_trusted_keys",
    "directory_sync_interval_ms",
    "directory_max_staleness_seconds",
    "directory_event_limit",
    // The directory's capacity limits and the provider answer's size cap.
    "directory_max_snapshot_workspaces",
    "directory_max_snapshot_memberships",
    "directory_max_active_workspaces",
    "directory_max_response_bytes",
    "directory_snapshot_page_size",
    // The `[retention]` table: TOML key `retention.<key>`, variable `TENANTRY_RETENTION_<KEY>`.
    "retention_enabled",
    "retention_interval_seconds",
    "retention_finished_commands_days",
    "retention_operator_actions_days",
    "retention_inbox_receipts_days",
    "retention_batch_size",
    "retention_cleared_fences_days",
    // The operator console (`/ui` on the admin listener).
    "ui",
    "ui_read_only",
    // Bounds of the admin listener's connections.
    "admin_header_read_timeout_seconds",
    "admin_request_body_timeout_seconds",
    // TLS (docs/operations.md, "TLS"): the remotes' CA and client certificate files, plain
    // HTTP to a non-loopback remote, and the admin listener's certificate.
    "knowledge_fs_ca_file",
    "knowledge_fs_client_cert_file",
    "knowledge_fs_client_key_file",
    "directory_ca_file",
    "directory_client_cert_file",
    "directory_client_key_file",
    "allow_plain_http",
    "tls_cert_file",
    "tls_key_file",
    // Secrets from files (the convention of container secrets), the console's session key,
    // and the named operators (docs/operations.md, "Operators and roles").
    "admin_token_file",
    "knowledge_fs_token_file",
    "directory_token_file",
    "database_url_file",
    "database_password_file",
    "ui_session_key",
    "ui_session_key_file",
    // `TENANTRY_OPERATORS`: `name:role:token_file` entries separated by commas.
    "operators",
    // Traces (docs/operations.md, "Tracing"): the OTLP/HTTP collector; the `OTEL_*` variables
    // are read by the exporter itself.
    "otlp_endpoint",
];

/// `TENANTRY_*` variables that are read but are not settings: the configuration file, the
/// PostgreSQL server of the test suites, and the operator the CLI acts as.
pub const OTHER_VARIABLES: [&str; 3] = [CONFIG_ENV, "TENANTRY_TEST_PG_URL", OPERATOR_ENV];

/// The variable naming the operator the CLI acts as (like `--operator`).
pub const OPERATOR_ENV: &str = "TENANTRY_OPERATOR";

/// Connections the pool needs beyond one per lifecycle worker: the admin API, `/readyz`, the
/// metrics gauges and the directory projector.
pub const CONNECTIONS_BESIDES_WORKERS: u32 = 4;

/// A `TENANTRY_*` environment variable that names no setting (a typo is otherwise silently
/// ignored, and the default used instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    /// The variable.
    pub name: String,
    /// The closest known variable, when one is close enough to be a likely typo.
    pub suggestion: Option<String>,
}

impl std::fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is not a tenantry setting and is ignored", self.name)?;
        match &self.suggestion {
            Some(known) => write!(f, "; did you mean {known}?"),
            None => write!(f, "; see docs/operations.md for the settings"),
        }
    }
}

/// The variables among `names` that start with [`ENV_PREFIX`] but name no setting (nor one of
/// [`OTHER_VARIABLES`]), each with the closest known name when it is at most 3 edits away.
pub fn unknown_variables(names: impl IntoIterator<Item = String>) -> Vec<UnknownVariable> {
    let known: Vec<String> = SETTINGS
        .iter()
        .map(|s| format!("{ENV_PREFIX}{}", s.to_uppercase()))
        .chain(OTHER_VARIABLES.iter().map(|s| (*s).to_owned()))
        .collect();
    let mut unknown: Vec<UnknownVariable> = names
        .into_iter()
        .filter(|name| name.starts_with(ENV_PREFIX) && !known.contains(name))
        .map(|name| {
            let suggestion = known
                .iter()
                .map(|k| (strsim::levenshtein(&name, k), k))
                .filter(|(distance, _)| *distance <= 3)
                .min()
                .map(|(_, k)| k.clone());
            UnknownVariable { name, suggestion }
        })
        .collect();
    unknown.sort_by(|a, b| a.name.cmp(&b.name));
    unknown
}

/// Applies `TENANTRY_<SETTING>` variables over `raw`, parsing each with its type's `FromStr`.
macro_rules! overlay_env {
    ($raw:ident, $sources:ident, $env:ident; $($field:ident),* $(,)?) => {
        $(
            let name = concat!("TENANTRY_", stringify!($field)).to_uppercase();
            if let Some(value) = $env(&name) {
                let parsed = value.trim().parse().map_err(|e| ConfigError::Invalid {
                    setting: stringify!($field),
                    origin: name.clone(),
                    reason: format!("{value:?} does not parse: {e}"),
                })?;
                $raw.$field = Some(parsed);
                $sources.insert(stringify!($field), name);
            }
        )*
    };
}

/// Applies `TENANTRY_RETENTION_<KEY>` variables over `raw.retention` (setting names
/// `retention_<key>`).
macro_rules! overlay_retention {
    ($raw:ident, $sources:ident, $env:ident; $($field:ident),* $(,)?) => {
        $(
            let setting = concat!("retention_", stringify!($field));
            let name = format!("TENANTRY_{}", setting.to_uppercase());
            if let Some(value) = $env(&name) {
                let parsed = value.trim().parse().map_err(|e| ConfigError::Invalid {
                    setting,
                    origin: name.clone(),
                    reason: format!("{value:?} does not parse: {e}"),
                })?;
                $raw.retention.$field = Some(parsed);
                $sources.insert(setting, name);
            }
        )*
    };
}

/// Applies the environment over `raw` (whose values came from `file_label`) and validates.
///
/// # Errors
/// [`ConfigError`] naming the first bad setting.
pub fn merge_env_and_validate(
    mut raw: RawConfig,
    file_label: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let mut sources = Sources::new();
    overlay_env!(raw, sources, env;
        database_url, database_max_connections, listen, admin_token, log_format, log_filter,
        workers, claim_batch, group_commit, lease_renewal, deletion_absence_grace_seconds,
        idle_poll_ms, lease_seconds, retry_max_delay_ms, max_attempts,
        shutdown_grace_seconds, product_enabled, knowledge_fs_url, knowledge_fs_token,
        knowledge_fs_deadline_ms, knowledge_fs_max_concurrent_calls,
        knowledge_fs_max_concurrent_calls_per_tenant, fence_dispatch_deadline_ms,
        directory_url,
        directory_token, directory_instance, directory_trusted_keys, directory_sync_interval_ms,
        directory_max_staleness_seconds, directory_event_limit,
        directory_max_snapshot_workspaces, directory_max_snapshot_memberships,
        directory_max_active_workspaces, directory_max_response_bytes,
        directory_snapshot_page_size,
    );
    overlay_retention!(raw, sources, env;
        enabled, interval_seconds, finished_commands_days, operator_actions_days,
        inbox_receipts_days, batch_size, cleared_fences_days,
    );
    overlay_env!(raw, sources, env; ui, ui_read_only,);
    overlay_env!(raw, sources, env;
        admin_header_read_timeout_seconds, admin_request_body_timeout_seconds,
        knowledge_fs_ca_file, knowledge_fs_client_cert_file, knowledge_fs_client_key_file,
        directory_ca_file, directory_client_cert_file, directory_client_key_file,
        allow_plain_http, tls_cert_file, tls_key_file,
        admin_token_file, knowledge_fs_token_file, directory_token_file, database_url_file,
        database_password_file, ui_session_key, ui_session_key_file,
    );
    if let Some(value) = env("TENANTRY_OPERATORS") {
        raw.operators =
            Some(
                parse_operators_env(&value).map_err(|reason| ConfigError::Invalid {
                    setting: "operators",
                    origin: "TENANTRY_OPERATORS".to_owned(),
                    reason,
                })?,
            );
        sources.insert("operators", "TENANTRY_OPERATORS".to_owned());
    }
    overlay_env!(raw, sources, env; otlp_endpoint,);
    validate(raw, &|setting| {
        sources
            .get(setting)
            .cloned()
            .unwrap_or_else(|| file_label.to_owned())
    })
}
