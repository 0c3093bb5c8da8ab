//! Opening a database: SQLite (WAL, busy timeout, serialized writers) or PostgreSQL, either
//! from a URL ([`connect`], [`connect_existing`]) or from a pool the host application already
//! has ([`Database::from_connection`]), and migrating or checking the schema of a selection of
//! mechanisms ([`Database::migrate`], [`Database::check_schema`]).
//!
//! Each driver is a cargo feature (`sqlite`, `postgres`, both default); a URL whose driver was
//! not compiled is refused with [`ConnectError::DriverNotCompiled`].

use std::time::Duration;

use sea_orm::{ConnectOptions, DatabaseConnection, DbBackend, DbErr};
use tenantry_migrations::{LEGACY_HISTORY_TABLE, Mechanisms, MigrateError};

use crate::sqlite_file::{SqliteFileError, sqlite_file};

/// How long a SQLite connection waits for the write lock before failing, in milliseconds.
pub const SQLITE_BUSY_TIMEOUT_MS: u64 = 10_000;

/// Which database engine a [`Database`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite (one writer at a time).
    Sqlite,
    /// PostgreSQL (several replicas may share it).
    Postgres,
}

impl Backend {
    /// The options of a transaction that writes: on SQLite it takes the write lock when it
    /// begins (`BEGIN IMMEDIATE`), so it never fails to upgrade a read lock after reading; on
    /// PostgreSQL the defaults.
    #[cfg_attr(
        not(any(feature = "lifecycle", feature = "directory")),
        allow(
            dead_code,
            reason = "only the lifecycle and directory writers begin write transactions"
        )
    )]
    pub(crate) fn write_transaction(self) -> sea_orm::TransactionOptions {
        sea_orm::TransactionOptions {
            sqlite_transaction_mode: (self == Backend::Sqlite)
                .then_some(sea_orm::SqliteTransactionMode::Immediate),
            ..sea_orm::TransactionOptions::default()
        }
    }
}

/// A connection pool plus the backend it talks to. Build it with [`connect`] /
/// [`connect_existing`] from a URL, or with [`Database::from_connection`] from the host's pool.
#[derive(Debug, Clone)]
pub struct Database {
    /// The SeaORM connection pool.
    pub conn: DatabaseConnection,
    /// The engine behind `conn`.
    pub backend: Backend,
}

