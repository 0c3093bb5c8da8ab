//! Installation bindings, scope identities and the fence keys derived from them.
//!
//! Writes are serialized and fenced per `(installation binding, scope identity)`. A scope
//! identity is either an explicit object identity (a knowledge-base id, a memory scope key, a
//! collection id) or the installation-wide scope, used by writes that carry no per-object
//! identity. The fence key of an explicit identity is [`FENCE_KEY_PREFIX`] followed by the
//! lowercase hex SHA-256 of the identity's UTF-8 bytes; the installation-wide scope uses the
//! fixed key [`INSTALLATION_FENCE_KEY`]. A fence on the installation key blocks every scope of
//! its binding. The key scheme matches the reference platform byte for byte, so fences written
//! by it are recognised.

use std::fmt;
use std::sync::{Arc, LazyLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Prefix of every fence key in host storage. Any stored key with this prefix is read as a
/// fence record when fences are loaded.
pub const FENCE_KEY_PREFIX: &str = "ke.fence.v1.";

/// The fence key of the installation-wide scope; a fence here blocks every scope of the binding.
pub const INSTALLATION_FENCE_KEY: &str = "ke.fence.v1.installation";

/// Prefix of the receipts of idempotent fence clears kept in host storage. Not a fence key
/// prefix: receipts never fence.
pub const CLEAR_RECEIPT_PREFIX: &str = "ke.fence-clear.v1.";

/// The host-storage key of the receipt of a fence clear made under `idempotency_key`:
/// [`CLEAR_RECEIPT_PREFIX`] + lowercase hex SHA-256 of the key's UTF-8 bytes.
pub fn clear_receipt_key(idempotency_key: &str) -> String {
    format!(
        "{CLEAR_RECEIPT_PREFIX}{}",
        hex::encode(Sha256::digest(idempotency_key.as_bytes()))
    )
}

/// Longest accepted installation binding, in bytes.
pub const MAX_BINDING_LEN: usize = 255;

/// Why a string was refused as an installation binding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindingError {
    /// The caller passed an empty binding.
    #[error("installation binding must not be empty")]
    Empty,
    /// The caller passed a binding longer than [`MAX_BINDING_LEN`] bytes.
    #[error("installation binding is {len} bytes long; the limit is {MAX_BINDING_LEN} bytes")]
    TooLong {
        /// Length of the refused value in bytes.
        len: usize,
    },
    /// The caller passed a control character.
    #[error("installation binding must not contain control characters")]
    ControlCharacter,
    /// The binding is not in Unicode NFC (two bindings that look the same must be one).
    #[error("installation binding is not in Unicode NFC; send {normalized:?} instead")]
    NotNormalized {
        /// The NFC form to send instead.
        normalized: String,
    },
}

/// One installation of a connector on the host platform: the namespace of its host storage,
/// its locks and its fences.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Binding(Arc<str>);

impl Binding {
    /// The binding used when the host gives no installation binding (for example a revocation
    /// hook that runs without invocation context): one dedicated installation.
    pub const DEDICATED: &'static str = "dedicated";

    /// Parses `value`.
    ///
    /// # Errors
    /// [`BindingError`] when the value is empty, longer than 255 bytes, or contains a control
    /// character.
    pub fn parse(value: impl Into<String>) -> Result<Self, BindingError> {
        let value = value.into();
        if value.is_empty() {
            return Err(BindingError::Empty);
        }
        if value.len() > MAX_BINDING_LEN {
            return Err(BindingError::TooLong { len: value.len() });
        }
        if value.chars().any(char::is_control) {
            return Err(BindingError::ControlCharacter);
        }
        if let Some(normalized) = tenantry_kernel::id::nfc_form(&value) {
            return Err(BindingError::NotNormalized { normalized });
        }
        Ok(Self(value.into()))
    }

    /// The binding of a host that names none: [`Binding::DEDICATED`].
    pub fn dedicated() -> Self {
        Self(Self::DEDICATED.into())
    }

