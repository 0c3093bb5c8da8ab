//! The lifecycle storage ports over SeaORM: outbox claim and settle, control-space reads, and
//! command intake.
//!
//! Every method is one transaction. On PostgreSQL the claim is one
//! `UPDATE .. WHERE id IN (SELECT .. FOR UPDATE SKIP LOCKED) RETURNING *` statement, so
//! concurrent workers never claim the same command. On SQLite write transactions begin
//! `IMMEDIATE`, which serializes writers (WAL mode lets readers go on). Operator actions and
//! the commands gauge's counts are in `admin`.

mod admin;
mod batch;
#[cfg(feature = "bench")]
pub(crate) mod bulk;
mod convert;
mod entity;

use async_trait::async_trait;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    EntityTrait, QueryFilter, QueryOrder, QuerySelect, SqlErr, SqliteTransactionMode, Statement,
    TransactionOptions, TransactionTrait,
};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::{ControlSpaceWrite, IntakePlan};
use tenantry_lifecycle::{
    CasUpdate, ClaimedCommand, CommandOutcome, CommandRecord, CommandStatus, ControlSpace,
    LeaseToken, Operation, Settlement, SupersedeRule,
};
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandFilter, CommandQueue, ControlSpaceReader, IntakeStore, IntakeStoreError,
    SettleError, StoreError, Submitted,
};

use self::convert::{millis, to_claimed, to_control_space, to_record};
use self::entity::{control_space, outbox};
use crate::connect::{Backend, Database};

/// SeaORM implementation of the lifecycle storage ports. Cheap to clone (shares the pool).
#[derive(Debug, Clone)]
pub struct SeaOrmLifecycleStore {
    conn: DatabaseConnection,
    backend: Backend,
}

impl SeaOrmLifecycleStore {
    /// A store over a migrated database.
    pub fn new(db: &Database) -> Self {
        Self {
            conn: db.conn.clone(),
            backend: db.backend,
        }
    }

    async fn begin_write(&self) -> Result<DatabaseTransaction, StoreError> {
        let options = TransactionOptions {
            sqlite_transaction_mode: (self.backend == Backend::Sqlite)
                .then_some(SqliteTransactionMode::Immediate),
            ..TransactionOptions::default()
        };
        self.conn
            .begin_with_options(options)
            .await
            .map_err(unavailable)
    }
}

pub(crate) fn unavailable(error: DbErr) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

