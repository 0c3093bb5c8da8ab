//! Connector state kept in host storage: knowledge-base configuration and document mappings.
//!
//! These are the record rules; the async store over the host-storage port lives in
//! `tenantry_engine::scoped_writes::connector`.
//!
//! Knowledge-base configuration:
//! - stored under [`config_key`]: `ke.config.v1.` plus the SHA-256 hex of the KB id;
//! - a JSON object of at most [`MAX_CONFIG_BYTES`] bytes (UTF-8, compact JSON); larger
//!   configurations are refused before anything is written;
//! - a deleted KB is a JSON null tombstone, so absence is explicit without a delete call;
//! - absence is established only by an authoritative key listing: a key missing from a
//!   listing that succeeded means [`KbConfigState::Absent`]; a failed listing is an error;
//! - a persisted value that is neither an object nor null is an error, never a default.
//!
//! Document mappings (host document id to upstream document id, per KB):
//! - stored under [`document_key`]: `ke.document.v1.` plus the SHA-256 hex of the JSON array
//!   `[kb_id, host_document_id]` (encoded exactly as the reference platform encodes it, so its
//!   records are found);
//! - a mapping is a JSON object with a string `upstream_id`, plus `kb_id` and
//!   `host_document_id`; anything else is an invalid mapping that the operator must reconcile;
//! - when no record exists for the host document id, the id may be an upstream id (older hosts
//!   pass it on delete): the mappings of the same KB whose `upstream_id` equals it are
//!   searched; one match resolves, two or more are an ambiguity error.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Key prefix of knowledge-base configuration records.
pub const CONFIG_KEY_PREFIX: &str = "ke.config.v1.";

/// Key prefix of document-mapping records.
pub const DOCUMENT_KEY_PREFIX: &str = "ke.document.v1.";

/// Largest accepted knowledge-base configuration: 64 KiB of compact UTF-8 JSON.
pub const MAX_CONFIG_BYTES: usize = 64 * 1024;

/// Why a connector record was refused or could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectorStateError {
    /// The caller passed a configuration above the limit; nothing was written.
    #[error(
        "knowledge-base configuration is {bytes} bytes; the limit is {MAX_CONFIG_BYTES} bytes (64 KiB): store large data elsewhere"
    )]
    ConfigTooLarge {
        /// Size of the refused configuration in bytes.
        bytes: usize,
    },
    /// The persisted configuration is neither an object nor a tombstone (or vanished after
    /// being listed): the stored data is damaged; reconcile the installation.
    #[error(
        "invalid persisted knowledge-base configuration under {key}: {problem}; reconcile the installation"
    )]
    InvalidConfig {
        /// The storage key.
        key: String,
        /// What was wrong.
        problem: String,
    },
    /// The persisted document mapping is malformed; reconcile the installation.
    #[error("invalid upstream document mapping under {key}: {problem}; reconcile the installation")]
    InvalidDocumentMapping {
        /// The storage key.
        key: String,
        /// What was wrong.
        problem: String,
    },
    /// Several mappings of the KB carry this upstream id; the caller must not guess which
    /// document is meant. Reconcile the installation's mappings.
    #[error(
        "upstream document id {upstream_id:?} of knowledge base {kb_id:?} matches {matches} mappings; reconcile the installation"
    )]
    AmbiguousUpstreamDocument {
        /// The knowledge base searched.
        kb_id: String,
        /// The id that matched several mappings.
        upstream_id: String,
        /// How many mappings matched.
        matches: usize,
    },
}

/// The storage key of the configuration of knowledge base `kb_id`.
pub fn config_key(kb_id: &str) -> String {
    format!(
        "{CONFIG_KEY_PREFIX}{}",
        hex::encode(Sha256::digest(kb_id.as_bytes()))
    )
}

/// The stored value of a configuration, after checking the 64 KiB limit.
///
/// # Errors
/// [`ConnectorStateError::ConfigTooLarge`] above [`MAX_CONFIG_BYTES`] (exactly 64 KiB is
/// accepted).
pub fn encode_config(config: &Map<String, Value>) -> Result<Value, ConnectorStateError> {
    let value = Value::Object(config.clone());
    let bytes = value.to_string().len();
    if bytes > MAX_CONFIG_BYTES {
        return Err(ConnectorStateError::ConfigTooLarge { bytes });
    }
    Ok(value)
}

/// The configuration of one knowledge base as established from host storage.
#[derive(Debug, Clone, PartialEq)]
pub enum KbConfigState {
    /// An authoritative listing does not contain the key: never configured.
    Absent,
    /// The key holds a JSON null tombstone: the knowledge base was deleted.
    Deleted,
    /// The stored configuration.
    Present(Map<String, Value>),
}

