//! The scope record as a cross-process claim: how a stored record at a fence key blocks,
//! admits or is taken over by a write, and when an operator may clear it.
//!
//! Every process on one database shares the records, and every time they carry (`fenced_at_ms`,
//! `expires_at_ms`) and every `now_ms` these rules take is read on one clock, the store's (the
//! database's): a process whose own clock is off neither takes over nor clears a live record.
//! Before writing a scope, a runtime reads the scope's record and the installation record and
//! classifies each ([`classify`]):
//! - absent or JSON null: free; the write takes the claim by compare-and-set (a plain claim,
//!   [`FenceMarker::claim`], with its owner and an expiry past the dispatch deadline);
//! - an intent of another owner that has not expired: held; the write waits for it;
//! - an intent of this owner: left over by this process (a release that did not land); it is
//!   taken over by compare-and-set;
//! - a plain claim of another owner past its expiry: nothing was sent under it (its run ended
//!   or its process died before dispatching); it is taken over by compare-and-set;
//! - a fence, a dispatched intent past its expiry (its holder vanished while a dispatch's
//!   outcome is unknown), or a record that cannot be read: fenced.
//!
//! Clearing is refused while an intent's own expiry is ahead (the writer's bound: its
//! dispatch may still be in flight), whatever the clearing process's settings
//! ([`clear_refusal`]).

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
    /// A plain claim of another process past its expiry, under which nothing was sent (its
    /// run ended or its process died before dispatching): take it over.
    Lapsed {
        /// The process that held it.
        owner: String,
    },
    /// A fence (or an expired intent, or an unreadable record): fail closed.
    Fenced,
}

/// A stored record as read: `None` absent, `Some(Ok(value))` read, `Some(Err(()))`
/// undecodable.
pub type StoredRecord<'a> = Option<Result<&'a Value, ()>>;

/// Classifies the stored record `stored` for a write by `owner` at `now_ms` (Unix
/// milliseconds, the store's clock).
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
            // Planted (verification only): another owner's claim is read as this owner's.
            if holder == owner || tenantry_kernel::planted!("claim-of-another-owner-taken") {
                Holder::Own
            } else if now_ms < expires_at_ms {
                Holder::Claimed {
                    owner: holder,
                    expires_at_ms,
                }
            } else if !marker.dispatched
                // Planted (verification only): an expired dispatched intent read as free.
                || tenantry_kernel::planted!("expired-intent-counts-as-free")
            {
                Holder::Lapsed { owner: holder }
            } else {
                Holder::Fenced
            }
        }
        _ => Holder::Fenced,
    }
}

/// The kind a record with `marker` has for operators at `now_ms` (Unix milliseconds, the
/// store's clock), by the rule [`classify`] applies for every other process: an intent is an
/// intent while it names its holder and its expiry (`expires_at_ms`) is still ahead, and a
/// plain claim stays one past its expiry (nothing was sent under it: the next write takes it
/// over, it is no fence to clear); a dispatched intent past its expiry (its holder vanished
/// with the outcome unknown) or an intent without holder or expiry is a fence, and is shown
/// and counted as one. A fence is a fence.
pub fn kind_at(marker: &FenceMarker, now_ms: i64) -> RecordKind {
    match (marker.kind, &marker.owner, marker.expires_at_ms) {
        (RecordKind::Intent, Some(_), Some(expires_at_ms))
            if now_ms < expires_at_ms || !marker.dispatched =>
        {
            RecordKind::Intent
        }
        _ => RecordKind::Fence,
    }
}

/// The stored value of a scope's claim (a write-ahead intent of one owner, with one reason),
/// built once and stamped per run: [`IntentTemplate::at`] equals
/// `FenceMarker::claim(scope, reason, owner, now_ms, expires_at_ms).to_value()` without
/// serializing the marker again, so a runtime keeps one per scope and a claim costs a clone of
/// a small JSON object.
#[derive(Debug, Clone, PartialEq)]
pub struct IntentTemplate(Value);

impl IntentTemplate {
    /// The template of `owner`'s plain claim on `scope` ([`FenceMarker::claim`]), labelled
    /// `reason`.
    pub fn new(scope: &ScopeIdentity, reason: &str, owner: &str) -> Self {
        Self(FenceMarker::claim(scope, reason, owner, 0, 0).to_value())
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
        Self::restamp(&mut value, now_ms, expires_at_ms);
        value
    }

