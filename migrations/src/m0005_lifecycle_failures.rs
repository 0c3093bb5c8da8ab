//! Migration: dead-lettered commands and operator actions.
//!
//! Table and index names below are unprefixed; see [`crate::naming`] for the `tenantry_` prefix.
//!
//! - `lifecycle_outbox.attempt_budget_base` (INTEGER, default 0): the `attempt_count` at which
//!   the command's current attempt budget began. An operator retry sets it to the current
//!   `attempt_count` instead of resetting the count, so a retried provision still shows it may
//!   have been dispatched while it gets a fresh budget of `max_attempts` claims.
//! - `lifecycle_outbox.failed_at` (BIGINT, NULL unless the status is `failed`): set by the
//!   settle that dead-letters a command, cleared by an operator retry or abandon. The partial
//!   index `ix_lifecycle_outbox_failed` on `(operation) WHERE failed_at IS NOT NULL` lets the
//!   commands gauge count failed commands without scanning the history. No index may name
//!   `status` (or any other column a claim changes): m0004 keeps claims HOT updates on
//!   PostgreSQL, and any index over `status` — even a partial one — would end that. Pending and
//!   processing commands are counted through the claim index (`completed_at IS NULL`).
//! - `tenantry_lifecycle_command_actions`: one row per operator action (retry / abandon): `id`,
//!   `command_id`, `action`, `actor`, `reason`, `previous_status`, `previous_error_code`,
//!   `attempt_count`, `created_at` (Unix ms); index on `(command_id, created_at)`.
//!
//! The statuses `failed` and `abandoned` need no schema change (status is text).

use sea_orm_migration::prelude::*;

use crate::naming::{Naming, bigint, ensure_absent, int, string, text};

/// Adds the attempt-budget and failed-at columns, the failed index and the action log.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum LifecycleOutbox {
    Operation,
    AttemptBudgetBase,
    FailedAt,
}

#[derive(Iden)]
enum LifecycleCommandActions {
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

const OUTBOX: &str = "lifecycle_outbox";
const ACTIONS: &str = "lifecycle_command_actions";
const FAILED_INDEX: &str = "ix_lifecycle_outbox_failed";
const ACTIONS_INDEX: &str = "ix_lifecycle_command_actions_command";

atomic_migration! {
    |manager|

    up {
        let names = Naming::detect(manager, OUTBOX).await?;
        ensure_absent(
            manager,
            &names.table(ACTIONS),
            crate::LIFECYCLE_HISTORY_TABLE,
        )
        .await?;
        names
            .alter_table(manager, OUTBOX, |t| {
                t.add_column(int(LifecycleOutbox::AttemptBudgetBase).default(0))
            })
            .await?;
        names
            .alter_table(manager, OUTBOX, |t| {
                t.add_column(ColumnDef::new(LifecycleOutbox::FailedAt).big_integer())
            })
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(names.index(FAILED_INDEX))
                    .table(names.iden(OUTBOX))
                    .col(LifecycleOutbox::Operation)
                    .and_where(Expr::col(LifecycleOutbox::FailedAt).is_not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(ACTIONS))
                    .col(string(LifecycleCommandActions::Id).primary_key())
                    .col(string(LifecycleCommandActions::CommandId))
                    .col(string(LifecycleCommandActions::Action))
                    .col(string(LifecycleCommandActions::Actor))
                    .col(text(LifecycleCommandActions::Reason))
                    .col(string(LifecycleCommandActions::PreviousStatus))
                    .col(ColumnDef::new(LifecycleCommandActions::PreviousErrorCode).string())
                    .col(int(LifecycleCommandActions::AttemptCount))
                    .col(bigint(LifecycleCommandActions::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(names.index(ACTIONS_INDEX))
                    .table(names.iden(ACTIONS))
                    .col(LifecycleCommandActions::CommandId)
                    .col(LifecycleCommandActions::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    down {
        let names = Naming::detect(manager, OUTBOX).await?;
        manager
            .drop_table(Table::drop().table(names.iden(ACTIONS)).to_owned())
            .await?;
        names.drop_index(manager, OUTBOX, FAILED_INDEX).await?;
        for column in [
            LifecycleOutbox::FailedAt,
            LifecycleOutbox::AttemptBudgetBase,
        ] {
            names
                .alter_table(manager, OUTBOX, |t| t.drop_column(column))
                .await?;
        }
        Ok(())
    }
}
