//! Opening a database: SQLite (WAL, busy timeout, serialized writers) or PostgreSQL.

use std::time::Duration;

use sea_orm::{ConnectOptions, DatabaseConnection, DbBackend, sqlx::sqlite::SqliteJournalMode};
use tenantry_migrations::{Migrator, MigratorTrait};

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

/// A migrated connection pool plus the backend it talks to.
#[derive(Debug, Clone)]
pub struct Database {
    /// The SeaORM connection pool.
    pub conn: DatabaseConnection,
    /// The engine behind `conn`.
    pub backend: Backend,
}

/// Why a database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL scheme is neither `sqlite:` nor `postgres:` / `postgresql:`.
    #[error(
        "unsupported database URL {url:?}: use sqlite://PATH?mode=rwc or postgres://USER@HOST/DB"
    )]
    UnsupportedUrl {
        /// The refused URL.
        url: String,
    },
    /// Connecting or migrating failed; the message comes from the driver.
    #[error("cannot open database: {0}")]
    Open(String),
    /// The database exists but its schema is missing or older than this binary's: run
    /// `tenantry migrate` (or start `tenantry serve`, which migrates) first.
    #[error(
        "database schema is not initialized or not up to date ({pending} migrations pending); run `tenantry migrate` first"
    )]
    SchemaNotCurrent {
        /// Migrations this binary knows that the database has not applied.
        pending: usize,
    },
}

/// Opens `url` without creating or migrating anything, for read-mostly operator tools.
///
/// A SQLite file must already exist (`mode=rwc` is read as `mode=rw`), and the schema must be
/// exactly this binary's (no pending migration).
///
/// # Errors
/// [`ConnectError::UnsupportedUrl`], [`ConnectError::Open`] when the database cannot be opened
/// (for SQLite: the file does not exist), [`ConnectError::SchemaNotCurrent`] when migrations are
/// pending.
pub async fn connect_existing(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let url = if url.starts_with("sqlite:") {
        url.replace("mode=rwc", "mode=rw")
    } else {
        url.to_owned()
    };
    let db = open_pool(&url, max_connections).await?;
    let pending = match Migrator::get_pending_migrations_read_only(&db.conn).await {
        Ok(pending) => pending.len(),
        Err(_) => Migrator::migrations().len(),
    };
    if pending > 0 {
        let _ = db.conn.close().await;
        return Err(ConnectError::SchemaNotCurrent { pending });
    }
    Ok(db)
}

/// Opens `url`, applies pending migrations and returns the pool.
///
/// SQLite URLs (`sqlite://path?mode=rwc`, `sqlite::memory:`) get WAL journaling, a busy timeout
/// of [`SQLITE_BUSY_TIMEOUT_MS`] and foreign keys; PostgreSQL URLs are used as given.
/// `max_connections` bounds the pool.
///
/// # Errors
/// [`ConnectError::UnsupportedUrl`] for another scheme, [`ConnectError::Open`] when the server
/// is unreachable or a migration fails.
pub async fn connect(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let db = open_pool(url, max_connections).await?;
    Migrator::up(&db.conn, None)
        .await
        .map_err(|e| ConnectError::Open(e.to_string()))?;
    Ok(db)
}

async fn open_pool(url: &str, max_connections: u32) -> Result<Database, ConnectError> {
    let backend = if url.starts_with("sqlite:") {
        Backend::Sqlite
    } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
        Backend::Postgres
    } else {
        return Err(ConnectError::UnsupportedUrl {
            url: url.to_owned(),
        });
    };
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(max_connections)
        .min_connections(0)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    if backend == Backend::Sqlite {
        options.map_sqlx_sqlite_opts(|opts| {
            opts.journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(Duration::from_millis(SQLITE_BUSY_TIMEOUT_MS))
                .foreign_keys(true)
        });
    }
    let conn = sea_orm::Database::connect(options)
        .await
        .map_err(|e| ConnectError::Open(e.to_string()))?;
    debug_assert_eq!(
        conn.get_database_backend(),
        match backend {
            Backend::Sqlite => DbBackend::Sqlite,
            Backend::Postgres => DbBackend::Postgres,
        }
    );
    Ok(Database { conn, backend })
}
