//! Ending a transaction that does not commit.
//!
//! On PostgreSQL a `DatabaseTransaction` dropped without `commit` or `rollback` only queues its
//! `ROLLBACK`: the driver sends it when the connection is next used or handed back to the pool,
//! from a task of its own, later. Until then the transaction's row locks stay held, so a store
//! method that answered "refused" could still hold the rows it locked — a claim right after it
//! (its `FOR UPDATE SKIP LOCKED`) skipped such a row. (SQLite's driver hands the rollback to its
//! worker thread at once.) The store methods of the ports — settle, batch settle, operator
//! action, intake, retention's prune and the directory apply — therefore end each transaction
//! they do not commit with [`roll_back`] (through [`finish`], which decides commit or rollback
//! from the body's answer) before they answer (docs/protocol.md, "A refusal holds
//! no lock"). The bench and test fixture loaders (`bulk_insert`, `seed_rows`) do not: an error
//! there ends the run.

use sea_orm::{DatabaseTransaction, DbErr};

/// Rolls `txn` back now, before the caller answers. A failed rollback (the connection broke)
/// is only traced: the server then ends the transaction itself when the connection closes, and
/// the caller's own answer (a refusal, or the error that made it roll back) is what counts.
pub(crate) async fn roll_back(txn: DatabaseTransaction) {
    if let Err(error) = txn.rollback().await {
        tracing::warn!(%error, "rollback failed; the server ends the transaction with its connection");
    }
}

/// Ends `txn` by what its body answered, so no store method decides it twice: commits when the
/// answer is `Ok` and `keep` says its value is to be kept, otherwise rolls back with
/// [`roll_back`] and passes the answer on unchanged. A failed commit becomes
/// `commit_failed(error)` (nothing of the body is then known to be kept).
///
/// `keep` is `|_| true` for the methods that commit every `Ok`; intake passes the answers
/// that create rows, retention's prune the one that removed rows.
pub(crate) async fn finish<T, E>(
    txn: DatabaseTransaction,
    answer: Result<T, E>,
    keep: impl FnOnce(&T) -> bool,
    commit_failed: impl FnOnce(DbErr) -> E,
) -> Result<T, E> {
    match answer {
        Ok(value) if keep(&value) => {
            txn.commit().await.map_err(commit_failed)?;
            Ok(value)
        }
        other => {
            roll_back(txn).await;
            other
        }
    }
}
