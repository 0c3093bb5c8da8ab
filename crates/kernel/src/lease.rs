//! Lease owner and lease epoch.
//!
//! A claim hands a command to one lease owner until the lease expires. Every claim increments
//! the command's lease epoch; every settle presents the epoch it claimed with, so a worker whose
//! lease was taken over cannot settle (the epoch is a fencing token, as in Kleppmann's
//! "How to do distributed locking").

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::id::IdError;

/// The worker identity that holds a lease, e.g. `host-1234-4f0c...`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct LeaseOwner(String);

impl LeaseOwner {
    /// Parses a lease owner (non-empty, at most 255 bytes, no whitespace or control characters).
    ///
    /// # Errors
    /// [`IdError`] when the value breaks one of those rules.
    pub fn parse(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        crate::id::validate("lease_owner", &value)?;
        Ok(Self(value))
    }

    /// The owner as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LeaseOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for LeaseOwner {
    type Error = IdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<LeaseOwner> for String {
    fn from(value: LeaseOwner) -> Self {
        value.0
    }
}

/// The number of times a command has been claimed; 0 for a command never claimed.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct LeaseEpoch(pub i64);

impl LeaseEpoch {
    /// The epoch a new claim receives.
    #[must_use]
    pub fn next(self) -> Self {
        Self(self.0.saturating_add(1))
    }
}

impl fmt::Display for LeaseEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_increments_and_saturates() {
        assert_eq!(LeaseEpoch(0).next(), LeaseEpoch(1));
        assert_eq!(LeaseEpoch(i64::MAX).next(), LeaseEpoch(i64::MAX));
    }

    #[test]
    fn lease_owner_rejects_blank() {
        assert!(LeaseOwner::parse("").is_err());
        assert!(LeaseOwner::parse("w 1").is_err());
        assert_eq!(LeaseOwner::parse("w-1").unwrap().as_str(), "w-1");
    }
}
