//! libpq's multi-host PostgreSQL URLs and the server a pool may use among them.
//!
//! A failover formation (pg_auto_failover, Patroni, a cloud provider's Multi-AZ) gives its
//! clients a list of hosts, `postgres://u@host1:6001,host2:6002/db?target_session_attrs=read-write`
//! (or `postgres://u@/db?host=host1,host2&port=6001,6002`), and leaves it to the client to find
//! the primary. sqlx parses only one host, so [`Targets::parse`] splits such a URL into one
//! single-host URL per server, in order, and `open` builds the pool on the first server that
//! matches `target_session_attrs` (libpq's rules: `any` takes any server, `read-write` one whose
//! `transaction_read_only` is `off`, `primary` one that is not in recovery).
//!
//! The pool then follows failovers without a restart. Every new connection is checked the same
//! way before the pool hands it out (a standby's connection is refused); a watchdog checks the
//! pool's server every [`FOLLOW_INTERVAL`] and, when it no longer answers or no longer matches,
//! looks for the matching server again in URL order and points the pool's new connections at
//! it; connections opened before that switch are closed instead of reused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sea_orm::sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sea_orm::sqlx::{self, Connection as _};

/// Why a multi-host URL cannot be used, or no server of it matched (converted into
/// [`crate::ConnectError::PostgresUrl`] / [`crate::ConnectError::NoMatchingServer`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostsError {
    /// The host list or `target_session_attrs` cannot be read.
    #[error("the PostgreSQL URL cannot be used: {problem}")]
    Url {
        /// What is wrong and what to do.
        problem: String,
    },
    /// No server matched `target_session_attrs`.
    #[error("no PostgreSQL server of the URL matches target_session_attrs={attrs}: {answers}")]
    NoMatchingServer {
        /// The `target_session_attrs` in force.
        attrs: &'static str,
        /// What each server answered, in URL order.
        answers: String,
    },
}

/// Which servers of a URL a pool may use: libpq's `target_session_attrs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Any server that accepts the connection.
    Any,
    /// A server whose sessions can write (`SHOW transaction_read_only` is `off`).
    ReadWrite,
    /// A server that is not in recovery (`pg_is_in_recovery()` is false).
    Primary,
}

impl SessionAttrs {
    /// libpq's value names; `None` for a value Tenantry does not support (libpq's `standby`,
    /// `prefer-standby` and `read-only` pick servers Tenantry cannot write to).
    fn parse(value: &str) -> Option<Self> {
        match value {
            "any" => Some(Self::Any),
            "read-write" => Some(Self::ReadWrite),
            "primary" => Some(Self::Primary),
            _ => None,
        }
    }

    /// The value as libpq spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::ReadWrite => "read-write",
            Self::Primary => "primary",
        }
    }
}

/// A PostgreSQL URL split into one single-host URL per server, in the URL's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    /// `(host:port as shown in messages, single-host URL)` per server.
    pub servers: Vec<(String, String)>,
    /// The URL's `target_session_attrs`; `read-write` when several hosts are given without it,
    /// `any` for one host without it (libpq's default; the pool still refuses a standby then,
    /// unless `target_session_attrs=any` was written).
    pub attrs: SessionAttrs,
    /// Whether the URL wrote `target_session_attrs`.
    pub attrs_given: bool,
}

/// libpq's default port.
const DEFAULT_PORT: u16 = 5432;

