//! [`RawConfig`]: the settings as read from the TOML file and the environment.

use serde::Deserialize;

use tenantry_operator::identity::Secret;

use super::{ConfigError, LogFormat};

/// Settings as read from the file and the environment, before validation. Secrets (tokens,
/// keys, the database URL) are [`Secret`]s already, so `Debug` prints none of them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// See [`Config::database_url`](super::Config::database_url).
    pub database_url: Option<Secret>,
    /// See [`Config::database_max_connections`](super::Config::database_max_connections).
    pub database_max_connections: Option<u32>,
    /// See [`Config::listen`](super::Config::listen).
    pub listen: Option<String>,
    /// See [`Config::admin_token`](super::Config::admin_token).
    pub admin_token: Option<Secret>,
    /// See [`Config::log_format`](super::Config::log_format).
    pub log_format: Option<LogFormat>,
    /// See [`Config::log_filter`](super::Config::log_filter).
    pub log_filter: Option<String>,
    /// See [`Config::workers`](super::Config::workers).
    pub workers: Option<u32>,
    /// See [`Config::claim_batch`](super::Config::claim_batch).
    pub claim_batch: Option<u32>,
    /// See [`Config::group_commit`](super::Config::group_commit).
    pub group_commit: Option<bool>,
    /// See [`Config::lease_renewal`](super::Config::lease_renewal).
    pub lease_renewal: Option<bool>,
    /// See [`Config::deletion_absence_grace`](super::Config::deletion_absence_grace).
    pub deletion_absence_grace_seconds: Option<u64>,
    /// See [`Config::idle_poll`](super::Config::idle_poll).
    pub idle_poll_ms: Option<u64>,
    /// See [`Config::lease`](super::Config::lease).
    pub lease_seconds: Option<u64>,
    /// See [`Config::retry_max_delay`](super::Config::retry_max_delay).
    pub retry_max_delay_ms: Option<u64>,
    /// See [`Config::max_attempts`](super::Config::max_attempts).
    pub max_attempts: Option<u32>,
    /// See [`Config::shutdown_grace`](super::Config::shutdown_grace).
    pub shutdown_grace_seconds: Option<u64>,
    /// See [`Config::product_enabled`](super::Config::product_enabled).
    pub product_enabled: Option<bool>,
    /// See [`Config::knowledge_fs_url`](super::Config::knowledge_fs_url).
    pub knowledge_fs_url: Option<String>,
    /// See [`Config::knowledge_fs_token`](super::Config::knowledge_fs_token).
    pub knowledge_fs_token: Option<Secret>,
    /// See [`Config::knowledge_fs_deadline`](super::Config::knowledge_fs_deadline).
    pub knowledge_fs_deadline_ms: Option<u64>,
    /// See [`Config::knowledge_fs_max_concurrent_calls`](super::Config::knowledge_fs_max_concurrent_calls).
    pub knowledge_fs_max_concurrent_calls: Option<usize>,
    /// See [`Config::knowledge_fs_max_concurrent_calls_per_tenant`](super::Config::knowledge_fs_max_concurrent_calls_per_tenant).
    pub knowledge_fs_max_concurrent_calls_per_tenant: Option<usize>,
    /// See [`Config::fence_dispatch_deadline`](super::Config::fence_dispatch_deadline).
    pub fence_dispatch_deadline_ms: Option<u64>,
    /// `knowledge_fs_ca_file`: see [`Config::knowledge_fs_tls`](super::Config::knowledge_fs_tls).
    pub knowledge_fs_ca_file: Option<String>,
    /// `knowledge_fs_client_cert_file`: see [`Config::knowledge_fs_tls`](super::Config::knowledge_fs_tls).
    pub knowledge_fs_client_cert_file: Option<String>,
    /// `knowledge_fs_client_key_file`: see [`Config::knowledge_fs_tls`](super::Config::knowledge_fs_tls).
    pub knowledge_fs_client_key_file: Option<String>,
    /// See [`Config::allow_plain_http`](super::Config::allow_plain_http).
    pub allow_plain_http: Option<bool>,
    /// `tls_cert_file`: see [`Config::admin_tls`](super::Config::admin_tls).
    pub tls_cert_file: Option<String>,
    /// `tls_key_file`: see [`Config::admin_tls`](super::Config::admin_tls).
    pub tls_key_file: Option<String>,
    /// See [`Config::otlp_endpoint`](super::Config::otlp_endpoint).
    pub otlp_endpoint: Option<String>,
    /// See [`DirectorySettings::url`](super::DirectorySettings::url).
    pub directory_url: Option<String>,
    /// See [`DirectorySettings::token`](super::DirectorySettings::token).
    pub directory_token: Option<Secret>,
    /// See [`DirectorySettings::instance`](super::DirectorySettings::instance).
    pub directory_instance: Option<String>,
    /// See [`DirectorySettings::trusted_keys`](super::DirectorySettings::trusted_keys).
    pub directory_trusted_keys: Option<String>,
    /// See [`DirectorySettings::sync_interval`](super::DirectorySettings::sync_interval).
    pub directory_sync_interval_ms: Option<u64>,
    /// See [`DirectorySettings::max_staleness`](super::DirectorySettings::max_staleness).
    pub directory_max_staleness_seconds: Option<u64>,
    /// See [`DirectorySettings::event_limit`](super::DirectorySettings::event_limit).
    pub directory_event_limit: Option<u32>,
    /// `directory_max_snapshot_workspaces`: see [`DirectoryCapacity::limits`](super::DirectoryCapacity::limits).
    pub directory_max_snapshot_workspaces: Option<u64>,
    /// `directory_max_snapshot_memberships`: see [`DirectoryCapacity::limits`](super::DirectoryCapacity::limits).
    pub directory_max_snapshot_memberships: Option<u64>,
    /// `directory_max_active_workspaces`: see [`DirectoryCapacity::limits`](super::DirectoryCapacity::limits).
    pub directory_max_active_workspaces: Option<u64>,
    /// See [`DirectoryCapacity::max_response_bytes`](super::DirectoryCapacity::max_response_bytes).
    pub directory_max_response_bytes: Option<u64>,
    /// See [`DirectoryCapacity::snapshot_page_size`](super::DirectoryCapacity::snapshot_page_size).
    pub directory_snapshot_page_size: Option<u64>,
    /// `directory_ca_file`: see [`DirectorySettings::tls`](super::DirectorySettings::tls).
    pub directory_ca_file: Option<String>,
    /// `directory_client_cert_file`: see [`DirectorySettings::tls`](super::DirectorySettings::tls).
    pub directory_client_cert_file: Option<String>,
    /// `directory_client_key_file`: see [`DirectorySettings::tls`](super::DirectorySettings::tls).
    pub directory_client_key_file: Option<String>,
    /// The `[retention]` table (environment: `TENANTRY_RETENTION_<KEY>`).
    #[serde(default)]
    pub retention: RawRetention,
    /// See [`Config::ui`](super::Config::ui).
    pub ui: Option<bool>,
    /// See [`Config::ui_read_only`](super::Config::ui_read_only).
    pub ui_read_only: Option<bool>,
    /// See [`Config::admin_header_read_timeout`](super::Config::admin_header_read_timeout).
    pub admin_header_read_timeout_seconds: Option<u64>,
    /// See [`Config::admin_request_body_timeout`](super::Config::admin_request_body_timeout).
    pub admin_request_body_timeout_seconds: Option<u64>,
    /// `admin_token_file`: a file holding `admin_token` (container secrets); not with it.
    pub admin_token_file: Option<String>,
    /// `knowledge_fs_token_file`: a file holding `knowledge_fs_token`; not with it.
    pub knowledge_fs_token_file: Option<String>,
    /// `directory_token_file`: a file holding `directory_token`; not with it.
    pub directory_token_file: Option<String>,
    /// `database_url_file`: a file holding `database_url`; not with it.
    pub database_url_file: Option<String>,
    /// `database_password_file`: a file holding the PostgreSQL password, put into the user
    /// info of `database_url` (which must name a user and no password).
    pub database_password_file: Option<String>,
    /// See [`Config::ui_session_key`](super::Config::ui_session_key).
    pub ui_session_key: Option<Secret>,
    /// `ui_session_key_file`: a file holding `ui_session_key`; not with it.
    pub ui_session_key_file: Option<String>,
    /// The `[[operators]]` tables (environment: `TENANTRY_OPERATORS`, which replaces them).
    pub operators: Option<Vec<RawOperator>>,
}

