//! The in-process fence cache and the fence marker record kept in host storage.
//!
//! Fences are persisted in host storage (one record per fence key), shared by every process on
//! the database: the runtime reads a scope's record (and the installation record) before each
//! write. The cache only keeps the fences this process set, so a fence whose persist failed
//! still holds. Rules:
//! - any stored record except a JSON null tombstone is listed; a record that cannot be
//!   decoded counts as a fence ([`record_is_fence`]); how a readable record blocks a write is
//!   decided by [`crate::record::classify`] (a live intent of another process is waited for);
//! - a stored record carries its [`RecordKind`]: fence, or intent (a claim with an owner and
//!   an expiry); records without a kind are fences;
//! - a cached fence that storage acknowledged is dropped when storage shows it cleared (by any
//!   process); one that never reached storage is persisted again ([`FenceCache::reconcile`]);
//! - a scope is fenced when its own key or the binding's installation key fences it;
//! - releasing a binding (installation revoked) forgets its cached fences.

use std::collections::{BTreeMap, HashMap};

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

/// Whether a stored fence record is an active record (a fence or an intent): everything except
/// a JSON null tombstone, including an unreadable record (fail closed: a record we cannot read
/// might be a fence).
pub fn record_is_fence(read: &RecordRead) -> bool {
    !matches!(read, RecordRead::Value(Value::Null))
}

/// What a stored scope record is: a fence (outcome unknown, operator must reconcile) or a
/// write-ahead intent (a write holds the scope, a dispatch may be in flight).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// A mutation's outcome is unknown; the scope is fenced until an operator clears it.
    /// Records without a `kind` field (older Tenantry versions, the reference platform) are
    /// fences: fail closed.
    Fence,
    /// A write-ahead intent: a process holds the scope's cross-process claim and may have a
    /// dispatch in flight until `expires_at_ms` (store clock). Past its expiry the intent
    /// counts as a fence (its holder vanished with the outcome unknown), unless it is a plain
    /// claim under which nothing was sent (`dispatched: false`), which the next write takes
    /// over.
    Intent,
}

impl RecordKind {
    /// `fence` or `intent`, as stored and as shown to operators (labels, JSON).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fence => "fence",
            Self::Intent => "intent",
        }
    }
}

impl std::fmt::Display for RecordKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The failure that turned a scope into a fence, as recorded in the fence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// What went wrong, machine-readable: `outcome_unknown` (the mutation returned an error of
    /// unknown outcome), `panicked` (the mutation panicked), `reported` (the operation itself
    /// reported an unknown outcome), `deadline_elapsed` (the dispatch did not settle within the
    /// runtime's dispatch deadline), `intent_not_persisted`, `intent_expired` or `operator`
    /// (fenced on request).
    pub kind: String,
    /// The error text or panic message.
    pub detail: String,
}

/// The value persisted under a fence key while a scope is fenced or claimed. Written for
/// operators (`tenantry fences list` shows it) and for the claim protocol of other processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceMarker {
    /// The scope identity; `None` (JSON null) for the installation-wide scope.
    pub scope: Option<String>,
    /// Why the scope was fenced or claimed (the mutation's label).
    pub reason: String,
    /// When the record was written, Unix milliseconds (UTC); absent in records written by the
    /// reference platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fenced_at_ms: Option<i64>,
    /// Fence or write-ahead intent; absent means fence (fail closed).
    #[serde(default = "fence_kind", skip_serializing_if = "is_fence")]
    pub kind: RecordKind,
    /// The process (runtime) holding the intent; intents only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When the intent's claim lapses, Unix milliseconds. Set past the dispatch deadline, so a
    /// live holder's dispatch always ends before it. On a fence that replaced a dispatched
    /// intent it is that intent's expiry: the request may still land until then, and the fence
    /// cannot be cleared before it ([`crate::record::clear_refusal`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// The failure that fenced the scope; fences written by Tenantry since the record kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureRecord>,
    /// Whether the holder of an intent may have sent something under it: `false` only for a
    /// run's plain claim ([`FenceMarker::claim`], stored as `"dispatched": false`), which a
    /// process may take over once it expired (nothing was sent under it); absent (`true`)
    /// for an intent written before a dispatch or a host write, and for every record written
    /// before the field existed, which fail closed once expired.
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub dispatched: bool,
}

