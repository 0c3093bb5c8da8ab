//! [`RetentionStore`] over SeaORM (SQLite and PostgreSQL): bounded deletes of expired history.
//!
//! Each batch is one statement
//! `DELETE FROM t WHERE key IN (SELECT key FROM t WHERE <expired> ORDER BY <time> LIMIT n)`,
//! so it holds at most `n` rows for one statement. On PostgreSQL the subselect ends with
//! `FOR UPDATE OF t SKIP LOCKED`: a row another transaction holds (a settle, another pruner) is
//! skipped, never waited for, and two pruners at once never delete the same row twice; and the
//! batch runs in a transaction of its own that first takes the transaction-scoped advisory lock
//! [`RETENTION_LOCK_KEY`] with `pg_try_advisory_xact_lock` (never waiting): when another
//! replica holds it the batch answers [`PruneBatch::Busy`], so one replica prunes at a time and
//! no session lock outlives a transaction. On SQLite the batch is one autocommit statement;
//! writers serialize on the database lock (busy timeout), one process per file. The `<expired>`
//! predicates are the SQL form of `tenantry_lifecycle::retention`,
//! `tenantry_directory::retention` and `tenantry_fence::retention`; the conformance suites
//! check that they agree. The indexes of migrations `m0010_lifecycle_retention`,
//! `m0011_directory_retention` and `m0012_host_storage_retention` keep each batch a range read
//! however long the history is.
//!
//! Needs the `lifecycle` and `directory` features (the tables of both mechanisms); with
//! `fences` it also removes cleared fence records from `tenantry_host_storage` (without it,
//! none).

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, DbErr, Statement, TransactionTrait};
use tenantry_lifecycle::ControlSpaceState;
use tenantry_lifecycle::retention::PRUNABLE_STATUSES;
use tenantry_ports::StoreError;
use tenantry_ports::retention::{PruneBatch, RetentionKind, RetentionStore, cutoff};

use crate::error::store_error;
use crate::{Backend, Database, Mechanism};

/// The PostgreSQL advisory lock key a prune batch holds for its transaction (ASCII "tnrypru1"),
/// so one replica prunes at a time.
pub const RETENTION_LOCK_KEY: i64 = 0x746e_7279_7072_7531;

/// The retention port on a database migrated for the lifecycle and directory mechanisms.
/// Clones share the pool.
#[derive(Debug, Clone)]
pub struct SeaOrmRetentionStore {
    conn: DatabaseConnection,
    backend: Backend,
}

/// One kind's table, key, time column and "expired" predicate (alias `t`).
struct KindSql {
    table: &'static str,
    key: &'static str,
    time: &'static str,
    /// Predicate on `t`; `{cutoff}` is the cutoff placeholder.
    expired: String,
    /// Extra `FROM` items after `t`.
    join: &'static str,
    /// Which rows the oldest-record gauge reads.
    governed: String,
    mechanism: Mechanism,
}

