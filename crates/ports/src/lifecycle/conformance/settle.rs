//! Conformance cases of settling: acks and retries release the lease, a stale settle changes
//! nothing, a settle's compare-and-set and its supersede rules (unattempted, after absence with
//! its grace period judged when the lookup was sent), and the attempt window a settle that sent
//! nothing keeps.

use super::*;

pub async fn settle_ack_completes_and_releases_the_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    store
        .settle(&claimed.lease, &Settlement::ack(t(2)))
        .await
        .unwrap();
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Succeeded);
    assert_eq!(row.completed_at, Some(t(2)));
    assert_eq!(row.lease_owner, None);
    assert!(
        claim(&store, &clock, claim_at("w2", t(1000), 5))
            .await
            .unwrap()
            .is_empty()
    );
    // A second settle with the same lease is refused.
    assert_eq!(
        store.settle(&claimed.lease, &Settlement::ack(t(3))).await,
        Err(SettleError::LeaseLost { command_id: id })
    );
}

pub async fn settle_retry_schedules_the_next_attempt<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    store
        .settle(
            &claimed.lease,
            &Settlement::retry(t(30), ErrorRecord::new("REMOTE_BUSY", "busy")),
        )
        .await
        .unwrap();
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Pending);
    assert_eq!(row.next_attempt_at, t(30));
    assert_eq!(
        row.last_error_code
            .as_ref()
            .map(tenantry_lifecycle::ErrorCode::as_str),
        Some("REMOTE_BUSY")
    );
    assert_eq!(row.last_error_message.as_deref(), Some("busy"));
    assert_eq!(row.lease_owner, None);
    assert!(
        claim(&store, &clock, claim_at("w1", t(29), 5))
            .await
            .unwrap()
            .is_empty()
    );
    let again = claim_one(&store, &clock, "w1", t(30)).await;
    assert_eq!(again.attempt_count, 2);
    assert_eq!(again.lease.epoch, LeaseEpoch(2));
}

pub async fn stale_settle_after_takeover_is_lease_lost_and_changes_nothing<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let stale = claim_one(&store, &clock, "w1", t(0)).await;
    let current = claim_one(&store, &clock, "w2", t(61)).await;
    let cs_before = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    let cas = cs_before
        .plan(
            &[Transition::Activate {
                operation_id: cs_before.lifecycle_operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks").unwrap(),
                revision: 1,
            }],
            t(62),
        )
        .unwrap();
    let result = store
        .settle(
            &stale.lease,
            &Settlement::ack(t(62)).with_control_space(cas),
        )
        .await;
    assert_eq!(
        result,
        Err(SettleError::LeaseLost {
            command_id: id.clone()
        })
    );
    // Same owner, old epoch: still refused.
    let mut same_owner_old_epoch = current.lease.clone();
    same_owner_old_epoch.epoch = stale.lease.epoch;
    assert!(matches!(
        store
            .settle(&same_owner_old_epoch, &Settlement::ack(t(62)))
            .await,
        Err(SettleError::LeaseLost { .. })
    ));
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Processing);
    assert_eq!(row.lease_owner, Some(owner("w2")));
    let cs_after = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cs_after, cs_before, "a refused settle writes nothing");
    store
        .settle(&current.lease, &Settlement::ack(t(63)))
        .await
        .unwrap();
}

pub async fn settle_with_a_stale_control_space_writes_nothing<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    let cs = space(&store, "cs1").await;
    let cas = stale_activate(&store, "cs1", t(2)).await;
    assert!(matches!(
        store
            .settle(
                &claimed.lease,
                &Settlement::ack(t(2)).with_control_space(cas)
            )
            .await,
        Err(SettleError::ControlSpaceConflict { .. })
    ));
    assert_eq!(
        status_of(&store, &id).await,
        CommandStatus::Processing,
        "ack rolled back"
    );
    assert_eq!(space(&store, "cs1").await, cs);
}

