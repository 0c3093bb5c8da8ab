//! Migrations: the `tenantry_` prefix for databases created before it, one per mechanism
//! (`m0007_lifecycle_table_prefix`, `m0008_host_storage_table_prefix`,
//! `m0009_directory_table_prefix`).
//!
//! `up` renames each of the mechanism's tables that still has its unprefixed name (a database
//! migrated by Tenantry 0.1, whose history [`crate::adopt_legacy_history`] moved into the
//! mechanism's history table) to `tenantry_<name>`, with its indexes; rows are kept. On a fresh
//! install the tables were created prefixed and `up` changes nothing. `down` renames every
//! prefixed table back to its unprefixed name (failing, before any change, when a table of
//! that name exists), so the migrations before it keep working on the old names
//! (`naming::Naming::detect`). Each runs in one transaction on both backends.

use sea_orm_migration::prelude::*;

use crate::naming::{prefixed, rename_table_and_indexes};

/// Renames the lifecycle tables (`control_spaces`, `lifecycle_outbox`,
/// `lifecycle_command_actions`) to their prefixed names.
pub struct LifecyclePrefix;

/// Renames `host_storage` (fences and connector state) to `tenantry_host_storage`.
pub struct HostStoragePrefix;

/// Renames the directory tables (`accounts`, `workspaces`, `workspace_memberships`,
/// `workspace_execution_state`, `directory_projection_state`, `directory_projection_inbox`)
/// to their prefixed names.
pub struct DirectoryPrefix;

/// The unprefixed tables of the lifecycle saga.
pub(crate) const LIFECYCLE_TABLES: [&str; 3] = [
    "control_spaces",
    "lifecycle_outbox",
    "lifecycle_command_actions",
];
/// The unprefixed table of fences and connector state.
pub(crate) const FENCES_TABLES: [&str; 1] = ["host_storage"];
/// The unprefixed tables of the directory projection.
pub(crate) const DIRECTORY_TABLES: [&str; 6] = [
    "accounts",
    "workspaces",
    "workspace_memberships",
    "workspace_execution_state",
    "directory_projection_state",
    "directory_projection_inbox",
];

async fn prefix_up(manager: &SchemaManager<'_>, tables: &[&str]) -> Result<(), DbErr> {
    for &table in tables {
        let target = prefixed(table);
        if manager.has_table(&target).await? || !manager.has_table(table).await? {
            continue;
        }
        rename_table_and_indexes(manager, table, &target).await?;
    }
    Ok(())
}

async fn prefix_down(manager: &SchemaManager<'_>, tables: &[&str]) -> Result<(), DbErr> {
    for &table in tables {
        if manager.has_table(&prefixed(table)).await? && manager.has_table(table).await? {
            return Err(DbErr::Custom(format!(
                "cannot rename {} back to {table}: a table {table} already exists (not \
                 Tenantry's); rename or drop it first",
                prefixed(table)
            )));
        }
    }
    for &table in tables {
        let source = prefixed(table);
        if manager.has_table(&source).await? {
            rename_table_and_indexes(manager, &source, table).await?;
        }
    }
    Ok(())
}

macro_rules! prefix_migration {
    ($ty:ident, $name:literal, $tables:ident) => {
        impl MigrationName for $ty {
            fn name(&self) -> &str {
                $name
            }
        }

        #[async_trait::async_trait]
        impl MigrationTrait for $ty {
            fn use_transaction(&self) -> Option<bool> {
                crate::ATOMIC_STEPS
            }

            async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                prefix_up(manager, &$tables).await
            }

            async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
                prefix_down(manager, &$tables).await
            }
        }
    };
}

prefix_migration!(
    LifecyclePrefix,
    "m0007_lifecycle_table_prefix",
    LIFECYCLE_TABLES
);
prefix_migration!(
    HostStoragePrefix,
    "m0008_host_storage_table_prefix",
    FENCES_TABLES
);
prefix_migration!(
    DirectoryPrefix,
    "m0009_directory_table_prefix",
    DIRECTORY_TABLES
);
