//! Conformance cases of leases: a takeover extends the replaced attempt's window by the call
//! deadline, claims read the store's clock, renewals extend only a held, live lease, and a
//! settle without outcome keeps the lease.

use super::*;

/// A claim that takes over an expired lease extends the replaced attempt's window by the call
/// deadline (a request it sent just before its lease expired may land that much later; issue
/// 29): the window covers `old end + deadline` whether the new attempt sends nothing, sends and
/// settles early (single and batch settle), renews, or dies; a claim of a pending command
/// extends nothing.
pub async fn a_takeover_extends_the_replaced_attempt_window_by_the_call_deadline<
    S: LifecycleStore,
>(
    store: S,
    clock: ManualClock,
) {
    let with_deadline = |now, lease: u64, deadline: u64| {
        (
            ClaimRequest {
                owner: owner("w2"),
                lease_duration: Duration::from_secs(lease),
                include_provision: true,
                limit: 10,
                call_deadline: Duration::from_secs(deadline),
            },
            now,
        )
    };
    let a = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let b = enqueue(&store, &clock, "cs2", "k2", t(0)).await;
    let c = enqueue(&store, &clock, "cs3", "k3", t(0)).await;
    // Claimed at t(0) with a lease of 60 s: windows end at t(60); the claim of a pending
    // command extends nothing, whatever the deadline.
    let first = claim(&store, &clock, with_deadline(t(0), 60, 150))
        .await
        .unwrap();
    assert_eq!(first.len(), 3);
    for id in [&a, &b, &c] {
        assert_eq!(record(&store, id).await.attempt_window_ends_at, Some(t(60)));
    }
    // The leases expire; another worker takes all three over at t(100) (lease 30 s, call
    // deadline 150 s): the replaced windows end at t(60) + 150 s = t(210).
    let taken = claim(&store, &clock, with_deadline(t(100), 30, 150))
        .await
        .unwrap();
    assert_eq!(taken.len(), 3);
    let lease_of = |id: &CommandId| {
        taken
            .iter()
            .find(|claimed| claimed.id() == id)
            .unwrap()
            .lease
            .clone()
    };
    for id in [&a, &b, &c] {
        assert_eq!(
            record(&store, id).await.attempt_window_ends_at,
            Some(t(210)),
            "the new window covers the replaced attempt's extended window"
        );
    }
    // A renewal at t(110) moves the lease, not the window back.
    clock.set(t(110));
    store
        .renew_lease(&lease_of(&c), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        record(&store, &c).await.attempt_window_ends_at,
        Some(t(210))
    );
    // a: settles at t(120) having sent nothing: the replaced (extended) window stays.
    clock.set(t(120));
    store
        .settle(
            &lease_of(&a),
            &Settlement::retry(t(130), ErrorRecord::new("X", "x")).nothing_sent(),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &a).await.attempt_window_ends_at,
        Some(t(210))
    );
    // b and c: settle at t(120) having sent (a batch): the window does not end before t(210).
    let results = store
        .settle_many(&[
            (
                lease_of(&b),
                Settlement::retry(t(130), ErrorRecord::new("X", "x")),
            ),
            (
                lease_of(&c),
                Settlement::retry(t(130), ErrorRecord::new("X", "x")),
            ),
        ])
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for id in [&b, &c] {
        assert_eq!(
            record(&store, id).await.attempt_window_ends_at,
            Some(t(210))
        );
    }
    // Past t(210), a later attempt that sent ends the window at its settle as before.
    let again = claim(&store, &clock, with_deadline(t(300), 30, 150))
        .await
        .unwrap();
    let lease = again.iter().find(|x| x.id() == &b).unwrap().lease.clone();
    clock.set(t(310));
    store
        .settle(
            &lease,
            &Settlement::retry(t(320), ErrorRecord::new("X", "x")),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &b).await.attempt_window_ends_at,
        Some(t(310))
    );
}

