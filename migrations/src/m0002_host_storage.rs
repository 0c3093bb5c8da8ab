//! Migration: `host_storage`, the durable installation-bound key/value store behind fences and
//! connector state.
//!
//! One row per `(binding, key)`; `value` is JSON text (`null` for a tombstone).

use sea_orm_migration::prelude::*;

/// Creates `host_storage`.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum HostStorage {
    Table,
    Binding,
    Key,
    Value,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(HostStorage::Table)
                    .col(
                        ColumnDef::new(HostStorage::Binding)
                            .string_len(255)
                            .not_null(),
                    )
                    .col(ColumnDef::new(HostStorage::Key).string_len(255).not_null())
                    .col(ColumnDef::new(HostStorage::Value).text().not_null())
                    .primary_key(
                        Index::create()
                            .col(HostStorage::Binding)
                            .col(HostStorage::Key),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(HostStorage::Table).to_owned())
            .await
    }
}