fn kind_sql(kind: RetentionKind) -> Option<KindSql> {
    let statuses = PRUNABLE_STATUSES
        .iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    match kind {
        RetentionKind::FinishedCommands => Some(KindSql {
            table: "tenantry_lifecycle_outbox",
            key: "id",
            time: "completed_at",
            expired: format!(
                "t.completed_at IS NOT NULL AND t.completed_at <= {{cutoff}} \
                 AND t.status IN ({statuses}) \
                 AND NOT (t.operation = 'provision' AND EXISTS (SELECT 1 FROM \
                   tenantry_control_spaces cs WHERE cs.tenant_id = t.tenant_id \
                   AND cs.control_space_id = t.control_space_id AND cs.state <> '{deleted}'))",
                deleted = ControlSpaceState::Deleted.as_str(),
            ),
            join: "",
            governed: format!("t.completed_at IS NOT NULL AND t.status IN ({statuses})"),
            mechanism: Mechanism::Lifecycle,
        }),
        RetentionKind::OperatorActions => Some(KindSql {
            table: "tenantry_lifecycle_command_actions",
            key: "id",
            time: "created_at",
            expired: "t.created_at <= {cutoff}".to_owned(),
            join: "",
            governed: "1 = 1".to_owned(),
            mechanism: Mechanism::Lifecycle,
        }),
        RetentionKind::InboxReceipts => Some(KindSql {
            table: "tenantry_directory_projection_inbox",
            key: "instance_uuid, event_uuid",
            time: "received_at",
            expired: "t.received_at <= {cutoff} AND s.instance_uuid = t.instance_uuid \
                      AND t.cursor <= s.cursor"
                .to_owned(),
            join: ", tenantry_directory_projection_state s",
            // Only receipts the rule can ever remove: one of an instance without a state row,
            // or above the projection cursor, would hold the oldest-age gauge up for good.
            governed: "EXISTS (SELECT 1 FROM tenantry_directory_projection_state s \
                       WHERE s.instance_uuid = t.instance_uuid AND t.cursor <= s.cursor)"
                .to_owned(),
            mechanism: Mechanism::Directory,
        }),
        #[cfg(feature = "fences")]
        RetentionKind::ClearedFences => {
            use tenantry_fence::FENCE_KEY_PREFIX;
            use tenantry_fence::retention::TOMBSTONE_TEXT;
            // A tombstone at a fence key with a known write time; the prefix is compared
            // exactly (LIKE would fold case on SQLite).
            let governed = format!(
                "t.value = '{TOMBSTONE_TEXT}' AND t.updated_at IS NOT NULL \
                 AND substr(t.key, 1, {len}) = '{FENCE_KEY_PREFIX}'",
                len = FENCE_KEY_PREFIX.len(),
            );
            Some(KindSql {
                table: "tenantry_host_storage",
                key: "binding, key",
                time: "updated_at",
                expired: format!("{governed} AND t.updated_at <= {{cutoff}}"),
                join: "",
                governed,
                mechanism: Mechanism::Fences,
            })
        }
        _ => None,
    }
}

impl SeaOrmRetentionStore {
    /// The retention store on `db` (its tables must be migrated:
    /// `Mechanisms::LIFECYCLE`, `Mechanisms::DIRECTORY` and, with feature `fences`,
    /// `Mechanisms::FENCES`).
    pub fn new(db: &Database) -> Self {
        Self {
            conn: db.conn.clone(),
            backend: db.backend,
        }
    }

    fn db_backend(&self) -> DbBackend {
        match self.backend {
            Backend::Postgres => DbBackend::Postgres,
            Backend::Sqlite => DbBackend::Sqlite,
        }
    }

    /// Placeholder `n`: `$n` on PostgreSQL, `?n` on SQLite.
    fn p(&self, n: u8) -> String {
        match self.backend {
            Backend::Postgres => format!("${n}"),
            Backend::Sqlite => format!("?{n}"),
        }
    }

    async fn count(&self, sql: String, values: Vec<sea_orm::Value>) -> Result<i64, DbErr> {
        let row = self
            .conn
            .query_one_raw(Statement::from_sql_and_values(
                self.db_backend(),
                sql,
                values,
            ))
            .await?;
        Ok(match row {
            Some(row) => row.try_get::<Option<i64>>("", "n")?.unwrap_or(0),
            None => 0,
        })
    }
}

