//! Error codes recorded on commands: one enum with stable string forms.
//!
//! A command's `last_error_code` (the column `tenantry_lifecycle_outbox.last_error_code`, the
//! admin API's `code` fields, the CLI's command list) is an [`ErrorCode`]. Each code Tenantry
//! defines or acts on is a variant whose string ([`ErrorCode::as_str`], `Display`, serde) is
//! fixed: it is what the database stores and the API shows, so a variant's string never
//! changes once released.
//!
//! The KnowledgeFS protocol's own codes (the `code` of an error answer) are not a closed set:
//! a remote may send any code. A code Tenantry gives no meaning to is carried verbatim as
//! [`ErrorCode::Other`], so it is stored and shown exactly as the remote sent it and a newer
//! remote needs no new Tenantry version. Parsing ([`FromStr`], `From<&str>`, serde) never
//! fails and maps a string to its named variant whenever one exists, so a code read back from
//! an old row, a remote's code and a code the saga wrote compare equal exactly when their
//! strings are equal.

use std::convert::Infallible;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Declares [`ErrorCode`]'s named variants with their strings, once.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $variant:ident => $text:literal,)*) => {
        /// A machine-readable error code recorded on a command (see the module documentation).
        ///
        /// The named variants are the codes Tenantry writes or acts on; [`ErrorCode::Other`]
        /// carries any other code (a remote's own code) verbatim. `Other` never holds the
        /// string of a named variant: every constructor maps such a string to its variant.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $variant,)*
            /// A code Tenantry defines no rule for, kept verbatim: a KnowledgeFS answer's own
            /// `code`, `KFS_HTTP_<status>` for an answer without an error body, or a code read
            /// back from a row written by another version.
            Other(OtherCode),
        }

        impl ErrorCode {
            /// Every named variant, in declaration order (for tests and documentation).
            pub const NAMED: &'static [ErrorCode] = &[$(ErrorCode::$variant,)*];

            /// The stable string form: what the database stores and the API shows.
            pub fn as_str(&self) -> &str {
                match self {
                    $(Self::$variant => $text,)*
                    Self::Other(code) => code.as_str(),
                }
            }

            /// The string of a named variant (`None` for [`ErrorCode::Other`]).
            pub fn named_str(&self) -> Option<&'static str> {
                match self {
                    $(Self::$variant => Some($text),)*
                    Self::Other(_) => None,
                }
            }

            /// The code whose string is `text`: its named variant, or [`ErrorCode::Other`].
            pub fn parse(text: &str) -> Self {
                match text {
                    $($text => Self::$variant,)*
                    other => Self::Other(OtherCode(other.to_owned())),
                }
            }
        }
    };
}