/// Why a database could not be opened, migrated or accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL scheme is neither `sqlite:` nor `postgres:` / `postgresql:`.
    #[error(
        "unsupported database URL {url:?}: use sqlite://PATH?mode=rwc or postgres://USER@HOST/DB"
    )]
    UnsupportedUrl {
        /// The refused URL.
        url: String,
    },
    /// The URL names a driver this build does not include (a cargo feature of
    /// `tenantry-store-seaorm` that was turned off).
    #[error(
        "this build of tenantry-store-seaorm has no {driver} driver: enable its `{feature}` cargo feature (both are default features)"
    )]
    DriverNotCompiled {
        /// `SQLite` or `PostgreSQL`.
        driver: &'static str,
        /// The cargo feature that adds it (`sqlite` / `postgres`).
        feature: &'static str,
    },
    /// [`Database::from_connection`] was given a connection to another engine (MySQL).
    #[error("unsupported database backend {backend}: Tenantry runs on SQLite or PostgreSQL")]
    UnsupportedBackend {
        /// The backend of the refused connection.
        backend: String,
    },
    /// Connecting failed (server unreachable, bad credentials, SQLite file missing or not
    /// writable); the source is the driver's error.
    #[error("cannot open database: {source}")]
    Open {
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// An operator tool was pointed at a SQLite file that does not exist (it opens databases
    /// without creating them, so a mistyped path does not leave an empty database behind).
    #[error(
        "the SQLite database file {path} does not exist: check the path of the database URL (it must be the file `tenantry serve` uses), or start `tenantry serve` once to create it"
    )]
    SqliteFileMissing {
        /// The path the URL names.
        path: String,
    },
    /// The SQLite file's folder is missing or refuses new files, or another process holds the
    /// database ([`crate::sqlite_file`]); the message names the folder or the lock.
    #[error(transparent)]
    SqliteFile(#[from] SqliteFileError),
    /// The PostgreSQL server could not be reached before the connect timeout (the pool's own
    /// error only says "pool timed out"): `cause` is what a direct TCP connection to `server`
    /// answered (refused, unreachable, no answer, or connected but no PostgreSQL handshake).
    #[error(
        "cannot reach the PostgreSQL server at {server}: {cause}; check that PostgreSQL runs there and listens on that port, that the host and port of the database URL are right, and that no firewall blocks it"
    )]
    Unreachable {
        /// `host:port` from the URL.
        server: String,
        /// What a direct TCP connection answered.
        cause: String,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// A TLS file named by the PostgreSQL URL (`sslrootcert`, `sslcert`, `sslkey`, or the
    /// `PGSSLROOTCERT` / `PGSSLCERT` / `PGSSLKEY` environment variables) is missing, unreadable,
    /// or does not hold PEM of the right kind. Checked before connecting.
    #[error(
        "cannot use the {parameter} file {path} named by the PostgreSQL URL: {cause}; check the path (a relative path is read from the working directory) and that this user may read the file"
    )]
    PostgresTlsFile {
        /// `sslrootcert`, `sslcert` or `sslkey`.
        parameter: &'static str,
        /// The file as written in the URL.
        path: String,
        /// Why it cannot be used.
        cause: String,
    },
    /// TLS parameters of the PostgreSQL URL that cannot work (an unknown `sslmode`, `sslkey`
    /// without `sslcert` or the reverse, `sslrootcert=system` with a mode weaker than
    /// `verify-full`). Checked before connecting.
    #[error("the TLS settings of the PostgreSQL URL cannot work: {problem}")]
    PostgresTlsSettings {
        /// What is wrong and what to do.
        problem: String,
    },
    /// The server accepts only TLS connections from this client (its `pg_hba.conf` has
    /// `hostssl` lines only) and the URL asked for none (`sslmode=disable` or `allow`).
    #[error(
        "the PostgreSQL server at {server} requires TLS and refused a connection without it (the server said: {detail}); set sslmode=verify-full in the database URL, with sslrootcert=PATH when its certificate is signed by a private CA (docs/operations.md, \"TLS\")"
    )]
    PostgresTlsRequired {
        /// `host:port` from the URL.
        server: String,
        /// The server's message.
        detail: String,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// The TLS handshake with the PostgreSQL server failed: its certificate was not trusted,
    /// does not name the host, has expired, the server offers no TLS, or it refused the
    /// client certificate.
    #[error("TLS with the PostgreSQL server at {server} failed: {cause}; {hint}")]
    PostgresTls {
        /// `host:port` from the URL.
        server: String,
        /// What failed, in the TLS library's words (e.g. `invalid peer certificate:
        /// UnknownIssuer`).
        cause: String,
        /// What to do about it.
        hint: &'static str,
        /// The driver's error.
        #[source]
        source: DbErr,
    },
    /// The PostgreSQL URL's host list or `target_session_attrs` cannot be read (an unsupported
    /// `target_session_attrs`, a port list that does not match the hosts, a port that is not
    /// a number). Checked before connecting.
    #[error("the PostgreSQL URL cannot be used: {problem}")]
    PostgresUrl {
        /// What is wrong and what to do.
        problem: String,
    },
    /// None of the servers of a multi-host PostgreSQL URL matched its `target_session_attrs`
    /// (no writable primary reachable: a failover in progress, or every host down).
    #[error(
        "no PostgreSQL server of the URL matches target_session_attrs={attrs}: {answers}; fix what the hosts answered (a host that \"does not match\" is a standby or read-only: check that the formation has a primary and that the URL lists its hosts, docs/operations.md \"Highly available PostgreSQL\")"
    )]
    NoMatchingServer {
        /// The `target_session_attrs` in force (`read-write`, `primary` or `any`).
        attrs: &'static str,
        /// What each server answered, in URL order.
        answers: String,
    },
    /// The one PostgreSQL server of the URL accepts only read-only sessions: a standby (hot
    /// standby of a failover formation) or a server with `default_transaction_read_only`.
    /// Tenantry writes, so it is refused at start.
    #[error(
        "the PostgreSQL server at {server} is read-only (a standby, or default_transaction_read_only is on); Tenantry needs the primary: point the URL at it, or list every host of the formation (postgres://u@host1:port1,host2:port2/db) so that Tenantry finds the primary itself"
    )]
    ReadOnlyServer {
        /// `host:port` from the URL.
        server: String,
    },
    /// The server refused one of the driver's prepared statements as already existing or
    /// missing (`prepared statement "sqlx_s_1" already exists`): the URL points at a
    /// connection pooler in transaction mode (PgBouncer `pool_mode = transaction`), which hands
    /// each transaction a different server session, while the driver prepares each statement
    /// once per connection. Tenantry needs the server itself or a session-mode pool
    /// (docs/operations.md, "Connection poolers").
    #[error(
        "the database lost the driver's prepared statements between two statements ({cause}): it is reached through a connection pooler in transaction mode (PgBouncer pool_mode = transaction), which Tenantry cannot use; point database_url at the PostgreSQL server or at a pool in session mode (pool_mode = session)"
    )]
    TransactionPooler {
        /// The server's refusal.
        cause: String,
    },
    /// The database opened but migrating its schema failed (e.g. a table Tenantry would create
    /// already exists and is not Tenantry's); the source says which and what to do.
    #[error("cannot migrate the database schema: {source}")]
    Migrate {
        /// What failed.
        #[source]
        source: MigrateError,
    },
    /// Reading the migration history to check the schema failed.
    #[error("cannot read the database's migration history: {source}")]
    SchemaCheck {
        /// The database error.
        #[source]
        source: DbErr,
    },
    /// The database exists but its schema is missing or older than this binary's: run
    /// `tenantry migrate` (or start `tenantry serve`, or call [`Database::migrate`]) first.
    #[error(
        "database schema is not initialized or not up to date ({pending} migrations pending, first {first}); run `tenantry migrate` (or Database::migrate) first"
    )]
    SchemaNotCurrent {
        /// Migrations this binary knows that the database has not applied.
        pending: usize,
        /// The name of the first of them.
        first: String,
    },
}

