//! The lifecycle storage ports over SeaORM: outbox claim and settle, control-space reads, and
//! command intake.
//!
//! Every method is one transaction. On PostgreSQL the claim is one statement,
//! `WITH claimed AS (UPDATE .. WHERE ctid = ANY(ARRAY(SELECT ctid .. FOR UPDATE SKIP
//! LOCKED)) RETURNING *) SELECT .. FROM claimed LEFT JOIN tenantry_control_spaces ..`, so
//! concurrent workers never claim the same command and each claimed command comes with its
//! control space. On SQLite write transactions begin
//! `IMMEDIATE`, which serializes writers (WAL mode lets readers go on). Operator actions and
//! the commands gauge's counts are in `admin`.

mod admin;
mod batch;
#[cfg(feature = "bench")]
mod bulk;
mod claim_rows;
mod convert;
mod entity;
mod intake;
mod lookup;
mod settle;
mod turns;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbBackend, DbErr,
    EntityTrait, QueryFilter, QueryOrder, QuerySelect, SqlErr, Statement, TransactionTrait,
};
use settle::{
    AttemptLog, apply_cas, lease_filter, log_attempt_error, logged_error, settle_in, settle_once,
};
use tenantry_kernel::{ControlSpaceId, TenantId};
use tenantry_lifecycle::{
    ClaimedCommand, ClaimedControlSpace, CommandRecord, ControlSpace, LeaseToken, Operation,
    Settlement,
};
use tenantry_ports::clock::Clock;
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandFilter, CommandQueue, ControlSpaceReader, SettleError, StoreError,
};

use self::convert::{millis, to_claimed, to_control_space, to_record};
use self::entity::{control_space, outbox};
use crate::connect::{Backend, Database};

/// Prefix of the control-space columns joined to a PostgreSQL claim's rows.
const JOINED_PREFIX: &str = "cs_";

/// `c.<column> AS cs_<column>, ..` for every column of `tenantry_control_spaces`: the
/// control space joined to a PostgreSQL claim's rows, named apart from the outbox's columns.
static JOINED_CONTROL_SPACE_COLUMNS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    use sea_orm::{IdenStatic, Iterable};
    control_space::Column::iter()
        .map(|column| format!("c.{0} AS {JOINED_PREFIX}{0}", column.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
});

/// SeaORM implementation of the lifecycle storage ports. Cheap to clone (shares the pool).
///
/// Time: every predicate and timestamp that decides who may act on a command (the claim's
/// "due" and "lease expired" tests, lease expiries, renewals, the supersede rules, the stamps of
/// new commands) uses the database's clock (`statement_timestamp()` on PostgreSQL,
/// `unixepoch('subsec')` on SQLite), never the calling process's, so replicas whose clocks
/// differ cannot take each other's live leases. [`with_clock`](Self::with_clock) replaces the
/// database clock by a [`Clock`] for tests and simulations on virtual time.
#[derive(Clone)]
pub struct SeaOrmLifecycleStore {
    conn: DatabaseConnection,
    backend: Backend,
    clock: Option<Arc<dyn Clock>>,
    contention_retries: Arc<AtomicU64>,
}

impl std::fmt::Debug for SeaOrmLifecycleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeaOrmLifecycleStore")
            .field("backend", &self.backend)
            .field(
                "clock",
                &self.clock.as_ref().map_or("database", |_| "override"),
            )
            .finish_non_exhaustive()
    }
}

impl SeaOrmLifecycleStore {
    /// A store over a migrated database, on the database's clock.
    pub fn new(db: &Database) -> Self {
        Self {
            conn: db.conn.clone(),
            backend: db.backend,
            clock: None,
            contention_retries: Arc::default(),
        }
    }

    /// How many settle transactions were rolled back by a deadlock or serialization failure
    /// and run again (PostgreSQL), since this store was created; exported as the metric
    /// `tenantry_lifecycle_settle_contention_retries_total`.
    pub fn contention_retries(&self) -> u64 {
        self.contention_retries.load(Ordering::Relaxed)
    }

