//! Schema migrations for Tenantry, built on sea-orm-migration: one migrator per mechanism,
//! each with its own history table, so a host application can run any of them alone, beside
//! its own migrator on the same database, or append their migrations to its own list.
//!
//! Architecture invariant: migrations declare their own identifier enums and never import the
//! store adapter's entities or any domain type, so later entity changes cannot rewrite history.
//! Timestamps are stored as `BIGINT` Unix milliseconds (UTC) on both backends.
//!
//! Every table is named `tenantry_<name>` ([`naming`]); a migration that creates a table first
//! fails with "table tenantry_x already exists and is not Tenantry's" when one does.
//!
//! Each migration runs in one transaction with its history row on both backends
//! ([`ATOMIC_STEPS`]): an interrupted run leaves whole steps, and the next run resumes.
//!
//! | migrator | history table | migrations |
//! |---|---|---|
//! | [`LifecycleMigrator`] | `tenantry_lifecycle_migrations` | [`m0001_lifecycle`], [`m0004_lifecycle_claim_index`], [`m0005_lifecycle_failures`], [`m0006_lifecycle_attempt_window`], `m0007_lifecycle_table_prefix`, [`m0010_lifecycle_retention`], [`m0013_lifecycle_attempt_errors`], [`m0014_lifecycle_update_room`], [`m0015_lifecycle_trace_context`], [`m0016_lifecycle_turns`] |
//! | [`FencesMigrator`] | `tenantry_fences_migrations` | [`m0002_host_storage`], `m0008_host_storage_table_prefix`, [`m0012_host_storage_retention`] |
//! | [`DirectoryMigrator`] | `tenantry_directory_migrations` | [`m0003_directory`], `m0009_directory_table_prefix`, [`m0011_directory_retention`] |
//!
//! - [`m0001_lifecycle`]: `control_spaces` and `lifecycle_outbox`;
//! - [`m0002_host_storage`]: `host_storage` (fences and connector state);
//! - [`m0003_directory`]: the directory projection tables;
//! - [`m0004_lifecycle_claim_index`]: the claim index of the outbox (live commands in due order;
//!   replaced by [`m0016_lifecycle_turns`]'s turn order);
//! - [`m0005_lifecycle_failures`]: the attempt budget column, the status index of the commands
//!   gauge, and the operator action log.
//! - [`m0006_lifecycle_attempt_window`]: when the last attempt of a command could still send.
//! - [`m0010_lifecycle_retention`], [`m0011_directory_retention`]: the indexes retention reads
//!   (finished commands, the action log and inbox receipts in time order).
//! - [`m0012_host_storage_retention`]: when each host-storage record was last written, and the
//!   index of tombstones in that order (retention of cleared fence records).
//! - [`m0013_lifecycle_attempt_errors`]: the attempt-error log (one row per failed attempt or
//!   operator abandon of a command, removed with its command).
//! - [`m0014_lifecycle_update_room`]: lower fill factors on PostgreSQL (outbox 30, control
//!   spaces 50), so claims and compare-and-sets stay HOT updates.
//! - [`m0015_lifecycle_trace_context`]: the caller's W3C trace context on each command (a
//!   nullable `trace_context`), continued by every dispatch.
//! - [`m0016_lifecycle_turns`]: each command's turn (`turn_at`) and the claim index in turn
//!   order (tenant-fair claims), with the index of each tenant's live turns.
//! - [`table_prefix`]: renames the tables of a database created before the prefix.
//!
//! Databases migrated before these history tables existed recorded everything in
//! sea-orm-migration's default `seaql_migrations`; [`migrate`] first moves those rows
//! ([`adopt_legacy_history`]), then the prefix migrations rename the tables keeping their rows.

// `MigrationTrait` is declared through async-trait with an elided lifetime; implementations match it.
#![allow(elided_lifetimes_in_paths)]

use std::collections::HashSet;

pub use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{DatabaseConnection, Statement, TransactionTrait};

