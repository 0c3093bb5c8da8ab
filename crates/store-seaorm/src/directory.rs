//! The directory projection store over SeaORM (SQLite and PostgreSQL).
//!
//! Every apply is ONE transaction:
//! 1. take the instance's `tenantry_directory_projection_state` row lock. SQLite: the transaction
//!    begins `IMMEDIATE`, so the database write lock is taken up front and writers serialize.
//!    PostgreSQL: `SELECT .. FOR UPDATE` on the row. A snapshot first runs
//!    `INSERT .. ON CONFLICT DO NOTHING` of a placeholder row (cursor `i64::MIN`, read back as
//!    "no state yet"), so the first snapshot of two racing replicas also serializes;
//! 2. load the rows the planner needs ([`LookupKeys`]): accounts by uuid or email in chunks of
//!    [`ACCOUNT_QUERY_CHUNK`] (never one query per account), workspaces, their memberships and
//!    execution state, memberships by uuid, inbox receipts — all in chunked `IN` lists;
//! 3. plan with `tenantry_directory::plan`; a refusal rolls back (nothing changed, the
//!    placeholder row included);
//! 4. write the plan with multi-row statements, chunked to stay under the bind-parameter limit
//!    (SQLite 32766, PostgreSQL 65535): a plain `INSERT` of the rows whose key the load did
//!    not find (`split`), `INSERT .. ON CONFLICT (pk) DO UPDATE` of the rows that replace a
//!    stored one;
//! 5. count the committed active projected workspaces and check the limit;
//! 6. commit.
//!
//! The pure CPU work — computing the lookup keys and the snapshot fingerprint, and planning
//! (for a 100,000-membership snapshot about a second of CPU in release builds) — runs in place
//! with `tokio::task::block_in_place` on a multi-threaded runtime (the service's), so the async
//! worker's other tasks (admin API, probes, lifecycle workers) move to another thread
//! meanwhile; on a current-thread runtime it runs inline. It borrows the snapshot: the input is
//! never copied (issue 34: the copy cost as much memory as the parsed snapshot).
//!
//! A snapshot the projection already holds (same cursor, same fingerprint:
//! `tenantry_directory::plan::snapshot_already_projected`) loads and writes no row but the
//! state row and receipts; any other snapshot is compared with the stored rows and only rows
//! that change are written.

#[cfg(feature = "bench")]
mod bulk;
mod convert;
mod entity;
mod pages;
mod split;

pub use self::pages::PAGE_MEMBERSHIPS;

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use sea_orm::sea_query::{OnConflict, Query};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr,
    EntityTrait, IdenStatic, Iterable, PaginatorTrait, PrimaryKeyToColumn, QueryFilter,
    QuerySelect, TransactionTrait,
};
use tenantry_directory::batch::check_committed_active;
use tenantry_directory::maps::{RowSource, WorkspaceStatus};
use tenantry_directory::plan::{
    PageWrite, batch_keys, delta_keys, plan_delta, plan_event_batch, plan_touch,
};
use tenantry_directory::{
    AccountRow, ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryError, DirectoryEvent,
    DirectoryEventBatch, DirectorySnapshot, ExecutionRow, ExistingRows, InboxReceipt, InstanceUuid,
    LookupKeys, MembershipRow, ProjectionState, ProjectionWrite, WorkspaceRow,
};
use tenantry_ports::StoreError;
use tenantry_ports::directory::{
    AnySnapshotSource, DeltaApplier, EventBatchApplier, FreshnessToucher, ProjectionStateReader,
    ProjectionStoreError, SnapshotApplier,
};

use self::convert::*;
use self::entity::{account, execution, inbox, membership, state, workspace};
use crate::connect::{Backend, Database};

/// Accounts are looked up by uuid or email in chunks of this many keys.
/// (Two lists of this many bind parameters stay under SQLite's limit of 32,766.)
pub const ACCOUNT_QUERY_CHUNK: usize = 5_000;
/// Other `IN` lists are chunked to this many keys (one round trip per 5,000 keys).
const IN_CHUNK: usize = 5_000;
/// Cursor of the placeholder state row a snapshot inserts before taking the row lock.
const PLACEHOLDER_CURSOR: i64 = i64::MIN;

/// What a multi-row insert does with a row whose primary key exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnKey {
    /// Overwrite every other column (upsert).
    Overwrite,
    /// Fail the statement (plain `INSERT`: the rows an apply creates, and the bench
    /// baseline).
    Fail,
}

