//! Host-storage adapter: the `tenantry_host_storage` table (`binding`, `key`, `value` JSON text,
//! `updated_at` Unix milliseconds; primary key `(binding, key)`) on SQLite and PostgreSQL.
//!
//! `set` is one `INSERT .. ON CONFLICT (binding, key) DO UPDATE` statement on both backends, so
//! concurrent writers of one key never fail on the primary key; the last write wins. Stored text
//! that is not JSON reads as [`HostStorageError::CorruptValue`].
//!
//! `compare_and_set` is one statement too: `INSERT .. ON CONFLICT DO NOTHING` when the key
//! must be absent, otherwise `UPDATE .. WHERE binding = ? AND key = ? AND value = ?` against
//! the expected value's JSON text (the text `set` stores for it); the affected row count says
//! whether it swapped. When that text does not match, the stored text is read and, if it is
//! the expected value spelled otherwise (keys in another order: a record written by another
//! program or by hand), the swap is made against that exact text. Atomic across every process
//! on the database.
//!
//! Every write stamps `updated_at` with the store's clock (the database's, or an override for
//! tests), inside the same statement: retention ages cleared fence records by it
//! ([`crate::retention`], migration `m0012_host_storage_retention`).

use std::sync::Arc;

use crate::connect::{Backend, Database};
use async_trait::async_trait;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DbBackend, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect, Statement,
};
use serde_json::Value;
use tenantry_fence::Binding;
use tenantry_ports::clock::Clock;
use tenantry_ports::host_storage::{
    HostStorage, HostStorageBindings, HostStorageError, PrefixedRecord, validate_key,
};

mod entity {
    use sea_orm::entity::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
    #[sea_orm(table_name = "tenantry_host_storage")]
    pub struct Model {
        #[sea_orm(primary_key, auto_increment = false)]
        pub binding: String,
        #[sea_orm(primary_key, auto_increment = false)]
        pub key: String,
        #[sea_orm(column_type = "Text")]
        pub value: String,
        pub updated_at: Option<i64>,
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// [`HostStorage`] over a SeaORM connection (SQLite or PostgreSQL). Cheap to clone (shares
/// the pool).
#[derive(Clone)]
pub struct SeaOrmHostStorage {
    conn: DatabaseConnection,
    backend: Backend,
    clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for SeaOrmHostStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeaOrmHostStorage")
            .field("backend", &self.backend)
            .field(
                "clock",
                &self.clock.as_ref().map_or("database", |_| "override"),
            )
            .finish_non_exhaustive()
    }
}

/// The table, as the raw write statements name it.
const TABLE: &str = "tenantry_host_storage";

impl SeaOrmHostStorage {
    /// An adapter over a migrated database (see [`connect`](crate::connect())), built like
    /// every store of this crate; writes are stamped with the database's clock.
    pub fn new(db: &Database) -> Self {
        Self {
            conn: db.conn.clone(),
            backend: db.backend,
            clock: None,
        }
    }

    /// The same adapter stamping writes (`updated_at`) with `clock` instead of the database's
    /// clock: for tests and simulations on virtual time only.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// SQL of "now" in Unix milliseconds: the database clock, or the override's reading.
    fn now_sql(&self) -> String {
        match (&self.clock, self.backend) {
            (Some(clock), _) => clock.now().timestamp_millis().to_string(),
            (None, Backend::Postgres) => {
                "(extract(epoch from statement_timestamp()) * 1000)::bigint".to_owned()
            }
            (None, Backend::Sqlite) => {
                "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)".to_owned()
            }
        }
    }

