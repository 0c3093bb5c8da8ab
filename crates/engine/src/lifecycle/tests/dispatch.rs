//! One dispatch at a time: claims, provisions, deletions (remote absence, late commits),
//! revocations, remote errors and backoff.

use super::*;

#[tokio::test]
async fn dispatch_with_nothing_due_claims_nothing() {
    let h = harness();
    assert_eq!(
        h.dispatch(t(0), true).await,
        DispatchReport {
            claimed: false,
            completed: false,
            command_id: None
        }
    );
}

#[tokio::test]
async fn provision_is_not_claimed_while_product_disabled() {
    let h = harness();
    let receipt = h.create("cs1").await;
    assert!(!h.dispatch(t(1), false).await.claimed);
    let record = h.command(&receipt.command_id);
    assert_eq!(
        (record.status, record.attempt_count),
        (CommandStatus::Pending, 0)
    );
    assert!(h.dispatch(t(1), true).await.completed);
}

#[tokio::test]
async fn attempt_count_and_lease_epoch_rise_on_each_claim() {
    let h = harness();
    let receipt = h.create("cs1").await;
    for _ in 0..2 {
        h.remote.push_fault(
            RemoteCall::Provision,
            RemoteFault::Fail(RemoteError::answered(503, "KFS_UNAVAILABLE", "busy")),
        );
    }
    h.dispatch(t(0), true).await;
    h.dispatch(t(100), true).await;
    h.dispatch(t(200), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(record.attempt_count, 3);
    assert_eq!(record.lease_epoch, LeaseEpoch(3));
    assert_eq!(record.status, CommandStatus::Succeeded);
}

#[tokio::test]
async fn expired_processing_command_is_reclaimed_and_completed() {
    let h = harness();
    let receipt = h.create("cs1").await;
    // A worker claims and crashes before settling.
    let crashed = h
        .store
        .claim(&ClaimRequest {
            owner: owner("crashed"),
            lease_duration: Duration::from_secs(300),
            include_provision: true,
            limit: 1,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    assert_eq!(crashed.len(), 1);
    assert!(
        !h.dispatch(t(299), true).await.claimed,
        "live lease is left alone"
    );
    let outcome = h.dispatch(t(300), true).await;
    assert!(outcome.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(record.lease_epoch, LeaseEpoch(2));
    assert_eq!(record.attempt_count, 2);
}

#[tokio::test]
async fn provision_success_activates_the_control_space_by_cas() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let before = h.space("cs1").await;
    let outcome = h.dispatch(t(5), true).await;
    assert_eq!(
        outcome,
        DispatchReport {
            claimed: true,
            completed: true,
            command_id: Some(receipt.command_id.clone())
        }
    );
    let after = h.space("cs1").await;
    assert_eq!(after.state, ControlSpaceState::Active);
    assert_eq!(
        after.knowledge_space_id,
        Some(KnowledgeSpaceId::parse("ks-1").unwrap())
    );
    assert_eq!(after.knowledge_space_revision, 1);
    assert_eq!(after.resource_version, before.resource_version + 1);
    let record = h.command(&receipt.command_id);
    assert_eq!(
        (record.status, record.completed_at),
        (CommandStatus::Succeeded, Some(t(5)))
    );
    assert_eq!(h.remote.counters().spaces_created, 1);
}

#[tokio::test]
async fn provision_is_superseded_without_delivery_when_the_space_is_no_longer_provisioning() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.delete("cs1").await;
    // Claim order is by turn: the provision (enqueued first) comes first.
    let outcome = h.dispatch(t(1), true).await;
    assert_eq!(outcome.command_id, Some(provision.command_id.clone()));
    assert!(outcome.completed);
    assert_eq!(
        h.calls("provision"),
        0,
        "no remote call for a superseded provision"
    );
    // It did not succeed, so it is never shown as succeeded.
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Superseded
    );
}

#[tokio::test]
async fn provision_with_unknown_outcome_retries_with_the_same_provisioning_key() {
    let h = harness();
    let receipt = h.create("cs1").await;
    h.remote
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    let first = h.dispatch(t(0), true).await;
    assert!(first.claimed && !first.completed);
    assert_eq!(
        retry_of(&h.command(&receipt.command_id)),
        (CommandStatus::Pending, Some("REMOTE_OUTCOME_UNKNOWN"), t(2))
    );
    assert!(h.dispatch(t(2), true).await.completed);
    assert_eq!(
        h.remote.counters().spaces_created,
        1,
        "the replay did not create a second space"
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Active);
}

#[tokio::test]
async fn delete_acks_when_already_deleted() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let delete = h.delete("cs1").await;
    h.drain(t(1)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    // A second delete command for the same operation (e.g. an operator re-enqueue) acks at once.
    let mut again = h.command(&delete.command_id);
    again.id = CommandId::parse("again").unwrap();
    again.idempotency_key = key("again");
    again.status = CommandStatus::Pending;
    again.next_attempt_at = t(2);
    h.store.put_command(again);
    let calls = h.calls("deletion");
    assert!(h.dispatch(t(2), true).await.completed);
    assert_eq!(h.calls("deletion"), calls);
}

#[tokio::test]
async fn never_provisioned_space_is_deleted_without_remote_call_when_disabled() {
    let h = harness();
    let provision = h.create("cs1").await;
    let delete = h.delete("cs1").await;
    let outcome = h.dispatch(t(1), false).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(outcome.completed);
    let record = h.command(&provision.command_id);
    assert_eq!(record.status, CommandStatus::Superseded);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::SupersededByDelete.as_str())
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert!(
        h.remote.counters().calls.is_empty(),
        "no remote call at all"
    );
}

