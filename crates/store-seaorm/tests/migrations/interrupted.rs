//! An interrupted migration step is completed by the next run (case 008), on Tenantry's
//! migrators alone and on a host migrator that appended them.

use super::host::{HostMigrator, HostWithTenantry};
use super::*;

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
