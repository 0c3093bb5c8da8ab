//! Group commit of settlements: [`CommandQueue::settle_many`] in one transaction with a few
//! statements, keeping every per-command guarantee of `settle`; and batched control-space
//! reads ([`ControlSpaceReader::control_spaces`]), one statement for many keys.
//!
//! The batch is split, in the order given, into
//! - *fast* items: an ack or a retry, with or without a control-space compare-and-set, no
//!   supersede, touching a command and a control space that no earlier item of the batch
//!   touches; they are independent of each other and settled together;
//! - *slow* items: everything else (supersedes, settlements without outcome, a second item on
//!   the same command or control space); each is settled after the fast ones, in order, with
//!   the single-settlement code inside its own savepoint, so a refusal rolls back exactly that
//!   item.
//!
//! On PostgreSQL the fast items take at most three statements:
//! 1. `SELECT .. FOR UPDATE OF o, c` over the items with a compare-and-set: verifies their
//!    leases (owner, epoch, status processing) and locks their outbox rows and control spaces,
//!    in control-space order so concurrent batches cannot deadlock on them;
//! 2. one `UPDATE control_spaces .. FROM (VALUES ..) .. RETURNING` applying every
//!    compare-and-set of a held lease; an item whose expected resource version or state no
//!    longer matches is reported as [`SettleError::ControlSpaceConflict`] and gets no ack;
//! 3. one `UPDATE lifecycle_outbox .. FROM (VALUES ..) .. RETURNING` acking or retrying every
//!    remaining item under its lease; an item it does not return lost its lease.
//!
//! A batch of acks and retries without compare-and-sets is the last statement alone, in
//! autocommit (one round trip for the whole batch). On SQLite (one writer at a time, no round
//! trips) every item is slow: one `IMMEDIATE` transaction, a savepoint per item that writes
//! more than its outbox row.
//!
//! [`CommandQueue::settle_many`]: tenantry_ports::lifecycle::CommandQueue::settle_many
//! [`ControlSpaceReader::control_spaces`]: tenantry_ports::lifecycle::ControlSpaceReader::control_spaces

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use sea_orm::{ConnectionTrait, DbBackend, EntityTrait, Statement, TransactionTrait};
use tenantry_kernel::{ControlSpaceId, TenantId};
use tenantry_lifecycle::{CommandOutcome, CommandStatus, ControlSpace, LeaseToken, Settlement};
use tenantry_ports::lifecycle::{SettleError, StoreError};

use super::convert::{millis, to_control_space};
use super::entity::control_space;
use super::{SeaOrmLifecycleStore, settle_in, unavailable};
use crate::connect::Backend;

type Item = (LeaseToken, Settlement);
type Outcomes = Vec<Result<(), SettleError>>;

