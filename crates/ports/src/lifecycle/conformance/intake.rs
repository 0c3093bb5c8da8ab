//! Conformance cases of intake: `latest_provision`, and `submit`/`submit_many` idempotent on the
//! key, refusing a duplicate control space, and writing compare-and-set and revoke sequences.

use super::*;

pub async fn latest_provision_finds_the_newest<S: LifecycleStore>(store: S, clock: ManualClock) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    enqueue(&store, &clock, "cs2", "k2", t(5)).await;
    let cs1 = ControlSpaceId::parse("cs1").unwrap();
    let latest = store
        .latest_provision(&tenant(), &cs1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.id, id);
    assert_eq!(latest.status, CommandStatus::Pending);
    assert_eq!(latest.attempt_count, 0);
    assert!(
        store
            .latest_provision(&tenant(), &ControlSpaceId::parse("none").unwrap())
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn submit_many_answers_each_plan_as_submit_would<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    assert!(store.submit_many(&[]).await.is_empty());
    // A batch of new control spaces: every one created, claimable, stamped with the store's now.
    let first: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| create_plan(&format!("cs-{n}"), &format!("k-{n}"), t(0)))
        .collect();
    clock.set(t(5));
    let answers = store.submit_many(&first).await;
    assert_eq!(answers.len(), 3);
    for (plan, answer) in first.iter().zip(&answers) {
        match answer {
            Ok(Submitted::Created(record)) => {
                assert_eq!(record.id, plan.command.id);
                assert_eq!(record.created_at, t(5));
            }
            other => panic!("expected created, got {other:?}"),
        }
    }
    // A mixed batch: a replayed key, a new space, and a new key for an existing space.
    let mixed = vec![
        create_plan("cs-a", "k-a", t(6)),
        create_plan("cs-d", "k-d", t(6)),
        create_plan("cs-b", "k-other", t(6)),
    ];
    let answers = store.submit_many(&mixed).await;
    assert!(
        matches!(&answers[0], Ok(Submitted::Existing(r)) if r.id == first[0].command.id),
        "{:?}",
        answers[0]
    );
    assert!(matches!(&answers[1], Ok(Submitted::Created(r)) if r.id == mixed[1].command.id));
    assert_eq!(answers[2], Err(IntakeStoreError::ControlSpaceExists));
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("k-other").unwrap())
            .await
            .unwrap()
            .is_none(),
        "a refused plan writes nothing"
    );
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w").unwrap(),
            lease_duration: Duration::from_secs(60),
            include_provision: true,
            limit: 10,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4, "a, b, c and d are due");
}

pub async fn submit_is_idempotent_on_the_key<S: LifecycleStore>(store: S, _clock: ManualClock) {
    let plan = create_plan("cs1", "k1", t(0));
    let Submitted::Created(created) = store.submit(&plan).await.unwrap() else {
        panic!("expected created")
    };
    // Same key again, even with another control space id: nothing written, original returned.
    let replay = create_plan("cs-other", "k1", t(1));
    let Submitted::Existing(existing) = store.submit(&replay).await.unwrap() else {
        panic!("expected existing")
    };
    assert_eq!(existing.id, created.id);
    assert_eq!(
        existing.request_fingerprint,
        plan.command.request_fingerprint
    );
    assert!(
        store
            .control_space(&tenant(), &ControlSpaceId::parse("cs-other").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let by_key = store
        .command_by_idempotency_key(&IdempotencyKey::parse("k1").unwrap())
        .await
        .unwrap();
    assert_eq!(by_key.map(|r| r.id), Some(created.id));
}

pub async fn submit_refuses_a_duplicate_control_space_and_writes_nothing<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    assert_eq!(
        store.submit(&create_plan("cs1", "k2", t(1))).await,
        Err(IntakeStoreError::ControlSpaceExists)
    );
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("k2").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .list_commands(&CommandFilter {
                limit: 100,
                ..CommandFilter::default()
            })
            .await
            .unwrap()
            .len(),
        1
    );
}