/// Claims decide "due" and "lease expired" by the store's clock; the lease expiry and the
/// claim time come from it too.
pub async fn claim_uses_the_store_clock_not_the_callers<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(100)).await;
    clock.set(t(99));
    assert!(
        store
            .claim(&claim_at("w1", t(99), 5).0)
            .await
            .unwrap()
            .is_empty(),
        "not due before the store's clock reaches next_attempt_at"
    );
    clock.set(t(100));
    let claimed = store.claim(&claim_at("w1", t(0), 5).0).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].claimed_at, t(100));
    assert_eq!(claimed[0].lease.expires_at, t(160));
    clock.set(t(159));
    assert!(
        store
            .claim(&claim_at("w2", t(0), 5).0)
            .await
            .unwrap()
            .is_empty(),
        "a live lease is never reclaimed"
    );
}

/// Renewal is a compare-and-set on owner and epoch that moves the expiry to the store's now
/// plus the lease length; a lost lease is never renewed.
pub async fn renew_lease_extends_a_held_lease_only<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(40));
    let renewed = store
        .renew_lease(&first.lease, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(renewed.expires_at, t(100));
    assert_eq!(renewed.epoch, first.lease.epoch);
    let row = record(&store, &id).await;
    assert_eq!(row.lease_expires_at, Some(t(100)));
    assert_eq!(row.attempt_window_ends_at, Some(t(100)));
    assert!(
        claim(&store, &clock, claim_at("w2", t(99), 5))
            .await
            .unwrap()
            .is_empty(),
        "the renewed lease is live until t(100)"
    );
    let second = claim_one(&store, &clock, "w2", t(100)).await;
    assert_eq!(
        store
            .renew_lease(&first.lease, Duration::from_secs(60))
            .await,
        Err(SettleError::LeaseLost {
            command_id: id.clone()
        }),
        "the old owner cannot renew after a takeover"
    );
    assert_eq!(
        record(&store, &id).await.lease_owner,
        Some(owner("w2")),
        "a refused renewal writes nothing"
    );
    store
        .settle(&second.lease, &Settlement::ack(t(101)))
        .await
        .unwrap();
    assert!(matches!(
        store
            .renew_lease(&second.lease, Duration::from_secs(60))
            .await,
        Err(SettleError::LeaseLost { .. })
    ));
}

/// Renewal refuses a lease that has expired on the store's clock (`lease_expires_at > now`
/// is part of the compare-and-set), even while no other worker has claimed the command yet:
/// a paused dispatch that resumes after its expiry cannot revive its lease, and writes nothing.
pub async fn renew_lease_refuses_an_expired_lease<S: LifecycleStore>(store: S, clock: ManualClock) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    assert_eq!(first.lease.expires_at, t(60));
    clock.set(t(60));
    assert_eq!(
        store
            .renew_lease(&first.lease, Duration::from_secs(60))
            .await,
        Err(SettleError::LeaseLost {
            command_id: id.clone()
        }),
        "a lease whose expiry is not after the store's now is not renewed"
    );
    let row = record(&store, &id).await;
    assert_eq!(
        row.lease_owner,
        Some(owner("w1")),
        "nobody took it over yet"
    );
    assert_eq!(
        row.lease_expires_at,
        Some(t(60)),
        "a refused renewal writes nothing"
    );
    let second = claim_one(&store, &clock, "w2", t(61)).await;
    assert_eq!(second.lease.epoch.0, first.lease.epoch.0 + 1);
}

pub async fn settle_without_outcome_keeps_the_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let delete = deletion_claim(&store, &clock, t(1)).await;
    let cs = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    let cas = cs
        .plan(
            &[Transition::RegisterRecoveredIdentity {
                operation_id: delete.operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks-r").unwrap(),
                revision: 4,
            }],
            t(2),
        )
        .unwrap();
    store
        .settle(
            &delete.lease,
            &Settlement {
                outcome: None,
                control_space: Some(cas),
                supersede: None,
                may_have_sent: true,
                spends_attempt: true,
            },
        )
        .await
        .unwrap();
    let after = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.knowledge_space_id,
        Some(KnowledgeSpaceId::parse("ks-r").unwrap())
    );
    assert_eq!(after.knowledge_space_revision, 4);
    assert_eq!(after.resource_version, cs.resource_version + 1);
    assert_eq!(
        status_of(&store, delete.id()).await,
        CommandStatus::Processing
    );
    store
        .settle(&delete.lease, &Settlement::ack(t(3)))
        .await
        .unwrap();
}