/// One `[[operators]]` table: a named operator token with a role (docs/operations.md,
/// "Operators and roles").
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an [[operators]] table with name, role and token_file (or token)"
)]
pub struct RawOperator {
    /// The name recorded as the actor of its actions.
    pub name: String,
    /// `read` or `operate`.
    pub role: String,
    /// The token itself (prefer `token_file`).
    pub token: Option<Secret>,
    /// A file holding the token.
    pub token_file: Option<String>,
}

/// The `[retention]` table as read, before validation; see
/// [`RetentionSettings`](super::RetentionSettings). The environment variable of key `k` is
/// `TENANTRY_RETENTION_<K>`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [retention] table of keys such as finished_commands_days (docs/operations.md, \"Retention\")"
)]
pub struct RawRetention {
    /// See [`RetentionSettings::enabled`](super::RetentionSettings::enabled).
    pub enabled: Option<bool>,
    /// See [`RetentionSettings::interval`](super::RetentionSettings::interval).
    pub interval_seconds: Option<u64>,
    /// Window of finished commands, days.
    pub finished_commands_days: Option<u64>,
    /// Window of operator action records, days.
    pub operator_actions_days: Option<u64>,
    /// Window of directory inbox receipts, days.
    pub inbox_receipts_days: Option<u64>,
    /// Rows per delete statement.
    pub batch_size: Option<u32>,
    /// Window of cleared fence records, days.
    pub cleared_fences_days: Option<u64>,
}

impl RawConfig {
    /// Parses TOML text (from `path`, for messages).
    ///
    /// # Errors
    /// [`ConfigError::InvalidFile`] naming the bad key.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        // The error's own text quotes the offending line, which may hold a secret (a token
        // with a missing quote): only its position and message are reported.
        toml::from_str(text).map_err(|e| {
            let at = e.span().map_or_else(String::new, |span| {
                let before = &text[..span.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
                format!("line {line}, column {column}: ")
            });
            ConfigError::InvalidFile {
                path: path.to_owned(),
                reason: format!("{at}{}", e.message().trim()),
            }
        })
    }
}
