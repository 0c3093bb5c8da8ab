//! Settling a command: the lease condition, the control-space compare-and-set, one settle
//! inside a transaction (`settle_in`, shared with batch settles), the attempt-error log, and the
//! single settle transaction with its refusals.

use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, DbErr, EntityTrait, QueryFilter,
    Statement,
};
use tenantry_lifecycle::{
    CasUpdate, CommandOutcome, CommandStatus, ErrorRecord, LeaseToken, Settlement, SupersedeRule,
};
use tenantry_ports::lifecycle::{AttemptEnd, SettleError, StoreError};

use super::batch;
use super::convert::millis;
use super::entity::{control_space, outbox};
use super::{SeaOrmLifecycleStore, duration_millis, unavailable};

/// Condition "processing under this lease".
pub(super) fn lease_filter(lease: &LeaseToken) -> sea_orm::Condition {
    sea_orm::Condition::all()
        .add(outbox::Column::Id.eq(lease.command_id.as_str()))
        .add(outbox::Column::Status.eq(CommandStatus::Processing.as_str()))
        .add(outbox::Column::LeaseOwner.eq(lease.owner.as_str()))
        .add(outbox::Column::LeaseEpoch.eq(lease.epoch.0))
}

pub(crate) async fn apply_cas<C: ConnectionTrait>(
    conn: &C,
    cas: &CasUpdate,
) -> Result<bool, DbErr> {
    let next = &cas.next;
    let result = control_space::Entity::update_many()
        .col_expr(
            control_space::Column::State,
            Expr::value(next.state.as_str()),
        )
        .col_expr(
            control_space::Column::LifecycleOperationId,
            Expr::value(next.lifecycle_operation_id.as_str()),
        )
        .col_expr(
            control_space::Column::ResourceVersion,
            Expr::value(next.resource_version),
        )
        .col_expr(
            control_space::Column::KnowledgeSpaceId,
            Expr::value(
                next.knowledge_space_id
                    .as_ref()
                    .map(|k| k.as_str().to_owned()),
            ),
        )
        .col_expr(
            control_space::Column::KnowledgeSpaceRevision,
            Expr::value(next.knowledge_space_revision),
        )
        .col_expr(
            control_space::Column::DeletionIrreversibleAt,
            Expr::value(next.deletion_irreversible_at.map(millis)),
        )
        .col_expr(
            control_space::Column::UpdatedAt,
            Expr::value(millis(next.updated_at)),
        )
        .filter(control_space::Column::TenantId.eq(next.tenant_id.as_str()))
        .filter(control_space::Column::ControlSpaceId.eq(next.control_space_id.as_str()))
        .filter(control_space::Column::ResourceVersion.eq(cas.expected_resource_version))
        .filter(control_space::Column::State.eq(cas.expected_state.as_str()))
        .exec(conn)
        .await?;
    Ok(result.rows_affected == 1)
}

