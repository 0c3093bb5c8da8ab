//! Conformance suite of the retention port (features `testing` and `lifecycle`).
//!
//! Every adapter instantiates [`retention_store_conformance!`](crate::retention_store_conformance);
//! the same cases run against the in-memory fake, SQLite and PostgreSQL and check that each
//! agrees with the pure rules of `tenantry_lifecycle::retention`: past the window removed,
//! inside kept, a provision that still pins its control space kept, an idempotency key
//! replayed inside its lifetime and treated as new after it, and two pruners at once (beside
//! claims and settles) removing each record once.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc,
    missing_docs
)]

use std::time::Duration;

use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, LeaseOwner, OperationId, TenantId,
};
use tenantry_lifecycle::intake::{NewIds, RequestDeletion};
use tenantry_lifecycle::{
    CommandStatus, ErrorRecord, Settlement, Supersede, SupersedeRule, Transition,
};

use crate::clock::ManualClock;
use crate::lifecycle::conformance::{create_plan, t};
use crate::lifecycle::{
    ClaimRequest, CommandAdmin, CommandFilter, LifecycleStore, OperatorAction, OperatorActionKind,
    Submitted,
};
use crate::retention::{PruneBatch, RetentionKind, RetentionStore};

/// Runs every retention case. `$make` takes the test's [`ManualClock`] and returns a future
/// resolving to `(lifecycle_store, retention_store, guard)`: both stores share one database
/// (the lifecycle store reads "now" from the clock), `guard` is kept alive for the test.
/// The lifecycle store is `LifecycleStore + CommandAdmin + Clone + 'static`, the retention
/// store `RetentionStore + Clone + 'static`.
#[macro_export]
macro_rules! retention_store_conformance {
    ($make:expr) => {
        $crate::retention_store_conformance!(@cases $make;
            prune_removes_finished_commands_past_the_window_and_keeps_the_rest,
            idempotency_key_replays_inside_its_lifetime_and_is_new_after_it,
            prune_removes_operator_actions_past_their_window,
            concurrent_pruners_remove_each_record_once_beside_claims_and_settles,
            prune_removes_the_attempt_errors_with_their_command,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let clock = $crate::clock::ManualClock::new($crate::lifecycle::conformance::t(0));
                let (store, retention, _guard) = ($make)(clock.clone()).await;
                $crate::lifecycle::conformance::retention::$case(store, retention, clock).await;
            }
        )*
    };
}

const WINDOW: Duration = Duration::from_secs(100);

fn tenant() -> TenantId {
    TenantId::parse("tenant-a").unwrap()
}

async fn enqueue<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    cs: &str,
    key: &str,
    at: i64,
) -> CommandId {
    clock.set(t(at));
    match store.submit(&create_plan(cs, key, t(at))).await.unwrap() {
        Submitted::Created(record) => record.id,
        Submitted::Existing(record) => panic!("unexpected replay of {}", record.id),
    }
}

fn claim_request(who: &str, include_provision: bool, limit: u32) -> ClaimRequest {
    ClaimRequest {
        owner: LeaseOwner::parse(who).unwrap(),
        lease_duration: Duration::from_secs(60),
        include_provision,
        limit,
        call_deadline: std::time::Duration::ZERO,
    }
}

/// Space `cs` provisioned by key `key` (never delivered) and deleted by key `key`-d at `at`:
/// both commands finished at `at` (provision superseded, deletion succeeded), the space is
/// `deleted`. Returns (provision, deletion).
async fn retired<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    cs: &str,
    key: &str,
    at: i64,
) -> (CommandId, CommandId) {
    retired_after_retries(store, clock, cs, key, at, 0).await
}

