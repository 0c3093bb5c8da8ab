//! Validated identifiers of the directory: instances, workspaces, accounts, memberships, events.
//!
//! The provider sends UUID strings; they are parsed once at the edge (serde `try_from`) and
//! refused when empty, longer than [`tenantry_kernel::id::MAX_ID_LEN`] bytes, containing
//! whitespace, control or invisible format characters or `/`, equal to `.` or `..` (an instance
//! uuid is a URL path segment), or not in Unicode NFC (the kernel's identifier rules, shared
//! through `tenantry_kernel::define_id!`; a provider that sends a decomposed id gets its batch
//! refused instead of a second, look-alike entity). The format of the UUID itself is the
//! provider's business: the projection only compares identifiers for equality and order.

#[cfg(test)]
use tenantry_kernel::IdError;
use tenantry_kernel::define_id;

define_id!(
    /// The platform instance a directory projects into (one shared projection-state row each).
    InstanceUuid,
    "instance_uuid"
);
define_id!(
    /// A workspace (the tenant unit of the directory).
    WorkspaceUuid,
    "workspace_uuid"
);
define_id!(
    /// An account (a person; one normalized email each).
    AccountUuid,
    "account_uuid"
);
define_id!(
    /// A membership of one account in one workspace.
    MembershipUuid,
    "membership_uuid"
);
define_id!(
    /// One event of the directory event stream; the inbox is keyed by it.
    EventUuid,
    "event_uuid"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_per_rule() {
        assert!(WorkspaceUuid::parse("ws-1").is_ok());
        assert_eq!(
            WorkspaceUuid::parse(""),
            Err(IdError::Empty {
                kind: "workspace_uuid"
            })
        );
        assert_eq!(
            AccountUuid::parse("a b"),
            Err(IdError::InvalidCharacter {
                kind: "account_uuid"
            })
        );
        assert!(serde_json::from_str::<InstanceUuid>("\"\"").is_err());
        let id: EventUuid = serde_json::from_str("\"e-1\"").unwrap();
        assert_eq!(id.as_str(), "e-1");
    }

    #[test]
    fn case_007_lookalike_directory_ids_are_refused_unless_nfc() {
        assert!(WorkspaceUuid::parse("ws-\u{00E9}").is_ok());
        assert!(matches!(
            WorkspaceUuid::parse("ws-e\u{0301}"),
            Err(IdError::NotNormalized {
                kind: "workspace_uuid",
                ..
            })
        ));
        // The provider's JSON goes through the same rule.
        assert!(serde_json::from_str::<AccountUuid>(r#""acc-e\u0301""#).is_err());
    }
}
