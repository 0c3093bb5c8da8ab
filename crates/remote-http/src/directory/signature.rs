//! Response signatures of Directory API v1: Ed25519 over a canonical string that binds the
//! request (method, path, query), the signing time and the body, with the signing key named by
//! id so several keys can be trusted during a rotation.
//!
//! Headers of every `2xx` directory response:
//! - [`KEY_ID_HEADER`]: id of the signing key;
//! - [`TIMESTAMP_HEADER`]: signing time, Unix seconds (decimal);
//! - [`SIGNATURE_HEADER`]: the 64-byte Ed25519 signature, lowercase hex.
//!
//! The signed bytes are [`signed_message`]:
//! `tenantry-directory-v2\n{METHOD}\n{path}\n{query}\n{timestamp}\n{body}`.
//! A response is trusted only when all three headers are present and well formed, the key id
//! is trusted, the timestamp is within the allowed skew of the local clock, and the signature
//! verifies (strict verification) over exactly the request that was sent and the body that
//! was received. Binding the request means a signed answer cannot be replayed as the answer to
//! another request (an old empty events page for a later `after`, a snapshot body on the
//! events route). Context `v1` (timestamp and body only) is no longer accepted.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use ed25519_dalek::{Signature, VerifyingKey};

/// Header naming the signing key.
pub const KEY_ID_HEADER: &str = "X-Directory-Key-Id";
/// Header with the signing time in Unix seconds.
pub const TIMESTAMP_HEADER: &str = "X-Directory-Timestamp";
/// Header with the hex Ed25519 signature.
pub const SIGNATURE_HEADER: &str = "X-Directory-Signature";
/// Default largest difference between the signing time and the local clock.
pub const DEFAULT_MAX_SKEW: Duration = Duration::from_secs(300);
/// Domain-separation prefix of the signed message; the version names the canonical form
/// (`v2`: request, timestamp and body).
pub const SIGNATURE_CONTEXT: &str = "tenantry-directory-v2";

/// The request a response answers, as it is bound into the signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedRequest<'a> {
    /// HTTP method, upper case (`GET`, `POST`).
    pub method: &'a str,
    /// The Directory API path, starting at `/v1/`, percent-encoded as sent (without the base
    /// URL's own path prefix, which a reverse proxy may strip).
    pub path: &'a str,
    /// The raw query string without `?`, as sent; empty when there is none.
    pub query: &'a str,
}

/// The bytes signed for a response:
/// `tenantry-directory-v2\n{METHOD}\n{path}\n{query}\n{timestamp}\n` followed by the body
/// exactly as sent.
pub fn signed_message(request: &SignedRequest<'_>, timestamp: i64, body: &[u8]) -> Vec<u8> {
    let mut message = format!(
        "{SIGNATURE_CONTEXT}\n{}\n{}\n{}\n{timestamp}\n",
        request.method, request.path, request.query
    )
    .into_bytes();
    message.extend_from_slice(body);
    message
}

/// Why a directory response's signature is not trusted. Nothing of such a response is used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// A signature header is absent: the response is unsigned.
    #[error("directory response is unsigned: header {header} is missing")]
    Missing {
        /// The missing header.
        header: &'static str,
    },
    /// A signature header does not parse.
    #[error("directory response header {header} is malformed: {reason}")]
    Malformed {
        /// The malformed header.
        header: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The signing key is not among the trusted keys (rotated out, or never trusted).
    #[error(
        "directory response is signed by untrusted key id {key_id:?}; add its public key to the trusted keys if the rotation is legitimate"
    )]
    UnknownKey {
        /// The key id the response named.
        key_id: String,
    },
    /// The signing time is too far from the local clock (replay, or clock drift).
    #[error(
        "directory response timestamp {timestamp} is {skew_secs}s away from the local clock; at most {max_secs}s is allowed (check clocks)"
    )]
    Skew {
        /// The response's timestamp.
        timestamp: i64,
        /// Absolute difference to the local clock, seconds.
        skew_secs: u64,
        /// The allowed maximum, seconds.
        max_secs: u64,
    },
    /// The signature does not verify over the request sent and the body received.
    #[error(
        "directory response signature by key {key_id:?} does not verify over the request sent and the body received (tampered, replayed from another request, or signed with an older signature version)"
    )]
    BadSignature {
        /// The key id the response named.
        key_id: String,
    },
    /// A configured public key is not a valid Ed25519 point.
    #[error("trusted directory key {key_id:?} is not a valid Ed25519 public key: {reason}")]
    InvalidPublicKey {
        /// The configured key id.
        key_id: String,
        /// What is wrong.
        reason: String,
    },
}

