//! Canonical fingerprints of JSON values.
//!
//! The canonical form sorts object keys, keeps array order, and writes no insignificant
//! whitespace (the ordering rule of RFC 8785, without its number re-formatting: numbers are
//! written as `serde_json` prints them). The fingerprint is the lowercase hex SHA-256 of that
//! form, so two semantically equal payloads fingerprint the same regardless of key order.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 (64 characters) of a canonical JSON form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Fingerprint of raw bytes.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(hex::encode(Sha256::digest(bytes)))
    }

    /// Wraps a stored fingerprint string without checking it.
    pub fn from_stored(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The hex string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Writes `value` in canonical form (sorted keys, no whitespace).
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    // Only `serde_json`'s output and ASCII punctuation were written: valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// The [`Fingerprint`] of `value`'s canonical form.
pub fn fingerprint_json(value: &Value) -> Fingerprint {
    let mut out = Vec::new();
    write_canonical(value, &mut out);
    Fingerprint::of_bytes(&out)
}

/// A [`Fingerprint`] computed piece by piece: the caller writes a canonical form in parts
/// (literal punctuation with [`Self::raw`], values with [`Self::value`]) and never holds the
/// whole form or the whole value in memory. Hashing the same bytes as [`fingerprint_json`]
/// gives the same fingerprint.
#[derive(Debug, Clone, Default)]
pub struct CanonicalHasher {
    sha: Sha256,
    buffer: Vec<u8>,
}

impl CanonicalHasher {
    /// An empty hasher.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `text` as it is (punctuation and keys of the canonical form being written).
    pub fn raw(&mut self, text: &str) {
        self.sha.update(text.as_bytes());
    }

    /// Appends the canonical form of `value`.
    pub fn value(&mut self, value: &Value) {
        self.buffer.clear();
        write_canonical(value, &mut self.buffer);
        self.sha.update(&self.buffer);
    }

    /// The fingerprint of everything appended.
    pub fn finish(self) -> Fingerprint {
        Fingerprint(hex::encode(self.sha.finalize()))
    }
}

fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            // `serde_json`'s map is ordered by key unless a crate turns on its
            // `preserve_order` feature; sorting keeps the form canonical either way.
            let mut keys: Vec<&String> = map.keys().collect();
            if !keys.is_sorted() {
                keys.sort();
            }
            out.push(b'{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_leaf(key, out);
                out.push(b':');
                write_canonical(&map[key], out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        other => write_leaf(other, out),
    }
}

/// Writes a string, number, boolean or null as `serde_json` prints it, straight into `out`.
fn write_leaf<T: Serialize + ?Sized>(leaf: &T, out: &mut Vec<u8>) {
    // Writing into a `Vec` cannot fail, and a plain JSON leaf always serializes.
    let _ = serde_json::to_writer(&mut *out, leaf);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hashing_in_parts_equals_hashing_the_whole() {
        let whole = json!({"b": [1, {"y": 2, "x": "é"}], "a": null});
        let mut parts = CanonicalHasher::new();
        parts.raw("{\"a\":");
        parts.value(&Value::Null);
        parts.raw(",\"b\":[");
        parts.value(&json!(1));
        parts.raw(",");
        parts.value(&json!({"x": "é", "y": 2}));
        parts.raw("]}");
        assert_eq!(parts.finish(), fingerprint_json(&whole));
    }

    #[test]
    fn canonical_form_sorts_keys_recursively() {
        let cases = [
            (json!({"b": 1, "a": 2}), r#"{"a":2,"b":1}"#),
            (
                json!({"z": {"y": [3, {"b": null, "a": true}]}}),
                r#"{"z":{"y":[3,{"a":true,"b":null}]}}"#,
            ),
            (json!("x\"y"), r#""x\"y""#),
            (json!([]), "[]"),
        ];
        for (value, expected) in cases {
            assert_eq!(canonical_json(&value), expected);
        }
    }

    #[test]
    fn fingerprint_ignores_key_order_but_not_values() {
        let a = fingerprint_json(&json!({"a": 1, "b": [1, 2]}));
        let b = fingerprint_json(&json!({"b": [1, 2], "a": 1}));
        let c = fingerprint_json(&json!({"b": [2, 1], "a": 1}));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.as_str().len(), 64);
    }
}