    /// Stamps `claim` in place with `now_ms` and `expires_at_ms`: for a value this template
    /// returned ([`at`](Self::at), [`at_reusing`](Self::at_reusing)) and nobody changed since,
    /// which then equals `self.at(now_ms, expires_at_ms)` without the shape check of
    /// [`at_reusing`](Self::at_reusing). (Only the two stamp fields are written; the caller
    /// vouches for the rest.)
    pub fn restamp(claim: &mut Value, now_ms: i64, expires_at_ms: i64) {
        let Value::Object(fields) = claim else {
            return;
        };
        // One ordered pass that stops at the second stamp: cheaper than two lookups by name in
        // a map this small (the fence runtime stamps a claim on every run).
        let mut left = STAMPS.len();
        for (name, slot) in fields.iter_mut() {
            let stamp = if name == STAMPS[0] {
                now_ms
            } else if name == STAMPS[1] {
                expires_at_ms
            } else {
                continue;
            };
            *slot = Value::from(stamp);
            left -= 1;
            if left == 0 {
                break;
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
    /// The record is a write-ahead intent whose own expiry (the bound its writer set past
    /// its dispatch deadline) is still ahead on the store's clock: its dispatch may still be
    /// in flight. It can be cleared from `expires_at_ms` on.
    #[error(
        "the record is a write-ahead intent held by {owner} until {expires_at_ms} (Unix ms, database clock; {remaining_ms} ms from now): its dispatch may still be in flight; it can be cleared from then on, after reconciling with the remote"
    )]
    IntentLive {
        /// The holding process.
        owner: String,
        /// When the intent lapses and may be cleared, Unix milliseconds (store clock).
        expires_at_ms: i64,
        /// How long until then, milliseconds.
        remaining_ms: i64,
    },
    /// The record is a write-ahead intent without an expiry (written by an older version)
    /// younger than the dispatch deadline: its dispatch may still be in flight. Wait until it
    /// is `deadline_ms` old, then reconcile and clear.
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
    /// The record is a fence written after a dispatch whose outcome is unknown (a lost answer,
    /// an elapsed deadline), and the request it records may still land until `expires_at_ms`
    /// (the expiry of the intent it replaced: the dispatch deadline plus the claim margin
    /// after the request went out). A reconciliation before then can miss it.
    #[error(
        "the fence records a request that may still land at the remote until {expires_at_ms} (Unix ms, database clock; {remaining_ms} ms from now); reconcile with the remote after that, then clear"
    )]
    RequestMayLand {
        /// When the request can no longer land and the fence may be cleared, Unix
        /// milliseconds (store clock).
        expires_at_ms: i64,
        /// How long until then, milliseconds.
        remaining_ms: i64,
    },
}

