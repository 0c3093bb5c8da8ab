//! Retention rule of fence records: which stored records at fence keys may be removed, given
//! when they were last written and the retention window (docs/operations.md, "Retention").
//!
//! Every write of a scope leaves a record at its fence key; the run's release turns its claim
//! into a JSON null tombstone, so without retention the host-storage table keeps one row per
//! scope ever written. A tombstone means exactly what an absent record means (the scope is
//! free: [`classify`](crate::record::classify) answers [`Holder::Free`](crate::Holder::Free)
//! for both), so removing it changes no decision. What must be kept, and why:
//! - a **fence** (a dispatch whose outcome is unknown, not yet reconciled) — removing it would
//!   let writes through a scope an operator must reconcile first;
//! - an **intent**, live or lapsed — a live one is a run in flight (its dispatch may still
//!   land); a lapsed one counts as a fence (its holder vanished with the outcome unknown);
//! - a record that cannot be decoded — it might be a fence (fail closed);
//! - a record whose last write time is unknown (written before the time column existed, or by
//!   an older process) — it cannot be aged;
//! - records at other keys (connector state, whose tombstones mean "deleted"; clear receipts,
//!   which replay an idempotent clear) — they are not fence records.
//!
//! Only a tombstone at a fence key last written at least the window before `now` is removed.
//! A compare-and-set claim that expected the tombstone then finds no record, fails, reads the
//! scope again and claims the absent record (`tenantry_engine::scoped_writes`): absence and a
//! tombstone are the same free scope.
//!
//! The store adapters express the rule in SQL; the in-memory fake calls [`prunable`], and the
//! conformance suite checks that every store agrees with it.

use serde_json::Value;

use crate::record::StoredRecord;
use crate::scope::FENCE_KEY_PREFIX;

/// The stored text of a tombstone (JSON null), as the SQL adapters compare it.
pub const TOMBSTONE_TEXT: &str = "null";

/// Why a record at a host-storage key is kept by fence retention (or that it may go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FenceRetention {
    /// A tombstone at a fence key, last written at or before the cutoff: remove it.
    Prunable,
    /// The key is not a fence key (connector state, clear receipts): not this rule's record.
    NotAFenceRecord,
    /// A fence, an intent or an undecodable record: never removed by retention.
    Active,
    /// A tombstone whose last write is unknown (written before the time column existed).
    Unaged,
    /// A tombstone written after the cutoff: still inside the window.
    InsideWindow,
}

/// The verdict on the record `stored` at `key`, last written at `written_at_ms` (Unix
/// milliseconds, `None` when unknown), with records written at or before `cutoff_ms` expired.
pub fn verdict(
    key: &str,
    stored: StoredRecord<'_>,
    written_at_ms: Option<i64>,
    cutoff_ms: i64,
) -> FenceRetention {
    if !key.starts_with(FENCE_KEY_PREFIX) {
        return FenceRetention::NotAFenceRecord;
    }
    match stored {
        Some(Ok(Value::Null)) => {}
        // An absent record has nothing to remove; anything else is active (fail closed).
        _ => return FenceRetention::Active,
    }
    match written_at_ms {
        None => FenceRetention::Unaged,
        Some(at) if at <= cutoff_ms => FenceRetention::Prunable,
        Some(_) => FenceRetention::InsideWindow,
    }
}

/// Whether retention may remove the record `stored` at `key` (see [`verdict`]).
pub fn prunable(
    key: &str,
    stored: StoredRecord<'_>,
    written_at_ms: Option<i64>,
    cutoff_ms: i64,
) -> bool {
    verdict(key, stored, written_at_ms, cutoff_ms) == FenceRetention::Prunable
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::FenceMarker;
    use crate::scope::{CLEAR_RECEIPT_PREFIX, INSTALLATION_FENCE_KEY, ScopeIdentity};

    #[test]
    fn only_aged_tombstones_at_fence_keys_are_prunable() {
        let scope = ScopeIdentity::object("kb-1");
        let key = crate::FenceKey::for_scope(&scope);
        let key = key.as_str();
        let fence = FenceMarker::new(&scope, "lost", 1).to_value();
        let intent = FenceMarker::intent(&scope, "upload", "host-a", 1, 2).to_value();
        let receipt = format!("{CLEAR_RECEIPT_PREFIX}abc");
        let cases: [(&str, StoredRecord<'_>, Option<i64>, FenceRetention); 10] = [
            (
                key,
                Some(Ok(&Value::Null)),
                Some(100),
                FenceRetention::Prunable,
            ),
            (
                INSTALLATION_FENCE_KEY,
                Some(Ok(&Value::Null)),
                Some(50),
                FenceRetention::Prunable,
            ),
            (
                key,
                Some(Ok(&Value::Null)),
                Some(101),
                FenceRetention::InsideWindow,
            ),
            (key, Some(Ok(&Value::Null)), None, FenceRetention::Unaged),
            (key, Some(Ok(&fence)), Some(0), FenceRetention::Active),
            (key, Some(Ok(&intent)), Some(0), FenceRetention::Active),
            (key, Some(Err(())), Some(0), FenceRetention::Active),
            (key, None, Some(0), FenceRetention::Active),
            (
                "ke.config.v1.abc",
                Some(Ok(&Value::Null)),
                Some(0),
                FenceRetention::NotAFenceRecord,
            ),
            (
                &receipt,
                Some(Ok(&json!({"cleared": true}))),
                Some(0),
                FenceRetention::NotAFenceRecord,
            ),
        ];
        for (key, stored, at, expected) in cases {
            assert_eq!(
                verdict(key, stored, at, 100),
                expected,
                "{key} {stored:?} {at:?}"
            );
            assert_eq!(
                prunable(key, stored, at, 100),
                expected == FenceRetention::Prunable
            );
        }
        assert_eq!(TOMBSTONE_TEXT, Value::Null.to_string());
    }
}
