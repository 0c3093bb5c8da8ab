//! Group commit of settlements: [`CommandQueue::settle_many`] in one statement or one
//! transaction, keeping every per-command guarantee of `settle`; and batched control-space
//! reads ([`ControlSpaceReader::control_spaces`]), one statement for many keys.
//!
//! The batch is split, in the order given, into
//! - *fast* items: an outcome (ack, retry, fail or moot), with or without a control-space
//!   compare-and-set, no supersede, touching a command and a control space that no earlier item of the batch
//!   touches; they are independent of each other and settled together;
//! - *slow* items: everything else (supersedes, settlements without outcome, a second item on
//!   the same command or control space); each is settled after the fast ones, in order, with
//!   the single-settlement code inside its own savepoint, so a refusal rolls back exactly that
//!   item.
//!
//! On PostgreSQL the fast items take one statement (and, when it refuses an item with a
//! compare-and-set, one look-up of the refused items' leases), with JSON parameters expanded
//! by `json_to_recordset` (so the statement text, and its prepared statement, is the same for
//! every batch size). Its parts:
//! 1. for the items with a compare-and-set, a data-modifying CTE `UPDATE
//!    tenantry_control_spaces .. FROM (SELECT .. FOR UPDATE OF o, s) .. RETURNING`: its
//!    subquery verifies their leases (owner, epoch, status processing) and expected resource
//!    versions and states, and locks their outbox rows and control spaces in control-space
//!    order, so concurrent batches cannot deadlock on them; the update applies their
//!    compare-and-sets. An item it does not return is reported, after one look-up of the
//!    leases of all such items, as [`SettleError::LeaseLost`] or (lease held: the control
//!    space changed or is gone) [`SettleError::ControlSpaceConflict`], and gets no outcome;
//! 2. one `UPDATE tenantry_lifecycle_outbox .. FROM json_to_recordset(..) .. RETURNING`
//!    writing the outcome (ack, retry, fail or moot) of every item whose compare-and-set part
//!    1 applied, and of every item without one under its lease (an item it does not return
//!    lost its lease). When the batch holds retries or dead letters, a further CTE inserts
//!    their attempt-error log entries from the rows it updated.
//!
//! A batch of outcomes without compare-and-sets is part 2 alone. A batch without slow items
//! runs in autocommit: one round trip for the whole batch (until 2026-12-05 a batch with
//! compare-and-sets was `BEGIN`, two statements and `COMMIT`; before that, three statements).
//! On SQLite (one writer at a time, no round
//! trips) every item is slow: one `IMMEDIATE` transaction, a savepoint per item that writes
//! more than its outbox row. A slow item logs its error with the single-settlement code
//! (`settle_in`), after its checks passed.
//!
//! [`CommandQueue::settle_many`]: tenantry_ports::lifecycle::CommandQueue::settle_many
//! [`ControlSpaceReader::control_spaces`]: tenantry_ports::lifecycle::ControlSpaceReader::control_spaces

use std::collections::{HashMap, HashSet};

use serde_json::json;

use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, Statement, TransactionTrait};
use tenantry_kernel::{ControlSpaceId, TenantId};
use tenantry_lifecycle::{CommandOutcome, CommandStatus, ControlSpace, LeaseToken, Settlement};
use tenantry_ports::lifecycle::{SettleError, StoreError};

use super::convert::{millis, to_control_space};
use super::entity::control_space;
use super::{SeaOrmLifecycleStore, logged_error, settle_in, unavailable};
use crate::connect::Backend;

type Item = (LeaseToken, Settlement);
type Outcomes = Vec<Result<(), SettleError>>;

