//! Migration: the directory projection tables (each prefixed `tenantry_`, created after
//! checking that no table of that name exists).
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

use crate::naming::{
    Naming, bigint, bigint_null, boolean, ensure_absent, ensure_no_unadopted_history, text,
    varchar, varchar_null,
};

const ACCOUNTS: &str = "accounts";
const WORKSPACES: &str = "workspaces";
const MEMBERSHIPS: &str = "workspace_memberships";
const EXECUTION_STATE: &str = "workspace_execution_state";
const PROJECTION_STATE: &str = "directory_projection_state";
const INBOX: &str = "directory_projection_inbox";
/// Every table of this migration, in creation order.
const TABLES: [&str; 6] = [
    ACCOUNTS,
    WORKSPACES,
    MEMBERSHIPS,
    EXECUTION_STATE,
    PROJECTION_STATE,
    INBOX,
];

/// Creates the directory projection tables and their indexes.
#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(Iden)]
enum Accounts {
    Uuid,
    NormalizedEmail,
    DisplayName,
    Status,
    Source,
    ProjectionRevision,
}

#[derive(Iden)]
enum Workspaces {
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
    InstanceUuid,
    Cursor,
    SnapshotCoverageCursor,
    SnapshotFingerprint,
    LastAppliedAt,
    LeaseExpiresAt,
}

#[derive(Iden)]
enum DirectoryProjectionInbox {
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
    varchar(col, 255).to_owned()
}

atomic_migration! {
    |manager|

    up {
        ensure_no_unadopted_history(manager, ACCOUNTS, "m0003_directory").await?;
        let names = Naming::Prefixed;
        for table in TABLES {
            ensure_absent(manager, &names.table(table), crate::DIRECTORY_HISTORY_TABLE).await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(names.iden(ACCOUNTS))
                    .col(id(Accounts::Uuid).primary_key())
                    .col(id(Accounts::NormalizedEmail).unique_key())
                    .col(text(Accounts::DisplayName))
                    .col(varchar(Accounts::Status, 32))
                    .col(varchar(Accounts::Source, 32))
                    .col(bigint(Accounts::ProjectionRevision))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(WORKSPACES))
                    .col(id(Workspaces::Uuid).primary_key())
                    .col(varchar(Workspaces::Source, 32))
                    .col(varchar_null(Workspaces::InstanceUuid, 255))
                    .col(text(Workspaces::Name))
                    .col(text(Workspaces::Slug))
                    .col(text(Workspaces::WorkspaceType))
                    .col(varchar(Workspaces::Status, 32))
                    .col(varchar_null(Workspaces::CreatedByAccountUuid, 255))
                    .col(bigint(Workspaces::ProjectionRevision))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(names.index("ix_workspaces_instance_status"))
                    .table(names.iden(WORKSPACES))
                    .col(Workspaces::InstanceUuid)
                    .col(Workspaces::Source)
                    .col(Workspaces::Status)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(MEMBERSHIPS))
                    .col(id(WorkspaceMemberships::Uuid).primary_key())
                    .col(id(WorkspaceMemberships::WorkspaceUuid))
                    .col(id(WorkspaceMemberships::AccountUuid))
                    .col(varchar(WorkspaceMemberships::Role, 32))
                    .col(varchar(WorkspaceMemberships::Status, 32))
                    .col(bigint_null(WorkspaceMemberships::JoinedAt))
                    .col(bigint(WorkspaceMemberships::ProjectionRevision))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name(names.index("ux_workspace_memberships_workspace_account"))
                    .table(names.iden(MEMBERSHIPS))
                    .col(WorkspaceMemberships::WorkspaceUuid)
                    .col(WorkspaceMemberships::AccountUuid)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(EXECUTION_STATE))
                    .col(id(WorkspaceExecutionState::WorkspaceUuid).primary_key())
                    .col(varchar(WorkspaceExecutionState::Source, 32))
                    .col(varchar_null(WorkspaceExecutionState::InstanceUuid, 255))
                    .col(bigint(WorkspaceExecutionState::ActiveGeneration))
                    .col(varchar(WorkspaceExecutionState::State, 32))
                    .col(boolean(WorkspaceExecutionState::WriteFenced))
                    .col(bigint(WorkspaceExecutionState::DesiredStateRevision))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(PROJECTION_STATE))
                    .col(id(DirectoryProjectionState::InstanceUuid).primary_key())
                    .col(bigint(DirectoryProjectionState::Cursor))
                    .col(bigint(DirectoryProjectionState::SnapshotCoverageCursor))
                    .col(varchar(DirectoryProjectionState::SnapshotFingerprint, 64))
                    .col(bigint(DirectoryProjectionState::LastAppliedAt))
                    .col(bigint(DirectoryProjectionState::LeaseExpiresAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(names.iden(INBOX))
                    .col(id(DirectoryProjectionInbox::InstanceUuid))
                    .col(id(DirectoryProjectionInbox::EventUuid))
                    .col(bigint(DirectoryProjectionInbox::Cursor))
                    .col(varchar(DirectoryProjectionInbox::EventType, 255))
                    .col(bigint(DirectoryProjectionInbox::Revision))
                    .col(varchar(DirectoryProjectionInbox::Fingerprint, 64))
                    .col(bigint(DirectoryProjectionInbox::ReceivedAt))
                    .col(bigint_null(DirectoryProjectionInbox::AppliedAt))
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
                    .name(names.index("ix_directory_projection_inbox_cursor"))
                    .table(names.iden(INBOX))
                    .col(DirectoryProjectionInbox::InstanceUuid)
                    .col(DirectoryProjectionInbox::Cursor)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    down {
        let names = Naming::detect(manager, ACCOUNTS).await?;
        for table in TABLES.into_iter().rev() {
            manager
                .drop_table(Table::drop().table(names.iden(table)).to_owned())
                .await?;
        }
        Ok(())
    }
}
