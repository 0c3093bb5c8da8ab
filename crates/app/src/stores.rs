//! The wiring that builds the stores: the one module of the app that names the storage adapter
//! (`tenantry-store-seaorm`; xtask's tidy test `only_the_app_wiring_names_the_storage_adapter`
//! checks it). It opens the database ([`open`], [`open_existing`], the SQLite lock [`lock`])
//! and builds every store the service, the operator CLI and the directory wiring use, handing
//! them on as ports ([`Stores`], trait objects). So the rest of the app works on the ports, and
//! a harness can hand the service decorated stores ([`Stores::map_lifecycle`]: the chaos
//! harness's replica with a planted settle, `crates/chaos/src/bin/planted_replica.rs`).

use std::process::ExitCode;
use std::sync::Arc;

pub use tenantry_store_seaorm::Database;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::sqlite_file::{self, SqliteFileError, SqliteLock};
use tenantry_store_seaorm::wake::{ListenerConfig, WakeListener};
use tenantry_store_seaorm::{SeaOrmRetentionStore, directory::SeaOrmDirectoryStore};

use tenantry_engine::lifecycle::Wakeups;
use tenantry_operator::directory::DirectoryReads;
use tenantry_operator::ports::{FenceStorage, Store};
use tenantry_ports::directory::DirectoryProjectionStore;
use tenantry_ports::retention::RetentionStore;

use crate::config::{Config, redact_url};

/// Exit code of `tenantry serve` / `tenantry migrate` when another process holds the SQLite
/// database's lock (EX_TEMPFAIL, as [`crate::ops::PRUNE_BUSY_EXIT`]).
pub const DATABASE_IN_USE_EXIT: u8 = 75;

/// The directory projection's store as the projector writes it and the operator front ends
/// read it.
pub trait ProjectionStore: DirectoryProjectionStore + DirectoryReads + 'static {}

impl<T: DirectoryProjectionStore + DirectoryReads + 'static> ProjectionStore for T {}

/// Every store of one database, as ports. Cheap to clone (the stores share the pool).
#[derive(Clone)]
pub struct Stores {
    /// The outbox and the control spaces, with the operator's reads and actions.
    pub lifecycle: Store,
    /// Installation-bound host storage behind the fences.
    pub fences: Arc<dyn FenceStorage>,
    /// Retention's bounded removal of expired history.
    pub retention: Arc<dyn RetentionStore>,
    /// The directory projection's tables.
    pub directory: Arc<dyn ProjectionStore>,
    db: Database,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stores").finish_non_exhaustive()
    }
}

impl Stores {
    /// The SeaORM stores of `db` (SQLite or PostgreSQL), all on the one pool.
    pub fn new(db: &Database) -> Self {
        Self {
            lifecycle: Arc::new(SeaOrmLifecycleStore::new(db)),
            fences: Arc::new(SeaOrmHostStorage::new(db)),
            retention: Arc::new(SeaOrmRetentionStore::new(db)),
            directory: Arc::new(SeaOrmDirectoryStore::new(db)),
            db: db.clone(),
        }
    }

    /// The same stores with the lifecycle store replaced by `decorate(lifecycle)` (a decorator
    /// that wraps it, for instance).
    #[must_use]
    pub fn map_lifecycle(mut self, decorate: impl FnOnce(Store) -> Store) -> Self {
        self.lifecycle = decorate(self.lifecycle);
        self
    }

    /// The database the stores are on.
    pub fn database(&self) -> &Database {
        &self.db
    }

    /// On PostgreSQL, starts the listener connection that wakes `wakeups` on another process's
    /// `NOTIFY` of a new command; `None` on SQLite (one process serves a SQLite file).
    pub fn spawn_wake_listener(&self, wakeups: Wakeups) -> Option<WakeHandle> {
        WakeListener::spawn(&self.db, wakeups, ListenerConfig::default()).map(WakeHandle)
    }
}

/// The running wake-up listener of [`Stores::spawn_wake_listener`].
pub struct WakeHandle(WakeListener);

impl std::fmt::Debug for WakeHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WakeHandle").finish_non_exhaustive()
    }
}

impl WakeHandle {
    /// Stops the listener and closes its connection.
    pub async fn stop(self) {
        self.0.stop().await;
    }
}

/// Takes the exclusive lock of the configured SQLite database for a process that serves or
/// migrates it ([`tenantry_store_seaorm::sqlite_file::lock`]; `None` on PostgreSQL), held
/// until the returned value is dropped. Also refuses, naming it, a folder that is missing or
/// refuses new files.
///
/// # Errors
/// The exit code to return: [`DATABASE_IN_USE_EXIT`] when another `serve` or `migrate` holds
/// the database, 1 for the folder or another I/O error.
pub fn lock(config: &Config) -> Result<Option<SqliteLock>, ExitCode> {
    sqlite_file::lock(&config.database_url).map_err(|e| {
        eprintln!("tenantry: {e}");
        if matches!(e, SqliteFileError::InUse { .. }) {
            ExitCode::from(DATABASE_IN_USE_EXIT)
        } else {
            ExitCode::FAILURE
        }
    })
}

/// Opens (and migrates) the configured database; prints the error and returns the exit code
/// on failure.
///
/// # Errors
/// The exit code to return when the database cannot be opened.
pub async fn open(config: &Config) -> Result<Database, ExitCode> {
    tenantry_store_seaorm::connect(&config.database_url, config.database_max_connections)
        .await
        .map_err(|e| cannot_open(config, &e))
}

/// Opens the configured database for an operator command: nothing is created or migrated,
/// and a missing database or an outdated schema is an error that says to run `tenantry migrate`.
///
/// # Errors
/// The exit code to return when the database cannot be opened.
pub async fn open_existing(config: &Config) -> Result<Database, ExitCode> {
    tenantry_store_seaorm::connect_existing(&config.database_url, config.database_max_connections)
        .await
        .map_err(|e| cannot_open(config, &e))
}

fn cannot_open(config: &Config, error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!(
        "tenantry: cannot open database {}: {error}",
        redact_url(&config.database_url)
    );
    ExitCode::FAILURE
}

/// Closes the database pool (after [`crate::service::Service::shutdown`], or at the end of an
/// operator command); a failure is logged, not returned.
pub async fn close(db: Database) {
    if let Err(e) = db.conn.close().await {
        tracing::warn!(error = %e, "closing the database pool failed");
    }
}