#[tokio::test]
async fn lost_ack_deletion_recovers_the_identity_by_provisioning_key() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    h.dispatch(t(0), true).await; // remote space exists, local does not know it
    let delete = h.delete("cs1").await;
    let outcome = h.dispatch(t(1), true).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(outcome.completed);
    let space = h.space("cs1").await;
    assert_eq!(space.state, ControlSpaceState::Deleted);
    assert_eq!(
        space.knowledge_space_id,
        Some(KnowledgeSpaceId::parse("ks-1").unwrap())
    );
    assert_eq!(h.calls("lookup"), 1);
    let pk = ProvisioningKey::parse(provision.operation_id.as_str()).unwrap();
    assert!(!h.remote.has_space(&pk), "the remote space was deleted");
    // The pending provision retry then closes without delivery, as superseded.
    h.drain(t(10)).await;
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Superseded
    );
    assert_eq!(h.remote.counters().spaces_created, 1);
}

#[tokio::test]
async fn recovered_identity_in_another_namespace_retries_with_scope_mismatch() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::not_dispatched("refused")),
    );
    h.dispatch(t(0), true).await; // attempted once: no never-provisioned shortcut
    h.remote.insert_space(
        TenantId::parse("someone-else").unwrap(),
        ProvisioningKey::parse(provision.operation_id.as_str()).unwrap(),
        KnowledgeSpaceId::parse("foreign").unwrap(),
        1,
    );
    let delete = h.delete("cs1").await;
    h.dispatch(t(1), false).await;
    let record = h.command(&delete.command_id);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::KnowledgeFsScopeMismatch.as_str())
    );
    assert_eq!(
        h.space("cs1").await.knowledge_space_id,
        None,
        "nothing registered"
    );
}

#[tokio::test]
async fn conflicting_recovered_identity_dead_letters_the_delete() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::not_dispatched("refused")),
    );
    h.dispatch(t(0), true).await; // provision retry due at t(2)
    let delete = h.delete("cs1").await;
    h.remote.insert_space(
        tenant(),
        ProvisioningKey::parse(provision.operation_id.as_str()).unwrap(),
        KnowledgeSpaceId::parse("remote-id").unwrap(),
        1,
    );
    // The control space registers another identity after the target was resolved as unknown:
    // simulate by registering it between lookup and re-read through the remote hook.
    let store = h.store.clone();
    let injected = Arc::new(AtomicBool::new(false));
    let flag = injected.clone();
    h.remote.set_hook(move |call| {
        if call == RemoteCall::Lookup && !flag.swap(true, Ordering::SeqCst) {
            let mut cs = futures::executor::block_on(store.control_space(&tenant(), &cs_id("cs1")))
                .unwrap()
                .unwrap();
            cs.knowledge_space_id = Some(KnowledgeSpaceId::parse("local-id").unwrap());
            store.put_control_space(cs);
        }
    });
    let outcome = h
        .dispatcher
        .dispatch_one(&owner("w1"), at(t(1), true))
        .await
        .unwrap();
    assert!(outcome.completed, "settled, not left to lease expiry");
    let record = h.command(&delete.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::KnowledgeFsIdentityConflict.as_str())
    );
    assert_eq!(record.lease_owner, None);
    assert_eq!(record.completed_at, Some(t(1)));
    assert_eq!(h.calls("deletion"), 0);
}