/// Settles `items` in one transaction; see the module documentation.
pub(super) async fn settle_many(
    store: &SeaOrmLifecycleStore,
    items: &[Item],
) -> Result<Outcomes, StoreError> {
    let mut results: Outcomes = vec![Ok(()); items.len()];
    if items.is_empty() {
        return Ok(results);
    }
    let plan = Plan::of(items, store.backend == Backend::Postgres);
    let any_cas = plan
        .fast
        .iter()
        .any(|&i| items[i].1.control_space.is_some());
    if plan.slow.is_empty() && !any_cas {
        // One statement: atomic on its own, no transaction needed.
        ack_postgres(&store.conn, items, &plan.fast, &mut results).await?;
        return Ok(results);
    }
    let txn = store.begin_write().await?;
    if !plan.fast.is_empty() {
        settle_fast_postgres(&txn, items, &plan.fast, &mut results).await?;
    }
    for &i in &plan.slow {
        let (lease, settlement) = &items[i];
        let needs_savepoint = settlement.control_space.is_some() || settlement.supersede.is_some();
        if !needs_savepoint {
            // Only the outbox row is written, by one statement that matches or not.
            results[i] = settle_in(&txn, lease, settlement).await;
        } else {
            let savepoint = txn.begin().await.map_err(unavailable)?;
            match settle_in(&savepoint, lease, settlement).await {
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
    txn.commit().await.map_err(unavailable)?;
    Ok(results)
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
            let simple =
                fast_allowed && settlement.outcome.is_some() && settlement.supersede.is_none();
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

/// Statements 1–3 of the module documentation for the fast items `fast`.
async fn settle_fast_postgres<C: ConnectionTrait>(
    conn: &C,
    items: &[Item],
    fast: &[usize],
    results: &mut Outcomes,
) -> Result<(), StoreError> {
    let (with_cas, mut to_ack): (Vec<usize>, Vec<usize>) = fast
        .iter()
        .partition(|&&i| items[i].1.control_space.is_some());
    if !with_cas.is_empty() {
        let held = lock_leases_postgres(conn, items, &with_cas).await?;
        let mut candidates = Vec::with_capacity(with_cas.len());
        for i in with_cas {
            if held.contains(items[i].0.command_id.as_str()) {
                candidates.push(i);
            } else {
                results[i] = Err(unheld(conn, &items[i]).await?);
            }
        }
        let applied = cas_postgres(conn, items, &candidates).await?;
        for i in candidates {
            let Some(cas) = &items[i].1.control_space else {
                continue;
            };
            let key = (
                cas.next.tenant_id.as_str().to_owned(),
                cas.next.control_space_id.as_str().to_owned(),
            );
            if applied.contains(&key) {
                to_ack.push(i);
            } else {
                results[i] = Err(SettleError::ControlSpaceConflict {
                    control_space_id: cas.next.control_space_id.clone(),
                });
            }
        }
    }
    ack_postgres(conn, items, &to_ack, results).await?;
    // A compare-and-set was written only for items whose lease is locked, so their ack
    // cannot miss; if it did, the batch must not commit a CAS without its ack.
    let cas_without_ack = to_ack.iter().any(|&i| {
        items[i].1.control_space.is_some()
            && matches!(results[i], Err(SettleError::LeaseLost { .. }))
    });
    if cas_without_ack {
        return Err(StoreError::Unavailable(
            "a locked lease was not acked in a settlement batch; the batch was rolled back".into(),
        ));
    }
    Ok(())
}

/// Statement 1: the ids among `indices` whose lease is held, with their outbox rows and
/// control spaces locked in control-space order.
async fn lock_leases_postgres<C: ConnectionTrait>(
    conn: &C,
    items: &[Item],
    indices: &[usize],
) -> Result<HashSet<String>, StoreError> {
    let mut values = Vec::with_capacity(indices.len() * 5);
    let mut rows = String::new();
    for (n, &i) in indices.iter().enumerate() {
        let (lease, settlement) = &items[i];
        let Some(cas) = &settlement.control_space else {
            continue;
        };
        let p = n * 5;
        let _ = write!(
            rows,
            "{}(${}::text, ${}::text, ${}::bigint, ${}::text, ${}::text)",
            if n == 0 { "" } else { ", " },
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5
        );
        values.push(lease.command_id.as_str().into());
        values.push(lease.owner.as_str().into());
        values.push(lease.epoch.0.into());
        values.push(cas.next.tenant_id.as_str().into());
        values.push(cas.next.control_space_id.as_str().into());
    }
    let sql = format!(
        "SELECT o.id FROM lifecycle_outbox AS o \
         JOIN (VALUES {rows}) AS v(id, owner, epoch, tenant_id, control_space_id) ON o.id = v.id \
         JOIN control_spaces AS c \
           ON c.tenant_id = v.tenant_id AND c.control_space_id = v.control_space_id \
         WHERE o.status = '{processing}' AND o.lease_owner = v.owner AND o.lease_epoch = v.epoch \
         ORDER BY c.tenant_id, c.control_space_id, o.id \
         FOR UPDATE OF o, c",
        processing = CommandStatus::Processing.as_str(),
    );
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|row| row.try_get::<String>("", "id").map_err(unavailable))
        .collect()
}

/// Why an item with a compare-and-set was not returned by the lock statement: its lease is
/// lost, or (lease held) its control space does not exist.
async fn unheld<C: ConnectionTrait>(conn: &C, item: &Item) -> Result<SettleError, StoreError> {
    let (lease, settlement) = item;
    let row = conn
        .query_one_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            format!(
                "SELECT id FROM lifecycle_outbox WHERE id = $1 AND status = '{}' \
                 AND lease_owner = $2 AND lease_epoch = $3",
                CommandStatus::Processing.as_str()
            ),
            [
                lease.command_id.as_str().into(),
                lease.owner.as_str().into(),
                lease.epoch.0.into(),
            ],
        ))
        .await
        .map_err(unavailable)?;
    Ok(match (row, &settlement.control_space) {
        (Some(_), Some(cas)) => SettleError::ControlSpaceConflict {
            control_space_id: cas.next.control_space_id.clone(),
        },
        _ => SettleError::LeaseLost {
            command_id: lease.command_id.clone(),
        },
    })
}

/// Statement 2: applies the compare-and-sets of `indices` (distinct control spaces); returns
/// the `(tenant_id, control_space_id)` keys it changed.
async fn cas_postgres<C: ConnectionTrait>(
    conn: &C,
    items: &[Item],
    indices: &[usize],
) -> Result<HashSet<(String, String)>, StoreError> {
    if indices.is_empty() {
        return Ok(HashSet::new());
    }
    const COLUMNS: usize = 11;
    let mut values = Vec::with_capacity(indices.len() * COLUMNS);
    let mut rows = String::new();
    for (n, &i) in indices.iter().enumerate() {
        let Some(cas) = &items[i].1.control_space else {
            continue;
        };
        let next = &cas.next;
        let p = n * COLUMNS;
        let _ = write!(
            rows,
            "{}(${}::text, ${}::text, ${}::bigint, ${}::text, ${}::text, ${}::text, ${}::bigint, \
             ${}::text, ${}::bigint, ${}::bigint, ${}::bigint)",
            if n == 0 { "" } else { ", " },
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5,
            p + 6,
            p + 7,
            p + 8,
            p + 9,
            p + 10,
            p + 11,
        );
        values.push(next.tenant_id.as_str().into());
        values.push(next.control_space_id.as_str().into());
        values.push(cas.expected_resource_version.into());
        values.push(cas.expected_state.as_str().into());
        values.push(next.state.as_str().into());
        values.push(next.lifecycle_operation_id.as_str().into());
        values.push(next.resource_version.into());
        values.push(
            next.knowledge_space_id
                .as_ref()
                .map(|k| k.as_str().to_owned())
                .into(),
        );
        values.push(next.knowledge_space_revision.into());
        values.push(next.deletion_irreversible_at.map(millis).into());
        values.push(millis(next.updated_at).into());
    }
    let sql = format!(
        "UPDATE control_spaces AS c SET state = v.state, \
           lifecycle_operation_id = v.operation_id, resource_version = v.resource_version, \
           knowledge_space_id = v.knowledge_space_id, \
           knowledge_space_revision = v.knowledge_space_revision, \
           deletion_irreversible_at = v.deletion_irreversible_at, updated_at = v.updated_at \
         FROM (VALUES {rows}) AS v(tenant_id, control_space_id, expected_version, \
           expected_state, state, operation_id, resource_version, knowledge_space_id, \
           knowledge_space_revision, deletion_irreversible_at, updated_at) \
         WHERE c.tenant_id = v.tenant_id AND c.control_space_id = v.control_space_id \
           AND c.resource_version = v.expected_version AND c.state = v.expected_state \
         RETURNING c.tenant_id, c.control_space_id"
    );
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get::<String>("", "tenant_id")
                    .map_err(unavailable)?,
                row.try_get::<String>("", "control_space_id")
                    .map_err(unavailable)?,
            ))
        })
        .collect()
}