error_codes! {
    /// The remote deletion is accepted, draining or irreversible but not completed (a progress
    /// poll: never spends the attempt budget).
    RemoteDeletionPending => "REMOTE_DELETION_PENDING",
    /// The remote revoke watermark is below the command's revoke sequence (a progress poll).
    RemoteRevokeWatermarkLag => "REMOTE_REVOKE_WATERMARK_LAG",
    /// The operation is not dispatched by this version.
    UnsupportedOperation => "UNSUPPORTED_OPERATION",
    /// The stored payload does not have its operation's shape (dead-lettered).
    InvalidCommandPayload => "INVALID_COMMAND_PAYLOAD",
    /// The deletion identity could not be recovered and absence could not complete the
    /// deletion; also a KnowledgeFS answer (404) with this code.
    KnowledgeFsSpaceNotFound => "KNOWLEDGE_FS_SPACE_NOT_FOUND",
    /// A recovered identity lives in another namespace; also a KnowledgeFS answer (409).
    KnowledgeFsScopeMismatch => "KNOWLEDGE_FS_SCOPE_MISMATCH",
    /// The control space changed between the read and the settle; the next attempt re-reads it
    /// (a progress poll).
    ControlSpaceConflict => "CONTROL_SPACE_CONFLICT",
    /// A lookup found no space, but a provision request may still land remotely; the deletion
    /// looks up again until the grace period after the provision's last attempt has passed.
    RemoteAbsenceUnconfirmed => "REMOTE_ABSENCE_UNCONFIRMED",
    /// Recorded on a provision superseded by a deletion.
    SupersededByDelete => "SUPERSEDED_BY_DELETE",
    /// Recorded on a revocation found moot because its control space is being deleted or is
    /// deleted (the grant goes away with the knowledge space).
    ControlSpaceDeleting => "CONTROL_SPACE_DELETING",
    /// The control space moved on under the command; retried at once (the next attempt
    /// re-reads it).
    OwnershipLost => "OWNERSHIP_LOST",
    /// The state machine refused the change; retried at once.
    ForbiddenTransition => "FORBIDDEN_TRANSITION",
    /// A recovered deletion identity conflicts with the registered one: dead-lettered, an
    /// operator must reconcile.
    KnowledgeFsIdentityConflict => "KNOWLEDGE_FS_IDENTITY_CONFLICT",
    /// Recorded on a command an operator abandoned.
    AbandonedByOperator => "ABANDONED_BY_OPERATOR",
    /// Transport: the request never reached KnowledgeFS (connection refused, DNS, connect
    /// timeout); nothing happened remotely.
    RemoteUnavailable => "REMOTE_UNAVAILABLE",
    /// Transport: the request went out but its outcome is unknown (timeout after connecting,
    /// connection lost, unreadable answer).
    RemoteOutcomeUnknown => "REMOTE_OUTCOME_UNKNOWN",
    /// HTTP client: no call slot freed within the deadline; the request was not sent.
    RemoteClientSaturated => "REMOTE_CLIENT_SATURATED",
    /// HTTP client: a lookup answered both a space and an absence.
    KnowledgeFsLookupAmbiguous => "KNOWLEDGE_FS_LOOKUP_AMBIGUOUS",
    /// HTTP client: an error answer's body was larger than the client reads.
    KfsResponseTooLarge => "KFS_RESPONSE_TOO_LARGE",
    /// KnowledgeFS: the idempotency key was used with another request (422); permanent.
    IdempotencyKeyReused => "IDEMPOTENCY_KEY_REUSED",
    /// KnowledgeFS: the provisioning key belongs to another control space (409); permanent.
    ProvisioningKeyConflict => "PROVISIONING_KEY_CONFLICT",
    /// KnowledgeFS: provisioning a key whose space is being or was deleted (409); permanent.
    KnowledgeFsSpaceDeleted => "KNOWLEDGE_FS_SPACE_DELETED",
    /// The worker pool shut down while the attempt waited for a remote-call slot: handed back
    /// unsent, due at once (never the attempt that dead-letters a command).
    ShutdownBeforeCall => "SHUTDOWN_BEFORE_CALL",
    /// A remote answered with an error code that is not an upper-case identifier
    /// ([`is_identifier_code`]); the original, bounded, is quoted in the message (case 010).
    RemoteErrorCodeInvalid => "REMOTE_ERROR_CODE_INVALID",
}

/// Longest error code a remote may send and have kept as its code, in bytes (characters: the
/// code is ASCII): 64. See [`is_identifier_code`].
pub const MAX_CODE_LEN: usize = tenantry_kernel::text::MAX_CODE_BYTES;

/// The `code` label value of every code outside [`metric_label`]'s closed set.
pub const OTHER_CODE_LABEL: &str = "OTHER";

/// Codes of the KnowledgeFS lifecycle API v1 that Tenantry has no named variant for
/// (docs/protocol.md, "Errors and `Retry-After`"): metric labels keep them as they are.
pub const KNOWLEDGE_FS_PROTOCOL_CODES: [&str; 6] = [
    "INVALID_REQUEST",
    "IDEMPOTENCY_KEY_REQUIRED",
    "UNAUTHORIZED",
    "REVISION_AHEAD",
    "KFS_RATE_LIMITED",
    "KFS_UNAVAILABLE",
];

/// Codes the engine reports to metrics for a dispatch that ended without settling its command
/// (`tenantry_lifecycle_dispatch_errors_total`); they are never recorded on a command.
pub const DISPATCH_ERROR_CODES: [&str; 5] = [
    "LEASE_LOST",
    "LEASE_EXPIRED",
    "IDENTITY_CONFLICT",
    "STEP_REFUSED",
    "STORE_UNAVAILABLE",
];

/// Label values of `KFS_HTTP_<status>` codes (an answer without an error body), by class.
const HTTP_CLASS_LABELS: [&str; 5] = [
    "KFS_HTTP_1XX",
    "KFS_HTTP_2XX",
    "KFS_HTTP_3XX",
    "KFS_HTTP_4XX",
    "KFS_HTTP_5XX",
];