/// Implements `MigrationTrait` for the module's `Migration` as every Tenantry migration is:
/// one transaction with its history row on both backends ([`ATOMIC_STEPS`]), then the `up` and
/// `down` bodies given, with the `SchemaManager` bound to the name between the bars:
/// `atomic_migration! { |manager| up { … } down { … } }`.
macro_rules! atomic_migration {
    (|$manager:ident| up $up:block down $down:block) => {
        #[async_trait::async_trait]
        impl MigrationTrait for Migration {
            /// One transaction with its history row on both backends ([`crate::ATOMIC_STEPS`]).
            fn use_transaction(&self) -> Option<bool> {
                crate::ATOMIC_STEPS
            }

            async fn up(&self, $manager: &SchemaManager) -> Result<(), DbErr> $up

            async fn down(&self, $manager: &SchemaManager) -> Result<(), DbErr> $down
        }
    };
}

pub mod m0001_lifecycle;
pub mod m0002_host_storage;
pub mod m0003_directory;
pub mod m0004_lifecycle_claim_index;
pub mod m0005_lifecycle_failures;
pub mod m0006_lifecycle_attempt_window;
pub mod m0010_lifecycle_retention;
pub mod m0011_directory_retention;
pub mod m0012_host_storage_retention;
pub mod m0013_lifecycle_attempt_errors;
pub mod m0014_lifecycle_update_room;
pub mod m0015_lifecycle_trace_context;
pub mod m0016_lifecycle_turns;
pub mod naming;
pub mod table_prefix;

pub use naming::{TABLE_PREFIX, prefixed};

/// What every Tenantry migration answers to sea-orm-migration's
/// [`MigrationTrait::use_transaction`]: `Some(true)`, so each migration's statements and its
/// history row commit in one transaction on SQLite as on PostgreSQL (the library's default
/// wraps only PostgreSQL). A run interrupted at any point (a failed statement, SIGKILL, a full
/// disk) leaves every migration either applied and recorded or not applied at all, so the
/// next run resumes; a host migrator that appends Tenantry's migrations to its own list gets
/// the same.
pub const ATOMIC_STEPS: Option<bool> = Some(true);

/// History table of [`LifecycleMigrator`].
pub const LIFECYCLE_HISTORY_TABLE: &str = "tenantry_lifecycle_migrations";
/// History table of [`FencesMigrator`].
pub const FENCES_HISTORY_TABLE: &str = "tenantry_fences_migrations";
/// History table of [`DirectoryMigrator`].
pub const DIRECTORY_HISTORY_TABLE: &str = "tenantry_directory_migrations";
/// sea-orm-migration's default history table: where Tenantry recorded its migrations before
/// it had its own, and where a host migrator that appended Tenantry's migrations records them.
pub const LEGACY_HISTORY_TABLE: &str = "seaql_migrations";

/// The lifecycle saga's tables (`tenantry_control_spaces`, `tenantry_lifecycle_outbox`,
/// `tenantry_lifecycle_command_actions`, `tenantry_lifecycle_attempt_errors`), recorded in
/// [`LIFECYCLE_HISTORY_TABLE`].
pub struct LifecycleMigrator;

#[async_trait::async_trait]
impl MigratorTrait for LifecycleMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m0001_lifecycle::Migration),
            Box::new(m0004_lifecycle_claim_index::Migration),
            Box::new(m0005_lifecycle_failures::Migration),
            Box::new(m0006_lifecycle_attempt_window::Migration),
            Box::new(table_prefix::LifecyclePrefix),
            Box::new(m0010_lifecycle_retention::Migration),
            Box::new(m0013_lifecycle_attempt_errors::Migration),
            Box::new(m0014_lifecycle_update_room::Migration),
            Box::new(m0015_lifecycle_trace_context::Migration),
            Box::new(m0016_lifecycle_turns::Migration),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new(LIFECYCLE_HISTORY_TABLE).into_iden()
    }
}

/// The host-storage table behind fences and connector state (`tenantry_host_storage`),
/// recorded in [`FENCES_HISTORY_TABLE`].
pub struct FencesMigrator;

#[async_trait::async_trait]
impl MigratorTrait for FencesMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m0002_host_storage::Migration),
            Box::new(table_prefix::HostStoragePrefix),
            Box::new(m0012_host_storage_retention::Migration),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new(FENCES_HISTORY_TABLE).into_iden()
    }
}

