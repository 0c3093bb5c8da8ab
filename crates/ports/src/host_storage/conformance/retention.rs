//! Conformance suite of the retention port for cleared fence records (features `testing` and
//! `fences`).
//!
//! Every adapter instantiates
//! [`fence_retention_conformance!`](macro@crate::fence_retention_conformance); the same cases run
//! against the in-memory fake, SQLite and PostgreSQL and check that each agrees with the pure
//! rule `tenantry_fence::retention`: tombstones at fence keys past the window removed, inside
//! kept; fences, intents, records of other keys kept whatever their age; a compare-and-set
//! claim that expected a removed tombstone claims the absent record instead; and two pruners at
//! once, beside claims, removing each tombstone once and never a claim.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc,
    missing_docs
)]

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};
use tenantry_fence::{Binding, FenceKey, FenceMarker, ScopeIdentity};

use crate::clock::ManualClock;
use crate::host_storage::HostStorage;
use crate::retention::{PruneBatch, RetentionKind, RetentionStore};

/// Runs every case. `$make` takes the test's [`ManualClock`] and returns a future resolving to
/// `(host_storage, retention_store, guard)`: both share one database, the host storage stamps
/// its writes with the clock, `guard` is kept alive for the test. Both stores are
/// `Clone + 'static`.
#[macro_export]
macro_rules! fence_retention_conformance {
    ($make:expr) => {
        $crate::fence_retention_conformance!(@cases $make;
            cleared_fences_past_the_window_go_and_every_other_record_stays,
            a_claim_that_expected_a_removed_tombstone_claims_the_absent_record,
            concurrent_pruners_remove_each_cleared_fence_once_beside_claims,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let clock = $crate::clock::ManualClock::new(
                    $crate::host_storage::conformance::retention::t(0),
                );
                let (storage, retention, _guard) = ($make)(clock.clone()).await;
                $crate::host_storage::conformance::retention::$case(storage, retention, clock).await;
            }
        )*
    };
}

const WINDOW: Duration = Duration::from_secs(100);
const KIND: RetentionKind = RetentionKind::ClearedFences;

/// `seconds` after the suite's epoch.
pub fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + seconds, 0)
        .single()
        .unwrap()
}

fn binding() -> Binding {
    Binding::parse("installation-r").unwrap()
}

fn key(scope: &str) -> String {
    FenceKey::for_scope(&ScopeIdentity::object(scope))
        .as_str()
        .to_owned()
}

fn intent(scope: &str, owner: &str, at: i64) -> Value {
    FenceMarker::intent(
        &ScopeIdentity::object(scope),
        "write",
        owner,
        at,
        at + 1_000,
    )
    .to_value()
}

/// A run of `scope` at `at`: its claim taken from nothing and released (a tombstone at `at`).
async fn cleared<S: HostStorage>(storage: &S, clock: &ManualClock, scope: &str, at: i64) {
    clock.set(t(at));
    let claim = intent(scope, "host-a", at);
    assert!(
        storage
            .compare_and_set(&binding(), &key(scope), None, &claim)
            .await
            .unwrap()
    );
    assert!(
        storage
            .compare_and_set(&binding(), &key(scope), Some(&claim), &Value::Null)
            .await
            .unwrap()
    );
}

async fn removed<R: RetentionStore>(retention: &R, now: DateTime<Utc>, limit: u32) -> u64 {
    match retention
        .prune_batch(KIND, now, WINDOW, limit)
        .await
        .unwrap()
    {
        PruneBatch::Removed(n) => n,
        other => panic!("unexpected {other:?}"),
    }
}

pub async fn cleared_fences_past_the_window_go_and_every_other_record_stays<
    S: HostStorage + Clone + 'static,
    R: RetentionStore + Clone + 'static,
>(
    storage: S,
    retention: R,
    clock: ManualClock,
) {
    let b = binding();
    cleared(&storage, &clock, "old-a", 0).await;
    cleared(&storage, &clock, "old-b", 5).await;
    // The installation record cleared by an operator (a fence, then null).
    clock.set(t(1));
    let installation = tenantry_fence::INSTALLATION_FENCE_KEY;
    let fence = FenceMarker::new(&ScopeIdentity::Installation, "lost", 1).to_value();
    storage.set(&b, installation, &fence).await.unwrap();
    assert!(
        storage
            .compare_and_set(&b, installation, Some(&fence), &Value::Null)
            .await
            .unwrap()
    );
    // Records that stay whatever their age.
    let fenced = FenceMarker::new(&ScopeIdentity::object("fenced"), "lost", 0).to_value();
    storage.set(&b, &key("fenced"), &fenced).await.unwrap();
    storage
        .set(&b, &key("lapsed"), &intent("lapsed", "gone", 0))
        .await
        .unwrap();
    storage
        .set(&b, &key("live"), &intent("live", "host-b", 0))
        .await
        .unwrap();
    storage
        .set(&b, "ke.config.v1.deleted-kb", &Value::Null)
        .await
        .unwrap();
    storage
        .set(
            &b,
            &tenantry_fence::clear_receipt_key("op-1"),
            &json!({"cleared": true}),
        )
        .await
        .unwrap();
    // Cleared inside the window.
    cleared(&storage, &clock, "recent", 50).await;

    assert_eq!(retention.oldest(KIND).await.unwrap(), Some(t(0)));
    assert_eq!(
        retention.count_expired(KIND, t(99), WINDOW).await.unwrap(),
        0
    );
    assert_eq!(
        retention.count_expired(KIND, t(100), WINDOW).await.unwrap(),
        1
    );
    assert_eq!(
        retention.count_expired(KIND, t(105), WINDOW).await.unwrap(),
        3
    );
    // Oldest first, in bounded batches.
    assert_eq!(removed(&retention, t(105), 1).await, 1);
    assert_eq!(storage.get(&b, &key("old-a")).await.unwrap(), None);
    assert_eq!(
        storage.get(&b, &key("old-b")).await.unwrap(),
        Some(Value::Null)
    );
    assert_eq!(removed(&retention, t(105), 10).await, 2);
    assert_eq!(removed(&retention, t(105), 10).await, 0);
    for gone in [key("old-b"), installation.to_owned()] {
        assert_eq!(storage.get(&b, &gone).await.unwrap(), None, "{gone}");
    }
    for kept in [
        key("fenced"),
        key("lapsed"),
        key("live"),
        key("recent"),
        "ke.config.v1.deleted-kb".to_owned(),
        tenantry_fence::clear_receipt_key("op-1"),
    ] {
        assert!(storage.get(&b, &kept).await.unwrap().is_some(), "{kept}");
    }
    assert_eq!(retention.oldest(KIND).await.unwrap(), Some(t(50)));
    // Far later: only the recent tombstone joins; fences and intents never do.
    assert_eq!(
        retention
            .count_expired(KIND, t(1_000_000), WINDOW)
            .await
            .unwrap(),
        1
    );
    assert_eq!(removed(&retention, t(1_000_000), 10).await, 1);
    assert_eq!(retention.oldest(KIND).await.unwrap(), None);
    assert_eq!(storage.get(&b, &key("fenced")).await.unwrap(), Some(fenced));
}

