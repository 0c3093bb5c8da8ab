//! Migration: tenant-fair claims, `tenantry_lifecycle_outbox.turn_at` and its indexes.
//!
//! - `turn_at` (BIGINT NOT NULL, Unix ms): the command's turn. Claims take due commands in
//!   turn order instead of due order, so one tenant's backlog no longer delays every other
//!   tenant's commands (docs/protocol.md, "Fair claims across tenants"; the rule is
//!   `tenantry_lifecycle::turn`). Live commands that exist when the migration runs take their
//!   enqueue time (`created_at`) as their turn, as intake gives it on a queue without backlog,
//!   so they come before commands enqueued later (one waiting out a backoff keeps an early
//!   turn, as every retry does); finished ones keep 0 (no claim reads them; an operator retry
//!   of a dead-lettered one is claimed first once due).
//! - `ix_tenantry_lifecycle_outbox_turn` on `(turn_at, next_attempt_at, created_at, id)` where
//!   `completed_at IS NULL`: the claim's order. It replaces m0004's
//!   `ix_tenantry_lifecycle_outbox_claim` (`next_attempt_at, created_at, id`). A claim still
//!   changes no indexed column, so it stays a HOT update on PostgreSQL; a retry's settle
//!   changes `next_attempt_at`, as before.
//! - `ix_tenantry_lifecycle_outbox_tenant_turn` on `(tenant_id, turn_at)` where
//!   `completed_at IS NULL`: intake's read of a tenant's latest live turn.
//!
//! `down` restores m0004's index and drops the column (with the turns). Runs after the
//! table-prefix migration.

use sea_orm_migration::prelude::*;

use crate::naming::Naming;

/// Adds `turn_at` to the outbox and switches the claim index to turn order.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The outbox and its indexes, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const OUTBOX: &str = "lifecycle_outbox";
const TURN_INDEX: &str = "ix_lifecycle_outbox_turn";
const TENANT_TURN_INDEX: &str = "ix_lifecycle_outbox_tenant_turn";
const CLAIM_INDEX: &str = "ix_lifecycle_outbox_claim";

#[derive(Iden)]
enum LifecycleOutbox {
    Id,
    TenantId,
    NextAttemptAt,
    CreatedAt,
    CompletedAt,
    TurnAt,
}

atomic_migration! {
    |manager|

    up {
        let naming = Naming::Prefixed;
        naming
            .alter_table(manager, OUTBOX, |t| {
                t.add_column(
                    ColumnDef::new(LifecycleOutbox::TurnAt)
                        .big_integer()
                        .not_null()
                        .default(0),
                )
            })
            .await?;
        manager
            .exec_stmt(
                Query::update()
                    .table(naming.iden(OUTBOX))
                    .value(LifecycleOutbox::TurnAt, Expr::col(LifecycleOutbox::CreatedAt))
                    .and_where(Expr::col(LifecycleOutbox::CompletedAt).is_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(naming.index(TURN_INDEX))
                    .table(naming.iden(OUTBOX))
                    .col(LifecycleOutbox::TurnAt)
                    .col(LifecycleOutbox::NextAttemptAt)
                    .col(LifecycleOutbox::CreatedAt)
                    .col(LifecycleOutbox::Id)
                    .and_where(Expr::col(LifecycleOutbox::CompletedAt).is_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(naming.index(TENANT_TURN_INDEX))
                    .table(naming.iden(OUTBOX))
                    .col(LifecycleOutbox::TenantId)
                    .col(LifecycleOutbox::TurnAt)
                    .and_where(Expr::col(LifecycleOutbox::CompletedAt).is_null())
                    .to_owned(),
            )
            .await?;
        naming.drop_index(manager, OUTBOX, CLAIM_INDEX).await
    }

    down {
        let naming = Naming::Prefixed;
        manager
            .create_index(
                Index::create()
                    .name(naming.index(CLAIM_INDEX))
                    .table(naming.iden(OUTBOX))
                    .col(LifecycleOutbox::NextAttemptAt)
                    .col(LifecycleOutbox::CreatedAt)
                    .col(LifecycleOutbox::Id)
                    .and_where(Expr::col(LifecycleOutbox::CompletedAt).is_null())
                    .to_owned(),
            )
            .await?;
        naming.drop_index(manager, OUTBOX, TENANT_TURN_INDEX).await?;
        naming.drop_index(manager, OUTBOX, TURN_INDEX).await?;
        naming
            .alter_table(manager, OUTBOX, |t| t.drop_column(LifecycleOutbox::TurnAt))
            .await
    }
}
