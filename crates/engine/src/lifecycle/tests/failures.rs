//! Commands that can never succeed stop, visibly: dead-letters, the attempt budget, settles on
//! every path, moot revocations, operator retry / abandon.

use tenantry_lifecycle::intake::IntakeError;
use tenantry_ports::lifecycle::{
    CommandAdmin, CommandFilter, OperatorAction, OperatorActionError, OperatorActionKind,
};

use super::*;

fn with_max_attempts(h: Harness, max_attempts: u32) -> Harness {
    let mut config = DispatcherConfig::default();
    config.retry_policy.max_attempts = max_attempts;
    Harness {
        dispatcher: Dispatcher::new(h.store.clone(), h.remote.clone(), config)
            .with_clock(Arc::new(clock_of_test())),
        ..h
    }
}

fn answered(status: u16, code: &str) -> RemoteFault {
    RemoteFault::Fail(RemoteError::answered(status, code, "refused"))
}

fn operator(id: &CommandId, kind: OperatorActionKind, at: DateTime<Utc>) -> OperatorAction {
    OperatorAction {
        action_id: format!("action-{}-{}", id.as_str(), kind.as_str()),
        command_id: id.clone(),
        kind,
        actor: "test".into(),
        reason: "checked the remote".into(),
        at,
    }
}

/// `shared/cases/003-permanent-remote-error.md`: a remote that answers `400 INVALID_REQUEST`
/// to a provision. Before: retried forever, then shown as `succeeded` after a deletion.
#[tokio::test]
async fn case_003_permanent_remote_error_dead_letters_visibly_and_never_succeeds() {
    let h = harness();
    let receipt = h.create("cs-bad").await;
    h.remote
        .push_fault(RemoteCall::Provision, answered(400, "INVALID_REQUEST"));
    let metrics = Arc::new(RecordingMetrics::default());
    let dispatcher = h
        .dispatcher_on(clock_of_test())
        .with_metrics(metrics.clone());
    let outcome = dispatcher
        .dispatch_one(&owner("w1"), at(t(0), true))
        .await
        .unwrap();
    assert!(outcome.completed, "one attempt settles it for good");
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some("INVALID_REQUEST")
    );
    assert_eq!(record.completed_at, Some(t(0)));
    assert_eq!(record.attempt_count, 1);
    assert_eq!(record.lease_owner, None);
    let failed: Vec<_> = metrics
        .records
        .lock()
        .unwrap()
        .iter()
        .filter(|m| m.status == TaskStatus::Failed)
        .map(|m| m.error_code.clone())
        .collect();
    assert_eq!(failed, [Some("INVALID_REQUEST".to_owned())]);
    // No more attempts, however long we wait.
    for at in [300, 3_600, 86_400] {
        assert!(!h.dispatch(t(at), true).await.claimed);
    }
    assert_eq!(h.calls("provision"), 1);
    // Deleting the control space later never turns the provision into `succeeded`.
    let delete = h.delete("cs-bad").await;
    h.drain(t(90_000)).await;
    assert_eq!(
        h.command(&delete.command_id).status,
        CommandStatus::Succeeded
    );
    assert_eq!(h.space("cs-bad").await.state, ControlSpaceState::Deleted);
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some("INVALID_REQUEST")
    );
}

