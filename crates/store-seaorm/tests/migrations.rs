//! Migrations on SQLite (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`): m0004 (the outbox
//! claim index), m0006 (attempt windows) and m0014 (room for HOT updates) run up, down and up;
//! the `tenantry_` prefix migrations rename tables both ways keeping rows; a database migrated
//! before the per-mechanism history tables is adopted and renamed; Tenantry's migrators run
//! beside a host's own migrator in either order, or appended to it; a foreign table is refused
//! by name.
// `MigrationTrait` is declared through async-trait with an elided lifetime; the impls match it.
#![allow(elided_lifetimes_in_paths)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement};
use tenantry_kernel::LeaseOwner;
use tenantry_migrations::*;
use tenantry_migrations::{
    DirectoryMigrator, FencesMigrator, LifecycleMigrator, Mechanisms, MigrateError,
};
use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::{empty_database, fresh_database};
use tenantry_store_seaorm::{ConnectError, Database};

const CLAIM_INDEX: &str = "ix_tenantry_lifecycle_outbox_claim";
const DUE_INDEX: &str = "ix_tenantry_lifecycle_outbox_due";
const LEGACY_CLAIM_INDEX: &str = "ix_lifecycle_outbox_claim";
const LEGACY_DUE_INDEX: &str = "ix_lifecycle_outbox_due";

async fn index_exists(conn: &DatabaseConnection, name: &str) -> bool {
    let backend = conn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => "SELECT indexname FROM pg_indexes WHERE indexname = $1",
        _ => "SELECT name FROM sqlite_master WHERE type = 'index' AND name = ?",
    };
    conn.query_one_raw(Statement::from_sql_and_values(backend, sql, [name.into()]))
        .await
        .unwrap()
        .is_some()
}

async fn table_exists(conn: &DatabaseConnection, name: &str) -> bool {
    tenantry_migrations::naming::table_exists(conn, name)
        .await
        .unwrap()
}

async fn count(conn: &DatabaseConnection, table: &str) -> i64 {
    conn.query_one_raw(Statement::from_string(
        conn.get_database_backend(),
        format!("SELECT COUNT(*) AS n FROM {table}"),
    ))
    .await
    .unwrap()
    .unwrap()
    .try_get::<i64>("", "n")
    .unwrap()
}

async fn exec(conn: &DatabaseConnection, sql: &str) {
    conn.execute_unprepared(sql).await.unwrap();
}

/// The storage options of `table` on PostgreSQL (`None` elsewhere).
async fn fill_factor(conn: &DatabaseConnection, table: &str) -> Option<String> {
    if conn.get_database_backend() != DbBackend::Postgres {
        return None;
    }
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!(
                "SELECT coalesce(array_to_string(reloptions, ','), '') AS options \
                 FROM pg_class WHERE relname = '{table}'"
            ),
        ))
        .await
        .unwrap()
        .unwrap();
    Some(row.try_get::<String>("", "options").unwrap())
}

async fn assert_m0004_applied(conn: &DatabaseConnection, when: &str) {
    assert!(index_exists(conn, CLAIM_INDEX).await, "{when}: claim index");
    assert!(
        !index_exists(conn, DUE_INDEX).await,
        "{when}: old due index"
    );
    if let Some(options) = fill_factor(conn, "tenantry_lifecycle_outbox").await {
        // m0004 set 70; m0014, the last lifecycle migration, lowers it to 30.
        assert_eq!(options, "fillfactor=30", "{when}");
    }
}

#[tokio::test]
async fn m0004_runs_up_down_and_up_again() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    assert_m0004_applied(conn, "after the first up").await;

    // Down to just before m0004: the prefix migration (tables renamed back to their old names),
    // m0006, m0005 and m0004 are reverted.
    let steps = LifecycleMigrator::migrations().len() - 1;
    LifecycleMigrator::down(
        conn,
        Some(<u32 as std::convert::TryFrom<usize>>::try_from(steps).unwrap()),
    )
    .await
    .unwrap();
    assert!(table_exists(conn, "lifecycle_outbox").await);
    assert!(
        !index_exists(conn, LEGACY_CLAIM_INDEX).await,
        "after down: claim index"
    );
    assert!(
        index_exists(conn, LEGACY_DUE_INDEX).await,
        "after down: due index"
    );
    if let Some(options) = fill_factor(conn, "lifecycle_outbox").await {
        assert_eq!(options, "", "after down: fill factor reset");
    }
    assert_eq!(
        LifecycleMigrator::get_pending_migrations(conn)
            .await
            .unwrap()
            .len(),
        steps
    );

    LifecycleMigrator::up(conn, None).await.unwrap();
    assert_m0004_applied(conn, "after the second up").await;
    assert!(!index_exists(conn, LEGACY_CLAIM_INDEX).await);
    assert!(
        LifecycleMigrator::get_pending_migrations(conn)
            .await
            .unwrap()
            .is_empty()
    );

    // The lifecycle store claims on the rebuilt schema.
    let store = SeaOrmLifecycleStore::new(&db.db);
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w-1").unwrap(),
            lease_duration: Duration::from_secs(30),
            include_provision: true,
            limit: 8,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    assert!(claimed.is_empty());
}

