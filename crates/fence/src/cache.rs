//! The in-process fence cache and the fence marker record kept in host storage.
//!
//! Fences are persisted in host storage (one record per fence key) with this cache in front,
//! so a restarted worker still recognises them. Per binding the cache holds whether the
//! persisted fences were loaded and which fence keys are fenced. Rules:
//! - a binding's persisted fences are loaded once, before its first write; a failed key
//!   listing leaves the binding unloaded (the write fails closed and the next call retries);
//! - loading only adds keys: a fence set in process while the listing ran is kept;
//! - a stored record fences unless it is a JSON null tombstone; a record that cannot be read
//!   or decoded counts as a fence ([`record_is_fence`]);
//! - a scope is fenced when its own key or the binding's installation key is in the set;
//! - releasing a binding (installation revoked) forgets its keys and its loaded flag.

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::scope::{Binding, FenceKey, ScopeIdentity};

/// What reading one stored fence record gave.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordRead {
    /// The record is present; its JSON value (JSON null is a tombstone).
    Value(Value),
    /// The key was listed but its value could not be read or decoded, or had vanished.
    Unreadable,
}

/// Whether a stored fence record fences its scope: everything except a JSON null tombstone,
/// including an unreadable record (fail closed: a record we cannot read might be a fence).
pub fn record_is_fence(read: &RecordRead) -> bool {
    !matches!(read, RecordRead::Value(Value::Null))
}

/// The value persisted under a fence key while a scope is fenced. Written for operators
/// (`tenantry fences list` shows it); only its presence (non-null) matters to the rules.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceMarker {
    /// The scope identity; `None` (JSON null) for the installation-wide scope.
    pub scope: Option<String>,
    /// Why the scope was fenced (the mutation and what was observed).
    pub reason: String,
    /// When the fence was set, Unix milliseconds (UTC); absent in records written by the
    /// reference platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced_at_ms: Option<i64>,
}

impl FenceMarker {
    /// A marker for `scope` with `reason`, set at `fenced_at_ms` (Unix milliseconds).
    pub fn new(scope: &ScopeIdentity, reason: impl Into<String>, fenced_at_ms: i64) -> Self {
        Self {
            scope: scope.as_object().map(str::to_owned),
            reason: reason.into(),
            fenced_at_ms: Some(fenced_at_ms),
        }
    }

    /// The marker as the JSON value to store.
    pub fn to_value(&self) -> Value {
        // Serializing a struct of strings and integers into a Value cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads a stored value as a marker, if it has the marker's shape. A non-null value of
    /// another shape (for example one written by the reference platform with `kb_id`) is still
    /// a fence; it just has no readable marker.
    pub fn from_value(value: &Value) -> Option<Self> {
        if let Some(kb_id) = value.get("kb_id") {
            // Reference platform shape: {"kb_id": .., "reason": ..}.
            return Some(Self {
                scope: kb_id.as_str().map(str::to_owned),
                reason: value.get("reason")?.as_str()?.to_owned(),
                fenced_at_ms: None,
            });
        }
        serde_json::from_value(value.clone()).ok()
    }
}

/// Fence state of one binding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct BindingFences {
    loaded: bool,
    keys: BTreeSet<FenceKey>,
}

/// The in-process fence cache of every binding this process has written to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceCache {
    bindings: HashMap<Binding, BindingFences>,
}

impl FenceCache {
    /// An empty cache: no binding loaded, nothing fenced.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the persisted fences of `binding` were loaded.
    pub fn is_loaded(&self, binding: &Binding) -> bool {
        self.bindings.get(binding).is_some_and(|b| b.loaded)
    }

    /// Applies a complete key listing of `binding`: each fence record read is added when it
    /// fences ([`record_is_fence`]), and the binding is marked loaded. Keys already fenced in
    /// process stay fenced. Call this only after the listing succeeded; a failed listing must
    /// leave the binding unloaded.
    pub fn apply_load(
        &mut self,
        binding: &Binding,
        records: impl IntoIterator<Item = (FenceKey, RecordRead)>,
    ) {
        let entry = self.bindings.entry(binding.clone()).or_default();
        for (key, read) in records {
            if record_is_fence(&read) {
                entry.keys.insert(key);
            }
        }
        entry.loaded = true;
    }

    /// The key that fences `scope` of `binding`, if any: the scope's own key first, then the
    /// installation key (which blocks every scope of the binding).
    pub fn fenced_by(&self, binding: &Binding, scope: &ScopeIdentity) -> Option<FenceKey> {
        let fences = self.bindings.get(binding)?;
        let own = scope.fence_key();
        if fences.keys.contains(&own) {
            return Some(own);
        }
        let installation = FenceKey::installation();
        fences.keys.contains(&installation).then_some(installation)
    }

    /// Whether a write to `scope` of `binding` must fail closed.
    pub fn is_fenced(&self, binding: &Binding, scope: &ScopeIdentity) -> bool {
        self.fenced_by(binding, scope).is_some()
    }

    /// Marks `key` of `binding` fenced. Returns `false` when it already was.
    pub fn mark(&mut self, binding: &Binding, key: FenceKey) -> bool {
        self.bindings
            .entry(binding.clone())
            .or_default()
            .keys
            .insert(key)
    }

    /// Clears `key` of `binding`. Returns `false` when it was not fenced in process.
    pub fn clear(&mut self, binding: &Binding, key: &FenceKey) -> bool {
        self.bindings
            .get_mut(binding)
            .is_some_and(|b| b.keys.remove(key))
    }

