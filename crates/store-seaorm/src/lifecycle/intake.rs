//! Command intake over SeaORM: the [`IntakeStore`] port (one transaction of the store's own
//! per request) and [`SeaOrmLifecycleStore::enqueue`], which writes a request inside a
//! transaction the caller owns, so a platform commits its own rows and the command together.
//!
//! Both apply an [`IntakePlan`] with the same routine ([`apply_plan`]): look up the idempotency
//! key, write the control space (insert or compare-and-set), stamp the command with the store's
//! clock, give it its turn (the tenant's latest live turn read first, `turns`) and insert it.
//!
//! [`IntakeStore::submit_many`] writes a batch of plans that each create a new control space
//! (provision requests) with multi-row inserts, [`BATCH_ROWS_PER_STATEMENT`] rows a statement,
//! in one transaction ([`submit_batch`]): `INSERT .. ON CONFLICT DO NOTHING` into both tables,
//! and if any row was not inserted (a replayed key, an existing control space, a concurrent
//! request) the transaction is rolled back and every plan is submitted on its own, so each
//! gets exactly the answer [`IntakeStore::submit`] gives.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter, TransactionTrait,
};
use tenantry_kernel::{CommandId, IdempotencyKey, OperationId};
use tenantry_lifecycle::CommandRecord;
use tenantry_lifecycle::intake::{
    ControlSpaceWrite, IntakePlan, IntakeReceipt, IntakeRequest, NewIds,
};
use tenantry_lifecycle::turn::next_turn;
use tenantry_ports::lifecycle::{
    IntakeFailure, IntakeStore, IntakeStoreError, MAX_INTAKE_CONFLICT_RETRIES, StoreError,
    Submitted,
};

use super::convert::{self, millis, to_control_space, to_record};
use super::entity::{control_space, outbox};
use super::turns::{latest_turns, queue, queue_and_latest_turn};
use super::{SeaOrmLifecycleStore, apply_cas, detached, is_unique_violation, unavailable};
use crate::connect::Backend;

/// What [`apply_plan`] did.
enum Applied {
    /// The rows are written (not committed); the command is stamped with this store time and
    /// takes this turn.
    Created(DateTime<Utc>, DateTime<Utc>),
    /// A command with the plan's key exists: nothing was written.
    Existing(Box<CommandRecord>),
    /// The command insert met the unique key of a command committed since the lookup (a
    /// concurrent request with the same key). On PostgreSQL the transaction is aborted.
    KeyTaken,
}

/// Applies `plan` on `conn` without committing: see [`IntakeStore::submit`].
async fn apply_plan<C: ConnectionTrait>(
    store: &SeaOrmLifecycleStore,
    conn: &C,
    plan: &IntakePlan,
) -> Result<Applied, IntakeStoreError> {
    if let Some(existing) = find_by_key(conn, &plan.command.idempotency_key).await? {
        return Ok(Applied::Existing(Box::new(existing)));
    }
    match &plan.control_space {
        ControlSpaceWrite::Insert(space) => {
            let result = control_space::Entity::insert(convert::control_space_row(space))
                .exec(conn)
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
            if !apply_cas(conn, cas).await.map_err(unavailable)? {
                return Err(
                    missed_write(conn, &cas.next.tenant_id, &cas.next.control_space_id).await,
                );
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
                .exec(conn)
                .await
                .map_err(unavailable)?
                .rows_affected;
            if changed != 1 {
                return Err(missed_write(conn, tenant_id, control_space_id).await);
            }
        }
    }
    // Whole milliseconds, as stored, so the returned record equals a later read. The head of
    // the queue and the tenant's latest live turn come with the clock reading (one statement).
    let (mut queue, latest) =
        queue_and_latest_turn(store, conn, plan.command.tenant_id.as_str()).await?;
    let now = DateTime::from_timestamp_millis(millis(queue.now)).unwrap_or(queue.now);
    queue.now = now;
    let turn = next_turn(queue, latest);
    match outbox::Entity::insert(convert::new_command_row(&plan.command, now, turn))
        .exec(conn)
        .await
    {
        Ok(_) => {
            if store.backend == Backend::Postgres {
                // Delivered to the listeners (`crate::wake`) when this transaction commits,
                // dropped if it rolls back; several in one transaction are delivered once.
                conn.execute_unprepared(crate::wake::NOTIFY_SQL)
                    .await
                    .map_err(unavailable)?;
            }
            Ok(Applied::Created(now, turn))
        }
        Err(error) if is_unique_violation(&error) => Ok(Applied::KeyTaken),
        Err(error) => Err(unavailable(error).into()),
    }
}

/// The error of a compare-and-set on a control space that matched no row: it changed since it
/// was read ([`IntakeStoreError::ControlSpaceConflict`]) or it does not exist.
async fn missed_write<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &tenantry_kernel::TenantId,
    control_space_id: &tenantry_kernel::ControlSpaceId,
) -> IntakeStoreError {
    match find_control_space(conn, tenant_id, control_space_id).await {
        Ok(Some(_)) => IntakeStoreError::ControlSpaceConflict {
            control_space_id: control_space_id.clone(),
        },
        Ok(None) => IntakeStoreError::UnknownControlSpace,
        Err(error) => error.into(),
    }
}