/// A row type of one projected table: its entity, the conversions both ways, and the table's
/// name in errors.
trait TableRow: Sized {
    /// The table's entity.
    type Entity: EntityTrait;
    /// The table, as a storage error names it (`write accounts: …`).
    const TABLE: &'static str;
    /// The row as an active model with every column set.
    fn model(&self) -> <Self::Entity as EntityTrait>::ActiveModel;
    /// The row read back.
    ///
    /// # Errors
    /// The column that does not hold a valid value.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    fn from_model(model: <Self::Entity as EntityTrait>::Model) -> Result<Self, Corrupt>;
}

/// The projected tables: row type, entity, conversions (to, from), name in errors.
macro_rules! table_rows {
    ($($row:ty => $entity:ty, $to:ident, $from:ident, $table:literal;)*) => {$(
        impl TableRow for $row {
            type Entity = $entity;
            const TABLE: &'static str = $table;
            fn model(&self) -> <Self::Entity as EntityTrait>::ActiveModel {
                $to(self)
            }
            fn from_model(model: <Self::Entity as EntityTrait>::Model) -> Result<Self, Corrupt> {
                $from(model)
            }
        }
    )*};
}

table_rows! {
    AccountRow => account::Entity, from_account, to_account, "accounts";
    WorkspaceRow => workspace::Entity, from_workspace, to_workspace, "workspaces";
    MembershipRow => membership::Entity, from_membership, to_membership, "memberships";
    ExecutionRow => execution::Entity, from_execution, to_execution, "execution state";
    InboxReceipt => inbox::Entity, from_receipt, to_receipt, "inbox receipts";
    ProjectionState => state::Entity, from_state, to_state, "projection state";
}

/// The directory projection store. Cheap to clone (shares the pool).
#[derive(Debug, Clone)]
pub struct SeaOrmDirectoryStore {
    conn: DatabaseConnection,
    backend: Backend,
    /// Memberships per page of a snapshot apply ([`pages::PAGE_MEMBERSHIPS`] by default).
    page_memberships: usize,
}

/// Maps a database error during `op` to the port's error ([`crate::error::store_error`]),
/// keeping it as the source; the message starts with `op`.
fn storage(op: &str) -> impl Fn(DbErr) -> ProjectionStoreError + '_ {
    move |e| {
        ProjectionStoreError::Storage(
            crate::error::store_error(crate::Mechanism::Directory, e).with_context(op),
        )
    }
}

/// A stored row that does not decode.
fn corrupt(message: String) -> ProjectionStoreError {
    ProjectionStoreError::Storage(StoreError::corrupt(message))
}

impl SeaOrmDirectoryStore {
    /// A store over a migrated database.
    pub fn new(db: &Database) -> Self {
        Self {
            conn: db.conn.clone(),
            backend: db.backend,
            page_memberships: PAGE_MEMBERSHIPS,
        }
    }

    /// The same store applying snapshots in pages of about `memberships` memberships
    /// (default [`PAGE_MEMBERSHIPS`], 10,000; a workspace with more is a page alone, and 0
    /// puts every workspace on its own page). Smaller pages hold less in memory and make more
    /// round trips; the result does not depend on it (`pages`).
    #[must_use]
    pub fn with_snapshot_page(mut self, memberships: usize) -> Self {
        self.page_memberships = memberships;
        self
    }

    /// Most rows per multi-row statement for a table of `columns` columns.
    fn rows_per_statement(&self, columns: usize) -> usize {
        let max_params = match self.backend {
            Backend::Sqlite => 32_766,
            Backend::Postgres => 65_535,
        };
        (max_params / columns.max(1)).max(1)
    }

    /// The database's clock, read on `conn` (Unix milliseconds: `statement_timestamp()` on
    /// PostgreSQL, `unixepoch('subsec')` on SQLite). New inbox receipts are stamped with it.
    async fn database_now<C: sea_orm::ConnectionTrait>(
        &self,
        conn: &C,
    ) -> Result<chrono::DateTime<chrono::Utc>, ProjectionStoreError> {
        let (backend, sql) = match self.backend {
            Backend::Postgres => (
                sea_orm::DbBackend::Postgres,
                "SELECT (extract(epoch from statement_timestamp()) * 1000)::bigint AS now_ms",
            ),
            Backend::Sqlite => (
                sea_orm::DbBackend::Sqlite,
                "SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER) AS now_ms",
            ),
        };
        let row = conn
            .query_one_raw(sea_orm::Statement::from_string(backend, sql))
            .await
            .map_err(storage("read the database clock"))?
            .ok_or_else(|| ProjectionStoreError::storage("the database did not tell its time"))?;
        let ms: i64 = row
            .try_get("", "now_ms")
            .map_err(storage("read the database clock"))?;
        chrono::DateTime::from_timestamp_millis(ms).ok_or_else(|| {
            ProjectionStoreError::storage(format!("the database clock read {ms} ms"))
        })
    }

