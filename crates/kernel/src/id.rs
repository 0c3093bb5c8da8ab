//! Validated string identifiers.
//!
//! Every identifier is a newtype over `String` that is non-empty, at most
//! [`MAX_ID_LEN`] bytes long, and free of whitespace, control characters, invisible Unicode
//! format characters (zero-width and bidirectional controls, which can spoof an id in logs)
//! and `/` (ids are path segments of the HTTP APIs), and in Unicode Normalization Form C
//! (NFC), and not `.` or `..`. Parsing is the only way to build one, so a value of these types
//! is always valid.
//!
//! Dot-segment rule (case 009): every id is sent to a remote as one URL path segment, and a URL
//! resolves the segments `.` and `..` away (RFC 3986, section 5.2.4; the WHATWG URL parser
//! also drops them when a client pushes them as segments), so `/v1/namespaces/./spaces` reaches
//! `/v1/namespaces/spaces`, another resource. Such an id is refused with
//! [`IdError::DotSegment`]. Every other accepted id is sent byte for byte: the HTTP clients
//! percent-encode each segment (every byte but `A-Z a-z 0-9 - . _ ~`), `/` is refused, and
//! whitespace and control characters (which URL parsers strip or trim) are refused.
//!
//! NFC rule (case 007): `é` can be sent as one code point (U+00E9, NFC) or as `e` + U+0301
//! (NFD); both look the same in every listing but are different byte strings, so they would
//! name two different resources. An id that is not in NFC is **refused** with
//! [`IdError::NotNormalized`], never normalized silently: ids are opaque keys shared with
//! KnowledgeFS and the directory provider, and a silently rewritten id would no longer be the
//! byte string the caller (or the provider) holds. Equality of ids stays byte equality.

/// Longest accepted identifier, in bytes (UTF-8).
pub const MAX_ID_LEN: usize = 255;

/// Why a string was refused as an identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The caller passed an empty string.
    #[error("{kind} must not be empty")]
    Empty {
        /// Which identifier was being parsed, e.g. `tenant_id`.
        kind: &'static str,
    },
    /// The caller passed a string longer than [`MAX_ID_LEN`] bytes.
    #[error("{kind} is {len} bytes long; the limit is {MAX_ID_LEN} bytes")]
    TooLong {
        /// Which identifier was being parsed.
        kind: &'static str,
        /// Length of the refused value in bytes.
        len: usize,
    },
    /// The caller passed whitespace, a control or invisible format character, or `/`.
    #[error("{kind} must not contain whitespace, control or invisible format characters, or '/'")]
    InvalidCharacter {
        /// Which identifier was being parsed.
        kind: &'static str,
    },
    /// The caller passed `.` or `..`: a URL path resolves these segments away, so the id
    /// cannot reach a remote as one path segment (case 009).
    #[error(
        "{kind} must not be '.' or '..' (a URL path resolves these away, so the id would address another resource); choose another id"
    )]
    DotSegment {
        /// Which identifier was being parsed.
        kind: &'static str,
    },
    /// The caller passed a string that is not in Unicode Normalization Form C (for example
    /// `e` followed by a combining accent instead of the precomposed `é`).
    #[error(
        "{kind} is not in Unicode normalization form NFC (it contains decomposed characters, e.g. 'e' + a combining accent); send the NFC form, which is {normalized:?}"
    )]
    NotNormalized {
        /// Which identifier was being parsed.
        kind: &'static str,
        /// The NFC form of the refused value, to send instead.
        normalized: String,
    },
}

/// Checks `value` against the identifier rules; `kind` names it in the error.
///
/// # Errors
/// [`IdError`] naming the broken rule.
pub fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > MAX_ID_LEN {
        return Err(IdError::TooLong {
            kind,
            len: value.len(),
        });
    }
    // ASCII (every id Tenantry mints, and the ids of most platforms): a byte test decides the
    // character rule, and ASCII text is always in NFC. The result is the
    // same as the general path's (test `the_ascii_path_judges_every_byte_as_the_general_one`).
    let ascii = value.is_ascii();
    let forbidden = if ascii {
        value.bytes().any(is_forbidden_ascii)
    } else {
        value.chars().any(is_forbidden)
    };
    if forbidden {
        return Err(IdError::InvalidCharacter { kind });
    }
    if is_dot_segment(value) {
        return Err(IdError::DotSegment { kind });
    }
    if !ascii && !unicode_normalization::is_nfc(value) {
        use unicode_normalization::UnicodeNormalization as _;
        return Err(IdError::NotNormalized {
            kind,
            normalized: value.nfc().collect(),
        });
    }
    Ok(())
}