/// The directory projection's tables (`tenantry_accounts`, `tenantry_workspaces`, …),
/// recorded in [`DIRECTORY_HISTORY_TABLE`].
pub struct DirectoryMigrator;

#[async_trait::async_trait]
impl MigratorTrait for DirectoryMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m0003_directory::Migration),
            Box::new(table_prefix::DirectoryPrefix),
            Box::new(m0011_directory_retention::Migration),
        ]
    }

    fn migration_table_name() -> DynIden {
        Alias::new(DIRECTORY_HISTORY_TABLE).into_iden()
    }
}

/// One of Tenantry's mechanisms, each with its own tables and migrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mechanism {
    /// The lifecycle saga ([`LifecycleMigrator`]).
    Lifecycle,
    /// Fences and connector state ([`FencesMigrator`]).
    Fences,
    /// The directory projection ([`DirectoryMigrator`]).
    Directory,
}

impl Mechanism {
    /// Every mechanism, in migration order.
    pub const ALL: [Mechanism; 3] = [Self::Lifecycle, Self::Fences, Self::Directory];

    /// The lower-case name (`lifecycle`, `fences`, `directory`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lifecycle => "lifecycle",
            Self::Fences => "fences",
            Self::Directory => "directory",
        }
    }

    /// The history table of this mechanism's migrator.
    pub fn history_table(self) -> &'static str {
        match self {
            Self::Lifecycle => LIFECYCLE_HISTORY_TABLE,
            Self::Fences => FENCES_HISTORY_TABLE,
            Self::Directory => DIRECTORY_HISTORY_TABLE,
        }
    }

    /// The migrations of this mechanism, in order (what its migrator's `migrations()` returns).
    pub fn migrations(self) -> Vec<Box<dyn MigrationTrait>> {
        match self {
            Self::Lifecycle => LifecycleMigrator::migrations(),
            Self::Fences => FencesMigrator::migrations(),
            Self::Directory => DirectoryMigrator::migrations(),
        }
    }

    /// The tables of this mechanism, unprefixed.
    fn tables(self) -> &'static [&'static str] {
        match self {
            Self::Lifecycle => &table_prefix::LIFECYCLE_TABLES,
            Self::Fences => &table_prefix::FENCES_TABLES,
            Self::Directory => &table_prefix::DIRECTORY_TABLES,
        }
    }

    /// The migrations Tenantry 0.1 recorded in `seaql_migrations` for this mechanism, and an
    /// unprefixed table it created.
    fn legacy(self) -> (&'static [&'static str], &'static str) {
        match self {
            Self::Lifecycle => (
                &[
                    "m0001_lifecycle",
                    "m0004_lifecycle_claim_index",
                    "m0005_lifecycle_failures",
                    "m0006_lifecycle_attempt_window",
                ],
                "lifecycle_outbox",
            ),
            Self::Fences => (&["m0002_host_storage"], "host_storage"),
            Self::Directory => (&["m0003_directory"], "accounts"),
        }
    }

    /// The prefixed tables created by migration `name` of this mechanism.
    fn created_by(self, name: &str) -> Vec<String> {
        let tables: &[&str] = match name {
            "m0001_lifecycle" => &["control_spaces", "lifecycle_outbox"],
            "m0005_lifecycle_failures" => &["lifecycle_command_actions"],
            "m0013_lifecycle_attempt_errors" => &[m0013_lifecycle_attempt_errors::ERRORS],
            "m0002_host_storage" | "m0003_directory" => self.tables(),
            _ => &[],
        };
        tables.iter().map(|t| prefixed(t)).collect()
    }

    /// Creates this mechanism's history table if it does not exist.
    async fn install<C: ConnectionTrait>(self, db: &C) -> Result<(), DbErr> {
        match self {
            Self::Lifecycle => LifecycleMigrator::install(db).await,
            Self::Fences => FencesMigrator::install(db).await,
            Self::Directory => DirectoryMigrator::install(db).await,
        }
    }

    async fn up(self, db: &DatabaseConnection) -> Result<(), DbErr> {
        match self {
            Self::Lifecycle => LifecycleMigrator::up(db, None).await,
            Self::Fences => FencesMigrator::up(db, None).await,
            Self::Directory => DirectoryMigrator::up(db, None).await,
        }
    }
}

