//! Retention rule of the directory inbox: when an event's receipt may be removed
//! (docs/operations.md, "Retention").
//!
//! A receipt makes a re-delivered event idempotent: an event above the shared projection's
//! snapshot coverage cursor is accepted again only with its receipt
//! (`DirectoryError::MissingReceipt` otherwise). A receipt older than the window, at or below
//! the shared projection cursor, may go even when no snapshot covers it: a replica whose own
//! consumer cursor lags that far meets `MissingReceipt` and re-initializes from a snapshot (the
//! projector's rule), so nothing is applied twice and the inbox stays bounded without waiting
//! for a new snapshot (the coverage cursor only moves when a replica starts).

use chrono::{DateTime, Utc};

use crate::rows::{InboxReceipt, ProjectionState};

/// Whether `receipt` may be removed at `now` with retention `window`, given its instance's
/// projection state (`None`: no state row, nothing is removed). Removable when the receipt's
/// cursor is at or below the projection cursor `state.cursor` (applied by the shared
/// projection) and it was received at least `window` before `now`.
pub fn receipt_expired(
    receipt: &InboxReceipt,
    state: Option<&ProjectionState>,
    now: DateTime<Utc>,
    window: std::time::Duration,
) -> bool {
    let Some(state) = state else {
        return false;
    };
    let cutoff = chrono::Duration::from_std(window)
        .ok()
        .and_then(|w| now.checked_sub_signed(w))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    receipt.cursor <= state.cursor && receipt.received_at <= cutoff
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventUuid, InstanceUuid};
    use tenantry_kernel::Fingerprint;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    #[test]
    fn receipt_rules_table() {
        let instance = InstanceUuid::parse("i-1").unwrap();
        let state = ProjectionState {
            instance_uuid: instance.clone(),
            cursor: 50,
            snapshot_coverage_cursor: 20,
            snapshot_fingerprint: Fingerprint::from_stored("s"),
            last_applied_at: at(0),
            lease_expires_at: at(0),
        };
        let day = std::time::Duration::from_secs(86_400);
        let now = at(10 * 86_400);
        for (cursor, received, has_state, expected) in [
            (20, at(9 * 86_400), true, true),
            (1, at(0), true, true),
            (21, at(0), true, true),
            (50, at(0), true, true),
            (51, at(0), true, false),
            (20, at(9 * 86_400 + 1), true, false),
            (1, at(0), false, false),
        ] {
            let receipt = InboxReceipt {
                instance_uuid: instance.clone(),
                event_uuid: EventUuid::parse("e-1").unwrap(),
                cursor,
                event_type: "directory.changed".into(),
                revision: 1,
                fingerprint: Fingerprint::from_stored("f"),
                received_at: received,
                applied_at: Some(received),
            };
            let state = has_state.then_some(&state);
            assert_eq!(
                receipt_expired(&receipt, state, now, day),
                expected,
                "{cursor} {received} {has_state}"
            );
        }
    }
}