#[tokio::test]
async fn every_permanent_remote_code_dead_letters_at_once() {
    for (status, code) in [
        (400, "INVALID_REQUEST"),
        (400, "IDEMPOTENCY_KEY_REQUIRED"),
        (422, "IDEMPOTENCY_KEY_REUSED"),
        (409, "PROVISIONING_KEY_CONFLICT"),
        (409, "KNOWLEDGE_FS_SPACE_DELETED"),
    ] {
        let h = harness();
        let receipt = h.create("cs1").await;
        h.remote
            .push_fault(RemoteCall::Provision, answered(status, code));
        h.dispatch(t(0), true).await;
        let record = h.command(&receipt.command_id);
        assert_eq!(
            (
                record.status,
                record.last_error_code.as_ref().map(ErrorCode::as_str)
            ),
            (CommandStatus::Failed, Some(code)),
            "{status} {code}"
        );
        assert!(!h.dispatch(t(100_000), true).await.claimed, "{code}");
    }
    // Retryable answers stay pending.
    for (status, code) in [
        (401, "UNAUTHORIZED"),
        (409, "REVISION_AHEAD"),
        (429, "KFS_RATE_LIMITED"),
        (503, "KFS_UNAVAILABLE"),
    ] {
        let h = harness();
        let receipt = h.create("cs1").await;
        h.remote
            .push_fault(RemoteCall::Provision, answered(status, code));
        h.dispatch(t(0), true).await;
        let record = h.command(&receipt.command_id);
        assert_eq!(
            (
                record.status,
                record.last_error_code.as_ref().map(ErrorCode::as_str)
            ),
            (CommandStatus::Pending, Some(code)),
            "{status} {code}"
        );
    }
}

#[tokio::test]
async fn a_permanent_deletion_answer_dead_letters_the_delete() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let delete = h.delete("cs1").await;
    h.remote.push_fault(
        RemoteCall::Deletion,
        answered(422, "IDEMPOTENCY_KEY_REUSED"),
    );
    h.dispatch(t(1), true).await;
    let record = h.command(&delete.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some("IDEMPOTENCY_KEY_REUSED")
    );
}

#[tokio::test]
async fn the_attempt_budget_dead_letters_and_an_operator_retry_renews_it() {
    let h = with_max_attempts(harness(), 3);
    let receipt = h.create("cs1").await;
    for _ in 0..3 {
        h.remote.push_fault(
            RemoteCall::Provision,
            RemoteFault::Fail(RemoteError::not_dispatched("connection refused")),
        );
    }
    h.dispatch(t(0), true).await;
    h.dispatch(t(1_000), true).await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Pending
    );
    h.dispatch(t(2_000), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some("REMOTE_UNAVAILABLE")
    );
    let message = record.last_error_message.clone().unwrap_or_default();
    assert!(message.contains("max_attempts = 3"), "{message}");
    assert_eq!(record.attempt_count, 3);
    assert!(!h.dispatch(t(100_000), true).await.claimed);

    // The operator retries: fresh budget, attempt_count kept.
    let after = h
        .store
        .act_on_command(&operator(
            &receipt.command_id,
            OperatorActionKind::Retry,
            t(100_000),
        ))
        .await
        .unwrap();
    assert_eq!(
        (after.status, after.attempt_count, after.attempt_budget_base),
        (CommandStatus::Pending, 3, 3)
    );
    assert!(h.dispatch(t(100_000), true).await.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Succeeded);
    assert_eq!(record.attempt_count, 4);
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Active);
}

/// Issue 29: after an operator retry the backoff starts again from the shortest step (2 s),
/// not from the step the command's lifetime `attempt_count` reached (256 s after 8 claims).
#[tokio::test]
async fn after_an_operator_retry_the_backoff_starts_from_the_shortest_step() {
    let h = with_max_attempts(harness(), 10);
    let receipt = h.create("cs1").await;
    for _ in 0..11 {
        h.remote
            .push_fault(RemoteCall::Provision, answered(503, "KFS_UNAVAILABLE"));
    }
    for i in 0..10 {
        assert!(h.dispatch(t(i * 1_000), true).await.claimed);
    }
    let record = h.command(&receipt.command_id);
    assert_eq!(
        (record.status, record.attempt_count),
        (CommandStatus::Failed, 10)
    );

    h.store
        .act_on_command(&operator(
            &receipt.command_id,
            OperatorActionKind::Retry,
            t(100_000),
        ))
        .await
        .unwrap();
    assert!(h.dispatch(t(100_000), true).await.claimed);
    let record = h.command(&receipt.command_id);
    assert_eq!(record.attempt_count, 11);
    assert_eq!(
        (record.status, record.next_attempt_at),
        (CommandStatus::Pending, t(100_002)),
        "the first failure after the operator retry waits the first backoff step"
    );
}