/// A selection of mechanisms, e.g. `Mechanisms::FENCES` for a fences-only host, or
/// `Mechanisms::LIFECYCLE | Mechanisms::FENCES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mechanisms {
    lifecycle: bool,
    fences: bool,
    directory: bool,
}

impl Mechanisms {
    /// No mechanism.
    pub const NONE: Self = Self {
        lifecycle: false,
        fences: false,
        directory: false,
    };
    /// The lifecycle saga only.
    pub const LIFECYCLE: Self = Self {
        lifecycle: true,
        ..Self::NONE
    };
    /// Fences and connector state only.
    pub const FENCES: Self = Self {
        fences: true,
        ..Self::NONE
    };
    /// The directory projection only.
    pub const DIRECTORY: Self = Self {
        directory: true,
        ..Self::NONE
    };
    /// Every mechanism (what the `tenantry` service uses).
    pub const ALL: Self = Self {
        lifecycle: true,
        fences: true,
        directory: true,
    };

    /// Both selections (the `|` operator, usable in a `const`).
    #[must_use]
    pub const fn union(self, other: Self) -> Self {
        Self {
            lifecycle: self.lifecycle || other.lifecycle,
            fences: self.fences || other.fences,
            directory: self.directory || other.directory,
        }
    }

    /// Whether `mechanism` is selected.
    pub fn contains(self, mechanism: Mechanism) -> bool {
        match mechanism {
            Mechanism::Lifecycle => self.lifecycle,
            Mechanism::Fences => self.fences,
            Mechanism::Directory => self.directory,
        }
    }

    /// The selected mechanisms, in migration order.
    pub fn iter(self) -> impl Iterator<Item = Mechanism> {
        Mechanism::ALL
            .into_iter()
            .filter(move |m| self.contains(*m))
    }
}

impl std::ops::BitOr for Mechanisms {
    type Output = Self;

    fn bitor(self, other: Self) -> Self {
        self.union(other)
    }
}

impl From<Mechanism> for Mechanisms {
    fn from(mechanism: Mechanism) -> Self {
        match mechanism {
            Mechanism::Lifecycle => Self::LIFECYCLE,
            Mechanism::Fences => Self::FENCES,
            Mechanism::Directory => Self::DIRECTORY,
        }
    }
}

/// Why [`migrate`] failed. Nothing after the failing step ran; each migration that succeeded
/// before it stays applied and recorded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// A table Tenantry is about to create already exists and its history does not record
    /// creating it: it belongs to someone else. Nothing was created for that mechanism.
    #[error("{}", naming::foreign_table_message(table, history_table))]
    ForeignTable {
        /// The existing table (prefixed name).
        table: String,
        /// The history table that does not record it.
        history_table: &'static str,
    },
    /// Moving Tenantry's rows out of `seaql_migrations` (a database migrated before the history
    /// tables existed) failed; nothing was moved.
    #[error("cannot adopt Tenantry's migration history from seaql_migrations: {source}")]
    AdoptHistory {
        /// The database error.
        #[source]
        source: DbErr,
    },
    /// A migration of `mechanism` failed (the database error says which statement and why).
    #[error("migrating Tenantry's {} tables failed: {source}", mechanism.as_str())]
    Migration {
        /// The mechanism whose migrator failed.
        mechanism: Mechanism,
        /// The database error.
        #[source]
        source: DbErr,
    },
}

