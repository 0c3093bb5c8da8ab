//! Migration: `control_spaces` and `lifecycle_outbox`, the tables of the lifecycle saga.
//!
//! Timestamps are `BIGINT` Unix milliseconds (UTC). JSON payloads are stored as text.

use sea_orm_migration::prelude::*;

/// Creates `control_spaces` and `lifecycle_outbox` with their indexes.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum ControlSpaces {
    Table,
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
    Table,
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

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ControlSpaces::Table)
                    .col(ColumnDef::new(ControlSpaces::TenantId).string().not_null())
                    .col(ColumnDef::new(ControlSpaces::ControlSpaceId).string().not_null())
                    .col(ColumnDef::new(ControlSpaces::State).string().not_null())
                    .col(ColumnDef::new(ControlSpaces::LifecycleOperationId).string().not_null())
                    .col(ColumnDef::new(ControlSpaces::ResourceVersion).big_integer().not_null())
                    .col(ColumnDef::new(ControlSpaces::ProvisioningKey).string().not_null())
                    .col(ColumnDef::new(ControlSpaces::KnowledgeSpaceId).string().null())
                    .col(
                        ColumnDef::new(ControlSpaces::KnowledgeSpaceRevision)
                            .big_integer()
                            .not_null(),
                    )
                    .col(ColumnDef::new(ControlSpaces::DeletionIrreversibleAt).big_integer().null())
                    .col(
                        ColumnDef::new(ControlSpaces::LastRevokeSequence)
                            .big_integer()
                            .not_null()
                            .default(0),
                    )
                    .col(ColumnDef::new(ControlSpaces::CreatedAt).big_integer().not_null())
                    .col(ColumnDef::new(ControlSpaces::UpdatedAt).big_integer().not_null())
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
                    .table(LifecycleOutbox::Table)
                    .col(ColumnDef::new(LifecycleOutbox::Id).string().not_null().primary_key())
                    .col(ColumnDef::new(LifecycleOutbox::TenantId).string().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::ControlSpaceId).string().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::OperationId).string().not_null())
                    .col(
                        ColumnDef::new(LifecycleOutbox::IdempotencyKey)
                            .string()
                            .not_null()
                            .unique_key(),
                    )
                    .col(ColumnDef::new(LifecycleOutbox::RequestFingerprint).string().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::Operation).string().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::Payload).text().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::Status).string().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::AttemptCount).integer().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::LeaseOwner).string().null())
                    .col(ColumnDef::new(LifecycleOutbox::LeaseExpiresAt).big_integer().null())
                    .col(ColumnDef::new(LifecycleOutbox::LeaseEpoch).big_integer().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::NextAttemptAt).big_integer().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::LastErrorCode).string().null())
                    .col(ColumnDef::new(LifecycleOutbox::LastErrorMessage).text().null())
                    .col(ColumnDef::new(LifecycleOutbox::CreatedAt).big_integer().not_null())
                    .col(ColumnDef::new(LifecycleOutbox::CompletedAt).big_integer().null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_lifecycle_outbox_due")
                    .table(LifecycleOutbox::Table)
                    .col(LifecycleOutbox::Status)
                    .col(LifecycleOutbox::NextAttemptAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_lifecycle_outbox_control_space")
                    .table(LifecycleOutbox::Table)
                    .col(LifecycleOutbox::TenantId)
                    .col(LifecycleOutbox::ControlSpaceId)
                    .col(LifecycleOutbox::Operation)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(LifecycleOutbox::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(ControlSpaces::Table).to_owned())
            .await?;
        Ok(())
    }
}
