//! Enqueue inside the caller's transaction (`SeaOrmLifecycleStore::enqueue`), on SQLite
//! (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`): a host platform writes its own row and a
//! lifecycle command in one transaction. Rolled back, neither exists; committed, both do and a
//! worker dispatches the command. A refused request leaves the host's transaction usable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sea_orm::{
    ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, SqliteTransactionMode,
    Statement, TransactionOptions, TransactionTrait,
};
use tenantry_engine::lifecycle::{Dispatcher, DispatcherConfig, IntakeFailure};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, IntakeError, IntakeReceipt, RequestDeletion};
use tenantry_lifecycle::{ControlSpaceState, Operation};
use tenantry_ports::lifecycle::fake::FakeKnowledgeFs;
use tenantry_ports::lifecycle::{ControlSpaceReader, IntakeStore};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

fn tenant() -> TenantId {
    TenantId::parse("acme").unwrap()
}

fn create(cs: &str, key: &str, name: &str) -> CreateControlSpace {
    CreateControlSpace::new(
        tenant(),
        ControlSpaceId::parse(cs).unwrap(),
        IdempotencyKey::parse(key).unwrap(),
        name,
        "docs",
    )
}

/// The host platform's own table.
async fn create_host_table(conn: &DatabaseConnection) {
    conn.execute_unprepared("CREATE TABLE host_projects (id VARCHAR(64) PRIMARY KEY)")
        .await
        .unwrap();
}

async fn insert_host_row(txn: &DatabaseTransaction, id: &str) {
    let backend = txn.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => "INSERT INTO host_projects (id) VALUES ($1)",
        _ => "INSERT INTO host_projects (id) VALUES (?)",
    };
    txn.execute_raw(Statement::from_sql_and_values(backend, sql, [id.into()]))
        .await
        .unwrap();
}

async fn host_rows(conn: &DatabaseConnection) -> Vec<String> {
    let backend = conn.get_database_backend();
    conn.query_all_raw(Statement::from_string(
        backend,
        "SELECT id FROM host_projects ORDER BY id",
    ))
    .await
    .unwrap()
    .into_iter()
    .map(|row| row.try_get::<String>("", "id").unwrap())
    .collect()
}

/// A write transaction as the docs of `enqueue` recommend (IMMEDIATE on SQLite).
async fn begin(conn: &DatabaseConnection) -> DatabaseTransaction {
    conn.begin_with_options(TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    })
    .await
    .unwrap()
}

/// Creates the host table, then opens a host transaction that writes the row `project-1` and
/// enqueues the create of `cs-1` in it; returns the open transaction and the receipt.
async fn host_row_and_command(
    store: &SeaOrmLifecycleStore,
    conn: &DatabaseConnection,
) -> (DatabaseTransaction, IntakeReceipt) {
    create_host_table(conn).await;
    let txn = begin(conn).await;
    insert_host_row(&txn, "project-1").await;
    let receipt = store
        .enqueue(&txn, create("cs-1", "create-cs-1", "Docs"))
        .await
        .unwrap();
    (txn, receipt)
}

#[tokio::test]
async fn a_rolled_back_host_transaction_leaves_neither_its_row_nor_the_command() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let (txn, receipt) = host_row_and_command(&store, conn).await;
    assert!(!receipt.replayed);
    assert_eq!(receipt.operation, Operation::Provision);
    txn.rollback().await.unwrap();

    assert!(host_rows(conn).await.is_empty());
    let key = IdempotencyKey::parse("create-cs-1").unwrap();
    assert_eq!(store.command_by_idempotency_key(&key).await.unwrap(), None);
    let space = ControlSpaceId::parse("cs-1").unwrap();
    assert_eq!(store.control_space(&tenant(), &space).await.unwrap(), None);
}

#[tokio::test]
async fn a_committed_host_transaction_keeps_both_and_the_command_is_dispatched() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let (txn, receipt) = host_row_and_command(&store, conn).await;
    txn.commit().await.unwrap();

    assert_eq!(host_rows(conn).await, ["project-1"]);
    let key = IdempotencyKey::parse("create-cs-1").unwrap();
    let command = store
        .command_by_idempotency_key(&key)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(command.id, receipt.command_id);

    let remote = FakeKnowledgeFs::new();
    let dispatcher = Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default());
    let outcome = dispatcher
        .dispatch_one(&LeaseOwner::parse("worker-1").unwrap(), true)
        .await
        .unwrap();
    assert!(outcome.claimed);
    let space = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs-1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.state, ControlSpaceState::Active);
    assert!(remote.has_space(&space.provisioning_key));
}