/// Settles `items` atomically (one statement, or one transaction when some item is settled
/// one by one); see the module documentation.
pub(super) async fn settle_many(
    store: &SeaOrmLifecycleStore,
    items: &[Item],
) -> Result<Outcomes, StoreError> {
    let mut results: Outcomes = vec![Ok(()); items.len()];
    if items.is_empty() {
        return Ok(results);
    }
    let plan = Plan::of(items, store.backend == Backend::Postgres);
    let now = store.now_sql();
    if plan.slow.is_empty() {
        // One statement (PostgreSQL; on SQLite every item is slow): atomic on its own, no
        // transaction needed.
        let refused =
            settle_fast_postgres(&store.conn, &now, items, &plan.fast, &mut results).await?;
        // The rest of the batch is committed by now: a failed look-up fails only the refused
        // items (each reported as the storage error it met; none of them wrote anything).
        if let Err(error) = classify_refused(&store.conn, items, &refused, &mut results).await {
            for i in refused {
                results[i] = Err(SettleError::Store(error.clone()));
            }
        }
        return Ok(results);
    }
    let txn = store.begin_write().await?;
    let answer = settle_many_in(store, &txn, items, &plan, &now, &mut results).await;
    // On an error nothing of the batch is committed, and no row stays locked once it answers.
    crate::txn::finish(txn, answer, |_| true, unavailable).await?;
    Ok(results)
}

/// The statements of a batch inside `txn`, each item's answer written to `results`; an error
/// means the transaction is unusable and the caller rolls it back.
async fn settle_many_in(
    store: &SeaOrmLifecycleStore,
    txn: &sea_orm::DatabaseTransaction,
    items: &[Item],
    plan: &Plan,
    now: &str,
    results: &mut Outcomes,
) -> Result<(), StoreError> {
    if store.backend == Backend::Postgres && !plan.slow.is_empty() {
        // Every row lock of the batch in one global order, before any write: outbox rows by
        // id, then control spaces by key. Concurrent batches then wait for each other instead
        // of deadlocking; a deadlock with a writer outside this order is retried by the caller.
        // A batch of fast items only needs no extra statement: its one statement locks its
        // control spaces (and their outbox rows) in key order.
        let mut ids: Vec<&str> = Vec::with_capacity(items.len());
        for (lease, settlement) in items {
            ids.push(lease.command_id.as_str());
            if let Some(supersede) = &settlement.supersede {
                ids.push(supersede.command_id.as_str());
            }
        }
        lock_commands(store, txn, ids).await?;
        lock_spaces(txn, items).await?;
    }
    if !plan.fast.is_empty() {
        let refused = settle_fast_postgres(txn, now, items, &plan.fast, results).await?;
        if let Some(Err(SettleError::Store(error))) = plan
            .fast
            .iter()
            .map(|&i| &results[i])
            .find(|answer| matches!(answer, Err(SettleError::Store(_))))
        {
            // A compare-and-set without its outcome: nothing of the batch is committed.
            return Err(error.clone());
        }
        classify_refused(txn, items, &refused, results).await?;
    }
    for &i in &plan.slow {
        let (lease, settlement) = &items[i];
        let needs_savepoint = settlement.control_space.is_some() || settlement.supersede.is_some();
        if !needs_savepoint {
            // Only the outbox row is written, by one statement that matches or not.
            results[i] = settle_in(txn, now, lease, settlement).await;
        } else {
            let savepoint = txn.begin().await.map_err(unavailable)?;
            match settle_in(&savepoint, now, lease, settlement).await {
                Ok(()) => savepoint.commit().await.map_err(unavailable)?,
                Err(refused) => {
                    savepoint.rollback().await.map_err(unavailable)?;
                    results[i] = Err(refused);
                }
            }
        }
        if let Err(SettleError::Store(error)) = &results[i] {
            // The transaction is unusable; nothing of the batch is committed.
            return Err(error.clone());
        }
    }
    Ok(())
}

/// Which items are settled together (fast) and which one by one (slow), in batch order.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    fast: Vec<usize>,
    slow: Vec<usize>,
}

