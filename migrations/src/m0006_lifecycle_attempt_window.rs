//! Migration: `tenantry_lifecycle_outbox.attempt_window_ends_at` and `prior_window_ends_at`.
//!
//! `attempt_window_ends_at` is the latest time (Unix milliseconds, store clock) at which an
//! attempt of the command may have sent a request to the remote: the lease expiry while the
//! command is processing (moved forward by every renewal), the settle time once an attempt that
//! may have sent something settled, `NULL` while no attempt ever sent anything.
//! `prior_window_ends_at` keeps the value from before the current claim, so an attempt that
//! provably sent nothing (acked without delivery) restores it when it settles. A deletion that
//! finds no remote space completes on that proof only once the provision's window ended a grace
//! period ago (see docs/protocol.md, "A deletion never orphans a remote space"). Neither column
//! is indexed, so claims and renewals stay HOT updates on PostgreSQL.
//!
//! Rows that were claimed before this migration get a conservative window (their completion,
//! lease expiry or next attempt time), so an upgrade never turns an attempted provision into a
//! "never sent" one.

use sea_orm_migration::prelude::*;

use crate::naming::{Naming, bigint_null};

const OUTBOX: &str = "lifecycle_outbox";

/// Adds the nullable columns `attempt_window_ends_at` and `prior_window_ends_at` (`BIGINT`)
/// and backfills the window of commands claimed before.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum LifecycleOutbox {
    AttemptWindowEndsAt,
    PriorWindowEndsAt,
}

atomic_migration! {
    |manager|

    up {
        let names = Naming::detect(manager, OUTBOX).await?;
        names
            .alter_table(manager, OUTBOX, |t| {
                t.add_column(bigint_null(LifecycleOutbox::AttemptWindowEndsAt))
            })
            .await?;
        names
            .alter_table(manager, OUTBOX, |t| {
                t.add_column(bigint_null(LifecycleOutbox::PriorWindowEndsAt))
            })
            .await?;
        manager
            .get_connection()
            .execute_unprepared(&format!(
                "UPDATE {} \
                 SET attempt_window_ends_at = COALESCE(completed_at, lease_expires_at, next_attempt_at) \
                 WHERE attempt_count > 0",
                names.table(OUTBOX)
            ))
            .await?;
        Ok(())
    }

    down {
        let names = Naming::detect(manager, OUTBOX).await?;
        names
            .alter_table(manager, OUTBOX, |t| {
                t.drop_column(LifecycleOutbox::PriorWindowEndsAt)
            })
            .await?;
        names
            .alter_table(manager, OUTBOX, |t| {
                t.drop_column(LifecycleOutbox::AttemptWindowEndsAt)
            })
            .await
    }
}