#[cfg(feature = "postgres")]
impl From<crate::pg_hosts::HostsError> for ConnectError {
    fn from(error: crate::pg_hosts::HostsError) -> Self {
        match error {
            crate::pg_hosts::HostsError::Url { problem } => Self::PostgresUrl { problem },
            crate::pg_hosts::HostsError::NoMatchingServer { attrs, answers } => {
                Self::NoMatchingServer { attrs, answers }
            }
        }
    }
}

#[cfg(feature = "postgres")]
impl From<crate::pg_tls::SettingsError> for ConnectError {
    fn from(error: crate::pg_tls::SettingsError) -> Self {
        match error {
            crate::pg_tls::SettingsError::File {
                parameter,
                path,
                cause,
            } => Self::PostgresTlsFile {
                parameter,
                path,
                cause,
            },
            crate::pg_tls::SettingsError::Settings { problem } => {
                Self::PostgresTlsSettings { problem }
            }
        }
    }
}

impl Database {
    /// Wraps a pool the host application already has (its backend is read from the
    /// connection). Nothing is created or migrated: call [`Database::migrate`] or
    /// [`Database::check_schema`] next. SQLite pools should be opened in WAL mode with a busy
    /// timeout as [`connect`] does, or concurrent writers fail with "database is locked".
    ///
    /// # Errors
    /// [`ConnectError::UnsupportedBackend`] for a MySQL connection.
    pub fn from_connection(conn: DatabaseConnection) -> Result<Self, ConnectError> {
        let backend = match conn.get_database_backend() {
            DbBackend::Sqlite => Backend::Sqlite,
            DbBackend::Postgres => Backend::Postgres,
            other => {
                return Err(ConnectError::UnsupportedBackend {
                    backend: format!("{other:?}"),
                });
            }
        };
        Ok(Self { conn, backend })
    }

