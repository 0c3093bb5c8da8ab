//! [`CommandAdmin`] over SeaORM: operator retry / abandon (a compare-and-set on the status plus
//! one row in `tenantry_lifecycle_command_actions`, and for an abandon one in the attempt-error
//! log, in one write transaction), the action log, the attempt-error log,
//! and the counts per (status, operation) of the commands gauge (`GROUP BY` queries served by the
//! claim index for live commands and the `failed_at` index of migration m0005 for failed ones).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, FromQueryResult, PaginatorTrait,
    QueryFilter, QueryOrder, QuerySelect,
};
use tenantry_kernel::CommandId;
use tenantry_lifecycle::ErrorCode;
use tenantry_lifecycle::{CommandRecord, CommandStatus, Operation};
use tenantry_ports::lifecycle::{
    ActionRecord, AttemptEnd, AttemptError, CommandAdmin, CommandCount, CommandFilter,
    ErrorCodeCount, ErrorHistory, LiveSummary, OperatorAction, OperatorActionError,
    OperatorActionKind, SettledCommand, StoreError,
};

use super::convert::{millis, to_record};
use super::entity::{action, attempt_error, outbox};
use super::{AttemptLog, SeaOrmLifecycleStore, detached, log_attempt_error, unavailable};
use crate::connect::Backend;

fn corrupt(column: &str, value: &str) -> StoreError {
    StoreError::corrupt(format!(
        "lifecycle_command_actions.{column} holds an invalid value {value:?}"
    ))
}

fn to_action(row: action::Model) -> Result<ActionRecord, StoreError> {
    Ok(ActionRecord {
        action: OperatorAction {
            command_id: CommandId::parse(row.command_id.clone())
                .map_err(|_| corrupt("command_id", &row.command_id))?,
            kind: OperatorActionKind::parse(&row.action)
                .ok_or_else(|| corrupt("action", &row.action))?,
            at: chrono::DateTime::from_timestamp_millis(row.created_at)
                .ok_or_else(|| corrupt("created_at", &row.created_at.to_string()))?,
            action_id: row.id,
            actor: row.actor,
            reason: row.reason,
        },
        previous_status: CommandStatus::parse(&row.previous_status)
            .ok_or_else(|| corrupt("previous_status", &row.previous_status))?,
        previous_error_code: row.previous_error_code.map(ErrorCode::from),
        attempt_count: row.attempt_count,
    })
}

fn to_attempt_error(row: attempt_error::Model) -> Result<AttemptError, StoreError> {
    let corrupt = |column: &str, value: &str| {
        StoreError::corrupt(format!(
            "lifecycle_attempt_errors.{column} holds an invalid value {value:?}"
        ))
    };
    Ok(AttemptError {
        command_id: CommandId::parse(row.command_id.clone())
            .map_err(|_| corrupt("command_id", &row.command_id))?,
        attempt: row.attempt,
        end: AttemptEnd::parse(&row.outcome).ok_or_else(|| corrupt("outcome", &row.outcome))?,
        code: ErrorCode::from(row.error_code),
        message: row.error_message,
        recorded_at: DateTime::from_timestamp_millis(row.recorded_at)
            .ok_or_else(|| corrupt("recorded_at", &row.recorded_at.to_string()))?,
        lease_owner: row.lease_owner,
        actor: row.actor,
    })
}

#[derive(Debug, FromQueryResult)]
struct CountRow {
    status: String,
    operation: String,
    count: i64,
}

#[async_trait]
impl CommandAdmin for SeaOrmLifecycleStore {
    async fn act_on_command(
        &self,
        request: &OperatorAction,
    ) -> Result<CommandRecord, OperatorActionError> {
        let store = self.clone();
        let request = request.clone();
        detached(async move { act_once(&store, &request).await }).await
    }

    async fn command_actions(
        &self,
        command_id: &CommandId,
    ) -> Result<Vec<ActionRecord>, StoreError> {
        action::Entity::find()
            .filter(action::Column::CommandId.eq(command_id.as_str()))
            .order_by_asc(action::Column::CreatedAt)
            .order_by_asc(action::Column::Id)
            .all(&self.conn)
            .await
            .map_err(unavailable)?
            .into_iter()
            .map(to_action)
            .collect()
    }