impl Plan {
    /// Splits `items`; with `fast_allowed` false every item is slow.
    fn of(items: &[Item], fast_allowed: bool) -> Self {
        let mut plan = Plan::default();
        let mut commands: HashSet<&str> = HashSet::new();
        let mut spaces: HashSet<(&str, &str)> = HashSet::new();
        for (i, (lease, settlement)) in items.iter().enumerate() {
            let command = lease.command_id.as_str();
            let space = settlement.control_space.as_ref().map(|cas| {
                (
                    cas.next.tenant_id.as_str(),
                    cas.next.control_space_id.as_str(),
                )
            });
            // A claim that gives its attempt back (rare: a hand-back at shutdown) is settled
            // one by one, by `settle_in`, the one statement that raises the budget base.
            let simple = fast_allowed
                && settlement.outcome.is_some()
                && settlement.supersede.is_none()
                && settlement.spends_attempt;
            let touched =
                commands.contains(command) || space.is_some_and(|key| spaces.contains(&key));
            if simple && !touched {
                plan.fast.push(i);
            } else {
                plan.slow.push(i);
            }
            commands.insert(command);
            if let Some(key) = space {
                spaces.insert(key);
            }
            if let Some(supersede) = &settlement.supersede {
                commands.insert(supersede.command_id.as_str());
            }
        }
        plan
    }
}

/// Locks the outbox rows `ids` (duplicates allowed) in id order, on PostgreSQL; does nothing
/// on SQLite, whose write transactions are serialized as a whole.
pub(super) async fn lock_commands<'a, C: ConnectionTrait>(
    store: &SeaOrmLifecycleStore,
    conn: &C,
    ids: impl IntoIterator<Item = &'a str>,
) -> Result<(), StoreError> {
    if store.backend != Backend::Postgres {
        return Ok(());
    }
    let mut ids: Vec<&str> = ids.into_iter().collect();
    ids.sort_unstable();
    ids.dedup();
    let rows: Vec<serde_json::Value> = ids.iter().map(|id| json!({ "id": id })).collect();
    conn.query_all_raw(json_statement(
        "SELECT o.id FROM tenantry_lifecycle_outbox AS o \
         JOIN json_to_recordset($1::json) AS v(id text) ON o.id = v.id \
         ORDER BY o.id FOR UPDATE OF o"
            .to_owned(),
        &rows,
    ))
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// Locks the control spaces that `items` compare-and-set, in key order (PostgreSQL).
async fn lock_spaces<C: ConnectionTrait>(conn: &C, items: &[Item]) -> Result<(), StoreError> {
    let mut keys: Vec<(&str, &str)> = items
        .iter()
        .filter_map(|(_, settlement)| settlement.control_space.as_ref())
        .map(|cas| {
            (
                cas.next.tenant_id.as_str(),
                cas.next.control_space_id.as_str(),
            )
        })
        .collect();
    if keys.is_empty() {
        return Ok(());
    }
    keys.sort_unstable();
    keys.dedup();
    let rows: Vec<serde_json::Value> = keys
        .iter()
        .map(|(tenant_id, cs)| json!({ "tenant_id": tenant_id, "control_space_id": cs }))
        .collect();
    conn.query_all_raw(json_statement(
        "SELECT c.tenant_id FROM tenantry_control_spaces AS c \
         JOIN json_to_recordset($1::json) AS v(tenant_id text, control_space_id text) \
           ON c.tenant_id = v.tenant_id AND c.control_space_id = v.control_space_id \
         ORDER BY c.tenant_id, c.control_space_id FOR UPDATE OF c"
            .to_owned(),
        &rows,
    ))
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// The statement of the module documentation for the fast items `fast`: the bare outcome
/// statement when none has a compare-and-set, else the compare-and-sets and the outcomes in
/// one statement. Writes the answer of every item except those with a compare-and-set that
/// the statement refused, whose indices it returns for [`classify_refused`].
async fn settle_fast_postgres<C: ConnectionTrait>(
    conn: &C,
    now: &str,
    items: &[Item],
    fast: &[usize],
    results: &mut Outcomes,
) -> Result<Vec<usize>, StoreError> {
    if fast.is_empty() {
        return Ok(Vec::new());
    }
    let outcomes = outcome_rows(items, fast);
    let mut parameters = vec![json_array(&outcomes).into()];
    let cas = if fast.iter().any(|&i| items[i].1.control_space.is_some()) {
        parameters.push(json_array(&cas_rows(items, fast)).into());
        Some(lock_and_cas_sql())
    } else {
        None
    };
    let sql = outcome_sql(now, &outcomes, cas.as_deref());
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            parameters,
        ))
        .await
        .map_err(unavailable)?;
    // Each row: an id whose outcome was written (`cas` false) or whose compare-and-set was
    // applied (`cas` true).
    let mut settled = HashSet::with_capacity(rows.len());
    let mut applied = HashSet::new();
    for row in &rows {
        let id: String = row.try_get("", "id").map_err(unavailable)?;
        if row.try_get::<bool>("", "cas").map_err(unavailable)? {
            applied.insert(id);
        } else {
            settled.insert(id);
        }
    }
    let mut refused = Vec::new();
    for &i in fast {
        let (lease, settlement) = &items[i];
        let id = lease.command_id.as_str();
        if settled.contains(id) {
            continue;
        }
        if applied.contains(id) {
            // The statement writes the outcome of every item whose compare-and-set it applied
            // (the item's row is locked by then): this cannot happen short of a broken
            // statement. In autocommit the rest of the batch is committed, so only this item
            // reports it; inside a transaction the caller rolls the whole batch back.
            results[i] = Err(SettleError::Store(StoreError::unavailable(format!(
                "command {id}: a settlement batch applied a compare-and-set without its outcome"
            ))));
            continue;
        }
        if settlement.control_space.is_some() {
            refused.push(i);
        } else {
            results[i] = Err(SettleError::LeaseLost {
                command_id: lease.command_id.clone(),
            });
        }
    }
    Ok(refused)
}