/// Whether table `table` has the column `name`.
async fn column_exists(conn: &DatabaseConnection, table: &str, name: &str) -> bool {
    let backend = conn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => format!(
            "SELECT column_name FROM information_schema.columns \
             WHERE table_name = '{table}' AND column_name = $1"
        ),
        _ => format!("SELECT name FROM pragma_table_info('{table}') WHERE name = ?"),
    };
    conn.query_one_raw(Statement::from_sql_and_values(backend, sql, [name.into()]))
        .await
        .unwrap()
        .is_some()
}

/// Inserts a pending provision command `id` into outbox table `table`.
async fn insert_command(
    conn: &DatabaseConnection,
    table: &str,
    id: &str,
    attempts: i32,
    completed: &str,
) {
    exec(
        conn,
        &format!(
            "INSERT INTO {table} (id, tenant_id, control_space_id, operation_id, \
             idempotency_key, request_fingerprint, operation, payload, status, \
             attempt_count, lease_epoch, next_attempt_at, created_at, completed_at) \
             VALUES ('{id}', 't', 'cs-{id}', 'op-{id}', 'k-{id}', 'f', 'provision', '{{}}', \
             'pending', {attempts}, {attempts}, 1000, 1000, {completed})"
        ),
    )
    .await;
}

/// m0006 (attempt windows) runs up, down and up with rows present: existing rows keep their
/// data, and a command claimed before the migration gets a conservative window.
#[tokio::test]
async fn m0006_runs_up_down_and_up_again_with_rows_present() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    // m0014, m0013, m0010, the prefix migration and m0006: the outbox has its old name and no
    // window columns.
    LifecycleMigrator::down(conn, Some(5)).await.unwrap();
    let outbox = "lifecycle_outbox";
    assert!(!column_exists(conn, outbox, "attempt_window_ends_at").await);
    assert!(!column_exists(conn, outbox, "prior_window_ends_at").await);
    for (id, attempts, completed) in [("c-new", 0, "NULL"), ("c-done", 2, "5000")] {
        insert_command(conn, outbox, id, attempts, completed).await;
    }
    LifecycleMigrator::up(conn, None).await.unwrap();
    let outbox = "tenantry_lifecycle_outbox";
    let window = |id: &'static str| async move {
        conn.query_one_raw(Statement::from_string(
            conn.get_database_backend(),
            format!("SELECT attempt_window_ends_at AS w FROM {outbox} WHERE id = '{id}'"),
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<Option<i64>>("", "w")
        .unwrap()
    };
    assert_eq!(window("c-new").await, None, "never claimed: no window");
    assert_eq!(
        window("c-done").await,
        Some(5000),
        "claimed before the migration: a conservative window"
    );
    LifecycleMigrator::down(conn, Some(5)).await.unwrap();
    assert!(!column_exists(conn, "lifecycle_outbox", "attempt_window_ends_at").await);
    LifecycleMigrator::up(conn, None).await.unwrap();
    assert!(column_exists(conn, outbox, "attempt_window_ends_at").await);
    assert!(column_exists(conn, outbox, "prior_window_ends_at").await);
    assert_eq!(
        window("c-done").await,
        Some(5000),
        "rows survive down and up"
    );
}

/// One row in a table of each mechanism, under the given table prefix (`""` or `tenantry_`).
async fn insert_rows(conn: &DatabaseConnection, prefix: &str) {
    insert_command(conn, &format!("{prefix}lifecycle_outbox"), "c-1", 0, "NULL").await;
    exec(
        conn,
        &format!(
            "INSERT INTO {prefix}host_storage (binding, key, value) \
             VALUES ('inst', 'ke.fence.v1.x', '{{}}')"
        ),
    )
    .await;
    exec(
        conn,
        &format!(
            "INSERT INTO {prefix}accounts (uuid, normalized_email, display_name, status, \
             source, projection_revision) VALUES ('a-1', 'a@x', 'A', 'active', 'local', 0)"
        ),
    )
    .await;
}