/// Applies every pending migration of the selected mechanisms, each recorded in its own
/// history table. First moves Tenantry's rows out of `seaql_migrations` when the database was
/// migrated before the history tables existed ([`adopt_legacy_history`]), and checks that no
/// table about to be created exists already.
///
/// Several processes may call it at once on one database (replicas starting together): a
/// mechanism whose run fails is run again after a short wait (up to 3 runs, 200 ms then 400 ms
/// apart), and counts as done as soon as its history records every migration.
///
/// # Errors
/// [`MigrateError::ForeignTable`] when a table to create exists (nothing of that mechanism is
/// created), [`MigrateError::AdoptHistory`], [`MigrateError::Migration`] when a migration fails.
pub async fn migrate(db: &DatabaseConnection, mechanisms: Mechanisms) -> Result<(), MigrateError> {
    adopt_legacy_history(db)
        .await
        .map_err(|source| MigrateError::AdoptHistory { source })?;
    for mechanism in mechanisms.iter() {
        let mut attempt = 1;
        loop {
            match migrate_one(db, mechanism).await {
                Ok(()) => break,
                // Two processes migrating a fresh database at once: the loser's statements
                // meet the winner's tables (a unique violation on PostgreSQL's catalog, or a
                // table that looks foreign before the winner's history row is visible). Once
                // the winner is done, the history records every migration: nothing is left.
                Err(_) if attempt < CONCURRENT_MIGRATE_ATTEMPTS => {
                    tokio::time::sleep(std::time::Duration::from_millis(200 * attempt)).await;
                    let done = read_versions(db, mechanism.history_table())
                        .await
                        .is_ok_and(|applied| {
                            mechanism
                                .migrations()
                                .iter()
                                .all(|m| applied.contains(m.name()))
                        });
                    if done {
                        break;
                    }
                    attempt += 1;
                }
                Err(error) => return Err(error),
            }
        }
    }
    Ok(())
}

/// How many times [`migrate`] runs one mechanism's migrations when a run fails, in case a
/// concurrent migration of the same database caused the failure.
const CONCURRENT_MIGRATE_ATTEMPTS: u64 = 3;

/// One mechanism's pending migrations: the foreign-table check, then the migrator.
async fn migrate_one(db: &DatabaseConnection, mechanism: Mechanism) -> Result<(), MigrateError> {
    {
        let failed = |source| MigrateError::Migration { mechanism, source };
        let applied = read_versions(db, mechanism.history_table())
            .await
            .map_err(failed)?;
        for migration in mechanism.migrations() {
            if applied.contains(migration.name()) {
                continue;
            }
            for table in mechanism.created_by(migration.name()) {
                if naming::table_exists(db, &table).await.map_err(failed)? {
                    // Another process may have applied this migration since the history was
                    // read (two replicas starting at once): then the table is Tenantry's.
                    let now = read_versions(db, mechanism.history_table())
                        .await
                        .map_err(failed)?;
                    if now.contains(migration.name()) {
                        break;
                    }
                    return Err(MigrateError::ForeignTable {
                        table,
                        history_table: mechanism.history_table(),
                    });
                }
            }
        }
        mechanism.up(db).await.map_err(failed)?;
    }
    Ok(())
}

/// The names of the selected mechanisms' migrations the database has not applied, in order,
/// without writing anything (read-only: no history table is created).
///
/// A migration counts as applied when it is recorded in its mechanism's history table or in
/// any of `host_history_tables` (the history table of a host migrator that appended Tenantry's
/// migrations to its own list, e.g. `seaql_migrations`). Tables that do not exist are read as
/// empty.
///
/// # Errors
/// The database error of a failed read.
pub async fn pending_migrations<C: ConnectionTrait>(
    db: &C,
    mechanisms: Mechanisms,
    host_history_tables: &[&str],
) -> Result<Vec<String>, DbErr> {
    let mut host = HashSet::new();
    for table in host_history_tables {
        host.extend(read_versions(db, table).await?);
    }
    let mut pending = Vec::new();
    for mechanism in mechanisms.iter() {
        let own = read_versions(db, mechanism.history_table()).await?;
        for migration in mechanism.migrations() {
            let name = migration.name();
            if !own.contains(name) && !host.contains(name) {
                pending.push(name.to_owned());
            }
        }
    }
    Ok(pending)
}