/// Issue 29: a refusal after a slow call (here an identity conflict found after a lookup that
/// took 20 s) is timed at the failure, not at the claim.
#[tokio::test]
async fn an_identity_conflict_after_a_slow_lookup_is_timed_at_the_failure() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::not_dispatched("refused")),
    );
    h.dispatch(t(0), true).await;
    let delete = h.delete("cs1").await;
    h.remote.insert_space(
        tenant(),
        ProvisioningKey::parse(provision.operation_id.as_str()).unwrap(),
        KnowledgeSpaceId::parse("remote-id").unwrap(),
        1,
    );
    let store = h.store.clone();
    let injected = Arc::new(AtomicBool::new(false));
    let flag = injected.clone();
    h.remote.set_hook(move |call| {
        if call == RemoteCall::Lookup && !flag.swap(true, Ordering::SeqCst) {
            let mut cs = futures::executor::block_on(store.control_space(&tenant(), &cs_id("cs1")))
                .unwrap()
                .unwrap();
            cs.knowledge_space_id = Some(KnowledgeSpaceId::parse("local-id").unwrap());
            store.put_control_space(cs);
            // The lookup takes 20 s.
            clock_of_test().advance(Duration::from_secs(20));
        }
    });
    let outcome = h
        .dispatcher
        .dispatch_one(&owner("w1"), at(t(1), true))
        .await
        .unwrap();
    assert!(outcome.completed);
    let record = h.command(&delete.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::KnowledgeFsIdentityConflict.as_str())
    );
    assert_eq!(record.completed_at, Some(t(21)), "timed at the failure");
}

#[tokio::test]
async fn remote_absence_completes_the_deletion_when_product_disabled() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::outcome_unknown(
            "connection reset after sending",
        )),
    );
    h.dispatch(t(0), true).await; // attempted once (window ends at t(0)), outcome unknown
    let delete = h.delete("cs1").await;
    let outcome = h.dispatch(t(1), false).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(
        !outcome.completed,
        "a provision sent with an unknown outcome may still land until the grace period ends"
    );
    assert_eq!(
        h.command(&delete.command_id)
            .last_error_code
            .as_ref()
            .map(ErrorCode::as_str),
        Some(ErrorCode::RemoteAbsenceUnconfirmed.as_str())
    );
    // Grace (600 s) after the provision's last attempt ended: absence is proof now.
    let outcome = h.dispatch(t(600), false).await;
    assert!(outcome.completed);
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Superseded
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert_eq!(h.calls("lookup"), 2);
}

/// A lookup sent at t(590) that answers at t(610) proves absence only as of t(590): the
/// provision (window ended t(0), grace 600 s) could still land until t(600), after the lookup
/// looked. The deletion must not complete on it (docs/protocol.md, "Absence is judged when the
/// lookup was sent"); the next lookup, sent after t(600), proves it.
#[tokio::test]
async fn remote_absence_is_judged_when_the_slow_lookup_was_sent() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::outcome_unknown(
            "connection reset after sending",
        )),
    );
    h.dispatch(t(0), true).await; // attempted once (window ends at t(0)), outcome unknown
    let delete = h.delete("cs1").await;
    let slow = Arc::new(AtomicBool::new(true));
    let clock = clock_of_test();
    let first_lookup_is_slow = slow.clone();
    h.remote.set_hook(move |call| {
        if call == RemoteCall::Lookup && first_lookup_is_slow.swap(false, Ordering::Relaxed) {
            clock.advance(Duration::from_secs(20)); // answered at t(610), inside the lease
        }
    });
    let outcome = h.dispatch(t(590), false).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(!slow.load(Ordering::Relaxed), "the lookup was slow");
    assert!(
        !outcome.completed,
        "quiet only from t(600); the lookup looked at t(590)"
    );
    assert_eq!(
        retry_of(&h.command(&delete.command_id)),
        (
            CommandStatus::Pending,
            Some(ErrorCode::RemoteAbsenceUnconfirmed.as_str()),
            t(611)
        )
    );
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Pending
    );
    let outcome = h.dispatch(t(611), false).await;
    assert!(
        outcome.completed,
        "a lookup sent after t(600) proves absence"
    );
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Superseded
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
}