    /// Runs the write statement `sql` (placeholders `{1}`..`{4}`) with `values`; the rows it
    /// changed.
    async fn write(
        &self,
        operation: &'static str,
        sql: &str,
        values: Vec<sea_orm::Value>,
    ) -> Result<u64, HostStorageError> {
        let (backend, mark) = match self.backend {
            Backend::Postgres => (DbBackend::Postgres, '$'),
            Backend::Sqlite => (DbBackend::Sqlite, '?'),
        };
        let mut sql = sql.replace("{now}", &self.now_sql());
        for n in 1..=values.len() {
            sql = sql.replace(&format!("{{{n}}}"), &format!("{mark}{n}"));
        }
        self.conn
            .execute_raw(Statement::from_sql_and_values(backend, sql, values))
            .await
            .map(|result| result.rows_affected())
            .map_err(|e| unavailable(operation, &e))
    }
}

impl SeaOrmHostStorage {
    /// `UPDATE .. SET value = value WHERE .. AND value = expected_text`; rows affected.
    async fn swap_text(
        &self,
        binding: &Binding,
        key: &str,
        expected_text: &str,
        value: &Value,
    ) -> Result<u64, HostStorageError> {
        let mut values = row(binding, key, value);
        values.push(expected_text.to_owned().into());
        self.write(
            "compare_and_set",
            &format!(
                "UPDATE {TABLE} SET value = {{3}}, updated_at = {{now}} \
                 WHERE binding = {{1}} AND key = {{2}} AND value = {{4}}"
            ),
            values,
        )
        .await
    }

    /// The record's stored text, as written.
    async fn stored_text(
        &self,
        binding: &Binding,
        key: &str,
    ) -> Result<Option<String>, HostStorageError> {
        entity::Entity::find_by_id((binding.as_str().to_owned(), key.to_owned()))
            .one(&self.conn)
            .await
            .map(|row| row.map(|row| row.value))
            .map_err(|e| unavailable("compare_and_set", &e))
    }
}

#[async_trait]
impl HostStorage for SeaOrmHostStorage {
    /// The database's clock (or the override's reading), the one `updated_at` is stamped on.
    async fn now_ms(&self) -> Result<i64, HostStorageError> {
        let backend = match self.backend {
            Backend::Postgres => DbBackend::Postgres,
            Backend::Sqlite => DbBackend::Sqlite,
        };
        let sql = format!("SELECT {} AS n", self.now_sql());
        let row = self
            .conn
            .query_one_raw(Statement::from_string(backend, sql))
            .await
            .map_err(|e| unavailable("now", &e))?
            .ok_or_else(|| {
                HostStorageError::unavailable("now", "the clock query returned no row")
            })?;
        row.try_get::<i64>("", "n")
            .map_err(|e| unavailable("now", &e))
    }

    async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError> {
        let mut keys: Vec<String> = entity::Entity::find()
            .select_only()
            .column(entity::Column::Key)
            .filter(entity::Column::Binding.eq(binding.as_str()))
            .into_tuple()
            .all(&self.conn)
            .await
            .map_err(|e| unavailable("keys", &e))?;
        // Byte order, independent of the database collation.
        keys.sort_unstable();
        Ok(keys)
    }

    async fn get(&self, binding: &Binding, key: &str) -> Result<Option<Value>, HostStorageError> {
        validate_key(key)?;
        let row = entity::Entity::find_by_id((binding.as_str().to_owned(), key.to_owned()))
            .one(&self.conn)
            .await
            .map_err(|e| unavailable("get", &e))?;
        row.map(|row| {
            serde_json::from_str(&row.value)
                .map_err(|e| HostStorageError::corrupt_value(key, e.to_string()).with_source(e))
        })
        .transpose()
    }

    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> Result<(), HostStorageError> {
        validate_key(key)?;
        self.write(
            "set",
            &format!(
                "INSERT INTO {TABLE} (binding, key, value, updated_at) \
                 VALUES ({{1}}, {{2}}, {{3}}, {{now}}) ON CONFLICT (binding, key) \
                 DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at"
            ),
            row(binding, key, value),
        )
        .await?;
        Ok(())
    }

