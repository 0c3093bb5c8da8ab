//! Configuration of `tenantry serve`: a TOML file plus `TENANTRY_*` environment variables.
//!
//! Every setting has one name, used as the TOML key and (upper-cased, prefixed with
//! `TENANTRY_`) as the environment variable; the environment wins over the file. The merged
//! settings are validated once at start into a [`Config`]; each [`ConfigError`] names the
//! setting (and the variable or file it came from) and says what to do.
//!
//! The file is `--config PATH`, else `$TENANTRY_CONFIG`, else `tenantry.toml` in the working
//! folder when it exists. Without any setting the service uses a SQLite file
//! `tenantry.db` in the working folder and listens on `127.0.0.1:8080` without a token.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

/// Prefix of every environment variable read as a setting.
pub const ENV_PREFIX: &str = "TENANTRY_";

/// Environment variable naming the configuration file.
pub const CONFIG_ENV: &str = "TENANTRY_CONFIG";

/// File read when neither `--config` nor `TENANTRY_CONFIG` names one (if it exists).
pub const DEFAULT_CONFIG_FILE: &str = "tenantry.toml";

/// Default database: a SQLite file in the working folder, created when missing.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://tenantry.db?mode=rwc";

/// Default admin API address (loopback only, so no token is required).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines (default).
    #[default]
    Human,
    /// One JSON object per line, for log collectors.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "human" => Ok(Self::Human),
            "json" => Ok(Self::Json),
            other => Err(format!("{other:?} is not a log format; use human or json")),
        }
    }
}