/// Answers the `refused` items (a compare-and-set the statement did not apply): lease lost, or
/// (lease held) a control space changed or gone; one look-up of all their leases.
async fn classify_refused<C: ConnectionTrait>(
    conn: &C,
    items: &[Item],
    refused: &[usize],
    results: &mut Outcomes,
) -> Result<(), StoreError> {
    if refused.is_empty() {
        return Ok(());
    }
    let held = leases_held(conn, items, refused).await?;
    for &i in refused {
        results[i] = Err(refusal(&items[i], &held));
    }
    Ok(())
}

/// `rows` as one JSON array, the text of a statement parameter.
fn json_array(rows: &[serde_json::Value]) -> String {
    serde_json::Value::Array(rows.to_vec()).to_string()
}

/// A PostgreSQL statement whose only parameter `$1` is `rows` as a JSON array. The statement
/// text does not depend on the batch size, so every batch reuses one prepared statement.
fn json_statement(sql: String, rows: &[serde_json::Value]) -> Statement {
    Statement::from_sql_and_values(DbBackend::Postgres, sql, [json_array(rows).into()])
}

/// The ids among `indices` whose lease is still held (owner, epoch, status processing), read
/// with one statement for all of them.
async fn leases_held<C: ConnectionTrait>(
    conn: &C,
    items: &[Item],
    indices: &[usize],
) -> Result<HashSet<String>, StoreError> {
    let rows: Vec<serde_json::Value> = indices
        .iter()
        .map(|&i| {
            let lease = &items[i].0;
            json!({
                "id": lease.command_id.as_str(),
                "owner": lease.owner.as_str(),
                "epoch": lease.epoch.0,
            })
        })
        .collect();
    let sql = format!(
        "SELECT o.id FROM tenantry_lifecycle_outbox AS o \
         JOIN json_to_recordset($1::json) AS v(id text, owner text, epoch bigint) \
           ON o.id = v.id \
         WHERE o.status = '{processing}' AND o.lease_owner = v.owner AND o.lease_epoch = v.epoch",
        processing = CommandStatus::Processing.as_str(),
    );
    let rows = conn
        .query_all_raw(json_statement(sql, &rows))
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|row| row.try_get::<String>("", "id").map_err(unavailable))
        .collect()
}