/// Statement 3: acks or retries `indices` (distinct commands, every one with an outcome)
/// under their leases; an item not updated is reported as [`SettleError::LeaseLost`].
async fn ack_postgres<C: ConnectionTrait>(
    conn: &C,
    items: &[Item],
    indices: &[usize],
    results: &mut Outcomes,
) -> Result<(), StoreError> {
    if indices.is_empty() {
        return Ok(());
    }
    const COLUMNS: usize = 8;
    let mut values = Vec::with_capacity(indices.len() * COLUMNS);
    let mut rows = String::new();
    for (n, &i) in indices.iter().enumerate() {
        let (lease, settlement) = &items[i];
        let (status, completed_at, next_attempt_at, code, message) = match &settlement.outcome {
            Some(CommandOutcome::Ack { completed_at }) => (
                CommandStatus::Succeeded,
                Some(millis(*completed_at)),
                None,
                None,
                None,
            ),
            Some(CommandOutcome::Retry {
                next_attempt_at,
                error,
            }) => (
                CommandStatus::Pending,
                None,
                Some(millis(*next_attempt_at)),
                Some(error.code.clone()),
                Some(error.message.clone()),
            ),
            // The plan never makes an item without outcome fast.
            None => continue,
        };
        let p = n * COLUMNS;
        let _ = write!(
            rows,
            "{}(${}::text, ${}::text, ${}::bigint, ${}::text, ${}::bigint, ${}::bigint, \
             ${}::text, ${}::text)",
            if n == 0 { "" } else { ", " },
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5,
            p + 6,
            p + 7,
            p + 8,
        );
        values.push(lease.command_id.as_str().into());
        values.push(lease.owner.as_str().into());
        values.push(lease.epoch.0.into());
        values.push(status.as_str().into());
        values.push(completed_at.into());
        values.push(next_attempt_at.into());
        values.push(code.into());
        values.push(message.into());
    }
    let sql = format!(
        "UPDATE lifecycle_outbox AS o SET status = v.status, \
           completed_at = CASE WHEN v.status = '{succeeded}' THEN v.completed_at \
             ELSE o.completed_at END, \
           next_attempt_at = CASE WHEN v.status = '{pending}' THEN v.next_attempt_at \
             ELSE o.next_attempt_at END, \
           last_error_code = CASE WHEN v.status = '{pending}' THEN v.error_code \
             ELSE o.last_error_code END, \
           last_error_message = CASE WHEN v.status = '{pending}' THEN v.error_message \
             ELSE o.last_error_message END, \
           lease_owner = NULL, lease_expires_at = NULL \
         FROM (VALUES {rows}) AS v(id, owner, epoch, status, completed_at, next_attempt_at, \
           error_code, error_message) \
         WHERE o.id = v.id AND o.status = '{processing}' AND o.lease_owner = v.owner \
           AND o.lease_epoch = v.epoch \
         RETURNING o.id",
        succeeded = CommandStatus::Succeeded.as_str(),
        pending = CommandStatus::Pending.as_str(),
        processing = CommandStatus::Processing.as_str(),
    );
    let rows = conn
        .query_all_raw(Statement::from_sql_and_values(
            DbBackend::Postgres,
            sql,
            values,
        ))
        .await
        .map_err(unavailable)?;
    let updated: HashSet<String> = rows
        .iter()
        .map(|row| row.try_get::<String>("", "id").map_err(unavailable))
        .collect::<Result<_, _>>()?;
    for &i in indices {
        let lease = &items[i].0;
        if !updated.contains(lease.command_id.as_str()) {
            results[i] = Err(SettleError::LeaseLost {
                command_id: lease.command_id.clone(),
            });
        }
    }
    Ok(())
}

/// Keys per statement of [`control_spaces`] (two parameters each).
const READ_CHUNK: usize = 500;

/// Reads the control spaces of `keys` with one statement per [`READ_CHUNK`] distinct keys:
/// `SELECT .. WHERE (tenant_id, control_space_id) IN (VALUES ..)` on both backends.
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
        let mut rows = String::new();
        let mut values: Vec<sea_orm::Value> = Vec::with_capacity(chunk.len() * 2);
        for (n, (tenant, cs)) in chunk.iter().enumerate() {
            let separator = if n == 0 { "" } else { ", " };
            if postgres {
                let _ = write!(rows, "{separator}(${}, ${})", 2 * n + 1, 2 * n + 2);
            } else {
                let _ = write!(rows, "{separator}(?, ?)");
            }
            values.push((*tenant).into());
            values.push((*cs).into());
        }
        let sql = format!(
            "SELECT * FROM control_spaces WHERE (tenant_id, control_space_id) IN (VALUES {rows})"
        );
        let models = control_space::Entity::find()
            .from_raw_sql(Statement::from_sql_and_values(backend, sql, values))
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