/// Whether clearing the record `marker` at `now_ms` (Unix milliseconds, the store's clock)
/// must be refused. An intent with an expiry is refused while that expiry is ahead (the
/// writer's own bound, whatever the clearing process's settings); one without an expiry
/// (older versions) while it is younger than `deadline_ms` (milliseconds); one with neither
/// expiry nor timestamp cannot be aged and is clearable. A fence is refused while the expiry it
/// carries is ahead: the runtime writes one on a fence that replaced a dispatched intent,
/// because the request may still land until then (docs/protocol.md, "A fence is not cleared
/// while its request may still land"; found by the fence model once requests may outlive their
/// deadline). A fence without an expiry (an operator hold, an older version, the reference's)
/// is clearable at once.
///
/// # Errors
/// [`ClearRefused::IntentLive`] for an intent whose expiry is ahead,
/// [`ClearRefused::IntentInFlight`] for an intent without expiry younger than the deadline,
/// [`ClearRefused::RequestMayLand`] for a fence whose expiry is ahead.
pub fn clear_refusal(
    marker: &FenceMarker,
    now_ms: i64,
    deadline_ms: i64,
) -> Result<(), ClearRefused> {
    // Planted (verification only): a clear that never refuses.
    if tenantry_kernel::planted!("clear-without-age-check") {
        return Ok(());
    }
    if marker.kind != RecordKind::Intent {
        // Planted (verification only): a fence cleared whatever request it records.
        let expiry = if tenantry_kernel::planted!("fence-forgets-its-request") {
            None
        } else {
            marker.expires_at_ms
        };
        return match expiry {
            Some(expires_at_ms) if now_ms < expires_at_ms => Err(ClearRefused::RequestMayLand {
                expires_at_ms,
                remaining_ms: expires_at_ms.saturating_sub(now_ms),
            }),
            _ => Ok(()),
        };
    }
    let owner = || marker.owner.clone().unwrap_or_default();
    if let Some(expires_at_ms) = marker.expires_at_ms {
        if now_ms < expires_at_ms {
            return Err(ClearRefused::IntentLive {
                owner: owner(),
                expires_at_ms,
                remaining_ms: expires_at_ms.saturating_sub(now_ms),
            });
        }
        return Ok(());
    }
    let Some(at) = marker.fenced_at_ms else {
        return Ok(());
    };
    let age_ms = now_ms.saturating_sub(at);
    if age_ms < deadline_ms {
        return Err(ClearRefused::IntentInFlight {
            owner: owner(),
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
        let claim = FenceMarker::claim(&scope, "write in progress", "other", 100, 200);
        let cases = [
            (&intent, 150, RecordKind::Intent),
            (&intent, 199, RecordKind::Intent),
            (&intent, 200, RecordKind::Fence),
            (&intent, 10_000, RecordKind::Fence),
            (&fence, 150, RecordKind::Fence),
            (&no_owner, 150, RecordKind::Fence),
            (&no_expiry, 150, RecordKind::Fence),
            (&claim, 150, RecordKind::Intent),
            (&claim, 10_000, RecordKind::Intent),
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
        let claim = FenceMarker::claim(&scope, "write in progress", "other", 100, 200).to_value();
        let cases: [(StoredRecord<'_>, i64, Holder); 12] = [
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
            (
                Some(Ok(&claim)),
                199,
                Holder::Claimed {
                    owner: "other".into(),
                    expires_at_ms: 200,
                },
            ),
            (
                Some(Ok(&claim)),
                200,
                Holder::Lapsed {
                    owner: "other".into(),
                },
            ),
            (Some(Ok(&own)), 100, Holder::Own),
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
                    FenceMarker::claim(&scope, "write in progress", "host-a", now, expires)
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
            FenceMarker::claim(&scope, reason, "host-a", now, expires).to_value()
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
    fn clearing_a_young_intent_without_expiry_is_refused() {
        let scope = ScopeIdentity::object("kb-1");
        let mut intent = FenceMarker::intent(&scope, "upload", "host-a", 1_000, 100_000);
        intent.expires_at_ms = None;
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

    /// The writer's own bound decides, whatever deadline the clearing process has: a process
    /// configured with a 1 s deadline cannot clear an intent whose expiry is 180 s out.
    #[test]
    fn clearing_an_intent_before_its_own_expiry_is_refused() {
        let scope = ScopeIdentity::object("kb-1");
        let intent = FenceMarker::intent(&scope, "upload", "host-a", 1_000, 181_000);
        for deadline_ms in [0, 1_000, 150_000, 1_000_000] {
            let refused = clear_refusal(&intent, 151_000, deadline_ms).unwrap_err();
            assert_eq!(
                refused,
                ClearRefused::IntentLive {
                    owner: "host-a".into(),
                    expires_at_ms: 181_000,
                    remaining_ms: 30_000
                }
            );
            assert!(refused.to_string().contains("181000"), "{refused}");
            assert_eq!(clear_refusal(&intent, 181_000, deadline_ms), Ok(()));
        }
    }

    /// A fence that replaced a dispatched intent keeps the intent's expiry: its request may
    /// still land until then, so it is not cleared before (found by the fence model once
    /// requests outlive their deadline). A fence without one is clearable at once.
    #[test]
    fn a_fence_is_not_cleared_while_its_request_may_still_land() {
        let scope = ScopeIdentity::object("kb-1");
        let hold = FenceMarker::new(&scope, "operator hold", 1_000);
        let mut lost = FenceMarker::fence(
            &scope,
            "upload",
            crate::FailureRecord {
                kind: "outcome_unknown".into(),
                detail: "answer lost".into(),
            },
            2_000,
        );
        lost.expires_at_ms = Some(181_000);
        let cases = [
            (&hold, 1_000, None),
            (&lost, 2_000, Some(179_000)),
            (&lost, 180_999, Some(1)),
            (&lost, 181_000, None),
            (&lost, 500_000, None),
        ];
        for (marker, now, remaining) in cases {
            let expected = remaining.map_or(Ok(()), |remaining_ms| {
                Err(ClearRefused::RequestMayLand {
                    expires_at_ms: 181_000,
                    remaining_ms,
                })
            });
            assert_eq!(clear_refusal(marker, now, 150_000), expected, "at {now}");
        }
        let round_trip = FenceMarker::from_value(&lost.to_value()).unwrap();
        assert_eq!(round_trip.kind, RecordKind::Fence);
        assert_eq!(round_trip.expires_at_ms, Some(181_000));
    }
}