    /// Runs `unit` (a settle transaction) again when it lost a deadlock or serialization
    /// conflict, up to [`CONTENTION_ATTEMPTS`] times with a short pause; each rerun is counted.
    pub(crate) async fn with_contention_retry<T, F, Fut>(
        &self,
        mut unit: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut attempt: u32 = 1;
        loop {
            match unit().await {
                Err(StoreError::Contention { message, .. }) if attempt < CONTENTION_ATTEMPTS => {
                    self.contention_retries.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("tenantry_lifecycle_settle_contention_retries_total")
                        .increment(1);
                    tracing::debug!(attempt, %message, "settle transaction lost a deadlock; running it again");
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt) * 5))
                        .await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// The same store reading "now" from `clock` instead of the database: for tests and
    /// simulations on virtual time only. Replicas in production must share the database clock.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// SQL of the store's "now" in Unix milliseconds: the database clock, or the override
    /// clock's reading as a literal.
    pub(crate) fn now_sql(&self) -> String {
        match (&self.clock, self.backend) {
            (Some(clock), _) => millis(clock.now()).to_string(),
            (None, Backend::Postgres) => {
                "(extract(epoch from statement_timestamp()) * 1000)::bigint".to_owned()
            }
            (None, Backend::Sqlite) => {
                "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)".to_owned()
            }
        }
    }

    /// The store's "now", read on `conn` (one statement unless the clock is overridden).
    pub(crate) async fn now_on<C: ConnectionTrait>(
        &self,
        conn: &C,
    ) -> Result<DateTime<Utc>, StoreError> {
        if let Some(clock) = &self.clock {
            return Ok(clock.now());
        }
        let backend = match self.backend {
            Backend::Postgres => DbBackend::Postgres,
            Backend::Sqlite => DbBackend::Sqlite,
        };
        let row = conn
            .query_one_raw(Statement::from_string(
                backend,
                format!("SELECT {} AS now_ms", self.now_sql()),
            ))
            .await
            .map_err(unavailable)?
            .ok_or_else(|| StoreError::unavailable("the database did not tell its time"))?;
        let ms: i64 = row.try_get("", "now_ms").map_err(unavailable)?;
        DateTime::from_timestamp_millis(ms)
            .ok_or_else(|| StoreError::corrupt(format!("database time {ms} is out of range")))
    }

    pub(crate) async fn begin_write(&self) -> Result<DatabaseTransaction, StoreError> {
        self.conn
            .begin_with_options(self.backend.write_transaction())
            .await
            .map_err(unavailable)
    }
}

/// Most runs of one settle transaction that keeps losing deadlocks before the error is reported.
pub(crate) const CONTENTION_ATTEMPTS: u32 = 5;

/// Runs a unit of work in its own task, so dropping the caller's future (a cancelled request, a
/// timeout) can never stop it between `BEGIN` and `COMMIT`: the unit completes or rolls back
/// before its pooled connection is reused. (A future dropped mid-`BEGIN` could otherwise hand
/// the pool a connection with an open transaction.)
pub(crate) async fn detached<T, E, Fut>(unit: Fut) -> Result<T, E>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
{
    match tokio::spawn(unit).await {
        Ok(result) => result,
        Err(join) => Err(
            StoreError::unavailable(format!("a storage task did not finish: {join}"))
                .with_source(join)
                .into(),
        ),
    }
}

/// Whole milliseconds of `duration`, saturating.
pub(crate) fn duration_millis(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Maps a database error of the lifecycle store to the port's error
/// ([`crate::error::store_error`] for [`Mechanism::Lifecycle`](crate::Mechanism::Lifecycle)).
pub(crate) fn unavailable(error: DbErr) -> StoreError {
    crate::error::store_error(crate::Mechanism::Lifecycle, error)
}

pub(crate) fn is_unique_violation(error: &DbErr) -> bool {
    matches!(error.sql_err(), Some(SqlErr::UniqueConstraintViolation(_)))
}

#[async_trait]
impl CommandQueue for SeaOrmLifecycleStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        // PostgreSQL: the subquery locks the rows it picks and hands their physical addresses
        // (`ctid`) to the update, which then reaches each row by a TID scan instead of a second
        // primary-key lookup (docs/benchmarks.md, "Side by side with the peers"). The address
        // is the locked (latest) row version's: a locked row cannot be updated, deleted or
        // moved by anyone else until this statement's transaction ends. A row version newer
        // than the statement's snapshot (committed by another claim or settle meanwhile) is
        // invisible to the update's TID scan: that row is then not claimed this time (it stays
        // as it was, for a later claim), never claimed twice. SQLite selects by id.
        let (backend, key, matches, lock) = match self.backend {
            Backend::Postgres => (
                DbBackend::Postgres,
                "ctid",
                "ctid = ANY(ARRAY(",
                " FOR UPDATE SKIP LOCKED))",
            ),
            Backend::Sqlite => (DbBackend::Sqlite, "id", "id IN (", ")"),
        };
        // Turn order (docs/protocol.md, "Fair claims across tenants"), read from the claim
        // index of m0016 (`turn_at, next_attempt_at, created_at, id` over live commands). A
        // command keeps its turn across retries, so commands waiting out a backoff sit among
        // due ones: `next_attempt_at <= now` stands alone so that the index's second column
        // skips them without reading the row. A processing command was due when claimed, so it
        // holds for it too unless the store's clock stepped back since; the in-memory store
        // applies the same condition (`is_due`).
        // Placeholders by number: `$n` on PostgreSQL, `?n` on SQLite (both may repeat).
        let p = |n: u8| match self.backend {
            Backend::Postgres => format!("${n}"),
            Backend::Sqlite => format!("?{n}"),
        };
        let operation_filter = if request.include_provision {
            String::new()
        } else {
            format!(" AND operation <> '{}'", Operation::Provision.as_str())
        };
        let now = self.now_sql();
        let lease_ms = duration_millis(request.lease_duration);
        // A takeover (the row is still `processing`: its lease expired) extends the replaced
        // attempt's window by the call deadline; the new window covers it too (docs/protocol.md,
        // "Leases, renewal and the attempt window"). SET expressions read the row as it was.
        let replaced = format!(
            "CASE WHEN status = 'processing' AND attempt_window_ends_at IS NOT NULL \
               THEN attempt_window_ends_at + {deadline} ELSE attempt_window_ends_at END",
            deadline = p(4),
        );
        // Planted (verification only): a lease taken a minute before it expired.
        let expired = if tenantry_kernel::planted!("sql-claim-takes-live-lease") {
            format!("lease_expires_at <= {now} + 60000")
        } else {
            format!("lease_expires_at <= {now}")
        };
        let sql = format!(
            "UPDATE tenantry_lifecycle_outbox SET status = 'processing', lease_owner = {owner}, \
             lease_expires_at = {now} + {lease}, prior_window_ends_at = {replaced}, \
             attempt_window_ends_at = CASE WHEN {replaced} > {now} + {lease} THEN {replaced} \
               ELSE {now} + {lease} END, \
             lease_epoch = lease_epoch + 1, attempt_count = attempt_count + 1 \
             WHERE {matches}SELECT {key} FROM tenantry_lifecycle_outbox \
               WHERE completed_at IS NULL AND next_attempt_at <= {now} \
                 AND (status = 'pending' OR (status = 'processing' AND {expired})){operation_filter} \
               ORDER BY turn_at, next_attempt_at, created_at, id LIMIT {limit}{lock} \
             RETURNING *",
            owner = p(1),
            lease = p(2),
            limit = p(3),
        );
        let values: Vec<sea_orm::Value> = vec![
            request.owner.as_str().into(),
            lease_ms.into(),
            i64::from(request.limit.max(1)).into(),
            duration_millis(request.call_deadline).into(),
        ];
        // PostgreSQL: the claimed commands' control spaces come in the same statement, joined
        // to the rows the update returned (docs/protocol.md, "The control space comes with
        // the claim"): no second round trip while the process's one claimer waits. SQLite
        // reads them with a statement of their own right after.
        let sql = match self.backend {
            Backend::Postgres => format!(
                "WITH claimed AS ({sql}) SELECT claimed.*, {spaces} FROM claimed \
                 LEFT JOIN tenantry_control_spaces AS c \
                   ON c.tenant_id = claimed.tenant_id \
                  AND c.control_space_id = claimed.control_space_id",
                spaces = *JOINED_CONTROL_SPACE_COLUMNS,
            ),
            Backend::Sqlite => sql,
        };
        let results = self
            .conn
            .query_all_raw(Statement::from_sql_and_values(backend, sql, values))
            .await
            .map_err(unavailable)?;
        let mut rows = Vec::with_capacity(results.len());
        for result in &results {
            rows.push(claim_rows::read(result).map_err(unavailable)?);
        }
        drop(results);
        // `RETURNING` follows no `ORDER BY`: PostgreSQL answers in the order it updated the
        // rows (their place in the table), not the claim's. The batch is handed out in the
        // claim's order (found by the workers simulation over PostgreSQL: two runs of one seed
        // dispatched a batch in different orders).
        rows.sort_by(|(a, _), (b, _)| {
            (a.turn_at, a.next_attempt_at, a.created_at, &a.id).cmp(&(
                b.turn_at,
                b.next_attempt_at,
                b.created_at,
                &b.id,
            ))
        });
        let mut claimed = rows
            .into_iter()
            .map(|(row, space)| {
                to_claimed(row, request.lease_duration).map(|mut command| {
                    command.control_space = space;
                    command
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if claimed.is_empty() || self.backend == Backend::Postgres {
            return Ok(claimed);
        }
        // SQLite: the claimed commands' control spaces, read right after the claim took effect
        // (one statement per claim instead of one read per dispatch). The claim has taken
        // effect already: if the read fails, the commands go out without it (`NotRead`) and
        // each saga reads its own.
        let keys: Vec<(TenantId, ControlSpaceId)> = claimed
            .iter()
            .map(|c| (c.tenant_id.clone(), c.control_space_id.clone()))
            .collect();
        if let Ok(spaces) = batch::control_spaces(self, &keys).await {
            for (command, space) in claimed.iter_mut().zip(spaces) {
                command.control_space = ClaimedControlSpace::Read(space);
            }
        }
        Ok(claimed)
    }

    async fn next_due_in(
        &self,
        include_provision: bool,
    ) -> Result<Option<std::time::Duration>, StoreError> {
        let backend = match self.backend {
            Backend::Postgres => DbBackend::Postgres,
            Backend::Sqlite => DbBackend::Sqlite,
        };
        let operation_filter = if include_provision {
            String::new()
        } else {
            format!(" AND operation <> '{}'", Operation::Provision.as_str())
        };
        // Both halves read only live rows (`completed_at IS NULL`, the claim index's predicate).
        let sql = format!(
            "SELECT MIN(due) - {now} AS wait_ms FROM (\
               SELECT MIN(next_attempt_at) AS due FROM tenantry_lifecycle_outbox \
                 WHERE completed_at IS NULL AND status = 'pending'{operation_filter} \
               UNION ALL \
               SELECT MIN(lease_expires_at) AS due FROM tenantry_lifecycle_outbox \
                 WHERE completed_at IS NULL AND status = 'processing'{operation_filter}\
             ) AS waiting",
            now = self.now_sql(),
        );
        let row = self
            .conn
            .query_one_raw(Statement::from_string(backend, sql))
            .await
            .map_err(unavailable)?;
        let wait_ms: Option<i64> = match row {
            Some(row) => row.try_get("", "wait_ms").map_err(unavailable)?,
            None => None,
        };
        Ok(wait_ms.map(|ms| std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
    }

    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: std::time::Duration,
    ) -> Result<LeaseToken, SettleError> {
        let now = self.now_sql();
        let expires = format!("{now} + {}", duration_millis(lease_duration));
        // The window moves with the lease, never back before the end a takeover gave it.
        let window = format!(
            "CASE WHEN attempt_window_ends_at > {expires} THEN attempt_window_ends_at \
               ELSE {expires} END"
        );
        let row = outbox::Entity::update_many()
            .col_expr(outbox::Column::LeaseExpiresAt, Expr::cust(expires.clone()))
            .col_expr(outbox::Column::AttemptWindowEndsAt, Expr::cust(window))
            .filter(lease_filter(lease))
            // Only a live lease is renewed, judged on the database clock: an expired lease
            // that nobody has claimed yet is not revived (docs/protocol.md, "Leases, renewal
            // and the attempt window").
            .filter(Expr::cust(format!("lease_expires_at > {now}")))
            .exec_with_returning(&self.conn)
            .await
            .map_err(unavailable)?
            .pop();
        let Some(row) = row else {
            return Err(SettleError::LeaseLost {
                command_id: lease.command_id.clone(),
            });
        };
        let expires_at = row
            .lease_expires_at
            .and_then(DateTime::from_timestamp_millis)
            .ok_or_else(|| StoreError::corrupt("renewed lease has no expiry"))?;
        Ok(LeaseToken {
            expires_at,
            ..lease.clone()
        })
    }

    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        let store = self.clone();
        let (lease, settlement) = (lease.clone(), settlement.clone());
        detached(async move {
            store
                .with_contention_retry(|| settle_once(&store, &lease, &settlement))
                .await?
        })
        .await
    }

    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        let store = self.clone();
        let items = items.to_vec();
        detached(async move {
            store
                .with_contention_retry(|| batch::settle_many(&store, &items))
                .await
        })
        .await
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
        let mut query = filtered(outbox::Entity::find(), filter);
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
        } else if let Some(before) = &filter.before {
            // Backwards: the last `limit` rows before the cursor row, read newest first and
            // returned ascending.
            let Some(cursor) = outbox::Entity::find_by_id(before.as_str().to_owned())
                .one(&self.conn)
                .await
                .map_err(unavailable)?
            else {
                return Ok(Vec::new());
            };
            let mut rows = query
                .filter(
                    sea_orm::Condition::any()
                        .add(outbox::Column::CreatedAt.lt(cursor.created_at))
                        .add(
                            sea_orm::Condition::all()
                                .add(outbox::Column::CreatedAt.eq(cursor.created_at))
                                .add(outbox::Column::Id.lt(before.as_str())),
                        ),
                )
                .order_by_desc(outbox::Column::CreatedAt)
                .order_by_desc(outbox::Column::Id)
                .limit(u64::from(filter.limit))
                .all(&self.conn)
                .await
                .map_err(unavailable)?;
            rows.reverse();
            return rows.into_iter().map(to_record).collect();
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

/// `query` narrowed to the commands matching `filter` (every field but the cursor and the
/// limit): shared by the listing and [`CommandAdmin::count_matching`](tenantry_ports::lifecycle::CommandAdmin::count_matching).
pub(crate) fn filtered(
    mut query: sea_orm::Select<outbox::Entity>,
    filter: &CommandFilter,
) -> sea_orm::Select<outbox::Entity> {
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
    query
}