#[tokio::test]
async fn remote_absence_completes_at_once_when_no_provision_request_can_land() {
    // Never left (connection refused), or refused by KnowledgeFS with a status its protocol
    // defines as applying nothing (429, 503, 4xx).
    for failure in [
        RemoteError::not_dispatched("connection refused"),
        RemoteError::answered(503, "KFS_UNAVAILABLE", "busy"),
        RemoteError::answered(429, "KFS_RATE_LIMITED", "slow down"),
    ] {
        let h = harness();
        let provision = h.create("cs1").await;
        h.remote
            .push_fault(RemoteCall::Provision, RemoteFault::Fail(failure.clone()));
        h.dispatch(t(0), true).await; // claimed; nothing can land
        let delete = h.delete("cs1").await;
        let outcome = h.dispatch(t(1), false).await;
        assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
        assert!(outcome.completed, "{failure:?}: absence is proof");
        assert_eq!(
            h.command(&provision.command_id).status,
            CommandStatus::Superseded
        );
        assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    }
}

#[tokio::test]
async fn remote_absence_after_an_ack_without_delivery_completes_at_once() {
    let h = harness();
    let provision = h.create("cs1").await;
    let delete = h.delete("cs1").await;
    // The provision is claimed first and acks without delivery (the space is deleting).
    let outcome = h.dispatch(t(0), true).await;
    assert_eq!(outcome.command_id, Some(provision.command_id.clone()));
    assert!(outcome.completed);
    assert_eq!(h.calls("provision"), 0);
    assert_eq!(
        h.command(&provision.command_id).attempt_window_ends_at,
        None,
        "an attempt that sent nothing leaves no window"
    );
    let outcome = h.dispatch(t(0), true).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(
        outcome.completed,
        "create-then-delete does not wait out a grace period"
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
}

#[tokio::test]
async fn remote_absence_retries_while_a_provision_may_still_deliver() {
    let h = harness();
    h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::answered(502, "KFS_HTTP_502", "bad gateway")),
    );
    h.dispatch(t(0), true).await; // provision sent, a gateway answered 502; retry at t(2)
    let delete = h.delete("cs1").await;
    assert_eq!(
        h.dispatch(t(1), true).await.command_id,
        Some(delete.command_id.clone())
    );
    assert_eq!(
        retry_of(&h.command(&delete.command_id)),
        (
            CommandStatus::Pending,
            Some(ErrorCode::RemoteAbsenceUnconfirmed.as_str()),
            t(3)
        )
    );
    // The provision acks without delivery at t(3) (its window stays at t(0)); absence proves
    // the deletion 600 s after t(0).
    h.drain(t(3)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleting);
    h.drain(t(600)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert_eq!(
        h.command(&delete.command_id).status,
        CommandStatus::Succeeded
    );
    assert_eq!(h.remote.counters().spaces_created, 0);
}