impl Targets {
    /// Splits `url` (`postgres://` or `postgresql://`). Hosts come from the authority
    /// (`h1:p1,h2:p2`, IPv6 in brackets) or, when given, from the `host` query parameter
    /// (`host=h1,h2`, which wins as in libpq); ports from each host, else from the `port`
    /// parameter (one port for all hosts, or one per host), else 5432. Every other parameter
    /// is kept on each single-host URL; `target_session_attrs` is read and removed.
    ///
    /// # Errors
    /// [`HostsError::Url`] for an unsupported `target_session_attrs`, a port list
    /// whose length matches neither one nor the host count, a port that is not a number, or an
    /// empty host in a list.
    pub fn parse(url: &str) -> Result<Self, HostsError> {
        let bad = |problem: String| HostsError::Url { problem };
        let Some((scheme, rest)) = url.split_once("://") else {
            // Not a URL this module reads: the driver parses (or refuses) it as it is.
            return Ok(Self {
                servers: vec![(url.to_owned(), url.to_owned())],
                attrs: SessionAttrs::Any,
                attrs_given: false,
            });
        };
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = match before_query.find('/') {
            Some(i) => before_query.split_at(i),
            None => (before_query, ""),
        };
        let (userinfo, host_list) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        let mut host_param = None;
        let mut port_param = None;
        let mut attrs = None;
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "host" => host_param = Some(decode(value)),
                "port" => port_param = Some(decode(value)),
                "target_session_attrs" => {
                    let value = decode(value);
                    attrs = Some(SessionAttrs::parse(&value).ok_or_else(|| {
                        bad(format!(
                            "target_session_attrs={value:?} is not supported: use read-write (the default with several hosts), primary or any; Tenantry writes, so it never picks a standby"
                        ))
                    })?);
                }
                _ => kept.push(pair),
            }
        }
        let mut hosts: Vec<(String, Option<String>)> = Vec::new();
        match &host_param {
            Some(list) => {
                for host in list.split(',') {
                    hosts.push((host.to_owned(), None));
                }
            }
            None => {
                for entry in split_hosts(host_list) {
                    hosts.push(split_port(entry));
                }
            }
        }
        if hosts.len() > 1 && hosts.iter().any(|(h, _)| h.is_empty()) {
            return Err(bad(format!(
                "an empty host in the host list {:?}",
                host_param.as_deref().unwrap_or(host_list)
            )));
        }
        let ports: Vec<&str> = port_param
            .as_deref()
            .map(|p| p.split(',').collect())
            .unwrap_or_default();
        if ports.len() > 1 && ports.len() != hosts.len() {
            return Err(bad(format!(
                "{} ports for {} hosts: give one port for all, or one per host",
                ports.len(),
                hosts.len()
            )));
        }
        let mut servers = Vec::with_capacity(hosts.len());
        for (i, (host, own_port)) in hosts.iter().enumerate() {
            let port_text = own_port
                .as_deref()
                .or_else(|| ports.get(i).or(ports.first()).copied())
                .filter(|p| !p.is_empty());
            let port = match port_text {
                None => DEFAULT_PORT,
                Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
                    bad(format!(
                        "port {p:?} of host {host:?} is not a port number (1 to 65535)"
                    ))
                })?,
            };
            let shown = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            let mut params = kept.clone();
            // Unix sockets and hosts from the query go back as parameters; others in the
            // authority, where sqlx reads them.
            // sqlx takes an IPv6 address from the authority with its brackets, which do not
            // resolve: it goes in `host=` too, bare.
            let (authority_host, host_pair);
            if host.is_empty()
                || host.starts_with('/')
                || host.contains(':')
                || host_param.is_some()
            {
                authority_host = "localhost".to_owned();
                host_pair = (!host.is_empty()).then(|| format!("host={}", encode(host)));
            } else {
                authority_host = host.clone();
                host_pair = None;
            }
            let port_pair = format!("port={port}");
            if let Some(pair) = &host_pair {
                params.push(pair);
            }
            params.push(&port_pair);
            let userinfo = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
            let single = format!(
                "{scheme}://{userinfo}{authority_host}{path}?{}",
                params.join("&")
            );
            servers.push((shown, single));
        }
        let attrs_given = attrs.is_some();
        let attrs = attrs.unwrap_or(if servers.len() > 1 {
            SessionAttrs::ReadWrite
        } else {
            SessionAttrs::Any
        });
        Ok(Self {
            servers,
            attrs,
            attrs_given,
        })
    }

    /// Whether the URL needs `open`: several hosts, or a `target_session_attrs` other than
    /// `any`. A plain single-host URL goes through the usual pool.
    pub fn need_selection(&self) -> bool {
        self.servers.len() > 1 || self.attrs != SessionAttrs::Any
    }

    /// The URL the driver is given for a single-host URL that needs no selection: `url`
    /// itself, or its rewritten single-host form when the driver would misread the original
    /// (an IPv6 address, or a `target_session_attrs` the driver does not know).
    pub fn driver_url<'a>(&'a self, url: &'a str) -> &'a str {
        match self.servers.as_slice() {
            [(shown, single)] if self.attrs_given || shown.starts_with('[') => single,
            _ => url,
        }
    }
}