#[tokio::test]
async fn progress_polls_never_spend_the_budget() {
    let h = with_max_attempts(harness(), 2);
    h.create("cs1").await;
    h.drain(t(0)).await;
    h.remote.set_deletion_polls(6);
    let delete = h.delete("cs1").await;
    for i in 1..20 {
        h.dispatch(t(i * 1_000), true).await;
    }
    let record = h.command(&delete.command_id);
    assert_eq!(record.status, CommandStatus::Succeeded, "{record:?}");
    assert!(record.attempt_count > 2);
}

#[tokio::test]
async fn ownership_loss_settles_as_an_immediate_retry_not_a_lease_expiry() {
    let h = with_max_attempts(harness(), 2);
    let receipt = h.create("cs1").await;
    // The remote answers with a space of another namespace: OwnershipLost.
    h.remote.insert_space(
        TenantId::parse("other-tenant").unwrap(),
        ProvisioningKey::parse(receipt.operation_id.as_str()).unwrap(),
        KnowledgeSpaceId::parse("ks-other").unwrap(),
        1,
    );
    let outcome = h.dispatch(t(5), true).await;
    assert!(outcome.claimed && !outcome.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(
        retry_of(&record),
        (
            CommandStatus::Pending,
            Some(ErrorCode::OwnershipLost.as_str()),
            t(5)
        )
    );
    assert_eq!(
        record.lease_owner, None,
        "settled, not left to lease expiry"
    );
    // It is due at once and, still wrong, spends the budget and is dead-lettered.
    h.dispatch(t(5), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::OwnershipLost.as_str())
    );
}

#[tokio::test]
async fn a_provision_overtaken_by_a_deletion_is_superseded_not_succeeded() {
    let h = harness();
    let receipt = h.create("cs1").await;
    h.remote
        .push_fault(RemoteCall::Provision, answered(503, "KFS_UNAVAILABLE"));
    h.dispatch(t(0), true).await;
    let delete = h.delete("cs1").await;
    h.drain(t(1_000)).await;
    h.drain(t(5_000)).await;
    assert_eq!(
        h.command(&delete.command_id).status,
        CommandStatus::Succeeded
    );
    let record = h.command(&receipt.command_id);
    assert_ne!(record.status, CommandStatus::Succeeded);
    assert_eq!(record.status, CommandStatus::Superseded);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::SupersededByDelete.as_str())
    );
}

async fn revoke(h: &Harness, k: &str) -> Result<IntakeReceipt, IntakeFailure> {
    h.intake
        .request_revocation(&RequestRevocation {
            tenant_id: tenant(),
            control_space_id: cs_id("cs1"),
            grant_id: GrantId::parse("g1").unwrap(),
            reason_code: "user_removed".into(),
            idempotency_key: key(k),
        })
        .await
}

#[tokio::test]
async fn revocations_end_cleanly_when_the_control_space_is_being_deleted() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let queued = revoke(&h, "revoke-1").await.unwrap();
    h.delete("cs1").await;
    // Refused at intake while deleting, with a clear error; nothing written.
    let before = h.store.commands();
    assert!(matches!(
        revoke(&h, "revoke-2").await,
        Err(IntakeFailure::Rejected(IntakeError::ControlSpaceDeleting {
            state: ControlSpaceState::Deleting,
            ..
        }))
    ));
    assert_eq!(h.store.commands(), before);
    // The one queued before the deletion is moot at dispatch: no remote call, never retried.
    h.drain(t(1)).await;
    let record = h.command(&queued.command_id);
    assert_eq!(record.status, CommandStatus::Superseded);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::ControlSpaceDeleting.as_str())
    );
    assert_eq!(h.calls("revoke"), 0);
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert!(matches!(
        revoke(&h, "revoke-3").await,
        Err(IntakeFailure::Rejected(IntakeError::ControlSpaceDeleting {
            state: ControlSpaceState::Deleted,
            ..
        }))
    ));
}