    /// Applies the pending migrations of the selected mechanisms, each recorded in its own
    /// history table (`tenantry_<mechanism>_migrations`), beside whatever migrator the host
    /// runs on the same database ([`tenantry_migrations::migrate`]).
    ///
    /// # Errors
    /// [`ConnectError::Migrate`], naming the foreign table or the failed migration.
    pub async fn migrate(&self, mechanisms: Mechanisms) -> Result<(), ConnectError> {
        tenantry_migrations::migrate(&self.conn, mechanisms)
            .await
            .map_err(|source| {
                pooled_statement_clash(&source.to_string())
                    .map(|cause| ConnectError::TransactionPooler { cause })
                    .unwrap_or(ConnectError::Migrate { source })
            })
    }

    /// Checks, without writing anything, that every migration of the selected mechanisms is
    /// applied: recorded in Tenantry's history tables or in `seaql_migrations` (sea-orm-
    /// migration's default table, where a host migrator that appended Tenantry's migrations to
    /// its own list records them). A host whose migrator uses another history table calls
    /// [`Database::check_schema_with_history`].
    ///
    /// # Errors
    /// [`ConnectError::SchemaNotCurrent`] when some are pending, [`ConnectError::SchemaCheck`]
    /// when the history cannot be read.
    pub async fn check_schema(&self, mechanisms: Mechanisms) -> Result<(), ConnectError> {
        self.check_schema_with_history(mechanisms, LEGACY_HISTORY_TABLE)
            .await
    }

    /// [`Database::check_schema`] that also counts the migrations recorded in
    /// `host_history_table` (the `migration_table_name()` of the host's migrator) as applied.
    ///
    /// # Errors
    /// As [`Database::check_schema`].
    pub async fn check_schema_with_history(
        &self,
        mechanisms: Mechanisms,
        host_history_table: &str,
    ) -> Result<(), ConnectError> {
        let pending = tenantry_migrations::pending_migrations(
            &self.conn,
            mechanisms,
            &[LEGACY_HISTORY_TABLE, host_history_table],
        )
        .await
        .map_err(|source| {
            pooled_statement_clash(&source.to_string())
                .map(|cause| ConnectError::TransactionPooler { cause })
                .unwrap_or(ConnectError::SchemaCheck { source })
        })?;
        match pending.first() {
            None => Ok(()),
            Some(first) => Err(ConnectError::SchemaNotCurrent {
                pending: pending.len(),
                first: first.clone(),
            }),
        }
    }
}

/// Opens `url` without creating or migrating anything, for read-mostly operator tools.
///
/// A SQLite file must already exist (`mode=rwc` is read as `mode=rw`), and the schema of every
/// mechanism must be exactly this binary's (no pending migration, see
/// [`Database::check_schema`]).
///
/// # Errors
/// [`ConnectError::UnsupportedUrl`], [`ConnectError::DriverNotCompiled`],
/// [`ConnectError::SqliteFileMissing`] when a SQLite URL names a file that does not exist,
/// the TLS errors of [`connect`] on PostgreSQL,
/// [`ConnectError::Open`] when the database cannot be opened otherwise,
/// [`ConnectError::SchemaNotCurrent`] when migrations are pending, [`ConnectError::SchemaCheck`].
pub async fn connect_existing(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let url = if url.starts_with("sqlite:") {
        if let Some(path) = sqlite_file(url)
            && !std::path::Path::new(path).exists()
        {
            return Err(ConnectError::SqliteFileMissing {
                path: path.to_owned(),
            });
        }
        url.replace("mode=rwc", "mode=rw")
    } else {
        url.to_owned()
    };
    let db = open_pool(&url, max_connections).await?;
    if let Err(error) = db.check_schema(Mechanisms::ALL).await {
        let _ = db.conn.close().await;
        return Err(error);
    }
    Ok(db)
}