/// Why an item with a compare-and-set was not returned by statement 1, given the ids whose
/// lease is `held`: its lease is lost, or (lease held) its control space changed since it was
/// read or does not exist.
fn refusal(item: &Item, held: &HashSet<String>) -> SettleError {
    let (lease, settlement) = item;
    match &settlement.control_space {
        Some(cas) if held.contains(lease.command_id.as_str()) => {
            SettleError::ControlSpaceConflict {
                control_space_id: cas.next.control_space_id.clone(),
            }
        }
        _ => SettleError::LeaseLost {
            command_id: lease.command_id.clone(),
        },
    }
}

/// The compare-and-set part of the statement (a data-modifying CTE over parameter `$2`, the
/// items of [`cas_rows`]): locks, in control-space order, the outbox row and the control
/// space of every item (distinct commands and control spaces) whose lease is held (owner,
/// epoch, status processing) and whose control space still has the expected resource version
/// and state, and applies those items' compare-and-sets; returns their command ids.
/// Concurrent batches lock in the same order, so they wait for each other instead of
/// deadlocking. A locked outbox row cannot lose its lease before the statement ends, so the
/// outcome part writes the outcome of every item returned here.
fn lock_and_cas_sql() -> String {
    // The locking subquery re-checks its conditions on the newest version of a row another
    // transaction changed meanwhile (READ COMMITTED), and the update checks the expected
    // version and state once more on the row it writes, which the subquery holds locked.
    format!(
        "UPDATE tenantry_control_spaces AS c SET state = l.state, \
           lifecycle_operation_id = l.operation_id, resource_version = l.resource_version, \
           knowledge_space_id = l.knowledge_space_id, \
           knowledge_space_revision = l.knowledge_space_revision, \
           deletion_irreversible_at = l.deletion_irreversible_at, updated_at = l.updated_at \
         FROM (SELECT v.* FROM json_to_recordset($2::json) AS v(id text, owner text, \
             epoch bigint, tenant_id text, control_space_id text, expected_version bigint, \
             expected_state text, state text, operation_id text, resource_version bigint, \
             knowledge_space_id text, knowledge_space_revision bigint, \
             deletion_irreversible_at bigint, updated_at bigint) \
           JOIN tenantry_lifecycle_outbox AS o ON o.id = v.id \
           JOIN tenantry_control_spaces AS s \
             ON s.tenant_id = v.tenant_id AND s.control_space_id = v.control_space_id \
           WHERE o.status = '{processing}' AND o.lease_owner = v.owner \
             AND o.lease_epoch = v.epoch \
             AND s.resource_version = v.expected_version AND s.state = v.expected_state \
           ORDER BY s.tenant_id, s.control_space_id, o.id \
           FOR UPDATE OF o, s) AS l \
         WHERE c.tenant_id = l.tenant_id AND c.control_space_id = l.control_space_id \
           AND c.resource_version = l.expected_version AND c.state = l.expected_state \
         RETURNING l.id",
        processing = CommandStatus::Processing.as_str(),
    )
}

/// The compare-and-set items among `indices`, one JSON object each (an item without one is
/// left out).
fn cas_rows(items: &[Item], indices: &[usize]) -> Vec<serde_json::Value> {
    indices
        .iter()
        .filter_map(|&i| {
            let (lease, settlement) = &items[i];
            let cas = settlement.control_space.as_ref()?;
            let next = &cas.next;
            Some(json!({
                "id": lease.command_id.as_str(),
                "owner": lease.owner.as_str(),
                "epoch": lease.epoch.0,
                "tenant_id": next.tenant_id.as_str(),
                "control_space_id": next.control_space_id.as_str(),
                "expected_version": cas.expected_resource_version,
                "expected_state": cas.expected_state.as_str(),
                "state": next.state.as_str(),
                "operation_id": next.lifecycle_operation_id.as_str(),
                "resource_version": next.resource_version,
                "knowledge_space_id": next.knowledge_space_id.as_ref().map(|k| k.as_str()),
                "knowledge_space_revision": next.knowledge_space_revision,
                "deletion_irreversible_at": next.deletion_irreversible_at.map(millis),
                "updated_at": millis(next.updated_at),
            }))
        })
        .collect()
}