#[tokio::test]
async fn operators_abandon_a_pending_command_and_it_is_never_dispatched() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let after = h
        .store
        .act_on_command(&operator(
            &receipt.command_id,
            OperatorActionKind::Abandon,
            t(1),
        ))
        .await
        .unwrap();
    assert_eq!(after.status, CommandStatus::Abandoned);
    assert!(!h.dispatch(t(2), true).await.claimed);
    assert_eq!(h.calls("provision"), 0);
    let log = h.store.command_actions(&receipt.command_id).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].action.actor, "test");
    assert_eq!(log[0].previous_status, CommandStatus::Pending);
}

#[tokio::test]
async fn bulk_retry_acts_on_every_matching_failed_command_and_reports_refusals() {
    let h = harness();
    let mut failed = Vec::new();
    for cs in ["cs1", "cs2", "cs3"] {
        let receipt = h.create(cs).await;
        h.remote
            .push_fault(RemoteCall::Provision, answered(400, "INVALID_REQUEST"));
        h.dispatch(t(0), true).await;
        failed.push(receipt.command_id);
    }
    let other = h.create("cs4").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        answered(422, "IDEMPOTENCY_KEY_REUSED"),
    );
    h.dispatch(t(0), true).await;
    let ops = OperatorActions::new(h.store.clone(), Arc::new(clock_of_test()));
    // A bulk action without a pending/failed status filter is refused.
    assert!(matches!(
        ops.act_on_matching(
            &CommandFilter::default(),
            OperatorActionKind::Retry,
            "ops",
            "r"
        )
        .await,
        Err(OperatorRequestError::BulkStatusRequired { .. })
    ));
    assert!(matches!(
        ops.act(&failed[0], OperatorActionKind::Retry, " ", "r")
            .await,
        Err(OperatorRequestError::InvalidField { field: "actor", .. })
    ));
    let filter = CommandFilter {
        status: Some(CommandStatus::Failed),
        error_code: Some("INVALID_REQUEST".into()),
        ..CommandFilter::default()
    };
    let report = ops
        .act_on_matching(&filter, OperatorActionKind::Retry, "ops", "remote fixed")
        .await
        .unwrap();
    let acted: Vec<_> = report.acted.iter().map(|r| r.id.clone()).collect();
    assert_eq!(acted, failed);
    assert!(report.refused.is_empty() && !report.truncated);
    for id in &failed {
        assert_eq!(h.command(id).status, CommandStatus::Pending);
        assert_eq!(h.store.command_actions(id).await.unwrap().len(), 1);
    }
    assert_eq!(h.command(&other.command_id).status, CommandStatus::Failed);
    // Acting again on one of them once it succeeded is refused with a clear error.
    h.drain(t(0)).await;
    let refused = ops
        .act(&failed[0], OperatorActionKind::Abandon, "ops", "late")
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("only pending or failed"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_bounded_bulk_action_acts_on_at_most_its_bound_oldest_first() {
    let h = harness();
    let mut failed = Vec::new();
    for cs in ["cs1", "cs2", "cs3"] {
        let receipt = h.create(cs).await;
        h.remote
            .push_fault(RemoteCall::Provision, answered(400, "INVALID_REQUEST"));
        h.dispatch(t(0), true).await;
        failed.push(receipt.command_id);
    }
    let ops = OperatorActions::new(h.store.clone(), Arc::new(clock_of_test()));
    let filter = CommandFilter {
        status: Some(CommandStatus::Failed),
        ..CommandFilter::default()
    };
    let report = ops
        .act_on_matching_up_to(&filter, OperatorActionKind::Abandon, "ops", "r", 2)
        .await
        .unwrap();
    let acted: Vec<_> = report.acted.iter().map(|r| r.id.clone()).collect();
    assert_eq!(acted, failed[..2]);
    assert!(report.truncated, "a third command matched beyond the bound");
    assert_eq!(h.command(&failed[2]).status, CommandStatus::Failed);
}

/// Issue 27: a confirmed bulk action touches exactly the confirmed commands. One that started
/// matching after the confirmation is left alone; one that stopped matching (retried by
/// someone else meanwhile) is skipped and reported; a duplicate id counts once.
#[tokio::test]
async fn a_confirmed_bulk_action_acts_on_exactly_the_confirmed_commands() {
    let h = harness();
    let mut failed = Vec::new();
    for cs in ["cs1", "cs2", "cs3"] {
        let receipt = h.create(cs).await;
        h.remote
            .push_fault(RemoteCall::Provision, answered(400, "INVALID_REQUEST"));
        h.dispatch(t(0), true).await;
        failed.push(receipt.command_id);
    }
    let ops = OperatorActions::new(h.store.clone(), Arc::new(clock_of_test()));
    let filter = CommandFilter {
        status: Some(CommandStatus::Failed),
        ..CommandFilter::default()
    };
    // Confirmed: the first two. Then the second is retried elsewhere (no longer failed) and
    // a fourth command fails (matches now, was not confirmed).
    let confirmed = vec![failed[0].clone(), failed[1].clone(), failed[0].clone()];
    let late = h.create("cs4").await;
    h.remote
        .push_fault(RemoteCall::Provision, answered(400, "INVALID_REQUEST"));
    h.dispatch(t(0), true).await;
    assert_eq!(h.command(&late.command_id).status, CommandStatus::Failed);
    ops.act(&failed[1], OperatorActionKind::Retry, "other", "meanwhile")
        .await
        .unwrap();
    let report = ops
        .act_on_confirmed(&filter, &confirmed, OperatorActionKind::Abandon, "ops", "r")
        .await
        .unwrap();
    let acted: Vec<_> = report.acted.iter().map(|r| r.id.clone()).collect();
    assert_eq!(acted, vec![failed[0].clone()]);
    assert_eq!(report.skipped, vec![failed[1].clone()]);
    assert!(report.refused.is_empty() && !report.truncated);
    assert_eq!(h.command(&failed[0]).status, CommandStatus::Abandoned);
    assert_ne!(h.command(&failed[1]).status, CommandStatus::Abandoned);
    assert_eq!(h.command(&failed[2]).status, CommandStatus::Failed);
    assert_eq!(h.command(&late.command_id).status, CommandStatus::Failed);
    // Naming nothing is refused, nothing written.
    assert!(matches!(
        ops.act_on_confirmed(&filter, &[], OperatorActionKind::Abandon, "ops", "r")
            .await,
        Err(OperatorRequestError::ConfirmedCount { got: 0, .. })
    ));
}

/// `shared/cases/012-deletion-404-forever.md`: an active control space whose registered remote
/// space vanished (deletion answered `404 KNOWLEDGE_FS_SPACE_NOT_FOUND`, lookup empty).
/// Before: the delete resent the deletion until `max_attempts`, ended `failed`, and failed
/// again on every retry. Now the lookup proves absence and, with no provision request able to
/// land, the deletion completes.
#[tokio::test]
async fn case_012_a_deletion_answered_404_with_an_empty_lookup_completes() {
    let h = with_max_attempts(harness(), 3);
    let created = h.create("cs-gone").await;
    h.drain(t(0)).await;
    let space = h.space("cs-gone").await;
    assert_eq!(space.state, ControlSpaceState::Active);
    assert!(space.knowledge_space_id.is_some());
    h.remote.forget_space(&space.provisioning_key);
    // Long after the provision (past `deletion_absence_grace_seconds`, 600 s by default).
    at(t(1_000), true);
    let delete = h.delete("cs-gone").await;
    let outcome = h.dispatch(t(1_000), true).await;
    assert!(
        outcome.completed,
        "one attempt completes it: {:?} / provision {:?}",
        h.command(&delete.command_id),
        h.command(&created.command_id)
    );
    let record = h.command(&delete.command_id);
    assert_eq!(record.status, CommandStatus::Succeeded, "{record:?}");
    assert_eq!(h.space("cs-gone").await.state, ControlSpaceState::Deleted);
    assert_eq!((h.calls("deletion"), h.calls("lookup")), (1, 1));
    assert_eq!(
        h.command(&created.command_id).status,
        CommandStatus::Succeeded
    );
}

/// Case 012, under the same absence rule that keeps a late provision from being orphaned: a
/// provision whose first request may still land (a 504) keeps the deletion looking up until
/// the grace period after its last attempt window is over, then it completes.
#[tokio::test]
async fn case_012_a_404_deletion_waits_out_the_absence_grace_of_a_provision_that_may_land() {
    let h = harness();
    let created = h.create("cs-gone").await;
    h.remote
        .push_fault(RemoteCall::Provision, answered(504, "GATEWAY_TIMEOUT"));
    h.dispatch(t(0), true).await;
    h.drain(t(100)).await;
    let space = h.space("cs-gone").await;
    assert_eq!(space.state, ControlSpaceState::Active);
    let window = h
        .command(&created.command_id)
        .attempt_window_ends_at
        .expect("the 504 attempt may have sent its request");
    h.remote.forget_space(&space.provisioning_key);
    let delete = h.delete("cs-gone").await;
    h.dispatch(t(200), true).await;
    let record = h.command(&delete.command_id);
    assert_eq!(
        (
            record.status,
            record.last_error_code.as_ref().map(ErrorCode::as_str)
        ),
        (CommandStatus::Pending, Some("REMOTE_ABSENCE_UNCONFIRMED"))
    );
    assert_eq!(h.space("cs-gone").await.state, ControlSpaceState::Deleting);
    let quiet = window + chrono::Duration::seconds(600);
    assert!(record.next_attempt_at <= quiet);
    h.drain(quiet + chrono::Duration::seconds(1)).await;
    assert_eq!(
        h.command(&delete.command_id).status,
        CommandStatus::Succeeded
    );
    assert_eq!(h.space("cs-gone").await.state, ControlSpaceState::Deleted);
}

/// A 404 to the deletion while the lookup still finds the space (an inconsistent remote) is
/// not proof of absence: the delete retries with the remote's code, as before.
#[tokio::test]
async fn case_012_a_404_deletion_whose_lookup_finds_the_space_retries() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let delete = h.delete("cs1").await;
    h.remote.push_fault(
        RemoteCall::Deletion,
        answered(404, "KNOWLEDGE_FS_SPACE_NOT_FOUND"),
    );
    h.dispatch(t(10), true).await;
    let record = h.command(&delete.command_id);
    assert_eq!(
        (
            record.status,
            record.last_error_code.as_ref().map(ErrorCode::as_str)
        ),
        (CommandStatus::Pending, Some("KNOWLEDGE_FS_SPACE_NOT_FOUND"))
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleting);
    assert_eq!(h.calls("lookup"), 1);
    h.drain(t(1_000)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
}

/// Case 012: a delete that owns its deleting control space cannot simply be abandoned (the
/// control space would stay `deleting` for good); the operator marks the control space
/// deleted instead, with a recorded reason.
#[tokio::test]
async fn case_012_an_owning_delete_is_marked_deleted_not_abandoned() {
    let h = with_max_attempts(harness(), 1);
    h.create("cs1").await;
    h.drain(t(0)).await;
    let delete = h.delete("cs1").await;
    h.remote
        .push_fault(RemoteCall::Deletion, answered(400, "INVALID_REQUEST"));
    h.dispatch(t(10), true).await;
    assert_eq!(h.command(&delete.command_id).status, CommandStatus::Failed);
    let ops = OperatorActions::new(h.store.clone(), Arc::new(clock_of_test()));
    let refused = ops
        .act(
            &delete.command_id,
            OperatorActionKind::Abandon,
            "ops",
            "stuck",
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            OperatorRequestError::Refused(OperatorActionError::ControlSpace(_))
        ),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("mark"), "{refused}");
    assert_eq!(h.command(&delete.command_id).status, CommandStatus::Failed);
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleting);
    let before = h.space("cs1").await;
    let after = ops
        .act(
            &delete.command_id,
            OperatorActionKind::MarkDeleted,
            "ops",
            "space removed in KnowledgeFS by hand",
        )
        .await
        .unwrap();
    assert_eq!(after.status, CommandStatus::Abandoned);
    let space = h.space("cs1").await;
    assert_eq!(space.state, ControlSpaceState::Deleted);
    assert_eq!(space.resource_version, before.resource_version + 1);
    assert_eq!(space.knowledge_space_id, before.knowledge_space_id);
    let log = h.store.command_actions(&delete.command_id).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].action.kind, OperatorActionKind::MarkDeleted);
    assert_eq!(log[0].action.reason, "space removed in KnowledgeFS by hand");
    // Mark-deleted applies to nothing else.
    let other = h.create("cs2").await;
    assert!(matches!(
        ops.act(
            &other.command_id,
            OperatorActionKind::MarkDeleted,
            "ops",
            "x"
        )
        .await,
        Err(OperatorRequestError::Refused(
            OperatorActionError::ControlSpace(_)
        ))
    ));
    assert_eq!(h.command(&other.command_id).status, CommandStatus::Pending);
}