/// The public keys a client accepts, by key id.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TrustedKeys {
    keys: BTreeMap<String, VerifyingKey>,
}

impl fmt::Debug for TrustedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.keys.keys()).finish()
    }
}

impl TrustedKeys {
    /// No trusted key (every response is refused).
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts `public_key` (32 bytes) under `key_id`.
    ///
    /// # Errors
    /// [`SignatureError::InvalidPublicKey`] when the bytes are not a valid Ed25519 key.
    pub fn insert(
        &mut self,
        key_id: impl Into<String>,
        public_key: &[u8; 32],
    ) -> Result<(), SignatureError> {
        let key_id = key_id.into();
        let key =
            VerifyingKey::from_bytes(public_key).map_err(|e| SignatureError::InvalidPublicKey {
                key_id: key_id.clone(),
                reason: e.to_string(),
            })?;
        self.keys.insert(key_id, key);
        Ok(())
    }

    /// Trusts the hex-encoded `public_key` under `key_id`.
    ///
    /// # Errors
    /// [`SignatureError::InvalidPublicKey`] when it is not 64 hex digits of a valid key.
    pub fn insert_hex(
        &mut self,
        key_id: impl Into<String>,
        public_key: &str,
    ) -> Result<(), SignatureError> {
        let key_id = key_id.into();
        let mut bytes = [0_u8; 32];
        hex::decode_to_slice(public_key.trim(), &mut bytes).map_err(|e| {
            SignatureError::InvalidPublicKey {
                key_id: key_id.clone(),
                reason: e.to_string(),
            }
        })?;
        self.insert(key_id, &bytes)
    }

    /// Number of trusted keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is trusted.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The raw signature headers of one response (`None` when absent or not visible ASCII).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SignatureHeaders<'a> {
    /// [`KEY_ID_HEADER`].
    pub key_id: Option<&'a str>,
    /// [`TIMESTAMP_HEADER`].
    pub timestamp: Option<&'a str>,
    /// [`SIGNATURE_HEADER`].
    pub signature: Option<&'a str>,
}

/// Verifies a response: headers present and well formed, key trusted, timestamp within
/// `max_skew` of `now_unix`, signature valid over `request` and `body`. Returns the signing
/// key id.
///
/// This copies `body` into the signed message; [`check_headers`] and
/// [`PendingSignature::verify`] do the same checks over a buffer read after the prefix
/// (what the HTTP client does, so a large snapshot body is held once, not twice).
///
/// # Errors
/// The first [`SignatureError`] found, in that order.
pub fn verify(
    headers: &SignatureHeaders<'_>,
    request: &SignedRequest<'_>,
    body: &[u8],
    trusted: &TrustedKeys,
    now_unix: i64,
    max_skew: Duration,
) -> Result<String, SignatureError> {
    let pending = check_headers(headers, request, trusted, now_unix, max_skew)?;
    let mut message = pending.message_prefix();
    message.extend_from_slice(body);
    pending.verify(&message)
}

/// A response whose signature headers passed every check but the signature itself: what
/// [`check_headers`] returns before the body is read.
#[derive(Debug, Clone)]
pub struct PendingSignature {
    key_id: String,
    key: VerifyingKey,
    signature: Signature,
    prefix: Vec<u8>,
}

impl PendingSignature {
    /// The signed message's bytes before the body ([`signed_message`] of an empty body):
    /// read the body into a buffer that starts with them and pass it to
    /// [`verify`](Self::verify).
    pub fn message_prefix(&self) -> Vec<u8> {
        self.prefix.clone()
    }

    /// The length of [`message_prefix`](Self::message_prefix), bytes: where the body starts
    /// in the message.
    pub fn prefix_len(&self) -> usize {
        self.prefix.len()
    }

    /// Checks the signature (strict Ed25519 verification) over `message`, the prefix followed
    /// by the body exactly as received. Returns the signing key id.
    ///
    /// # Errors
    /// [`SignatureError::BadSignature`] when it does not verify, also when `message` does not
    /// start with the prefix.
    pub fn verify(self, message: &[u8]) -> Result<String, SignatureError> {
        let bad = || SignatureError::BadSignature {
            key_id: self.key_id.clone(),
        };
        if !message.starts_with(&self.prefix) {
            return Err(bad());
        }
        self.key
            .verify_strict(message, &self.signature)
            .map_err(|_| bad())?;
        Ok(self.key_id)
    }
}