/// The outcome items of `indices` (distinct commands, every one with an outcome), one JSON
/// object each; `cas` tells whether the item has a compare-and-set.
fn outcome_rows(items: &[Item], indices: &[usize]) -> Vec<serde_json::Value> {
    indices
        .iter()
        .filter_map(|&i| {
            let (lease, settlement) = &items[i];
            // The plan never makes an item without outcome fast.
            let outcome = settlement.outcome.as_ref()?;
            let mut row = json!({
                "id": lease.command_id.as_str(),
                "owner": lease.owner.as_str(),
                "epoch": lease.epoch.0,
                "sent": settlement.may_have_sent,
                "cas": settlement.control_space.is_some(),
            });
            row["status"] = outcome.status().as_str().into();
            if let Some(completed_at) = outcome.completed_at() {
                row["completed_at"] = millis(completed_at).into();
            }
            if let CommandOutcome::Retry {
                next_attempt_at, ..
            } = outcome
            {
                row["next_attempt_at"] = millis(*next_attempt_at).into();
            }
            if let Some(error) = outcome.error() {
                row["error_code"] = error.code.as_str().into();
                row["error_message"] = error.message.as_str().into();
            }
            if let Some((end, _)) = logged_error(outcome) {
                row["log_id"] = uuid::Uuid::new_v4().to_string().into();
                row["log_outcome"] = end.as_str().into();
            }
            Some(row)
        })
        .collect()
}

/// The statement that writes the outcomes (ack, retry, fail or moot) of `rows`
/// ([`outcome_rows`], parameter `$1`) under their leases and returns the ids it wrote, as rows
/// `(id, cas)` with `cas` false.
///
/// With `cas` (the compare-and-set part, [`lock_and_cas_sql`], over parameter `$2`) the
/// compare-and-sets run first in the same statement, as a data-modifying CTE: an item with a
/// compare-and-set gets its outcome exactly when its compare-and-set was applied (its lease
/// was verified on the row the CTE locked), an item without one under its lease as without
/// `cas`; the ids of the applied compare-and-sets come back too, with `cas` true (the written
/// outcomes with `cas` false). The CTE runs to completion, all its locks taken, before the
/// first outcome is written: a batch takes its locks in the order its two statements took
/// them before 2026-12-05.
///
/// When `rows` hold retries or dead letters, a further CTE inserts their attempt-error log
/// entries from the rows written (a lost lease, which writes nothing, logs nothing); a batch
/// of acks without compare-and-sets is the bare update.
fn outcome_sql(now: &str, rows: &[serde_json::Value], cas: Option<&str>) -> String {
    let logs = rows.iter().any(|row| row.get("log_id").is_some());
    let log_columns = if logs {
        ", log_id text, log_outcome text"
    } else {
        ""
    };
    let returning = if logs {
        " RETURNING o.id AS id, o.attempt_count AS attempt, v.owner AS owner, \
           v.log_id AS log_id, v.log_outcome AS log_outcome, \
           v.error_code AS error_code, v.error_message AS error_message"
    } else {
        " RETURNING o.id, false AS cas"
    };
    let lease_held = format!(
        "o.status = '{processing}' AND o.lease_owner = v.owner AND o.lease_epoch = v.epoch",
        processing = CommandStatus::Processing.as_str(),
    );
    // The applied compare-and-sets as one JSON object keyed by command id, built once (an
    // uncorrelated subquery: an init plan), looked up by key per item. Built at the first
    // item's condition, so the CTE runs to completion, all its locks taken, before any
    // outcome is written. (A join with the CTE was planned as a nested loop that rescanned it
    // once per item: the planner cannot know how many rows a data-modifying CTE returns.)
    let condition = match cas {
        Some(_) => format!(
            "(jsonb_exists((SELECT COALESCE(jsonb_object_agg(id, true), '{{}}') FROM cas), v.id) \
               OR (NOT v.cas AND {lease_held}))"
        ),
        None => lease_held,
    };
    // A field the outcome does not set is JSON-absent, hence NULL: the column keeps its value.
    let update = format!(
        "UPDATE tenantry_lifecycle_outbox AS o SET status = v.status, \
           completed_at = COALESCE(v.completed_at, o.completed_at), \
           failed_at = CASE WHEN v.status = '{failed}' THEN v.completed_at ELSE o.failed_at END, \
           next_attempt_at = COALESCE(v.next_attempt_at, o.next_attempt_at), \
           last_error_code = CASE WHEN v.error_code IS NULL THEN o.last_error_code \
             ELSE v.error_code END, \
           last_error_message = CASE WHEN v.error_code IS NULL THEN o.last_error_message \
             ELSE v.error_message END, \
           lease_owner = NULL, lease_expires_at = NULL, \
           attempt_window_ends_at = CASE WHEN NOT v.sent THEN o.prior_window_ends_at \
             WHEN o.prior_window_ends_at > {now} THEN o.prior_window_ends_at ELSE {now} END \
         FROM json_to_recordset($1::json) AS v(id text, owner text, epoch bigint, sent boolean, \
           cas boolean, status text, \
           completed_at bigint, next_attempt_at bigint, error_code text, error_message text\
           {log_columns}) \
         WHERE o.id = v.id AND {condition}\
         {returning}",
        failed = CommandStatus::Failed.as_str(),
    );
    if !logs && cas.is_none() {
        return update;
    }
    let mut ctes = Vec::new();
    if let Some(cas) = cas {
        ctes.push(format!("cas AS ({cas})"));
    }
    ctes.push(format!("settled AS ({update})"));
    if logs {
        ctes.push(format!(
            "logged AS (\
               INSERT INTO tenantry_lifecycle_attempt_errors (id, command_id, attempt, outcome, \
                 error_code, error_message, recorded_at, lease_owner) \
               SELECT log_id, id, attempt, log_outcome, error_code, error_message, {now}, owner \
               FROM settled WHERE log_id IS NOT NULL)"
        ));
    }
    let select = if cas.is_some() {
        "SELECT id, false AS cas FROM settled UNION ALL SELECT id, true AS cas FROM cas"
    } else {
        "SELECT id, false AS cas FROM settled"
    };
    format!("WITH {} {select}", ctes.join(", "))
}

