//! The tenants' latest live turns, read by intake to give each new command its turn
//! (`tenantry_lifecycle::turn`; docs/protocol.md, "Fair claims across tenants").
//!
//! For each tenant, the largest `turn_at` among its live commands (`completed_at IS NULL`), read
//! from the index `ix_tenantry_lifecycle_outbox_tenant_turn` (m0016) by one backward step per
//! tenant, and the head of the queue (the earliest live turn, the claim index's first entry):
//! for a single intake in the statement that reads the store's clock
//! ([`queue_and_latest_turn`], so a turn costs no round trip of its own); for a batch the clock
//! and the head in one statement ([`queue`]) and the tenants' latest turns in one statement per
//! [`TENANTS_PER_STATEMENT`] tenants ([`latest_turns`]).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tenantry_lifecycle::turn::Queue;
use tenantry_ports::lifecycle::StoreError;

use super::{SeaOrmLifecycleStore, unavailable};
use crate::connect::Backend;

/// Tenants per statement of [`latest_turns`] (one bound parameter each).
pub(crate) const TENANTS_PER_STATEMENT: usize = 500;

/// The latest turn among the live commands of each of `tenants`, read on `conn` (inside the
/// intake's transaction); a tenant without live commands is absent from the map.
///
/// # Errors
/// [`StoreError`] when a statement fails or a stored turn is not a time.
pub(crate) async fn latest_turns<C: ConnectionTrait>(
    conn: &C,
    backend: Backend,
    tenants: &[&str],
) -> Result<HashMap<String, DateTime<Utc>>, StoreError> {
    let mut latest = HashMap::new();
    let mut distinct: Vec<&str> = tenants.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    for chunk in distinct.chunks(TENANTS_PER_STATEMENT) {
        let (db, values) = match backend {
            Backend::Postgres => (
                DbBackend::Postgres,
                (1..=chunk.len())
                    .map(|n| format!("(${n}::text)"))
                    .collect::<Vec<_>>(),
            ),
            Backend::Sqlite => (
                DbBackend::Sqlite,
                (1..=chunk.len()).map(|n| format!("(?{n})")).collect(),
            ),
        };
        let sql = format!(
            "WITH wanted(tenant_id) AS (VALUES {values}) \
             SELECT wanted.tenant_id AS tenant_id, \
               (SELECT MAX(o.turn_at) FROM tenantry_lifecycle_outbox o \
                  WHERE o.tenant_id = wanted.tenant_id AND o.completed_at IS NULL) AS latest \
             FROM wanted",
            values = values.join(", "),
        );
        let params: Vec<sea_orm::Value> = chunk.iter().map(|t| (*t).into()).collect();
        let rows = conn
            .query_all_raw(Statement::from_sql_and_values(db, sql, params))
            .await
            .map_err(unavailable)?;
        for row in rows {
            let tenant: String = row.try_get("", "tenant_id").map_err(unavailable)?;
            let turn: Option<i64> = row.try_get("", "latest").map_err(unavailable)?;
            if let Some(ms) = turn {
                let at = DateTime::from_timestamp_millis(ms)
                    .ok_or_else(|| StoreError::corrupt("a stored turn is not a time"))?;
                latest.insert(tenant, at);
            }
        }
    }
    Ok(latest)
}

/// SQL of the head of the queue: the earliest turn among live commands (the first entry of
/// the claim index).
const HEAD_SQL: &str =
    "(SELECT MIN(turn_at) FROM tenantry_lifecycle_outbox WHERE completed_at IS NULL)";

/// The queue as intake reads it (the store's "now", as [`SeaOrmLifecycleStore::now_on`], and the
/// head of the queue) and the latest turn among `tenant`'s live commands (`None` without one),
/// read on `conn` in one statement.
///
/// # Errors
/// [`StoreError`] when the statement fails or a time is out of range.
pub(crate) async fn queue_and_latest_turn<C: ConnectionTrait>(
    store: &SeaOrmLifecycleStore,
    conn: &C,
    tenant: &str,
) -> Result<(Queue, Option<DateTime<Utc>>), StoreError> {
    let (db, param) = match store.backend {
        Backend::Postgres => (DbBackend::Postgres, "$1"),
        Backend::Sqlite => (DbBackend::Sqlite, "?1"),
    };
    let sql = format!(
        "SELECT {now} AS now_ms, {HEAD_SQL} AS head, \
           (SELECT MAX(turn_at) FROM tenantry_lifecycle_outbox \
              WHERE tenant_id = {param} AND completed_at IS NULL) AS latest",
        now = store.now_sql(),
    );
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(db, sql, [tenant.into()]))
        .await
        .map_err(unavailable)?
        .ok_or_else(|| StoreError::unavailable("the database did not tell its time"))?;
    let queue = queue_of(&row)?;
    let latest = turn(row.try_get("", "latest").map_err(unavailable)?)?;
    Ok((queue, latest))
}

/// The queue as intake reads it, read on `conn` in one statement (see
/// [`queue_and_latest_turn`]).
///
/// # Errors
/// [`StoreError`] when the statement fails or a time is out of range.
pub(crate) async fn queue<C: ConnectionTrait>(
    store: &SeaOrmLifecycleStore,
    conn: &C,
) -> Result<Queue, StoreError> {
    let db = match store.backend {
        Backend::Postgres => DbBackend::Postgres,
        Backend::Sqlite => DbBackend::Sqlite,
    };
    let sql = format!("SELECT {} AS now_ms, {HEAD_SQL} AS head", store.now_sql());
    let row = conn
        .query_one_raw(Statement::from_string(db, sql))
        .await
        .map_err(unavailable)?
        .ok_or_else(|| StoreError::unavailable("the database did not tell its time"))?;
    queue_of(&row)
}

fn queue_of(row: &sea_orm::QueryResult) -> Result<Queue, StoreError> {
    let now_ms: i64 = row.try_get("", "now_ms").map_err(unavailable)?;
    let now = DateTime::from_timestamp_millis(now_ms)
        .ok_or_else(|| StoreError::corrupt(format!("database time {now_ms} is out of range")))?;
    let head = turn(row.try_get("", "head").map_err(unavailable)?)?;
    Ok(Queue { now, head })
}

fn turn(ms: Option<i64>) -> Result<Option<DateTime<Utc>>, StoreError> {
    ms.map(|ms| {
        DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| StoreError::corrupt("a stored turn is not a time"))
    })
    .transpose()
}
