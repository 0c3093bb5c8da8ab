//! Validation of the merged settings into a [`Config`], one setting at a time, each refusal
//! naming the setting and its source.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tenantry_remote_http::tls::{FileRole, RemoteTls, TlsConfigError};

use tenantry_directory::ProjectionLimits;

use super::secrets::{
    given, read_secret_file, secret, token_is_strong, validate_operators, with_password,
};
use super::{
    AdminTls, CONNECTIONS_BESIDES_WORKERS, Config, ConfigError, DEFAULT_DATABASE_URL,
    DEFAULT_LISTEN, DirectoryCapacity, DirectorySettings, MAX_DIRECTORY_MEMBERSHIPS,
    MAX_DIRECTORY_RESPONSE_BYTES, MAX_DIRECTORY_WORKSPACES, MIN_DIRECTORY_RESPONSE_BYTES,
    RawConfig, RetentionSettings, is_plain_http_off_loopback, redact_url,
};

/// The setting names of one remote's TLS files: CA file, client certificate, client key.
type TlsSettingNames = (&'static str, &'static str, &'static str);

const KNOWLEDGE_FS_TLS: TlsSettingNames = (
    "knowledge_fs_ca_file",
    "knowledge_fs_client_cert_file",
    "knowledge_fs_client_key_file",
);

const DIRECTORY_TLS: TlsSettingNames = (
    "directory_ca_file",
    "directory_client_cert_file",
    "directory_client_key_file",
);

/// The remote TLS settings of `names`, each file read and checked; a refusal names the
/// setting whose file cannot be used.
fn remote_tls(
    names: TlsSettingNames,
    files: [&Option<String>; 3],
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<RemoteTls, ConfigError> {
    let path = |value: &Option<String>| {
        value
            .as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let tls = RemoteTls {
        ca_file: path(files[0]),
        client_cert_file: path(files[1]),
        client_key_file: path(files[2]),
    };
    if tls == RemoteTls::default() {
        return Ok(tls);
    }
    tenantry_remote_http::tls::check(&tls).map_err(|error| {
        let setting = match &error {
            TlsConfigError::CertificateWithoutKey { .. } => names.1,
            TlsConfigError::KeyWithoutCertificate { .. } => names.2,
            TlsConfigError::Unreadable { role, .. }
            | TlsConfigError::NotPem { role, .. }
            | TlsConfigError::Refused { role, .. } => match role {
                FileRole::CaBundle => names.0,
                FileRole::ClientKey => names.2,
                _ => names.1,
            },
            _ => names.0,
        };
        invalid(setting, error.to_string())
    })?;
    Ok(tls)
}

/// Refuses a plain `http://` remote on a non-loopback host unless `allow_plain_http`.
/// Checks `otlp_endpoint`: empty means unset; otherwise an `http://` or `https://` URL with a
/// host (the base of an OTLP/HTTP receiver; `/v1/traces` is appended). Returned without a
/// trailing slash.
fn otlp_endpoint(
    raw: Option<&str>,
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Option<String>, ConfigError> {
    let Some(value) = raw.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let host = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
        .map(|rest| rest.split(['/', '?', '#']).next().unwrap_or(""));
    if host.is_none_or(|host| host.is_empty() || host.contains(char::is_whitespace)) {
        return Err(invalid(
            "otlp_endpoint",
            format!(
                "{value:?} must be an http:// or https:// URL of an OTLP/HTTP receiver, e.g. http://localhost:4318"
            ),
        ));
    }
    Ok(Some(value.trim_end_matches('/').to_owned()))
}

fn refuse_plain_http(
    setting: &'static str,
    url: &str,
    allow_plain_http: bool,
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<(), ConfigError> {
    if is_plain_http_off_loopback(url) && !allow_plain_http {
        return Err(invalid(
            setting,
            format!(
                "{url:?} is plain http:// to a host that is not loopback: the bearer token and tenant data would cross the network in clear text; use https:// (with the remote's CA file if a private CA issued its certificate), or set allow_plain_http = true (TENANTRY_ALLOW_PLAIN_HTTP) on a network you trust"
            ),
        ));
    }
    Ok(())
}

/// The admin listener's TLS: both files or neither, each readable PEM that rustls accepts.
fn admin_tls(
    raw: &RawConfig,
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Option<AdminTls>, ConfigError> {
    let path = |value: &Option<String>| {
        value
            .as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let tls = match (path(&raw.tls_cert_file), path(&raw.tls_key_file)) {
        (None, None) => return Ok(None),
        (Some(cert), None) => {
            return Err(invalid(
                "tls_cert_file",
                format!(
                    "{} is set without tls_key_file; set both (TLS on the admin listener) or neither",
                    cert.display()
                ),
            ));
        }
        (None, Some(key)) => {
            return Err(invalid(
                "tls_key_file",
                format!(
                    "{} is set without tls_cert_file; set both (TLS on the admin listener) or neither",
                    key.display()
                ),
            ));
        }
        (Some(cert_file), Some(key_file)) => AdminTls {
            cert_file,
            key_file,
        },
    };
    tenantry_operator::listener::tls::server_config(&tls)
        .map_err(|e| invalid(e.setting(), e.to_string()))?;
    Ok(Some(tls))
}

pub(super) fn validate(
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

    let allow_plain_http = raw.allow_plain_http.unwrap_or(false);
    let directory = validate_directory(&raw, &invalid, &in_range)?;
    let directory_capacity = directory_capacity(&raw, &in_range)?;
    if let Some(directory) = &directory {
        refuse_plain_http("directory_url", &directory.url, allow_plain_http, &invalid)?;
    }
    let knowledge_fs_tls = remote_tls(
        KNOWLEDGE_FS_TLS,
        [
            &raw.knowledge_fs_ca_file,
            &raw.knowledge_fs_client_cert_file,
            &raw.knowledge_fs_client_key_file,
        ],
        &invalid,
    )?;
    let admin_tls = admin_tls(&raw, &invalid)?;
    let retention = validate_retention(&raw, &in_range)?;
    let database_url = match secret(
        &raw.database_url,
        &raw.database_url_file,
        "database_url",
        "database_url_file",
        &invalid,
    )? {
        Some(url) => url.expose().to_owned(),
        None => DEFAULT_DATABASE_URL.to_owned(),
    };
    let database_url = match given(&raw.database_password_file) {
        Some(path) => {
            let password = read_secret_file("database_password_file", path, &invalid)?;
            with_password(&database_url, password.expose())
                .map_err(|reason| invalid("database_password_file", reason))?
        }
        None => database_url,
    };
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
    // A multi-host PostgreSQL URL's host list and target_session_attrs are read now, so a bad
    // one is a configuration error naming the setting (docs/operations.md, "Highly available
    // PostgreSQL"), not a failure to open the database later.
    if database_url.starts_with("postgres")
        && let Err(error) = tenantry_store_seaorm::pg_hosts::Targets::parse(&database_url)
    {
        return Err(invalid("database_url", error.to_string()));
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
    let admin_token = secret(
        &raw.admin_token,
        &raw.admin_token_file,
        "admin_token",
        "admin_token_file",
        &invalid,
    )?;
    if let Some(token) = &admin_token
        && !token_is_strong(token.expose())
    {
        let setting = if given(&raw.admin_token_file).is_some() {
            "admin_token_file"
        } else {
            "admin_token"
        };
        return Err(invalid(
            setting,
            "must be at least 16 characters without whitespace; generate one with `openssl rand -hex 32`"
                .to_owned(),
        ));
    }
    let operators = validate_operators(
        raw.operators.as_deref().unwrap_or_default(),
        admin_token.as_ref(),
        &invalid,
    )?;
    if admin_token.is_none() && operators.is_empty() && !listen.ip().is_loopback() {
        return Err(invalid(
            "listen",
            format!(
                "{listen} is not a loopback address and admin_token is not set; set admin_token (TENANTRY_ADMIN_TOKEN, or admin_token_file) or [[operators]], or listen on 127.0.0.1"
            ),
        ));
    }
    let ui_session_key = secret(
        &raw.ui_session_key,
        &raw.ui_session_key_file,
        "ui_session_key",
        "ui_session_key_file",
        &invalid,
    )?;
    if let Some(key) = &ui_session_key
        && key.expose().len() < tenantry_operator::ui::session::MIN_KEY_BYTES
    {
        let setting = if given(&raw.ui_session_key_file).is_some() {
            "ui_session_key_file"
        } else {
            "ui_session_key"
        };
        return Err(invalid(
            setting,
            format!(
                "must be at least {} bytes; generate one with `openssl rand -hex 32`",
                tenantry_operator::ui::session::MIN_KEY_BYTES
            ),
        ));
    }
    let knowledge_fs_token = secret(
        &raw.knowledge_fs_token,
        &raw.knowledge_fs_token_file,
        "knowledge_fs_token",
        "knowledge_fs_token_file",
        &invalid,
    )?;
    let workers = in_range("workers", u64::from(raw.workers.unwrap_or(4)), 1, 256)?;
    let needed = workers + u64::from(CONNECTIONS_BESIDES_WORKERS);
    if database_max_connections < needed {
        return Err(invalid(
            "database_max_connections",
            format!(
                "{database_max_connections} connections are too few for {workers} workers: the worker pool's claims, settles and saga reads run side by side and need about one connection per worker, and the admin API, /readyz, the metrics and the directory projector need {CONNECTIONS_BESIDES_WORKERS} more, or they wait on each other until the pool times out; set database_max_connections to at least {needed} (workers + {CONNECTIONS_BESIDES_WORKERS}) or lower workers"
            ),
        ));
    }
    // The engine's defaults are the service's (one source of truth; `cargo xtask bench`
    // measures with the same values).
    let (worker_defaults, dispatcher_defaults) = (
        tenantry_engine::lifecycle::WorkerConfig::default(),
        tenantry_engine::lifecycle::DispatcherConfig::default(),
    );
    let claim_batch = in_range(
        "claim_batch",
        u64::from(raw.claim_batch.unwrap_or(worker_defaults.claim_batch)),
        1,
        64,
    )?;
    let idle_poll = in_range(
        "idle_poll_ms",
        raw.idle_poll_ms
            .unwrap_or(duration_ms(worker_defaults.idle_poll)),
        10,
        60_000,
    )?;
    let lease = in_range(
        "lease_seconds",
        raw.lease_seconds
            .unwrap_or(dispatcher_defaults.lease_duration.as_secs()),
        3,
        86_400,
    )?;
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
    let fence_dispatch_deadline = in_range(
        "fence_dispatch_deadline_ms",
        raw.fence_dispatch_deadline_ms.unwrap_or(150_000),
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
    let smallest_grace =
        smallest_deletion_absence_grace(Duration::from_millis(knowledge_fs_deadline));
    if deletion_absence_grace < smallest_grace.as_secs() {
        return Err(invalid(
            "deletion_absence_grace_seconds",
            format!(
                "{deletion_absence_grace} s does not cover knowledge_fs_deadline_ms = {knowledge_fs_deadline} plus the {} s margin: a provision request sent just before its attempt window closed can be applied by KnowledgeFS up to a whole call deadline later, and a deletion must not complete on an absence seen before it lands; set deletion_absence_grace_seconds to at least {} or lower knowledge_fs_deadline_ms",
                DELETION_ABSENCE_GRACE_MARGIN.as_secs(),
                smallest_grace.as_secs()
            ),
        ));
    }
    let knowledge_fs_max_concurrent_calls = in_range(
        "knowledge_fs_max_concurrent_calls",
        raw.knowledge_fs_max_concurrent_calls.unwrap_or(8) as u64,
        1,
        1024,
    )?;
    let knowledge_fs_max_concurrent_calls_per_tenant = raw
        .knowledge_fs_max_concurrent_calls_per_tenant
        .map(|calls| {
            in_range(
                "knowledge_fs_max_concurrent_calls_per_tenant",
                calls as u64,
                1,
                1024,
            )
        })
        .transpose()?;
    if !lease_renewal && knowledge_fs_max_concurrent_calls_per_tenant.is_some() {
        return Err(invalid(
            "knowledge_fs_max_concurrent_calls_per_tenant",
            "a per-tenant bound makes a tenant's dispatches wait for its previous calls, and lease_renewal is off: a lease that is not renewed covers one remote call, not a wait before it (the commands would lapse and be taken over): turn lease_renewal on or unset knowledge_fs_max_concurrent_calls_per_tenant".to_owned(),
        ));
    }
    let knowledge_fs_url = raw.knowledge_fs_url.filter(|u| !u.is_empty());
    if let Some(url) = &knowledge_fs_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        return Err(invalid(
            "knowledge_fs_url",
            format!("{url:?} is not an http(s) URL"),
        ));
    }
    let admin_header_read_timeout = in_range(
        "admin_header_read_timeout_seconds",
        raw.admin_header_read_timeout_seconds.unwrap_or(10),
        1,
        3600,
    )?;
    let admin_request_body_timeout = in_range(
        "admin_request_body_timeout_seconds",
        raw.admin_request_body_timeout_seconds.unwrap_or(30),
        1,
        3600,
    )?;
    if let Some(url) = &knowledge_fs_url {
        refuse_plain_http("knowledge_fs_url", url, allow_plain_http, &invalid)?;
    }
    let otlp_endpoint = otlp_endpoint(raw.otlp_endpoint.as_deref(), &invalid)?;
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
        operators,
        ui_session_key,
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
        knowledge_fs_token,
        knowledge_fs_deadline: Duration::from_millis(knowledge_fs_deadline),
        knowledge_fs_max_concurrent_calls: knowledge_fs_max_concurrent_calls as usize,
        knowledge_fs_max_concurrent_calls_per_tenant: knowledge_fs_max_concurrent_calls_per_tenant
            .map(|calls| calls as usize),
        fence_dispatch_deadline: Duration::from_millis(fence_dispatch_deadline),
        knowledge_fs_tls,
        allow_plain_http,
        admin_tls,
        directory,
        directory_capacity,
        retention,
        ui: raw.ui.unwrap_or(true),
        ui_read_only: raw.ui_read_only.unwrap_or(false),
        otlp_endpoint,
        admin_header_read_timeout: Duration::from_secs(admin_header_read_timeout),
        admin_request_body_timeout: Duration::from_secs(admin_request_body_timeout),
    })
}

fn validate_retention(
    raw: &RawConfig,
    in_range: &dyn Fn(&'static str, u64, u64, u64) -> Result<u64, ConfigError>,
) -> Result<RetentionSettings, ConfigError> {
    use tenantry_ports::retention::{RetentionKind, RetentionPolicy};
    let r = &raw.retention;
    let defaults = RetentionPolicy::default();
    let days = |d: Duration| d.as_secs() / 86_400;
    let window = |setting: &'static str, value: Option<u64>, default: Duration, max: u64| {
        in_range(setting, value.unwrap_or(days(default)), 1, max)
            .map(|d| Duration::from_secs(d * 86_400))
    };
    let interval = in_range(
        "retention_interval_seconds",
        r.interval_seconds.unwrap_or(300),
        10,
        86_400,
    )?;
    let policy = defaults
        .with_window(
            RetentionKind::FinishedCommands,
            window(
                "retention_finished_commands_days",
                r.finished_commands_days,
                defaults.finished_commands,
                3650,
            )?,
        )
        .with_window(
            RetentionKind::OperatorActions,
            window(
                "retention_operator_actions_days",
                r.operator_actions_days,
                defaults.operator_actions,
                36_500,
            )?,
        )
        .with_window(
            RetentionKind::InboxReceipts,
            window(
                "retention_inbox_receipts_days",
                r.inbox_receipts_days,
                defaults.inbox_receipts,
                3650,
            )?,
        )
        .with_window(
            RetentionKind::ClearedFences,
            window(
                "retention_cleared_fences_days",
                r.cleared_fences_days,
                defaults.cleared_fences,
                3650,
            )?,
        )
        .with_batch_size(in_range(
            "retention_batch_size",
            u64::from(r.batch_size.unwrap_or(defaults.batch_size)),
            1,
            10_000,
        )? as u32);
    Ok(RetentionSettings {
        enabled: r.enabled.unwrap_or(true),
        interval: Duration::from_secs(interval),
        policy,
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
            ("directory_token_file", raw.directory_token_file.is_some()),
            ("directory_ca_file", raw.directory_ca_file.is_some()),
            (
                "directory_client_cert_file",
                raw.directory_client_cert_file.is_some(),
            ),
            (
                "directory_client_key_file",
                raw.directory_client_key_file.is_some(),
            ),
            (
                "directory_max_snapshot_workspaces",
                raw.directory_max_snapshot_workspaces.is_some(),
            ),
            (
                "directory_max_snapshot_memberships",
                raw.directory_max_snapshot_memberships.is_some(),
            ),
            (
                "directory_max_active_workspaces",
                raw.directory_max_active_workspaces.is_some(),
            ),
            (
                "directory_max_response_bytes",
                raw.directory_max_response_bytes.is_some(),
            ),
            (
                "directory_snapshot_page_size",
                raw.directory_snapshot_page_size.is_some(),
            ),
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
    let tls = remote_tls(
        DIRECTORY_TLS,
        [
            &raw.directory_ca_file,
            &raw.directory_client_cert_file,
            &raw.directory_client_key_file,
        ],
        invalid,
    )?;
    let token = secret(
        &raw.directory_token,
        &raw.directory_token_file,
        "directory_token",
        "directory_token_file",
        invalid,
    )?;
    Ok(Some(DirectorySettings {
        url,
        token,
        instance,
        trusted_keys,
        sync_interval: Duration::from_millis(sync_ms),
        max_staleness: Duration::from_secs(staleness),
        event_limit: event_limit as u32,
        tls,
    }))
}

/// The capacity settings: each limit at least 1, workspaces at most
/// [`MAX_DIRECTORY_WORKSPACES`] and memberships at most [`MAX_DIRECTORY_MEMBERSHIPS`], the body
/// cap within [`MIN_DIRECTORY_RESPONSE_BYTES`]..=[`MAX_DIRECTORY_RESPONSE_BYTES`]; defaults
/// [`DirectoryCapacity::default`].
fn directory_capacity(
    raw: &RawConfig,
    in_range: &dyn Fn(&'static str, u64, u64, u64) -> Result<u64, ConfigError>,
) -> Result<DirectoryCapacity, ConfigError> {
    let default = DirectoryCapacity::default();
    let defaults = default.limits;
    let limit = |setting, value: Option<u64>, default: usize, max| {
        let value = in_range(setting, value.unwrap_or(default as u64), 1, max)?;
        // The bounds fit any platform's `usize` (at most 10,000,000).
        Ok::<usize, ConfigError>(usize::try_from(value).unwrap_or(usize::MAX))
    };
    let limits = ProjectionLimits {
        max_snapshot_workspaces: limit(
            "directory_max_snapshot_workspaces",
            raw.directory_max_snapshot_workspaces,
            defaults.max_snapshot_workspaces,
            MAX_DIRECTORY_WORKSPACES,
        )?,
        max_snapshot_memberships: limit(
            "directory_max_snapshot_memberships",
            raw.directory_max_snapshot_memberships,
            defaults.max_snapshot_memberships,
            MAX_DIRECTORY_MEMBERSHIPS,
        )?,
        max_active_workspaces: limit(
            "directory_max_active_workspaces",
            raw.directory_max_active_workspaces,
            defaults.max_active_workspaces,
            MAX_DIRECTORY_WORKSPACES,
        )?,
    };
    let max_response_bytes = in_range(
        "directory_max_response_bytes",
        raw.directory_max_response_bytes
            .unwrap_or(default.max_response_bytes),
        MIN_DIRECTORY_RESPONSE_BYTES,
        MAX_DIRECTORY_RESPONSE_BYTES,
    )?;
    let snapshot_page_size = in_range(
        "directory_snapshot_page_size",
        raw.directory_snapshot_page_size
            .unwrap_or(u64::from(default.snapshot_page_size)),
        0,
        MAX_DIRECTORY_MEMBERSHIPS,
    )?;
    Ok(DirectoryCapacity {
        limits,
        max_response_bytes,
        // In range, so below u32::MAX.
        snapshot_page_size: u32::try_from(snapshot_page_size).unwrap_or(u32::MAX),
    })
}

/// What `deletion_absence_grace_seconds` must cover beyond `knowledge_fs_deadline_ms`: 1 s.
///
/// An attempt window closes on the database's clock, while the call it covers runs on the
/// worker's clock and starts a little after its last lease check; the margin absorbs that gap
/// and the whole-second rounding of the setting (docs/protocol.md, "A deletion never orphans a
/// remote space").
pub const DELETION_ABSENCE_GRACE_MARGIN: Duration = Duration::from_secs(1);

/// The smallest `deletion_absence_grace_seconds` accepted with a call deadline of `deadline`:
/// the deadline rounded up to whole seconds, plus [`DELETION_ABSENCE_GRACE_MARGIN`].
pub fn smallest_deletion_absence_grace(deadline: Duration) -> Duration {
    let whole_seconds = deadline.as_secs() + u64::from(deadline.subsec_nanos() > 0);
    Duration::from_secs(whole_seconds) + DELETION_ABSENCE_GRACE_MARGIN
}

/// Whole milliseconds of an engine default, saturating.
fn duration_ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
