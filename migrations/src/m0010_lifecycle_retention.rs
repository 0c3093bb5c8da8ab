//! Migration: the indexes retention reads on the lifecycle tables.
//!
//! - `ix_tenantry_lifecycle_outbox_finished` on `tenantry_lifecycle_outbox (completed_at)`
//!   where `completed_at IS NOT NULL`: the finished commands in the order they finished, so a
//!   prune batch (`ORDER BY completed_at LIMIT n`), the dry-run count and the oldest-record
//!   gauge read a range of finished rows, never the live ones. A claim or a lease renewal
//!   changes no column of it (only the final settle sets `completed_at`), so claims stay HOT
//!   updates on PostgreSQL.
//! - `ix_tenantry_lifecycle_command_actions_created` on
//!   `tenantry_lifecycle_command_actions (created_at)`: the action log in time order.
//!
//! Runs after the table-prefix migration, so the tables always carry the prefix here.

use sea_orm_migration::prelude::*;

/// Creates the two retention indexes of the lifecycle tables.
#[derive(DeriveMigrationName)]
pub struct Migration;

const OUTBOX: &str = "tenantry_lifecycle_outbox";
const ACTIONS: &str = "tenantry_lifecycle_command_actions";
const FINISHED_INDEX: &str = "ix_tenantry_lifecycle_outbox_finished";
const ACTIONS_INDEX: &str = "ix_tenantry_lifecycle_command_actions_created";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_index(
                Index::create()
                    .name(FINISHED_INDEX)
                    .table(Alias::new(OUTBOX))
                    .col(Alias::new("completed_at"))
                    .and_where(Expr::col(Alias::new("completed_at")).is_not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(ACTIONS_INDEX)
                    .table(Alias::new(ACTIONS))
                    .col(Alias::new("created_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name(ACTIONS_INDEX)
                    .table(Alias::new(ACTIONS))
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name(FINISHED_INDEX)
                    .table(Alias::new(OUTBOX))
                    .to_owned(),
            )
            .await
    }
}