impl KbConfigState {
    /// The configuration, if present.
    pub fn into_config(self) -> Option<Map<String, Value>> {
        match self {
            Self::Present(config) => Some(config),
            Self::Absent | Self::Deleted => None,
        }
    }
}

/// Decides the configuration state from a successful key listing and the value read.
///
/// `listed` says whether [`config_key`] was in the listing; `stored` is the value read for it
/// (`None` when it vanished between listing and read, or was not read because not listed).
///
/// # Errors
/// [`ConnectorStateError::InvalidConfig`] when the key was listed but the value is missing or
/// is neither an object nor null.
pub fn decode_config(
    key: &str,
    listed: bool,
    stored: Option<Value>,
) -> Result<KbConfigState, ConnectorStateError> {
    if !listed {
        return Ok(KbConfigState::Absent);
    }
    match stored {
        Some(Value::Null) => Ok(KbConfigState::Deleted),
        Some(Value::Object(config)) => Ok(KbConfigState::Present(config)),
        Some(other) => Err(ConnectorStateError::InvalidConfig {
            key: key.to_owned(),
            problem: format!("expected an object or null, found {}", json_kind(&other)),
        }),
        None => Err(ConnectorStateError::InvalidConfig {
            key: key.to_owned(),
            problem: "listed but has no value".to_owned(),
        }),
    }
}

