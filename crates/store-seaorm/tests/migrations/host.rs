//! Tenantry's migrators beside a host's own: either order, appended to the host's migrator, a
//! foreign table refused by name, a selection of mechanisms, the host's pool, a foreign prefixed
//! table stopping the legacy upgrade, and two concurrent migrations.

use super::prefix::{assert_named, insert_rows, make_legacy};
use super::*;

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
pub(super) struct HostMigrator;

#[async_trait::async_trait]
impl MigratorTrait for HostMigrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![Box::new(HostThings)]
    }
}

/// A host migrator that appended Tenantry's migrations to its own list, on a history table of
/// its own naming.
pub(super) struct HostWithTenantry;

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
        Err(ConnectError::SchemaNotCurrent { pending: 16, .. })
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
        Err(ConnectError::SchemaNotCurrent { pending: 16, .. })
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