/// A provision answered 504 by a gateway while the backend goes on and commits it 30 s later
/// (virtual time). The deletion requested meanwhile must not complete on the lookup's absence:
/// it keeps looking until the space appears, then deletes it. Nothing is orphaned.
#[tokio::test]
async fn deletion_never_orphans_a_provision_that_lands_after_a_504() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let pending_commit: Arc<Mutex<Option<ProvisionRequest>>> = Arc::default();
    let remote = LateCommitRemote {
        inner: h.remote.clone(),
        around: LateCommit {
            held: pending_commit.clone(),
        },
    };
    let dispatcher = Dispatcher::new(h.store.clone(), remote, DispatcherConfig::default())
        .with_clock(Arc::new(clock_of_test()));
    let dispatch = |now| {
        let dispatcher = &dispatcher;
        async move {
            let mut claimed = 0;
            while dispatcher
                .dispatch_one(&owner("w"), at(now, true))
                .await
                .unwrap()
                .claimed
            {
                claimed += 1;
                assert!(claimed < 100, "dispatch loop did not settle down");
            }
        }
    };
    dispatch(t(0)).await; // provision: 504, the backend goes on
    assert!(pending_commit.lock().unwrap().is_some());
    h.delete("cs1").await;
    for second in 1..30 {
        dispatch(t(second)).await;
        assert_eq!(
            h.space("cs1").await.state,
            ControlSpaceState::Deleting,
            "absence at t({second}) is no proof: the provision may still land"
        );
    }
    // The backend commits the provision at t(30).
    let late = pending_commit.lock().unwrap().take().unwrap();
    h.remote.provision(&late).await.unwrap();
    assert_eq!(h.remote.counters().spaces_created, 1);
    for second in 30..700 {
        dispatch(t(second)).await;
    }
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert!(
        !h.remote.has_space(&h.space("cs1").await.provisioning_key),
        "the late space was found and deleted"
    );
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Superseded,
        "the provision closed as moot, without a second delivery"
    );
    assert_eq!(
        h.calls("provision"),
        1,
        "only the held request reached the backend (committed by the test at t(30))"
    );
}

/// A remote whose first provision answers 504 while holding the request, for the test to
/// commit later (a backend behind a gateway that goes on after the gateway gave up).
type LateCommitRemote = Decorated<LateCommit>;

/// The decorator of a [`LateCommitRemote`]: the held request.
struct LateCommit {
    held: Arc<Mutex<Option<ProvisionRequest>>>,
}

#[async_trait]
impl Around for LateCommit {
    async fn enter(&self, _call: RemoteCall) -> Result<Option<InFlight>, RemoteError> {
        Ok(None)
    }

    fn intercept_provision(&self, request: &ProvisionRequest) -> Option<RemoteError> {
        let mut held = self.held.lock().unwrap();
        if held.is_some() {
            return None;
        }
        *held = Some(request.clone());
        Some(RemoteError::answered(
            504,
            "KFS_HTTP_504",
            "gateway timeout",
        ))
    }
}

#[tokio::test]
async fn deletion_progress_records_irreversibility_once_and_completes() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    h.remote.set_deletion_polls(3); // accepted, draining, draining, irreversible, completed
    let delete = h.delete("cs1").await;
    let mut at = 1;
    let mut irreversible_seen = None;
    for _ in 0..10 {
        let outcome = h.dispatch(t(at), true).await;
        let space = h.space("cs1").await;
        if let (None, Some(when)) = (irreversible_seen, space.deletion_irreversible_at) {
            irreversible_seen = Some(when);
        }
        if let Some(first) = irreversible_seen {
            assert_eq!(space.deletion_irreversible_at, Some(first), "recorded once");
        }
        if outcome.completed {
            break;
        }
        assert_eq!(
            h.command(&delete.command_id)
                .last_error_code
                .as_ref()
                .map(ErrorCode::as_str),
            Some(ErrorCode::RemoteDeletionPending.as_str())
        );
        at += 1000;
    }
    let space = h.space("cs1").await;
    assert_eq!(space.state, ControlSpaceState::Deleted);
    assert_eq!(irreversible_seen, Some(t(3001)));
    assert_eq!(space.knowledge_space_revision, 2, "max(local 1, remote 2)");
    assert_eq!(h.calls("deletion"), 5);
}