fn yes() -> bool {
    true
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_yes(value: &bool) -> bool {
    *value
}

fn fence_kind() -> RecordKind {
    RecordKind::Fence
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_fence(kind: &RecordKind) -> bool {
    *kind == RecordKind::Fence
}

impl FenceMarker {
    /// A fence for `scope` with `reason`, set at `fenced_at_ms` (Unix milliseconds), no failure
    /// recorded (an operator hold).
    pub fn new(scope: &ScopeIdentity, reason: impl Into<String>, fenced_at_ms: i64) -> Self {
        Self {
            scope: scope.as_object().map(str::to_owned),
            reason: reason.into(),
            fenced_at_ms: Some(fenced_at_ms),
            kind: RecordKind::Fence,
            owner: None,
            expires_at_ms: None,
            failure: None,
            dispatched: true,
        }
    }

    /// A fence for `scope` after `failure`, labelled `reason`, set at `fenced_at_ms`.
    pub fn fence(
        scope: &ScopeIdentity,
        reason: impl Into<String>,
        failure: FailureRecord,
        fenced_at_ms: i64,
    ) -> Self {
        Self {
            failure: Some(failure),
            ..Self::new(scope, reason, fenced_at_ms)
        }
    }

    /// A run's plain claim on `scope`, held by `owner` from `now_ms` until `expires_at_ms`:
    /// an intent under which nothing was sent yet (`dispatched: false`). Once expired, another
    /// process takes it over instead of counting it as a fence ([`crate::record::classify`]).
    pub fn claim(
        scope: &ScopeIdentity,
        reason: impl Into<String>,
        owner: impl Into<String>,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Self {
        Self {
            dispatched: false,
            ..Self::intent(scope, reason, owner, now_ms, expires_at_ms)
        }
    }

    /// A write-ahead intent held by `owner` from `now_ms` until `expires_at_ms`, written
    /// before a dispatch (or a host write) goes out: once expired, its outcome is unknown and
    /// it counts as a fence.
    pub fn intent(
        scope: &ScopeIdentity,
        reason: impl Into<String>,
        owner: impl Into<String>,
        now_ms: i64,
        expires_at_ms: i64,
    ) -> Self {
        Self {
            kind: RecordKind::Intent,
            owner: Some(owner.into()),
            expires_at_ms: Some(expires_at_ms),
            ..Self::new(scope, reason, now_ms)
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
                kind: RecordKind::Fence,
                owner: None,
                expires_at_ms: None,
                failure: None,
                dispatched: true,
            });
        }
        serde_json::from_value(value.clone()).ok()
    }
}

/// One fence this process set, as the in-process cache keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CachedFence {
    /// Whether storage is known to hold a fence for the key (then storage is authoritative: a
    /// tombstone written by any process clears it).
    persisted: bool,
    /// The record to persist again while `persisted` is false.
    record: Value,
}

/// The in-process fence cache: fences this process set, per binding, and whether each is
/// persisted. Storage is read before every write; this cache only adds what storage may not
/// know (a fence whose persist failed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FenceCache {
    bindings: HashMap<Binding, BTreeMap<FenceKey, CachedFence>>,
}

/// What the runtime must do for one cached key after reading its stored record
/// ([`FenceCache::reconcile`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled {
    /// Nothing cached for the key.
    NotCached,
    /// Storage holds a fence: the cached one is now marked persisted.
    Persisted,
    /// Storage shows no fence and the cached one was persisted: another process (or an
    /// operator) cleared it; the cached fence is dropped.
    ClearedElsewhere,
    /// Storage shows no fence and the cached one never reached it: persist this record again
    /// (the key stays fenced either way).
    PersistAgain(Value),
}

impl FenceCache {
    /// An empty cache: nothing fenced.
    pub fn new() -> Self {
        Self::default()
    }