fn is_unique_violation(error: &DbErr) -> bool {
    matches!(error.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
}

/// Condition "processing under this lease".
fn lease_filter(lease: &LeaseToken) -> sea_orm::Condition {
    sea_orm::Condition::all()
        .add(outbox::Column::Id.eq(lease.command_id.as_str()))
        .add(outbox::Column::Status.eq(CommandStatus::Processing.as_str()))
        .add(outbox::Column::LeaseOwner.eq(lease.owner.as_str()))
        .add(outbox::Column::LeaseEpoch.eq(lease.epoch.0))
}

async fn apply_cas<C: ConnectionTrait>(conn: &C, cas: &CasUpdate) -> Result<bool, DbErr> {
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
/// compare-and-set, the supersede rule. On a refusal earlier writes of this settlement are
/// left for the caller to roll back.
pub(crate) async fn settle_in<C: ConnectionTrait>(
    conn: &C,
    lease: &LeaseToken,
    settlement: &Settlement,
) -> Result<(), SettleError> {
    let mut update = outbox::Entity::update_many().filter(lease_filter(lease));
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
                        Expr::value(error.code.clone()),
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
            SupersedeRule::AfterRemoteAbsence { observed_at } => sea_orm::Condition::any()
                .add(outbox::Column::Status.eq(CommandStatus::Pending.as_str()))
                .add(
                    sea_orm::Condition::all()
                        .add(outbox::Column::Status.eq(CommandStatus::Processing.as_str()))
                        .add(outbox::Column::LeaseExpiresAt.lte(millis(observed_at))),
                ),
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
                Expr::value(supersede.error.code.clone()),
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
    Ok(())
}

#[async_trait]
impl CommandQueue for SeaOrmLifecycleStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        let (backend, lock, p) = match self.backend {
            Backend::Postgres => (
                DbBackend::Postgres,
                " FOR UPDATE SKIP LOCKED",
                ["$1", "$2", "$3", "$4"],
            ),
            Backend::Sqlite => (DbBackend::Sqlite, "", ["?", "?", "?", "?"]),
        };
        let operation_filter = if request.include_provision {
            String::new()
        } else {
            format!(" AND operation <> '{}'", Operation::Provision.as_str())
        };
        let sql = format!(
            "UPDATE lifecycle_outbox SET status = 'processing', lease_owner = {owner}, \
             lease_expires_at = {expires}, lease_epoch = lease_epoch + 1, \
             attempt_count = attempt_count + 1 \
             WHERE id IN (SELECT id FROM lifecycle_outbox \
               WHERE completed_at IS NULL \
                 AND ((status = 'pending' AND next_attempt_at <= {now}) \
                   OR (status = 'processing' AND lease_expires_at <= {now})){operation_filter} \
               ORDER BY next_attempt_at, created_at, id LIMIT {limit}{lock}) \
             RETURNING *",
            owner = p[0],
            expires = p[1],
            now = p[2],
            limit = p[3],
        );
        let now = millis(request.now);
        let mut values: Vec<sea_orm::Value> = vec![
            request.owner.as_str().into(),
            millis(request.lease_expires_at()).into(),
            now.into(),
        ];
        if self.backend == Backend::Sqlite {
            // SQLite binds positionally: `now` appears twice.
            values.push(now.into());
        }
        values.push(i64::from(request.limit.max(1)).into());
        let sql = if self.backend == Backend::Sqlite {
            sql
        } else {
            sql.replace(&format!("<= {}))", p[2]), "<= $3))")
        };
        let rows = outbox::Entity::find()
            .from_raw_sql(Statement::from_sql_and_values(backend, sql, values))
            .all(&self.conn)
            .await
            .map_err(unavailable)?;
        rows.into_iter().map(to_claimed).collect()
    }

    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        let txn = self.begin_write().await?;
        settle_in(&txn, lease, settlement).await?;
        txn.commit().await.map_err(unavailable)?;
        Ok(())
    }

    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        batch::settle_many(self, items).await
    }

    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        outbox::Entity::find()
            .filter(outbox::Column::TenantId.eq(tenant_id.as_str()))
            .filter(outbox::Column::ControlSpaceId.eq(control_space_id.as_str()))
            .filter(outbox::Column::Operation.eq(Operation::Provision.as_str()))
            .order_by_desc(outbox::Column::CreatedAt)
            .order_by_desc(outbox::Column::Id)
            .one(&self.conn)
            .await
            .map_err(unavailable)?
            .map(to_record)
            .transpose()
    }

    async fn list_commands(
        &self,
        filter: &CommandFilter,
    ) -> Result<Vec<CommandRecord>, StoreError> {
        let mut query = outbox::Entity::find();
        if let Some(status) = filter.status {
            query = query.filter(outbox::Column::Status.eq(status.as_str()));
        }
        if let Some(operation) = &filter.operation {
            query = query.filter(outbox::Column::Operation.eq(operation.as_str()));
        }
        if let Some(tenant) = &filter.tenant_id {
            query = query.filter(outbox::Column::TenantId.eq(tenant.as_str()));
        }
        if let Some(cs) = &filter.control_space_id {
            query = query.filter(outbox::Column::ControlSpaceId.eq(cs.as_str()));
        }
        if let Some(code) = &filter.error_code {
            query = query.filter(outbox::Column::LastErrorCode.eq(code.as_str()));
        }
        if let Some(after) = &filter.after {
            // Keyset pagination on (created_at, id) of the cursor row; an unknown cursor
            // yields an empty page.
            let Some(cursor) = outbox::Entity::find_by_id(after.as_str().to_owned())
                .one(&self.conn)
                .await
                .map_err(unavailable)?
            else {
                return Ok(Vec::new());
            };
            query = query.filter(
                sea_orm::Condition::any()
                    .add(outbox::Column::CreatedAt.gt(cursor.created_at))
                    .add(
                        sea_orm::Condition::all()
                            .add(outbox::Column::CreatedAt.eq(cursor.created_at))
                            .add(outbox::Column::Id.gt(after.as_str())),
                    ),
            );
        }
        query
            .order_by_asc(outbox::Column::CreatedAt)
            .order_by_asc(outbox::Column::Id)
            .limit(u64::from(filter.limit))
            .all(&self.conn)
            .await
            .map_err(unavailable)?
            .into_iter()
            .map(to_record)
            .collect()
    }
}