impl<'de> Deserialize<'de> for LogFormat {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Validated configuration of the service.
#[derive(Clone, PartialEq)]
pub struct Config {
    /// `database_url`: `sqlite://PATH?mode=rwc` or `postgres://USER@HOST/DB`.
    pub database_url: String,
    /// `database_max_connections`: pool size (1..=512, default 8); at least `workers + 4`.
    pub database_max_connections: u32,
    /// `listen`: address of the admin API (default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// `admin_token`: bearer token of the admin API; required unless `listen` is loopback.
    pub admin_token: Option<String>,
    /// `log_format`: `human` (default) or `json`.
    pub log_format: LogFormat,
    /// `log_filter`: tracing filter directives (default `info`; `RUST_LOG` wins when set).
    pub log_filter: String,
    /// `workers`: lifecycle workers in this process (1..=256, default 4).
    pub workers: u32,
    /// `claim_batch`: commands one worker claims in one statement and dispatches at once
    /// (1..=64, default 16).
    pub claim_batch: u32,
    /// `group_commit`: settle the dispatches of all workers through shared transactions
    /// (group commit, default true); see docs/operations.md.
    pub group_commit: bool,
    /// `idle_poll_ms`: how long an idle worker sleeps before claiming again (default 1000).
    pub idle_poll: Duration,
    /// `lease_seconds`: lease of a claimed command (3..=86400, default 30). With
    /// `lease_renewal` it is renewed every third of its length while the dispatch is in flight;
    /// without renewal it must exceed `knowledge_fs_deadline_ms`.
    pub lease: Duration,
    /// `lease_renewal`: renew the lease of a dispatch in flight (default true).
    pub lease_renewal: bool,
    /// `deletion_absence_grace_seconds`: how long after a provision's last attempt a lookup's
    /// absence is not yet proof that the space will never appear (default 600).
    pub deletion_absence_grace: Duration,
    /// `retry_max_delay_ms`: upper bound of the retry backoff (default 300000).
    pub retry_max_delay: Duration,
    /// `max_attempts`: claims of one command (since its last operator retry) after which a
    /// retry dead-letters it as `failed` (1..=100000, default 50, about four hours with the
    /// default backoff). Progress polls of a draining deletion or a lagging revoke watermark
    /// do not count.
    pub max_attempts: u32,
    /// `shutdown_grace_seconds`: how long shutdown waits for in-flight dispatches (default 30).
    pub shutdown_grace: Duration,
    /// `product_enabled`: whether provision commands are dispatched (default true).
    pub product_enabled: bool,
    /// `knowledge_fs_url`: base URL of the KnowledgeFS lifecycle API (required by `serve`).
    pub knowledge_fs_url: Option<String>,
    /// `knowledge_fs_token`: bearer token sent to KnowledgeFS.
    pub knowledge_fs_token: Option<String>,
    /// `knowledge_fs_deadline_ms`: total deadline of one KnowledgeFS call (default 150000).
    pub knowledge_fs_deadline: Duration,
    /// `knowledge_fs_max_concurrent_calls`: calls in flight at once (1..=1024, default 8).
    pub knowledge_fs_max_concurrent_calls: usize,
    /// The directory projection, when `directory_url` is set.
    pub directory: Option<DirectorySettings>,
}

/// Settings of the directory projection (all `directory_*` settings).
#[derive(Clone, PartialEq, Eq)]
pub struct DirectorySettings {
    /// `directory_url`: base URL of the Directory API v1 provider.
    pub url: String,
    /// `directory_token`: bearer token sent to the provider, if it requires one.
    pub token: Option<String>,
    /// `directory_instance`: the instance uuid projected into this database.
    pub instance: String,
    /// `directory_trusted_keys`: `key_id=64 hex digits` entries separated by commas; the
    /// Ed25519 public keys whose signatures are accepted (several during a key rotation).
    pub trusted_keys: Vec<(String, String)>,
    /// `directory_sync_interval_ms`: time between syncs (default 5000).
    pub sync_interval: Duration,
    /// `directory_max_staleness_seconds`: age after which the projection is stale and
    /// `/readyz` fails (default 300; must exceed the sync interval).
    pub max_staleness: Duration,
    /// `directory_event_limit`: events asked per page (1..=100, default 100).
    pub event_limit: u32,
}

impl std::fmt::Debug for DirectorySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectorySettings")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("instance", &self.instance)
            .field(
                "trusted_keys",
                &self
                    .trusted_keys
                    .iter()
                    .map(|(id, _)| id)
                    .collect::<Vec<_>>(),
            )
            .field("sync_interval", &self.sync_interval)
            .field("max_staleness", &self.max_staleness)
            .field("event_limit", &self.event_limit)
            .finish()
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &redact_url(&self.database_url))
            .field("database_max_connections", &self.database_max_connections)
            .field("listen", &self.listen)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .field("log_format", &self.log_format)
            .field("log_filter", &self.log_filter)
            .field("workers", &self.workers)
            .field("claim_batch", &self.claim_batch)
            .field("idle_poll", &self.idle_poll)
            .field("lease", &self.lease)
            .field("retry_max_delay", &self.retry_max_delay)
            .field("max_attempts", &self.max_attempts)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("product_enabled", &self.product_enabled)
            .field("knowledge_fs_url", &self.knowledge_fs_url)
            .field(
                "knowledge_fs_token",
                &self.knowledge_fs_token.as_ref().map(|_| "<redacted>"),
            )
            .field("knowledge_fs_deadline", &self.knowledge_fs_deadline)
            .field(
                "knowledge_fs_max_concurrent_calls",
                &self.knowledge_fs_max_concurrent_calls,
            )
            .field("directory", &self.directory)
            .finish()
    }
}