pub async fn submit_cas_and_revoke_sequence_are_compare_and_set<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let cs1 = ControlSpaceId::parse("cs1").unwrap();
    let cs = store.control_space(&tenant(), &cs1).await.unwrap().unwrap();
    let mut stale = cs.clone();
    stale.resource_version += 7;
    let ids = |k: &str| NewIds {
        command_id: CommandId::parse(format!("cmd-{k}")).unwrap(),
        operation_id: OperationId::parse(format!("op-{k}")).unwrap(),
    };
    let delete = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: cs1.clone(),
        idempotency_key: IdempotencyKey::parse("kd").unwrap(),
    };
    let stale_plan = delete.plan(Some(&stale), ids("kd"), t(1)).unwrap();
    assert_eq!(
        store.submit(&stale_plan).await,
        Err(IntakeStoreError::ControlSpaceConflict {
            control_space_id: cs1.clone()
        })
    );
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("kd").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let bump = |expected| IntakePlan {
        control_space: ControlSpaceWrite::BumpRevokeSequence {
            tenant_id: tenant(),
            control_space_id: cs1.clone(),
            expected,
        },
        command: create_plan("unused", &format!("kr{expected}"), t(2)).command,
    };
    assert_eq!(
        store.submit(&bump(5)).await,
        Err(IntakeStoreError::ControlSpaceConflict {
            control_space_id: cs1.clone()
        })
    );
    assert!(matches!(
        store.submit(&bump(0)).await,
        Ok(Submitted::Created(_))
    ));
    let after = store.control_space(&tenant(), &cs1).await.unwrap().unwrap();
    assert_eq!(after.last_revoke_sequence, 1);
    assert_eq!(
        after.resource_version, cs.resource_version,
        "revoke sequence does not bump the version"
    );
    let fresh = delete.plan(Some(&after), ids("kd"), t(3)).unwrap();
    assert!(matches!(
        store.submit(&fresh).await,
        Ok(Submitted::Created(_))
    ));
    let deleting = store.control_space(&tenant(), &cs1).await.unwrap().unwrap();
    assert_eq!(deleting.state, ControlSpaceState::Deleting);
    assert_eq!(deleting.resource_version, cs.resource_version + 1);
    let unknown = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: ControlSpaceId::parse("nope").unwrap(),
        idempotency_key: IdempotencyKey::parse("kx").unwrap(),
    };
    let mut ghost = after.clone();
    ghost.control_space_id = ControlSpaceId::parse("nope").unwrap();
    let ghost_plan = unknown.plan(Some(&ghost), ids("kx"), t(4)).unwrap();
    assert_eq!(
        store.submit(&ghost_plan).await,
        Err(IntakeStoreError::UnknownControlSpace)
    );
}

/// The caller's trace context (an opaque `traceparent` string) is stored with the command by
/// `submit` and `submit_many`, read back by listings, and handed to every claim of it,
/// retries included; a command without one carries none.
pub async fn the_trace_context_round_trips<S: LifecycleStore>(store: S, clock: ManualClock) {
    const ONE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const TWO: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    clock.set(t(0));
    let mut traced = create_plan("cs-traced", "k-traced", t(0));
    traced.command.trace_context = Some(ONE.to_owned());
    let traced_id = traced.command.id.clone();
    match store.submit(&traced).await.unwrap() {
        Submitted::Created(record) => assert_eq!(record.trace_context.as_deref(), Some(ONE)),
        other => panic!("expected created, got {other:?}"),
    }
    let mut batched = create_plan("cs-batched", "k-batched", t(0));
    batched.command.trace_context = Some(TWO.to_owned());
    let batched_id = batched.command.id.clone();
    let plain = create_plan("cs-plain", "k-plain", t(0));
    let plain_id = plain.command.id.clone();
    for answer in store.submit_many(&[batched, plain]).await {
        assert!(matches!(answer, Ok(Submitted::Created(_))), "{answer:?}");
    }
    let expected = [
        (&traced_id, Some(ONE)),
        (&batched_id, Some(TWO)),
        (&plain_id, None),
    ];
    for (id, context) in expected {
        assert_eq!(
            record(&store, id).await.trace_context.as_deref(),
            context,
            "{id}"
        );
    }
    let claimed = claim(&store, &clock, claim_at("w1", t(1), 10))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    for command in &claimed {
        let (_, context) = expected.iter().find(|(id, _)| *id == command.id()).unwrap();
        assert_eq!(
            command.trace_context.as_deref(),
            *context,
            "{}",
            command.id()
        );
        store
            .settle(
                &command.lease,
                &Settlement::retry(t(30), ErrorRecord::new("REMOTE_BUSY", "busy")),
            )
            .await
            .unwrap();
    }
    // The retry, by another worker, continues the same trace.
    let again = claim(&store, &clock, claim_at("w2", t(30), 10))
        .await
        .unwrap();
    assert_eq!(again.len(), 3);
    for command in &again {
        let (_, context) = expected.iter().find(|(id, _)| *id == command.id()).unwrap();
        assert_eq!(
            command.trace_context.as_deref(),
            *context,
            "{}",
            command.id()
        );
    }
}