    /// Begins an apply's transaction. On PostgreSQL every statement in it is planned for its
    /// own values (`SET LOCAL plan_cache_mode = force_custom_plan`): the driver prepares each
    /// statement once per connection, and from its sixth execution PostgreSQL may run the
    /// prepared statement's generic plan, which cannot hash an `IN` list of parameters. The
    /// account lookup (`uuid IN (5,000 values) OR normalized_email IN (5,000 values)`) then
    /// compared every stored account with up to 10,000 values one by one: six of its 25 chunks
    /// took 28 s each, and a snapshot at a later cursor took 182 s instead of 8 s at 500,000
    /// memberships
    /// (docs/benchmarks.md, "Directory at scale"). Planning each chunk's statement costs
    /// milliseconds.
    async fn begin(&self) -> Result<DatabaseTransaction, ProjectionStoreError> {
        let txn = self
            .conn
            .begin_with_options(self.backend.write_transaction())
            .await
            .map_err(storage("begin"))?;
        if self.backend == Backend::Postgres
            && let Err(error) = txn
                .execute_unprepared("SET LOCAL plan_cache_mode = force_custom_plan")
                .await
        {
            crate::txn::roll_back(txn).await;
            return Err(storage("plan each statement for its values")(error));
        }
        Ok(txn)
    }

    /// Locks (and for a snapshot first inserts a placeholder of) the state row; `None` when
    /// there is no real state yet.
    async fn lock_state(
        &self,
        txn: &DatabaseTransaction,
        instance: &InstanceUuid,
        insert_placeholder: bool,
    ) -> Result<Option<ProjectionState>, ProjectionStoreError> {
        if insert_placeholder {
            let placeholder = state::ActiveModel {
                instance_uuid: sea_orm::Set(instance.to_string()),
                cursor: sea_orm::Set(PLACEHOLDER_CURSOR),
                snapshot_coverage_cursor: sea_orm::Set(PLACEHOLDER_CURSOR),
                snapshot_fingerprint: sea_orm::Set(String::new()),
                last_applied_at: sea_orm::Set(0),
                lease_expires_at: sea_orm::Set(0),
            };
            state::Entity::insert(placeholder)
                .on_conflict(
                    OnConflict::column(state::Column::InstanceUuid)
                        .do_nothing()
                        .to_owned(),
                )
                .exec_without_returning(txn)
                .await
                .map_err(storage("insert projection state"))?;
        }
        let mut query = state::Entity::find_by_id(instance.to_string());
        if self.backend == Backend::Postgres {
            query = query.lock_exclusive();
        }
        let row = query
            .one(txn)
            .await
            .map_err(storage("lock projection state"))?;
        match row {
            Some(row) if row.cursor == PLACEHOLDER_CURSOR => Ok(None),
            Some(row) => to_state(row).map(Some).map_err(corrupt),
            None => Ok(None),
        }
    }

    /// The uuids of the instance's projected workspaces that may need an absent fence: not
    /// archived or deleted, or with execution state still active or unfenced (the superset
    /// of `tenantry_directory::rows::needs_absent_fence` that SQL can select).
    async fn absent_candidates(
        &self,
        txn: &DatabaseTransaction,
        instance: &InstanceUuid,
    ) -> Result<Vec<String>, ProjectionStoreError> {
        let open_executions = Query::select()
            .column(execution::Column::WorkspaceUuid)
            .from(execution::Entity)
            .cond_where(
                Condition::any()
                    .add(execution::Column::State.eq("active"))
                    .add(execution::Column::WriteFenced.eq(false)),
            )
            .to_owned();
        workspace::Entity::find()
            .select_only()
            .column(workspace::Column::Uuid)
            .filter(workspace::Column::InstanceUuid.eq(instance.as_str()))
            .filter(workspace::Column::Source.eq(RowSource::Directory.as_str()))
            .filter(
                Condition::any()
                    .add(workspace::Column::Status.is_not_in([
                        WorkspaceStatus::Archived.as_str(),
                        WorkspaceStatus::Deleted.as_str(),
                    ]))
                    .add(workspace::Column::Uuid.in_subquery(open_executions)),
            )
            .into_tuple()
            .all(txn)
            .await
            .map_err(storage("load absent workspace candidates"))
    }