/// Why the configuration was refused. Each variant names the setting and its source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read configuration file {path}: {reason}")]
    Unreadable {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The configuration file is not valid TOML or has an unknown or mistyped key.
    #[error("configuration file {path} is invalid: {reason}")]
    InvalidFile {
        /// The file.
        path: String,
        /// The parser's message (names the key and line).
        reason: String,
    },
    /// A setting has a value that does not parse or breaks its rule.
    #[error("setting {setting} (from {origin}) is invalid: {reason}")]
    Invalid {
        /// The setting's name.
        setting: &'static str,
        /// Where the value came from: `TENANTRY_X`, the file path, or `defaults`.
        origin: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A required setting is missing.
    #[error("setting {setting} is required: {hint}")]
    Missing {
        /// The setting's name.
        setting: &'static str,
        /// How to provide it.
        hint: &'static str,
    },
}

/// Settings as read from the file and the environment, before validation.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// See [`Config::database_url`].
    pub database_url: Option<String>,
    /// See [`Config::database_max_connections`].
    pub database_max_connections: Option<u32>,
    /// See [`Config::listen`].
    pub listen: Option<String>,
    /// See [`Config::admin_token`].
    pub admin_token: Option<String>,
    /// See [`Config::log_format`].
    pub log_format: Option<LogFormat>,
    /// See [`Config::log_filter`].
    pub log_filter: Option<String>,
    /// See [`Config::workers`].
    pub workers: Option<u32>,
    /// See [`Config::claim_batch`].
    pub claim_batch: Option<u32>,
    /// See [`Config::group_commit`].
    pub group_commit: Option<bool>,
    /// See [`Config::lease_renewal`].
    pub lease_renewal: Option<bool>,
    /// See [`Config::deletion_absence_grace`].
    pub deletion_absence_grace_seconds: Option<u64>,
    /// See [`Config::idle_poll`].
    pub idle_poll_ms: Option<u64>,
    /// See [`Config::lease`].
    pub lease_seconds: Option<u64>,
    /// See [`Config::retry_max_delay`].
    pub retry_max_delay_ms: Option<u64>,
    /// See [`Config::max_attempts`].
    pub max_attempts: Option<u32>,
    /// See [`Config::shutdown_grace`].
    pub shutdown_grace_seconds: Option<u64>,
    /// See [`Config::product_enabled`].
    pub product_enabled: Option<bool>,
    /// See [`Config::knowledge_fs_url`].
    pub knowledge_fs_url: Option<String>,
    /// See [`Config::knowledge_fs_token`].
    pub knowledge_fs_token: Option<String>,
    /// See [`Config::knowledge_fs_deadline`].
    pub knowledge_fs_deadline_ms: Option<u64>,
    /// See [`Config::knowledge_fs_max_concurrent_calls`].
    pub knowledge_fs_max_concurrent_calls: Option<usize>,
    /// See [`DirectorySettings::url`].
    pub directory_url: Option<String>,
    /// See [`DirectorySettings::token`].
    pub directory_token: Option<String>,
    /// See [`DirectorySettings::instance`].
    pub directory_instance: Option<String>,
    /// See [`DirectorySettings::trusted_keys`].
    pub directory_trusted_keys: Option<String>,
    /// See [`DirectorySettings::sync_interval`].
    pub directory_sync_interval_ms: Option<u64>,
    /// See [`DirectorySettings::max_staleness`].
    pub directory_max_staleness_seconds: Option<u64>,
    /// See [`DirectorySettings::event_limit`].
    pub directory_event_limit: Option<u32>,
}

/// Where each setting came from, for error messages.
type Sources = BTreeMap<&'static str, String>;

/// Every setting's name: the TOML key, and (upper-cased, prefixed with [`ENV_PREFIX`]) the
/// environment variable. A unit test checks that it is exactly what the environment overlay
/// reads.
pub const SETTINGS: [&str; 28] = [
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
    "directory_url",
    "directory_token",
    "directory_instance",
    "directory_trusted_keys",
    "directory_sync_interval_ms",
    "directory_max_staleness_seconds",
    "directory_event_limit",
];

/// `TENANTRY_*` variables that are read but are not settings: the configuration file, and the
/// PostgreSQL server of the test suites.
pub const OTHER_VARIABLES: [&str; 2] = [CONFIG_ENV, "TENANTRY_TEST_PG_URL"];

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

impl RawConfig {
    /// Parses TOML text (from `path`, for messages).
    ///
    /// # Errors
    /// [`ConfigError::InvalidFile`] naming the bad key.
    pub fn from_toml(text: &str, path: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::InvalidFile {
            path: path.to_owned(),
            reason: e.to_string().trim().to_owned(),
        })
    }
}

