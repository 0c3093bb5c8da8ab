//! Table and index names, the guard against foreign tables, renaming a table with its
//! indexes (the upgrade from the unprefixed names of Tenantry 0.1), and the column shapes the
//! migrations repeat (`bigint`, `varchar`, ...: one column definition each, so a table reads
//! one line a column).
//!
//! Every table Tenantry creates is named `tenantry_<name>`; an index named `ix_<table>_…` or
//! `ux_<table>_…` becomes `ix_tenantry_<table>_…`. A database migrated before the prefix holds
//! the same tables unprefixed until the mechanism's prefix migration renames them; the
//! migrations in between work on whichever name exists (`Naming::detect`).

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend, Statement};

/// The prefix of every table (and global index name) Tenantry creates.
pub const TABLE_PREFIX: &str = "tenantry_";

/// Which names a mechanism's tables have in a given database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Naming {
    /// `tenantry_<name>`: fresh installs and upgraded databases.
    Prefixed,
    /// `<name>`: a database migrated before the prefix, not yet renamed.
    Legacy,
}

impl Naming {
    /// The naming of the mechanism whose table `probe` (an unprefixed name) is in the database:
    /// prefixed when `tenantry_<probe>` exists, legacy when only `<probe>` exists, prefixed when
    /// neither does. Only called by migrations that run after the mechanism's first one, so an
    /// existing unprefixed `probe` without the prefixed one is Tenantry's own.
    pub(crate) async fn detect(manager: &SchemaManager<'_>, probe: &str) -> Result<Self, DbErr> {
        if manager.has_table(prefixed(probe)).await? {
            Ok(Self::Prefixed)
        } else if manager.has_table(probe).await? {
            Ok(Self::Legacy)
        } else {
            Ok(Self::Prefixed)
        }
    }

    /// The name of table `name` (given unprefixed) under this naming.
    pub(crate) fn table(self, name: &str) -> String {
        match self {
            Self::Prefixed => prefixed(name),
            Self::Legacy => name.to_owned(),
        }
    }

    /// The table `name` as an identifier for the schema builder.
    pub(crate) fn iden(self, name: &str) -> Alias {
        Alias::new(self.table(name))
    }

    /// The name of index `legacy` (`ix_<table>_…` / `ux_<table>_…`, as created before the
    /// prefix) under this naming.
    pub(crate) fn index(self, legacy: &str) -> String {
        match self {
            Self::Legacy => legacy.to_owned(),
            Self::Prefixed => match legacy.split_at_checked(3) {
                Some((kind, rest)) => format!("{kind}{TABLE_PREFIX}{rest}"),
                None => format!("{TABLE_PREFIX}{legacy}"),
            },
        }
    }

    /// Alters table `table` (given unprefixed) under this naming with `change` (add or drop a
    /// column ...).
    ///
    /// # Errors
    /// The database's error when the `ALTER TABLE` fails.
    pub(crate) async fn alter_table(
        self,
        manager: &SchemaManager<'_>,
        table: &str,
        change: impl FnOnce(&mut TableAlterStatement) -> &mut TableAlterStatement,
    ) -> Result<(), DbErr> {
        let mut statement = Table::alter();
        change(statement.table(self.iden(table)));
        manager.alter_table(statement).await
    }

    /// Creates index `legacy` (its name before the prefix, see [`index`](Self::index)) on
    /// `column` of table `table` (given unprefixed) under this naming; `shape` adds the rest
    /// (a partial index's `WHERE`, ...).
    ///
    /// # Errors
    /// The database's error when the `CREATE INDEX` fails.
    pub(crate) async fn create_index(
        self,
        manager: &SchemaManager<'_>,
        table: &str,
        legacy: &str,
        column: &str,
        shape: impl FnOnce(&mut IndexCreateStatement) -> &mut IndexCreateStatement,
    ) -> Result<(), DbErr> {
        let mut statement = Index::create();
        statement
            .name(self.index(legacy))
            .table(self.iden(table))
            .col(Alias::new(column));
        shape(&mut statement);
        manager.create_index(statement).await
    }

