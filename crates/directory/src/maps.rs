//! Role and status vocabularies: what the directory sends, what the platform stores, and the
//! maps between them.
//!
//! The directory's vocabulary is wider than the platform's: a directory `member` is a
//! platform [`MembershipRole::Developer`], a `blocked` account is [`AccountStatus::Disabled`],
//! an `invited` membership is [`MembershipStatus::Disabled`]. Unknown wire values are refused
//! when the response is parsed (serde), so every map below is total.

use serde::{Deserialize, Serialize};

/// Why a stored vocabulary value could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?} in storage: the row was written by another program version")]
pub struct UnknownValue {
    /// Which vocabulary, e.g. `membership_role`.
    pub kind: &'static str,
    /// The refused value.
    pub value: String,
}

macro_rules! vocabulary {
    ($(#[$meta:meta])* $name:ident, $kind:literal, { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The stored / wire spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text),+
                }
            }

            /// Parses the stored / wire spelling.
            ///
            /// # Errors
            /// [`UnknownValue`] for any other string.
            pub fn parse(value: &str) -> Result<Self, UnknownValue> {
                match value {
                    $($text => Ok(Self::$variant),)+
                    other => Err(UnknownValue { kind: $kind, value: other.to_owned() }),
                }
            }
        }
    };
}

vocabulary!(
    /// Role of a member as the directory sends it.
    DirectoryRole, "directory_role", {
        /// Workspace owner.
        Owner => "owner",
        /// Workspace administrator.
        Admin => "admin",
        /// A regular SaaS member (becomes a platform developer).
        Member => "member",
        /// Developer.
        Developer => "developer",
        /// Operator.
        Operator => "operator",
        /// Read-only viewer.
        Viewer => "viewer",
    }
);

vocabulary!(
    /// Role of a membership as the platform stores it.
    MembershipRole, "membership_role", {
        /// Workspace owner.
        Owner => "owner",
        /// Workspace administrator.
        Admin => "admin",
        /// Developer (also every directory `member`).
        Developer => "developer",
        /// Operator.
        Operator => "operator",
        /// Read-only viewer.
        Viewer => "viewer",
    }
);

vocabulary!(
    /// Status of an account as the directory sends it.
    DirectoryAccountStatus, "directory_account_status", {
        /// Usable account.
        Active => "active",
        /// Blocked by the SaaS (becomes disabled).
        Blocked => "blocked",
        /// Disabled.
        Disabled => "disabled",
        /// Deleted.
        Deleted => "deleted",
    }
);

vocabulary!(
    /// Status of an account as the platform stores it.
    AccountStatus, "account_status", {
        /// Usable account.
        Active => "active",
        /// Cannot sign in (directory `blocked` or `disabled`).
        Disabled => "disabled",
        /// Deleted.
        Deleted => "deleted",
    }
);

vocabulary!(
    /// Status of a membership as the directory sends it.
    DirectoryMembershipStatus, "directory_membership_status", {
        /// Active member.
        Active => "active",
        /// Invitation not yet accepted (becomes disabled).
        Invited => "invited",
        /// Disabled.
        Disabled => "disabled",
        /// Removed.
        Removed => "removed",
    }
);

vocabulary!(
    /// Status of a membership as the platform stores it.
    MembershipStatus, "membership_status", {
        /// Grants access.
        Active => "active",
        /// Kept but grants no access (invited, disabled, or the workspace is suspended).
        Disabled => "disabled",
        /// Gone (removed, or the workspace is archived or deleted).
        Removed => "removed",
    }
);

vocabulary!(
    /// Status of a workspace; the directory and the platform share this vocabulary.
    WorkspaceStatus, "workspace_status", {
        /// In use; its execution is admitted.
        Active => "active",
        /// Temporarily not in use (memberships become disabled).
        Suspended => "suspended",
        /// Archived (memberships become removed).
        Archived => "archived",
        /// Deleted (memberships become removed).
        Deleted => "deleted",
    }
);

vocabulary!(
    /// Desired execution state of a workspace.
    ExecutionStatus, "execution_status", {
        /// Executions may run.
        Active => "active",
        /// Executions must not run.
        Inactive => "inactive",
    }
);

vocabulary!(
    /// Who owns a row of the projected tables.
    RowSource, "row_source", {
        /// Written by the directory projection; the projection may update it.
        Directory => "directory",
        /// Created by the local platform; the projection must never take it over.
        Local => "local",
    }
);

/// The platform role of a directory role.
pub fn map_role(role: DirectoryRole) -> MembershipRole {
    match role {
        DirectoryRole::Owner => MembershipRole::Owner,
        DirectoryRole::Admin => MembershipRole::Admin,
        DirectoryRole::Member | DirectoryRole::Developer => MembershipRole::Developer,
        DirectoryRole::Operator => MembershipRole::Operator,
        DirectoryRole::Viewer => MembershipRole::Viewer,
    }
}