/// Opens `url`, applies the pending migrations of every mechanism and returns the pool.
///
/// SQLite URLs (`sqlite://path?mode=rwc`, `sqlite::memory:`) get WAL journaling, a busy timeout
/// of [`SQLITE_BUSY_TIMEOUT_MS`] and foreign keys; PostgreSQL URLs are used as given, their
/// libpq TLS parameters (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`) read as libpq reads
/// them (docs/operations.md, "TLS": `require` with `sslrootcert` checks the chain, the
/// platform's roots are trusted). `max_connections` bounds the pool. It takes no lock: a
/// process that serves a SQLite database takes [`crate::sqlite_file::lock`] first.
///
/// # Errors
/// [`ConnectError::UnsupportedUrl`] for another scheme, [`ConnectError::DriverNotCompiled`],
/// [`ConnectError::SqliteFile`] when the SQLite file's folder does not exist or refuses new
/// files, [`ConnectError::PostgresTlsFile`] / [`ConnectError::PostgresTlsSettings`] before connecting
/// when a TLS file or setting cannot work, [`ConnectError::Unreachable`] /
/// [`ConnectError::Open`] when the server is unreachable or refuses the session,
/// [`ConnectError::PostgresTlsRequired`] / [`ConnectError::PostgresTls`] when it requires TLS
/// or the handshake fails, [`ConnectError::Migrate`] when a migration fails.
pub async fn connect(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let db = open_pool(url, max_connections).await?;
    db.migrate(Mechanisms::ALL).await?;
    Ok(db)
}

/// The backend `url` names.
fn backend_of(url: &str) -> Result<Backend, ConnectError> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Ok(Backend::Postgres)
    } else {
        Err(ConnectError::UnsupportedUrl {
            url: url.to_owned(),
        })
    }
}

/// Fails when `backend`'s driver is not compiled into this build.
fn ensure_driver(backend: Backend) -> Result<(), ConnectError> {
    check_driver(
        backend,
        cfg!(feature = "sqlite"),
        cfg!(feature = "postgres"),
    )
}

/// [`ensure_driver`] given which drivers are compiled.
fn check_driver(backend: Backend, sqlite: bool, postgres: bool) -> Result<(), ConnectError> {
    match backend {
        Backend::Sqlite if !sqlite => Err(ConnectError::DriverNotCompiled {
            driver: "SQLite",
            feature: "sqlite",
        }),
        Backend::Postgres if !postgres => Err(ConnectError::DriverNotCompiled {
            driver: "PostgreSQL",
            feature: "postgres",
        }),
        _ => Ok(()),
    }
}