/// The checks of [`verify`] that need no body: headers present and well formed, key trusted,
/// timestamp within `max_skew` of `now_unix`.
///
/// # Errors
/// The first [`SignatureError`] found, in the order of [`verify`].
pub fn check_headers(
    headers: &SignatureHeaders<'_>,
    request: &SignedRequest<'_>,
    trusted: &TrustedKeys,
    now_unix: i64,
    max_skew: Duration,
) -> Result<PendingSignature, SignatureError> {
    let key_id = headers.key_id.ok_or(SignatureError::Missing {
        header: KEY_ID_HEADER,
    })?;
    let timestamp = headers.timestamp.ok_or(SignatureError::Missing {
        header: TIMESTAMP_HEADER,
    })?;
    let signature = headers.signature.ok_or(SignatureError::Missing {
        header: SIGNATURE_HEADER,
    })?;
    let timestamp: i64 = timestamp
        .trim()
        .parse()
        .map_err(|e: std::num::ParseIntError| SignatureError::Malformed {
            header: TIMESTAMP_HEADER,
            reason: e.to_string(),
        })?;
    let mut sig_bytes = [0_u8; 64];
    hex::decode_to_slice(signature.trim(), &mut sig_bytes).map_err(|e| {
        SignatureError::Malformed {
            header: SIGNATURE_HEADER,
            reason: e.to_string(),
        }
    })?;
    let key = trusted
        .keys
        .get(key_id)
        .ok_or_else(|| SignatureError::UnknownKey {
            key_id: key_id.to_owned(),
        })?;
    let skew_secs = now_unix.abs_diff(timestamp);
    if skew_secs > max_skew.as_secs() {
        return Err(SignatureError::Skew {
            timestamp,
            skew_secs,
            max_secs: max_skew.as_secs(),
        });
    }
    Ok(PendingSignature {
        key_id: key_id.to_owned(),
        key: *key,
        signature: Signature::from_bytes(&sig_bytes),
        prefix: signed_message(request, timestamp, &[]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    const NOW: i64 = 1_800_000_000;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn trusted() -> TrustedKeys {
        let mut t = TrustedKeys::new();
        t.insert("k1", key(1).verifying_key().as_bytes()).unwrap();
        t.insert_hex("k2", &hex::encode(key(2).verifying_key().as_bytes()))
            .unwrap();
        t
    }

    const REQUEST: SignedRequest<'static> = SignedRequest {
        method: "GET",
        path: "/v1/instances/inst-1/directory/events",
        query: "after=10&limit=100",
    };

    fn sign(k: &SigningKey, ts: i64, body: &[u8]) -> String {
        hex::encode(k.sign(&signed_message(&REQUEST, ts, body)).to_bytes())
    }

    fn check(key_id: &str, ts: i64, sig: &str, body: &[u8]) -> Result<String, SignatureError> {
        let ts = ts.to_string();
        let headers = SignatureHeaders {
            key_id: Some(key_id),
            timestamp: Some(&ts),
            signature: Some(sig),
        };
        verify(&headers, &REQUEST, body, &trusted(), NOW, DEFAULT_MAX_SKEW)
    }

    #[test]
    fn valid_signature_by_any_trusted_key_verifies() {
        let body = br#"{"cursor":1}"#;
        assert_eq!(
            check("k1", NOW, &sign(&key(1), NOW, body), body).unwrap(),
            "k1"
        );
        assert_eq!(
            check("k2", NOW - 300, &sign(&key(2), NOW - 300, body), body).unwrap(),
            "k2"
        );
    }

    #[test]
    fn missing_signature_header_is_unsigned() {
        let headers = SignatureHeaders {
            key_id: Some("k1"),
            timestamp: Some("1"),
            signature: None,
        };
        assert_eq!(
            verify(&headers, &REQUEST, b"{}", &trusted(), NOW, DEFAULT_MAX_SKEW),
            Err(SignatureError::Missing {
                header: SIGNATURE_HEADER
            })
        );
        let none = SignatureHeaders::default();
        assert!(matches!(
            verify(&none, &REQUEST, b"{}", &trusted(), NOW, DEFAULT_MAX_SKEW),
            Err(SignatureError::Missing { .. })
        ));
    }

    #[test]
    fn a_body_read_after_the_prefix_verifies_in_place() {
        let body = br#"{"cursor":1}"#;
        let signature = sign(&key(1), NOW, body);
        let ts = NOW.to_string();
        let headers = SignatureHeaders {
            key_id: Some("k1"),
            timestamp: Some(&ts),
            signature: Some(&signature),
        };
        let pending = check_headers(&headers, &REQUEST, &trusted(), NOW, DEFAULT_MAX_SKEW).unwrap();
        let mut message = pending.message_prefix();
        assert_eq!(message, signed_message(&REQUEST, NOW, b""));
        assert_eq!(pending.prefix_len(), message.len());
        message.extend_from_slice(body);
        assert_eq!(pending.clone().verify(&message).unwrap(), "k1");
        // The same bytes without the prefix (or another body) do not verify.
        assert!(matches!(
            pending.clone().verify(body),
            Err(SignatureError::BadSignature { .. })
        ));
        let mut tampered = pending.message_prefix();
        tampered.extend_from_slice(br#"{"cursor":2}"#);
        assert!(matches!(
            pending.verify(&tampered),
            Err(SignatureError::BadSignature { .. })
        ));
    }

    #[test]
    fn malformed_headers_are_refused() {
        let body = b"{}";
        assert!(matches!(
            check("k1", NOW, "zz", body),
            Err(SignatureError::Malformed {
                header: SIGNATURE_HEADER,
                ..
            })
        ));
        let headers = SignatureHeaders {
            key_id: Some("k1"),
            timestamp: Some("yesterday"),
            signature: Some(&"00".repeat(64)),
        };
        assert!(matches!(
            verify(&headers, &REQUEST, body, &trusted(), NOW, DEFAULT_MAX_SKEW),
            Err(SignatureError::Malformed {
                header: TIMESTAMP_HEADER,
                ..
            })
        ));
    }

    #[test]
    fn unknown_key_id_is_refused() {
        let body = b"{}";
        let err = check("k9", NOW, &sign(&key(9), NOW, body), body).unwrap_err();
        assert_eq!(
            err,
            SignatureError::UnknownKey {
                key_id: "k9".into()
            }
        );
    }

    #[test]
    fn key_id_must_match_the_signing_key() {
        let body = b"{}";
        let err = check("k1", NOW, &sign(&key(2), NOW, body), body).unwrap_err();
        assert_eq!(
            err,
            SignatureError::BadSignature {
                key_id: "k1".into()
            }
        );
    }

    #[test]
    fn tampered_body_or_timestamp_is_a_bad_signature() {
        let body = br#"{"cursor":1}"#;
        let sig = sign(&key(1), NOW, body);
        assert!(matches!(
            check("k1", NOW, &sig, br#"{"cursor":2}"#),
            Err(SignatureError::BadSignature { .. })
        ));
        assert!(matches!(
            check("k1", NOW - 1, &sig, body),
            Err(SignatureError::BadSignature { .. })
        ));
    }

    #[test]
    fn signature_binds_method_path_and_query() {
        let body = br#"{"cursor":10,"events":[]}"#;
        let sig = sign(&key(1), NOW, body);
        let ts = NOW.to_string();
        let headers = SignatureHeaders {
            key_id: Some("k1"),
            timestamp: Some(&ts),
            signature: Some(&sig),
        };
        let verify_for = |request: SignedRequest<'_>| {
            verify(&headers, &request, body, &trusted(), NOW, DEFAULT_MAX_SKEW)
        };
        assert_eq!(verify_for(REQUEST).as_deref(), Ok("k1"));
        for other in [
            SignedRequest {
                query: "after=12&limit=100",
                ..REQUEST
            },
            SignedRequest {
                path: "/v1/instances/inst-2/directory/events",
                ..REQUEST
            },
            SignedRequest {
                method: "POST",
                ..REQUEST
            },
        ] {
            assert!(
                matches!(verify_for(other), Err(SignatureError::BadSignature { .. })),
                "{other:?}"
            );
        }
    }

    #[test]
    fn version_1_signatures_are_no_longer_accepted() {
        let body = b"{}";
        let mut v1 = format!("tenantry-directory-v1\n{NOW}\n").into_bytes();
        v1.extend_from_slice(body);
        let sig = hex::encode(key(1).sign(&v1).to_bytes());
        assert!(matches!(
            check("k1", NOW, &sig, body),
            Err(SignatureError::BadSignature { .. })
        ));
    }

    #[test]
    fn skew_beyond_the_bound_is_refused_both_ways() {
        let body = b"{}";
        for ts in [NOW - 301, NOW + 301] {
            let err = check("k1", ts, &sign(&key(1), ts, body), body).unwrap_err();
            assert!(matches!(
                err,
                SignatureError::Skew {
                    skew_secs: 301,
                    max_secs: 300,
                    ..
                }
            ));
        }
        assert!(check("k1", NOW + 300, &sign(&key(1), NOW + 300, body), body).is_ok());
    }

    #[test]
    fn invalid_public_key_is_refused() {
        let mut t = TrustedKeys::new();
        assert!(matches!(
            t.insert_hex("bad", "abcd"),
            Err(SignatureError::InvalidPublicKey { .. })
        ));
        assert!(t.is_empty());
    }
}