async fn find_by_key<C: ConnectionTrait>(
    conn: &C,
    key: &IdempotencyKey,
) -> Result<Option<CommandRecord>, StoreError> {
    outbox::Entity::find()
        .filter(outbox::Column::IdempotencyKey.eq(key.as_str()))
        .one(conn)
        .await
        .map_err(unavailable)?
        .map(to_record)
        .transpose()
}

pub(crate) async fn find_control_space<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &tenantry_kernel::TenantId,
    control_space_id: &tenantry_kernel::ControlSpaceId,
) -> Result<Option<tenantry_lifecycle::ControlSpace>, StoreError> {
    control_space::Entity::find_by_id((
        tenant_id.as_str().to_owned(),
        control_space_id.as_str().to_owned(),
    ))
    .one(conn)
    .await
    .map_err(unavailable)?
    .map(to_control_space)
    .transpose()
}

/// Rows per multi-row `INSERT` of a batched intake: an outbox row binds about 20 parameters,
/// so a statement stays below SQLite's 32,766 and PostgreSQL's 65,535 bound parameters.
pub const BATCH_ROWS_PER_STATEMENT: usize = 500;

/// Writes `plans` (each inserting a new control space, keys and control spaces distinct) in one
/// transaction with multi-row inserts; `Ok(None)` when a row was not inserted (the plans must
/// then be submitted one by one: nothing was written). `Some` holds the store time and each
/// plan's turn (in `plans` order): each tenant's commands take consecutive turns.
async fn submit_batch(
    store: &SeaOrmLifecycleStore,
    plans: &[IntakePlan],
) -> Result<Option<(DateTime<Utc>, Vec<DateTime<Utc>>)>, StoreError> {
    let spaces: Vec<&tenantry_lifecycle::ControlSpace> = plans
        .iter()
        .filter_map(|plan| match &plan.control_space {
            ControlSpaceWrite::Insert(space) => Some(space),
            _ => None,
        })
        .collect();
    let txn = store.begin_write().await?;
    let answer = submit_batch_in(store, &txn, plans, &spaces).await;
    // A row not inserted, or a failed statement: nothing stays written or locked once it
    // answers (`crate::txn`).
    crate::txn::finish(txn, answer, Option::is_some, unavailable).await
}

/// The inserts of [`submit_batch`] inside `txn`; `Ok(None)` when a row was not inserted. The
/// caller commits or rolls back.
async fn submit_batch_in(
    store: &SeaOrmLifecycleStore,
    txn: &DatabaseTransaction,
    plans: &[IntakePlan],
    spaces: &[&tenantry_lifecycle::ControlSpace],
) -> Result<Option<(DateTime<Utc>, Vec<DateTime<Utc>>)>, StoreError> {
    use sea_orm::sea_query::OnConflict;
    for chunk in spaces.chunks(BATCH_ROWS_PER_STATEMENT) {
        let inserted = control_space::Entity::insert_many(
            chunk.iter().map(|space| convert::control_space_row(space)),
        )
        .on_conflict(OnConflict::new().do_nothing().to_owned())
        .exec_without_returning(txn)
        .await
        .map_err(unavailable)?;
        if inserted != chunk.len() as u64 {
            return Ok(None);
        }
    }
    // Whole milliseconds, as stored, so the returned records equal a later read.
    let mut queue = queue(store, txn).await?;
    let now = DateTime::from_timestamp_millis(millis(queue.now)).unwrap_or(queue.now);
    queue.now = now;
    let tenants: Vec<&str> = plans.iter().map(|p| p.command.tenant_id.as_str()).collect();
    let mut latest = latest_turns(txn, store.backend, &tenants).await?;
    let batch_turns: Vec<DateTime<Utc>> = tenants
        .iter()
        .map(|tenant| {
            let turn = next_turn(queue, latest.get(*tenant).copied());
            latest.insert((*tenant).to_owned(), turn);
            turn
        })
        .collect();
    for (chunk, turns) in plans
        .chunks(BATCH_ROWS_PER_STATEMENT)
        .zip(batch_turns.chunks(BATCH_ROWS_PER_STATEMENT))
    {
        let inserted = outbox::Entity::insert_many(
            chunk
                .iter()
                .zip(turns)
                .map(|(plan, turn)| convert::new_command_row(&plan.command, now, *turn)),
        )
        .on_conflict(OnConflict::new().do_nothing().to_owned())
        .exec_without_returning(txn)
        .await
        .map_err(unavailable)?;
        if inserted != chunk.len() as u64 {
            return Ok(None);
        }
    }
    if store.backend == Backend::Postgres {
        txn.execute_unprepared(crate::wake::NOTIFY_SQL)
            .await
            .map_err(unavailable)?;
    }
    Ok(Some((now, batch_turns)))
}