    async fn command_errors(
        &self,
        command_id: &CommandId,
        limit: u32,
    ) -> Result<ErrorHistory, StoreError> {
        // Both are range reads of the `(command_id, recorded_at)` index of m0013.
        let of_command = || {
            attempt_error::Entity::find()
                .filter(attempt_error::Column::CommandId.eq(command_id.as_str()))
        };
        let entries = of_command()
            .order_by_desc(attempt_error::Column::RecordedAt)
            .order_by_desc(attempt_error::Column::Attempt)
            .order_by_desc(attempt_error::Column::Id)
            .limit(u64::from(limit))
            .all(&self.conn)
            .await
            .map_err(unavailable)?
            .into_iter()
            .map(to_attempt_error)
            .collect::<Result<Vec<_>, _>>()?;
        let total = if (entries.len() as u64) < u64::from(limit) {
            // Fewer than asked: that is all of them (no second query).
            entries.len() as u64
        } else {
            of_command().count(&self.conn).await.map_err(unavailable)?
        };
        Ok(ErrorHistory { entries, total })
    }

    async fn command_by_id(
        &self,
        command_id: &CommandId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        outbox::Entity::find_by_id(command_id.as_str().to_owned())
            .one(&self.conn)
            .await
            .map_err(unavailable)?
            .map(to_record)
            .transpose()
    }