pub async fn a_claim_that_expected_a_removed_tombstone_claims_the_absent_record<
    S: HostStorage + Clone + 'static,
    R: RetentionStore + Clone + 'static,
>(
    storage: S,
    retention: R,
    clock: ManualClock,
) {
    let b = binding();
    cleared(&storage, &clock, "scope", 0).await;
    // A claimer read the tombstone; the pruner removes it before the claimer's write.
    let read = storage.get(&b, &key("scope")).await.unwrap();
    assert_eq!(read, Some(Value::Null));
    assert_eq!(removed(&retention, t(200), 10).await, 1);
    clock.set(t(200));
    let claim = intent("scope", "host-a", 200);
    assert!(
        !storage
            .compare_and_set(&b, &key("scope"), read.as_ref(), &claim)
            .await
            .unwrap(),
        "the record changed since it was read"
    );
    // Read again: absent is as free as a tombstone.
    let read = storage.get(&b, &key("scope")).await.unwrap();
    assert_eq!(read, None);
    assert!(
        storage
            .compare_and_set(&b, &key("scope"), None, &claim)
            .await
            .unwrap()
    );
    // A write stamps the record anew: a tombstone written now is inside the window.
    assert!(
        storage
            .compare_and_set(&b, &key("scope"), Some(&claim), &Value::Null)
            .await
            .unwrap()
    );
    assert_eq!(
        retention.count_expired(KIND, t(250), WINDOW).await.unwrap(),
        0
    );
    assert_eq!(retention.oldest(KIND).await.unwrap(), Some(t(200)));
}

pub async fn concurrent_pruners_remove_each_cleared_fence_once_beside_claims<
    S: HostStorage + Clone + 'static,
    R: RetentionStore + Clone + 'static,
>(
    storage: S,
    retention: R,
    clock: ManualClock,
) {
    const SCOPES: usize = 60;
    const CLAIMED: usize = 20;
    for n in 0..SCOPES {
        cleared(&storage, &clock, &format!("s{n}"), 0).await;
    }
    clock.set(t(200));
    let now = t(200);
    let pruners: Vec<_> = (0..2)
        .map(|_| {
            let retention = retention.clone();
            tokio::spawn(async move {
                let mut removed = 0;
                loop {
                    match retention
                        .prune_batch(KIND, now, WINDOW, 3)
                        .await
                        .expect("a prune never conflicts")
                    {
                        // The other pruner holds the retention lock: try again.
                        PruneBatch::Busy => tokio::task::yield_now().await,
                        PruneBatch::Removed(0) => return removed,
                        PruneBatch::Removed(n) => removed += n,
                    }
                }
            })
        })
        .collect();
    let claimer = {
        let storage = storage.clone();
        tokio::spawn(async move {
            let b = binding();
            // Claims taken over a tombstone (the rest found the record already removed).
            let mut over_tombstone = 0;
            for n in 0..CLAIMED {
                let scope = format!("s{n}");
                let claim = intent(&scope, "host-c", 200);
                loop {
                    let read = storage.get(&b, &key(&scope)).await.unwrap();
                    if storage
                        .compare_and_set(&b, &key(&scope), read.as_ref(), &claim)
                        .await
                        .expect("a claim never conflicts with a prune")
                    {
                        if read.is_some() {
                            over_tombstone += 1;
                        }
                        break;
                    }
                }
            }
            over_tombstone
        })
    };
    let over_tombstone = claimer.await.unwrap();
    let mut total = 0;
    for pruner in pruners {
        total += pruner.await.unwrap();
    }
    assert_eq!(
        total + over_tombstone,
        SCOPES as u64,
        "each tombstone removed once, or claimed before its removal"
    );
    let b = binding();
    for n in 0..SCOPES {
        let stored = storage.get(&b, &key(&format!("s{n}"))).await.unwrap();
        if n < CLAIMED {
            assert_eq!(
                stored,
                Some(intent(&format!("s{n}"), "host-c", 200)),
                "s{n}"
            );
        } else {
            assert_eq!(stored, None, "s{n}");
        }
    }
    assert_eq!(retention.count_expired(KIND, now, WINDOW).await.unwrap(), 0);
}