/// The platform account status of a directory account status.
pub fn map_account_status(status: DirectoryAccountStatus) -> AccountStatus {
    match status {
        DirectoryAccountStatus::Active => AccountStatus::Active,
        DirectoryAccountStatus::Blocked | DirectoryAccountStatus::Disabled => {
            AccountStatus::Disabled
        }
        DirectoryAccountStatus::Deleted => AccountStatus::Deleted,
    }
}

/// The platform membership status of a directory membership in a workspace of `workspace`
/// status: in an active workspace the member's own status maps directly; an archived or
/// deleted workspace removes every membership; any other inactive workspace disables them.
pub fn map_membership_status(
    status: DirectoryMembershipStatus,
    workspace: WorkspaceStatus,
) -> MembershipStatus {
    match workspace {
        WorkspaceStatus::Active => match status {
            DirectoryMembershipStatus::Active => MembershipStatus::Active,
            DirectoryMembershipStatus::Invited | DirectoryMembershipStatus::Disabled => {
                MembershipStatus::Disabled
            }
            DirectoryMembershipStatus::Removed => MembershipStatus::Removed,
        },
        WorkspaceStatus::Archived | WorkspaceStatus::Deleted => MembershipStatus::Removed,
        WorkspaceStatus::Suspended => MembershipStatus::Disabled,
    }
}

/// Desired execution state and write fence of a workspace: only an active workspace executes,
/// every other one is write-fenced.
pub fn execution_for(status: WorkspaceStatus) -> (ExecutionStatus, bool) {
    if status == WorkspaceStatus::Active {
        (ExecutionStatus::Active, false)
    } else {
        (ExecutionStatus::Inactive, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_map_matches_reference() {
        let cases = [
            (DirectoryRole::Owner, MembershipRole::Owner),
            (DirectoryRole::Admin, MembershipRole::Admin),
            (DirectoryRole::Member, MembershipRole::Developer),
            (DirectoryRole::Developer, MembershipRole::Developer),
            (DirectoryRole::Operator, MembershipRole::Operator),
            (DirectoryRole::Viewer, MembershipRole::Viewer),
        ];
        for (wire, local) in cases {
            assert_eq!(map_role(wire), local, "{wire:?}");
        }
    }

    #[test]
    fn account_status_map_matches_reference() {
        let cases = [
            (DirectoryAccountStatus::Active, AccountStatus::Active),
            (DirectoryAccountStatus::Blocked, AccountStatus::Disabled),
            (DirectoryAccountStatus::Disabled, AccountStatus::Disabled),
            (DirectoryAccountStatus::Deleted, AccountStatus::Deleted),
        ];
        for (wire, local) in cases {
            assert_eq!(map_account_status(wire), local, "{wire:?}");
        }
    }

    #[test]
    fn membership_status_map_matches_reference() {
        use DirectoryMembershipStatus as D;
        use MembershipStatus as M;
        use WorkspaceStatus as W;
        let cases = [
            (D::Active, W::Active, M::Active),
            (D::Invited, W::Active, M::Disabled),
            (D::Disabled, W::Active, M::Disabled),
            (D::Removed, W::Active, M::Removed),
            (D::Active, W::Suspended, M::Disabled),
            (D::Removed, W::Suspended, M::Disabled),
            (D::Active, W::Archived, M::Removed),
            (D::Active, W::Deleted, M::Removed),
            (D::Invited, W::Deleted, M::Removed),
        ];
        for (member, workspace, expected) in cases {
            assert_eq!(
                map_membership_status(member, workspace),
                expected,
                "{member:?} in {workspace:?}"
            );
        }
    }

    #[test]
    fn write_fenced_is_not_active() {
        assert_eq!(
            execution_for(WorkspaceStatus::Active),
            (ExecutionStatus::Active, false)
        );
        for status in [
            WorkspaceStatus::Suspended,
            WorkspaceStatus::Archived,
            WorkspaceStatus::Deleted,
        ] {
            assert_eq!(execution_for(status), (ExecutionStatus::Inactive, true));
        }
    }

    #[test]
    fn vocabulary_round_trips_and_refuses_unknown() {
        for role in [
            MembershipRole::Owner,
            MembershipRole::Admin,
            MembershipRole::Developer,
            MembershipRole::Operator,
            MembershipRole::Viewer,
        ] {
            assert_eq!(MembershipRole::parse(role.as_str()), Ok(role));
            assert_eq!(
                serde_json::to_string(&role).unwrap(),
                format!("\"{}\"", role.as_str())
            );
        }
        assert_eq!(
            MembershipRole::parse("member"),
            Err(UnknownValue {
                kind: "membership_role",
                value: "member".into()
            })
        );
        assert!(serde_json::from_str::<DirectoryRole>("\"root\"").is_err());
    }
}