/// Every table of each mechanism, unprefixed.
const TABLES: [&str; 10] = [
    "control_spaces",
    "lifecycle_outbox",
    "lifecycle_command_actions",
    "host_storage",
    "accounts",
    "workspaces",
    "workspace_memberships",
    "workspace_execution_state",
    "directory_projection_state",
    "directory_projection_inbox",
];

async fn assert_named(conn: &DatabaseConnection, prefix: &str, other: &str, when: &str) {
    for table in TABLES {
        assert!(
            table_exists(conn, &format!("{prefix}{table}")).await,
            "{when}: {prefix}{table}"
        );
        assert!(
            !table_exists(conn, &format!("{other}{table}")).await,
            "{when}: no {other}{table}"
        );
    }
    for (table, n) in [
        ("lifecycle_outbox", 1),
        ("host_storage", 1),
        ("accounts", 1),
    ] {
        assert_eq!(count(conn, &format!("{prefix}{table}")).await, n, "{when}");
    }
    let claim = format!("ix_{prefix}lifecycle_outbox_claim");
    assert!(index_exists(conn, &claim).await, "{when}: {claim}");
    let inbox = format!("ix_{prefix}directory_projection_inbox_cursor");
    assert!(index_exists(conn, &inbox).await, "{when}: {inbox}");
    if conn.get_database_backend() == DbBackend::Postgres {
        let pkey = format!("{prefix}accounts_pkey");
        assert!(index_exists(conn, &pkey).await, "{when}: {pkey}");
    }
}

async fn down_prefix_migrations(conn: &DatabaseConnection) {
    // The retention migrations (m0010, m0011, m0012), the attempt-error log (m0013) and the
    // outbox's fill factor (m0014) come after the prefix migrations: revert them first.
    LifecycleMigrator::down(conn, Some(4)).await.unwrap();
    FencesMigrator::down(conn, Some(2)).await.unwrap();
    DirectoryMigrator::down(conn, Some(2)).await.unwrap();
}

/// The prefix migrations run down (tables and indexes renamed back) and up again with rows
/// present, and the stores work on the result.
#[tokio::test]
async fn prefix_migrations_run_up_down_and_up_again_with_rows_present() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    insert_rows(conn, "tenantry_").await;
    assert_named(conn, "tenantry_", "", "fresh install").await;

    down_prefix_migrations(conn).await;
    assert_named(conn, "", "tenantry_", "after down").await;
    assert!(matches!(
        db.db.check_schema(Mechanisms::ALL).await,
        Err(ConnectError::SchemaNotCurrent { pending: 8, .. })
    ));

    db.db.migrate(Mechanisms::ALL).await.unwrap();
    assert_named(conn, "tenantry_", "", "after the second up").await;
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
    let store = SeaOrmLifecycleStore::new(&db.db);
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w-1").unwrap(),
            lease_duration: Duration::from_secs(30),
            include_provision: true,
            limit: 8,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "the command inserted before the renames");
}

/// Turns a fresh database into one migrated by Tenantry 0.1: unprefixed tables, history of
/// m0001..m0006 in `seaql_migrations` (plus `host_row`, a migration of the host's, if given),
/// no per-mechanism history tables.
async fn make_legacy(conn: &DatabaseConnection, host_row: Option<&str>) {
    down_prefix_migrations(conn).await;
    for table in [
        "tenantry_lifecycle_migrations",
        "tenantry_fences_migrations",
        "tenantry_directory_migrations",
    ] {
        exec(conn, &format!("DROP TABLE {table}")).await;
    }
    exec(
        conn,
        "CREATE TABLE seaql_migrations (version VARCHAR NOT NULL PRIMARY KEY, \
         applied_at BIGINT NOT NULL)",
    )
    .await;
    let mut versions = vec![
        "m0001_lifecycle",
        "m0002_host_storage",
        "m0003_directory",
        "m0004_lifecycle_claim_index",
        "m0005_lifecycle_failures",
        "m0006_lifecycle_attempt_window",
    ];
    versions.extend(host_row);
    for version in versions {
        exec(
            conn,
            &format!("INSERT INTO seaql_migrations (version, applied_at) VALUES ('{version}', 7)"),
        )
        .await;
    }
}

