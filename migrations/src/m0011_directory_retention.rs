//! Migration: the index retention reads on the directory inbox.
//!
//! `ix_tenantry_directory_projection_inbox_received` on
//! `tenantry_directory_projection_inbox (received_at)`: the receipts in the order they arrived,
//! so a prune batch (`ORDER BY received_at LIMIT n`) and the oldest-record gauge read a range,
//! not the whole inbox. Runs after the table-prefix migration.

use sea_orm_migration::prelude::*;

use crate::naming::Naming;

/// Creates the retention index of the directory inbox.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The table and the index, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const INBOX: &str = "directory_projection_inbox";
const RECEIVED_INDEX: &str = "ix_directory_projection_inbox_received";

atomic_migration! {
    |manager|

    up {
        Naming::Prefixed
            .create_index(manager, INBOX, RECEIVED_INDEX, "received_at", |index| index)
            .await
    }

    down {
        Naming::Prefixed
            .drop_index(manager, INBOX, RECEIVED_INDEX)
            .await
    }
}