    async fn load(
        &self,
        txn: &DatabaseTransaction,
        keys: &LookupKeys,
        instance: &InstanceUuid,
    ) -> Result<ExistingRows, ProjectionStoreError> {
        let mut accounts = BTreeMap::new();
        let uuids: Vec<String> = keys.account_uuids.iter().map(ToString::to_string).collect();
        let rounds = uuids
            .len()
            .max(keys.emails.len())
            .div_ceil(ACCOUNT_QUERY_CHUNK);
        for round in 0..rounds {
            let range = |len: usize| {
                (round * ACCOUNT_QUERY_CHUNK).min(len)..((round + 1) * ACCOUNT_QUERY_CHUNK).min(len)
            };
            let uuid_chunk = &uuids[range(uuids.len())];
            let email_chunk = &keys.emails[range(keys.emails.len())];
            let rows = account::Entity::find()
                .filter(
                    Condition::any()
                        .add(account::Column::Uuid.is_in(uuid_chunk.iter().cloned()))
                        .add(account::Column::NormalizedEmail.is_in(email_chunk.iter().cloned())),
                )
                .all(txn)
                .await
                .map_err(storage("load accounts"))?;
            for row in rows {
                accounts.insert(row.uuid.clone(), row);
            }
        }

        let mut workspaces = BTreeMap::new();
        let wanted: Vec<String> = keys
            .workspace_uuids
            .iter()
            .map(ToString::to_string)
            .collect();
        for chunk in wanted.chunks(IN_CHUNK) {
            let rows = workspace::Entity::find()
                .filter(workspace::Column::Uuid.is_in(chunk.iter().cloned()))
                .all(txn)
                .await
                .map_err(storage("load workspaces"))?;
            for row in rows {
                workspaces.insert(row.uuid.clone(), row);
            }
        }
        if keys.absent_candidates {
            let absent: Vec<String> = self.absent_candidates(txn, instance).await?;
            for chunk in absent.chunks(IN_CHUNK) {
                let rows = workspace::Entity::find()
                    .filter(workspace::Column::Uuid.is_in(chunk.iter().cloned()))
                    .all(txn)
                    .await
                    .map_err(storage("load absent workspace candidates"))?;
                for row in rows {
                    workspaces.insert(row.uuid.clone(), row);
                }
            }
        }
        let workspace_set: BTreeSet<String> = wanted
            .iter()
            .cloned()
            .chain(workspaces.keys().cloned())
            .collect();
        let workspace_list: Vec<String> = workspace_set.into_iter().collect();

        let mut memberships = BTreeMap::new();
        for chunk in workspace_list.chunks(IN_CHUNK) {
            let rows = membership::Entity::find()
                .filter(membership::Column::WorkspaceUuid.is_in(chunk.iter().cloned()))
                .all(txn)
                .await
                .map_err(storage("load memberships"))?;
            for row in rows {
                memberships.insert(row.uuid.clone(), row);
            }
        }
        // A membership of a loaded workspace is already here; only a uuid elsewhere (reused
        // for another workspace) needs its own lookup.
        let membership_uuids: Vec<String> = keys
            .membership_uuids
            .iter()
            .map(ToString::to_string)
            .filter(|uuid| !memberships.contains_key(uuid))
            .collect();
        for chunk in membership_uuids.chunks(IN_CHUNK) {
            let rows = membership::Entity::find()
                .filter(membership::Column::Uuid.is_in(chunk.iter().cloned()))
                .all(txn)
                .await
                .map_err(storage("load memberships by uuid"))?;
            for row in rows {
                memberships.insert(row.uuid.clone(), row);
            }
        }

        let mut executions = Vec::new();
        for chunk in workspace_list.chunks(IN_CHUNK) {
            let rows = execution::Entity::find()
                .filter(execution::Column::WorkspaceUuid.is_in(chunk.iter().cloned()))
                .all(txn)
                .await
                .map_err(storage("load execution state"))?;
            executions.extend(rows);
        }

        let mut receipts = Vec::new();
        let events: Vec<String> = keys.event_uuids.iter().map(ToString::to_string).collect();
        for chunk in events.chunks(IN_CHUNK) {
            let rows = inbox::Entity::find()
                .filter(inbox::Column::InstanceUuid.eq(instance.as_str()))
                .filter(inbox::Column::EventUuid.is_in(chunk.iter().cloned()))
                .all(txn)
                .await
                .map_err(storage("load inbox receipts"))?;
            receipts.extend(rows);
        }

        Ok(ExistingRows {
            accounts: accounts
                .into_values()
                .map(to_account)
                .collect::<Result<_, _>>()
                .map_err(corrupt)?,
            workspaces: workspaces
                .into_values()
                .map(to_workspace)
                .collect::<Result<_, _>>()
                .map_err(corrupt)?,
            memberships: memberships
                .into_values()
                .map(to_membership)
                .collect::<Result<_, _>>()
                .map_err(corrupt)?,
            executions: executions
                .into_iter()
                .map(to_execution)
                .collect::<Result<_, _>>()
                .map_err(corrupt)?,
            receipts: receipts
                .into_iter()
                .map(to_receipt)
                .collect::<Result<_, _>>()
                .map_err(corrupt)?,
        })
    }