/// A refused request writes nothing of its own and leaves the host's transaction usable, even
/// after a failed statement (the duplicate control space id is a unique violation: PostgreSQL
/// would abort the whole transaction without the savepoint).
#[tokio::test]
async fn a_refused_request_leaves_the_host_transaction_usable() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    create_host_table(conn).await;
    let store = SeaOrmLifecycleStore::new(&db.db);
    store
        .enqueue(conn, create("cs-1", "create-cs-1", "Docs"))
        .await
        .unwrap();

    let txn = begin(conn).await;
    insert_host_row(&txn, "project-1").await;
    let taken = store
        .enqueue(&txn, create("cs-1", "another-key", "Docs"))
        .await;
    assert!(
        matches!(
            taken,
            Err(IntakeFailure::Rejected(
                IntakeError::ControlSpaceExists { .. }
            ))
        ),
        "{taken:?}"
    );
    let unknown = store
        .enqueue(
            &txn,
            RequestDeletion::new(
                tenant(),
                ControlSpaceId::parse("missing").unwrap(),
                IdempotencyKey::parse("delete-missing").unwrap(),
            ),
        )
        .await;
    assert!(
        matches!(
            unknown,
            Err(IntakeFailure::Rejected(
                IntakeError::UnknownControlSpace { .. }
            ))
        ),
        "{unknown:?}"
    );
    let conflict = store
        .enqueue(&txn, create("cs-1", "create-cs-1", "A different name"))
        .await;
    assert!(
        matches!(
            conflict,
            Err(IntakeFailure::Rejected(
                IntakeError::IdempotencyConflict { .. }
            ))
        ),
        "{conflict:?}"
    );
    let replay = store
        .enqueue(&txn, create("cs-1", "create-cs-1", "Docs"))
        .await
        .unwrap();
    assert!(replay.replayed);
    let deletion = store
        .enqueue(
            &txn,
            RequestDeletion::new(
                tenant(),
                ControlSpaceId::parse("cs-1").unwrap(),
                IdempotencyKey::parse("delete-cs-1").unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(deletion.operation, Operation::Delete);
    insert_host_row(&txn, "project-2").await;
    txn.commit().await.unwrap();

    assert_eq!(host_rows(conn).await, ["project-1", "project-2"]);
    let space = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs-1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.state, ControlSpaceState::Deleting);
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("another-key").unwrap())
            .await
            .unwrap()
            .is_none()
    );
}

/// Two host transactions enqueue the same request with one key at the same time: the one that
/// commits second gets the first one's receipt as a replay, and its own host row still commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_transactions_with_one_key_give_one_command() {
    let db = fresh_database().await;
    let conn = db.db.conn.clone();
    create_host_table(&conn).await;
    let store = SeaOrmLifecycleStore::new(&db.db);

    let first = begin(&conn).await;
    insert_host_row(&first, "project-1").await;
    let original = store
        .enqueue(&first, create("cs-1", "create-cs-1", "Docs"))
        .await
        .unwrap();
    let second = tokio::spawn({
        let (store, conn) = (store.clone(), conn.clone());
        async move {
            // Blocks on the first transaction's rows (PostgreSQL) or write lock (SQLite).
            let txn = begin(&conn).await;
            insert_host_row(&txn, "project-2").await;
            let receipt = store
                .enqueue(&txn, create("cs-1", "create-cs-1", "Docs"))
                .await;
            txn.commit().await.unwrap();
            receipt
        }
    });
    // Real time: lets the second transaction reach the database and block on the first.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    first.commit().await.unwrap();
    let replay = second.await.unwrap().unwrap();

    assert!(replay.replayed);
    assert_eq!(replay.command_id, original.command_id);
    assert_eq!(host_rows(&conn).await, ["project-1", "project-2"]);
}

/// A platform that migrated only the fences and then enqueues gets an error that says what to
/// do (migrate the lifecycle mechanism), not a retryable "database unavailable".
#[tokio::test]
async fn enqueue_without_the_lifecycle_schema_says_to_migrate_it() {
    let test = tenantry_store_seaorm::testing::empty_database().await;
    let db = tenantry_store_seaorm::Database::from_connection(test.db.conn.clone()).unwrap();
    db.migrate(tenantry_store_seaorm::Mechanisms::FENCES)
        .await
        .unwrap();
    let store = SeaOrmLifecycleStore::new(&db);
    let txn = begin(&db.conn).await;
    let error = store
        .enqueue(&txn, create("cs-1", "create-cs-1", "Docs"))
        .await
        .unwrap_err();
    let IntakeFailure::Store(store_error) = &error else {
        panic!("{error:?}");
    };
    assert!(
        matches!(
            store_error,
            tenantry_ports::lifecycle::StoreError::SchemaMissing { .. }
        ),
        "{store_error:?}"
    );
    assert!(
        error.to_string().contains("Mechanisms::LIFECYCLE"),
        "{error}"
    );
}

/// The id of a deleted control space is refused as deleted (`CONTROL_SPACE_DELETED`), not as
/// existing, inside the caller's transaction too.
#[tokio::test]
async fn a_deleted_control_space_id_is_refused_as_deleted() {
    let db = fresh_database().await;
    let conn = &db.db.conn;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let dispatcher = Dispatcher::new(
        store.clone(),
        FakeKnowledgeFs::new(),
        DispatcherConfig::default(),
    );
    let owner = LeaseOwner::parse("w1").unwrap();
    store
        .enqueue(conn, create("cs-1", "create-cs-1", "Docs"))
        .await
        .unwrap();
    while dispatcher.dispatch_one(&owner, true).await.unwrap().claimed {}
    store
        .enqueue(
            conn,
            RequestDeletion::new(
                tenant(),
                ControlSpaceId::parse("cs-1").unwrap(),
                IdempotencyKey::parse("delete-cs-1").unwrap(),
            ),
        )
        .await
        .unwrap();
    while dispatcher.dispatch_one(&owner, true).await.unwrap().claimed {}
    let space = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs-1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.state, ControlSpaceState::Deleted);
    let taken = store
        .enqueue(conn, create("cs-1", "create-again", "Docs"))
        .await;
    assert!(
        matches!(
            taken,
            Err(IntakeFailure::Rejected(
                IntakeError::ControlSpaceDeleted { .. }
            ))
        ),
        "{taken:?}"
    );
}