/// Opens a pool on `url` (SQLite tuned as [`connect`] says) without migrating anything.
pub(crate) async fn open_pool(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let backend = backend_of(url)?;
    ensure_driver(backend)?;
    // SQLite's own error for a missing folder is only "unable to open database file".
    crate::sqlite_file::check_folder(url)?;
    #[cfg(feature = "postgres")]
    let targets = if backend == Backend::Postgres {
        let targets = crate::pg_hosts::Targets::parse(url)?;
        if targets.need_selection() {
            // Several hosts (a failover formation) or a target_session_attrs: the pool finds
            // the matching server and follows failovers (`pg_hosts`).
            let pool = crate::pg_hosts::open(&targets, max_connections, |single| {
                let tls = crate::pg_tls::TlsSettings::read(single, |name| std::env::var(name).ok());
                let mode = tls.check()?;
                let options: sea_orm::sqlx::postgres::PgConnectOptions =
                    single.parse().map_err(|e: sea_orm::sqlx::Error| {
                        ConnectError::PostgresUrl {
                            problem: e.to_string(),
                        }
                    })?;
                use sea_orm::sqlx::ConnectOptions as _;
                Ok::<_, ConnectError>(tls.apply(mode, options).disable_statement_logging())
            })
            .await?;
            let conn = sea_orm::SqlxPostgresConnector::from_sqlx_postgres_pool(pool);
            return Ok(Database { conn, backend });
        }
        Some(targets)
    } else {
        None
    };
    #[cfg(feature = "postgres")]
    let driver_url = match &targets {
        Some(targets) => targets.driver_url(url).to_owned(),
        None => url.to_owned(),
    };
    #[cfg(not(feature = "postgres"))]
    let driver_url = url.to_owned();
    let url = driver_url.as_str();
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(max_connections)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    #[cfg(feature = "postgres")]
    if backend == Backend::Postgres {
        // The libpq TLS parameters: files checked now, the mode as libpq reads it. Every
        // connection of the pool gets these options, and so does the wake listener's, which
        // copies them from the pool.
        let tls = crate::pg_tls::TlsSettings::read(url, |name| std::env::var(name).ok());
        let mode = tls.check()?;
        options.map_sqlx_postgres_opts(move |opts| tls.apply(mode, opts));
    }
    #[cfg(feature = "sqlite")]
    if backend == Backend::Sqlite {
        use sea_orm::sqlx::sqlite::SqliteJournalMode;
        options.map_sqlx_sqlite_opts(|opts| {
            opts.journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))
                .foreign_keys(true)
        });
    }
    let conn = match sea_orm::Database::connect(options).await {
        Ok(conn) => conn,
        Err(source) => return Err(open_error(url, backend, source).await),
    };
    #[cfg(feature = "postgres")]
    if let Some(targets) = targets
        && !targets.attrs_given
        && let Err(error) = refuse_read_only(&conn, url).await
    {
        let _ = conn.close().await;
        return Err(error);
    }
    debug_assert_eq!(
        conn.get_database_backend(),
        match backend {
            Backend::Sqlite => DbBackend::Sqlite,
            Backend::Postgres => DbBackend::Postgres,
        }
    );
    Ok(Database { conn, backend })
}

/// Refuses a PostgreSQL server whose sessions are read-only (a standby): Tenantry writes.
///
/// # Errors
/// [`ConnectError::ReadOnlyServer`] when `SHOW transaction_read_only` answers `on`,
/// [`ConnectError::Open`] when the question cannot be asked.
#[cfg(feature = "postgres")]
async fn refuse_read_only(conn: &DatabaseConnection, url: &str) -> Result<(), ConnectError> {
    use sea_orm::ConnectionTrait as _;
    let row = conn
        .query_one_raw(sea_orm::Statement::from_string(
            DbBackend::Postgres,
            "SHOW transaction_read_only",
        ))
        .await
        .map_err(open_failed)?;
    let read_only: Option<String> = row
        .map(|row| row.try_get("", "transaction_read_only"))
        .transpose()
        .map_err(open_failed)?;
    if read_only.as_deref() == Some("on") {
        let server = postgres_server(url)
            .map_or_else(|| "(unknown)".to_owned(), |(h, p)| format!("{h}:{p}"));
        return Err(ConnectError::ReadOnlyServer { server });
    }
    Ok(())
}

/// [`ConnectError::Open`], or [`ConnectError::TransactionPooler`] when the refusal is a
/// pooler's lost prepared statement.
fn open_failed(source: DbErr) -> ConnectError {
    match pooled_statement_clash(&source.to_string()) {
        Some(cause) => ConnectError::TransactionPooler { cause },
        None => ConnectError::Open { source },
    }
}

