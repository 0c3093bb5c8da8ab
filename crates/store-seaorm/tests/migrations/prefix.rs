//! The `tenantry_` prefix migrations: tables renamed both ways keeping rows, and a database
//! migrated before the per-mechanism history tables adopted and renamed.

use super::*;

/// One row in a table of each mechanism, under the given table prefix (`""` or `tenantry_`).
pub(super) async fn insert_rows(conn: &DatabaseConnection, prefix: &str) {
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

pub(super) async fn assert_named(conn: &DatabaseConnection, prefix: &str, other: &str, when: &str) {
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
    // The claim index: m0004's due order before the prefix, m0016's turn order after it.
    let claim = if prefix.is_empty() {
        "ix_lifecycle_outbox_claim".to_owned()
    } else {
        format!("ix_{prefix}lifecycle_outbox_turn")
    };
    assert!(index_exists(conn, &claim).await, "{when}: {claim}");
    let inbox = format!("ix_{prefix}directory_projection_inbox_cursor");
    assert!(index_exists(conn, &inbox).await, "{when}: {inbox}");
    if conn.get_database_backend() == DbBackend::Postgres {
        let pkey = format!("{prefix}accounts_pkey");
        assert!(index_exists(conn, &pkey).await, "{when}: {pkey}");
    }
}

async fn down_prefix_migrations(conn: &DatabaseConnection) {
    // The retention migrations (m0010, m0011, m0012), the attempt-error log (m0013), the
    // outbox's fill factor (m0014), its trace context (m0015) and its turns (m0016) come after
    // the prefix migrations: revert them first.
    LifecycleMigrator::down(conn, Some(6)).await.unwrap();
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
        Err(ConnectError::SchemaNotCurrent { pending: 10, .. })
    ));

    db.db.migrate(Mechanisms::ALL).await.unwrap();
    assert_named(conn, "tenantry_", "", "after the second up").await;
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
    let claimed = claim_up_to_8(&db).await;
    assert_eq!(claimed.len(), 1, "the command inserted before the renames");
}

/// Turns a fresh database into one migrated by Tenantry 0.1: unprefixed tables, history of
/// m0001..m0006 in `seaql_migrations` (plus `host_row`, a migration of the host's, if given),
/// no per-mechanism history tables.
pub(super) async fn make_legacy(conn: &DatabaseConnection, host_row: Option<&str>) {
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
        Err(ConnectError::SchemaNotCurrent { pending: 10, .. })
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
    assert_eq!(count(conn, "tenantry_lifecycle_migrations").await, 10);
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
