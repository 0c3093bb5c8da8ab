//! Command intake: replays, refusals of bad input and forbidden transitions, revoke
//! sequences, store failures.

use super::*;

#[tokio::test]
async fn intake_replays_the_same_request_and_refuses_a_different_one_with_the_same_key() {
    let h = harness();
    let first = h
        .intake
        .create_control_space(&create_request("cs1", "k1"))
        .await
        .unwrap();
    assert!(!first.replayed);
    h.drain(t(0)).await; // the space moved on; a replay must still be recognised
    let again = h
        .intake
        .create_control_space(&create_request("cs1", "k1"))
        .await
        .unwrap();
    assert_eq!(
        again,
        IntakeReceipt {
            replayed: true,
            ..first.clone()
        }
    );
    let mut different = create_request("cs1", "k1");
    different.name = "Renamed".into();
    assert_eq!(
        h.intake.create_control_space(&different).await,
        Err(IntakeFailure::Rejected(IntakeError::IdempotencyConflict {
            key: key("k1")
        }))
    );
    assert_eq!(h.store.commands().len(), 1);
}

#[tokio::test]
async fn intake_refuses_bad_input_and_writes_nothing() {
    let h = harness();
    h.create("cs1").await;
    let commands = h.store.commands();
    let space = h.space("cs1").await;
    let mut oversized = create_request("cs2", "k2");
    oversized.description = "x".repeat(70 * 1024);
    let mut nameless = create_request("cs3", "k3");
    nameless.name = String::new();
    assert!(matches!(
        h.intake.create_control_space(&oversized).await,
        Err(IntakeFailure::Rejected(IntakeError::PayloadTooLarge { .. }))
    ));
    assert!(matches!(
        h.intake.create_control_space(&nameless).await,
        Err(IntakeFailure::Rejected(IntakeError::InvalidField {
            field: "name",
            ..
        }))
    ));
    assert!(matches!(
        h.intake
            .create_control_space(&create_request("cs1", "k4"))
            .await,
        Err(IntakeFailure::Rejected(
            IntakeError::ControlSpaceExists { .. }
        ))
    ));
    assert!(matches!(
        h.intake
            .request_deletion(&delete_request("missing", "k5"))
            .await,
        Err(IntakeFailure::Rejected(
            IntakeError::UnknownControlSpace { .. }
        ))
    ));
    let revoke_early = RequestRevocation {
        tenant_id: tenant(),
        control_space_id: cs_id("cs1"),
        grant_id: GrantId::parse("g").unwrap(),
        reason_code: "r".into(),
        idempotency_key: key("k6"),
    };
    assert!(matches!(
        h.intake.request_revocation(&revoke_early).await,
        Err(IntakeFailure::Rejected(IntakeError::NotProvisioned { .. }))
    ));
    assert_eq!(h.store.commands(), commands, "no command written");
    assert_eq!(h.space("cs1").await, space, "control space untouched");
    assert!(
        h.store
            .control_space(&tenant(), &cs_id("cs2"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn intake_refuses_a_transition_the_state_machine_forbids() {
    let h = harness();
    h.create("cs1").await;
    h.delete("cs1").await;
    let result = h
        .intake
        .request_deletion(&delete_request("cs1", "another-key"))
        .await;
    assert!(
        matches!(
            result,
            Err(IntakeFailure::Rejected(IntakeError::Transition(_)))
        ),
        "{result:?}"
    );
}

#[tokio::test]
async fn revocations_take_increasing_revoke_sequences() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let mut sequences = Vec::new();
    for i in 0..3 {
        let receipt = h
            .intake
            .request_revocation(&RequestRevocation {
                tenant_id: tenant(),
                control_space_id: cs_id("cs1"),
                grant_id: GrantId::parse(format!("g{i}")).unwrap(),
                reason_code: "r".into(),
                idempotency_key: key(&format!("rk{i}")),
            })
            .await
            .unwrap();
        sequences.push(
            h.command(&receipt.command_id).payload["revoke_sequence"]
                .as_i64()
                .unwrap(),
        );
    }
    assert_eq!(sequences, [1, 2, 3]);
}

#[tokio::test]
async fn intake_store_failure_is_reported_and_writes_nothing() {
    let h = harness();
    h.store
        .fail_next_call(tenantry_ports::lifecycle::StoreError::unavailable("down"));
    assert!(matches!(
        h.intake
            .create_control_space(&create_request("cs1", "k1"))
            .await,
        Err(IntakeFailure::Store(_))
    ));
    assert!(h.store.commands().is_empty());
}

/// A bulk intake answers each request as `submit` does alone: new spaces created, a replay
/// replayed, a reused key and bad input refused (nothing written for them), a revocation
/// (which reads its control space) applied one by one.
#[tokio::test]
async fn submit_many_answers_each_request_as_submit_would() {
    let h = harness();
    let first = h.create("cs1").await;
    h.drain(t(0)).await;
    let mut renamed = create_request("cs1", "create-cs1");
    renamed.name = "Renamed".into();
    let mut nameless = create_request("cs9", "k9");
    nameless.name = String::new();
    let requests: Vec<IntakeRequest> = vec![
        create_request("cs2", "k2").into(),
        create_request("cs1", "create-cs1").into(),
        renamed.into(),
        nameless.into(),
        create_request("cs1", "k-new").into(),
        RequestRevocation {
            tenant_id: tenant(),
            control_space_id: cs_id("cs1"),
            grant_id: GrantId::parse("g").unwrap(),
            reason_code: "bulk".into(),
            idempotency_key: key("k-revoke"),
        }
        .into(),
        create_request("cs3", "k3").into(),
    ];
    let answers = h.intake.submit_many(requests).await;
    assert_eq!(answers.len(), 7);
    assert!(matches!(&answers[0], Ok(r) if !r.replayed));
    assert_eq!(
        answers[1],
        Ok(IntakeReceipt {
            replayed: true,
            ..first.clone()
        })
    );
    assert_eq!(
        answers[2],
        Err(IntakeFailure::Rejected(IntakeError::IdempotencyConflict {
            key: key("create-cs1")
        }))
    );
    assert!(matches!(
        answers[3],
        Err(IntakeFailure::Rejected(IntakeError::InvalidField {
            field: "name",
            ..
        }))
    ));
    assert!(matches!(
        answers[4],
        Err(IntakeFailure::Rejected(
            IntakeError::ControlSpaceExists { .. }
        ))
    ));
    assert!(matches!(&answers[5], Ok(r) if !r.replayed));
    assert!(matches!(&answers[6], Ok(r) if !r.replayed));
    // cs1's provision, cs2, the revocation and cs3.
    assert_eq!(h.store.commands().len(), 4);
}

/// The id of a deleted control space is refused as deleted, not as existing, by a create and
/// by a new deletion; a live one still answers "exists".
#[tokio::test]
async fn a_deleted_control_space_id_is_refused_as_deleted() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    h.delete("cs1").await;
    h.drain(t(10)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    let refused = h
        .intake
        .create_control_space(&create_request("cs1", "again"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            IntakeFailure::Rejected(IntakeError::ControlSpaceDeleted { .. })
        ),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("was deleted"), "{refused}");
    assert!(matches!(
        h.intake
            .request_deletion(&delete_request("cs1", "delete-again"))
            .await,
        Err(IntakeFailure::Rejected(
            IntakeError::ControlSpaceDeleted { .. }
        ))
    ));
    h.create("cs2").await;
    assert!(matches!(
        h.intake
            .create_control_space(&create_request("cs2", "dup"))
            .await,
        Err(IntakeFailure::Rejected(
            IntakeError::ControlSpaceExists { .. }
        ))
    ));
}

/// Without an OpenTelemetry layer (tracing off in this process) intake stores the caller's
/// `traceparent` as it came, normalized, so a replica that traces continues the caller's trace;
/// a value that does not parse, or none, stores nothing; a replay keeps the first context.
#[tokio::test]
async fn intake_stores_the_callers_traceparent_when_this_process_does_not_trace() {
    const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let h = harness();
    let traced = h
        .intake
        .submit_traced(create_request("cs1", "k1"), Some(CALLER))
        .await
        .unwrap();
    let garbled = h
        .intake
        .submit_traced(create_request("cs2", "k2"), Some("00-not-a-trace-01"))
        .await
        .unwrap();
    let plain = h
        .intake
        .create_control_space(&create_request("cs3", "k3"))
        .await
        .unwrap();
    let replay = h
        .intake
        .submit_traced(
            create_request("cs1", "k1"),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        )
        .await
        .unwrap();
    assert!(replay.replayed);
    assert_eq!(
        h.command(&traced.command_id).trace_context.as_deref(),
        Some(CALLER)
    );
    assert_eq!(h.command(&garbled.command_id).trace_context, None);
    assert_eq!(h.command(&plain.command_id).trace_context, None);
    // The claim hands the stored context to the dispatch.
    let request = ClaimRequest {
        owner: LeaseOwner::parse("w1").unwrap(),
        lease_duration: std::time::Duration::from_secs(30),
        include_provision: true,
        limit: 10,
        call_deadline: std::time::Duration::ZERO,
    };
    let claimed = h.store.claim(&request).await.unwrap();
    let of = |id: &CommandId| {
        claimed
            .iter()
            .find(|c| c.id() == id)
            .unwrap()
            .trace_context
            .clone()
    };
    assert_eq!(of(&traced.command_id).as_deref(), Some(CALLER));
    assert_eq!(of(&plain.command_id), None);
}