/// How long [`open_error`] waits for a TCP connection to the server.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The error of a pool that could not open on `url`: [`ConnectError::Unreachable`] with the
/// server's `host:port` and what a direct TCP connection to it answers when the pool only timed
/// out on PostgreSQL, [`ConnectError::Open`] otherwise.
async fn open_error(url: &str, backend: Backend, source: DbErr) -> ConnectError {
    #[cfg(feature = "postgres")]
    if backend == Backend::Postgres
        && let Some(failure) = crate::pg_tls::classify(&source)
    {
        let server = postgres_server(url)
            .map_or_else(|| "(unknown)".to_owned(), |(h, p)| format!("{h}:{p}"));
        return match failure {
            crate::pg_tls::TlsFailure::ServerRequiresTls(detail) => {
                ConnectError::PostgresTlsRequired {
                    server,
                    detail,
                    source,
                }
            }
            crate::pg_tls::TlsFailure::Handshake { cause, hint } => ConnectError::PostgresTls {
                server,
                cause,
                hint,
                source,
            },
        };
    }
    let timed_out = source.to_string().contains("pool timed out");
    // Only a PostgreSQL URL is parsed as one (the driver warns about a SQLite URL's `mode`).
    let server = (timed_out && backend == Backend::Postgres)
        .then(|| postgres_server(url))
        .flatten();
    let Some((host, port)) = server else {
        return open_failed(source);
    };
    let server = format!("{host}:{port}");
    let cause = if host.starts_with('/') {
        "no answer on the Unix socket before the connect timeout".to_owned()
    } else {
        let target = (host, port);
        tokio::task::spawn_blocking(move || probe(&target))
            .await
            .unwrap_or_else(|e| format!("the connection probe failed: {e}"))
    };
    ConnectError::Unreachable {
        server,
        cause,
        source,
    }
}

/// `host` and `port` of a PostgreSQL URL (the driver's own parsing: defaults, `host=` query).
fn postgres_server(url: &str) -> Option<(String, u16)> {
    #[cfg(feature = "postgres")]
    {
        let options: sea_orm::sqlx::postgres::PgConnectOptions = url.parse().ok()?;
        Some((options.get_host().to_owned(), options.get_port()))
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = url;
        None
    }
}

/// What a TCP connection to `target` answers, in words.
fn probe(target: &(String, u16)) -> String {
    use std::net::{TcpStream, ToSocketAddrs};
    let addrs = match (target.0.as_str(), target.1).to_socket_addrs() {
        Ok(addrs) => addrs.collect::<Vec<_>>(),
        Err(e) => return format!("the host name does not resolve ({e})"),
    };
    let mut last = "the host name resolves to no address".to_owned();
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, PROBE_TIMEOUT) {
            Ok(_) => {
                return format!(
                    "{addr} accepts TCP connections but no PostgreSQL session opened before the connect timeout (is it PostgreSQL, and below its max_connections?)"
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                last = format!("{addr} did not answer within {} s", PROBE_TIMEOUT.as_secs());
            }
            Err(e) => last = format!("{addr}: {e}"),
        }
    }
    last
}

