//! Migration: `tenantry_host_storage.updated_at` and the index retention reads on it.
//!
//! `updated_at` is when the record was last written (Unix milliseconds, store clock): every
//! `set` and every successful `compare_and_set` stamps it. A cleared fence record (a JSON null
//! tombstone at a fence key) is thus timed by its clear, and retention removes it once it is
//! the window old (`tenantry_fence::retention`, docs/operations.md "Retention"). The column is
//! nullable: a row written by a process older than this migration keeps the stamp of its
//! previous write, or none.
//!
//! `ix_tenantry_host_storage_cleared` on `(updated_at) WHERE value = 'null'`: the tombstones in
//! the order they were written, so a prune batch (`ORDER BY updated_at LIMIT n`), the dry-run
//! count and the oldest-record gauge read a range of tombstones, never the live records.
//!
//! Rows present before the migration are stamped with the migration's time (the database
//! clock): their real age is unknown, so a tombstone left from before goes one window after
//! the upgrade, never earlier. Runs after the table-prefix migration.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

use crate::naming::{Naming, bigint_null};

/// Adds `updated_at` (`BIGINT NULL`), stamps the existing rows, and creates the tombstone
/// index.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The table and the index, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const HOST_STORAGE: &str = "host_storage";
const CLEARED_INDEX: &str = "ix_host_storage_cleared";

#[derive(Iden)]
enum HostStorage {
    UpdatedAt,
}

atomic_migration! {
    |manager|

    up {
        let naming = Naming::Prefixed;
        naming
            .alter_table(manager, HOST_STORAGE, |t| {
                t.add_column(bigint_null(HostStorage::UpdatedAt))
            })
            .await?;
        let now_ms = match manager.get_database_backend() {
            DbBackend::Postgres => "(extract(epoch from statement_timestamp()) * 1000)::bigint",
            _ => "CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)",
        };
        manager
            .get_connection()
            .execute_unprepared(&format!(
                "UPDATE {} SET updated_at = {now_ms}",
                naming.table(HOST_STORAGE)
            ))
            .await?;
        naming
            .create_index(
                manager,
                HOST_STORAGE,
                CLEARED_INDEX,
                "updated_at",
                |index| index.and_where(Expr::col(Alias::new("value")).eq("null")),
            )
            .await
    }

    down {
        let naming = Naming::Prefixed;
        naming
            .drop_index(manager, HOST_STORAGE, CLEARED_INDEX)
            .await?;
        naming
            .alter_table(manager, HOST_STORAGE, |t| {
                t.drop_column(HostStorage::UpdatedAt)
            })
            .await
    }
}
