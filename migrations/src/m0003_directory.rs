//! Migration: the directory projection tables.
//!
//! - `accounts`: one row per account, local or projected (`source`); `normalized_email` unique;
//! - `workspaces`: `source` and `instance_uuid` (NULL for local workspaces) say who owns it;
//! - `workspace_memberships`: unique per `(workspace_uuid, account_uuid)`;
//!   `projection_revision = 0` marks a membership owned by the local platform;
//! - `workspace_execution_state`: one row per workspace (generation, desired state, write fence);
//! - `directory_projection_state`: one row per instance shared by every replica (the lock row);
//! - `directory_projection_inbox`: one receipt per `(instance_uuid, event_uuid)`.
//!
//! Timestamps are `BIGINT` Unix milliseconds (UTC). No foreign keys: local rows may reference
//! accounts the projection does not know, and the projection upserts tables in any order
//! inside one transaction.

use sea_orm_migration::prelude::*;

/// Creates the directory projection tables and their indexes.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum Accounts {
    Table,
    Uuid,
    NormalizedEmail,
    DisplayName,
    Status,
    Source,
    ProjectionRevision,
}

#[derive(Iden)]
enum Workspaces {
    Table,
    Uuid,
    Source,
    InstanceUuid,
    Name,
    Slug,
    WorkspaceType,
    Status,
    CreatedByAccountUuid,
    ProjectionRevision,
}

#[derive(Iden)]
enum WorkspaceMemberships {
    Table,
    Uuid,
    WorkspaceUuid,
    AccountUuid,
    Role,
    Status,
    JoinedAt,
    ProjectionRevision,
}

#[derive(Iden)]
enum WorkspaceExecutionState {
    Table,
    WorkspaceUuid,
    Source,
    InstanceUuid,
    ActiveGeneration,
    State,
    WriteFenced,
    DesiredStateRevision,
}

#[derive(Iden)]
enum DirectoryProjectionState {
    Table,
    InstanceUuid,
    Cursor,
    SnapshotCoverageCursor,
    SnapshotFingerprint,
    LastAppliedAt,
    LeaseExpiresAt,
}

#[derive(Iden)]
enum DirectoryProjectionInbox {
    Table,
    InstanceUuid,
    EventUuid,
    Cursor,
    EventType,
    Revision,
    Fingerprint,
    ReceivedAt,
    AppliedAt,
}

fn id<T: IntoIden>(col: T) -> ColumnDef {
    ColumnDef::new(col).string_len(255).not_null().to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Accounts::Table)
                    .col(id(Accounts::Uuid).primary_key())
                    .col(id(Accounts::NormalizedEmail).unique_key())
                    .col(ColumnDef::new(Accounts::DisplayName).text().not_null())
                    .col(ColumnDef::new(Accounts::Status).string_len(32).not_null())
                    .col(ColumnDef::new(Accounts::Source).string_len(32).not_null())
                    .col(
                        ColumnDef::new(Accounts::ProjectionRevision)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Workspaces::Table)
                    .col(id(Workspaces::Uuid).primary_key())
                    .col(ColumnDef::new(Workspaces::Source).string_len(32).not_null())
                    .col(
                        ColumnDef::new(Workspaces::InstanceUuid)
                            .string_len(255)
                            .null(),
                    )
                    .col(ColumnDef::new(Workspaces::Name).text().not_null())
                    .col(ColumnDef::new(Workspaces::Slug).text().not_null())
                    .col(ColumnDef::new(Workspaces::WorkspaceType).text().not_null())
                    .col(ColumnDef::new(Workspaces::Status).string_len(32).not_null())
                    .col(
                        ColumnDef::new(Workspaces::CreatedByAccountUuid)
                            .string_len(255)
                            .null(),
                    )
                    .col(
                        ColumnDef::new(Workspaces::ProjectionRevision)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_workspaces_instance_status")
                    .table(Workspaces::Table)
                    .col(Workspaces::InstanceUuid)
                    .col(Workspaces::Source)
                    .col(Workspaces::Status)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WorkspaceMemberships::Table)
                    .col(id(WorkspaceMemberships::Uuid).primary_key())
                    .col(id(WorkspaceMemberships::WorkspaceUuid))
                    .col(id(WorkspaceMemberships::AccountUuid))
                    .col(
                        ColumnDef::new(WorkspaceMemberships::Role)
                            .string_len(32)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceMemberships::Status)
                            .string_len(32)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceMemberships::JoinedAt)
                            .big_integer()
                            .null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceMemberships::ProjectionRevision)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_workspace_memberships_workspace_account")
                    .table(WorkspaceMemberships::Table)
                    .col(WorkspaceMemberships::WorkspaceUuid)
                    .col(WorkspaceMemberships::AccountUuid)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WorkspaceExecutionState::Table)
                    .col(id(WorkspaceExecutionState::WorkspaceUuid).primary_key())
                    .col(
                        ColumnDef::new(WorkspaceExecutionState::Source)
                            .string_len(32)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceExecutionState::InstanceUuid)
                            .string_len(255)
                            .null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceExecutionState::ActiveGeneration)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceExecutionState::State)
                            .string_len(32)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceExecutionState::WriteFenced)
                            .boolean()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(WorkspaceExecutionState::DesiredStateRevision)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(DirectoryProjectionState::Table)
                    .col(id(DirectoryProjectionState::InstanceUuid).primary_key())
                    .col(
                        ColumnDef::new(DirectoryProjectionState::Cursor)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionState::SnapshotCoverageCursor)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionState::SnapshotFingerprint)
                            .string_len(64)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionState::LastAppliedAt)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionState::LeaseExpiresAt)
                            .big_integer()
                            .not_null(),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(DirectoryProjectionInbox::Table)
                    .col(id(DirectoryProjectionInbox::InstanceUuid))
                    .col(id(DirectoryProjectionInbox::EventUuid))
                    .col(
                        ColumnDef::new(DirectoryProjectionInbox::Cursor)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionInbox::EventType)
                            .string_len(255)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionInbox::Revision)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionInbox::Fingerprint)
                            .string_len(64)
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionInbox::ReceivedAt)
                            .big_integer()
                            .not_null(),
                    )
                    .col(
                        ColumnDef::new(DirectoryProjectionInbox::AppliedAt)
                            .big_integer()
                            .null(),
                    )
                    .primary_key(
                        Index::create()
                            .col(DirectoryProjectionInbox::InstanceUuid)
                            .col(DirectoryProjectionInbox::EventUuid),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_directory_projection_inbox_cursor")
                    .table(DirectoryProjectionInbox::Table)
                    .col(DirectoryProjectionInbox::InstanceUuid)
                    .col(DirectoryProjectionInbox::Cursor)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            DirectoryProjectionInbox::Table.into_iden(),
            DirectoryProjectionState::Table.into_iden(),
            WorkspaceExecutionState::Table.into_iden(),
            WorkspaceMemberships::Table.into_iden(),
            Workspaces::Table.into_iden(),
            Accounts::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}