/// A database migrated by Tenantry 0.1 is upgraded keeping its rows: Tenantry's history moves
/// to its own tables (`seaql_migrations` is dropped once empty), the tables are renamed, and
/// `connect_existing`'s check asks for a migration until then.
#[tokio::test]
async fn a_database_migrated_before_the_prefix_is_adopted_and_renamed_keeping_rows() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    make_legacy(conn, None).await;
    insert_rows(conn, "").await;
    assert!(matches!(
        db.db.check_schema(Mechanisms::ALL).await,
        Err(ConnectError::SchemaNotCurrent { pending: 8, .. })
    ));
    // Running a migrator directly, before the history is adopted, is refused, not a second
    // empty set of tables.
    let error = LifecycleMigrator::up(conn, None).await.unwrap_err();
    assert!(
        error.to_string().contains("adopt_legacy_history"),
        "{error}"
    );
    assert!(!table_exists(conn, "tenantry_control_spaces").await);
    exec(conn, "DROP TABLE tenantry_lifecycle_migrations").await;

    db.db.migrate(Mechanisms::ALL).await.unwrap();
    assert_named(conn, "tenantry_", "", "after the upgrade").await;
    assert!(!table_exists(conn, "seaql_migrations").await);
    assert_eq!(count(conn, "tenantry_lifecycle_migrations").await, 8);
    db.db.check_schema(Mechanisms::ALL).await.unwrap();

    // Down and up again after the upgrade.
    down_prefix_migrations(conn).await;
    assert_named(conn, "", "tenantry_", "after down").await;
    db.db.migrate(Mechanisms::ALL).await.unwrap();
    assert_named(conn, "tenantry_", "", "after up again").await;
}

/// The host's own rows in `seaql_migrations` stay there when Tenantry's move out.
#[tokio::test]
async fn adopting_the_legacy_history_keeps_the_hosts_rows() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    make_legacy(conn, Some("m20250101_host_things")).await;
    assert!(
        tenantry_migrations::adopt_legacy_history(conn)
            .await
            .unwrap()
    );
    assert_eq!(count(conn, "seaql_migrations").await, 1);
    assert_eq!(count(conn, "tenantry_fences_migrations").await, 1);
    db.db.migrate(Mechanisms::ALL).await.unwrap();
    assert_eq!(count(conn, "seaql_migrations").await, 1);
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// A host's own migration (on sea-orm-migration's default history table).
struct HostThings;

impl MigrationName for HostThings {
    fn name(&self) -> &str {
        "m20250101_host_things"
    }
}

#[async_trait::async_trait]
impl MigrationTrait for HostThings {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Alias::new("host_things"))
                    .col(ColumnDef::new(Alias::new("id")).integer().primary_key())
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Alias::new("host_things")).to_owned())
            .await
    }
}

/// The host's migrator: its own migration only, default history table.
struct HostMigrator;

#[async_trait::async_trait]
impl MigratorTrait for HostMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(HostThings)]
    }
}

/// A host migrator that appended Tenantry's migrations to its own list, on a history table of
/// its own naming.
struct HostWithTenantry;

#[async_trait::async_trait]
impl MigratorTrait for HostWithTenantry {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        let mut all: Vec<Box<dyn MigrationTrait>> = vec![Box::new(HostThings)];
        all.extend(LifecycleMigrator::migrations());
        all.extend(FencesMigrator::migrations());
        all.extend(DirectoryMigrator::migrations());
        all
    }

    fn migration_table_name() -> DynIden {
        Alias::new("host_migrations").into_iden()
    }
}

/// Both migrators are happy in either order (neither finds the other's history "missing").
#[tokio::test]
async fn host_migrator_and_tenantry_migrators_run_in_either_order() {
    for host_first in [true, false] {
        let db = empty_database().await;
        let conn = &db.db.conn;
        if host_first {
            HostMigrator::up(conn, None).await.unwrap();
        }
        db.db.migrate(Mechanisms::ALL).await.unwrap();
        HostMigrator::up(conn, None).await.unwrap();
        db.db.migrate(Mechanisms::ALL).await.unwrap();
        assert!(
            HostMigrator::get_pending_migrations(conn)
                .await
                .unwrap()
                .is_empty(),
            "host_first={host_first}"
        );
        db.db.check_schema(Mechanisms::ALL).await.unwrap();
        assert!(table_exists(conn, "host_things").await);
        assert_eq!(count(conn, "seaql_migrations").await, 1);
    }
}