/// Whether `plans` can be written by [`submit_batch`]: every plan inserts a new control space,
/// and no two share an idempotency key or a control space.
fn batchable(plans: &[IntakePlan]) -> bool {
    let mut keys = std::collections::HashSet::with_capacity(plans.len());
    let mut spaces = std::collections::HashSet::with_capacity(plans.len());
    plans.len() > 1
        && plans.iter().all(|plan| match &plan.control_space {
            ControlSpaceWrite::Insert(space) => {
                keys.insert(plan.command.idempotency_key.as_str())
                    && spaces.insert((space.tenant_id.as_str(), space.control_space_id.as_str()))
            }
            _ => false,
        })
}

/// One intake transaction of the store's own.
async fn submit_once(
    store: &SeaOrmLifecycleStore,
    plan: &IntakePlan,
) -> Result<Submitted, IntakeStoreError> {
    let txn = store.begin_write().await?;
    let answer = apply_plan(store, &txn, plan).await;
    // Only a created command commits; every other answer ends the transaction first
    // (`crate::txn`).
    let created = |applied: &Applied| matches!(applied, Applied::Created(..));
    match crate::txn::finish(txn, answer, created, |e| unavailable(e).into()).await? {
        Applied::Created(now, turn) => {
            let mut record = CommandRecord::enqueued(&plan.command, now);
            record.turn_at = turn;
            Ok(Submitted::Created(record))
        }
        Applied::Existing(existing) => Ok(Submitted::Existing(*existing)),
        Applied::KeyTaken => {
            // A concurrent request with the same key won the race: report it as a replay.
            find_by_key(&store.conn, &plan.command.idempotency_key)
                .await?
                .map(Submitted::Existing)
                .ok_or_else(|| {
                    StoreError::unavailable(
                        "the idempotency key was taken by a command that is not readable",
                    )
                    .into()
                })
        }
    }
}

#[async_trait]
impl IntakeStore for SeaOrmLifecycleStore {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        let store = self.clone();
        let plan = plan.clone();
        detached(async move {
            match submit_once(&store, &plan).await {
                // Two requests with one idempotency key raced (PostgreSQL lets both pass the
                // key lookup): the loser's insert met the winner's rows once the winner
                // committed. The winner's command is the answer: a replay, never a conflict.
                Err(
                    IntakeStoreError::ControlSpaceExists
                    | IntakeStoreError::ControlSpaceConflict { .. },
                ) if let Some(existing) =
                    find_by_key(&store.conn, &plan.command.idempotency_key).await? =>
                {
                    Ok(Submitted::Existing(existing))
                }
                other => other,
            }
        })
        .await
    }

    async fn submit_many(&self, plans: &[IntakePlan]) -> Vec<Result<Submitted, IntakeStoreError>> {
        if batchable(plans) {
            let store = self.clone();
            let batch = plans.to_vec();
            // Its own task: a dropped caller cannot leave the transaction open.
            match detached(async move { submit_batch(&store, &batch).await }).await {
                Ok(Some((now, turns))) => {
                    return plans
                        .iter()
                        .zip(turns)
                        .map(|(plan, turn)| {
                            let mut record = CommandRecord::enqueued(&plan.command, now);
                            record.turn_at = turn;
                            Ok(Submitted::Created(record))
                        })
                        .collect();
                }
                // A replay, an existing control space or a concurrent request: one by one.
                Ok(None) => {}
                Err(error) => return plans.iter().map(|_| Err(error.clone().into())).collect(),
            }
        }
        let mut answers = Vec::with_capacity(plans.len());
        for plan in plans {
            answers.push(self.submit(plan).await);
        }
        answers
    }

    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        find_by_key(&self.conn, key).await
    }
}

