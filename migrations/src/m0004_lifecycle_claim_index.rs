//! Migration: the claim index of `tenantry_lifecycle_outbox` (`lifecycle_outbox` before the
//! prefix migration).
//!
//! The claim reads live commands in due order (`next_attempt_at, created_at, id`) and stops
//! after `limit` rows. Without an index in that order every claim scanned and sorted the whole
//! outbox, finished commands included (measured by `cargo xtask bench`: 280 ms per claim of
//! 32 at 20,000 commands). This partial index holds only unfinished commands
//! (`completed_at IS NULL`: pending or processing; ack and supersede set `completed_at`) in
//! due order, so a claim reads about `limit` entries (plus the commands in flight) however
//! long the history is. It replaces `ix_lifecycle_outbox_due` (status, next_attempt_at).
//!
//! The predicate deliberately avoids `status`: a claim changes only columns no index covers
//! (status, lease, epoch, attempt count), so on PostgreSQL it can be a HOT update (no index
//! entry written) when the heap page has room. The table's fill factor is lowered to 70 so
//! pages keep that room; only the final ack (which sets `completed_at`) touches the indexes.

use sea_orm_migration::prelude::*;

use crate::naming::Naming;

/// Creates `ix_tenantry_lifecycle_outbox_claim` and drops `ix_tenantry_lifecycle_outbox_due`.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum LifecycleOutbox {
    Id,
    Status,
    NextAttemptAt,
    CreatedAt,
    CompletedAt,
}

const OUTBOX: &str = "lifecycle_outbox";
const CLAIM_INDEX: &str = "ix_lifecycle_outbox_claim";
const DUE_INDEX: &str = "ix_lifecycle_outbox_due";

atomic_migration! {
    |manager|

    up {
        let names = Naming::detect(manager, OUTBOX).await?;
        manager
            .create_index(
                Index::create()
                    .name(names.index(CLAIM_INDEX))
                    .table(names.iden(OUTBOX))
                    .col(LifecycleOutbox::NextAttemptAt)
                    .col(LifecycleOutbox::CreatedAt)
                    .col(LifecycleOutbox::Id)
                    .and_where(Expr::col(LifecycleOutbox::CompletedAt).is_null())
                    .to_owned(),
            )
            .await?;
        names.drop_index(manager, OUTBOX, DUE_INDEX).await?;
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            manager
                .get_connection()
                .execute_unprepared(&format!(
                    "ALTER TABLE {} SET (fillfactor = 70)",
                    names.table(OUTBOX)
                ))
                .await?;
        }
        Ok(())
    }

    down {
        let names = Naming::detect(manager, OUTBOX).await?;
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            manager
                .get_connection()
                .execute_unprepared(&format!(
                    "ALTER TABLE {} RESET (fillfactor)",
                    names.table(OUTBOX)
                ))
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name(names.index(DUE_INDEX))
                    .table(names.iden(OUTBOX))
                    .col(LifecycleOutbox::Status)
                    .col(LifecycleOutbox::NextAttemptAt)
                    .to_owned(),
            )
            .await?;
        names.drop_index(manager, OUTBOX, CLAIM_INDEX).await
    }
}