/// A host that appended Tenantry's migrations to its own migrator opens the store: the schema
/// check reads the host's history table (named, or `seaql_migrations` by default).
#[tokio::test]
async fn a_host_that_appended_tenantry_migrations_passes_the_schema_check() {
    let db = empty_database().await;
    let conn = &db.db.conn;
    HostWithTenantry::up(conn, None).await.unwrap();
    assert!(table_exists(conn, "tenantry_lifecycle_outbox").await);
    assert!(matches!(
        db.db.check_schema(Mechanisms::ALL).await,
        Err(ConnectError::SchemaNotCurrent { pending: 14, .. })
    ));
    db.db
        .check_schema_with_history(Mechanisms::ALL, "host_migrations")
        .await
        .unwrap();
    // Running Tenantry's migrator as well is refused by name, not half-applied.
    let error = db.db.migrate(Mechanisms::ALL).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("table tenantry_control_spaces already exists and is not Tenantry's"),
        "{error}"
    );
}

/// A table with a name Tenantry would create stops the migration before anything of that
/// mechanism is created, naming it; the host's unprefixed tables are untouched.
#[tokio::test]
async fn a_foreign_table_is_refused_by_name() {
    let db = empty_database().await;
    let conn = &db.db.conn;
    exec(conn, "CREATE TABLE accounts (id INTEGER PRIMARY KEY)").await;
    exec(conn, "INSERT INTO accounts (id) VALUES (1)").await;
    exec(
        conn,
        "CREATE TABLE tenantry_workspaces (id INTEGER PRIMARY KEY)",
    )
    .await;
    let error = db.db.migrate(Mechanisms::ALL).await.unwrap_err();
    let ConnectError::Migrate {
        source: MigrateError::ForeignTable { table, .. },
    } = &error
    else {
        panic!("{error:?}");
    };
    assert_eq!(table, "tenantry_workspaces");
    assert!(
        error
            .to_string()
            .contains("table tenantry_workspaces already exists and is not Tenantry's"),
        "{error}"
    );
    assert!(!table_exists(conn, "tenantry_accounts").await);
    assert_eq!(count(conn, "accounts").await, 1);
    // The other mechanisms migrated; removing the table lets the directory migrate too.
    assert!(table_exists(conn, "tenantry_lifecycle_outbox").await);
    exec(conn, "DROP TABLE tenantry_workspaces").await;
    db.db.migrate(Mechanisms::ALL).await.unwrap();
    assert!(table_exists(conn, "tenantry_accounts").await);
    assert_eq!(count(conn, "accounts").await, 1);
}

