//! Later migration steps up, down and up: the retention indexes (m0010 to m0012), the
//! attempt-error log, m0014 (room for HOT updates), m0015 (the commands' trace context) and
//! m0016 (the commands' turns).

use super::*;

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
    // m0016, m0015, m0014, m0013 and m0010.
    LifecycleMigrator::down(conn, Some(5)).await.unwrap();
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
    // m0016, m0015, m0014 and m0013.
    LifecycleMigrator::down(conn, Some(4)).await.unwrap();
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
    if let Some(options) = fill_factor(conn, outbox).await {
        assert_eq!(options, "fillfactor=30", "after up");
    }
    if let Some(options) = fill_factor(conn, "tenantry_control_spaces").await {
        assert_eq!(options, "fillfactor=50", "after up: control spaces");
    }
    insert_command(conn, outbox, "c-live", 0, "NULL").await;
    // m0016, m0015 and m0014.
    LifecycleMigrator::down(conn, Some(3)).await.unwrap();
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
        3
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

/// m0015 (the commands' trace context) runs up, down and up again with commands present: the
/// rows survive both ways, the column is `NULL` on rows enqueued before it and keeps what a
/// command stored after it; down drops the column.
#[tokio::test]
async fn m0015_runs_up_down_and_up_again_with_rows_present() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let outbox = "tenantry_lifecycle_outbox";
    assert!(
        column_exists(conn, outbox, "trace_context").await,
        "after up"
    );
    insert_command(conn, outbox, "c-before", 0, "NULL").await;
    // m0016 and m0015.
    LifecycleMigrator::down(conn, Some(2)).await.unwrap();
    assert!(
        !column_exists(conn, outbox, "trace_context").await,
        "after down"
    );
    assert_eq!(count(conn, outbox).await, 1, "rows survive down");
    insert_command(conn, outbox, "c-old", 0, "NULL").await;
    LifecycleMigrator::up(conn, None).await.unwrap();
    assert!(
        column_exists(conn, outbox, "trace_context").await,
        "after the second up"
    );
    assert_eq!(count(conn, outbox).await, 2, "rows survive up");
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    conn.execute_unprepared(&format!(
        "UPDATE {outbox} SET trace_context = '{traceparent}' WHERE id = 'c-before'"
    ))
    .await
    .unwrap();
    let stored = |id: &'static str| async move {
        conn.query_one_raw(Statement::from_string(
            conn.get_database_backend(),
            format!("SELECT trace_context FROM {outbox} WHERE id = '{id}'"),
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<Option<String>>("", "trace_context")
        .unwrap()
    };
    assert_eq!(stored("c-before").await.as_deref(), Some(traceparent));
    assert_eq!(
        stored("c-old").await,
        None,
        "rows from before m0015 carry none"
    );
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
}

/// m0016 (the commands' turns) runs up, down and up again with commands present: the rows
/// survive both ways; a live command present when it runs takes its enqueue time as its turn
/// (also one waiting out a backoff, whose due time is later), a finished one 0; the claim index
/// is in turn order after up and m0004's due order after down.
#[tokio::test]
async fn m0016_runs_up_down_and_up_again_with_rows_present() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let outbox = "tenantry_lifecycle_outbox";
    assert_eq!(
        LifecycleMigrator::migrations().last().unwrap().name(),
        "m0016_lifecycle_turns"
    );
    let turn_indexes = [
        "ix_tenantry_lifecycle_outbox_turn",
        "ix_tenantry_lifecycle_outbox_tenant_turn",
    ];
    let due_index = "ix_tenantry_lifecycle_outbox_claim";
    for index in turn_indexes {
        assert!(index_exists(conn, index).await, "after up: {index}");
    }
    assert!(
        !index_exists(conn, due_index).await,
        "after up: no due index"
    );
    insert_command(conn, outbox, "c-before", 0, "NULL").await;
    LifecycleMigrator::down(conn, Some(1)).await.unwrap();
    assert!(!column_exists(conn, outbox, "turn_at").await, "after down");
    for index in turn_indexes {
        assert!(!index_exists(conn, index).await, "after down: {index}");
    }
    assert!(index_exists(conn, due_index).await, "after down: due index");
    assert_eq!(count(conn, outbox).await, 1, "rows survive down");
    insert_command(conn, outbox, "c-live", 0, "NULL").await;
    insert_command(conn, outbox, "c-done", 1, "5000").await;
    // c-live waits out a backoff: due at 9000, enqueued at 1000.
    conn.execute_unprepared(&format!(
        "UPDATE {outbox} SET next_attempt_at = 9000 WHERE id = 'c-live'"
    ))
    .await
    .unwrap();
    LifecycleMigrator::up(conn, None).await.unwrap();
    assert_eq!(count(conn, outbox).await, 3, "rows survive up");
    let turn = |id: &'static str| async move {
        conn.query_one_raw(Statement::from_string(
            conn.get_database_backend(),
            format!("SELECT turn_at FROM {outbox} WHERE id = '{id}'"),
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get::<i64>("", "turn_at")
        .unwrap()
    };
    assert_eq!(turn("c-before").await, 1000, "live: its enqueue time");
    assert_eq!(
        turn("c-live").await,
        1000,
        "live in a backoff: its enqueue time, not its due time"
    );
    assert_eq!(turn("c-done").await, 0, "finished: none");
    for index in turn_indexes {
        assert!(
            index_exists(conn, index).await,
            "after the second up: {index}"
        );
    }
    db.db.check_schema(Mechanisms::ALL).await.unwrap();
}
