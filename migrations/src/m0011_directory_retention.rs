//! Migration: the index retention reads on the directory inbox.
//!
//! `ix_tenantry_directory_projection_inbox_received` on
//! `tenantry_directory_projection_inbox (received_at)`: the receipts in the order they arrived,
//! so a prune batch (`ORDER BY received_at LIMIT n`) and the oldest-record gauge read a range,
//! not the whole inbox. Runs after the table-prefix migration.

use sea_orm_migration::prelude::*;

/// Creates the retention index of the directory inbox.
#[derive(DeriveMigrationName)]
pub struct Migration;

const INBOX: &str = "tenantry_directory_projection_inbox";
const RECEIVED_INDEX: &str = "ix_tenantry_directory_projection_inbox_received";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(RECEIVED_INDEX)
                    .table(Alias::new(INBOX))
                    .col(Alias::new("received_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(RECEIVED_INDEX)
                    .table(Alias::new(INBOX))
                    .to_owned(),
            )
            .await
    }
}
