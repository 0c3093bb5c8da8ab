//! Migration: dead-lettered commands and operator actions.
//!
//! - `lifecycle_outbox.attempt_budget_base` (INTEGER, default 0): the `attempt_count` at which
//!   the command's current attempt budget began. An operator retry sets it to the current
//!   `attempt_count` instead of resetting the count, so a retried provision still shows it may
//!   have been dispatched while it gets a fresh budget of `max_attempts` claims.
//! - `ix_lifecycle_outbox_status_operation` on `(status, operation)`: the commands gauge counts
//!   per (status, operation) with one aggregate query over the live and failed statuses.
//! - `lifecycle_command_actions`: one row per operator action (retry / abandon): `id`,
//!   `command_id`, `action`, `actor`, `reason`, `previous_status`, `previous_error_code`,
//!   `attempt_count`, `created_at` (Unix ms); index on `(command_id, created_at)`.
//!
//! The statuses `failed` and `abandoned` need no schema change (status is text).

use sea_orm_migration::prelude::*;

/// Adds the attempt-budget column, the status index and the action log.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum LifecycleOutbox {
    Table,
    Status,
    Operation,
    AttemptBudgetBase,
}

#[derive(Iden)]
enum LifecycleCommandActions {
    Table,
    Id,
    CommandId,
    Action,
    Actor,
    Reason,
    PreviousStatus,
    PreviousErrorCode,
    AttemptCount,
    CreatedAt,
}

const STATUS_INDEX: &str = "ix_lifecycle_outbox_status_operation";
const ACTIONS_INDEX: &str = "ix_lifecycle_command_actions_command";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(LifecycleOutbox::Table)
                    .add_column(
                        ColumnDef::new(LifecycleOutbox::AttemptBudgetBase)
                            .integer()
                            .not_null()
                            .default(0),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(STATUS_INDEX)
                    .table(LifecycleOutbox::Table)
                    .col(LifecycleOutbox::Status)
                    .col(LifecycleOutbox::Operation)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(LifecycleCommandActions::Table)
                    .col(
                        ColumnDef::new(LifecycleCommandActions::Id)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(LifecycleCommandActions::CommandId)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleCommandActions::Action)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleCommandActions::Actor)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleCommandActions::Reason)
                            .text()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleCommandActions::PreviousStatus)
                            .string()
                            .not_null(),
                    )
                    .col(ColumnDef::new(LifecycleCommandActions::PreviousErrorCode).string())
                    .col(
                        ColumnDef::new(LifecycleCommandActions::AttemptCount)
                            .integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleCommandActions::CreatedAt)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(ACTIONS_INDEX)
                    .table(LifecycleCommandActions::Table)
                    .col(LifecycleCommandActions::CommandId)
                    .col(LifecycleCommandActions::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(
                Table::drop()
                    .table(LifecycleCommandActions::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name(STATUS_INDEX)
                    .table(LifecycleOutbox::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(LifecycleOutbox::Table)
                    .drop_column(LifecycleOutbox::AttemptBudgetBase)
                    .to_owned(),
            )
            .await
    }
}
