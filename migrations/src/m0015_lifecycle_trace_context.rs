//! Migration: the caller's trace context on each command, `tenantry_lifecycle_outbox.trace_context`.
//!
//! - `trace_context` (VARCHAR NULL): the W3C `traceparent` value intake recorded for the
//!   command (the admin request's `traceparent` header, or the span that enqueued it), so every
//!   dispatch of the command continues that trace (docs/operations.md, "Tracing"). `NULL` when
//!   tracing was off at intake, and on every row enqueued before this migration.
//!
//! Existing rows are kept (the column is nullable, nothing is backfilled); `down` drops the
//! column and with it the stored contexts. Runs after the table-prefix migration.

use sea_orm_migration::prelude::*;

use crate::naming::{Naming, string_null};

/// Adds the nullable column `trace_context` to the outbox.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The outbox, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const OUTBOX: &str = "lifecycle_outbox";

#[derive(Iden)]
enum LifecycleOutbox {
    TraceContext,
}

atomic_migration! {
    |manager|

    up {
        Naming::Prefixed
            .alter_table(manager, OUTBOX, |t| {
                t.add_column(string_null(LifecycleOutbox::TraceContext))
            })
            .await
    }

    down {
        Naming::Prefixed
            .alter_table(manager, OUTBOX, |t| {
                t.drop_column(LifecycleOutbox::TraceContext)
            })
            .await
    }
}