    /// Upserts every row of `plan` (and its state row) with chunked multi-row statements.
    /// Writes a plan whose first `new` rows of each table are new ([`split::new_rows_first`]):
    /// those with a plain `INSERT`, the others with an upsert; the state row last.
    async fn write<C: sea_orm::ConnectionTrait>(
        &self,
        conn: &C,
        plan: &ProjectionWrite,
        new: split::NewRows,
    ) -> Result<(), ProjectionStoreError> {
        self.write_split(conn, &plan.accounts, new.accounts).await?;
        self.write_split(conn, &plan.workspaces, new.workspaces)
            .await?;
        self.write_split(conn, &plan.memberships, new.memberships)
            .await?;
        self.write_split(conn, &plan.executions, new.executions)
            .await?;
        self.write_split(conn, &plan.receipts, new.receipts).await?;
        self.write_table(conn, std::slice::from_ref(&plan.state), OnKey::Overwrite)
            .await
    }

    /// Writes one page of a paged snapshot like [`write`](Self::write) writes a plan (no
    /// receipts, no state row).
    async fn write_page<C: sea_orm::ConnectionTrait>(
        &self,
        conn: &C,
        page: &PageWrite,
        new: split::NewRows,
    ) -> Result<(), ProjectionStoreError> {
        self.write_split(conn, &page.accounts, new.accounts).await?;
        self.write_split(conn, &page.workspaces, new.workspaces)
            .await?;
        self.write_split(conn, &page.memberships, new.memberships)
            .await?;
        self.write_split(conn, &page.executions, new.executions)
            .await
    }

    /// Writes one table's rows of a plan: the first `new` with a plain `INSERT`, the rest
    /// with an upsert ([`split::new_rows_first`] put the new rows first).
    async fn write_split<R, C>(
        &self,
        conn: &C,
        rows: &[R],
        new: usize,
    ) -> Result<(), ProjectionStoreError>
    where
        R: TableRow,
        C: sea_orm::ConnectionTrait,
    {
        let (inserted, replaced) = rows.split_at(new);
        self.write_table(conn, inserted, OnKey::Fail).await?;
        self.write_table(conn, replaced, OnKey::Overwrite).await
    }