/// Applies one settlement on `conn` (inside a transaction the caller commits), checking in
/// order: the lease (the outbox update matches the lease or nothing), the control-space
/// compare-and-set, the supersede rule. `now` is the SQL of the store's clock
/// ([`SeaOrmLifecycleStore::now_sql`]): the end of the attempt window and the supersede rules
/// use it. On a refusal earlier writes of this settlement are left for the caller to roll back.
pub(crate) async fn settle_in<C: ConnectionTrait>(
    conn: &C,
    now: &str,
    lease: &LeaseToken,
    settlement: &Settlement,
) -> Result<(), SettleError> {
    let mut update = outbox::Entity::update_many().filter(lease_filter(lease));
    if settlement.outcome.is_some() {
        // The attempt ends: its window ends now (not before the window of an attempt it took
        // over, extended at the claim), or (nothing sent) stays what it was before.
        let window_end = if settlement.may_have_sent {
            Expr::cust(format!(
                "CASE WHEN prior_window_ends_at > {now} THEN prior_window_ends_at ELSE {now} END"
            ))
        } else {
            Expr::col(outbox::Column::PriorWindowEndsAt)
        };
        update = update.col_expr(outbox::Column::AttemptWindowEndsAt, window_end);
        if !settlement.spends_attempt {
            // A claim handed back before its call gives its attempt back (issue 29).
            update = update.col_expr(
                outbox::Column::AttemptBudgetBase,
                sea_orm::sea_query::ExprTrait::add(Expr::col(outbox::Column::AttemptBudgetBase), 1),
            );
        }
    }
    update = match &settlement.outcome {
        Some(outcome) => {
            let mut update = update
                .col_expr(
                    outbox::Column::Status,
                    Expr::value(outcome.status().as_str()),
                )
                .col_expr(
                    outbox::Column::LeaseOwner,
                    Expr::value(Option::<String>::None),
                )
                .col_expr(
                    outbox::Column::LeaseExpiresAt,
                    Expr::value(Option::<i64>::None),
                );
            if let Some(completed_at) = outcome.completed_at() {
                update = update.col_expr(
                    outbox::Column::CompletedAt,
                    Expr::value(millis(completed_at)),
                );
            }
            if let CommandOutcome::Fail { completed_at, .. } = outcome {
                update =
                    update.col_expr(outbox::Column::FailedAt, Expr::value(millis(*completed_at)));
            }
            if let CommandOutcome::Retry {
                next_attempt_at, ..
            } = outcome
            {
                update = update.col_expr(
                    outbox::Column::NextAttemptAt,
                    Expr::value(millis(*next_attempt_at)),
                );
            }
            if let Some(error) = outcome.error() {
                update = update
                    .col_expr(
                        outbox::Column::LastErrorCode,
                        Expr::value(error.code.as_str()),
                    )
                    .col_expr(
                        outbox::Column::LastErrorMessage,
                        Expr::value(error.message.clone()),
                    );
            }
            update
        }
        // Keep the lease: a no-op write that still checks (and locks) the lease.
        None => update.col_expr(
            outbox::Column::LeaseEpoch,
            Expr::col(outbox::Column::LeaseEpoch),
        ),
    };
    let changed = update.exec(conn).await.map_err(unavailable)?.rows_affected;
    if changed != 1 {
        return Err(SettleError::LeaseLost {
            command_id: lease.command_id.clone(),
        });
    }
    if let Some(cas) = &settlement.control_space
        && !apply_cas(conn, cas).await.map_err(unavailable)?
    {
        return Err(SettleError::ControlSpaceConflict {
            control_space_id: cas.next.control_space_id.clone(),
        });
    }
    if let Some(supersede) = &settlement.supersede {
        let rule = match supersede.rule {
            SupersedeRule::Unattempted => sea_orm::Condition::all()
                .add(outbox::Column::Status.eq(CommandStatus::Pending.as_str()))
                .add(outbox::Column::AttemptCount.eq(0)),
            SupersedeRule::AfterRemoteAbsence { grace, observed_at } => sea_orm::Condition::all()
                .add(
                    sea_orm::Condition::any()
                        .add(outbox::Column::Status.eq(CommandStatus::Pending.as_str()))
                        .add(
                            sea_orm::Condition::all()
                                .add(outbox::Column::Status.eq(CommandStatus::Processing.as_str()))
                                .add(Expr::cust(format!("lease_expires_at <= {now}"))),
                        ),
                )
                // Quiet when the lookup was sent (`observed_at`), and by the store's clock.
                .add(Expr::cust(format!(
                    "(attempt_count = 0 OR attempt_window_ends_at IS NULL \
                      OR (attempt_window_ends_at + {grace} <= {observed} \
                          AND attempt_window_ends_at + {grace} <= {now}))",
                    grace = duration_millis(grace),
                    observed = millis(observed_at),
                ))),
        };
        let changed = outbox::Entity::update_many()
            .col_expr(
                outbox::Column::Status,
                Expr::value(CommandStatus::Superseded.as_str()),
            )
            .col_expr(
                outbox::Column::CompletedAt,
                Expr::value(millis(supersede.completed_at)),
            )
            .col_expr(
                outbox::Column::LastErrorCode,
                Expr::value(supersede.error.code.as_str()),
            )
            .col_expr(
                outbox::Column::LastErrorMessage,
                Expr::value(supersede.error.message.clone()),
            )
            .col_expr(
                outbox::Column::LeaseOwner,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                outbox::Column::LeaseExpiresAt,
                Expr::value(Option::<i64>::None),
            )
            .filter(outbox::Column::Id.eq(supersede.command_id.as_str()))
            .filter(rule)
            .exec(conn)
            .await
            .map_err(unavailable)?
            .rows_affected;
        if changed != 1 {
            return Err(SettleError::SupersedeRefused {
                command_id: supersede.command_id.clone(),
            });
        }
    }
    // Every check passed: a retry or a dead letter enters the attempt-error log.
    if let Some((end, error)) = settlement.outcome.as_ref().and_then(logged_error) {
        log_attempt_error(
            conn,
            now,
            &AttemptLog {
                command_id: lease.command_id.as_str(),
                end,
                code: error.code.as_str(),
                message: &error.message,
                lease_owner: Some(lease.owner.as_str()),
                actor: None,
            },
        )
        .await
        .map_err(unavailable)?;
    }
    Ok(())
}

