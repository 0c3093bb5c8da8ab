//! The scope record as a cross-process claim: how a stored record at a fence key blocks,
//! admits or is taken over by a write, and when an operator may clear it.
//!
//! Every process on one database shares the records. Before writing a scope, a runtime reads
//! the scope's record and the installation record and classifies each ([`classify`]):
//! - absent or JSON null: free; the write takes the claim by compare-and-set (an intent with
//!   its owner and an expiry past the dispatch deadline);
//! - an intent of another owner that has not expired: held; the write waits for it;
//! - an intent of this owner: left over by this process (a release that did not land); it is
//!   taken over by compare-and-set;
//! - a fence, an expired intent (its holder vanished while a dispatch's outcome is unknown),
//!   or a record that cannot be read: fenced.
//!
//! Clearing is refused for an intent younger than the dispatch deadline: its dispatch may
//! still be in flight in another process ([`clear_refusal`]).

use serde_json::Value;

use crate::cache::{FenceMarker, RecordKind};
use crate::scope::ScopeIdentity;

/// How a stored record at a fence key bears on a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// No record or a tombstone: the scope is free to claim.
    Free,
    /// A live intent of another process; wait until it is released or expires.
    Claimed {
        /// The holding process.
        owner: String,
        /// When the claim lapses, Unix milliseconds.
        expires_at_ms: i64,
    },
    /// An intent of this process left behind; take it over.
    Own,
    /// A fence (or an expired intent, or an unreadable record): fail closed.
    Fenced,
}

/// A stored record as read: `None` absent, `Some(Ok(value))` read, `Some(Err(()))`
/// undecodable.
pub type StoredRecord<'a> = Option<Result<&'a Value, ()>>;

/// Classifies the stored record `stored` for a write by `owner` at `now_ms` (Unix
/// milliseconds).
pub fn classify(stored: StoredRecord<'_>, owner: &str, now_ms: i64) -> Holder {
    let value = match stored {
        None | Some(Ok(Value::Null)) => return Holder::Free,
        Some(Err(())) => return Holder::Fenced,
        Some(Ok(value)) => value,
    };
    let Some(marker) = FenceMarker::from_value(value) else {
        return Holder::Fenced;
    };
    match (marker.kind, marker.owner, marker.expires_at_ms) {
        (RecordKind::Intent, Some(holder), Some(expires_at_ms)) => {
            if holder == owner {
                Holder::Own
            } else if now_ms < expires_at_ms {
                Holder::Claimed {
                    owner: holder,
                    expires_at_ms,
                }
            } else {
                Holder::Fenced
            }
        }
        _ => Holder::Fenced,
    }
}

/// The kind a record with `marker` has for operators at `now_ms` (Unix milliseconds), by the
/// rule [`classify`] applies for every other process: an intent is an intent only while it
/// names its holder and its expiry (`expires_at_ms`) is still ahead; an intent past its expiry
/// (its holder vanished with the outcome unknown) or without holder or expiry is a fence, and
/// is shown and counted as one. A fence is a fence.
pub fn kind_at(marker: &FenceMarker, now_ms: i64) -> RecordKind {
    match (marker.kind, &marker.owner, marker.expires_at_ms) {
        (RecordKind::Intent, Some(_), Some(expires_at_ms)) if now_ms < expires_at_ms => {
            RecordKind::Intent
        }
        _ => RecordKind::Fence,
    }
}

/// The stored value of a scope's claim (a write-ahead intent of one owner, with one reason),
/// built once and stamped per run: [`IntentTemplate::at`] equals
/// `FenceMarker::intent(scope, reason, owner, now_ms, expires_at_ms).to_value()` without
/// serializing the marker again, so a runtime keeps one per scope and a claim costs a clone of
/// a small JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct IntentTemplate(Value);

impl IntentTemplate {
    /// The template of `owner`'s intent on `scope`, labelled `reason`.
    pub fn new(scope: &ScopeIdentity, reason: &str, owner: &str) -> Self {
        Self(FenceMarker::intent(scope, reason, owner, 0, 0).to_value())
    }

    /// The intent written at `now_ms`, expiring at `expires_at_ms` (Unix milliseconds).
    pub fn at(&self, now_ms: i64, expires_at_ms: i64) -> Value {
        self.at_reusing(None, now_ms, expires_at_ms)
    }

