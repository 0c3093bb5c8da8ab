//! The validated configuration ([`Config`], [`DirectorySettings`]), the log format and URL
//! redaction for messages.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;
use tenantry_operator::identity::{ADMIN_OPERATOR, Operator, Operators, Role, Secret};
use tenantry_remote_http::RemoteTls;

use super::{ConfigError, RawConfig, merge_env_and_validate};
use tenantry_operator::listener::tls::AdminTls;

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
    /// `database_url`: `sqlite://PATH?mode=rwc` or `postgres://USER@HOST/DB` (or read from
    /// `database_url_file`; with `database_password_file`, that file's password is put into
    /// the URL's user info). `Debug` and every log redact its password ([`redact_url`]).
    pub database_url: String,
    /// `database_max_connections`: pool size (1..=512, default 8); at least `workers + 4`.
    pub database_max_connections: u32,
    /// `listen`: address of the admin API (default `127.0.0.1:8080`).
    pub listen: SocketAddr,
    /// `admin_token` (or `admin_token_file`): the token of the operator `admin` (role
    /// `operate`); a token or an `[[operators]]` entry is required unless `listen` is
    /// loopback. See [`Config::operators`].
    pub admin_token: Option<Secret>,
    /// `[[operators]]` / `TENANTRY_OPERATORS`: the named operators besides `admin`, each with a
    /// role and a token read from its file (docs/operations.md, "Operators and roles").
    pub operators: Vec<Operator>,
    /// `ui_session_key` (or `ui_session_key_file`): the key console session cookies are
    /// signed with (HMAC-SHA256, at least 32 bytes); every replica behind one load balancer
    /// needs the same. Without it each process signs with a random key of its own.
    pub ui_session_key: Option<Secret>,
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
    /// `knowledge_fs_token` (or `knowledge_fs_token_file`): bearer token sent to KnowledgeFS.
    pub knowledge_fs_token: Option<Secret>,
    /// `knowledge_fs_deadline_ms`: total deadline of one KnowledgeFS call (default 150000).
    pub knowledge_fs_deadline: Duration,
    /// `knowledge_fs_max_concurrent_calls`: calls in flight at once (1..=1024, default 8).
    pub knowledge_fs_max_concurrent_calls: usize,
    /// `knowledge_fs_max_concurrent_calls_per_tenant`: of the worker pool's remote calls at
    /// once, at most this many for one tenant (1..=1024; unset, the default: no bound). A
    /// tenant's dispatch beyond it waits, lease renewed, without taking a slot another tenant
    /// could use. At or above the pool's slots it bounds nothing.
    pub knowledge_fs_max_concurrent_calls_per_tenant: Option<usize>,
    /// `fence_dispatch_deadline_ms`: the fence runtime's own bound on one dispatched mutation
    /// (1..=3600000 ms, default 150000). A dispatch that has not settled by then has an
    /// unknown outcome and fences its scope; its intent expires this plus 30 s after it was
    /// written (database clock), and cannot be cleared before.
    pub fence_dispatch_deadline: Duration,
    /// TLS of KnowledgeFS calls: `knowledge_fs_ca_file` (a PEM CA bundle trusted besides the
    /// platform's roots), `knowledge_fs_client_cert_file` and `knowledge_fs_client_key_file`
    /// (PEM, mutual TLS; both or neither). Each file was read and checked at validation.
    pub knowledge_fs_tls: RemoteTls,
    /// `allow_plain_http`: accept an `http://` remote on a non-loopback host (default false:
    /// such a URL is refused, since the bearer tokens and tenant data would cross the network
    /// in clear text). When it is used, every start logs a warning ([`Config::start_warnings`]).
    pub allow_plain_http: bool,
    /// The admin listener's TLS (`tls_cert_file`, `tls_key_file`, both or neither), or `None`
    /// for plain HTTP.
    pub admin_tls: Option<AdminTls>,
    /// The directory projection, when `directory_url` is set.
    pub directory: Option<DirectorySettings>,
    /// The directory projection's capacity limits and the provider answer's size cap (their
    /// defaults when no directory is configured).
    pub directory_capacity: DirectoryCapacity,
    /// The `[retention]` table: how long history is kept and how the pruner of `serve` runs.
    pub retention: RetentionSettings,
    /// `ui`: serve the operator console at `/ui` on the admin listener (default true).
    pub ui: bool,
    /// `ui_read_only`: the console shows but never acts (no retry, abandon or fence clear;
    /// such requests are refused with 403). Default false.
    pub ui_read_only: bool,
    /// `admin_header_read_timeout_seconds`: a connection to the admin listener must deliver a
    /// complete request head within this time of opening, or of its previous answer (so it is
    /// also the keep-alive idle timeout); else it is closed (1..=3600, default 10).
    pub admin_header_read_timeout: Duration,
    /// `admin_request_body_timeout_seconds`: a request body must arrive entirely within this
    /// time of its head; else reading it fails (the admin API answers 400 `BODY_UNREADABLE`)
    /// and the connection is closed (1..=3600, default 30).
    pub admin_request_body_timeout: Duration,
    /// `otlp_endpoint`: the base URL of an OpenTelemetry collector's OTLP/HTTP receiver, e.g.
    /// `http://localhost:4318` (spans are posted to `<otlp_endpoint>/v1/traces` as protobuf).
    /// Unset (the default) exports no traces unless `OTEL_EXPORTER_OTLP_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (docs/operations.md, "Tracing").
    pub otlp_endpoint: Option<String>,
}