    /// The key that fences `scope` of `binding` in process, if any: the scope's own key
    /// first, then the installation key (which blocks every scope of the binding).
    pub fn fenced_by(&self, binding: &Binding, scope: &ScopeIdentity) -> Option<FenceKey> {
        let fences = self.bindings.get(binding)?;
        let own = scope.fence_key();
        if fences.contains_key(&own) {
            return Some(own);
        }
        let installation = FenceKey::installation();
        fences.contains_key(&installation).then_some(installation)
    }

    /// Whether `key` of `binding` is fenced in process.
    pub fn contains(&self, binding: &Binding, key: &FenceKey) -> bool {
        self.bindings
            .get(binding)
            .is_some_and(|b| b.contains_key(key))
    }

    /// Whether a write to `scope` of `binding` must fail closed by this cache alone.
    pub fn is_fenced(&self, binding: &Binding, scope: &ScopeIdentity) -> bool {
        self.fenced_by(binding, scope).is_some()
    }

    /// Marks `key` of `binding` fenced with the stored form `record`; `persisted` says whether
    /// storage acknowledged it. Returns `false` when the key was already fenced (its entry is
    /// replaced).
    pub fn mark(
        &mut self,
        binding: &Binding,
        key: FenceKey,
        record: Value,
        persisted: bool,
    ) -> bool {
        self.bindings
            .entry(binding.clone())
            .or_default()
            .insert(key, CachedFence { persisted, record })
            .is_none()
    }

    /// Applies what storage says about `key` (`stored_fence`: whether its record fences) to
    /// the cached fence of that key. See [`Reconciled`].
    pub fn reconcile(
        &mut self,
        binding: &Binding,
        key: &FenceKey,
        stored_fence: bool,
    ) -> Reconciled {
        let Some(fences) = self.bindings.get_mut(binding) else {
            return Reconciled::NotCached;
        };
        let Some(entry) = fences.get_mut(key) else {
            return Reconciled::NotCached;
        };
        if stored_fence {
            entry.persisted = true;
            return Reconciled::Persisted;
        }
        if entry.persisted {
            fences.remove(key);
            if fences.is_empty() {
                self.bindings.remove(binding);
            }
            return Reconciled::ClearedElsewhere;
        }
        Reconciled::PersistAgain(entry.record.clone())
    }

    /// Clears `key` of `binding`. Returns `false` when it was not fenced in process.
    pub fn clear(&mut self, binding: &Binding, key: &FenceKey) -> bool {
        let Some(fences) = self.bindings.get_mut(binding) else {
            return false;
        };
        let removed = fences.remove(key).is_some();
        if fences.is_empty() {
            self.bindings.remove(binding);
        }
        removed
    }

    /// The fenced keys of `binding`, in key order, each with whether it is persisted.
    pub fn fenced_keys(&self, binding: &Binding) -> Vec<(FenceKey, bool)> {
        self.bindings
            .get(binding)
            .map(|b| b.iter().map(|(k, e)| (k.clone(), e.persisted)).collect())
            .unwrap_or_default()
    }

    /// Forgets everything about `binding` (installation revoked). Persisted fences still hold
    /// through storage.
    pub fn release(&mut self, binding: &Binding) {
        self.bindings.remove(binding);
    }

    /// The bindings the cache holds fences for, in order.
    pub fn bindings(&self) -> Vec<Binding> {
        let mut bindings: Vec<Binding> = self.bindings.keys().cloned().collect();
        bindings.sort();
        bindings
    }