    /// [`at`](Self::at), stamping `spare` in place when it is an intent of this template (a
    /// value an earlier call returned, whatever its stamps), so a runtime that keeps its
    /// released claim allocates nothing; any other `spare` is dropped and the template cloned.
    pub fn at_reusing(&self, spare: Option<Value>, now_ms: i64, expires_at_ms: i64) -> Value {
        let mut value = match spare {
            Some(spare) if self.shapes(&spare) => spare,
            _ => self.0.clone(),
        };
        if let Value::Object(fields) = &mut value {
            for (field, stamp) in STAMPS.into_iter().zip([now_ms, expires_at_ms]) {
                if let Some(slot) = fields.get_mut(field) {
                    *slot = Value::from(stamp);
                }
            }
        }
        value
    }

    /// Stamps `claim` in place with `now_ms` and `expires_at_ms`: for a value this template
    /// returned ([`at`](Self::at), [`at_reusing`](Self::at_reusing)) and nobody changed since,
    /// which then equals `self.at(now_ms, expires_at_ms)` without the shape check of
    /// [`at_reusing`](Self::at_reusing). (Only the two stamp fields are written; the caller
    /// vouches for the rest.)
    pub fn restamp(claim: &mut Value, now_ms: i64, expires_at_ms: i64) {
        if let Value::Object(fields) = claim {
            for (field, stamp) in STAMPS.into_iter().zip([now_ms, expires_at_ms]) {
                if let Some(slot) = fields.get_mut(field) {
                    *slot = Value::from(stamp);
                }
            }
        }
    }

    /// Whether `value` equals the template apart from its stamps.
    fn shapes(&self, value: &Value) -> bool {
        match (&self.0, value) {
            // Both maps iterate in the same (key) order: one pass, no lookups.
            (Value::Object(template), Value::Object(fields)) => {
                template.len() == fields.len()
                    && template
                        .iter()
                        .zip(fields)
                        .all(|((name, expected), (key, found))| {
                            name == key && (found == expected || STAMPS.contains(&name.as_str()))
                        })
            }
            _ => false,
        }
    }
}

/// The fields of an intent that change on every claim (Unix milliseconds).
const STAMPS: [&str; 2] = ["fenced_at_ms", "expires_at_ms"];

/// Why an operator may not clear a record yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClearRefused {
    /// The record is a write-ahead intent younger than the dispatch deadline: its dispatch
    /// may still be in flight. Wait until it is `deadline_ms` old, then reconcile and clear.
    #[error(
        "the record is a write-ahead intent held by {owner} for {age_ms} ms, younger than the dispatch deadline of {deadline_ms} ms: its dispatch may still be in flight; wait until the deadline passed, reconcile with the remote, then clear"
    )]
    IntentInFlight {
        /// The holding process.
        owner: String,
        /// How old the intent is, milliseconds.
        age_ms: i64,
        /// The dispatch deadline, milliseconds.
        deadline_ms: i64,
    },
}