/// [`retired`], the deletion first settled as a retry `retries` times (each with an error).
async fn retired_after_retries<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    cs: &str,
    key: &str,
    at: i64,
    retries: u32,
) -> (CommandId, CommandId) {
    let provision = enqueue(store, clock, cs, key, at).await;
    let space_id = ControlSpaceId::parse(cs).unwrap();
    let space = store.control_space(&tenant(), &space_id).await.unwrap();
    let delete_key = format!("{key}-d");
    let plan = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: space_id.clone(),
        idempotency_key: IdempotencyKey::parse(&delete_key).unwrap(),
    }
    .plan(
        space.as_ref(),
        NewIds {
            command_id: CommandId::parse(format!("cmd-{delete_key}")).unwrap(),
            operation_id: OperationId::parse(format!("op-{delete_key}")).unwrap(),
        },
        t(at),
    )
    .unwrap();
    store.submit(&plan).await.unwrap();
    for n in 0..retries {
        let claimed = store
            .claim(&claim_request("wd", false, 1))
            .await
            .unwrap()
            .pop()
            .expect("the deletion is claimable");
        let error = ErrorRecord::new("REMOTE_UNAVAILABLE", format!("try {n}"));
        store
            .settle(&claimed.lease, &Settlement::retry(t(at), error))
            .await
            .unwrap();
    }
    // Provisions are left out of the claim: only the deletion is claimable.
    let claimed = store
        .claim(&claim_request("wd", false, 1))
        .await
        .unwrap()
        .pop()
        .expect("the deletion is claimable");
    let deleting = store
        .control_space(&tenant(), &space_id)
        .await
        .unwrap()
        .unwrap();
    let cas = deleting
        .plan(
            &[Transition::CompleteDeletion {
                operation_id: deleting.lifecycle_operation_id.clone(),
                revision: 0,
            }],
            t(at),
        )
        .unwrap();
    let settlement = Settlement::ack(t(at))
        .with_control_space(cas)
        .with_supersede(Supersede {
            command_id: provision.clone(),
            rule: SupersedeRule::Unattempted,
            completed_at: t(at),
            error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "retired"),
        });
    store.settle(&claimed.lease, &settlement).await.unwrap();
    (provision, claimed.id().clone())
}

/// Rows one `prune_batch` of `kind` removes at `now` (window [`WINDOW`], at most `limit`).
async fn removed<R: RetentionStore>(
    retention: &R,
    kind: RetentionKind,
    now: chrono::DateTime<chrono::Utc>,
    limit: u32,
) -> u64 {
    retention
        .prune_batch(kind, now, WINDOW, limit)
        .await
        .unwrap()
        .removed()
}