/// A document mapping: which upstream document a host document of a knowledge base became.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DocumentMapping {
    /// The knowledge base.
    pub kb_id: String,
    /// The host's document id.
    pub host_document_id: String,
    /// The durable upstream document id.
    pub upstream_id: String,
    /// Any further fields the connector keeps with the mapping.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl DocumentMapping {
    /// The mapping as the JSON value to store.
    pub fn to_value(&self) -> Value {
        // A struct of strings and a JSON map always serializes.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The storage key of the mapping of `host_document_id` in knowledge base `kb_id`.
pub fn document_key(kb_id: &str, host_document_id: &str) -> String {
    // The reference platform hashes `json.dumps([kb_id, host_document_id])`: ", " separator,
    // non-ASCII escaped as \uXXXX.
    let identity = format!(
        "[{}, {}]",
        ascii_json_string(kb_id),
        ascii_json_string(host_document_id)
    );
    format!(
        "{DOCUMENT_KEY_PREFIX}{}",
        hex::encode(Sha256::digest(identity.as_bytes()))
    )
}

/// Decodes the mapping stored directly under [`document_key`].
///
/// `None` (not stored) and a JSON null tombstone are "no mapping".
///
/// # Errors
/// [`ConnectorStateError::InvalidDocumentMapping`] when the value is not an object with
/// string `upstream_id`, `kb_id` and `host_document_id`.
pub fn decode_document(
    key: &str,
    stored: Option<Value>,
) -> Result<Option<DocumentMapping>, ConnectorStateError> {
    match stored {
        None | Some(Value::Null) => Ok(None),
        Some(value) => parse_mapping(key, value).map(Some),
    }
}

/// Resolves `upstream_id` among the stored document mappings `candidates` (every
/// `(key, value)` under [`DOCUMENT_KEY_PREFIX`]): the mappings of `kb_id` whose `upstream_id`
/// equals it. Tombstoned candidates are skipped.
///
/// # Errors
/// [`ConnectorStateError::AmbiguousUpstreamDocument`] for two or more matches;
/// [`ConnectorStateError::InvalidDocumentMapping`] when a candidate is not a JSON object, or
/// the match is malformed.
pub fn resolve_by_upstream(
    kb_id: &str,
    upstream_id: &str,
    candidates: impl IntoIterator<Item = (String, Value)>,
) -> Result<Option<DocumentMapping>, ConnectorStateError> {
    let mut matches = Vec::new();
    for (key, value) in candidates {
        let object = match &value {
            Value::Null => continue,
            Value::Object(object) => object,
            other => {
                return Err(ConnectorStateError::InvalidDocumentMapping {
                    key,
                    problem: format!("expected an object, found {}", json_kind(other)),
                });
            }
        };
        let same_kb = object.get("kb_id").and_then(Value::as_str) == Some(kb_id);
        let same_upstream = object.get("upstream_id").and_then(Value::as_str) == Some(upstream_id);
        if same_kb && same_upstream {
            matches.push((key, value));
        }
    }
    if matches.len() > 1 {
        return Err(ConnectorStateError::AmbiguousUpstreamDocument {
            kb_id: kb_id.to_owned(),
            upstream_id: upstream_id.to_owned(),
            matches: matches.len(),
        });
    }
    matches
        .pop()
        .map(|(key, value)| parse_mapping(&key, value))
        .transpose()
}

/// The mapping to store for `host_document_id` of `kb_id`: `fields` with `kb_id` and
/// `host_document_id` set from the arguments (they win over same-named fields).
pub fn new_mapping(
    kb_id: &str,
    host_document_id: &str,
    upstream_id: &str,
    mut fields: Map<String, Value>,
) -> DocumentMapping {
    for reserved in ["kb_id", "host_document_id", "upstream_id"] {
        fields.remove(reserved);
    }
    DocumentMapping {
        kb_id: kb_id.to_owned(),
        host_document_id: host_document_id.to_owned(),
        upstream_id: upstream_id.to_owned(),
        extra: fields,
    }
}

fn parse_mapping(key: &str, value: Value) -> Result<DocumentMapping, ConnectorStateError> {
    let kind = json_kind(&value);
    if !value.is_object() {
        return Err(ConnectorStateError::InvalidDocumentMapping {
            key: key.to_owned(),
            problem: format!("expected an object, found {kind}"),
        });
    }
    if !value.get("upstream_id").is_some_and(Value::is_string) {
        return Err(ConnectorStateError::InvalidDocumentMapping {
            key: key.to_owned(),
            problem: "upstream_id is missing or not a string".to_owned(),
        });
    }
    serde_json::from_value(value).map_err(|e| ConnectorStateError::InvalidDocumentMapping {
        key: key.to_owned(),
        problem: e.to_string(),
    })
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A JSON string literal with every non-ASCII character escaped as `\uXXXX` (UTF-16), as
/// Python's `json.dumps` writes it by default.
fn ascii_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if c.is_ascii() && !c.is_ascii_control() => out.push(c),
            c => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("test helper takes objects"),
        }
    }

    #[test]
    fn kb_config_key_is_hashed_per_kb() {
        // python3: "ke.config.v1." + hashlib.sha256(b"kb-1").hexdigest()
        assert_eq!(
            config_key("kb-1"),
            "ke.config.v1.5373c3baa7d8a59141181da7d6da88b15964f8ea82420ec5f859c83167bebc77"
        );
        assert_ne!(config_key("kb-1"), config_key("kb-2"));
    }

    #[test]
    fn kb_config_refused_above_64_kib() {
        // {"k":"<n x a>"} is n + 8 bytes.
        let cases = [
            (MAX_CONFIG_BYTES - 8, Ok(())),
            (MAX_CONFIG_BYTES - 7, Err(MAX_CONFIG_BYTES + 1)),
            (10, Ok(())),
        ];
        for (n, expected) in cases {
            let config = obj(json!({ "k": "a".repeat(n) }));
            let result = encode_config(&config).map(|_| ()).map_err(|e| match e {
                ConnectorStateError::ConfigTooLarge { bytes } => bytes,
                other => panic!("unexpected {other:?}"),
            });
            assert_eq!(result, expected, "n = {n}");
        }
    }

    #[test]
    fn kb_config_limit_counts_utf8_bytes() {
        // "é" is 2 bytes: 32 767 of them plus 8 bytes of framing exceed the limit.
        let config = obj(json!({ "k": "é".repeat(MAX_CONFIG_BYTES / 2 - 1) }));
        assert!(matches!(
            encode_config(&config),
            Err(ConnectorStateError::ConfigTooLarge { .. })
        ));
    }

    #[test]
    fn kb_config_decode_rules() {
        let key = "ke.config.v1.x";
        let present = obj(json!({"url": "https://kb"}));
        let cases: Vec<(bool, Option<Value>, Result<KbConfigState, &str>)> = vec![
            (false, None, Ok(KbConfigState::Absent)),
            (
                false,
                Some(json!({"ignored": true})),
                Ok(KbConfigState::Absent),
            ),
            (true, Some(Value::Null), Ok(KbConfigState::Deleted)),
            (
                true,
                Some(Value::Object(present.clone())),
                Ok(KbConfigState::Present(present)),
            ),
            (true, Some(json!([1])), Err("an array")),
            (true, Some(json!("s")), Err("a string")),
            (true, None, Err("no value")),
        ];
        for (listed, stored, expected) in cases {
            let got = decode_config(key, listed, stored.clone());
            match (got, expected) {
                (Ok(state), Ok(want)) => assert_eq!(state, want),
                (Err(ConnectorStateError::InvalidConfig { problem, .. }), Err(fragment)) => {
                    assert!(problem.contains(fragment), "{problem}")
                }
                (got, want) => panic!("{listed} {stored:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn document_key_matches_reference_encoding() {
        // python3: "ke.document.v1." + sha256(json.dumps(["kb-1", "doc-é"]).encode()).hexdigest()
        let cases = [
            (
                "kb-1",
                "doc-1",
                "ke.document.v1.59810c24ba6dd2c1e93e5ff08ac8d4f20e046994738a2f4ba64230d44243ccef",
            ),
            (
                "kb-1",
                "doc-é",
                "ke.document.v1.f9840cd411a2571da8be4707486f81a2ba78a54df54d6bab764f3bb99b356f2e",
            ),
        ];
        for (kb, doc, expected) in cases {
            assert_eq!(document_key(kb, doc), expected);
        }
        assert_eq!(ascii_json_string("doc-é"), "\"doc-\\u00e9\"");
        assert_eq!(ascii_json_string("a\"b\\"), "\"a\\\"b\\\\\"");
        assert_eq!(ascii_json_string("😀"), "\"\\ud83d\\ude00\"");
        assert_eq!(ascii_json_string("\u{1}"), "\"\\u0001\"");
        assert_ne!(document_key("kb", "a"), document_key("kb", "b"));
        assert_ne!(document_key("kb-a", "d"), document_key("kb-b", "d"));
    }

    #[test]
    fn document_mapping_decode_rules() {
        let key = "ke.document.v1.x";
        let good = json!({"kb_id": "kb", "host_document_id": "h", "upstream_id": "u", "size": 3});
        assert_eq!(decode_document(key, None), Ok(None));
        assert_eq!(decode_document(key, Some(Value::Null)), Ok(None));
        let mapping = decode_document(key, Some(good.clone())).unwrap().unwrap();
        assert_eq!(mapping.upstream_id, "u");
        assert_eq!(mapping.extra.get("size"), Some(&json!(3)));
        assert_eq!(mapping.to_value(), good);
        for bad in [
            json!([]),
            json!("u"),
            json!({"kb_id": "kb", "host_document_id": "h"}),
            json!({"kb_id": "kb", "host_document_id": "h", "upstream_id": 7}),
        ] {
            let err = decode_document(key, Some(bad.clone())).unwrap_err();
            assert!(
                matches!(err, ConnectorStateError::InvalidDocumentMapping { .. }),
                "{bad}"
            );
            assert!(err.to_string().contains("reconcile"));
        }
    }

    #[test]
    fn document_mapping_resolves_by_upstream_id() {
        let m = |kb: &str, host: &str, up: &str| json!({"kb_id": kb, "host_document_id": host, "upstream_id": up});
        let candidates = vec![
            ("k1".to_owned(), m("kb", "h1", "u1")),
            ("k2".to_owned(), m("kb", "h2", "u2")),
            ("k3".to_owned(), m("other", "h3", "u3")),
            ("k4".to_owned(), Value::Null),
        ];
        let found = resolve_by_upstream("kb", "u2", candidates.clone())
            .unwrap()
            .unwrap();
        assert_eq!(found.host_document_id, "h2");
        assert_eq!(
            resolve_by_upstream("kb", "u3", candidates.clone()),
            Ok(None)
        );
        assert_eq!(resolve_by_upstream("kb", "zz", candidates), Ok(None));
    }

    #[test]
    fn two_upstream_matches_are_ambiguous() {
        let m = |host: &str| json!({"kb_id": "kb", "host_document_id": host, "upstream_id": "u"});
        let err = resolve_by_upstream(
            "kb",
            "u",
            vec![("a".to_owned(), m("h1")), ("b".to_owned(), m("h2"))],
        )
        .unwrap_err();
        assert_eq!(
            err,
            ConnectorStateError::AmbiguousUpstreamDocument {
                kb_id: "kb".into(),
                upstream_id: "u".into(),
                matches: 2
            }
        );
    }

    #[test]
    fn invalid_upstream_candidate_is_an_error() {
        let err = resolve_by_upstream("kb", "u", vec![("a".to_owned(), json!([1]))]).unwrap_err();
        assert!(matches!(
            err,
            ConnectorStateError::InvalidDocumentMapping { .. }
        ));
        // A match without host_document_id is malformed.
        let err = resolve_by_upstream(
            "kb",
            "u",
            vec![("a".to_owned(), json!({"kb_id": "kb", "upstream_id": "u"}))],
        )
        .unwrap_err();
        assert!(matches!(
            err,
            ConnectorStateError::InvalidDocumentMapping { .. }
        ));
    }

    #[test]
    fn new_mapping_sets_identity_fields() {
        let mapping = new_mapping(
            "kb",
            "h",
            "u",
            obj(json!({"kb_id": "spoofed", "upstream_id": "x", "title": "t"})),
        );
        assert_eq!(
            mapping.to_value(),
            json!({"kb_id": "kb", "host_document_id": "h", "upstream_id": "u", "title": "t"})
        );
    }
}