/// Loads the configuration: the file (explicit `path`, else `TENANTRY_CONFIG`, else
/// `tenantry.toml` if present), then `TENANTRY_*` variables from `env`, then validation.
///
/// # Errors
/// [`ConfigError`] naming the first bad setting.
pub fn load(
    path: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let file: Option<PathBuf> = match path {
        Some(p) => Some(p.to_path_buf()),
        None => match env(CONFIG_ENV) {
            Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.exists()),
        },
    };
    let (raw, file_label) = match &file {
        Some(path) => {
            let label = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
                path: label.clone(),
                reason: e.to_string(),
            })?;
            (RawConfig::from_toml(&text, &label)?, label)
        }
        None => (RawConfig::default(), "defaults".to_owned()),
    };
    merge_env_and_validate(raw, &file_label, env)
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
        knowledge_fs_deadline_ms, knowledge_fs_max_concurrent_calls, directory_url,
        directory_token, directory_instance, directory_trusted_keys, directory_sync_interval_ms,
        directory_max_staleness_seconds, directory_event_limit,
    );
    validate(raw, &|setting| {
        sources
            .get(setting)
            .cloned()
            .unwrap_or_else(|| file_label.to_owned())
    })
}

fn validate(
    raw: RawConfig,
    source: &dyn Fn(&'static str) -> String,
) -> Result<Config, ConfigError> {
    let invalid = |setting: &'static str, reason: String| ConfigError::Invalid {
        setting,
        origin: source(setting),
        reason,
    };
    let in_range = |setting: &'static str, value: u64, min: u64, max: u64| {
        if (min..=max).contains(&value) {
            Ok(value)
        } else {
            Err(invalid(
                setting,
                format!("{value} is outside {min}..={max}"),
            ))
        }
    };

    let directory = validate_directory(&raw, &invalid, &in_range)?;
    let database_url = raw
        .database_url
        .unwrap_or_else(|| DEFAULT_DATABASE_URL.to_owned());
    if !(database_url.starts_with("sqlite:")
        || database_url.starts_with("postgres:")
        || database_url.starts_with("postgresql:"))
    {
        return Err(invalid(
            "database_url",
            format!(
                "{:?} is neither sqlite:// nor postgres://; use sqlite://PATH?mode=rwc or postgres://USER@HOST/DB",
                redact_url(&database_url)
            ),
        ));
    }
    let database_max_connections = in_range(
        "database_max_connections",
        u64::from(raw.database_max_connections.unwrap_or(8)),
        1,
        512,
    )?;
    let listen_text = raw.listen.unwrap_or_else(|| DEFAULT_LISTEN.to_owned());
    let listen: SocketAddr = listen_text.parse().map_err(|e| {
        invalid(
            "listen",
            format!("{listen_text:?} is not an IP:PORT address ({e})"),
        )
    })?;
    let admin_token = raw.admin_token.filter(|t| !t.is_empty());
    if let Some(token) = &admin_token
        && (token.len() < 16 || token.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(invalid(
            "admin_token",
            "must be at least 16 characters without whitespace; generate one with `openssl rand -hex 32`"
                .to_owned(),
        ));
    }
    if admin_token.is_none() && !listen.ip().is_loopback() {
        return Err(invalid(
            "listen",
            format!(
                "{listen} is not a loopback address and admin_token is not set; set admin_token (TENANTRY_ADMIN_TOKEN) or listen on 127.0.0.1"
            ),
        ));
    }
    let workers = in_range("workers", u64::from(raw.workers.unwrap_or(4)), 1, 256)?;
    let needed = workers + u64::from(CONNECTIONS_BESIDES_WORKERS);
    if database_max_connections < needed {
        return Err(invalid(
            "database_max_connections",
            format!(
                "{database_max_connections} connections are too few for {workers} workers: each worker needs a connection to claim and settle, and the admin API, /readyz, the metrics and the directory projector need {CONNECTIONS_BESIDES_WORKERS} more, or they wait on each other until the pool times out; set database_max_connections to at least {needed} (workers + {CONNECTIONS_BESIDES_WORKERS}) or lower workers"
            ),
        ));
    }
    let claim_batch = in_range(
        "claim_batch",
        u64::from(raw.claim_batch.unwrap_or(16)),
        1,
        64,
    )?;
    let idle_poll = in_range("idle_poll_ms", raw.idle_poll_ms.unwrap_or(1000), 10, 60_000)?;
    let lease = in_range("lease_seconds", raw.lease_seconds.unwrap_or(30), 3, 86_400)?;
    let lease_renewal = raw.lease_renewal.unwrap_or(true);
    let deletion_absence_grace = in_range(
        "deletion_absence_grace_seconds",
        raw.deletion_absence_grace_seconds.unwrap_or(600),
        0,
        7 * 86_400,
    )?;
    let retry_max_delay = in_range(
        "retry_max_delay_ms",
        raw.retry_max_delay_ms.unwrap_or(300_000),
        1,
        86_400_000,
    )?;
    let max_attempts = in_range(
        "max_attempts",
        u64::from(
            raw.max_attempts
                .unwrap_or(tenantry_lifecycle::failure::DEFAULT_MAX_ATTEMPTS),
        ),
        1,
        100_000,
    )?;
    let shutdown_grace = in_range(
        "shutdown_grace_seconds",
        raw.shutdown_grace_seconds.unwrap_or(30),
        0,
        3600,
    )?;
    let knowledge_fs_deadline = in_range(
        "knowledge_fs_deadline_ms",
        raw.knowledge_fs_deadline_ms.unwrap_or(150_000),
        1,
        3_600_000,
    )?;
    let lease_ms = lease * 1000;
    if !lease_renewal && lease_ms <= knowledge_fs_deadline {
        return Err(invalid(
            "lease_seconds",
            format!(
                "a lease of {lease} s ({lease_ms} ms) does not exceed knowledge_fs_deadline_ms = {knowledge_fs_deadline} and lease_renewal is off; without renewal a lease must outlive the remote call it covers: turn lease_renewal on, raise lease_seconds or lower the deadline"
            ),
        ));
    }
    let knowledge_fs_max_concurrent_calls = in_range(
        "knowledge_fs_max_concurrent_calls",
        raw.knowledge_fs_max_concurrent_calls.unwrap_or(8) as u64,
        1,
        1024,
    )?;
    let knowledge_fs_url = raw.knowledge_fs_url.filter(|u| !u.is_empty());
    if let Some(url) = &knowledge_fs_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid(
            "knowledge_fs_url",
            format!("{url:?} is not an http(s) URL"),
        ));
    }
    let log_filter = raw.log_filter.unwrap_or_else(|| "info".to_owned());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&log_filter) {
        return Err(invalid("log_filter", format!("{log_filter:?}: {e}")));
    }
    // Values were range-checked above, so the narrowing conversions below are lossless.
    Ok(Config {
        database_url,
        database_max_connections: database_max_connections as u32,
        listen,
        admin_token,
        log_format: raw.log_format.unwrap_or_default(),
        log_filter,
        workers: workers as u32,
        claim_batch: claim_batch as u32,
        group_commit: raw.group_commit.unwrap_or(true),
        idle_poll: Duration::from_millis(idle_poll),
        lease: Duration::from_secs(lease),
        lease_renewal,
        deletion_absence_grace: Duration::from_secs(deletion_absence_grace),
        retry_max_delay: Duration::from_millis(retry_max_delay),
        max_attempts: max_attempts as u32,
        shutdown_grace: Duration::from_secs(shutdown_grace),
        product_enabled: raw.product_enabled.unwrap_or(true),
        knowledge_fs_url,
        knowledge_fs_token: raw.knowledge_fs_token.filter(|t| !t.is_empty()),
        knowledge_fs_deadline: Duration::from_millis(knowledge_fs_deadline),
        knowledge_fs_max_concurrent_calls: knowledge_fs_max_concurrent_calls as usize,
        directory,
    })
}