    /// How many bindings the cache holds fences for.
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
        cache.mark(&b, FenceKey::installation(), Value::Null, true);
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
        cache.mark(&b, a.fence_key(), Value::Null, true);
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
        assert_eq!(cache.binding_count(), 0);
    }

    #[test]
    fn reconcile_follows_storage_for_persisted_fences_and_repersists_the_others() {
        let b = binding("inst");
        let key = ScopeIdentity::object("a").fence_key();
        let record = json!({"reason": "r"});
        let cases = [
            // (persisted, stored fence) -> (outcome, still fenced, persisted after)
            (true, true, Reconciled::Persisted, true),
            (true, false, Reconciled::ClearedElsewhere, false),
            (false, true, Reconciled::Persisted, true),
            (false, false, Reconciled::PersistAgain(record.clone()), true),
        ];
        for (persisted, stored, outcome, fenced) in cases {
            let mut cache = FenceCache::new();
            cache.mark(&b, key.clone(), record.clone(), persisted);
            assert_eq!(
                cache.reconcile(&b, &key, stored),
                outcome,
                "{persisted} {stored}"
            );
            assert_eq!(cache.contains(&b, &key), fenced, "{persisted} {stored}");
        }
        let mut cache = FenceCache::new();
        assert_eq!(cache.reconcile(&b, &key, true), Reconciled::NotCached);
        cache.mark(&b, key.clone(), record, false);
        assert_eq!(cache.fenced_keys(&b), vec![(key.clone(), false)]);
        cache.reconcile(&b, &key, true);
        assert_eq!(cache.fenced_keys(&b), vec![(key, true)]);
    }

    #[test]
    fn release_forgets_fences_of_the_binding() {
        let b = binding("inst");
        let keep = binding("keep");
        let mut cache = FenceCache::new();
        cache.mark(&b, FenceKey::installation(), Value::Null, false);
        cache.mark(&keep, FenceKey::installation(), Value::Null, false);
        cache.release(&b);
        assert!(cache.fenced_keys(&b).is_empty());
        assert!(cache.is_fenced(&keep, &ScopeIdentity::Installation));
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
    fn fence_and_intent_records_say_their_kind() {
        let scope = ScopeIdentity::object("kb-1");
        let failure = FailureRecord {
            kind: "outcome_unknown".into(),
            detail: "response body cut".into(),
        };
        let fence = FenceMarker::fence(&scope, "upload", failure, 5);
        assert_eq!(
            fence.to_value(),
            json!({"scope": "kb-1", "reason": "upload", "fenced_at_ms": 5,
                   "failure": {"kind": "outcome_unknown", "detail": "response body cut"}})
        );
        let intent = FenceMarker::intent(&scope, "upload", "host-1", 5, 200);
        assert_eq!(
            intent.to_value(),
            json!({"scope": "kb-1", "reason": "upload", "fenced_at_ms": 5, "kind": "intent",
                   "owner": "host-1", "expires_at_ms": 200})
        );
        let claim = FenceMarker::claim(&scope, "write in progress", "host-1", 5, 200);
        assert_eq!(
            claim.to_value(),
            json!({"scope": "kb-1", "reason": "write in progress", "fenced_at_ms": 5,
                   "kind": "intent", "owner": "host-1", "expires_at_ms": 200,
                   "dispatched": false})
        );
        for marker in [fence, intent, claim] {
            assert_eq!(FenceMarker::from_value(&marker.to_value()), Some(marker));
        }
        assert_eq!(
            FenceMarker::from_value(&json!({"reason": "old", "kind": "fence"})).map(|m| m.kind),
            Some(RecordKind::Fence)
        );
        assert_eq!(
            FenceMarker::from_value(&json!({"reason": "r", "kind": "paused"})),
            None,
            "an unknown kind is no readable marker (it still fences)"
        );
    }

    #[test]
    fn fence_marker_reads_reference_platform_shape() {
        let plain = |scope: Option<&str>, reason: &str| FenceMarker {
            scope: scope.map(str::to_owned),
            reason: reason.into(),
            fenced_at_ms: None,
            kind: RecordKind::Fence,
            owner: None,
            expires_at_ms: None,
            failure: None,
            dispatched: true,
        };
        let cases = [
            (
                json!({"kb_id": "kb-9", "reason": "ambiguous remote mutation"}),
                Some(plain(Some("kb-9"), "ambiguous remote mutation")),
            ),
            (
                json!({"scope": "installation", "reason": "r"}),
                Some(plain(Some("installation"), "r")),
            ),
            (json!("garbage"), None),
            (
                json!({"reason": "unreadable fence record"}),
                Some(plain(None, "unreadable fence record")),
            ),
        ];
        for (value, expected) in cases {
            assert_eq!(FenceMarker::from_value(&value), expected, "{value}");
        }
    }
}