    /// Drops index `legacy` (its name before the prefix, see [`index`](Self::index)) of table
    /// `table` (given unprefixed) under this naming.
    ///
    /// # Errors
    /// The database's error when the `DROP INDEX` fails.
    pub(crate) async fn drop_index(
        self,
        manager: &SchemaManager<'_>,
        table: &str,
        legacy: &str,
    ) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(self.index(legacy))
                    .table(self.iden(table))
                    .to_owned(),
            )
            .await
    }
}

/// `tenantry_<name>`.
pub fn prefixed(name: &str) -> String {
    format!("{TABLE_PREFIX}{name}")
}

/// The message of the error returned when a table Tenantry is about to create already exists.
pub(crate) fn foreign_table_message(table: &str, history_table: &str) -> String {
    format!(
        "table {table} already exists and is not Tenantry's: Tenantry's migration history \
         ({history_table}) does not record creating it. Rename or drop that table and migrate \
         again; or, if your own migrator already applies Tenantry's migrations (appended to its \
         list), do not run Tenantry's migrator as well: check the schema against your history \
         table instead"
    )
}

/// Fails with [`foreign_table_message`] when `table` exists; called right before creating it.
pub(crate) async fn ensure_absent(
    manager: &SchemaManager<'_>,
    table: &str,
    history_table: &str,
) -> Result<(), DbErr> {
    if manager.has_table(table).await? {
        return Err(DbErr::Custom(foreign_table_message(table, history_table)));
    }
    Ok(())
}

/// Fails when the database still records `legacy_migration` in `seaql_migrations` beside the
/// unprefixed table `probe`: its history has not been adopted yet, and creating the prefixed
/// tables now would leave the data behind in the old ones.
pub(crate) async fn ensure_no_unadopted_history(
    manager: &SchemaManager<'_>,
    probe: &str,
    legacy_migration: &str,
) -> Result<(), DbErr> {
    if !manager.has_table(probe).await? || !manager.has_table(crate::LEGACY_HISTORY_TABLE).await? {
        return Ok(());
    }
    let conn = manager.get_connection();
    let backend = conn.get_database_backend();
    let sql = format!(
        "SELECT version FROM {} WHERE version = {}",
        crate::LEGACY_HISTORY_TABLE,
        placeholder(backend, 1)
    );
    let recorded = conn
        .query_one_raw(Statement::from_sql_and_values(
            backend,
            sql,
            [legacy_migration.into()],
        ))
        .await?
        .is_some();
    if recorded {
        return Err(DbErr::Custom(format!(
            "this database holds Tenantry's tables under their old unprefixed names ({probe}, \
             recorded as {legacy_migration} in {}): run tenantry_migrations::migrate (or \
             tenantry_migrations::adopt_legacy_history before your migrator), which moves that \
             history to Tenantry's own table so the prefix migration renames the tables keeping \
             their rows",
            crate::LEGACY_HISTORY_TABLE
        )));
    }
    Ok(())
}

/// Whether table `name` exists (in the current schema on PostgreSQL), read-only.
///
/// # Errors
/// The database error of the catalog query.
pub async fn table_exists<C: ConnectionTrait>(db: &C, name: &str) -> Result<bool, DbErr> {
    let backend = db.get_database_backend();
    let sql = match backend {
        DbBackend::Postgres => {
            "SELECT table_name FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = $1"
        }
        _ => "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
    };
    Ok(db
        .query_one_raw(Statement::from_sql_and_values(backend, sql, [name.into()]))
        .await?
        .is_some())
}

/// The `n`-th (1-based) bind placeholder of `backend`.
pub(crate) fn placeholder(backend: DbBackend, n: usize) -> String {
    match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => "?".to_owned(),
    }
}