    async fn compare_and_set(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        value: &Value,
    ) -> Result<bool, HostStorageError> {
        validate_key(key)?;
        let affected = match expected {
            None => {
                self.write(
                    "compare_and_set",
                    &format!(
                        "INSERT INTO {TABLE} (binding, key, value, updated_at) \
                         VALUES ({{1}}, {{2}}, {{3}}, {{now}}) \
                         ON CONFLICT (binding, key) DO NOTHING"
                    ),
                    row(binding, key, value),
                )
                .await?
            }
            Some(expected) => {
                let swapped = self
                    .swap_text(binding, key, &expected.to_string(), value)
                    .await?;
                if swapped == 0 {
                    // The stored text may hold the expected value in another spelling (keys in
                    // another order, other whitespace: a record written by another program or
                    // by hand). Compare as JSON values and, when equal, swap against the exact
                    // text read: still atomic, as that UPDATE matches only that text.
                    match self.stored_text(binding, key).await? {
                        Some(text)
                            if serde_json::from_str::<Value>(&text).ok().as_ref()
                                == Some(expected) =>
                        {
                            self.swap_text(binding, key, &text, value).await?
                        }
                        _ => 0,
                    }
                } else {
                    swapped
                }
            }
        };
        Ok(affected == 1)
    }
}

#[async_trait]
impl HostStorageBindings for SeaOrmHostStorage {
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Vec<Binding>, HostStorageError> {
        // LIKE narrows the scan; its wildcards and (on SQLite) case folding can only widen
        // the match, so the exact prefix test below decides.
        let rows: Vec<(String, String)> = entity::Entity::find()
            .select_only()
            .column(entity::Column::Binding)
            .column(entity::Column::Key)
            .filter(entity::Column::Key.starts_with(key_prefix))
            .into_tuple()
            .all(&self.conn)
            .await
            .map_err(|e| unavailable("keys", &e))?;
        let mut bindings = std::collections::BTreeSet::new();
        for (binding, key) in rows {
            if key.starts_with(key_prefix) {
                let parsed = Binding::parse(binding.clone()).map_err(|e| {
                    HostStorageError::corrupt_value(format!("binding {binding:?}"), e.to_string())
                        .with_source(e)
                })?;
                bindings.insert(parsed);
            }
        }
        Ok(bindings.into_iter().collect())
    }

    async fn records_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Option<Vec<PrefixedRecord>>, HostStorageError> {
        // One statement across bindings (the primary key orders it); tombstones are the
        // stored text `null`. LIKE may widen the match, the exact prefix test decides.
        let rows = entity::Entity::find()
            .filter(entity::Column::Key.starts_with(key_prefix))
            .filter(entity::Column::Value.ne("null"))
            .order_by_asc(entity::Column::Binding)
            .order_by_asc(entity::Column::Key)
            .all(&self.conn)
            .await
            .map_err(|e| unavailable("keys", &e))?;
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            if !row.key.starts_with(key_prefix) {
                continue;
            }
            let binding = Binding::parse(row.binding.clone()).map_err(|e| {
                HostStorageError::corrupt_value(format!("binding {:?}", row.binding), e.to_string())
                    .with_source(e)
            })?;
            records.push(PrefixedRecord {
                binding,
                value: serde_json::from_str(&row.value).ok(),
                key: row.key,
            });
        }
        Ok(Some(records))
    }
}

/// Maps a database error of `operation` to the port's error ([`crate::error::store_error`]),
/// keeping it as the source.
/// The parameters `binding`, `key` and `value` (JSON text) of a write, in that order.
fn row(binding: &Binding, key: &str, value: &Value) -> Vec<sea_orm::Value> {
    vec![
        binding.as_str().into(),
        key.into(),
        value.to_string().into(),
    ]
}

fn unavailable(operation: &'static str, error: &DbErr) -> HostStorageError {
    HostStorageError::storage(
        operation,
        crate::error::store_error(crate::Mechanism::Fences, error.clone()),
    )
}