/// The validated `[retention]` table (docs/operations.md, "Retention").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionSettings {
    /// Whether `serve` runs the pruner (`retention.enabled`, default true). `tenantry prune`
    /// works either way.
    pub enabled: bool,
    /// Time between two pruner runs (`retention.interval_seconds`, default 300, 10..=86400).
    pub interval: Duration,
    /// Windows and batch size (`retention.finished_commands_days` default 30 (1..=3650),
    /// `operator_actions_days` default 180 (1..=36500), `inbox_receipts_days` default 7
    /// (1..=3650), `batch_size` default 500 (1..=10000), `cleared_fences_days` default 7
    /// (1..=3650)).
    pub policy: tenantry_ports::retention::RetentionPolicy,
}

/// The directory projection's capacity settings (docs/operations.md, "Directory capacity").
/// Setting one of them without `directory_url` is refused like the other `directory_*`
/// settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectoryCapacity {
    /// The projection's capacity limits: `directory_max_snapshot_workspaces` (default
    /// 10,000, 1..=[`MAX_DIRECTORY_WORKSPACES`](super::MAX_DIRECTORY_WORKSPACES)),
    /// `directory_max_snapshot_memberships` (default 100,000,
    /// 1..=[`MAX_DIRECTORY_MEMBERSHIPS`](super::MAX_DIRECTORY_MEMBERSHIPS)) and
    /// `directory_max_active_workspaces` (default 10,000,
    /// 1..=[`MAX_DIRECTORY_WORKSPACES`](super::MAX_DIRECTORY_WORKSPACES)). A directory over
    /// one is refused, naming the setting (docs/operations.md, "Directory capacity").
    pub limits: tenantry_directory::ProjectionLimits,
    /// `directory_max_response_bytes`: the largest provider answer read, bytes (default
    /// 128 MiB, 1 MiB..=[`MAX_DIRECTORY_RESPONSE_BYTES`](super::MAX_DIRECTORY_RESPONSE_BYTES));
    /// a snapshot a provider sends in one body is held whole, about 3 times the body in memory
    /// while it is applied; a paged snapshot is spooled to a temporary file and held one page
    /// at a time (measured through the HTTP path; docs/operations.md, "Directory capacity").
    pub max_response_bytes: u64,
    /// `directory_snapshot_page_size`: memberships per page asked of the provider for a
    /// snapshot (default 10,000; 0 asks for the whole snapshot in one answer, for a provider
    /// that refuses the parameter; at most
    /// [`MAX_DIRECTORY_MEMBERSHIPS`](super::MAX_DIRECTORY_MEMBERSHIPS)). A provider that does
    /// not page answers the whole snapshot either way (docs/protocol.md, "Paged snapshots").
    pub snapshot_page_size: u32,
}

impl Default for DirectoryCapacity {
    /// The projection's [`ProjectionLimits::default`](tenantry_directory::ProjectionLimits),
    /// the client's 128 MiB and pages of 10,000 memberships.
    fn default() -> Self {
        Self {
            limits: tenantry_directory::ProjectionLimits::default(),
            max_response_bytes: tenantry_remote_http::directory::DEFAULT_MAX_RESPONSE_BYTES,
            snapshot_page_size: tenantry_remote_http::directory::DEFAULT_SNAPSHOT_PAGE_SIZE,
        }
    }
}

/// Settings of the directory projection (the `directory_*` settings but the capacity ones,
/// [`DirectoryCapacity`]).
#[derive(Clone, PartialEq, Eq)]
pub struct DirectorySettings {
    /// `directory_url`: base URL of the Directory API v1 provider.
    pub url: String,
    /// `directory_token` (or `directory_token_file`): bearer token sent to the provider, if it
    /// requires one.
    pub token: Option<Secret>,
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
    /// `directory_ca_file`, `directory_client_cert_file`, `directory_client_key_file`: TLS of
    /// the provider's calls, as [`Config::knowledge_fs_tls`].
    pub tls: RemoteTls,
}

