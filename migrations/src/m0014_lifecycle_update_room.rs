//! Migration: room on the lifecycle tables' heap pages for HOT updates (PostgreSQL).
//!
//! An update that changes no indexed column is a HOT update on PostgreSQL — no index entry
//! written — but only when the new row version fits on the same heap page.
//!
//! - `tenantry_lifecycle_outbox`: fill factor 70 (m0004) → **30**. A claim changes only
//!   columns no index covers (status, lease, epoch, attempt count). At 70 a page keeps room
//!   for about six new versions of a typical command row (≈ 360 bytes) but holds about
//!   fifteen rows, and a claim takes commands in due order (turn order since m0016) — usually
//!   the order they were inserted — so one claim statement takes every row of a page at once: the first few new
//!   versions fitted, the rest moved to other pages and inserted an entry into every index of
//!   the table (primary key, idempotency key, control space, claim index). At 30 a page has
//!   room for more new versions than it holds rows, so the claims of a whole page and most of
//!   their acks stay on the page.
//! - `tenantry_control_spaces`: fill factor 100 (the default) → **50**. The settle's
//!   compare-and-set changes only unindexed columns (state, resource version, …); on a full
//!   page every one of them was a non-HOT update that inserted a primary-key entry.
//!
//! Measured with `pg_stat_statements` over 20,000-command drains (docs/benchmarks.md, "Side by
//! side with the peers"): claim 5.2 → 2.3 WAL records and 17 → 8.4 buffer accesses per
//! claimed command; compare-and-set 2.45 → 1.03 WAL records and 7.9 → 5.1 buffer accesses per
//! row. The price is a larger heap (about 2.3 × the pages for live commands, 2 × for control
//! spaces); finished commands are pruned by retention. The settings apply to pages filled
//! after the migration; existing pages keep their layout until rewritten. SQLite has no fill
//! factor: there the migration only records itself.

use sea_orm_migration::prelude::*;

use crate::naming::Naming;

/// Sets the fill factors of `tenantry_lifecycle_outbox` ([`OUTBOX_FILL_FACTOR`]) and
/// `tenantry_control_spaces` ([`CONTROL_SPACES_FILL_FACTOR`]) on PostgreSQL; `down` restores
/// m0004's 70 and the default.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The outbox's fill factor after this migration (percent of each heap page filled by inserts).
pub const OUTBOX_FILL_FACTOR: u8 = 30;
/// The control spaces' fill factor after this migration.
pub const CONTROL_SPACES_FILL_FACTOR: u8 = 50;
/// The outbox's fill factor m0004 set, restored by `down`.
const PREVIOUS_OUTBOX_FILL_FACTOR: u8 = 70;
/// The tables, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const OUTBOX: &str = "lifecycle_outbox";
const CONTROL_SPACES: &str = "control_spaces";

/// `ALTER TABLE` of `table` on PostgreSQL; nothing on SQLite.
async fn alter(manager: &SchemaManager<'_>, table: &str, change: &str) -> Result<(), DbErr> {
    if manager.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
        return Ok(());
    }
    manager
        .get_connection()
        .execute_unprepared(&format!(
            "ALTER TABLE {} {change}",
            Naming::Prefixed.table(table)
        ))
        .await
        .map(|_| ())
}

atomic_migration! {
    |manager|

    up {
        alter(
            manager,
            OUTBOX,
            &format!("SET (fillfactor = {OUTBOX_FILL_FACTOR})"),
        )
        .await?;
        alter(
            manager,
            CONTROL_SPACES,
            &format!("SET (fillfactor = {CONTROL_SPACES_FILL_FACTOR})"),
        )
        .await
    }

    down {
        alter(manager, CONTROL_SPACES, "RESET (fillfactor)").await?;
        alter(
            manager,
            OUTBOX,
            &format!("SET (fillfactor = {PREVIOUS_OUTBOX_FILL_FACTOR})"),
        )
        .await
    }
}