    /// The binding given by the host, or [`Binding::dedicated`] when it gives none.
    pub fn or_dedicated(binding: Option<Binding>) -> Self {
        binding.unwrap_or_else(Self::dedicated)
    }

    /// The binding as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Binding {
    type Error = BindingError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<Binding> for String {
    fn from(value: Binding) -> Self {
        value.0.as_ref().to_owned()
    }
}

/// The scope a write is serialized and fenced on, inside one installation binding.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeIdentity {
    /// The installation-wide scope, for writes that carry no per-object identity. Its fence
    /// blocks every scope of the binding.
    Installation,
    /// One object of the installation (a knowledge base, a memory scope, a collection);
    /// never empty.
    Object(String),
}

impl ScopeIdentity {
    /// The scope of `identity`; an empty string (like no identity at all) is the
    /// installation-wide scope, as in the reference platform.
    pub fn object(identity: impl Into<String>) -> Self {
        let identity = identity.into();
        if identity.is_empty() {
            Self::Installation
        } else {
            Self::Object(identity)
        }
    }

    /// The first non-empty identity among `candidates`, taken in priority order (for example a
    /// memory write's `scope_key`, then its `collection_id`, `kb_id`, `knowledge_base_id`);
    /// the installation-wide scope when none is present.
    pub fn first_present<'a>(candidates: impl IntoIterator<Item = Option<&'a str>>) -> Self {
        candidates
            .into_iter()
            .flatten()
            .find(|c| !c.is_empty())
            .map_or(Self::Installation, |c| Self::Object(c.to_owned()))
    }

    /// The identity string, or `None` for the installation-wide scope.
    pub fn as_object(&self) -> Option<&str> {
        match self {
            Self::Installation => None,
            Self::Object(id) => Some(id),
        }
    }

    /// The fence key of this scope.
    pub fn fence_key(&self) -> FenceKey {
        FenceKey::for_scope(self)
    }
}

impl fmt::Display for ScopeIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Installation => f.write_str("installation"),
            Self::Object(id) => write!(f, "{id:?}"),
        }
    }
}

/// A host-storage key holding a fence record: [`FENCE_KEY_PREFIX`] plus either the SHA-256 hex
/// of a scope identity or `installation`.
///
/// Shared text (`Arc<str>`): a clone is a reference count, so the runtime keys its locks and
/// caches with it without copying.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FenceKey(Arc<str>);

impl Serialize for FenceKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for FenceKey {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(|key| Self(key.into()))
    }
}

impl FenceKey {
    /// The fence key of `scope`.
    pub fn for_scope(scope: &ScopeIdentity) -> Self {
        match scope {
            ScopeIdentity::Installation => Self::installation(),
            ScopeIdentity::Object(identity) => Self(
                format!(
                    "{FENCE_KEY_PREFIX}{}",
                    hex::encode(Sha256::digest(identity.as_bytes()))
                )
                .into(),
            ),
        }
    }

    /// The installation-wide fence key [`INSTALLATION_FENCE_KEY`].
    pub fn installation() -> Self {
        static INSTALLATION: LazyLock<FenceKey> =
            LazyLock::new(|| FenceKey(INSTALLATION_FENCE_KEY.into()));
        INSTALLATION.clone()
    }

    /// Reads a stored key as a fence key: every key starting with [`FENCE_KEY_PREFIX`] is one
    /// (fail closed: an unexpected suffix still fences whatever wrote it); other keys are not.
    pub fn from_storage_key(key: &str) -> Option<Self> {
        key.starts_with(FENCE_KEY_PREFIX).then(|| Self(key.into()))
    }

    /// Whether this is the installation-wide key, which blocks every scope of its binding.
    pub fn is_installation(&self) -> bool {
        &*self.0 == INSTALLATION_FENCE_KEY
    }