    /// The one routine that writes a table: `rows` (each converted to an active model of its
    /// table's entity, see [`TableRow`]) go in multi-row `INSERT` statements of at most
    /// [`Self::rows_per_statement`] rows. With [`OnKey::Overwrite`] a row whose primary key
    /// exists overwrites every other column (the upsert of a plan; the key and the update set
    /// are read from the entity, so a new column is written without touching this routine);
    /// with [`OnKey::Fail`] the statement fails instead.
    async fn write_table<R, C>(
        &self,
        conn: &C,
        rows: &[R],
        on_key: OnKey,
    ) -> Result<(), ProjectionStoreError>
    where
        R: TableRow,
        C: sea_orm::ConnectionTrait,
    {
        let key: Vec<<R::Entity as EntityTrait>::Column> =
            <R::Entity as EntityTrait>::PrimaryKey::iter()
                .map(PrimaryKeyToColumn::into_column)
                .collect();
        let others: Vec<<R::Entity as EntityTrait>::Column> =
            <R::Entity as EntityTrait>::Column::iter()
                .filter(|c| !key.iter().any(|k| k.as_str() == c.as_str()))
                .collect();
        let columns = key.len() + others.len();
        for chunk in rows.chunks(self.rows_per_statement(columns)) {
            let insert = R::Entity::insert_many(chunk.iter().map(TableRow::model));
            let insert = match on_key {
                OnKey::Overwrite => insert.on_conflict(
                    OnConflict::columns(key.iter().copied())
                        .update_columns(others.iter().copied())
                        .to_owned(),
                ),
                OnKey::Fail => insert,
            };
            insert.exec_without_returning(conn).await.map_err(|e| {
                let verb = match on_key {
                    OnKey::Overwrite => "write",
                    OnKey::Fail => "insert",
                };
                storage(&format!("{verb} {}", R::TABLE))(e)
            })?;
        }
        Ok(())
    }

    async fn count_active(
        &self,
        txn: &DatabaseTransaction,
        instance: &InstanceUuid,
    ) -> Result<u64, ProjectionStoreError> {
        workspace::Entity::find()
            .filter(workspace::Column::InstanceUuid.eq(instance.as_str()))
            .filter(workspace::Column::Source.eq(RowSource::Directory.as_str()))
            .filter(workspace::Column::Status.eq(WorkspaceStatus::Active.as_str()))
            .count(txn)
            .await
            .map_err(storage("count active workspaces"))
    }

    /// One apply transaction (see the module documentation). Once the state row is locked,
    /// `keys` names the rows to load (given the state) and `plan` plans against them; both
    /// are CPU work ([`off_runtime`]).
    async fn apply<K, P>(
        &self,
        ctx: &ApplyContext,
        insert_placeholder: bool,
        keys: K,
        plan: P,
    ) -> Result<ApplyOutcome, ProjectionStoreError>
    where
        K: FnOnce(Option<&ProjectionState>) -> Option<LookupKeys> + Send,
        P: FnOnce(
                Option<&ProjectionState>,
                &ExistingRows,
            ) -> Result<ProjectionWrite, DirectoryError>
            + Send,
    {
        let txn = self.begin().await?;
        let result = self
            .apply_in(&txn, ctx, insert_placeholder, keys, plan)
            .await;
        // A refusal lets the state row's lock go before it answers (`crate::txn`).
        crate::txn::finish(txn, result, |_| true, storage("commit")).await
    }

    async fn apply_in<K, P>(
        &self,
        txn: &DatabaseTransaction,
        ctx: &ApplyContext,
        insert_placeholder: bool,
        keys: K,
        plan: P,
    ) -> Result<ApplyOutcome, ProjectionStoreError>
    where
        K: FnOnce(Option<&ProjectionState>) -> Option<LookupKeys> + Send,
        P: FnOnce(
                Option<&ProjectionState>,
                &ExistingRows,
            ) -> Result<ProjectionWrite, DirectoryError>
            + Send,
    {
        let state = self
            .lock_state(txn, &ctx.instance, insert_placeholder)
            .await?;
        let existing = match off_runtime(|| keys(state.as_ref())) {
            Some(keys) => self.load(txn, &keys, &ctx.instance).await?,
            None => ExistingRows::default(),
        };
        let plan = off_runtime(|| plan(state.as_ref(), &existing))?;
        self.write_plan(txn, ctx, plan, existing).await
    }

    /// The end of every apply: stamps new receipts with the database's clock, writes `plan`
    /// (new rows inserted, others upserted; `existing` is what the plan was made against),
    /// then counts the committed active workspaces when the plan asks for it.
    async fn write_plan(
        &self,
        txn: &DatabaseTransaction,
        ctx: &ApplyContext,
        mut plan: ProjectionWrite,
        existing: ExistingRows,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        if plan.creates_receipts(&existing) {
            // `received_at` is retention's cut-off: the database's clock, not this process's.
            let now = self.database_now(txn).await?;
            plan.stamp_new_receipts(&existing, now);
        }
        let new = split::new_rows_first(&mut plan, &existing);
        drop(existing);
        self.write(txn, &plan, new).await?;
        let active = if plan.check_active_capacity {
            let active = self.count_active(txn, &ctx.instance).await?;
            check_committed_active(active, &ctx.limits)?;
            Some(active)
        } else {
            None
        };
        Ok(ApplyOutcome::of(&plan, active))
    }
}

