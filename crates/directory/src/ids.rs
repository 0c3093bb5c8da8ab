//! Validated identifiers of the directory: instances, workspaces, accounts, memberships, events.
//!
//! The provider sends UUID strings; they are parsed once at the edge (serde `try_from`) and
//! refused when empty, longer than [`tenantry_kernel::id::MAX_ID_LEN`] bytes, or containing
//! whitespace or control characters. The format of the UUID itself is the provider's business:
//! the projection only compares identifiers for equality and order.

use std::fmt;

use serde::{Deserialize, Serialize};
use tenantry_kernel::IdError;
use tenantry_kernel::id::MAX_ID_LEN;

fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > MAX_ID_LEN {
        return Err(IdError::TooLong {
            kind,
            len: value.len(),
        });
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(IdError::InvalidCharacter { kind });
    }
    Ok(())
}

macro_rules! directory_id {
    ($(#[$meta:meta])* $name:ident, $kind:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Name of this identifier in error messages and wire formats.
            pub const KIND: &'static str = $kind;

            /// Parses `value`.
            ///
            /// # Errors
            /// [`IdError`] when the value is empty, too long, or contains whitespace or
            /// control characters.
            pub fn parse(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate($kind, &value)?;
                Ok(Self(value))
            }

            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> Self {
                value.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

directory_id!(
    /// The platform instance a directory projects into (one shared projection-state row each).
    InstanceUuid,
    "instance_uuid"
);
directory_id!(
    /// A workspace (the tenant unit of the directory).
    WorkspaceUuid,
    "workspace_uuid"
);
directory_id!(
    /// An account (a person; one normalized email each).
    AccountUuid,
    "account_uuid"
);
directory_id!(
    /// A membership of one account in one workspace.
    MembershipUuid,
    "membership_uuid"
);
directory_id!(
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
}
