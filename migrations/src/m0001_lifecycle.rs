//! Migration: `tenantry_control_spaces` and `tenantry_lifecycle_outbox`, the tables of the
//! lifecycle saga.
//!
//! Creates the prefixed tables directly, after checking that neither exists (a table of that
//! name is not Tenantry's: see [`crate::naming`]) and that the database does not still hold
//! these tables unprefixed with their history in `seaql_migrations` (adopt it first).
//!
//! Timestamps are `BIGINT` Unix milliseconds (UTC). JSON payloads are stored as text.

use sea_orm_migration::prelude::*;

use crate::naming::{Naming, ensure_absent, ensure_no_unadopted_history};

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

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        ensure_no_unadopted_history(manager, CONTROL_SPACES, "m0001_lifecycle").await?;
        let names = Naming::Prefixed;
        for table in [CONTROL_SPACES, OUTBOX] {
            ensure_absent(manager, &names.table(table), crate::LIFECYCLE_HISTORY_TABLE).await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(names.iden(CONTROL_SPACES))
                    .col(ColumnDef::new(ControlSpaces::TenantId).string().not_null())
                    .col(
                        ColumnDef::new(ControlSpaces::ControlSpaceId)
                            .string()
                            .not_null(),
                    )
                    .col(ColumnDef::new(ControlSpaces::State).string().not_null())
                    .col(
                        ColumnDef::new(ControlSpaces::LifecycleOperationId)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::ResourceVersion)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::ProvisioningKey)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::KnowledgeSpaceId)
                            .string()
                            .null(),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::KnowledgeSpaceRevision)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::DeletionIrreversibleAt)
                            .big_integer()
                            .null(),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::LastRevokeSequence)
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::CreatedAt)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(ControlSpaces::UpdatedAt)
                            .big_integer()
                            .not_null(),
                    )
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
                    .col(
                        ColumnDef::new(LifecycleOutbox::Id)
                            .string()
                            .not_null()
                            .primary_key(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::TenantId)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::ControlSpaceId)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::OperationId)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::IdempotencyKey)
                            .string()
                            .not_null()
                            .unique_key(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::RequestFingerprint)
                            .string()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::Operation)
                            .string()
                            .not_null(),
                    )
                    .col(ColumnDef::new(LifecycleOutbox::Payload).text().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::Status).string().not_null())
                    .col(
                        ColumnDef::new(LifecycleOutbox::AttemptCount)
                            .integer()
                            .not_null(),
                    )
                    .col(ColumnDef::new(LifecycleOutbox::LeaseOwner).string().null())
                    .col(
                        ColumnDef::new(LifecycleOutbox::LeaseExpiresAt)
                            .big_integer()
                            .null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::LeaseEpoch)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::NextAttemptAt)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::LastErrorCode)
                            .string()
                            .null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::LastErrorMessage)
                            .text()
                            .null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::CreatedAt)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(LifecycleOutbox::CompletedAt)
                            .big_integer()
                            .null(),
                    )
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

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
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