    async fn count_commands(
        &self,
        statuses: &[CommandStatus],
    ) -> Result<Vec<CommandCount>, StoreError> {
        // Each group is counted through an index that never names `status` (see m0005):
        // live commands through the claim index, failed ones through the failed index.
        let live: Vec<&str> = statuses
            .iter()
            .filter(|s| matches!(s, CommandStatus::Pending | CommandStatus::Processing))
            .map(|s| s.as_str())
            .collect();
        let settled: Vec<&str> = statuses
            .iter()
            .filter(|s| {
                !matches!(
                    s,
                    CommandStatus::Pending | CommandStatus::Processing | CommandStatus::Failed
                )
            })
            .map(|s| s.as_str())
            .collect();
        let mut rows = Vec::new();
        let grouped = || {
            outbox::Entity::find()
                .select_only()
                .column(outbox::Column::Status)
                .column(outbox::Column::Operation)
                .column_as(outbox::Column::Id.count(), "count")
                .group_by(outbox::Column::Status)
                .group_by(outbox::Column::Operation)
        };
        if !live.is_empty() {
            rows.extend(
                grouped()
                    .filter(outbox::Column::CompletedAt.is_null())
                    .filter(outbox::Column::Status.is_in(live))
                    .into_model::<CountRow>()
                    .all(&self.conn)
                    .await
                    .map_err(unavailable)?,
            );
        }
        if statuses.contains(&CommandStatus::Failed) {
            rows.extend(
                grouped()
                    .filter(outbox::Column::FailedAt.is_not_null())
                    .filter(outbox::Column::Status.eq(CommandStatus::Failed.as_str()))
                    .into_model::<CountRow>()
                    .all(&self.conn)
                    .await
                    .map_err(unavailable)?,
            );
        }
        if !settled.is_empty() {
            // Succeeded, superseded, abandoned: no index, a scan of the history.
            rows.extend(
                grouped()
                    .filter(outbox::Column::Status.is_in(settled))
                    .into_model::<CountRow>()
                    .all(&self.conn)
                    .await
                    .map_err(unavailable)?,
            );
        }
        rows.into_iter()
            .map(|row| {
                Ok(CommandCount {
                    status: CommandStatus::parse(&row.status).ok_or_else(|| {
                        StoreError::corrupt(format!(
                            "lifecycle_outbox.status holds an invalid value {:?}",
                            row.status
                        ))
                    })?,
                    operation: Operation::parse(&row.operation),
                    count: u64::try_from(row.count).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn count_matching(&self, filter: &CommandFilter) -> Result<u64, StoreError> {
        let count = super::filtered(outbox::Entity::find(), filter)
            .count(&self.conn)
            .await
            .map_err(unavailable)?;
        Ok(count)
    }

    async fn count_by_error_code(
        &self,
        status: CommandStatus,
        limit: u32,
    ) -> Result<Vec<ErrorCodeCount>, StoreError> {
        let mut query = outbox::Entity::find()
            .select_only()
            .column(outbox::Column::LastErrorCode)
            .column_as(outbox::Column::Id.count(), "count")
            .filter(outbox::Column::Status.eq(status.as_str()));
        if status == CommandStatus::Failed {
            // Served by the `failed_at` partial index (m0005), like the gauge.
            query = query.filter(outbox::Column::FailedAt.is_not_null());
        }
        let rows: Vec<(Option<String>, i64)> = query
            .group_by(outbox::Column::LastErrorCode)
            .order_by_desc(Expr::col(sea_orm::sea_query::Alias::new("count")))
            .order_by_asc(outbox::Column::LastErrorCode)
            .limit(u64::from(limit))
            .into_tuple()
            .all(&self.conn)
            .await
            .map_err(unavailable)?;
        Ok(rows
            .into_iter()
            .map(|(code, count)| ErrorCodeCount {
                code: code.map(ErrorCode::from),
                count: u64::try_from(count).unwrap_or(0),
            })
            .collect())
    }

    async fn settled_since(
        &self,
        since: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<SettledCommand>, StoreError> {
        // The `completed_at` index of m0010 (finished commands) serves the range and order.
        let rows: Vec<(i64, Option<i64>)> = outbox::Entity::find()
            .select_only()
            .column(outbox::Column::CreatedAt)
            .column(outbox::Column::CompletedAt)
            .filter(outbox::Column::CompletedAt.gte(millis(since)))
            .filter(outbox::Column::Status.eq(CommandStatus::Succeeded.as_str()))
            .order_by_desc(outbox::Column::CompletedAt)
            .limit(u64::from(limit))
            .into_tuple()
            .all(&self.conn)
            .await
            .map_err(unavailable)?;
        let time = |ms: i64| {
            DateTime::from_timestamp_millis(ms).ok_or_else(|| {
                StoreError::corrupt(format!("lifecycle_outbox holds an invalid time {ms}"))
            })
        };
        rows.into_iter()
            .filter_map(|(created, completed)| completed.map(|c| (created, c)))
            .map(|(created, completed)| {
                Ok(SettledCommand {
                    created_at: time(created)?,
                    completed_at: time(completed)?,
                })
            })
            .collect()
    }

    async fn live_summary(&self) -> Result<LiveSummary, StoreError> {
        // Both read live commands only (`completed_at IS NULL`: the claim index).
        let oldest: Option<Option<i64>> = outbox::Entity::find()
            .select_only()
            .column_as(outbox::Column::CreatedAt.min(), "oldest")
            .filter(outbox::Column::CompletedAt.is_null())
            .filter(outbox::Column::Status.eq(CommandStatus::Pending.as_str()))
            .into_tuple()
            .one(&self.conn)
            .await
            .map_err(unavailable)?;
        let owners: Vec<(Option<String>, i64)> = outbox::Entity::find()
            .select_only()
            .column(outbox::Column::LeaseOwner)
            .column_as(outbox::Column::Id.count(), "count")
            .filter(outbox::Column::CompletedAt.is_null())
            .filter(outbox::Column::Status.eq(CommandStatus::Processing.as_str()))
            .filter(outbox::Column::LeaseOwner.is_not_null())
            .group_by(outbox::Column::LeaseOwner)
            .order_by_asc(outbox::Column::LeaseOwner)
            .into_tuple()
            .all(&self.conn)
            .await
            .map_err(unavailable)?;
        let oldest_pending_created_at = match oldest.flatten() {
            Some(ms) => Some(DateTime::from_timestamp_millis(ms).ok_or_else(|| {
                StoreError::corrupt(format!(
                    "lifecycle_outbox.created_at holds an invalid time {ms}"
                ))
            })?),
            None => None,
        };
        Ok(LiveSummary {
            oldest_pending_created_at,
            lease_owners: owners
                .into_iter()
                .filter_map(|(owner, n)| owner.map(|o| (o, u64::try_from(n).unwrap_or(0))))
                .collect(),
        })
    }
}

/// One operator action in one transaction (see [`CommandAdmin::act_on_command`]).
async fn act_once(
    store: &SeaOrmLifecycleStore,
    request: &OperatorAction,
) -> Result<CommandRecord, OperatorActionError> {
    let txn = store.begin_write().await?;
    let answer = act_in(store, &txn, request).await;
    // A refused action holds no lock once it answers (`crate::txn`).
    let after = crate::txn::finish(txn, answer, |_| true, |e| unavailable(e).into()).await?;
    Ok(to_record(after)?)
}

/// The statements of one operator action inside `txn`, answering the command's row as it
/// is after the action; the caller commits or rolls back.
async fn act_in(
    store: &SeaOrmLifecycleStore,
    txn: &sea_orm::DatabaseTransaction,
    request: &OperatorAction,
) -> Result<outbox::Model, OperatorActionError> {
    let id = request.command_id.as_str();
    let Some(row) = outbox::Entity::find_by_id(id.to_owned())
        .one(txn)
        .await
        .map_err(unavailable)?
    else {
        return Err(OperatorActionError::UnknownCommand {
            command_id: request.command_id.clone(),
        });
    };
    let before = to_record(row)?;
    // The action is recorded, and an abandon completes, at the database's time, not the
    // operator process's: retention's cut-offs read these (issue 29).
    let at = store.now_on(txn).await?;
    if !tenantry_lifecycle::operator::accepts_action(
        before.status,
        request.kind == OperatorActionKind::MarkDeleted,
    ) {
        return Err(OperatorActionError::NotActionable {
            command_id: before.id,
            status: before.status,
        });
    }
    // Every control space keeps an exit (case 012): a plain abandon of the delete that owns
    // its deleting control space is refused; mark-deleted completes the control space in this
    // transaction (compare-and-set on the version read here).
    if request.kind.abandons() && before.operation == Operation::Delete {
        let cs =
            super::intake::find_control_space(txn, &before.tenant_id, &before.control_space_id)
                .await?;
        match request.kind {
            OperatorActionKind::MarkDeleted => {
                let cas = tenantry_lifecycle::operator::mark_deleted(&before, cs.as_ref(), at)?;
                if !super::apply_cas(txn, &cas).await.map_err(unavailable)? {
                    return Err(OperatorActionError::NotActionable {
                        command_id: before.id,
                        status: CommandStatus::Processing,
                    });
                }
            }
            _ => {
                if let Some(refusal) =
                    tenantry_lifecycle::operator::abandon_refusal(&before, cs.as_ref())
                {
                    return Err(refusal.into());
                }
            }
        }
    } else if request.kind == OperatorActionKind::MarkDeleted {
        return Err(
            tenantry_lifecycle::operator::ControlSpaceActionError::NotAnOwningDelete {
                command_id: before.id.to_string(),
            }
            .into(),
        );
    }
    let mut update = outbox::Entity::update_many()
        .col_expr(outbox::Column::FailedAt, Expr::value(Option::<i64>::None))
        .col_expr(
            outbox::Column::LeaseOwner,
            Expr::value(Option::<String>::None),
        )
        .col_expr(
            outbox::Column::LeaseExpiresAt,
            Expr::value(Option::<i64>::None),
        );
    update = match request.kind {
        OperatorActionKind::Retry => update
            .col_expr(
                outbox::Column::Status,
                Expr::value(CommandStatus::Pending.as_str()),
            )
            .col_expr(
                outbox::Column::NextAttemptAt,
                // Due at once by the store's clock, not the operator process's.
                Expr::cust(store.now_sql()),
            )
            .col_expr(
                outbox::Column::AttemptBudgetBase,
                Expr::col(outbox::Column::AttemptCount),
            )
            .col_expr(
                outbox::Column::CompletedAt,
                Expr::value(Option::<i64>::None),
            ),
        OperatorActionKind::Abandon | OperatorActionKind::MarkDeleted => update
            .col_expr(
                outbox::Column::Status,
                Expr::value(CommandStatus::Abandoned.as_str()),
            )
            .col_expr(outbox::Column::CompletedAt, Expr::value(millis(at)))
            .col_expr(
                outbox::Column::LastErrorCode,
                Expr::value(ErrorCode::AbandonedByOperator.as_str()),
            )
            .col_expr(
                outbox::Column::LastErrorMessage,
                Expr::value(request.reason.clone()),
            ),
    };
    // Compare-and-set on the status read above: a claim that took the command meanwhile
    // (it was pending) wins, and the action is refused.
    let changed = update
        .filter(outbox::Column::Id.eq(id))
        .filter(outbox::Column::Status.eq(before.status.as_str()))
        .filter(outbox::Column::AttemptCount.eq(before.attempt_count))
        .exec(txn)
        .await
        .map_err(unavailable)?
        .rows_affected;
    if changed != 1 {
        return Err(OperatorActionError::NotActionable {
            command_id: before.id,
            status: CommandStatus::Processing,
        });
    }
    action::Entity::insert(action::ActiveModel {
        id: Set(request.action_id.clone()),
        command_id: Set(id.to_owned()),
        action: Set(request.kind.as_str().to_owned()),
        actor: Set(request.actor.clone()),
        reason: Set(request.reason.clone()),
        previous_status: Set(before.status.as_str().to_owned()),
        previous_error_code: Set(before.last_error_code.as_ref().map(ToString::to_string)),
        attempt_count: Set(before.attempt_count),
        created_at: Set(millis(at)),
    })
    .exec(txn)
    .await
    .map_err(unavailable)?;
    if request.kind.abandons() {
        log_attempt_error(
            txn,
            &store.now_sql(),
            &AttemptLog {
                command_id: id,
                end: AttemptEnd::Abandoned,
                code: ErrorCode::AbandonedByOperator.as_str(),
                message: &request.reason,
                lease_owner: None,
                actor: Some(&request.actor),
            },
        )
        .await
        .map_err(unavailable)?;
    }
    if request.kind == OperatorActionKind::Retry && store.backend == Backend::Postgres {
        // A retried command is due now: wake the listeners at commit (`crate::wake`).
        txn.execute_unprepared(crate::wake::NOTIFY_SQL)
            .await
            .map_err(unavailable)?;
    }
    let after = outbox::Entity::find_by_id(id.to_owned())
        .one(txn)
        .await
        .map_err(unavailable)?
        .ok_or_else(|| StoreError::unavailable("updated command is not readable"))?;
    Ok(after)
}