/// Keys per statement of [`control_spaces`] (two parameters each).
const READ_CHUNK: usize = 500;

/// Reads the control spaces of `keys` with one statement per [`READ_CHUNK`] distinct keys: a
/// join with `json_to_recordset` of one JSON parameter on PostgreSQL (one prepared statement
/// for every batch size), `(tenant_id, control_space_id) IN (VALUES ..)` on SQLite.
pub(super) async fn control_spaces(
    store: &SeaOrmLifecycleStore,
    keys: &[(TenantId, ControlSpaceId)],
) -> Result<Vec<Option<ControlSpace>>, StoreError> {
    let mut distinct: Vec<(&str, &str)> =
        keys.iter().map(|(t, c)| (t.as_str(), c.as_str())).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let (backend, postgres) = match store.backend {
        Backend::Postgres => (DbBackend::Postgres, true),
        Backend::Sqlite => (DbBackend::Sqlite, false),
    };
    let mut found: HashMap<(String, String), ControlSpace> = HashMap::with_capacity(distinct.len());
    for chunk in distinct.chunks(READ_CHUNK) {
        let statement = if postgres {
            let rows: Vec<serde_json::Value> = chunk
                .iter()
                .map(|(tenant, cs)| json!({"tenant_id": tenant, "control_space_id": cs}))
                .collect();
            json_statement(
                "SELECT c.* FROM tenantry_control_spaces AS c \
                 JOIN json_to_recordset($1::json) AS v(tenant_id text, control_space_id text) \
                   ON c.tenant_id = v.tenant_id AND c.control_space_id = v.control_space_id"
                    .to_owned(),
                &rows,
            )
        } else {
            let mut rows = String::new();
            let mut values: Vec<sea_orm::Value> = Vec::with_capacity(chunk.len() * 2);
            for (n, (tenant, cs)) in chunk.iter().enumerate() {
                rows.push_str(if n == 0 { "(?, ?)" } else { ", (?, ?)" });
                values.push((*tenant).into());
                values.push((*cs).into());
            }
            Statement::from_sql_and_values(
                backend,
                format!(
                    "SELECT * FROM tenantry_control_spaces \
                     WHERE (tenant_id, control_space_id) IN (VALUES {rows})"
                ),
                values,
            )
        };
        let models = control_space::Entity::find()
            .from_raw_sql(statement)
            .all(&store.conn)
            .await
            .map_err(unavailable)?;
        for model in models {
            let key = (model.tenant_id.clone(), model.control_space_id.clone());
            found.insert(key, to_control_space(model)?);
        }
    }
    Ok(keys
        .iter()
        .map(|(t, c)| {
            found
                .get(&(t.as_str().to_owned(), c.as_str().to_owned()))
                .cloned()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};
    use tenantry_kernel::{CommandId, ControlSpaceId, LeaseEpoch, LeaseOwner, OperationId};
    use tenantry_lifecycle::{
        CasUpdate, ControlSpace, ControlSpaceState, ErrorRecord, Supersede, SupersedeRule,
    };

    use super::*;

    fn at() -> chrono::DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).single().unwrap()
    }

    fn lease(id: &str) -> LeaseToken {
        LeaseToken {
            command_id: CommandId::parse(id).unwrap(),
            owner: LeaseOwner::parse("w").unwrap(),
            epoch: LeaseEpoch(1),
            expires_at: at(),
        }
    }

    fn cas(cs: &str) -> CasUpdate {
        let next = ControlSpace {
            tenant_id: tenantry_kernel::TenantId::parse("t").unwrap(),
            control_space_id: ControlSpaceId::parse(cs).unwrap(),
            state: ControlSpaceState::Active,
            lifecycle_operation_id: OperationId::parse("op").unwrap(),
            resource_version: 2,
            provisioning_key: tenantry_kernel::ProvisioningKey::parse("op").unwrap(),
            knowledge_space_id: None,
            knowledge_space_revision: 1,
            deletion_irreversible_at: None,
            last_revoke_sequence: 0,
            created_at: at(),
            updated_at: at(),
        };
        CasUpdate {
            expected_resource_version: 1,
            expected_state: ControlSpaceState::Provisioning,
            next,
        }
    }

    #[test]
    fn plan_sends_independent_acks_fast_and_the_rest_slow_in_order() {
        let ack = Settlement::ack(at());
        let keep = Settlement {
            outcome: None,
            control_space: None,
            supersede: None,
            may_have_sent: true,
            spends_attempt: true,
        };
        let supersede = Settlement::ack(at()).with_supersede(Supersede {
            command_id: CommandId::parse("e").unwrap(),
            rule: SupersedeRule::Unattempted,
            completed_at: at(),
            error: ErrorRecord::new("X", "x"),
        });
        let items = vec![
            (lease("a"), ack.clone().with_control_space(cas("cs1"))), // 0 fast
            (lease("b"), ack.clone().with_control_space(cas("cs1"))), // 1 same control space
            (lease("a"), ack.clone()),                                // 2 same command
            (lease("c"), keep),                                       // 3 no outcome
            (lease("d"), supersede),                                  // 4 supersede
            (lease("e"), ack.clone()),                                // 5 superseded before
            (lease("f"), ack.clone().with_control_space(cas("cs2"))), // 6 fast
            (lease("g"), ack),                                        // 7 fast
        ];
        assert_eq!(
            Plan::of(&items, true),
            Plan {
                fast: vec![0, 6, 7],
                slow: vec![1, 2, 3, 4, 5],
            }
        );
        assert_eq!(
            Plan::of(&items, false),
            Plan {
                fast: vec![],
                slow: (0..8).collect(),
            }
        );
    }
}