/// Whether `value` is a URL dot segment (`.` or `..`), which a URL path resolves away instead
/// of sending. Ids that contain dots among other characters (`...`, `.a`, `a..b`) are ordinary
/// segments and are accepted.
pub fn is_dot_segment(value: &str) -> bool {
    matches!(value, "." | "..")
}

/// The NFC form of `value` when `value` is not in Unicode NFC (`None` when it is): the one
/// normalization rule for every identifier Tenantry accepts (docs/protocol.md, section 0).
pub fn nfc_form(value: &str) -> Option<String> {
    if unicode_normalization::is_nfc(value) {
        None
    } else {
        use unicode_normalization::UnicodeNormalization as _;
        Some(value.nfc().collect())
    }
}

/// Whether `c` may not appear in an identifier: whitespace, control characters, `/`, and the
/// invisible format characters of Unicode category Cf that matter for spoofing (soft hyphen,
/// zero-width and joiner characters, bidirectional marks, embeddings, overrides and isolates,
/// word joiner and invisible operators, byte-order mark).
pub fn is_forbidden(c: char) -> bool {
    c.is_whitespace() || c.is_control() || c == '/' || is_invisible_format(c)
}

/// [`is_forbidden`] for an ASCII byte: the control characters (`0x00..=0x1F`, `0x7F`), the
/// space (the ASCII whitespace is `0x09..=0x0D` and `0x20`) and `/`.
fn is_forbidden_ascii(b: u8) -> bool {
    b <= b' ' || b == 0x7F || b == b'/'
}