    /// The fenced keys of `binding`, in key order.
    pub fn fenced_keys(&self, binding: &Binding) -> Vec<FenceKey> {
        self.bindings
            .get(binding)
            .map(|b| b.keys.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets everything about `binding` (installation revoked): its fenced keys and its
    /// loaded flag. A later write reloads from storage.
    pub fn release(&mut self, binding: &Binding) {
        self.bindings.remove(binding);
    }

    /// How many bindings the cache holds state for.
    pub fn binding_count(&self) -> usize {
        self.bindings.len()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn binding(s: &str) -> Binding {
        Binding::parse(s).unwrap()
    }

    #[test]
    fn unreadable_fence_record_counts_as_fence() {
        let cases = [
            (RecordRead::Value(Value::Null), false),
            (
                RecordRead::Value(json!({"scope": "a", "reason": "r"})),
                true,
            ),
            (RecordRead::Value(json!("anything")), true),
            (RecordRead::Value(json!(false)), true),
            (RecordRead::Value(json!({})), true),
            (RecordRead::Unreadable, true),
        ];
        for (read, fence) in cases {
            assert_eq!(record_is_fence(&read), fence, "{read:?}");
        }
    }

    #[test]
    fn installation_fence_blocks_every_scope_of_binding() {
        let b = binding("inst");
        let other = binding("other");
        let mut cache = FenceCache::new();
        cache.mark(&b, FenceKey::installation());
        for scope in [
            ScopeIdentity::Installation,
            ScopeIdentity::object("kb-1"),
            ScopeIdentity::object("kb-2"),
        ] {
            assert_eq!(cache.fenced_by(&b, &scope), Some(FenceKey::installation()));
            assert!(!cache.is_fenced(&other, &scope));
        }
    }

    #[test]
    fn scope_fence_blocks_only_its_scope() {
        let b = binding("inst");
        let mut cache = FenceCache::new();
        let a = ScopeIdentity::object("a");
        cache.mark(&b, a.fence_key());
        let cases = [
            (a.clone(), true),
            (ScopeIdentity::object("b"), false),
            (ScopeIdentity::Installation, false),
        ];
        for (scope, fenced) in cases {
            assert_eq!(cache.is_fenced(&b, &scope), fenced, "{scope}");
        }
        assert!(cache.clear(&b, &a.fence_key()));
        assert!(!cache.clear(&b, &a.fence_key()));
        assert!(!cache.is_fenced(&b, &a));
    }

    #[test]
    fn load_adds_fences_and_keeps_in_process_marks() {
        let b = binding("inst");
        let mut cache = FenceCache::new();
        assert!(!cache.is_loaded(&b));
        let in_process = ScopeIdentity::object("p").fence_key();
        cache.mark(&b, in_process.clone());
        assert!(!cache.is_loaded(&b), "marking is not loading");
        let stored = ScopeIdentity::object("s").fence_key();
        let tombstoned = ScopeIdentity::object("t").fence_key();
        let unreadable = ScopeIdentity::object("u").fence_key();
        cache.apply_load(
            &b,
            [
                (stored.clone(), RecordRead::Value(json!({"reason": "x"}))),
                (tombstoned.clone(), RecordRead::Value(Value::Null)),
                (unreadable.clone(), RecordRead::Unreadable),
            ],
        );
        assert!(cache.is_loaded(&b));
        let mut expected = vec![in_process, stored, unreadable];
        expected.sort();
        assert_eq!(cache.fenced_keys(&b), expected);
        assert!(!cache.fenced_keys(&b).contains(&tombstoned));
    }

    #[test]
    fn release_forgets_keys_and_loaded_flag() {
        let b = binding("inst");
        let keep = binding("keep");
        let mut cache = FenceCache::new();
        cache.apply_load(&b, [(FenceKey::installation(), RecordRead::Unreadable)]);
        cache.apply_load(&keep, []);
        cache.release(&b);
        assert!(!cache.is_loaded(&b));
        assert!(cache.fenced_keys(&b).is_empty());
        assert!(cache.is_loaded(&keep));
        assert_eq!(cache.binding_count(), 1);
    }

    #[test]
    fn fence_marker_serde_round_trip() {
        let marker = FenceMarker::new(
            &ScopeIdentity::object("kb-1"),
            "ambiguous",
            1_700_000_000_000,
        );
        let value = marker.to_value();
        assert_eq!(
            value,
            json!({"scope": "kb-1", "reason": "ambiguous", "fenced_at_ms": 1_700_000_000_000_i64})
        );
        assert_eq!(FenceMarker::from_value(&value), Some(marker));
        let installation = FenceMarker::new(&ScopeIdentity::Installation, "r", 1);
        assert_eq!(installation.to_value()["scope"], Value::Null);
    }

    #[test]
    fn fence_marker_reads_reference_platform_shape() {
        let cases = [
            (
                json!({"kb_id": "kb-9", "reason": "ambiguous remote mutation"}),
                Some(FenceMarker {
                    scope: Some("kb-9".into()),
                    reason: "ambiguous remote mutation".into(),
                    fenced_at_ms: None,
                }),
            ),
            (
                json!({"scope": "installation", "reason": "r"}),
                Some(FenceMarker {
                    scope: Some("installation".into()),
                    reason: "r".into(),
                    fenced_at_ms: None,
                }),
            ),
            (json!("garbage"), None),
            (
                json!({"reason": "unreadable fence record"}),
                Some(FenceMarker {
                    scope: None,
                    reason: "unreadable fence record".into(),
                    fenced_at_ms: None,
                }),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(FenceMarker::from_value(&value), expected, "{value}");
        }
    }
}