/// The hosts of an authority's host list: split on commas outside `[...]`.
fn split_hosts(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0u32;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

/// `host[:port]` or `[v6][:port]` as (host without brackets, port text).
fn split_port(entry: &str) -> (String, Option<String>) {
    if let Some(rest) = entry.strip_prefix('[')
        && let Some((host, after)) = rest.split_once(']')
    {
        let port = after.strip_prefix(':').map(str::to_owned);
        return (host.to_owned(), port);
    }
    match entry.rsplit_once(':') {
        Some((host, port)) => (host.to_owned(), Some(port.to_owned())),
        None => (entry.to_owned(), None),
    }
}

/// Percent-decodes a query value (`%2F` → `/`, `+` kept).
fn decode(value: &str) -> String {
    url::form_urlencoded::parse(format!("v={}", value.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// How often the watchdog of a multi-host pool checks its server.
pub const FOLLOW_INTERVAL: Duration = Duration::from_secs(1);

/// How long one server may take to accept a connection and answer the check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the server behind `conn` matches `attrs`.
async fn matches(conn: &mut PgConnection, attrs: SessionAttrs) -> Result<bool, sqlx::Error> {
    Ok(match attrs {
        SessionAttrs::Any => true,
        SessionAttrs::ReadWrite => {
            let read_only: String = sqlx::query_scalar("SHOW transaction_read_only")
                .fetch_one(&mut *conn)
                .await?;
            read_only == "off"
        }
        SessionAttrs::Primary => {
            let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                .fetch_one(&mut *conn)
                .await?;
            !in_recovery
        }
    })
}

/// The first server (index, options) of `servers` that matches `attrs`, or what each answered.
async fn find(
    servers: &[(String, PgConnectOptions)],
    attrs: SessionAttrs,
) -> Result<usize, Vec<String>> {
    let mut answers = Vec::with_capacity(servers.len());
    for (i, (shown, options)) in servers.iter().enumerate() {
        let checked = tokio::time::timeout(CHECK_TIMEOUT, async {
            let mut conn = PgConnection::connect_with(options).await?;
            let matched = matches(&mut conn, attrs).await;
            let _ = conn.close().await;
            matched
        })
        .await;
        match checked {
            Ok(Ok(true)) => return Ok(i),
            Ok(Ok(false)) => answers.push(format!(
                "{shown}: does not match target_session_attrs={} (a standby, or read-only)",
                attrs.as_str()
            )),
            Ok(Err(error)) => answers.push(format!(
                "{shown}: {}",
                crate::pg_tls::classify_sqlx(&error)
                    .map_or_else(|| error.to_string(), |tls| tls.describe())
            )),
            Err(_) => answers.push(format!(
                "{shown}: no answer within {} s",
                CHECK_TIMEOUT.as_secs()
            )),
        }
    }
    Err(answers)
}

/// What the pool's hooks and the watchdog share.
struct Follow {
    /// The servers' connect options, in URL order.
    servers: Vec<(String, PgConnectOptions)>,
    attrs: SessionAttrs,
    /// When the pool was last pointed at another server, or its server last failed a check
    /// (process-monotonic, as milliseconds since `epoch`): connections older than that are not
    /// reused.
    switched_at_ms: AtomicU64,
    epoch: Instant,
}

impl Follow {
    fn since_epoch_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Opens a pool of at most `max_connections` on the first server of `targets` that matches its
/// `target_session_attrs`, and starts the watchdog that follows failovers (module docs).
/// `options` turns each single-host URL into the driver's options (TLS applied).
///
/// # Errors
/// [`HostsError::NoMatchingServer`] naming what every server answered when none matches,
/// or the error `options` returns for a server's URL.
pub(crate) async fn open<E: From<HostsError>>(
    targets: &Targets,
    max_connections: u32,
    options: impl Fn(&str) -> Result<PgConnectOptions, E>,
) -> Result<PgPool, E> {
    let mut servers = Vec::with_capacity(targets.servers.len());
    for (shown, url) in &targets.servers {
        servers.push((shown.clone(), options(url)?));
    }
    let first = find(&servers, targets.attrs).await.map_err(|answers| {
        E::from(HostsError::NoMatchingServer {
            attrs: targets.attrs.as_str(),
            answers: answers.join("; "),
        })
    })?;
    let start = servers[first].1.clone();
    let follow = Arc::new(Follow {
        servers,
        attrs: targets.attrs,
        switched_at_ms: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    let on_connect = Arc::clone(&follow);
    let on_acquire = Arc::clone(&follow);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .min_connections(0)
        .acquire_timeout(Duration::from_secs(10))
        .after_connect(move |conn, _meta| {
            let follow = Arc::clone(&on_connect);
            Box::pin(async move {
                if matches(conn, follow.attrs).await? {
                    Ok(())
                } else {
                    Err(sqlx::Error::Configuration(
                        format!(
                            "the server no longer matches target_session_attrs={} (a failover made it a standby); the pool looks for the new primary",
                            follow.attrs.as_str()
                        )
                        .into(),
                    ))
                }
            })
        })
        .before_acquire(move |_conn, meta| {
            let follow = Arc::clone(&on_acquire);
            Box::pin(async move {
                // A connection opened before the last switch talks to the old server.
                let opened_at = follow
                    .since_epoch_ms()
                    .saturating_sub(u64::try_from(meta.age.as_millis()).unwrap_or(u64::MAX));
                Ok(opened_at >= follow.switched_at_ms.load(Ordering::SeqCst))
            })
        })
        .connect_lazy_with(start);
    tokio::spawn(watch(pool.clone(), follow, first));
    Ok(pool)
}

/// The watchdog: every [`FOLLOW_INTERVAL`], checks the server the pool uses over a connection
/// of its own (kept between checks) and, when it does not answer or no longer matches, finds
/// the matching one again and switches to it. Ends when the pool is closed, or with the
/// runtime.
async fn watch(pool: PgPool, follow: Arc<Follow>, mut current: usize) {
    let mut probe: Option<PgConnection> = None;
    // Since when no server matched (logged once, then every `OUTAGE_LOG_EVERY`).
    let mut outage: Option<(Instant, Instant)> = None;
    loop {
        tokio::time::sleep(FOLLOW_INTERVAL).await;
        if pool.is_closed() {
            return;
        }
        let checked = tokio::time::timeout(CHECK_TIMEOUT, async {
            let conn = match probe.as_mut() {
                Some(conn) => conn,
                None => probe.insert(
                    PgConnection::connect_with(
                        &follow.servers[current]
                            .1
                            .clone()
                            .application_name(PROBE_APPLICATION_NAME),
                    )
                    .await?,
                ),
            };
            matches(conn, follow.attrs).await
        })
        .await;
        if matches!(checked, Ok(Ok(true))) {
            if let Some((since, _)) = outage.take() {
                tracing::info!(
                    server = %follow.servers[current].0,
                    after_s = since.elapsed().as_secs(),
                    "PostgreSQL: a matching server answers again"
                );
            }
            continue;
        }
        // Whatever it was connected to, the next check opens a new probe connection; the
        // pool's connections to that server are not reused either (a server turned read-only
        // keeps its sessions), so readiness and storage calls see the outage.
        probe = None;
        follow
            .switched_at_ms
            .store(follow.since_epoch_ms(), Ordering::SeqCst);
        match find(&follow.servers, follow.attrs).await {
            Ok(found) => {
                if found != current {
                    tracing::warn!(
                        from = %follow.servers[current].0,
                        to = %follow.servers[found].0,
                        attrs = follow.attrs.as_str(),
                        "PostgreSQL failover: the pool now connects to another server"
                    );
                    pool.set_connect_options(follow.servers[found].1.clone());
                    follow
                        .switched_at_ms
                        .store(follow.since_epoch_ms(), Ordering::SeqCst);
                    current = found;
                }
                if let Some((since, _)) = outage.take() {
                    tracing::info!(
                        server = %follow.servers[current].0,
                        after_s = since.elapsed().as_secs(),
                        "PostgreSQL: a matching server answers again"
                    );
                }
            }
            Err(answers) => {
                let now = Instant::now();
                let due = match outage {
                    None => true,
                    Some((_, logged)) => now.duration_since(logged) >= OUTAGE_LOG_EVERY,
                };
                if due {
                    tracing::warn!(
                        answers = %answers.join("; "),
                        attrs = follow.attrs.as_str(),
                        "PostgreSQL: no server matches; storage is unavailable until one does"
                    );
                    outage = Some((outage.map_or(now, |(since, _)| since), now));
                }
            }
        }
    }
}

/// `application_name` of the watchdog's own connection (in `pg_stat_activity`).
pub const PROBE_APPLICATION_NAME: &str = "tenantry-failover-probe";

/// How often an outage of every server is logged again while it lasts.
const OUTAGE_LOG_EVERY: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    fn servers(url: &str) -> Vec<(String, String)> {
        Targets::parse(url).unwrap().servers
    }

    fn problem(url: &str) -> String {
        match Targets::parse(url) {
            Err(HostsError::Url { problem }) => problem,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn host_lists_become_one_url_per_server_in_order() {
        let table: &[(&str, &[(&str, &str)])] = &[
            (
                "postgres://u:p@h1:6001,h2:6002/db?sslmode=require",
                &[
                    ("h1:6001", "postgres://u:p@h1/db?sslmode=require&port=6001"),
                    ("h2:6002", "postgres://u:p@h2/db?sslmode=require&port=6002"),
                ],
            ),
            // A host without a port takes the `port` parameter, else 5432.
            (
                "postgresql://u@h1,h2:7/db",
                &[
                    ("h1:5432", "postgresql://u@h1/db?port=5432"),
                    ("h2:7", "postgresql://u@h2/db?port=7"),
                ],
            ),
            (
                "postgres://u@h1,h2/db?port=6000",
                &[
                    ("h1:6000", "postgres://u@h1/db?port=6000"),
                    ("h2:6000", "postgres://u@h2/db?port=6000"),
                ],
            ),
            // The query form: hosts and ports as lists (libpq's `host=…,…&port=…,…`).
            (
                "postgres://u@/db?host=a,b&port=1,2&application_name=x",
                &[
                    (
                        "a:1",
                        "postgres://u@localhost/db?application_name=x&host=a&port=1",
                    ),
                    (
                        "b:2",
                        "postgres://u@localhost/db?application_name=x&host=b&port=2",
                    ),
                ],
            ),
            // IPv6 in brackets; a Unix socket folder stays a parameter.
            (
                "postgres://u@[::1]:6001,[fe80::2]/db",
                &[
                    (
                        "[::1]:6001",
                        "postgres://u@localhost/db?host=%3A%3A1&port=6001",
                    ),
                    (
                        "[fe80::2]:5432",
                        "postgres://u@localhost/db?host=fe80%3A%3A2&port=5432",
                    ),
                ],
            ),
            (
                "postgres://u@/db?host=%2Fvar%2Frun%2Fpostgresql",
                &[(
                    "/var/run/postgresql:5432",
                    "postgres://u@localhost/db?host=%2Fvar%2Frun%2Fpostgresql&port=5432",
                )],
            ),
        ];
        for (url, expected) in table {
            let expected: Vec<(String, String)> = expected
                .iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect();
            assert_eq!(servers(url), expected, "{url}");
        }
    }

    #[test]
    fn session_attrs_default_to_read_write_with_several_hosts() {
        let table = [
            (
                "postgres://u@h1,h2/db",
                SessionAttrs::ReadWrite,
                false,
                true,
            ),
            ("postgres://u@h1/db", SessionAttrs::Any, false, false),
            (
                "postgres://u@h1/db?target_session_attrs=read-write",
                SessionAttrs::ReadWrite,
                true,
                true,
            ),
            (
                "postgres://u@h1,h2/db?target_session_attrs=primary",
                SessionAttrs::Primary,
                true,
                true,
            ),
            (
                "postgres://u@h1,h2/db?target_session_attrs=any",
                SessionAttrs::Any,
                true,
                true,
            ),
            (
                "postgres://u@h1/db?target_session_attrs=any",
                SessionAttrs::Any,
                true,
                false,
            ),
        ];
        for (url, attrs, given, selection) in table {
            let targets = Targets::parse(url).unwrap();
            assert_eq!(
                (targets.attrs, targets.attrs_given, targets.need_selection()),
                (attrs, given, selection),
                "{url}"
            );
            assert!(
                targets
                    .servers
                    .iter()
                    .all(|(_, single)| !single.contains("target_session_attrs")),
                "{url}: the driver does not know the parameter"
            );
        }
    }

    #[test]
    fn unusable_lists_and_attributes_are_refused_with_the_reason() {
        let table = [
            ("postgres://u@h1,h2/db?port=1,2,3", "3 ports for 2 hosts"),
            (
                "postgres://u@h1:x/db",
                "port \"x\" of host \"h1\" is not a port number",
            ),
            (
                "postgres://u@h1:99999/db",
                "port \"99999\" of host \"h1\" is not a port number (1 to 65535)",
            ),
            ("postgres://u@h1,,h2/db", "an empty host"),
            (
                "postgres://u@h1,h2/db?target_session_attrs=standby",
                "target_session_attrs=\"standby\" is not supported",
            ),
            (
                "postgres://u@h1/db?target_session_attrs=read-only",
                "never picks a standby",
            ),
        ];
        for (url, expected) in table {
            let problem = problem(url);
            assert!(problem.contains(expected), "{url}: {problem}");
        }
    }

    #[test]
    fn the_driver_gets_the_rewritten_url_only_where_it_would_misread_the_original() {
        let table = [
            (
                "postgres://u@h1:5/db?sslmode=require",
                "postgres://u@h1:5/db?sslmode=require",
            ),
            (
                "postgres://u@[::1]:5/db",
                "postgres://u@localhost/db?host=%3A%3A1&port=5",
            ),
            (
                "postgres://u@h1:5/db?target_session_attrs=any",
                "postgres://u@h1/db?port=5",
            ),
        ];
        for (url, driver) in table {
            let targets = Targets::parse(url).unwrap();
            assert!(!targets.need_selection(), "{url}");
            assert_eq!(targets.driver_url(url), driver, "{url}");
        }
    }

    #[test]
    fn a_string_that_is_not_a_url_is_left_to_the_driver() {
        let targets = Targets::parse("postgres:db").unwrap();
        assert_eq!(
            targets.servers,
            vec![("postgres:db".to_owned(), "postgres:db".to_owned())]
        );
        assert!(!targets.need_selection());
    }
}