/// Whether `text` may stand as an error code a remote chose: an upper-case identifier, one
/// letter `A-Z` then at most 63 of `A-Z`, `0-9`, `_` (`^[A-Z][A-Z0-9_]{0,63}$`). Any other
/// code becomes [`ErrorCode::RemoteErrorCodeInvalid`] ([`bounded_error`]).
pub fn is_identifier_code(text: &str) -> bool {
    let bytes = text.as_bytes();
    matches!(bytes.first(), Some(b'A'..=b'Z'))
        && bytes.len() <= MAX_CODE_LEN
        && bytes
            .iter()
            .all(|b| matches!(b, b'A'..=b'Z' | b'0'..=b'9' | b'_'))
}

/// The error `(code, message)` as Tenantry stores it (case 010): what a remote says is data
/// of bounded size, never a control sequence.
///
/// - A code Tenantry names, or an [`ErrorCode::Other`] that [`is_identifier_code`], is kept;
///   any other code becomes [`ErrorCode::RemoteErrorCodeInvalid`], and the original (bounded
///   to [`MAX_CODE_LEN`] bytes, control characters removed) is quoted at the start of the
///   message.
/// - The message is [`tenantry_kernel::text::bounded`] to
///   [`MAX_MESSAGE_BYTES`](tenantry_kernel::text::MAX_MESSAGE_BYTES): control characters
///   removed, at most 2,048 bytes.
pub fn bounded_error(code: ErrorCode, message: &str) -> (ErrorCode, String) {
    use tenantry_kernel::text::{MAX_MESSAGE_BYTES, bounded};
    match code {
        ErrorCode::Other(other) if !is_identifier_code(other.as_str()) => {
            // Bound both parts before joining them: the inputs may be megabytes long.
            let original = bounded(other.as_str(), MAX_CODE_LEN);
            let message = bounded(message, MAX_MESSAGE_BYTES);
            let joined = format!(
                "remote error code {original:?} is not an upper-case identifier: {message}"
            );
            (
                ErrorCode::RemoteErrorCodeInvalid,
                bounded(&joined, MAX_MESSAGE_BYTES).into_owned(),
            )
        }
        code => (code, bounded(message, MAX_MESSAGE_BYTES).into_owned()),
    }
}

/// The value of the `code` label of Tenantry's metrics for the code string `code`, from a
/// closed set (case 010: a remote must not be able to create series): a named [`ErrorCode`]'s
/// string, a code of [`KNOWLEDGE_FS_PROTOCOL_CODES`] or [`DISPATCH_ERROR_CODES`],
/// `KFS_HTTP_<d>XX` for `KFS_HTTP_<status>`, and [`OTHER_CODE_LABEL`] for anything else (the
/// code itself is on the command).
pub fn metric_label(code: &str) -> &'static str {
    if let Some(named) = ErrorCode::parse(code).named_str() {
        return named;
    }
    if let Some(known) = KNOWLEDGE_FS_PROTOCOL_CODES
        .iter()
        .chain(DISPATCH_ERROR_CODES.iter())
        .find(|known| **known == code)
    {
        return known;
    }
    if let Some(status) = code.strip_prefix("KFS_HTTP_")
        && status.len() == 3
        && status.bytes().all(|b| b.is_ascii_digit())
        && let Some(label) = status
            .as_bytes()
            .first()
            .and_then(|d| HTTP_CLASS_LABELS.get(usize::from(d - b'0').wrapping_sub(1)))
    {
        return label;
    }
    OTHER_CODE_LABEL
}

/// The text of an [`ErrorCode::Other`]: a code Tenantry gives no meaning to, kept verbatim.
///
/// Built only by [`ErrorCode`]'s parsing, so it never holds the string of a named variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OtherCode(String);

impl OtherCode {
    /// The code as received.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ErrorCode {
    type Err = Infallible;

    /// Never fails: see [`ErrorCode::parse`].
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self::parse(text))
    }
}

impl From<&str> for ErrorCode {
    fn from(text: &str) -> Self {
        Self::parse(text)
    }
}

impl From<String> for ErrorCode {
    fn from(text: String) -> Self {
        Self::parse(&text)
    }
}

impl From<&ErrorCode> for ErrorCode {
    fn from(code: &ErrorCode) -> Self {
        code.clone()
    }
}

impl From<ErrorCode> for String {
    fn from(code: ErrorCode) -> Self {
        match code {
            ErrorCode::Other(OtherCode(text)) => text,
            named => named.as_str().to_owned(),
        }
    }
}

