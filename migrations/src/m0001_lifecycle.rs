//! Migration: `tenantry_control_spaces` and `tenantry_lifecycle_outbox`, the tables of the
//! lifecycle saga.
//!
//! Creates the prefixed tables directly, after checking that neither exists (a table of that
//! name is not Tenantry's: see [`crate::naming`]) and that the database does not still hold
//! these tables unprefixed with their history in `seaql_migrations` (adopt it first).
//!
//! Timestamps are `BIGINT` Unix milliseconds (UTC). JSON payloads are stored as text.

use sea_orm_migration::prelude::*;

use crate::naming::{
    Naming, bigint, bigint_null, ensure_absent, ensure_no_unadopted_history, int, string,
    string_null, text,
};

/// Creates `tenantry_control_spaces` and `tenantry_lifecycle_outbox` with their indexes.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum ControlSpaces {
    TenantId,
    ControlSpaceId,
    State,
    LifecycleOperationId,
    ResourceVersion,
    ProvisioningKey,
    KnowledgeSpaceId,
    KnowledgeSpaceRevision,
    DeletionIrreversibleAt,
    LastRevokeSequence,
    CreatedAt,
    UpdatedAt,
}

#[derive(Iden)]
enum LifecycleOutbox {
    Id,
    TenantId,
    ControlSpaceId,
    OperationId,
    IdempotencyKey,
    RequestFingerprint,
    Operation,
    Payload,
    Status,
    AttemptCount,
    LeaseOwner,
    LeaseExpiresAt,
    LeaseEpoch,
    NextAttemptAt,
    LastErrorCode,
    LastErrorMessage,
    CreatedAt,
    CompletedAt,
}

const CONTROL_SPACES: &str = "control_spaces";
const OUTBOX: &str = "lifecycle_outbox";

atomic_migration! {
    |manager|

    up {
        ensure_no_unadopted_history(manager, CONTROL_SPACES, "m0001_lifecycle").await?;
        let names = Naming::Prefixed;
        for table in [CONTROL_SPACES, OUTBOX] {
            ensure_absent(manager, &names.table(table), crate::LIFECYCLE_HISTORY_TABLE).await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(names.iden(CONTROL_SPACES))
                    .col(string(ControlSpaces::TenantId))
                    .col(string(ControlSpaces::ControlSpaceId))
                    .col(string(ControlSpaces::State))
                    .col(string(ControlSpaces::LifecycleOperationId))
                    .col(bigint(ControlSpaces::ResourceVersion))
                    .col(string(ControlSpaces::ProvisioningKey))
                    .col(string_null(ControlSpaces::KnowledgeSpaceId))
                    .col(bigint(ControlSpaces::KnowledgeSpaceRevision))
                    .col(bigint_null(ControlSpaces::DeletionIrreversibleAt))
                    .col(bigint(ControlSpaces::LastRevokeSequence).default(0))
                    .col(bigint(ControlSpaces::CreatedAt))
                    .col(bigint(ControlSpaces::UpdatedAt))
                    .primary_key(
                        Index::create()
                            .col(ControlSpaces::TenantId)
                            .col(ControlSpaces::ControlSpaceId),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(OUTBOX))
                    .col(string(LifecycleOutbox::Id).primary_key())
                    .col(string(LifecycleOutbox::TenantId))
                    .col(string(LifecycleOutbox::ControlSpaceId))
                    .col(string(LifecycleOutbox::OperationId))
                    .col(string(LifecycleOutbox::IdempotencyKey).unique_key())
                    .col(string(LifecycleOutbox::RequestFingerprint))
                    .col(string(LifecycleOutbox::Operation))
                    .col(text(LifecycleOutbox::Payload))
                    .col(string(LifecycleOutbox::Status))
                    .col(int(LifecycleOutbox::AttemptCount))
                    .col(string_null(LifecycleOutbox::LeaseOwner))
                    .col(bigint_null(LifecycleOutbox::LeaseExpiresAt))
                    .col(bigint(LifecycleOutbox::LeaseEpoch))
                    .col(bigint(LifecycleOutbox::NextAttemptAt))
                    .col(string_null(LifecycleOutbox::LastErrorCode))
                    .col(
                        ColumnDef::new(LifecycleOutbox::LastErrorMessage)
                            .text()
                            .null(),
                    )
                    .col(bigint(LifecycleOutbox::CreatedAt))
                    .col(bigint_null(LifecycleOutbox::CompletedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(names.index("ix_lifecycle_outbox_due"))
                    .table(names.iden(OUTBOX))
                    .col(LifecycleOutbox::Status)
                    .col(LifecycleOutbox::NextAttemptAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(names.index("ix_lifecycle_outbox_control_space"))
                    .table(names.iden(OUTBOX))
                    .col(LifecycleOutbox::TenantId)
                    .col(LifecycleOutbox::ControlSpaceId)
                    .col(LifecycleOutbox::Operation)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    down {
        let names = Naming::detect(manager, OUTBOX).await?;
        manager
            .drop_table(Table::drop().table(names.iden(OUTBOX)).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(names.iden(CONTROL_SPACES)).to_owned())
            .await?;
        Ok(())
    }
}