/// How one attempt of [`SeaOrmLifecycleStore::enqueue`] ended inside its savepoint.
enum Attempt {
    /// Written (or found as a replay): release the savepoint and answer.
    Done(IntakeReceipt),
    /// The key or the control-space id was taken by a concurrent commit: roll the savepoint
    /// back and look the key up again.
    Taken { space_exists: bool },
    /// The control space changed between read and write: roll back and plan again.
    Changed,
}

impl SeaOrmLifecycleStore {
    /// Enqueues `request` inside the caller's transaction `conn`: looks up its idempotency
    /// key, reads the control space, plans (the same rules as the engine's `CommandIntake`) and
    /// writes the control-space row and the outbox command on `conn`, **committing nothing**.
    /// When the caller commits, the command is due at once and any worker on the database
    /// dispatches it; when the caller rolls back, neither the command nor the control-space
    /// write exists. This is the transactional outbox's point: "my business row + the
    /// provision command" commit atomically.
    ///
    /// `conn` is a `sea_orm::DatabaseTransaction` (usual) or a `DatabaseConnection`. The request's writes run in a savepoint of it, so a refused or
    /// conflicting request leaves the caller's transaction usable and its own rows untouched
    /// (PostgreSQL would otherwise abort the whole transaction on the first failed statement).
    /// Given a `DatabaseConnection` instead, the request gets a transaction of its own.
    ///
    /// Time and ids: the command and the control space are stamped with the store's clock
    /// read on `conn`; command and operation ids are random UUIDs (v4).
    ///
    /// On SQLite, open the caller's transaction with
    /// `begin_with_options(TransactionOptions { sqlite_transaction_mode:
    /// Some(SqliteTransactionMode::Immediate), .. })`: a deferred transaction that has read
    /// cannot always take the write lock later (`SQLITE_BUSY` without waiting). On PostgreSQL
    /// use READ COMMITTED (the default): a same-key race is resolved by reading the winner's
    /// committed command.
    ///
    /// **Trace context.** It runs in an `intake` span (a child of the caller's current span)
    /// and stores that span's W3C context on the command when OpenTelemetry records it, so
    /// every dispatch of the command continues the host's trace (docs/operations.md,
    /// "Tracing"; outside any span the `intake` span starts the command's trace); without
    /// tracing nothing is stored.
    ///
    /// **Cancellation.** Unlike [`IntakeStore::submit`], this runs on the caller's transaction,
    /// so it cannot be detached. Never cancel the `enqueue` future on its own (a `timeout`
    /// around just this call) and then go on with the transaction: the savepoint may be left
    /// half-open, and on PostgreSQL the driver can then end the whole transaction or split it,
    /// so a later commit may keep only part of the caller's writes. Cancel the whole unit of
    /// work instead: dropping the transaction together with the `enqueue` future rolls
    /// everything back and writes nothing. A cancelled `enqueue` logs an error saying so.
    ///
    /// # Errors
    /// - [`IntakeFailure::Rejected`]: the request is invalid (see `IntakeRequest::plan`), names
    ///   an unknown or existing control space, or reuses a key for a different request;
    /// - [`IntakeFailure::Contended`]: the control space changed between read and write
    ///   [`MAX_INTAKE_CONFLICT_RETRIES`] times;
    /// - [`IntakeFailure::Store`]: the database failed (a PostgreSQL deadlock is
    ///   [`StoreError::Contention`]: roll back and run your transaction again).
    ///
    /// In every error case nothing of the request was written; the caller's transaction is
    /// still open and usable.
    pub async fn enqueue<C>(
        &self,
        conn: &C,
        request: impl Into<IntakeRequest>,
    ) -> Result<IntakeReceipt, IntakeFailure>
    where
        C: ConnectionTrait + TransactionTrait<Transaction = DatabaseTransaction>,
    {
        let request = request.into();
        let mut cancelled = CancelAlarm::armed(request.idempotency_key());
        let (tenant, control_space) = request.target();
        let span = tracing::info_span!(
            "intake",
            via = "enqueue",
            tenant = %tenant,
            control_space = %control_space,
        );
        let result = tracing::Instrument::instrument(self.enqueue_in(conn, &request), span).await;
        cancelled.disarm();
        result
    }