impl AsRef<str> for ErrorCode {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for ErrorCode {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for ErrorCode {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<ErrorCode> for &str {
    fn eq(&self, other: &ErrorCode) -> bool {
        *self == other.as_str()
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Self::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_code_round_trips_through_its_string() {
        for code in ErrorCode::NAMED {
            let text = code.as_str();
            assert_eq!(&ErrorCode::parse(text), code, "{text}");
            assert_eq!(code.to_string(), text);
            assert_eq!(text.parse::<ErrorCode>(), Ok(code.clone()));
            assert!(!matches!(code, ErrorCode::Other(_)));
        }
        let mut strings: Vec<&str> = ErrorCode::NAMED.iter().map(ErrorCode::as_str).collect();
        strings.sort_unstable();
        strings.dedup();
        assert_eq!(
            strings.len(),
            ErrorCode::NAMED.len(),
            "two variants share a string"
        );
    }

    #[test]
    fn the_strings_are_the_stored_ones() {
        // The database column and the admin API hold these exact strings: never change them.
        let table = [
            (ErrorCode::RemoteDeletionPending, "REMOTE_DELETION_PENDING"),
            (
                ErrorCode::RemoteRevokeWatermarkLag,
                "REMOTE_REVOKE_WATERMARK_LAG",
            ),
            (ErrorCode::UnsupportedOperation, "UNSUPPORTED_OPERATION"),
            (ErrorCode::InvalidCommandPayload, "INVALID_COMMAND_PAYLOAD"),
            (
                ErrorCode::KnowledgeFsSpaceNotFound,
                "KNOWLEDGE_FS_SPACE_NOT_FOUND",
            ),
            (
                ErrorCode::KnowledgeFsScopeMismatch,
                "KNOWLEDGE_FS_SCOPE_MISMATCH",
            ),
            (ErrorCode::ControlSpaceConflict, "CONTROL_SPACE_CONFLICT"),
            (
                ErrorCode::RemoteAbsenceUnconfirmed,
                "REMOTE_ABSENCE_UNCONFIRMED",
            ),
            (ErrorCode::SupersededByDelete, "SUPERSEDED_BY_DELETE"),
            (ErrorCode::ControlSpaceDeleting, "CONTROL_SPACE_DELETING"),
            (ErrorCode::OwnershipLost, "OWNERSHIP_LOST"),
            (ErrorCode::ForbiddenTransition, "FORBIDDEN_TRANSITION"),
            (
                ErrorCode::KnowledgeFsIdentityConflict,
                "KNOWLEDGE_FS_IDENTITY_CONFLICT",
            ),
            (ErrorCode::AbandonedByOperator, "ABANDONED_BY_OPERATOR"),
            (ErrorCode::RemoteUnavailable, "REMOTE_UNAVAILABLE"),
            (ErrorCode::RemoteOutcomeUnknown, "REMOTE_OUTCOME_UNKNOWN"),
            (ErrorCode::RemoteClientSaturated, "REMOTE_CLIENT_SATURATED"),
            (
                ErrorCode::KnowledgeFsLookupAmbiguous,
                "KNOWLEDGE_FS_LOOKUP_AMBIGUOUS",
            ),
            (ErrorCode::KfsResponseTooLarge, "KFS_RESPONSE_TOO_LARGE"),
            (ErrorCode::IdempotencyKeyReused, "IDEMPOTENCY_KEY_REUSED"),
            (
                ErrorCode::ProvisioningKeyConflict,
                "PROVISIONING_KEY_CONFLICT",
            ),
            (
                ErrorCode::KnowledgeFsSpaceDeleted,
                "KNOWLEDGE_FS_SPACE_DELETED",
            ),
            (ErrorCode::ShutdownBeforeCall, "SHUTDOWN_BEFORE_CALL"),
            (
                ErrorCode::RemoteErrorCodeInvalid,
                "REMOTE_ERROR_CODE_INVALID",
            ),
        ];
        assert_eq!(table.len(), ErrorCode::NAMED.len());
        for (code, text) in table {
            assert_eq!(code.as_str(), text);
        }
    }

    #[test]
    fn a_remote_code_is_kept_verbatim_and_a_known_string_is_never_other() {
        let remote = ErrorCode::from("KFS_RATE_LIMITED");
        assert!(matches!(&remote, ErrorCode::Other(c) if c.as_str() == "KFS_RATE_LIMITED"));
        assert_eq!(remote, "KFS_RATE_LIMITED");
        assert_eq!(String::from(remote), "KFS_RATE_LIMITED");
        // A remote sending a code Tenantry names gets the named variant.
        assert_eq!(
            ErrorCode::from("IDEMPOTENCY_KEY_REUSED".to_owned()),
            ErrorCode::IdempotencyKeyReused
        );
        // Old rows decode whatever they hold, even an empty string.
        assert_eq!(ErrorCode::parse("").as_str(), "");
    }

    #[test]
    fn case_010_only_upper_case_identifiers_are_kept_as_codes() {
        let table = [
            ("KFS_UNAVAILABLE", true),
            ("A", true),
            ("E404", true),
            ("KFS_HTTP_502", true),
            ("", false),
            ("kfs_unavailable", false),
            ("_LEADING", false),
            ("9LIVES", false),
            ("WITH SPACE", false),
            ("WITH-DASH", false),
            ("\u{1b}[2J", false),
            ("\u{c9}T\u{c9}", false),
        ];
        for (code, expected) in table {
            assert_eq!(is_identifier_code(code), expected, "{code:?}");
        }
        assert!(is_identifier_code(&"A".repeat(MAX_CODE_LEN)));
        assert!(!is_identifier_code(&"A".repeat(MAX_CODE_LEN + 1)));
    }

    #[test]
    fn case_010_remote_errors_are_bounded_before_they_are_stored() {
        use tenantry_kernel::text::MAX_MESSAGE_BYTES;
        // A well-formed code is kept; the message loses its escape sequence.
        let (code, message) = bounded_error(ErrorCode::from("KFS_BUSY"), "\u{1b}[2Jbusy");
        assert_eq!((code.as_str(), message.as_str()), ("KFS_BUSY", "[2Jbusy"));
        // A 200 KB code becomes the fixed code, the original quoted (bounded) in the message.
        let huge = "Q".repeat(200 * 1024);
        let (code, message) = bounded_error(ErrorCode::from(huge.as_str()), "refused");
        assert_eq!(code, ErrorCode::RemoteErrorCodeInvalid);
        assert!(message.starts_with("remote error code \"QQQQ"), "{message}");
        assert!(message.ends_with(": refused"), "{message}");
        assert!(message.len() < 200, "{}", message.len());
        // A lower-case code with controls, and a 700 KB message with an escape sequence.
        let long = format!("\u{1b}[2J{}", "m".repeat(700 * 1024));
        let (code, message) = bounded_error(ErrorCode::from("bad\ncode"), &long);
        assert_eq!(code, ErrorCode::RemoteErrorCodeInvalid);
        assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
        assert!(
            message.starts_with("remote error code \"bad code\""),
            "{message}"
        );
        assert!(!message.contains('\u{1b}'));
        // Named codes are never replaced.
        let (code, _) = bounded_error(ErrorCode::OwnershipLost, "x");
        assert_eq!(code, ErrorCode::OwnershipLost);
    }

    #[test]
    fn case_010_metric_labels_come_from_a_closed_set() {
        let table = [
            (
                "KNOWLEDGE_FS_SPACE_NOT_FOUND",
                "KNOWLEDGE_FS_SPACE_NOT_FOUND",
            ),
            ("REMOTE_ERROR_CODE_INVALID", "REMOTE_ERROR_CODE_INVALID"),
            ("KFS_UNAVAILABLE", "KFS_UNAVAILABLE"),
            ("LEASE_LOST", "LEASE_LOST"),
            ("LEASE_EXPIRED", "LEASE_EXPIRED"),
            ("STORE_UNAVAILABLE", "STORE_UNAVAILABLE"),
            ("KFS_HTTP_502", "KFS_HTTP_5XX"),
            ("KFS_HTTP_404", "KFS_HTTP_4XX"),
            ("KFS_HTTP_999", "OTHER"),
            ("KFS_HTTP_0", "OTHER"),
            ("KFS_HTTP_", "OTHER"),
            ("SOME_REMOTE_CODE", "OTHER"),
            ("", "OTHER"),
        ];
        for (code, label) in table {
            assert_eq!(metric_label(code), label, "{code:?}");
        }
        // Fifty distinct remote codes share one label.
        let labels: std::collections::BTreeSet<&str> = (0..50)
            .map(|i| metric_label(&format!("REMOTE_CODE_{i}")))
            .collect();
        assert_eq!(labels.len(), 1);
        // Every named code is its own label.
        for code in ErrorCode::NAMED {
            assert_eq!(metric_label(code.as_str()), code.as_str());
        }
    }

    #[test]
    fn serde_uses_the_string_form() {
        let json = serde_json::to_string(&ErrorCode::OwnershipLost).unwrap();
        assert_eq!(json, "\"OWNERSHIP_LOST\"");
        let back: ErrorCode = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ErrorCode::OwnershipLost);
        let other: ErrorCode = serde_json::from_str("\"KFS_HTTP_502\"").unwrap();
        assert_eq!(serde_json::to_string(&other).unwrap(), "\"KFS_HTTP_502\"");
    }
}
