//! Enqueue a lifecycle command in your own database transaction (the transactional outbox).
//!
//! Your platform writes its business row ("a project") and Tenantry's provision command in one
//! transaction: both commit or neither does. A worker on the same database dispatches the
//! command after the commit.
//!
//! Run: `cargo run -p tenantry-examples --example enqueue_in_your_transaction`

use sea_orm::{
    ConnectionTrait, DatabaseTransaction, DbBackend, SqliteTransactionMode, Statement,
    TransactionOptions, TransactionTrait,
};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

/// Your own table, in the same database as Tenantry's.
async fn insert_project(txn: &DatabaseTransaction, id: &str) -> Result<(), sea_orm::DbErr> {
    txn.execute_raw(Statement::from_sql_and_values(
        DbBackend::Sqlite,
        "INSERT INTO projects (id) VALUES (?)",
        [id.into()],
    ))
    .await?;
    Ok(())
}

fn create_space(id: &str) -> Result<CreateControlSpace, tenantry_kernel::IdError> {
    Ok(CreateControlSpace::new(
        TenantId::parse("acme")?,
        ControlSpaceId::parse(id)?,
        IdempotencyKey::parse(format!("create-{id}"))?,
        format!("Space of {id}"),
        id.to_owned(),
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

/// The example; also run by `cargo test` (see the test at the end).
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("app.db").display());
    let db = tenantry_store_seaorm::connect(&url, 4).await?;
    db.conn
        .execute_unprepared("CREATE TABLE projects (id TEXT PRIMARY KEY)")
        .await?;
    let store = SeaOrmLifecycleStore::new(&db);
    // On SQLite a write transaction should take the write lock at BEGIN (IMMEDIATE).
    let write = || TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    };

    println!("1. project + provision command, rolled back: neither exists");
    let txn = db.conn.begin_with_options(write()).await?;
    insert_project(&txn, "apollo").await?;
    store.enqueue(&txn, create_space("apollo")?).await?;
    txn.rollback().await?;

    println!("2. project + provision command, committed: both exist");
    let txn = db.conn.begin_with_options(write()).await?;
    insert_project(&txn, "gemini").await?;
    let receipt = store.enqueue(&txn, create_space("gemini")?).await?;
    txn.commit().await?;
    println!("  enqueued {} ({})", receipt.command_id, receipt.operation);

    let filter = CommandFilter {
        limit: 100,
        ..CommandFilter::default()
    };
    let commands = store.list_commands(&filter).await?;
    let projects = db
        .conn
        .query_all_raw(Statement::from_string(
            DbBackend::Sqlite,
            "SELECT id FROM projects",
        ))
        .await?;
    println!(
        "  {} project(s), {} command(s): {}",
        projects.len(),
        commands.len(),
        commands
            .iter()
            .map(|c| format!("{} {} {}", c.operation, c.control_space_id, c.status))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert_eq!((projects.len(), commands.len()), (1, 1));
    println!("a worker on this database (see saga_with_your_knowledge_fs) now dispatches it");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread")]
    async fn the_example_runs() {
        if let Err(error) = super::run().await {
            panic!("the example failed: {error}");
        }
    }
}
