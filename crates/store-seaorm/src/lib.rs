//! SeaORM adapters implementing the Tenantry storage ports on SQLite and PostgreSQL.
//!
//! Architecture invariant: only this crate (and `migrations`) knows SeaORM. Entities are
//! private modules here and are converted to domain types at the boundary; port errors never
//! carry a `sea_orm::DbErr`.
//!
//! - [`connect()`]: open a pool (SQLite in WAL mode with a busy timeout, or PostgreSQL) and
//!   run the migrations, or wrap the host's pool ([`Database::from_connection`]) and migrate or
//!   check the mechanisms it uses ([`Database::migrate`], [`Database::check_schema`] with a
//!   [`Mechanisms`] selection);
//! - [`lifecycle`]: the lifecycle outbox and control-space repositories;
//! - [`host_storage`]: the host-storage port behind fences and connector state;
//! - [`directory`]: the directory projection repositories;
//! - [`testing`] (feature `testing`): a fresh migrated database per test;
//! - `bench` (feature `bench`): bulk fixtures and SQL baselines for `cargo xtask bench`.
//!
//! Cargo features `sqlite` and `postgres` (both default) select the database drivers.

#[cfg(feature = "bench")]
pub mod bench;
pub mod connect;
pub mod directory;
pub mod host_storage;
pub mod lifecycle;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use connect::{Backend, ConnectError, Database, connect, connect_existing};
pub use directory::SeaOrmDirectoryStore;
pub use host_storage::SeaOrmHostStorage;
pub use lifecycle::SeaOrmLifecycleStore;
pub use tenantry_migrations::{Mechanism, Mechanisms, MigrateError};