/// The server's refusal inside `message` when it refused one of the driver's named prepared
/// statements (`sqlx_s_<n>`) as already existing (SQLSTATE 42P05) or missing (26000): what a
/// connection pooler in transaction mode causes, as it gives each transaction another
/// server session. `None` for any other message.
pub(crate) fn pooled_statement_clash(message: &str) -> Option<String> {
    let start = message.find("prepared statement \"sqlx_s_")?;
    let rest = &message[start..];
    ["already exists", "does not exist"]
        .into_iter()
        .find_map(|tail| {
            rest.find(tail)
                .map(|end| rest[..end + tail.len()].to_owned())
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_prepared_statement_clash_is_recognised_as_a_transaction_pooler() {
        let clash = pooled_statement_clash(
            "cannot adopt Tenantry's migration history from seaql_migrations: Query Error: error returned from database: prepared statement \"sqlx_s_1\" already exists at line 412",
        );
        assert_eq!(
            clash.as_deref(),
            Some("prepared statement \"sqlx_s_1\" already exists")
        );
        assert_eq!(
            pooled_statement_clash("prepared statement \"sqlx_s_12\" does not exist").as_deref(),
            Some("prepared statement \"sqlx_s_12\" does not exist")
        );
        // A host's own statement, or another refusal, is not ours to explain.
        assert_eq!(
            pooled_statement_clash("prepared statement \"mine\" already exists"),
            None
        );
        assert_eq!(
            pooled_statement_clash("relation \"sqlx_s_1\" already exists"),
            None
        );
        let message = ConnectError::TransactionPooler {
            cause: clash.unwrap_or_default(),
        }
        .to_string();
        assert!(message.contains("pool_mode = session"), "{message}");
    }

    /// A PostgreSQL server that refuses connections is named with its host and port and what
    /// the connection answered, not only "pool timed out".
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn an_unreachable_server_is_named_with_what_to_check() {
        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let error = connect_existing(&format!("postgres://u@127.0.0.1:{port}/db"), 1)
            .await
            .unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, ConnectError::Unreachable { .. }),
            "{message}"
        );
        assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
        assert!(message.contains("refused"), "{message}");
        assert!(message.contains("firewall"), "{message}");
    }

    /// A TLS file of the PostgreSQL URL that cannot be read is refused before any connection
    /// is tried (port 1: nothing listens there, so reaching the server would fail otherwise),
    /// naming the parameter and the file.
    #[cfg(feature = "postgres")]
    #[tokio::test]
    async fn case_011_a_missing_tls_file_is_refused_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("rds-ca.pem");
        let url = format!(
            "postgres://u:secret@127.0.0.1:1/db?sslmode=verify-full&sslrootcert={}",
            missing.display()
        );
        for result in [connect(&url, 1).await, connect_existing(&url, 1).await] {
            let error = result.unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, ConnectError::PostgresTlsFile { .. }),
                "{message}"
            );
            assert!(message.contains("sslrootcert file"), "{message}");
            assert!(
                message.contains(&missing.display().to_string()),
                "{message}"
            );
            assert!(!message.contains("secret"), "{message}");
        }
        let key_only = "postgres://u@127.0.0.1:1/db?sslmode=verify-full&sslkey=/k.pem";
        let error = connect(key_only, 1).await.unwrap_err();
        assert!(
            error.to_string().contains("sslkey is set without sslcert"),
            "{error}"
        );
    }

    /// An operator tool pointed at a SQLite file that does not exist is told so, with the path
    /// and what to do, and no file is created.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn a_missing_sqlite_file_is_named_and_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("typo.db");
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let error = connect_existing(&url, 1).await.unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, ConnectError::SqliteFileMissing { .. }),
            "{message}"
        );
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("tenantry serve"), "{message}");
        assert!(!path.exists(), "nothing was created");
    }

    /// A URL whose driver is not compiled is refused with an error naming the feature.
    #[test]
    fn a_url_needs_its_driver_compiled() {
        let message = check_driver(Backend::Postgres, true, false)
            .unwrap_err()
            .to_string();
        assert!(message.contains("no PostgreSQL driver"), "{message}");
        assert!(message.contains("`postgres` cargo feature"), "{message}");
        let message = check_driver(Backend::Sqlite, false, true)
            .unwrap_err()
            .to_string();
        assert!(message.contains("`sqlite` cargo feature"), "{message}");
        assert!(check_driver(Backend::Sqlite, true, false).is_ok());
        assert!(check_driver(Backend::Postgres, false, true).is_ok());
        assert!(matches!(
            backend_of("mysql://x"),
            Err(ConnectError::UnsupportedUrl { .. })
        ));
    }

    /// `connect` refuses a URL of a driver this build lacks before touching anything.
    #[tokio::test]
    async fn connect_names_the_missing_driver() {
        let result = connect("sqlite::memory:", 1).await;
        if cfg!(feature = "sqlite") {
            assert!(result.is_ok());
        } else {
            assert!(matches!(
                result,
                Err(ConnectError::DriverNotCompiled {
                    feature: "sqlite",
                    ..
                })
            ));
        }
    }
}
