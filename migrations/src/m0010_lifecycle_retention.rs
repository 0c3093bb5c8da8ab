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

use crate::naming::Naming;

/// Creates the two retention indexes of the lifecycle tables.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The tables and the indexes, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const OUTBOX: &str = "lifecycle_outbox";
const ACTIONS: &str = "lifecycle_command_actions";
const FINISHED_INDEX: &str = "ix_lifecycle_outbox_finished";
const ACTIONS_INDEX: &str = "ix_lifecycle_command_actions_created";

atomic_migration! {
    |manager|

    up {
        let naming = Naming::Prefixed;
        naming
            .create_index(manager, OUTBOX, FINISHED_INDEX, "completed_at", |index| {
                index.and_where(Expr::col(Alias::new("completed_at")).is_not_null())
            })
            .await?;
        naming
            .create_index(manager, ACTIONS, ACTIONS_INDEX, "created_at", |index| index)
            .await
    }

    down {
        let naming = Naming::Prefixed;
        naming.drop_index(manager, ACTIONS, ACTIONS_INDEX).await?;
        naming.drop_index(manager, OUTBOX, FINISHED_INDEX).await
    }
}