/// Moves the history of a database migrated before Tenantry had its own history tables:
/// for each mechanism whose migrations `seaql_migrations` records while its tables still have
/// their unprefixed names, copies those rows (version and time) into the mechanism's history
/// table and deletes them from `seaql_migrations`, dropping that table when nothing is left in
/// it (a host migrator that uses it recreates it). Rows of other migrations (the host's) stay.
/// One transaction; returns whether anything moved. [`migrate`] calls it first; a host that
/// runs Tenantry's migrators itself calls it before them.
///
/// Rows in `seaql_migrations` for prefixed tables (a host migrator that appended Tenantry's
/// migrations) are left alone.
///
/// # Errors
/// The database error; nothing is moved then.
pub async fn adopt_legacy_history(db: &DatabaseConnection) -> Result<bool, DbErr> {
    if !naming::table_exists(db, LEGACY_HISTORY_TABLE).await? {
        return Ok(false);
    }
    let backend = db.get_database_backend();
    let txn = db.begin().await?;
    let rows = txn
        .query_all_raw(Statement::from_string(
            backend,
            format!("SELECT version, applied_at FROM {LEGACY_HISTORY_TABLE}"),
        ))
        .await?;
    let mut recorded = Vec::with_capacity(rows.len());
    for row in rows {
        recorded.push((
            row.try_get::<String>("", "version")?,
            row.try_get::<i64>("", "applied_at")?,
        ));
    }
    let mut moved = false;
    for mechanism in Mechanism::ALL {
        let (versions, probe) = mechanism.legacy();
        let rows: Vec<&(String, i64)> = recorded
            .iter()
            .filter(|(v, _)| versions.contains(&v.as_str()))
            .collect();
        if rows.is_empty() {
            continue;
        }
        if naming::table_exists(&txn, &prefixed(probe)).await?
            || !naming::table_exists(&txn, probe).await?
        {
            continue;
        }
        let history = mechanism.history_table();
        // A legacy database: every table of the mechanism is about to be renamed to its
        // prefixed name, so a table that already has that name is someone else's. Refuse now,
        // before anything moves (the rename would otherwise skip it and the stores would use
        // the foreign table).
        for table in mechanism.tables() {
            let target = prefixed(table);
            if naming::table_exists(&txn, table).await?
                && naming::table_exists(&txn, &target).await?
            {
                return Err(DbErr::Custom(naming::foreign_table_message(
                    &target, history,
                )));
            }
        }
        let own = {
            mechanism.install(&txn).await?;
            read_versions(&txn, history).await?
        };
        for (version, applied_at) in rows {
            if !own.contains(version) {
                txn.execute_raw(Statement::from_sql_and_values(
                    backend,
                    format!(
                        "INSERT INTO {history} (version, applied_at) VALUES ({}, {})",
                        naming::placeholder(backend, 1),
                        naming::placeholder(backend, 2)
                    ),
                    [version.clone().into(), (*applied_at).into()],
                ))
                .await?;
            }
            txn.execute_raw(Statement::from_sql_and_values(
                backend,
                format!(
                    "DELETE FROM {LEGACY_HISTORY_TABLE} WHERE version = {}",
                    naming::placeholder(backend, 1)
                ),
                [version.clone().into()],
            ))
            .await?;
            moved = true;
        }
    }
    if moved {
        let left = txn
            .query_one_raw(Statement::from_string(
                backend,
                format!("SELECT version FROM {LEGACY_HISTORY_TABLE} LIMIT 1"),
            ))
            .await?;
        if left.is_none() {
            txn.execute_unprepared(&format!("DROP TABLE {LEGACY_HISTORY_TABLE}"))
                .await?;
        }
    }
    txn.commit().await?;
    Ok(moved)
}

/// The versions recorded in history table `table` (empty when it does not exist).
async fn read_versions<C: ConnectionTrait>(db: &C, table: &str) -> Result<HashSet<String>, DbErr> {
    if !naming::table_exists(db, table).await? {
        return Ok(HashSet::new());
    }
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            format!("SELECT version FROM {table}"),
        ))
        .await?;
    rows.into_iter()
        .map(|row| row.try_get::<String>("", "version"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Case 008: every migration, whichever migrator runs it (Tenantry's or a host's that
    /// appended it), asks for one transaction with its history row on every backend; the
    /// library's default (`None`) wraps only PostgreSQL, which left SQLite half-migrated.
    #[test]
    fn case_008_every_migration_runs_in_one_transaction_on_every_backend() {
        for mechanism in Mechanism::ALL {
            for migration in mechanism.migrations() {
                assert_eq!(
                    migration.use_transaction(),
                    Some(true),
                    "{}",
                    migration.name()
                );
            }
        }
    }
}