#[async_trait]
impl ControlSpaceReader for SeaOrmLifecycleStore {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        control_space::Entity::find_by_id((
            tenant_id.as_str().to_owned(),
            control_space_id.as_str().to_owned(),
        ))
        .one(&self.conn)
        .await
        .map_err(unavailable)?
        .map(to_control_space)
        .transpose()
    }

    async fn control_spaces(
        &self,
        keys: &[(TenantId, ControlSpaceId)],
    ) -> Result<Vec<Option<ControlSpace>>, StoreError> {
        batch::control_spaces(self, keys).await
    }
}

#[async_trait]
impl IntakeStore for SeaOrmLifecycleStore {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        let txn = self.begin_write().await?;
        let key = plan.command.idempotency_key.as_str();
        if let Some(existing) = outbox::Entity::find()
            .filter(outbox::Column::IdempotencyKey.eq(key))
            .one(&txn)
            .await
            .map_err(unavailable)?
        {
            return Ok(Submitted::Existing(to_record(existing)?));
        }
        match &plan.control_space {
            ControlSpaceWrite::Insert(space) => {
                let result = control_space::Entity::insert(convert::control_space_row(space))
                    .exec(&txn)
                    .await;
                if let Err(error) = result {
                    return Err(if is_unique_violation(&error) {
                        IntakeStoreError::ControlSpaceExists
                    } else {
                        unavailable(error).into()
                    });
                }
            }
            ControlSpaceWrite::Update(cas) => {
                if !apply_cas(&txn, cas).await.map_err(unavailable)? {
                    let exists = control_space::Entity::find_by_id((
                        cas.next.tenant_id.as_str().to_owned(),
                        cas.next.control_space_id.as_str().to_owned(),
                    ))
                    .one(&txn)
                    .await
                    .map_err(unavailable)?
                    .is_some();
                    return Err(if exists {
                        IntakeStoreError::ControlSpaceConflict
                    } else {
                        IntakeStoreError::UnknownControlSpace
                    });
                }
            }
            ControlSpaceWrite::BumpRevokeSequence {
                tenant_id,
                control_space_id,
                expected,
            } => {
                let changed = control_space::Entity::update_many()
                    .col_expr(
                        control_space::Column::LastRevokeSequence,
                        Expr::value(expected.saturating_add(1)),
                    )
                    .filter(control_space::Column::TenantId.eq(tenant_id.as_str()))
                    .filter(control_space::Column::ControlSpaceId.eq(control_space_id.as_str()))
                    .filter(control_space::Column::LastRevokeSequence.eq(*expected))
                    .exec(&txn)
                    .await
                    .map_err(unavailable)?
                    .rows_affected;
                if changed != 1 {
                    let exists = control_space::Entity::find_by_id((
                        tenant_id.as_str().to_owned(),
                        control_space_id.as_str().to_owned(),
                    ))
                    .one(&txn)
                    .await
                    .map_err(unavailable)?
                    .is_some();
                    return Err(if exists {
                        IntakeStoreError::ControlSpaceConflict
                    } else {
                        IntakeStoreError::UnknownControlSpace
                    });
                }
            }
        }
        let row = convert::new_command_row(&plan.command);
        match outbox::Entity::insert(row).exec(&txn).await {
            Ok(_) => {}
            Err(error) if is_unique_violation(&error) => {
                // A concurrent request with the same key won the race: report it as a replay.
                drop(txn);
                return match self
                    .command_by_idempotency_key(&plan.command.idempotency_key)
                    .await?
                {
                    Some(existing) => Ok(Submitted::Existing(existing)),
                    None => Err(unavailable(error).into()),
                };
            }
            Err(error) => return Err(unavailable(error).into()),
        }
        txn.commit().await.map_err(unavailable)?;
        let created = self
            .command_by_idempotency_key(&plan.command.idempotency_key)
            .await?
            .ok_or_else(|| StoreError::Unavailable("inserted command is not readable".into()))?;
        Ok(Submitted::Created(created))
    }

    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        outbox::Entity::find()
            .filter(outbox::Column::IdempotencyKey.eq(key.as_str()))
            .one(&self.conn)
            .await
            .map_err(unavailable)?
            .map(to_record)
            .transpose()
    }
}