/// Renames table `from` to `to` and every index on it whose name contains `from` (the first
/// occurrence of `from` in the index name is replaced by `to`), so index names follow the table.
/// On PostgreSQL this includes the primary-key and unique-constraint indexes (`<table>_pkey`,
/// `<table>_<column>_key`); SQLite's automatic indexes have no global name and follow the table.
pub(crate) async fn rename_table_and_indexes(
    manager: &SchemaManager<'_>,
    from: &str,
    to: &str,
) -> Result<(), DbErr> {
    let conn = manager.get_connection();
    let backend = conn.get_database_backend();
    manager
        .rename_table(
            Table::rename()
                .table(Alias::new(from), Alias::new(to))
                .to_owned(),
        )
        .await?;
    match backend {
        DbBackend::Postgres => {
            let rows = conn
                .query_all_raw(Statement::from_sql_and_values(
                    backend,
                    "SELECT indexname FROM pg_indexes \
                     WHERE schemaname = current_schema() AND tablename = $1",
                    [to.into()],
                ))
                .await?;
            for row in rows {
                let index: String = row.try_get("", "indexname")?;
                if index.contains(from) {
                    let renamed = index.replacen(from, to, 1);
                    conn.execute_unprepared(&format!(
                        "ALTER INDEX \"{index}\" RENAME TO \"{renamed}\""
                    ))
                    .await?;
                }
            }
        }
        _ => {
            // SQLite cannot rename an index: recreate it from its stored definition (which the
            // table rename already pointed at the new table) under the new name.
            let rows = conn
                .query_all_raw(Statement::from_sql_and_values(
                    backend,
                    "SELECT name, sql FROM sqlite_master \
                     WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
                    [to.into()],
                ))
                .await?;
            for row in rows {
                let index: String = row.try_get("", "name")?;
                let sql: String = row.try_get("", "sql")?;
                if index.contains(from) {
                    let renamed = index.replacen(from, to, 1);
                    conn.execute_unprepared(&format!("DROP INDEX \"{index}\""))
                        .await?;
                    conn.execute_unprepared(&sql.replacen(&index, &renamed, 1))
                        .await?;
                }
            }
        }
    }
    Ok(())
}

/// `BIGINT NOT NULL` column `column` (Unix milliseconds, counters, revisions).
pub(crate) fn bigint(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).big_integer().not_null().to_owned()
}

/// Nullable `BIGINT` column `column`.
pub(crate) fn bigint_null(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).big_integer().null().to_owned()
}

/// `INTEGER NOT NULL` column `column`.
pub(crate) fn int(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).integer().not_null().to_owned()
}

/// `VARCHAR NOT NULL` column `column` (the backend's default length).
pub(crate) fn string(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).string().not_null().to_owned()
}

/// Nullable `VARCHAR` column `column` (the backend's default length).
pub(crate) fn string_null(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).string().null().to_owned()
}

/// `VARCHAR(len) NOT NULL` column `column`.
pub(crate) fn varchar(column: impl IntoIden, len: u32) -> ColumnDef {
    ColumnDef::new(column).string_len(len).not_null().to_owned()
}

/// Nullable `VARCHAR(len)` column `column`.
pub(crate) fn varchar_null(column: impl IntoIden, len: u32) -> ColumnDef {
    ColumnDef::new(column).string_len(len).null().to_owned()
}

/// `TEXT NOT NULL` column `column`.
pub(crate) fn text(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).text().not_null().to_owned()
}

/// `BOOLEAN NOT NULL` column `column`.
pub(crate) fn boolean(column: impl IntoIden) -> ColumnDef {
    ColumnDef::new(column).boolean().not_null().to_owned()
}

#[cfg(test)]
mod tests {
    use super::Naming;

    #[test]
    fn index_names_follow_the_table_prefix() {
        assert_eq!(
            Naming::Prefixed.index("ix_lifecycle_outbox_claim"),
            "ix_tenantry_lifecycle_outbox_claim"
        );
        assert_eq!(
            Naming::Legacy.index("ix_lifecycle_outbox_claim"),
            "ix_lifecycle_outbox_claim"
        );
        assert_eq!(Naming::Prefixed.table("accounts"), "tenantry_accounts");
    }
}