pub async fn supersede_unattempted_refuses_an_attempted_command<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(0)).await;
    store
        .settle(
            &claimed.lease,
            &Settlement::retry(t(5), ErrorRecord::new("X", "x")),
        )
        .await
        .unwrap();
    let delete = deletion_claim(&store, &clock, t(1)).await;
    let supersede = Supersede {
        command_id: provision.clone(),
        rule: SupersedeRule::Unattempted,
        completed_at: t(1),
        error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "x"),
    };
    assert_eq!(
        store
            .settle(
                &delete.lease,
                &Settlement::ack(t(1)).with_supersede(supersede)
            )
            .await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        })
    );
    assert_eq!(status_of(&store, &provision).await, CommandStatus::Pending);
    assert_eq!(
        status_of(&store, delete.id()).await,
        CommandStatus::Processing,
        "ack rolled back"
    );
}

pub async fn supersede_after_absence_refuses_a_live_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    claim_one(&store, &clock, "w1", t(0)).await; // live until t(60)
    let delete = deletion_claim(&store, &clock, t(1)).await;
    let supersede = |at| Supersede {
        command_id: provision.clone(),
        rule: SupersedeRule::AfterRemoteAbsence {
            grace: Duration::ZERO,
            observed_at: at,
        },
        completed_at: at,
        error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "remote absence"),
    };
    clock.set(t(30));
    assert_eq!(
        store
            .settle(
                &delete.lease,
                &Settlement::ack(t(30)).with_supersede(supersede(t(30)))
            )
            .await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        })
    );
    clock.set(t(60));
    store
        .settle(
            &delete.lease,
            &Settlement::ack(t(60)).with_supersede(supersede(t(60))),
        )
        .await
        .unwrap();
    let row = record(&store, &provision).await;
    assert_eq!(row.status, CommandStatus::Superseded);
    assert_eq!(
        row.last_error_code
            .as_ref()
            .map(tenantry_lifecycle::ErrorCode::as_str),
        Some("SUPERSEDED_BY_DELETE")
    );
    assert_eq!(row.completed_at, Some(t(60)));
}

/// The grace period of [`SupersedeRule::AfterRemoteAbsence`] counts from the end of the
/// provision's last attempt window (here its settle at t(10)) on the store's clock.
pub async fn supersede_after_absence_waits_out_the_grace_period<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let attempt = claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(10));
    store
        .settle(
            &attempt.lease,
            &Settlement::retry(t(500), ErrorRecord::new("KFS_HTTP_504", "gateway timeout")),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &provision).await.attempt_window_ends_at,
        Some(t(10)),
        "the settle ends the attempt window"
    );
    let delete = deletion_claim(&store, &clock, t(11)).await;
    let settlement = |at| {
        Settlement::ack(at).with_supersede(Supersede {
            command_id: provision.clone(),
            rule: SupersedeRule::AfterRemoteAbsence {
                grace: Duration::from_secs(30),
                observed_at: at,
            },
            completed_at: at,
            error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "remote absence"),
        })
    };
    clock.set(t(39));
    assert_eq!(
        store.settle(&delete.lease, &settlement(t(39))).await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        }),
        "a request sent until t(10) may still land until t(40)"
    );
    clock.set(t(40));
    store
        .settle(&delete.lease, &settlement(t(40)))
        .await
        .unwrap();
    assert_eq!(
        status_of(&store, &provision).await,
        CommandStatus::Superseded
    );
}

/// [`SupersedeRule::AfterRemoteAbsence`] judges quietness when the lookup was sent
/// (`observed_at`), not when the supersede is written: a provision whose attempt window plus
/// grace passes between the lookup's send (t(39)) and its answer (t(45)) may have landed after
/// the lookup looked, and is not superseded (docs/protocol.md, "Absence is judged when the
/// lookup was sent").
pub async fn supersede_after_absence_judges_quietness_when_the_lookup_was_sent<
    S: LifecycleStore,