/// Whether clearing the record `marker` at `now_ms` must be refused, given the dispatch
/// deadline `deadline_ms` (milliseconds). Only intents are ever refused; an intent without a
/// timestamp cannot be aged and is clearable.
///
/// # Errors
/// [`ClearRefused::IntentInFlight`] for an intent younger than the deadline.
pub fn clear_refusal(
    marker: &FenceMarker,
    now_ms: i64,
    deadline_ms: i64,
) -> Result<(), ClearRefused> {
    if marker.kind != RecordKind::Intent {
        return Ok(());
    }
    let Some(at) = marker.fenced_at_ms else {
        return Ok(());
    };
    let age_ms = now_ms.saturating_sub(at);
    if age_ms < deadline_ms {
        return Err(ClearRefused::IntentInFlight {
            owner: marker.owner.clone().unwrap_or_default(),
            age_ms,
            deadline_ms,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_intent_past_its_expiry_is_a_fence() {
        let scope = ScopeIdentity::object("kb-1");
        let intent = FenceMarker::intent(&scope, "upload", "other", 100, 200);
        let fence = FenceMarker::new(&scope, "lost", 100);
        let mut no_owner = intent.clone();
        no_owner.owner = None;
        let mut no_expiry = intent.clone();
        no_expiry.expires_at_ms = None;
        let cases = [
            (&intent, 150, RecordKind::Intent),
            (&intent, 199, RecordKind::Intent),
            (&intent, 200, RecordKind::Fence),
            (&intent, 10_000, RecordKind::Fence),
            (&fence, 150, RecordKind::Fence),
            (&no_owner, 150, RecordKind::Fence),
            (&no_expiry, 150, RecordKind::Fence),
        ];
        for (marker, now_ms, expected) in cases {
            assert_eq!(kind_at(marker, now_ms), expected, "{marker:?} at {now_ms}");
        }
    }

    #[test]
    fn classify_stored_records() {
        let scope = ScopeIdentity::object("kb-1");
        let intent = FenceMarker::intent(&scope, "upload", "other", 100, 200).to_value();
        let own = FenceMarker::intent(&scope, "upload", "me", 100, 200).to_value();
        let fence = FenceMarker::new(&scope, "lost", 100).to_value();
        let no_owner = json!({"reason": "r", "kind": "intent"});
        let cases: [(StoredRecord<'_>, i64, Holder); 9] = [
            (None, 150, Holder::Free),
            (Some(Ok(&Value::Null)), 150, Holder::Free),
            (Some(Err(())), 150, Holder::Fenced),
            (Some(Ok(&fence)), 150, Holder::Fenced),
            (
                Some(Ok(&intent)),
                150,
                Holder::Claimed {
                    owner: "other".into(),
                    expires_at_ms: 200,
                },
            ),
            (Some(Ok(&intent)), 200, Holder::Fenced),
            (Some(Ok(&own)), 500, Holder::Own),
            (Some(Ok(&no_owner)), 150, Holder::Fenced),
            (
                Some(Ok(&json!({"kb_id": "kb-1", "reason": "x"}))),
                150,
                Holder::Fenced,
            ),
        ];
        for (stored, now, expected) in cases {
            assert_eq!(classify(stored, "me", now), expected, "{stored:?} at {now}");
        }
    }

    #[test]
    fn intent_template_stamps_the_same_value_as_the_marker() {
        for scope in [ScopeIdentity::object("kb-1"), ScopeIdentity::Installation] {
            let template = IntentTemplate::new(&scope, "write in progress", "host-a");
            for (now, expires) in [(0, 0), (1_700_000_000_123, 1_700_000_150_123), (-5, 7)] {
                assert_eq!(
                    template.at(now, expires),
                    FenceMarker::intent(&scope, "write in progress", "host-a", now, expires)
                        .to_value(),
                    "{scope} at {now}"
                );
            }
        }
    }

    #[test]
    fn intent_template_reuses_only_its_own_intents() {
        let scope = ScopeIdentity::object("kb-1");
        let template = IntentTemplate::new(&scope, "write in progress", "host-a");
        let marker = |reason: &str, now, expires| {
            FenceMarker::intent(&scope, reason, "host-a", now, expires).to_value()
        };
        let spares = [
            Some(template.at(1, 2)),
            Some(marker("upload kb-1", 1, 2)),
            Some(FenceMarker::new(&scope, "lost", 1).to_value()),
            Some(Value::Null),
            None,
        ];
        for spare in spares {
            assert_eq!(
                template.at_reusing(spare.clone(), 10, 20),
                marker("write in progress", 10, 20),
                "{spare:?}"
            );
        }
        let mut issued = template.at(1, 2);
        IntentTemplate::restamp(&mut issued, 10, 20);
        assert_eq!(issued, marker("write in progress", 10, 20));
    }

    #[test]
    fn clearing_a_young_intent_is_refused() {
        let scope = ScopeIdentity::object("kb-1");
        let intent = FenceMarker::intent(&scope, "upload", "host-a", 1_000, 100_000);
        assert_eq!(
            clear_refusal(&intent, 1_000 + 149_999, 150_000),
            Err(ClearRefused::IntentInFlight {
                owner: "host-a".into(),
                age_ms: 149_999,
                deadline_ms: 150_000
            })
        );
        assert_eq!(clear_refusal(&intent, 1_000 + 150_000, 150_000), Ok(()));
        let fence = FenceMarker::new(&scope, "lost", 1_000);
        assert_eq!(clear_refusal(&fence, 1_001, 150_000), Ok(()));
    }
}