    async fn enqueue_in<C>(
        &self,
        conn: &C,
        request: &IntakeRequest,
    ) -> Result<IntakeReceipt, IntakeFailure>
    where
        C: ConnectionTrait + TransactionTrait<Transaction = DatabaseTransaction>,
    {
        for _ in 0..MAX_INTAKE_CONFLICT_RETRIES {
            let savepoint = conn
                .begin_with_options(self.backend.write_transaction())
                .await
                .map_err(unavailable)?;
            let attempt = self.enqueue_attempt(&savepoint, request).await;
            match attempt {
                Ok(Attempt::Done(receipt)) => {
                    savepoint.commit().await.map_err(unavailable)?;
                    return Ok(receipt);
                }
                Ok(Attempt::Changed) => rollback(savepoint).await?,
                Ok(Attempt::Taken { space_exists }) => {
                    rollback(savepoint).await?;
                    return match find_by_key(conn, request.idempotency_key()).await? {
                        Some(existing) => Ok(request.replay(&existing)?),
                        None if space_exists => {
                            let (tenant, control_space) = request.target();
                            let existing = find_control_space(conn, tenant, control_space)
                                .await
                                .ok()
                                .flatten();
                            Err(request.control_space_taken(existing.as_ref()).into())
                        }
                        None => Err(StoreError::unavailable(
                            "the idempotency key was taken by a command that is not readable",
                        )
                        .into()),
                    };
                }
                Err(failure) => {
                    rollback(savepoint).await?;
                    return Err(failure);
                }
            }
        }
        Err(IntakeFailure::Contended)
    }

    async fn enqueue_attempt(
        &self,
        txn: &DatabaseTransaction,
        request: &IntakeRequest,
    ) -> Result<Attempt, IntakeFailure> {
        if let Some(existing) = find_by_key(txn, request.idempotency_key()).await? {
            return Ok(Attempt::Done(request.replay(&existing)?));
        }
        let current = if request.reads_control_space() {
            let (tenant, control_space) = request.target();
            find_control_space(txn, tenant, control_space).await?
        } else {
            None
        };
        let ids = NewIds {
            command_id: generated(CommandId::parse(uuid::Uuid::new_v4().to_string()))?,
            operation_id: generated(OperationId::parse(uuid::Uuid::new_v4().to_string()))?,
        };
        let now = self.now_on(txn).await?;
        let mut plan = request.plan(current.as_ref(), ids, now)?;
        // The host's span (inside `enqueue`'s `intake` span): every dispatch continues it.
        plan.command.trace_context = crate::trace_context::current();
        match apply_plan(self, txn, &plan).await {
            Ok(Applied::Created(..)) => Ok(Attempt::Done(IntakeReceipt::created(&plan))),
            Ok(Applied::Existing(existing)) => Ok(Attempt::Done(request.replay(&existing)?)),
            Ok(Applied::KeyTaken) => Ok(Attempt::Taken {
                space_exists: false,
            }),
            Err(IntakeStoreError::ControlSpaceExists) => Ok(Attempt::Taken { space_exists: true }),
            Err(IntakeStoreError::ControlSpaceConflict { .. }) => Ok(Attempt::Changed),
            Err(IntakeStoreError::UnknownControlSpace) => {
                Err(request.unknown_control_space().into())
            }
            Err(IntakeStoreError::Store(error)) => Err(error.into()),
            Err(other) => Err(StoreError::unavailable(other.to_string()).into()),
        }
    }
}

/// Logs an error when an `enqueue` future is dropped before it finished: the caller's
/// transaction must then be dropped too (see `enqueue`, "Cancellation").
struct CancelAlarm {
    key: Option<String>,
}

impl CancelAlarm {
    fn armed(key: &IdempotencyKey) -> Self {
        Self {
            key: Some(key.as_str().to_owned()),
        }
    }

    fn disarm(&mut self) {
        self.key = None;
    }
}

impl Drop for CancelAlarm {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            tracing::error!(
                idempotency_key = %key,
                "enqueue was cancelled inside the caller's transaction: roll that transaction back \
                 (drop it) instead of committing it; its savepoint may be half-open"
            );
        }
    }
}

async fn rollback(savepoint: DatabaseTransaction) -> Result<(), StoreError> {
    savepoint.rollback().await.map_err(unavailable)
}

/// A generated UUID always parses as an id; the mapping only keeps the error typed.
fn generated<T>(parsed: Result<T, tenantry_kernel::IdError>) -> Result<T, StoreError> {
    parsed.map_err(|e| StoreError::corrupt(format!("a generated id was refused: {e}")))
}
