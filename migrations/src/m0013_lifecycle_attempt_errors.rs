//! Migration: the attempt-error log, `tenantry_lifecycle_attempt_errors`.
//!
//! One row per attempt of a command that ended in an error, written by the settle in the
//! same transaction (a retry or a dead letter), and one per operator abandon:
//! - `id` (VARCHAR, primary key): a UUID the store generates;
//! - `command_id` (VARCHAR): the command, a foreign key to `tenantry_lifecycle_outbox (id)`
//!   with `ON DELETE CASCADE`, so retention's delete of a finished command removes its log in
//!   the same statement and no entry outlives its command;
//! - `attempt` (INTEGER): the command's `attempt_count` when the entry was written;
//! - `outcome` (VARCHAR): `retry`, `failed` or `abandoned`;
//! - `error_code` (VARCHAR), `error_message` (TEXT): the settlement's error;
//! - `recorded_at` (BIGINT, Unix ms): the store's clock when written;
//! - `lease_owner` (VARCHAR NULL): the worker that settled; `actor` (VARCHAR NULL): the operator
//!   who abandoned.
//!
//! `ix_tenantry_lifecycle_attempt_errors_command` on `(command_id, recorded_at)`: a command's
//! newest entries (the console's detail) and the cascade's lookup are range reads.
//!
//! Nothing existing changes; a database migrated before has an empty log (only the last error,
//! on the outbox row). Runs after the table-prefix migration.

use sea_orm_migration::prelude::*;

use crate::naming::{Naming, bigint, ensure_absent, int, string, string_null, text};

/// Creates the attempt-error log and its index.
#[derive(DeriveMigrationName)]
pub struct Migration;

/// The tables and the index, unprefixed (`Naming::Prefixed` adds `tenantry_`).
const OUTBOX: &str = "lifecycle_outbox";
pub(crate) const ERRORS: &str = "lifecycle_attempt_errors";
const COMMAND_INDEX: &str = "ix_lifecycle_attempt_errors_command";
const COMMAND_FOREIGN_KEY: &str = "fk_lifecycle_attempt_errors_command";

#[derive(Iden)]
enum AttemptErrors {
    Id,
    CommandId,
    Attempt,
    Outcome,
    ErrorCode,
    ErrorMessage,
    RecordedAt,
    LeaseOwner,
    Actor,
}

atomic_migration! {
    |manager|

    up {
        let naming = Naming::Prefixed;
        ensure_absent(
            manager,
            &naming.table(ERRORS),
            crate::LIFECYCLE_HISTORY_TABLE,
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(naming.iden(ERRORS))
                    .col(string(AttemptErrors::Id).primary_key())
                    .col(string(AttemptErrors::CommandId))
                    .col(int(AttemptErrors::Attempt))
                    .col(string(AttemptErrors::Outcome))
                    .col(string(AttemptErrors::ErrorCode))
                    .col(text(AttemptErrors::ErrorMessage))
                    .col(bigint(AttemptErrors::RecordedAt))
                    .col(string_null(AttemptErrors::LeaseOwner))
                    .col(string_null(AttemptErrors::Actor))
                    .foreign_key(
                        ForeignKey::create()
                            .name(naming.index(COMMAND_FOREIGN_KEY))
                            .from(naming.iden(ERRORS), AttemptErrors::CommandId)
                            .to(naming.iden(OUTBOX), Alias::new("id"))
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        naming
            .create_index(manager, ERRORS, COMMAND_INDEX, "command_id", |index| {
                index.col(Alias::new("recorded_at"))
            })
            .await
    }

    down {
        let naming = Naming::Prefixed;
        manager
            .drop_table(Table::drop().table(naming.iden(ERRORS)).to_owned())
            .await
    }
}