fn ms(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

#[async_trait]
impl RetentionStore for SeaOrmRetentionStore {
    async fn prune_batch(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
        limit: u32,
    ) -> Result<PruneBatch, StoreError> {
        let Some(k) = kind_sql(kind) else {
            return Ok(PruneBatch::Removed(0));
        };
        let lock = match self.backend {
            Backend::Postgres => " FOR UPDATE OF t SKIP LOCKED",
            Backend::Sqlite => "",
        };
        let sql = format!(
            "DELETE FROM {table} WHERE ({key}) IN (SELECT {tkey} FROM {table} t{join} \
             WHERE {expired} ORDER BY t.{time} LIMIT {limit}{lock})",
            table = k.table,
            key = k.key,
            tkey = k
                .key
                .split(", ")
                .map(|c| format!("t.{c}"))
                .collect::<Vec<_>>()
                .join(", "),
            join = k.join,
            expired = k.expired.replace("{cutoff}", &self.p(1)),
            time = k.time,
            limit = self.p(2),
        );
        let values: Vec<sea_orm::Value> = vec![
            ms(cutoff(now, window)).into(),
            i64::from(limit.max(1)).into(),
        ];
        let statement = Statement::from_sql_and_values(self.db_backend(), sql, values);
        let mechanism = k.mechanism;
        let error = move |e| store_error(mechanism, e);
        match self.backend {
            Backend::Sqlite => {
                let result = self.conn.execute_raw(statement).await.map_err(error)?;
                Ok(PruneBatch::Removed(result.rows_affected()))
            }
            Backend::Postgres => {
                let conn = self.conn.clone();
                // Its own task: a dropped caller cannot leave the transaction open.
                crate::lifecycle::detached(async move {
                    let txn = conn.begin().await.map_err(error)?;
                    let answer = prune_locked(&txn, statement, mechanism).await;
                    // Busy, or a failed statement: the advisory lock and any row lock are let
                    // go before the answer (`crate::txn`).
                    let removed = |batch: &PruneBatch| matches!(batch, PruneBatch::Removed(_));
                    crate::txn::finish(txn, answer, removed, error).await
                })
                .await
            }
        }
    }

    async fn count_expired(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
    ) -> Result<u64, StoreError> {
        let Some(k) = kind_sql(kind) else {
            return Ok(0);
        };
        let sql = format!(
            "SELECT COUNT(*) AS n FROM {table} t{join} WHERE {expired}",
            table = k.table,
            join = k.join,
            expired = k.expired.replace("{cutoff}", &self.p(1)),
        );
        let n = self
            .count(sql, vec![ms(cutoff(now, window)).into()])
            .await
            .map_err(|e| store_error(k.mechanism, e))?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        let now_sql = match self.backend {
            Backend::Postgres => "(extract(epoch from statement_timestamp()) * 1000)::bigint",
            Backend::Sqlite => "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
        };
        let n = self
            .count(format!("SELECT {now_sql} AS n"), Vec::new())
            .await
            .map_err(|e| store_error(Mechanism::Lifecycle, e))?;
        DateTime::from_timestamp_millis(n)
            .ok_or_else(|| StoreError::corrupt(format!("database time {n} is out of range")))
    }

    async fn oldest(&self, kind: RetentionKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        let Some(k) = kind_sql(kind) else {
            return Ok(None);
        };
        let sql = format!(
            "SELECT MIN(t.{time}) AS n FROM {table} t WHERE {governed}",
            time = k.time,
            table = k.table,
            governed = k.governed,
        );
        let row = self
            .conn
            .query_one_raw(Statement::from_string(self.db_backend(), sql))
            .await
            .map_err(|e| store_error(k.mechanism, e))?;
        let oldest = match row {
            Some(row) => row
                .try_get::<Option<i64>>("", "n")
                .map_err(|e| store_error(k.mechanism, e))?,
            None => None,
        };
        Ok(oldest.and_then(DateTime::from_timestamp_millis))
    }
}

/// One PostgreSQL prune batch inside `txn`: `Busy` when another replica holds the retention
/// advisory lock, else the rows `statement` removed. The caller commits or rolls back.
async fn prune_locked(
    txn: &sea_orm::DatabaseTransaction,
    statement: Statement,
    mechanism: Mechanism,
) -> Result<PruneBatch, StoreError> {
    let error = move |e| store_error(mechanism, e);
    let locked = txn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT pg_try_advisory_xact_lock({RETENTION_LOCK_KEY}) AS locked"),
        ))
        .await
        .map_err(error)?
        .map(|row| row.try_get::<bool>("", "locked"))
        .transpose()
        .map_err(error)?
        .unwrap_or(false);
    if !locked {
        return Ok(PruneBatch::Busy);
    }
    let result = txn.execute_raw(statement).await.map_err(error)?;
    Ok(PruneBatch::Removed(result.rows_affected()))
}