/// Case 012, after abandoning the delete: a control space left `deleting` by a delete that was
/// abandoned (as earlier versions allowed) still has an exit: mark-deleted accepts that
/// abandoned delete and completes the control space.
#[tokio::test]
async fn case_012_a_delete_abandoned_earlier_can_still_be_marked_deleted() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let delete = h.delete("cs1").await;
    // What an earlier version left behind: the owning delete abandoned, the space deleting.
    let mut record = h.command(&delete.command_id);
    record.status = CommandStatus::Abandoned;
    record.completed_at = Some(t(5));
    h.store.put_command(record);
    assert!(!h.dispatch(t(10), true).await.claimed);
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleting);
    let ops = OperatorActions::new(h.store.clone(), Arc::new(clock_of_test()));
    assert!(matches!(
        ops.act(&delete.command_id, OperatorActionKind::Retry, "ops", "x")
            .await,
        Err(OperatorRequestError::Refused(
            OperatorActionError::NotActionable { .. }
        ))
    ));
    let after = ops
        .act(
            &delete.command_id,
            OperatorActionKind::MarkDeleted,
            "ops",
            "checked: no space left in KnowledgeFS",
        )
        .await
        .unwrap();
    assert_eq!(after.status, CommandStatus::Abandoned);
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
}

/// Issue 29: a `503` or `429` proves that nothing was applied only when its body is
/// KnowledgeFS's own error (`KFS_UNAVAILABLE`, `KFS_RATE_LIMITED`); the same status without it
/// (a gateway's page: `KFS_HTTP_503`) may have come while the backend went on, so the attempt
/// counts as possibly sent and keeps its window. Other 4xx answers still apply nothing.
#[tokio::test]
async fn a_503_or_429_applies_nothing_only_with_knowledge_fs_own_error() {
    for (status, code, may_have_sent) in [
        (503, "KFS_UNAVAILABLE", false),
        (503, "KFS_HTTP_503", true),
        (503, "SERVICE_UNAVAILABLE", true),
        (429, "KFS_RATE_LIMITED", false),
        (429, "KFS_HTTP_429", true),
        (409, "KNOWLEDGE_FS_SPACE_DELETED", false),
        (502, "KFS_HTTP_502", true),
    ] {
        let h = harness();
        let created = h.create("cs1").await;
        h.remote
            .push_fault(RemoteCall::Provision, answered(status, code));
        h.dispatch(t(0), true).await;
        assert_eq!(
            h.command(&created.command_id)
                .attempt_window_ends_at
                .is_some(),
            may_have_sent,
            "{status} {code}"
        );
    }
}
