//! SeaORM adapters implementing the Tenantry storage ports on SQLite and PostgreSQL.
//!
//! Architecture invariant: only this crate (and `migrations`) knows SeaORM. Entities are
//! private modules here and are converted to domain types at the boundary; port errors never
//! carry a `sea_orm::DbErr`.
//!
//! - [`mod@connect`]: open a pool (SQLite in WAL mode with a busy timeout, or PostgreSQL) and
//!   run the migrations, or wrap the host's pool ([`Database::from_connection`]) and migrate or
//!   check the mechanisms it uses ([`Database::migrate`], [`Database::check_schema`] with a
//!   [`Mechanisms`] selection);
//! - `pg_tls` (private, feature `postgres`): the libpq TLS parameters of a PostgreSQL URL
//!   (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`), checked before connecting and applied to
//!   every connection, and the TLS failures told in words ([`ConnectError::PostgresTls`]);
//! - [`pg_hosts`] (feature `postgres`): libpq's multi-host URLs and `target_session_attrs`;
//!   the pool finds the primary of a failover formation and follows it after a failover;
//! - `txn` (private): the explicit rollback the ports' store methods end an uncommitted
//!   transaction with, so a refusal answers with no row lock left held;
//! - `error` (private): the one mapping of a `DbErr` to the ports' shared `StoreError`;
//! - [`lifecycle`]: the lifecycle outbox and control-space repositories;
//! - [`host_storage`]: the host-storage port behind fences and connector state;
//! - [`directory`]: the directory projection repositories;
//! - [`wake`]: `NOTIFY` on intake and the health-checked PostgreSQL listener that wakes idle
//!   workers ([`wake::WakeListener`]);
//! - [`retention`] (features `lifecycle` and `directory`): bounded deletes of expired history;
//! - [`sqlite_file`]: the folder of a SQLite database file, checked before creating it, and
//!   the lock that keeps a second `tenantry serve` / `tenantry migrate` off it;
//! - `testing` (feature `testing`): a fresh migrated database per test;
//! - `bench` (feature `bench`): bulk fixtures and SQL baselines for `cargo xtask bench`;
//! - `throwaway` (features `testing` and `bench`): create and drop a scratch PostgreSQL
//!   database on an existing server, the one helper both use.
//!
//! Cargo features `sqlite` and `postgres` (both default) select the database drivers.
//!
//! # Features
//! `lifecycle`, `directory` and `fences` (all default) each enable one mechanism's adapter and
//! its domain crate: with `default-features = false, features = ["fences", "sqlite"]` only
//! [`mod@connect`] and the host-storage adapter are compiled (`sqlite` and `postgres`, both
//! default, are the drivers: keep at least one). Feature `testing` adds the module `testing`.
//!
//! # Example
//! Open (and migrate) a database, then build the adapters the engine runs on. An in-memory
//! SQLite database here; a service passes `sqlite://PATH?mode=rwc` or
//! `postgres://USER@HOST/DB`:
//! ```
//! use serde_json::json;
//! use tenantry_fence::Binding;
//! use tenantry_ports::host_storage::HostStorage;
//! use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
//! use tenantry_store_seaorm::{Backend, connect};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let db = connect("sqlite::memory:", 1).await?; // at most 1 pooled connection
//! assert_eq!(db.backend, Backend::Sqlite);
//!
//! #[cfg(feature = "lifecycle")] // for CommandIntake, Dispatcher, Worker
//! let _lifecycle = tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore::new(&db);
//! let host_storage = SeaOrmHostStorage::new(&db); // for ScopedWrites
//! let binding = Binding::parse("installation-1")?;
//! host_storage.set(&binding, "greeting", &json!("hello")).await?;
//! assert_eq!(host_storage.get(&binding, "greeting").await?, Some(json!("hello")));
//! # Ok(())
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
// A build with only some mechanisms documents links to modules it does not compile; the
// default and all-features builds check every link (`cargo xtask ci`, step "doc").
#![cfg_attr(
    not(all(feature = "lifecycle", feature = "directory", feature = "fences")),
    allow(rustdoc::broken_intra_doc_links)
)]

#[cfg(feature = "bench")]
pub mod bench;
pub mod connect;
#[cfg(feature = "directory")]
pub mod directory;
#[cfg_attr(
    not(any(feature = "lifecycle", feature = "directory", feature = "fences")),
    allow(
        dead_code,
        reason = "a driver-only build has no store that maps driver errors"
    )
)]
mod error;
#[cfg(feature = "fences")]
pub mod host_storage;
#[cfg(feature = "lifecycle")]
pub mod lifecycle;
#[cfg(feature = "postgres")]
pub mod pg_hosts;
#[cfg(feature = "postgres")]
mod pg_tls;
#[cfg(all(feature = "lifecycle", feature = "directory"))]
pub mod retention;
pub mod sqlite_file;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(any(test, feature = "testing", feature = "bench"))]
pub mod throwaway;
#[cfg(any(feature = "lifecycle", feature = "directory"))]
mod txn;
#[cfg(feature = "lifecycle")]
use tenantry_ports::trace_context;
#[cfg(feature = "lifecycle")]
pub mod wake;

pub use connect::{Backend, ConnectError, Database, connect, connect_existing};
#[cfg(feature = "directory")]
pub use directory::SeaOrmDirectoryStore;
#[cfg(feature = "fences")]
pub use host_storage::SeaOrmHostStorage;
#[cfg(feature = "lifecycle")]
pub use lifecycle::SeaOrmLifecycleStore;
#[cfg(all(feature = "lifecycle", feature = "directory"))]
pub use retention::SeaOrmRetentionStore;
pub use tenantry_migrations::{Mechanism, Mechanisms, MigrateError};