    /// The key as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FenceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `../shared/cases/007-lookalike-ids.md`, for fence bindings: "é" as one code point is a
    /// binding; as "e" + combining acute it is refused with the NFC form to send instead.
    #[test]
    fn case_007_lookalike_bindings_are_refused_unless_nfc() {
        assert!(Binding::parse("inst-\u{e9}").is_ok());
        assert_eq!(
            Binding::parse("inst-e\u{301}"),
            Err(BindingError::NotNormalized {
                normalized: "inst-\u{e9}".to_owned()
            })
        );
    }

    #[test]
    fn fence_key_is_prefix_plus_sha256_of_identity() {
        let cases = [
            (
                ScopeIdentity::object("kb-1"),
                "ke.fence.v1.5373c3baa7d8a59141181da7d6da88b15964f8ea82420ec5f859c83167bebc77",
                false,
            ),
            (ScopeIdentity::Installation, INSTALLATION_FENCE_KEY, true),
            (ScopeIdentity::object(""), INSTALLATION_FENCE_KEY, true),
        ];
        for (scope, expected, installation) in cases {
            let key = scope.fence_key();
            assert_eq!(key.as_str(), expected, "{scope}");
            assert_eq!(key.is_installation(), installation, "{scope}");
        }
    }

    #[test]
    fn fence_key_matches_known_sha256_vector() {
        // sha256("abc") = ba7816bf...
        assert_eq!(
            ScopeIdentity::object("abc").fence_key().as_str(),
            "ke.fence.v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn distinct_identities_have_distinct_fence_keys() {
        let a = ScopeIdentity::object("kb-a").fence_key();
        let b = ScopeIdentity::object("kb-b").fence_key();
        assert_ne!(a, b);
        assert_ne!(a, FenceKey::installation());
    }

    #[test]
    fn scope_identity_takes_first_non_empty_candidate() {
        let cases: [(Vec<Option<&str>>, ScopeIdentity); 5] = [
            (vec![Some("s1"), Some("c1")], ScopeIdentity::object("s1")),
            (vec![None, Some("c1")], ScopeIdentity::object("c1")),
            (vec![Some(""), Some("c1")], ScopeIdentity::object("c1")),
            (vec![None, Some("")], ScopeIdentity::Installation),
            (vec![], ScopeIdentity::Installation),
        ];
        for (candidates, expected) in cases {
            assert_eq!(
                ScopeIdentity::first_present(candidates.clone()),
                expected,
                "{candidates:?}"
            );
        }
    }

    #[test]
    fn fence_key_from_storage_key_recognises_prefix_only() {
        let cases = [
            ("ke.fence.v1.installation", true),
            ("ke.fence.v1.abc", true),
            ("ke.fence.v1.", true),
            ("ke.config.v1.abc", false),
            ("ke.fence.v2.abc", false),
            ("", false),
        ];
        for (key, fence) in cases {
            assert_eq!(FenceKey::from_storage_key(key).is_some(), fence, "{key}");
        }
    }

    #[test]
    fn clear_receipt_key_is_no_fence_key() {
        let key = clear_receipt_key("abc");
        assert_eq!(
            key,
            "ke.fence-clear.v1.ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(FenceKey::from_storage_key(&key).is_none());
    }

    #[test]
    fn binding_parse_rules() {
        assert_eq!(Binding::parse(""), Err(BindingError::Empty));
        assert_eq!(
            Binding::parse("x".repeat(256)),
            Err(BindingError::TooLong { len: 256 })
        );
        assert_eq!(Binding::parse("a\nb"), Err(BindingError::ControlCharacter));
        assert_eq!(
            Binding::parse("ws-1/inst 2").map(|b| b.to_string()),
            Ok("ws-1/inst 2".into())
        );
        assert_eq!(Binding::or_dedicated(None).as_str(), "dedicated");
    }

    #[test]
    fn binding_serde_round_trip_validates() {
        let b = Binding::parse("inst-1").unwrap();
        let json = serde_json::to_string(&b).unwrap();
        assert_eq!(json, "\"inst-1\"");
        assert_eq!(serde_json::from_str::<Binding>(&json).unwrap(), b);
        assert!(serde_json::from_str::<Binding>("\"\"").is_err());
    }
}