#[tokio::test]
async fn revoke_acks_only_when_the_watermark_reaches_the_sequence() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let revoke = RequestRevocation {
        tenant_id: tenant(),
        control_space_id: cs_id("cs1"),
        grant_id: GrantId::parse("g1").unwrap(),
        reason_code: "member_removed".into(),
        idempotency_key: key("revoke-1"),
    };
    let receipt = h.intake.request_revocation(&revoke).await.unwrap();
    h.remote.set_revoke_lag(1);
    assert!(!h.dispatch(t(1), true).await.completed);
    assert_eq!(
        retry_of(&h.command(&receipt.command_id)),
        (
            CommandStatus::Pending,
            Some(ErrorCode::RemoteRevokeWatermarkLag.as_str()),
            t(3)
        )
    );
    assert!(h.dispatch(t(3), true).await.completed);
}

#[tokio::test]
async fn unknown_operation_retries_with_unsupported_operation() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let mut record = h.command(&receipt.command_id);
    record.operation = Operation::Unsupported("rename".into());
    h.store.put_command(record);
    h.dispatch(t(0), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(
        retry_of(&record),
        (
            CommandStatus::Pending,
            Some(ErrorCode::UnsupportedOperation.as_str()),
            t(2)
        )
    );
}

#[tokio::test]
async fn malformed_payload_dead_letters_with_invalid_command_payload() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let mut record = h.command(&receipt.command_id);
    record.payload = json!({"unexpected": true});
    h.store.put_command(record);
    assert!(h.dispatch(t(0), true).await.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::InvalidCommandPayload.as_str())
    );
    assert_eq!(record.completed_at, Some(t(0)));
    assert!(!h.dispatch(t(100_000), true).await.claimed, "never again");
}

#[tokio::test]
async fn remote_error_retries_with_its_code_and_honours_retry_after() {
    let h = harness();
    let receipt = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(
            RemoteError::answered(503, "KFS_MAINTENANCE", "down")
                .with_retry_after(Duration::from_secs(120)),
        ),
    );
    h.dispatch(t(0), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(
        retry_of(&record),
        (CommandStatus::Pending, Some("KFS_MAINTENANCE"), t(120))
    );
    assert_eq!(record.last_error_message.as_deref(), Some("down"));
    assert_eq!(record.lease_owner, None);
}

#[tokio::test]
async fn backoff_grows_with_attempts_up_to_the_cap() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let mut now = t(0);
    let mut delays = Vec::new();
    for _ in 0..10 {
        h.remote.push_fault(
            RemoteCall::Provision,
            RemoteFault::Fail(RemoteError::answered(500, "E", "e")),
        );
        h.dispatch(now, true).await;
        let next = h.command(&receipt.command_id).next_attempt_at;
        delays.push((next - now).num_seconds());
        now = next;
    }
    assert_eq!(delays, [2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
}

/// The saga's first step takes the control space the claim carried instead of reading it
/// (docs/protocol.md, "The control space comes with the claim"): a claim that found no control
/// space closes its provision without calling the remote, though a read now would find one. A
/// command that carries none (`NotRead`) is read as before.
#[tokio::test]
async fn the_first_step_uses_the_control_space_the_claim_carried() {
    use tenantry_lifecycle::ClaimedControlSpace;

    let h = harness();
    let receipt = h.create("cs1").await;
    let (mut claimed, started) = h
        .dispatcher
        .claim(&owner("w1"), at(t(1), true), 1)
        .await
        .unwrap();
    let mut command = claimed.pop().unwrap();
    assert_eq!(
        command.control_space,
        ClaimedControlSpace::Read(Some(h.space("cs1").await)),
        "the fake carries the control space with the claim"
    );
    command.control_space = ClaimedControlSpace::Read(None);
    h.dispatcher
        .dispatch_claimed(command, started, true, None)
        .await
        .unwrap();
    assert_eq!(
        h.calls("provision"),
        0,
        "closed on the carried control space"
    );
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Superseded);

    // Without a carried control space the saga reads it: the provision is delivered.
    let receipt = h.create("cs2").await;
    let (mut claimed, started) = h
        .dispatcher
        .claim(&owner("w1"), at(t(2), true), 1)
        .await
        .unwrap();
    let mut command = claimed.pop().unwrap();
    command.control_space = ClaimedControlSpace::NotRead;
    h.dispatcher
        .dispatch_claimed(command, started, true, None)
        .await
        .unwrap();
    assert_eq!(h.calls("provision"), 1);
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Succeeded
    );
}