>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let attempt = claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(10));
    store
        .settle(
            &attempt.lease,
            &Settlement::retry(t(500), ErrorRecord::new("KFS_HTTP_504", "gateway timeout")),
        )
        .await
        .unwrap();
    let delete = deletion_claim(&store, &clock, t(11)).await;
    let settlement = |observed_at| {
        Settlement::ack(t(45)).with_supersede(Supersede {
            command_id: provision.clone(),
            rule: SupersedeRule::AfterRemoteAbsence {
                grace: Duration::from_secs(30),
                observed_at,
            },
            completed_at: t(45),
            error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "remote absence"),
        })
    };
    clock.set(t(45));
    assert_eq!(
        store.settle(&delete.lease, &settlement(t(39))).await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        }),
        "quiet from t(40) by the store's clock, but the lookup looked at t(39)"
    );
    let row = record(&store, &provision).await;
    assert_eq!(row.status, CommandStatus::Pending, "not superseded");
    assert_eq!(
        record(&store, delete.id()).await.status,
        CommandStatus::Processing,
        "ack rolled back"
    );
    store
        .settle(&delete.lease, &settlement(t(40)))
        .await
        .unwrap();
    assert_eq!(
        record(&store, &provision).await.status,
        CommandStatus::Superseded
    );
}

/// The attempt window: a claim opens it to the lease expiry; a settle that may have sent ends it
/// at the settle time; a settle that provably sent nothing restores the window of before the
/// claim (here: none, then t(10)).
pub async fn settle_that_sent_nothing_keeps_the_prior_attempt_window<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(60))
    );
    clock.set(t(1));
    store
        .settle(
            &first.lease,
            &Settlement::retry(t(2), ErrorRecord::new("X", "x")).nothing_sent(),
        )
        .await
        .unwrap();
    assert_eq!(record(&store, &id).await.attempt_window_ends_at, None);
    let second = claim_one(&store, &clock, "w1", t(5)).await;
    clock.set(t(10));
    store
        .settle(
            &second.lease,
            &Settlement::retry(t(20), ErrorRecord::new("X", "x")),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(10))
    );
    let third = claim_one(&store, &clock, "w1", t(20)).await;
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(80))
    );
    clock.set(t(21));
    store
        .settle(&third.lease, &Settlement::ack(t(21)).nothing_sent())
        .await
        .unwrap();
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(10)),
        "the window of the attempt that sent is kept"
    );
}

/// A refused settle answers only once its transaction has ended: the rows it locked are free
/// for the very next statement. (A transaction dropped without an explicit rollback keeps its
/// row locks until the connection pool flushes the rollback later; a claim meanwhile skipped
/// the locked row on PostgreSQL — found by `random_sequences_agree_with_the_in_memory_model`,
/// seed 7, which failed once in CI.) Each round refuses a settle's compare-and-set, lets the
/// lease expire and claims at once: the takeover must find the command.
pub async fn a_refused_settle_holds_no_lock_after_it_answers<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    for round in 0..40_i64 {
        let start = t(round * 1000);
        let cs = format!("cs{round}");
        let id = enqueue(&store, &clock, &cs, &format!("k{round}"), start).await;
        let claimed = claim_one(&store, &clock, "w1", start).await;
        let cas = stale_activate(&store, &cs, start).await;
        assert!(matches!(
            store
                .settle(
                    &claimed.lease,
                    &Settlement::ack(start).with_control_space(cas)
                )
                .await,
            Err(SettleError::ControlSpaceConflict { .. })
        ));
        let taken = claim(
            &store,
            &clock,
            claim_at("w2", start + Duration::from_secs(61), 1),
        )
        .await
        .unwrap();
        assert_eq!(
            taken
                .iter()
                .map(|c| &c.lease.command_id)
                .collect::<Vec<_>>(),
            vec![&id],
            "round {round}: the expired lease's command must be taken over at once"
        );
        store
            .settle(
                &taken[0].lease,
                &Settlement::ack(start + Duration::from_secs(62)),
            )
            .await
            .unwrap();
    }
}