impl std::fmt::Debug for DirectorySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectorySettings")
            .field("url", &self.url)
            .field("token", &self.token)
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
            .field("tls", &self.tls)
            .finish()
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &redact_url(&self.database_url))
            .field("database_max_connections", &self.database_max_connections)
            .field("listen", &self.listen)
            .field("admin_token", &self.admin_token)
            .field("operators", &self.operators)
            .field("ui_session_key", &self.ui_session_key)
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
            .field("knowledge_fs_token", &self.knowledge_fs_token)
            .field("knowledge_fs_deadline", &self.knowledge_fs_deadline)
            .field(
                "knowledge_fs_max_concurrent_calls",
                &self.knowledge_fs_max_concurrent_calls,
            )
            .field(
                "knowledge_fs_max_concurrent_calls_per_tenant",
                &self.knowledge_fs_max_concurrent_calls_per_tenant,
            )
            .field("fence_dispatch_deadline", &self.fence_dispatch_deadline)
            .field("knowledge_fs_tls", &self.knowledge_fs_tls)
            .field("allow_plain_http", &self.allow_plain_http)
            .field("admin_tls", &self.admin_tls)
            .field("directory", &self.directory)
            .field("retention", &self.retention)
            .field("ui", &self.ui)
            .field("ui_read_only", &self.ui_read_only)
            .field("otlp_endpoint", &self.otlp_endpoint)
            .field("admin_header_read_timeout", &self.admin_header_read_timeout)
            .field(
                "admin_request_body_timeout",
                &self.admin_request_body_timeout,
            )
            .finish()
    }
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
            hint: "set knowledge_fs_url in the file or TENANTRY_KNOWLEDGE_FS_URL (for a local try, run `tenantry-demo reference-remote` and use the URL it prints)",
        })?;
        let token = self
            .knowledge_fs_token
            .as_ref()
            .map(Secret::expose)
            .ok_or(ConfigError::Missing {
                setting: "knowledge_fs_token",
                hint: "set knowledge_fs_token_file (a file holding the token), knowledge_fs_token in the file, or TENANTRY_KNOWLEDGE_FS_TOKEN",
            })?;
        Ok((url, token))
    }
}

impl Config {
    /// Every configured operator: `admin` (role `operate`) when `admin_token` is set, then the
    /// named `[[operators]]`. Empty: the admin API and the console are open (loopback only).
    pub fn all_operators(&self) -> Operators {
        let admin = self.admin_token.as_ref().map(|token| Operator {
            name: ADMIN_OPERATOR.to_owned(),
            role: Role::Operate,
            token: token.clone(),
        });
        Operators::new(admin.into_iter().chain(self.operators.clone()).collect())
    }

    /// Whether any operator token is configured (else the admin API and the console are
    /// open, which `serve` allows on a loopback listener only).
    pub fn has_operators(&self) -> bool {
        self.admin_token.is_some() || !self.operators.is_empty()
    }

    /// The bounds of the admin listener's connections (`admin_header_read_timeout_seconds`,
    /// `admin_request_body_timeout_seconds`).
    pub fn listener_limits(&self) -> tenantry_operator::listener::ListenerLimits {
        tenantry_operator::listener::ListenerLimits {
            header_read_timeout: self.admin_header_read_timeout,
            request_body_timeout: self.admin_request_body_timeout,
        }
    }
}

impl Config {
    /// What `serve` warns about at every start: a plain `http://` remote on a non-loopback
    /// host (accepted only with `allow_plain_http`), and a non-loopback admin listener without
    /// TLS (the admin token and the console session travel in clear text).
    pub fn start_warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        let remotes = [
            ("knowledge_fs_url", self.knowledge_fs_url.as_deref()),
            (
                "directory_url",
                self.directory.as_ref().map(|d| d.url.as_str()),
            ),
        ];
        for (setting, url) in remotes {
            if let Some(url) = url
                && is_plain_http_off_loopback(url)
            {
                warnings.push(format!(
                    "{setting} {url:?} is plain http:// to a non-loopback host (allowed by \
                     allow_plain_http): its bearer token and tenant data cross the network in \
                     clear text; use https://"
                ));
            }
        }
        if self.admin_tls.is_none() && !self.listen.ip().is_loopback() {
            warnings.push(format!(
                "the admin listener {} is not loopback and has no TLS: the admin token and the \
                 console session travel in clear text; set tls_cert_file and tls_key_file, or \
                 terminate TLS in a reverse proxy (docs/operations.md, \"TLS\")",
                self.listen
            ));
        }
        warnings
    }
}

/// Whether `url` is `http://` (no TLS) to a host that is not loopback (`localhost`,
/// `127.0.0.0/8`, `::1`). A URL without a host is not (the client refuses it as invalid).
pub fn is_plain_http_off_loopback(url: &str) -> bool {
    let Some(rest) = url
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .map(|_| &url[7..])
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let host = match host_port.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    };
    if host.is_empty() {
        return false;
    }
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    !loopback
}

/// `url` with any password replaced by `***`, for logs and messages: the one in the user
/// info (`user:password@`) and the libpq query parameters `password=` / `sslpassword=`.
pub fn redact_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if key == "password" || key == "sslpassword" => {
                        format!("{key}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{}?{}", redact_user_info(base), query.join("&"))
        }
        None => redact_user_info(url),
    }
}

/// `url` (without its query) with the password of its user info replaced by `***`.
fn redact_user_info(url: &str) -> String {
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