async fn ids<S: LifecycleStore>(store: &S) -> Vec<String> {
    let mut ids: Vec<String> = store
        .list_commands(&CommandFilter {
            limit: 10_000,
            ..CommandFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id.as_str().to_owned())
        .collect();
    ids.sort();
    ids
}

pub async fn prune_removes_finished_commands_past_the_window_and_keeps_the_rest<
    S: LifecycleStore + CommandAdmin,
    R: RetentionStore,
>(
    store: S,
    retention: R,
    clock: ManualClock,
) {
    let (provision, deletion) = retired(&store, &clock, "cs1", "k1", 1).await;
    let live = enqueue(&store, &clock, "cs2", "k2", 2).await;
    // cs3's provision succeeds at t(3): the space stays (not deleted), so it is evidence.
    let pinned = enqueue(&store, &clock, "cs3", "k3", 3).await;
    let claimed = store.claim(&claim_request("w", true, 10)).await.unwrap();
    for c in claimed {
        if c.id() == &pinned {
            store
                .settle(&c.lease, &Settlement::ack(t(3)))
                .await
                .unwrap();
        } else {
            store
                .settle(
                    &c.lease,
                    &Settlement::retry(t(500), ErrorRecord::new("X", "x")),
                )
                .await
                .unwrap();
        }
    }
    let kind = RetentionKind::FinishedCommands;
    assert_eq!(retention.oldest(kind).await.unwrap(), Some(t(1)));
    // Inside the window (finished at t(1), window 100 s): nothing is expired.
    assert_eq!(
        retention.count_expired(kind, t(100), WINDOW).await.unwrap(),
        0
    );
    assert_eq!(removed(&retention, kind, t(100), 10).await, 0);
    // At the window's end both commands of the deleted space go; the live and the pinned stay.
    assert_eq!(
        retention.count_expired(kind, t(101), WINDOW).await.unwrap(),
        2
    );
    assert_eq!(
        retention
            .count_expired(kind, t(10_000), WINDOW)
            .await
            .unwrap(),
        2
    );
    assert_eq!(removed(&retention, kind, t(101), 1).await, 1);
    assert_eq!(removed(&retention, kind, t(101), 1).await, 1);
    assert_eq!(removed(&retention, kind, t(101), 1).await, 0);
    assert_eq!(
        retention.count_expired(kind, t(101), WINDOW).await.unwrap(),
        0
    );
    let mut expected = vec![live.as_str().to_owned(), pinned.as_str().to_owned()];
    expected.sort();
    assert_eq!(ids(&store).await, expected);
    assert!(!ids(&store).await.contains(&provision.as_str().to_owned()));
    assert!(!ids(&store).await.contains(&deletion.as_str().to_owned()));
    assert_eq!(retention.oldest(kind).await.unwrap(), Some(t(3)));
}

pub async fn idempotency_key_replays_inside_its_lifetime_and_is_new_after_it<
    S: LifecycleStore + CommandAdmin,
    R: RetentionStore,
>(
    store: S,
    retention: R,
    clock: ManualClock,
) {
    let (_, deletion) = retired(&store, &clock, "cs1", "k1", 1).await;
    let kind = RetentionKind::FinishedCommands;
    // A pruner ran just inside the window: the key still answers with the original command.
    removed(&retention, kind, t(100), 10).await;
    clock.set(t(100));
    let replay = create_plan("cs9", "k1", t(100));
    match store.submit(&replay).await.unwrap() {
        Submitted::Existing(original) => {
            assert_eq!(original.status, CommandStatus::Superseded);
            assert_eq!(original.control_space_id.as_str(), "cs1");
        }
        Submitted::Created(record) => panic!("replay inside the window created {}", record.id),
    }
    let by_key = store
        .command_by_idempotency_key(&IdempotencyKey::parse("k1-d").unwrap())
        .await
        .unwrap();
    assert_eq!(by_key.map(|r| r.id), Some(deletion));
    // After the window the records are gone and the same key is a new request.
    assert_eq!(removed(&retention, kind, t(101), 10).await, 2);
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("k1-d").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    clock.set(t(101));
    match store
        .submit(&create_plan("cs9", "k1", t(101)))
        .await
        .unwrap()
    {
        Submitted::Created(record) => assert_eq!(record.control_space_id.as_str(), "cs9"),
        Submitted::Existing(record) => panic!("key replayed {} after its lifetime", record.id),
    }
}

pub async fn prune_removes_operator_actions_past_their_window<
    S: LifecycleStore + CommandAdmin,
    R: RetentionStore,
>(
    store: S,
    retention: R,
    clock: ManualClock,
) {
    let early = enqueue(&store, &clock, "cs1", "k1", 0).await;
    let late = enqueue(&store, &clock, "cs2", "k2", 0).await;
    for (id, at) in [(&early, 10), (&late, 20)] {
        clock.set(t(at));
        store
            .act_on_command(&OperatorAction {
                action_id: format!("act-{}", id.as_str()),
                command_id: id.clone(),
                kind: OperatorActionKind::Abandon,
                actor: "conformance".into(),
                reason: "retention".into(),
                at: t(at),
            })
            .await
            .unwrap();
    }
    let kind = RetentionKind::OperatorActions;
    assert_eq!(retention.oldest(kind).await.unwrap(), Some(t(10)));
    assert_eq!(
        retention.count_expired(kind, t(109), WINDOW).await.unwrap(),
        0
    );
    assert_eq!(
        retention.count_expired(kind, t(110), WINDOW).await.unwrap(),
        1
    );
    assert_eq!(removed(&retention, kind, t(110), 10).await, 1);
    assert!(store.command_actions(&early).await.unwrap().is_empty());
    assert_eq!(store.command_actions(&late).await.unwrap().len(), 1);
    assert_eq!(retention.oldest(kind).await.unwrap(), Some(t(20)));
    // The abandoned provisions pin their (not deleted) spaces: no command is expired.
    assert_eq!(
        retention
            .count_expired(RetentionKind::FinishedCommands, t(10_000), WINDOW)
            .await
            .unwrap(),
        0
    );
}

pub async fn concurrent_pruners_remove_each_record_once_beside_claims_and_settles<
    S: LifecycleStore + CommandAdmin + Clone + 'static,
    R: RetentionStore + Clone + 'static,
>(
    store: S,
    retention: R,
    clock: ManualClock,
) {
    const SPACES: usize = 12;
    for n in 0..SPACES {
        retired(&store, &clock, &format!("old-{n}"), &format!("ko{n}"), 1).await;
    }
    const LIVE: usize = 8;
    for n in 0..LIVE {
        enqueue(&store, &clock, &format!("live-{n}"), &format!("kl{n}"), 200).await;
    }
    let now = t(200);
    let pruners: Vec<_> = (0..2)
        .map(|_| {
            let retention = retention.clone();
            tokio::spawn(async move {
                let mut removed = 0;
                loop {
                    match retention
                        .prune_batch(RetentionKind::FinishedCommands, now, WINDOW, 3)
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
        let store = store.clone();
        tokio::spawn(async move {
            let mut settled = 0;
            while settled < LIVE {
                let claimed = store
                    .claim(&claim_request("wc", true, 2))
                    .await
                    .expect("claims never conflict with a prune");
                for c in claimed {
                    store
                        .settle(&c.lease, &Settlement::ack(now))
                        .await
                        .expect("settles never conflict with a prune");
                    settled += 1;
                }
            }
        })
    };
    claimer.await.unwrap();
    let mut total = 0;
    for pruner in pruners {
        total += pruner.await.unwrap();
    }
    assert_eq!(
        total,
        2 * SPACES as u64,
        "each expired command removed exactly once"
    );
    // Only the live commands (now finished at t(200), inside the window) are left.
    assert_eq!(ids(&store).await.len(), LIVE);
    assert_eq!(
        retention
            .count_expired(RetentionKind::FinishedCommands, now, WINDOW)
            .await
            .unwrap(),
        0
    );
}

/// Pruning a command removes its attempt-error log with it (no entry is left behind), and
/// leaves the log of a command that stays.
pub async fn prune_removes_the_attempt_errors_with_their_command<
    S: LifecycleStore + CommandAdmin,
    R: RetentionStore,
>(
    store: S,
    retention: R,
    clock: ManualClock,
) {
    let (_, deletion) = retired_after_retries(&store, &clock, "cs1", "k1", 1, 2).await;
    let live = enqueue(&store, &clock, "cs2", "k2", 2).await;
    let claimed = store
        .claim(&claim_request("w", true, 1))
        .await
        .unwrap()
        .pop()
        .expect("the provision is claimable");
    assert_eq!(claimed.id(), &live);
    store
        .settle(
            &claimed.lease,
            &Settlement::retry(t(500), ErrorRecord::new("REMOTE_UNAVAILABLE", "live")),
        )
        .await
        .unwrap();
    assert_eq!(store.command_errors(&deletion, 50).await.unwrap().total, 2);
    let kind = RetentionKind::FinishedCommands;
    assert_eq!(removed(&retention, kind, t(101), 10).await, 2);
    let gone = store.command_errors(&deletion, 50).await.unwrap();
    assert_eq!(
        (gone.total, gone.entries.len()),
        (0, 0),
        "no error entry outlives its command"
    );
    let kept = store.command_errors(&live, 50).await.unwrap();
    assert_eq!(kept.total, 1);
    assert_eq!(kept.entries[0].message, "live");
}