/// Whether `c` is one of the invisible format characters of Unicode category Cf that matter
/// for spoofing (see [`is_forbidden`]); [`crate::text::bounded`] removes them from shown text.
pub fn is_invisible_format(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

/// Defines a validated string identifier type (see the module docs for the rules): parse,
/// `as_str`, `into_string`, `Display`, serde as a string (validated on input), `AsRef<str>`.
/// Used by every crate that needs id newtypes.
#[macro_export]
macro_rules! define_id {
    ($(#[$meta:meta])* $name:ident, $kind:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Name of this identifier in error messages and wire formats.
            pub const KIND: &'static str = $kind;

            /// Parses `value`.
            ///
            /// # Errors
            /// `IdError` when the value is empty, longer than 255 bytes, contains
            /// whitespace, control or invisible format characters or `/`, is `.` or `..`,
            /// or is not in Unicode NFC.
            pub fn parse(value: impl Into<String>) -> Result<Self, $crate::IdError> {
                let value = value.into();
                $crate::id::validate($kind, &value)?;
                Ok(Self(value))
            }

            /// The identifier as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Consumes the identifier and returns its string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = $crate::IdError;
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

        $crate::__id_openapi_schema!($name);
    };
}

/// Without the `openapi` feature: nothing (with it, the macro of the same name in
/// `openapi.rs` gives every identifier the schema `Id`).
#[cfg(not(feature = "openapi"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __id_openapi_schema {
    ($name:ident) => {};
}

define_id!(
    /// The tenant that owns a control space; also the KnowledgeFS namespace id.
    TenantId,
    "tenant_id"
);
define_id!(
    /// A control space: the local record of one remote knowledge space.
    ControlSpaceId,
    "control_space_id"
);
define_id!(
    /// One lifecycle operation (provision, delete or revoke) of a control space.
    OperationId,
    "operation_id"
);
define_id!(
    /// One row of the lifecycle outbox.
    CommandId,
    "command_id"
);
define_id!(
    /// The caller-chosen key that makes a request idempotent.
    IdempotencyKey,
    "idempotency_key"
);
define_id!(
    /// The key on which the remote provision is idempotent; lost-ACK recovery looks it up.
    ProvisioningKey,
    "provisioning_key"
);
define_id!(
    /// The remote knowledge space assigned by KnowledgeFS.
    KnowledgeSpaceId,
    "knowledge_space_id"
);
define_id!(
    /// A capability grant on a knowledge space.
    GrantId,
    "grant_id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ascii_path_judges_every_byte_as_the_general_one() {
        for b in 0u8..=0x7F {
            assert_eq!(
                is_forbidden_ascii(b),
                is_forbidden(char::from(b)),
                "byte {b:#04x}"
            );
            // The same verdict through `validate`, inside an id, for both paths (the `é`
            // makes the second id non-ASCII).
            let ascii = format!("a{}b", char::from(b));
            let general = format!("é{}b", char::from(b));
            assert_eq!(
                validate("tenant_id", &ascii),
                validate("tenant_id", &general),
                "byte {b:#04x}"
            );
        }
    }

    #[test]
    fn parse_accepts_and_refuses_per_rule() {
        let cases: &[(&str, Result<(), IdError>)] = &[
            ("t-1", Ok(())),
            ("a", Ok(())),
            ("", Err(IdError::Empty { kind: "tenant_id" })),
            ("a b", Err(IdError::InvalidCharacter { kind: "tenant_id" })),
            (
                "a\u{7}",
                Err(IdError::InvalidCharacter { kind: "tenant_id" }),
            ),
            (
                "a\u{202E}b",
                Err(IdError::InvalidCharacter { kind: "tenant_id" }),
            ),
            (
                "a\u{200B}b",
                Err(IdError::InvalidCharacter { kind: "tenant_id" }),
            ),
            (
                "a\u{FEFF}",
                Err(IdError::InvalidCharacter { kind: "tenant_id" }),
            ),
            ("a/b", Err(IdError::InvalidCharacter { kind: "tenant_id" })),
            ("café-ü", Ok(())),
        ];
        for (input, expected) in cases {
            assert_eq!(
                TenantId::parse(*input).map(|_| ()),
                *expected,
                "input {input:?}"
            );
        }
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert_eq!(
            TenantId::parse(long),
            Err(IdError::TooLong {
                kind: "tenant_id",
                len: MAX_ID_LEN + 1
            })
        );
        assert!(TenantId::parse("x".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn case_009_dot_segment_ids_are_refused() {
        let dot = |kind| Err(IdError::DotSegment { kind });
        let cases: &[(&str, Result<(), IdError>)] = &[
            (".", dot("control_space_id")),
            ("..", dot("control_space_id")),
            // Dots among other characters are ordinary path segments.
            ("...", Ok(())),
            (".a", Ok(())),
            ("a.", Ok(())),
            ("a..b", Ok(())),
            (".hidden", Ok(())),
            // Percent-encoded dots are sent as `%252e`: the `%` is encoded, never decoded.
            ("%2e", Ok(())),
            ("%2E%2E", Ok(())),
        ];
        for (input, expected) in cases {
            assert_eq!(
                ControlSpaceId::parse(*input).map(|_| ()),
                *expected,
                "input {input:?}"
            );
        }
        let message = TenantId::parse(".").unwrap_err().to_string();
        assert!(
            message.starts_with("tenant_id must not be '.'"),
            "{message}"
        );
        // Serde input goes through the same rule.
        assert!(serde_json::from_str::<GrantId>("\"..\"").is_err());
    }

    #[test]
    fn case_007_lookalike_ids_are_refused_unless_nfc() {
        let composed = "cs-\u{00E9}";
        let decomposed = "cs-e\u{0301}";
        assert!(ControlSpaceId::parse(composed).is_ok());
        let err = ControlSpaceId::parse(decomposed).unwrap_err();
        assert_eq!(
            err,
            IdError::NotNormalized {
                kind: "control_space_id",
                normalized: composed.to_owned(),
            }
        );
        let message = err.to_string();
        assert!(
            message.contains("control_space_id") && message.contains("NFC"),
            "{message}"
        );
        // Serde input goes through the same rule.
        assert!(serde_json::from_str::<TenantId>(&format!("\"{decomposed}\"")).is_err());
        // Hangul syllables decomposed into jamo are not NFC either.
        assert!(TenantId::parse("\u{1100}\u{1161}").is_err());
        assert!(TenantId::parse("\u{AC00}").is_ok());
    }

    #[test]
    fn serde_round_trip_validates() {
        let id = ControlSpaceId::parse("cs-1").unwrap();
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"cs-1\"");
        assert_eq!(serde_json::from_str::<ControlSpaceId>(&json).unwrap(), id);
        assert!(serde_json::from_str::<ControlSpaceId>("\"\"").is_err());
    }
}