fn validate_directory(
    raw: &RawConfig,
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
    in_range: &dyn Fn(&'static str, u64, u64, u64) -> Result<u64, ConfigError>,
) -> Result<Option<DirectorySettings>, ConfigError> {
    let Some(url) = raw.directory_url.clone().filter(|u| !u.is_empty()) else {
        let stray = [
            ("directory_instance", raw.directory_instance.is_some()),
            (
                "directory_trusted_keys",
                raw.directory_trusted_keys.is_some(),
            ),
            ("directory_token", raw.directory_token.is_some()),
        ];
        if let Some((setting, _)) = stray.iter().find(|(_, given)| *given) {
            return Err(invalid(
                setting,
                "is set but directory_url is not; set directory_url to enable the directory projection"
                    .to_owned(),
            ));
        }
        return Ok(None);
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(invalid(
            "directory_url",
            format!("{url:?} is not an http(s) URL"),
        ));
    }
    let instance = raw
        .directory_instance
        .clone()
        .map(|i| i.trim().to_owned())
        .filter(|i| !i.is_empty())
        .ok_or(ConfigError::Missing {
            setting: "directory_instance",
            hint: "set directory_instance (TENANTRY_DIRECTORY_INSTANCE) to the instance uuid the provider serves",
        })?;
    let keys_text = raw.directory_trusted_keys.clone().unwrap_or_default();
    let mut trusted_keys = Vec::new();
    for entry in keys_text
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let (id, key) = entry.split_once('=').ok_or_else(|| {
            invalid(
                "directory_trusted_keys",
                format!("entry {entry:?} is not key_id=HEX"),
            )
        })?;
        let key = key.trim();
        if key.len() != 64 || !key.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(invalid(
                "directory_trusted_keys",
                format!("key {id:?} is not 64 hex digits (an Ed25519 public key)"),
            ));
        }
        trusted_keys.push((id.trim().to_owned(), key.to_ascii_lowercase()));
    }
    if trusted_keys.is_empty() {
        return Err(ConfigError::Missing {
            setting: "directory_trusted_keys",
            hint: "set directory_trusted_keys to key_id=HEX[,key_id=HEX]: the provider's Ed25519 public keys",
        });
    }
    let sync_ms = in_range(
        "directory_sync_interval_ms",
        raw.directory_sync_interval_ms.unwrap_or(5000),
        10,
        3_600_000,
    )?;
    let staleness = in_range(
        "directory_max_staleness_seconds",
        raw.directory_max_staleness_seconds.unwrap_or(300),
        1,
        86_400,
    )?;
    if staleness * 1000 <= sync_ms {
        return Err(invalid(
            "directory_max_staleness_seconds",
            format!("{staleness} s must exceed directory_sync_interval_ms = {sync_ms}"),
        ));
    }
    let event_limit = in_range(
        "directory_event_limit",
        u64::from(raw.directory_event_limit.unwrap_or(100)),
        1,
        100,
    )?;
    Ok(Some(DirectorySettings {
        url,
        token: raw.directory_token.clone().filter(|t| !t.is_empty()),
        instance,
        trusted_keys,
        sync_interval: Duration::from_millis(sync_ms),
        max_staleness: Duration::from_secs(staleness),
        event_limit: event_limit as u32,
    }))
}

