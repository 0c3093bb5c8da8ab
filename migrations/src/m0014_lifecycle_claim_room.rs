//! Migration: room on the outbox's heap pages for HOT claims (PostgreSQL).
//!
//! A claim changes only columns no index covers (status, lease, epoch, attempt count), so it
//! can be a HOT update — no index entry written — but only when the new row version fits on
//! the same heap page. m0004 set the outbox's fill factor to 70, which leaves room for about
//! six new versions of a typical command row (≈ 360 bytes) on a page that holds about
//! fifteen. The claim takes commands in due order, which is the order they were inserted, so
//! one claim statement takes every row of a page at once: the first few versions fitted, the
//! rest moved to other pages and inserted an entry into every index of the table (primary
//! key, idempotency key, control space, claim index). Measured with `pg_stat_statements` over
//! a 20,000-command drain (docs/benchmarks.md, "Side by side with the peers"): 5.2 WAL records
//! and 17 buffer accesses per claimed command at fill factor 70, 2.3 and 8.4 at 30 — the
//! claim's executor time per command halved.
//!
//! Fill factor 30 leaves room on each page for more new versions than the page holds rows,
//! so the claim of every row of a page and most of their acks stay on the page. The price is
//! a larger heap for live commands (about 2.3 × the pages); finished commands are pruned by
//! retention. The setting applies to pages filled after the migration; existing pages keep
//! their layout until rewritten. SQLite has no fill factor: there the migration only records
//! itself.

use sea_orm_migration::prelude::*;

use crate::naming::Naming;

/// Sets `tenantry_lifecycle_outbox`'s fill factor to [`FILL_FACTOR`] on PostgreSQL (m0004's
/// 70 on the way down).
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The outbox's fill factor after this migration (percent of each heap page filled by inserts).
pub const FILL_FACTOR: u8 = 30;
/// The fill factor m0004 set, restored by `down`.
const PREVIOUS_FILL_FACTOR: u8 = 70;
/// The outbox, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const OUTBOX: &str = "lifecycle_outbox";

async fn set_fill_factor(manager: &SchemaManager<'_>, percent: u8) -> Result<(), DbErr> {
    if manager.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
        return Ok(());
    }
    manager
        .get_connection()
        .execute_unprepared(&format!(
            "ALTER TABLE {} SET (fillfactor = {percent})",
            Naming::Prefixed.table(OUTBOX)
        ))
        .await
        .map(|_| ())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        set_fill_factor(manager, FILL_FACTOR).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        set_fill_factor(manager, PREVIOUS_FILL_FACTOR).await
    }
}