/// Runs pure CPU work (lookup keys, planning) without stalling the runtime's other tasks: on a
/// multi-threaded runtime (the service's) in place with [`tokio::task::block_in_place`], which
/// hands this worker's other tasks to another thread; elsewhere (a current-thread runtime, no
/// runtime) inline. The work borrows its input, so a snapshot is never copied for it (a copy
/// of a parsed 1,000,000-membership snapshot is several hundred megabytes). Other code of
/// the same task (a `select!` branch, a timeout around the apply) waits until it returns.
fn off_runtime<T, F>(work: F) -> T
where
    F: FnOnce() -> T,
{
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

#[async_trait]
impl SnapshotApplier for SeaOrmDirectoryStore {
    async fn apply_snapshot(
        &self,
        ctx: &ApplyContext,
        snapshot: &DirectorySnapshot,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.apply_snapshot_pages(ctx, snapshot, events).await
    }

    async fn apply_snapshot_source(
        &self,
        ctx: &ApplyContext,
        source: &AnySnapshotSource,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.apply_snapshot_pages(ctx, source, events).await
    }
}

#[async_trait]
impl DeltaApplier for SeaOrmDirectoryStore {
    async fn apply_delta(
        &self,
        ctx: &ApplyContext,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.apply(
            ctx,
            false,
            |_| Some(delta_keys(delta, batch)),
            |state, existing| plan_delta(ctx, state, existing, delta, batch),
        )
        .await
    }
}

#[async_trait]
impl EventBatchApplier for SeaOrmDirectoryStore {
    async fn apply_event_batch(
        &self,
        ctx: &ApplyContext,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.apply(
            ctx,
            false,
            |_| Some(batch_keys(batch)),
            |state, existing| plan_event_batch(ctx, state, existing, batch),
        )
        .await
    }
}

#[async_trait]
impl FreshnessToucher for SeaOrmDirectoryStore {
    async fn touch_freshness(
        &self,
        ctx: &ApplyContext,
        replica_cursor: i64,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.apply(
            ctx,
            false,
            |_| None,
            |state, _| plan_touch(ctx, state, replica_cursor),
        )
        .await
    }
}

#[async_trait]
impl ProjectionStateReader for SeaOrmDirectoryStore {
    async fn projection_state(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Option<ProjectionState>, ProjectionStoreError> {
        let row = state::Entity::find_by_id(instance.to_string())
            .one(&self.conn)
            .await
            .map_err(storage("read projection state"))?;
        match row {
            Some(row) if row.cursor != PLACEHOLDER_CURSOR => {
                to_state(row).map(Some).map_err(corrupt)
            }
            _ => Ok(None),
        }
    }
}

mod read;

#[cfg(feature = "testing")]
mod fixture {
    //! The conformance suite's fixture role: seed rows as they are (the dump is the read port).

    use async_trait::async_trait;
    use sea_orm::TransactionTrait;
    use tenantry_directory::ProjectionTables;
    use tenantry_ports::directory::ProjectionStoreError;
    use tenantry_ports::directory::conformance::DirectoryFixtureStore;

    use super::{OnKey, SeaOrmDirectoryStore, storage};

    #[async_trait]
    impl DirectoryFixtureStore for SeaOrmDirectoryStore {
        async fn seed_rows(&self, rows: &ProjectionTables) -> Result<(), ProjectionStoreError> {
            let txn = self.conn.begin().await.map_err(storage("begin"))?;
            let accounts: Vec<_> = rows.accounts.values().cloned().collect();
            let workspaces: Vec<_> = rows.workspaces.values().cloned().collect();
            let memberships: Vec<_> = rows.memberships.values().cloned().collect();
            let executions: Vec<_> = rows.executions.values().cloned().collect();
            let receipts: Vec<_> = rows.receipts.values().cloned().collect();
            let upsert = OnKey::Overwrite;
            self.write_table(&txn, &accounts, upsert).await?;
            self.write_table(&txn, &workspaces, upsert).await?;
            self.write_table(&txn, &memberships, upsert).await?;
            self.write_table(&txn, &executions, upsert).await?;
            self.write_table(&txn, &receipts, upsert).await?;
            let states: Vec<_> = rows.states.values().cloned().collect();
            self.write_table(&txn, &states, OnKey::Fail).await?;
            txn.commit().await.map_err(storage("commit"))
        }
    }
}
