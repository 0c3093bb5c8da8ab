//! Host-storage adapter: the `tenantry_host_storage` table (`binding`, `key`, `value` JSON text;
//! primary key `(binding, key)`) on SQLite and PostgreSQL.
//!
//! `set` is one `INSERT .. ON CONFLICT (binding, key) DO UPDATE` statement on both backends, so
//! concurrent writers of one key never fail on the primary key; the last write wins. Stored text
//! that is not JSON reads as [`HostStorageError::CorruptValue`].
//!
//! `compare_and_set` is one statement too: `INSERT .. ON CONFLICT DO NOTHING` when the key
//! must be absent, otherwise `UPDATE .. WHERE binding = ? AND key = ? AND value = ?` against
//! the expected value's JSON text (the text `set` stores for it); the affected row count says
//! whether it swapped. Atomic across every process on the database.

use crate::connect::Database;
use async_trait::async_trait;
use sea_orm::sea_query::Expr;
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};
use serde_json::Value;
use tenantry_fence::Binding;
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
    }

    #[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
    pub enum Relation {}

    impl ActiveModelBehavior for ActiveModel {}
}

/// [`HostStorage`] over a SeaORM connection (SQLite or PostgreSQL). Cheap to clone (shares
/// the pool).
#[derive(Debug, Clone)]
pub struct SeaOrmHostStorage {
    conn: DatabaseConnection,
}

impl SeaOrmHostStorage {
    /// An adapter over a migrated database (see [`connect`](crate::connect())), built like
    /// every store of this crate.
    pub fn new(db: &Database) -> Self {
        Self {
            conn: db.conn.clone(),
        }
    }
}

#[async_trait]
impl HostStorage for SeaOrmHostStorage {
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
        entity::Entity::insert(row(binding, key, value))
            .on_conflict(
                OnConflict::columns([entity::Column::Binding, entity::Column::Key])
                    .update_column(entity::Column::Value)
                    .to_owned(),
            )
            .exec_without_returning(&self.conn)
            .await
            .map_err(|e| unavailable("set", &e))?;
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
            None => entity::Entity::insert(row(binding, key, value))
                .on_conflict(
                    OnConflict::columns([entity::Column::Binding, entity::Column::Key])
                        .do_nothing()
                        .to_owned(),
                )
                .exec_without_returning(&self.conn)
                .await
                .map_err(|e| unavailable("compare_and_set", &e))?,
            Some(expected) => {
                entity::Entity::update_many()
                    .col_expr(entity::Column::Value, Expr::value(value.to_string()))
                    .filter(entity::Column::Binding.eq(binding.as_str()))
                    .filter(entity::Column::Key.eq(key))
                    .filter(entity::Column::Value.eq(expected.to_string()))
                    .exec(&self.conn)
                    .await
                    .map_err(|e| unavailable("compare_and_set", &e))?
                    .rows_affected
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
/// The row of `key` in `binding` holding `value` (JSON text).
fn row(binding: &Binding, key: &str, value: &Value) -> entity::ActiveModel {
    entity::ActiveModel {
        binding: Set(binding.as_str().to_owned()),
        key: Set(key.to_owned()),
        value: Set(value.to_string()),
    }
}

fn unavailable(operation: &'static str, error: &DbErr) -> HostStorageError {
    HostStorageError::storage(
        operation,
        crate::error::store_error(crate::Mechanism::Fences, error.clone()),
    )
}
