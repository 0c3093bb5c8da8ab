//! A fresh database for each test: migrated ([`fresh_database`]) or empty ([`empty_database`]).
//!
//! The backend is chosen by the environment, so the same test binary runs on both:
//! - `TENANTRY_TEST_PG_URL` unset: a SQLite file in a new temporary folder (WAL mode, as in
//!   production);
//! - `TENANTRY_TEST_PG_URL=postgres://user@host:port/db`: a new database
//!   `tenantry_test_<random>` is created on that server for the test (with
//!   [`crate::throwaway`]). `cargo xtask ci` sets it to a throwaway cluster.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use sea_orm::ConnectionTrait;

use crate::connect::{Backend, Database, open_pool};
use crate::throwaway::create_postgres_database;
use tenantry_migrations::Mechanisms;

/// Environment variable naming the PostgreSQL server for the PostgreSQL run of the tests.
pub const PG_URL_ENV: &str = "TENANTRY_TEST_PG_URL";

/// A test database; the temporary folder (SQLite) lives as long as this value.
#[derive(Debug)]
pub struct TestDatabase {
    /// The migrated database.
    pub db: Database,
    url: String,
    _dir: Option<tempfile::TempDir>,
}

impl TestDatabase {
    /// The database's URL, for a process under test (the `tenantry` binary) to open it too.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The backend under test.
    pub fn backend(&self) -> Backend {
        self.db.backend
    }
}

/// Creates a fresh migrated database on the backend selected by [`PG_URL_ENV`].
///
/// # Panics
/// When the database cannot be created: tests have no better way to report it.
pub async fn fresh_database() -> TestDatabase {
    fresh_database_with_pool(0).await
}

/// [`fresh_database`] with a pool of `max_connections` (0: the default, 4 on SQLite and 8 on
/// PostgreSQL), e.g. 1 to test that no unit of work leaves a pooled connection unusable.
///
/// # Panics
/// When the database cannot be created.
pub async fn fresh_database_with_pool(max_connections: u32) -> TestDatabase {
    let db = empty_database_with_pool(max_connections).await;
    db.db
        .migrate(Mechanisms::ALL)
        .await
        .expect("migrate the test database");
    db
}

/// A fresh database with nothing in it (no table, no migration applied), on the backend
/// selected by [`PG_URL_ENV`], for tests of migrating beside a host's own schema.
///
/// # Panics
/// When the database cannot be created.
pub async fn empty_database() -> TestDatabase {
    empty_database_with_pool(0).await
}

async fn empty_database_with_pool(max_connections: u32) -> TestDatabase {
    match std::env::var(PG_URL_ENV) {
        Ok(url) if !url.is_empty() => fresh_postgres(&url, max_connections).await,
        _ => fresh_sqlite(max_connections).await,
    }
}

async fn fresh_sqlite(max_connections: u32) -> TestDatabase {
    let dir = tempfile::tempdir().expect("create temp dir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("test.db").display());
    let pool = if max_connections == 0 {
        4
    } else {
        max_connections
    };
    let db = open_pool(&url, pool)
        .await
        .expect("open sqlite test database");
    TestDatabase {
        db,
        url,
        _dir: Some(dir),
    }
}

async fn fresh_postgres(url: &str, max_connections: u32) -> TestDatabase {
    let name = format!("tenantry_test_{}", uuid::Uuid::new_v4().simple());
    let url = create_postgres_database(url, &name)
        .await
        .expect("create test database");
    let pool = if max_connections == 0 {
        8
    } else {
        max_connections
    };
    let db = open_pool(&url, pool)
        .await
        .expect("open PostgreSQL test database");
    TestDatabase {
        db,
        url,
        _dir: None,
    }
}

/// How many other sessions of `db`'s database are idle inside a transaction (PostgreSQL;
/// always 0 on SQLite). A unit of work that was cancelled mid-transaction and returned its
/// connection to the pool shows up here.
///
/// # Panics
/// When the query fails.
pub async fn sessions_idle_in_transaction(db: &Database) -> usize {
    if db.backend != Backend::Postgres {
        return 0;
    }
    db.conn
        .query_all_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            "SELECT state FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND state LIKE 'idle in transaction%'",
        ))
        .await
        .expect("read pg_stat_activity")
        .len()
}

/// Takes the retention lock ([`crate::retention::RETENTION_LOCK_KEY`]) as a session lock on one
/// of `db`'s pooled connections, as another replica's prune batch would hold it (PostgreSQL;
/// nothing on SQLite, which has no retention lock). With a pool of one connection
/// ([`fresh_database_with_pool`]`(1)`) it stays held until the pool closes, so every prune
/// batch of another pool answers `Busy` meanwhile.
///
/// # Panics
/// When the statement fails.
#[cfg(all(feature = "lifecycle", feature = "directory"))]
pub async fn hold_retention_lock(db: &Database) {
    if db.backend != Backend::Postgres {
        return;
    }
    db.conn
        .execute_raw(sea_orm::Statement::from_string(
            sea_orm::DbBackend::Postgres,
            format!(
                "SELECT pg_advisory_lock({})",
                crate::retention::RETENTION_LOCK_KEY
            ),
        ))
        .await
        .expect("take the retention lock");
}