/// A fences-only host gets the host-storage table and nothing else; the schema check of that
/// selection passes while the full one does not.
#[tokio::test]
async fn a_selection_migrates_only_its_mechanisms() {
    let db = empty_database().await;
    let conn = &db.db.conn;
    db.db.migrate(Mechanisms::FENCES).await.unwrap();
    assert!(table_exists(conn, "tenantry_host_storage").await);
    assert!(!table_exists(conn, "tenantry_accounts").await);
    assert!(!table_exists(conn, "tenantry_lifecycle_outbox").await);
    db.db.check_schema(Mechanisms::FENCES).await.unwrap();
    assert!(matches!(
        db.db.check_schema(Mechanisms::ALL).await,
        Err(ConnectError::SchemaNotCurrent { .. })
    ));
    db.db
        .migrate(Mechanisms::LIFECYCLE | Mechanisms::DIRECTORY)
        .await
        .unwrap();
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// A host's own pool is accepted with its backend detected, migrated and checked.
#[tokio::test]
async fn a_database_from_the_hosts_pool() {
    let test = empty_database().await;
    let db = Database::from_connection(test.db.conn.clone()).unwrap();
    assert_eq!(db.backend, test.backend());
    assert!(matches!(
        db.check_schema(Mechanisms::ALL).await,
        Err(ConnectError::SchemaNotCurrent { pending: 14, .. })
    ));
    db.migrate(Mechanisms::ALL).await.unwrap();
    db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// Upgrading a database migrated before the prefix while the host owns a table with one of the
/// prefixed names (not the probe table of the mechanism): refused by name before anything is
/// adopted or renamed, never a silent skip that would leave the stores on the host's table.
#[tokio::test]
async fn a_foreign_prefixed_table_stops_the_legacy_upgrade_before_anything_moves() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    make_legacy(conn, None).await;
    insert_rows(conn, "").await;
    exec(
        conn,
        "CREATE TABLE tenantry_workspaces (id INTEGER PRIMARY KEY)",
    )
    .await;

    let error = db.db.migrate(Mechanisms::ALL).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("table tenantry_workspaces already exists and is not Tenantry's"),
        "{error}"
    );
    // Nothing was adopted or renamed: the legacy layout and its history are intact.
    assert!(table_exists(conn, "workspaces").await);
    assert!(table_exists(conn, "control_spaces").await);
    assert!(!table_exists(conn, "tenantry_control_spaces").await);
    assert!(table_exists(conn, "seaql_migrations").await);

    exec(conn, "DROP TABLE tenantry_workspaces").await;
    db.db.migrate(Mechanisms::ALL).await.unwrap();
    assert_named(conn, "tenantry_", "", "after the upgrade").await;
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// Two processes starting on a fresh database migrate at once (here two tasks on separate
/// pooled connections): both succeed, and the schema is Tenantry's and current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_migrations_of_a_fresh_database_both_succeed() {
    let test = empty_database().await;
    let db = Database::from_connection(test.db.conn.clone()).unwrap();
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move { db.migrate(Mechanisms::ALL).await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// m0010, m0011 and m0012 (the retention indexes and the host-storage write time) run up,
/// down and up again; m0012 stamps the rows present when it runs.
#[tokio::test]
async fn retention_indexes_run_up_down_and_up_again() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let indexes = [
        "ix_tenantry_lifecycle_outbox_finished",
        "ix_tenantry_lifecycle_command_actions_created",
        "ix_tenantry_directory_projection_inbox_received",
        "ix_tenantry_host_storage_cleared",
    ];
    for index in indexes {
        assert!(index_exists(conn, index).await, "after up: {index}");
    }
    assert!(column_exists(conn, "tenantry_host_storage", "updated_at").await);
    // m0014, m0013 and m0010.
    LifecycleMigrator::down(conn, Some(3)).await.unwrap();
    DirectoryMigrator::down(conn, Some(1)).await.unwrap();
    FencesMigrator::down(conn, Some(1)).await.unwrap();
    for index in indexes {
        assert!(!index_exists(conn, index).await, "after down: {index}");
    }
    assert!(!column_exists(conn, "tenantry_host_storage", "updated_at").await);
    assert!(table_exists(conn, "tenantry_lifecycle_outbox").await);
    // A tombstone written before m0012 (no write time) is stamped by it.
    conn.execute_unprepared(
        "INSERT INTO tenantry_host_storage (binding, key, value) \
         VALUES ('inst', 'ke.fence.v1.installation', 'null')",
    )
    .await
    .unwrap();
    LifecycleMigrator::up(conn, None).await.unwrap();
    DirectoryMigrator::up(conn, None).await.unwrap();
    FencesMigrator::up(conn, None).await.unwrap();
    for index in indexes {
        assert!(
            index_exists(conn, index).await,
            "after the second up: {index}"
        );
    }
    let stamped = conn
        .query_one_raw(Statement::from_string(
            conn.get_database_backend(),
            "SELECT COUNT(*) AS n FROM tenantry_host_storage WHERE updated_at > 0",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<i64>("", "n")
        .unwrap();
    assert_eq!(stamped, 1);
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// m0013 (the attempt-error log) runs up, down and up again; its rows follow their command: a
/// deleted command (retention's delete) takes its entries with it, in the same statement.
#[tokio::test]
async fn attempt_error_log_runs_up_down_and_up_and_goes_with_its_command() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let errors = "tenantry_lifecycle_attempt_errors";
    let index = "ix_tenantry_lifecycle_attempt_errors_command";
    assert!(table_exists(conn, errors).await);
    assert!(index_exists(conn, index).await);
    // m0014 and m0013.
    LifecycleMigrator::down(conn, Some(2)).await.unwrap();
    assert!(!table_exists(conn, errors).await);
    assert!(!index_exists(conn, index).await);
    assert!(table_exists(conn, "tenantry_lifecycle_outbox").await);
    LifecycleMigrator::up(conn, None).await.unwrap();
    assert!(table_exists(conn, errors).await);
    assert!(index_exists(conn, index).await);
    db.db.check_schema(Mechanisms::ALL).await.unwrap();

    for id in ["c-1", "c-2"] {
        insert_command(conn, "tenantry_lifecycle_outbox", id, 1, "NULL").await;
        for n in 1..=2 {
            exec(
                conn,
                &format!(
                    "INSERT INTO {errors} (id, command_id, attempt, outcome, error_code, \
                     error_message, recorded_at, lease_owner, actor) \
                     VALUES ('{id}-{n}', '{id}', {n}, 'retry', 'X', 'x', {n}, 'w', NULL)"
                ),
            )
            .await;
        }
    }
    exec(
        conn,
        "DELETE FROM tenantry_lifecycle_outbox WHERE id = 'c-1'",
    )
    .await;
    assert_eq!(count(conn, errors).await, 2, "c-1's entries went with it");
    // An entry needs its command.
    let orphan = conn
        .execute_unprepared(&format!(
            "INSERT INTO {errors} (id, command_id, attempt, outcome, error_code, error_message, \
             recorded_at) VALUES ('o', 'no-such-command', 1, 'retry', 'X', 'x', 1)"
        ))
        .await;
    assert!(orphan.is_err(), "an entry without its command is refused");
}

/// m0014 (room for HOT updates) runs up, down and up again with a live command present: on
/// PostgreSQL the fill factors are 30 (outbox) and 50 (control spaces) after up, m0004's 70
/// and the default after down; on SQLite it only records itself.
#[tokio::test]
async fn m0014_runs_up_down_and_up_again_with_rows_present() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let outbox = "tenantry_lifecycle_outbox";
    assert_eq!(
        LifecycleMigrator::migrations().last().unwrap().name(),
        "m0014_lifecycle_update_room"
    );
    if let Some(options) = fill_factor(conn, outbox).await {
        assert_eq!(options, "fillfactor=30", "after up");
    }
    if let Some(options) = fill_factor(conn, "tenantry_control_spaces").await {
        assert_eq!(options, "fillfactor=50", "after up: control spaces");
    }
    insert_command(conn, outbox, "c-live", 0, "NULL").await;
    LifecycleMigrator::down(conn, Some(1)).await.unwrap();
    if let Some(options) = fill_factor(conn, outbox).await {
        assert_eq!(options, "fillfactor=70", "after down: m0004's fill factor");
    }
    if let Some(options) = fill_factor(conn, "tenantry_control_spaces").await {
        assert_eq!(options, "", "after down: control spaces' default");
    }
    assert_eq!(
        LifecycleMigrator::get_pending_migrations(conn)
            .await
            .unwrap()
            .len(),
        1
    );
    LifecycleMigrator::up(conn, None).await.unwrap();
    if let Some(options) = fill_factor(conn, outbox).await {
        assert_eq!(options, "fillfactor=30", "after the second up");
    }
    if let Some(options) = fill_factor(conn, "tenantry_control_spaces").await {
        assert_eq!(
            options, "fillfactor=50",
            "after the second up: control spaces"
        );
    }
    assert_eq!(count(conn, outbox).await, 1, "rows survive down and up");
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// The schema of `conn`'s database as comparable text, one line per object: on SQLite every
/// table, index and trigger with its stored definition; on PostgreSQL every column (type,
/// nullability, default), index, constraint and storage option of the current schema.
async fn schema_of(conn: &DatabaseConnection) -> Vec<String> {
    let backend = conn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT table_name || '.' || column_name || ' ' || data_type || ' ' \
                 || coalesce(character_maximum_length::text, '') || ' ' || is_nullable || ' ' \
                 || coalesce(column_default, '') AS line \
             FROM information_schema.columns WHERE table_schema = current_schema() \
             UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() \
             UNION ALL SELECT conrelid::regclass::text || ' ' || conname || ' ' \
                 || pg_get_constraintdef(oid) \
             FROM pg_constraint WHERE connamespace = current_schema()::regnamespace \
             UNION ALL SELECT c.relname || ' ' || coalesce(array_to_string(c.reloptions, ','), '') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i') \
             UNION ALL SELECT event_object_table || ' trigger ' || trigger_name \
             FROM information_schema.triggers WHERE trigger_schema = current_schema() \
             ORDER BY 1"
        }
        _ => {
            "SELECT type || ' ' || name || ' on ' || tbl_name || ': ' || coalesce(sql, '') AS line \
             FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY 1"
        }
    };
    conn.query_all_raw(Statement::from_string(backend, sql))
        .await
        .unwrap()
        .into_iter()
        .map(|row| row.try_get::<String>("", "line").unwrap())
        .collect()
}

/// Makes every insert of `version` into history table `history` fail: the migration's
/// statements have all run when its history row is written, so this interrupts the step at
/// its last moment, as SIGKILL or a full disk between the DDL and the history row would.
async fn fail_recording(conn: &DatabaseConnection, history: &str, version: &str) {
    match conn.get_database_backend() {
        DbBackend::Postgres => {
            exec(
                conn,
                "CREATE OR REPLACE FUNCTION case_008_fault() RETURNS trigger LANGUAGE plpgsql \
                 AS $$ BEGIN RAISE EXCEPTION 'injected fault recording %', NEW.version; END $$",
            )
            .await;
            exec(
                conn,
                &format!(
                    "CREATE TRIGGER case_008_fault BEFORE INSERT ON {history} FOR EACH ROW \
                     WHEN (NEW.version = '{version}') EXECUTE FUNCTION case_008_fault()"
                ),
            )
            .await;
        }
        _ => {
            exec(
                conn,
                &format!(
                    "CREATE TRIGGER case_008_fault BEFORE INSERT ON {history} \
                     WHEN NEW.version = '{version}' \
                     BEGIN SELECT RAISE(ABORT, 'injected fault recording {version}'); END"
                ),
            )
            .await;
        }
    }
}

/// Removes the fault of [`fail_recording`].
async fn stop_failing(conn: &DatabaseConnection, history: &str) {
    match conn.get_database_backend() {
        DbBackend::Postgres => {
            exec(conn, &format!("DROP TRIGGER case_008_fault ON {history}")).await;
            exec(conn, "DROP FUNCTION case_008_fault()").await;
        }
        _ => exec(conn, "DROP TRIGGER case_008_fault").await,
    }
}

/// Case 008: a migration run interrupted after any step's statements (here: its history row
/// fails to insert) leaves a database that the next run completes, beside a host's own
/// migrator, and the result is the schema of a run that was never interrupted. Before each
/// step ran in one transaction with its history row on SQLite, the next run met the step's
/// tables without its history row ("table tenantry_x already exists and is not Tenantry's") or
/// its columns ("duplicate column").
#[tokio::test]
async fn case_008_an_interrupted_migration_step_is_completed_by_the_next_run() {
    let clean = {
        let db = empty_database().await;
        HostMigrator::up(&db.db.conn, None).await.unwrap();
        db.db.migrate(Mechanisms::ALL).await.unwrap();
        schema_of(&db.db.conn).await
    };
    for mechanism in Mechanism::ALL {
        let history = mechanism.history_table();
        let names: Vec<String> = mechanism
            .migrations()
            .iter()
            .map(|m| m.name().to_owned())
            .collect();
        for (step, name) in names.iter().enumerate() {
            let db = empty_database().await;
            let conn = &db.db.conn;
            HostMigrator::up(conn, None).await.unwrap();
            match mechanism {
                Mechanism::Lifecycle => LifecycleMigrator::install(conn).await.unwrap(),
                Mechanism::Fences => FencesMigrator::install(conn).await.unwrap(),
                _ => DirectoryMigrator::install(conn).await.unwrap(),
            }
            fail_recording(conn, history, name).await;

            let error = db.db.migrate(Mechanisms::ALL).await.unwrap_err();
            assert!(
                error.to_string().contains("injected fault"),
                "{name}: {error}"
            );
            // The steps before it are applied and recorded; it and the rest are pending.
            let pending = pending_migrations(conn, mechanism.into(), &[])
                .await
                .unwrap();
            assert_eq!(pending, names[step..], "{name}");

            stop_failing(conn, history).await;
            db.db.migrate(Mechanisms::ALL).await.unwrap();
            HostMigrator::up(conn, None).await.unwrap();
            db.db.check_schema(Mechanisms::ALL).await.unwrap();
            assert_eq!(schema_of(conn).await, clean, "interrupted at {name}");
        }
    }
}

/// Case 008 for a host that appended Tenantry's migrations to its own migrator: each step of
/// the host's run is just as atomic (the migrations ask for their transaction themselves), so
/// the host's next run completes an interrupted one.
#[tokio::test]
async fn case_008_a_host_migrator_that_appended_tenantry_resumes_after_any_step() {
    let clean = {
        let db = empty_database().await;
        HostWithTenantry::up(&db.db.conn, None).await.unwrap();
        schema_of(&db.db.conn).await
    };
    for migration in HostWithTenantry::migrations().iter().skip(1) {
        let name = migration.name();
        let db = empty_database().await;
        let conn = &db.db.conn;
        HostWithTenantry::install(conn).await.unwrap();
        fail_recording(conn, "host_migrations", name).await;
        let error = HostWithTenantry::up(conn, None).await.unwrap_err();
        assert!(
            error.to_string().contains("injected fault"),
            "{name}: {error}"
        );
        stop_failing(conn, "host_migrations").await;
        HostWithTenantry::up(conn, None).await.unwrap();
        db.db
            .check_schema_with_history(Mechanisms::ALL, "host_migrations")
            .await
            .unwrap();
        assert_eq!(schema_of(conn).await, clean, "interrupted at {name}");
    }
}