impl Config {
    /// The defaults, as if no file and no variable were given.
    pub fn defaults() -> Self {
        // The defaults are valid by construction (covered by a unit test).
        merge_env_and_validate(RawConfig::default(), "defaults", |_| None)
            .unwrap_or_else(|e| unreachable!("default configuration is invalid: {e}"))
    }

    /// The KnowledgeFS URL and token, as `serve` requires them.
    ///
    /// # Errors
    /// [`ConfigError::Missing`] naming the missing setting.
    pub fn knowledge_fs(&self) -> Result<(&str, &str), ConfigError> {
        let url = self.knowledge_fs_url.as_deref().ok_or(ConfigError::Missing {
            setting: "knowledge_fs_url",
            hint: "set knowledge_fs_url in the file or TENANTRY_KNOWLEDGE_FS_URL (for a local try, run `tenantry reference-remote` and use the URL it prints)",
        })?;
        let token = self
            .knowledge_fs_token
            .as_deref()
            .ok_or(ConfigError::Missing {
                setting: "knowledge_fs_token",
                hint: "set knowledge_fs_token in the file or TENANTRY_KNOWLEDGE_FS_TOKEN",
            })?;
        Ok((url, token))
    }
}

/// `url` with any password replaced by `***`, for logs and messages.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => {
            let user_info = &authority[..at];
            let user = user_info.split(':').next().unwrap_or("");
            if user_info.contains(':') {
                format!("{}{}:***{}", &url[..scheme_end], user, &rest[at..])
            } else {
                url.to_owned()
            }
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn defaults_are_valid_and_documented() {
        let config = Config::defaults();
        assert_eq!(config.database_url, DEFAULT_DATABASE_URL);
        assert_eq!(config.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(config.workers, 4);
        assert_eq!(config.admin_token, None);
        assert_eq!(config.log_format, LogFormat::Human);
        assert_eq!(config.lease, Duration::from_secs(30));
        assert!(config.lease_renewal);
        assert!(config.group_commit);
        assert_eq!(config.claim_batch, 16);
        assert_eq!(config.deletion_absence_grace, Duration::from_secs(600));
        assert_eq!(config.max_attempts, 50);
    }

    #[test]
    fn environment_wins_over_the_file() {
        let raw =
            RawConfig::from_toml("workers = 2\nlisten = \"127.0.0.1:9000\"\n", "t.toml").unwrap();
        let config = merge_env_and_validate(
            raw,
            "t.toml",
            env_of(&[
                ("TENANTRY_WORKERS", "7"),
                ("TENANTRY_DATABASE_MAX_CONNECTIONS", "11"),
                ("TENANTRY_LOG_FORMAT", "json"),
            ]),
        )
        .unwrap();
        assert_eq!(config.workers, 7);
        assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.log_format, LogFormat::Json);
    }

    #[test]
    fn errors_name_the_setting_and_its_source() {
        let raw = RawConfig::from_toml("workers = 0\n", "t.toml").unwrap();
        let err = merge_env_and_validate(raw, "t.toml", |_| None).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { setting: "workers", origin, .. } if origin == "t.toml"),
            "{err}"
        );
        let err = merge_env_and_validate(
            RawConfig::default(),
            "defaults",
            env_of(&[("TENANTRY_WORKERS", "many")]),
        )
        .unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { setting: "workers", origin, .. } if origin == "TENANTRY_WORKERS"),
            "{err}"
        );
        assert!(err.to_string().contains("TENANTRY_WORKERS"), "{err}");
    }

    #[test]
    fn unknown_file_keys_are_refused() {
        let err = RawConfig::from_toml("wrokers = 3\n", "t.toml").unwrap_err();
        assert!(err.to_string().contains("wrokers"), "{err}");
    }

    #[test]
    fn non_loopback_listen_requires_a_token() {
        let env = env_of(&[("TENANTRY_LISTEN", "0.0.0.0:8080")]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    setting: "listen",
                    ..
                }
            ),
            "{err}"
        );
        let env = env_of(&[
            ("TENANTRY_LISTEN", "0.0.0.0:8080"),
            ("TENANTRY_ADMIN_TOKEN", "0123456789abcdef0123"),
        ]);
        let config = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap();
        assert!(config.admin_token.is_some());
    }

    #[test]
    fn short_admin_token_is_refused() {
        let env = env_of(&[("TENANTRY_ADMIN_TOKEN", "short")]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                setting: "admin_token",
                ..
            }
        ));
    }

    #[test]
    fn lease_shorter_than_the_remote_deadline_needs_renewal() {
        let env = env_of(&[
            ("TENANTRY_LEASE_SECONDS", "10"),
            ("TENANTRY_KNOWLEDGE_FS_DEADLINE_MS", "150000"),
        ]);
        let config = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap();
        assert!(config.lease_renewal, "renewal is on by default");
        assert_eq!(config.lease, Duration::from_secs(10));
        let env = env_of(&[
            ("TENANTRY_LEASE_SECONDS", "10"),
            ("TENANTRY_KNOWLEDGE_FS_DEADLINE_MS", "10000"),
            ("TENANTRY_LEASE_RENEWAL", "false"),
        ]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                setting: "lease_seconds",
                ..
            }
        ));
    }

    #[test]
    fn database_url_scheme_is_checked() {
        let env = env_of(&[("TENANTRY_DATABASE_URL", "mysql://x")]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                setting: "database_url",
                ..
            }
        ));
    }

    #[test]
    fn serve_requires_a_knowledge_fs() {
        let err = Config::defaults().knowledge_fs().unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Missing {
                setting: "knowledge_fs_url",
                ..
            }
        ));
    }

    #[test]
    fn directory_settings_are_validated_together() {
        let key = "ab".repeat(32);
        let env = env_of(&[
            ("TENANTRY_DIRECTORY_URL", "http://127.0.0.1:9"),
            ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
        ]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Missing {
                setting: "directory_trusted_keys",
                ..
            }
        ));
        let keys = format!("k1={key}, k2={key}");
        let env = env_of(&[
            ("TENANTRY_DIRECTORY_URL", "http://127.0.0.1:9"),
            ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
            ("TENANTRY_DIRECTORY_TRUSTED_KEYS", keys.as_str()),
        ]);
        let config = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap();
        let directory = config.directory.unwrap();
        assert_eq!(directory.trusted_keys.len(), 2);
        assert_eq!(directory.max_staleness, Duration::from_secs(300));
        let env = env_of(&[
            ("TENANTRY_DIRECTORY_URL", "http://127.0.0.1:9"),
            ("TENANTRY_DIRECTORY_INSTANCE", "inst-1"),
            ("TENANTRY_DIRECTORY_TRUSTED_KEYS", "k1=xyz"),
        ]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                setting: "directory_trusted_keys",
                ..
            }
        ));
        let env = env_of(&[("TENANTRY_DIRECTORY_INSTANCE", "inst-1")]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::Invalid {
                setting: "directory_instance",
                ..
            }
        ));
        assert_eq!(Config::defaults().directory, None);
    }

    #[test]
    fn settings_list_is_what_the_environment_overlay_reads() {
        let asked = std::cell::RefCell::new(Vec::new());
        merge_env_and_validate(RawConfig::default(), "defaults", |name| {
            asked.borrow_mut().push(name.to_owned());
            None
        })
        .unwrap();
        let expected: Vec<String> = SETTINGS
            .iter()
            .map(|s| format!("TENANTRY_{}", s.to_uppercase()))
            .collect();
        assert_eq!(asked.into_inner(), expected);
    }

    #[test]
    fn unknown_tenantry_variables_are_named_with_a_suggestion() {
        let names = [
            "TENANTRY_WROKERS",
            "TENANTRY_WORKERS",
            "TENANTRY_CONFIG",
            "TENANTRY_TEST_PG_URL",
            "TENANTRY_SOMETHING_ELSE",
            "PATH",
            "TENANTRY_KNOWLEDGEFS_URL",
        ]
        .map(str::to_owned);
        let unknown = unknown_variables(names);
        assert_eq!(
            unknown,
            vec![
                UnknownVariable {
                    name: "TENANTRY_KNOWLEDGEFS_URL".into(),
                    suggestion: Some("TENANTRY_KNOWLEDGE_FS_URL".into()),
                },
                UnknownVariable {
                    name: "TENANTRY_SOMETHING_ELSE".into(),
                    suggestion: None,
                },
                UnknownVariable {
                    name: "TENANTRY_WROKERS".into(),
                    suggestion: Some("TENANTRY_WORKERS".into()),
                },
            ]
        );
        let text = unknown[2].to_string();
        assert!(
            text.contains("TENANTRY_WROKERS") && text.contains("did you mean TENANTRY_WORKERS"),
            "{text}"
        );
    }

    #[test]
    fn pool_smaller_than_workers_plus_four_is_refused() {
        let env = env_of(&[
            ("TENANTRY_WORKERS", "8"),
            ("TENANTRY_DATABASE_MAX_CONNECTIONS", "11"),
        ]);
        let err = merge_env_and_validate(RawConfig::default(), "defaults", env).unwrap_err();
        assert!(
            matches!(&err, ConfigError::Invalid { setting: "database_max_connections", origin, .. } if origin == "TENANTRY_DATABASE_MAX_CONNECTIONS"),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("at least 12"), "{text}");
        let env = env_of(&[
            ("TENANTRY_WORKERS", "8"),
            ("TENANTRY_DATABASE_MAX_CONNECTIONS", "12"),
        ]);
        assert!(merge_env_and_validate(RawConfig::default(), "defaults", env).is_ok());
    }

    #[test]
    fn redact_url_hides_passwords_only() {
        let cases = [
            ("postgres://u:secret@h:5/db", "postgres://u:***@h:5/db"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("sqlite://x.db?mode=rwc", "sqlite://x.db?mode=rwc"),
        ];
        for (input, expected) in cases {
            assert_eq!(redact_url(input), expected);
        }
    }
}