/// The attempt-error log entry an outcome writes: retries and dead letters (acks and moot
/// closes write none).
pub(crate) fn logged_error(outcome: &CommandOutcome) -> Option<(AttemptEnd, &ErrorRecord)> {
    match outcome {
        CommandOutcome::Retry { error, .. } => Some((AttemptEnd::Retry, error)),
        CommandOutcome::Fail { error, .. } => Some((AttemptEnd::Failed, error)),
        CommandOutcome::Ack { .. } | CommandOutcome::Moot { .. } => None,
    }
}

/// One entry of the attempt-error log to write ([`log_attempt_error`]).
pub(crate) struct AttemptLog<'a> {
    pub(crate) command_id: &'a str,
    pub(crate) end: AttemptEnd,
    pub(crate) code: &'a str,
    pub(crate) message: &'a str,
    pub(crate) lease_owner: Option<&'a str>,
    pub(crate) actor: Option<&'a str>,
}

/// Appends `entry` to the attempt-error log on `conn` (inside the caller's transaction, after
/// its outbox update): one `INSERT .. SELECT` that takes the attempt number from the outbox
/// row and the time from `now` (the SQL of the store's clock).
pub(crate) async fn log_attempt_error<C: ConnectionTrait>(
    conn: &C,
    now: &str,
    entry: &AttemptLog<'_>,
) -> Result<(), DbErr> {
    let backend = conn.get_database_backend();
    let p = |n: u8| match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => format!("?{n}"),
    };
    let sql = format!(
        "INSERT INTO tenantry_lifecycle_attempt_errors (id, command_id, attempt, outcome, \
           error_code, error_message, recorded_at, lease_owner, actor) \
         SELECT {id}, o.id, o.attempt_count, {outcome}, {code}, {message}, {now}, {owner}, \
           {actor} FROM tenantry_lifecycle_outbox AS o WHERE o.id = {command}",
        id = p(1),
        outcome = p(2),
        code = p(3),
        message = p(4),
        owner = p(5),
        actor = p(6),
        command = p(7),
    );
    let values: Vec<sea_orm::Value> = vec![
        uuid::Uuid::new_v4().to_string().into(),
        entry.end.as_str().into(),
        entry.code.into(),
        entry.message.into(),
        entry.lease_owner.map(str::to_owned).into(),
        entry.actor.map(str::to_owned).into(),
        entry.command_id.into(),
    ];
    conn.execute_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?;
    Ok(())
}

/// One settle transaction. The outer error is a storage failure (retried on contention); the
/// inner one a refusal (lease lost, compare-and-set failed, supersede refused), which rolls
/// the transaction back.
pub(super) async fn settle_once(
    store: &SeaOrmLifecycleStore,
    lease: &LeaseToken,
    settlement: &Settlement,
) -> Result<Result<(), SettleError>, StoreError> {
    let txn = store.begin_write().await?;
    let answer = settle_locked(store, &txn, lease, settlement).await;
    // A refusal, or a failed statement: the rows this settle locked are free before it
    // answers (`crate::txn`).
    let commit_failed = |e| SettleError::Store(unavailable(e));
    match crate::txn::finish(txn, answer, |_| true, commit_failed).await {
        Ok(()) => Ok(Ok(())),
        Err(SettleError::Store(error)) => Err(error),
        Err(refused) => Ok(Err(refused)),
    }
}

/// The statements of one settle inside `txn`; the caller commits or rolls back.
async fn settle_locked(
    store: &SeaOrmLifecycleStore,
    txn: &DatabaseTransaction,
    lease: &LeaseToken,
    settlement: &Settlement,
) -> Result<(), SettleError> {
    if let Some(supersede) = &settlement.supersede {
        // Two outbox rows: lock them in the global order (by id), like a batch does.
        batch::lock_commands(
            store,
            txn,
            [lease.command_id.as_str(), supersede.command_id.as_str()],
        )
        .await?;
    }
    settle_in(txn, &store.now_sql(), lease, settlement).await
}
