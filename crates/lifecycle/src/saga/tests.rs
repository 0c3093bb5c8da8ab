//! Table tests of the saga decisions.

use chrono::Duration as ChronoDuration;
use serde_json::json;
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, LeaseEpoch, LeaseOwner, ProvisioningKey, TenantId,
};

use super::*;
use crate::command::{CommandOutcome, LeaseToken, Operation};
use crate::control_space::tests::{at, ks, op, space};

fn command(operation: Operation, attempt_count: i32) -> ClaimedCommand {
    ClaimedCommand {
        tenant_id: TenantId::parse("t1").unwrap(),
        control_space_id: ControlSpaceId::parse("cs1").unwrap(),
        operation_id: op("op"),
        idempotency_key: IdempotencyKey::parse("k").unwrap(),
        operation,
        payload: json!({}),
        attempt_count,
        attempt_budget_base: 0,
        lease: LeaseToken {
            command_id: CommandId::parse("c1").unwrap(),
            owner: LeaseOwner::parse("w1").unwrap(),
            epoch: LeaseEpoch(attempt_count.into()),
            expires_at: at(60),
        },
        claimed_at: at(0),
        created_at: at(0),
        control_space: crate::ClaimedControlSpace::NotRead,
    }
}

fn provision_record(status: CommandStatus, attempt_count: i32) -> CommandRecord {
    CommandRecord {
        operation_id: op("op-prov"),
        idempotency_key: IdempotencyKey::parse("kp").unwrap(),
        attempt_count,
        lease_epoch: LeaseEpoch(attempt_count.into()),
        ..crate::command::tests::record("prov", Operation::Provision, status)
    }
}

fn provision_payload() -> ProvisionPayload {
    ProvisionPayload {
        provisioning_key: ProvisioningKey::parse("pk1").unwrap(),
        name: "n".into(),
        slug: "s".into(),
        icon: String::new(),
        description: String::new(),
        model_intent: None,
        profile_intent: None,
    }
}

fn delete_payload() -> DeletePayload {
    DeletePayload {
        provisioning_key: ProvisioningKey::parse("pk1").unwrap(),
    }
}

fn remote(ns: &str, id: &str, revision: i64) -> RemoteSpace {
    RemoteSpace {
        namespace_id: TenantId::parse(ns).unwrap(),
        knowledge_space_id: ks(id),
        revision,
    }
}

const POLICY: RetryPolicy = RetryPolicy {
    max_delay: std::time::Duration::from_secs(300),
    max_exponent: 8,
    jitter_ratio: 0.0,
    max_retry_after: std::time::Duration::from_secs(3600),
    max_attempts: 5,
};

fn step(cmd: &ClaimedCommand) -> Step<'_> {
    Step {
        command: cmd,
        now: at(10),
        policy: &POLICY,
        jitter_draw: 0.0,
    }
}

fn retry_code(settlement: &Settlement) -> Option<(&str, DateTime<Utc>)> {
    match &settlement.outcome {
        Some(CommandOutcome::Retry {
            next_attempt_at,
            error,
        }) => Some((error.code.as_str(), *next_attempt_at)),
        _ => None,
    }
}

#[test]
fn provision_settles_without_delivery_when_no_longer_owned_or_provisioning() {
    let cmd = command(Operation::Provision, 1);
    let s = step(&cmd);
    let owned = space(ControlSpaceState::Provisioning, "op");
    assert!(matches!(
        s.start_provision(&provision_payload(), Some(&owned)),
        ProvisionStart::Deliver(_)
    ));
    // Already applied for this operation: ack.
    assert_eq!(
        s.start_provision(
            &provision_payload(),
            Some(&space(ControlSpaceState::Active, "op"))
        ),
        ProvisionStart::SettleWithoutDelivery(Settlement::ack(at(10)).nothing_sent())
    );
    // Overtaken: closed as superseded, never shown as succeeded.
    for cs in [
        None,
        Some(space(ControlSpaceState::Provisioning, "other")),
        Some(space(ControlSpaceState::Deleting, "op")),
        Some(space(ControlSpaceState::Deleted, "op")),
    ] {
        match s.start_provision(&provision_payload(), cs.as_ref()) {
            ProvisionStart::SettleWithoutDelivery(settlement) => {
                assert_eq!(
                    settlement.status(),
                    Some(CommandStatus::Superseded),
                    "{cs:?}"
                );
                assert_eq!(
                    settlement
                        .outcome
                        .as_ref()
                        .and_then(|o| o.error())
                        .map(|e| e.code.as_str()),
                    Some(ErrorCode::SupersededByDelete.as_str())
                );
                assert!(!settlement.may_have_sent, "nothing was sent");
            }
            other => panic!("{cs:?}: expected a settle without delivery, got {other:?}"),
        }
    }
}

#[test]
fn provision_request_carries_command_identity() {
    let cmd = command(Operation::Provision, 1);
    let owned = space(ControlSpaceState::Provisioning, "op");
    let ProvisionStart::Deliver(request) =
        step(&cmd).start_provision(&provision_payload(), Some(&owned))
    else {
        panic!("expected delivery");
    };
    assert_eq!(request.namespace_id.as_str(), "t1");
    // The command's own id, not the caller's key "k" (case 013).
    assert_eq!(request.idempotency_key.as_str(), "c1");
    assert_eq!(request.provisioning_key.as_str(), "pk1");
}

/// Case 013: every request a command sends carries a key unique to the command (its outbox
/// id), never the caller's key, which may be used again for a new request once its command
/// was pruned; every attempt of one command sends the same key.
#[test]
fn case_013_the_remote_key_is_the_command_id_on_every_request_and_attempt() {
    for attempt in [1, 2, 7] {
        let cmd = command(Operation::Provision, attempt);
        let owned = space(ControlSpaceState::Provisioning, "op");
        let ProvisionStart::Deliver(provision) =
            step(&cmd).start_provision(&provision_payload(), Some(&owned))
        else {
            panic!("expected delivery");
        };
        assert_eq!(provision.idempotency_key.as_str(), "c1");
        let delete = DeletionRequest::for_command(
            &cmd,
            &DeletePayload {
                provisioning_key: ProvisioningKey::parse("pk1").unwrap(),
            },
            ks("ks1"),
            1,
        );
        assert_eq!(delete.idempotency_key.as_str(), "c1");
        let revoke = RevokeRequest::for_command(
            &cmd,
            &RevokePayload {
                knowledge_space_id: ks("ks1"),
                grant_id: tenantry_kernel::GrantId::parse("g1").unwrap(),
                event_id: "e1".into(),
                reason_code: "r".into(),
                revoke_sequence: 1,
                expected_revision: 1,
            },
        );
        assert_eq!(revoke.idempotency_key.as_str(), "c1");
        assert_ne!(cmd.idempotency_key.as_str(), "c1");
    }
}

#[test]
fn provision_success_transitions_to_active_by_cas() {
    let cmd = command(Operation::Provision, 1);
    let owned = space(ControlSpaceState::Provisioning, "op");
    let settlement = step(&cmd)
        .complete_provision(Some(&owned), &remote("t1", "ks9", 4))
        .unwrap();
    assert!(settlement.completes());
    let cas = settlement.control_space.unwrap();
    assert_eq!(cas.expected_resource_version, 3);
    assert_eq!(cas.next.state, ControlSpaceState::Active);
    assert_eq!(cas.next.knowledge_space_id, Some(ks("ks9")));
    assert_eq!(cas.next.knowledge_space_revision, 4);
}

#[test]
fn provision_success_checks_namespace() {
    let cmd = command(Operation::Provision, 1);
    let owned = space(ControlSpaceState::Provisioning, "op");
    assert!(matches!(
        step(&cmd).complete_provision(Some(&owned), &remote("t2", "ks9", 4)),
        Err(StepError::OwnershipLost { .. })
    ));
    assert!(matches!(
        step(&cmd).complete_provision(None, &remote("t1", "ks9", 4)),
        Err(StepError::OwnershipLost { .. })
    ));
}

#[test]
fn provision_already_applied_is_acked_without_cas() {
    let cmd = command(Operation::Provision, 1);
    let mut applied = space(ControlSpaceState::Active, "op");
    applied.knowledge_space_id = Some(ks("ks9"));
    applied.knowledge_space_revision = 5;
    let settlement = step(&cmd)
        .complete_provision(Some(&applied), &remote("t1", "ks9", 4))
        .unwrap();
    assert_eq!(settlement, Settlement::ack(at(10)));
}

#[test]
fn provision_success_for_another_owner_is_ownership_lost() {
    let cmd = command(Operation::Provision, 1);
    let other = space(ControlSpaceState::Deleting, "delete-op");
    assert!(matches!(
        step(&cmd).complete_provision(Some(&other), &remote("t1", "ks9", 4)),
        Err(StepError::OwnershipLost { .. })
    ));
}

#[test]
fn delete_acks_when_already_deleted() {
    let cmd = command(Operation::Delete, 1);
    let deleted = space(ControlSpaceState::Deleted, "op");
    assert_eq!(
        step(&cmd).start_delete(Some(&deleted), None, true),
        DeleteStart::AlreadyDeleted(Settlement::ack(at(10)).nothing_sent())
    );
}

#[test]
fn never_provisioned_deletion_supersedes_unattempted_provision_when_disabled() {
    let cmd = command(Operation::Delete, 1);
    let deleting = space(ControlSpaceState::Deleting, "op");
    let pending = provision_record(CommandStatus::Pending, 0);
    let DeleteStart::NeverProvisioned(settlement) =
        step(&cmd).start_delete(Some(&deleting), Some(&pending), false)
    else {
        panic!("expected never-provisioned cleanup");
    };
    assert!(settlement.completes());
    assert_eq!(
        settlement.control_space.unwrap().next.state,
        ControlSpaceState::Deleted
    );
    let supersede = settlement.supersede.unwrap();
    assert_eq!(supersede.command_id.as_str(), "prov");
    assert_eq!(supersede.rule, SupersedeRule::Unattempted);
    assert_eq!(supersede.error.code, ErrorCode::SupersededByDelete);
}

#[test]
fn never_provisioned_cleanup_needs_every_condition() {
    let cmd = command(Operation::Delete, 1);
    let deleting = space(ControlSpaceState::Deleting, "op");
    let mut with_identity = deleting.clone();
    with_identity.knowledge_space_id = Some(ks("k"));
    let pending = provision_record(CommandStatus::Pending, 0);
    let attempted = provision_record(CommandStatus::Pending, 1);
    let processing = provision_record(CommandStatus::Processing, 0);
    let cases: Vec<(Option<ControlSpace>, Option<&CommandRecord>, bool)> = vec![
        (Some(deleting.clone()), Some(&pending), true),
        (Some(deleting.clone()), Some(&attempted), false),
        (Some(deleting.clone()), Some(&processing), false),
        (Some(deleting.clone()), None, false),
        (Some(with_identity), Some(&pending), false),
        (
            Some(space(ControlSpaceState::Deleting, "other")),
            Some(&pending),
            false,
        ),
        (None, Some(&pending), false),
    ];
    for (cs, provision, enabled) in cases {
        assert_eq!(
            step(&cmd).start_delete(cs.as_ref(), provision, enabled),
            DeleteStart::Continue,
            "{cs:?} {provision:?} enabled={enabled}"
        );
    }
}

#[test]
fn deletion_target_uses_registered_identity_or_asks_for_lookup() {
    let cmd = command(Operation::Delete, 1);
    let mut known = space(ControlSpaceState::Deleting, "op");
    known.knowledge_space_id = Some(ks("ks1"));
    known.knowledge_space_revision = 8;
    let DeletionTarget::Known(request) = step(&cmd)
        .deletion_target(&delete_payload(), Some(&known))
        .unwrap()
    else {
        panic!("expected known target");
    };
    assert_eq!(request.knowledge_space_id, ks("ks1"));
    assert_eq!(request.expected_revision, 8);
    let unknown = space(ControlSpaceState::Deleting, "op");
    assert_eq!(
        step(&cmd)
            .deletion_target(&delete_payload(), Some(&unknown))
            .unwrap(),
        DeletionTarget::Lookup
    );
    assert!(
        step(&cmd)
            .deletion_target(
                &delete_payload(),
                Some(&space(ControlSpaceState::Active, "op"))
            )
            .is_err()
    );
    assert!(step(&cmd).deletion_target(&delete_payload(), None).is_err());
}

#[test]
fn lost_ack_recovery_registers_identity_by_cas() {
    let cmd = command(Operation::Delete, 1);
    let cs = space(ControlSpaceState::Deleting, "op");
    let Recovery::Resolved {
        request,
        registration,
    } = step(&cmd)
        .recover_identity(&delete_payload(), Some(&remote("t1", "ks7", 3)), Some(&cs))
        .unwrap()
    else {
        panic!("expected resolved");
    };
    assert_eq!(request.knowledge_space_id, ks("ks7"));
    assert_eq!(request.expected_revision, 3);
    let registration = registration.unwrap();
    assert_eq!(registration.outcome, None, "registration keeps the lease");
    let cas = registration.control_space.unwrap();
    assert_eq!(cas.next.state, ControlSpaceState::Deleting);
    assert_eq!(cas.next.knowledge_space_id, Some(ks("ks7")));
}

#[test]
fn lost_ack_recovery_checks_namespace() {
    let cmd = command(Operation::Delete, 2);
    let cs = space(ControlSpaceState::Deleting, "op");
    let Recovery::Retry(settlement) = step(&cmd)
        .recover_identity(
            &delete_payload(),
            Some(&remote("other", "ks7", 3)),
            Some(&cs),
        )
        .unwrap()
    else {
        panic!("expected retry");
    };
    assert_eq!(
        retry_code(&settlement),
        Some((ErrorCode::KnowledgeFsScopeMismatch.as_str(), at(14)))
    );
}

#[test]
fn lost_ack_recovery_detects_conflicting_identity() {
    let cmd = command(Operation::Delete, 1);
    let mut cs = space(ControlSpaceState::Deleting, "op");
    cs.knowledge_space_id = Some(ks("ks1"));
    assert_eq!(
        step(&cmd).recover_identity(&delete_payload(), Some(&remote("t1", "ks2", 3)), Some(&cs)),
        Err(StepError::IdentityConflict)
    );
    let same = step(&cmd)
        .recover_identity(&delete_payload(), Some(&remote("t1", "ks1", 3)), Some(&cs))
        .unwrap();
    assert!(matches!(
        same,
        Recovery::Resolved {
            registration: None,
            ..
        }
    ));
    assert_eq!(
        step(&cmd)
            .recover_identity(&delete_payload(), None, Some(&cs))
            .unwrap(),
        Recovery::Absent
    );
    assert!(matches!(
        step(&cmd).recover_identity(
            &delete_payload(),
            Some(&remote("t1", "ks1", 3)),
            Some(&space(ControlSpaceState::Deleting, "x"))
        ),
        Err(StepError::OwnershipLost { .. })
    ));
}

/// A provision record with an attempt window that ended at `window_end` (`None`: never
/// claimed, or a legacy row).
fn provision_with_window(
    status: CommandStatus,
    attempt_count: i32,
    window_end: Option<i64>,
    lease_expires_at: Option<i64>,
) -> CommandRecord {
    let mut record = provision_record(status, attempt_count);
    record.attempt_window_ends_at = window_end.map(at);
    record.lease_expires_at = lease_expires_at.map(at);
    record
}

#[test]
fn remote_absence_completes_only_when_no_provision_can_still_land() {
    use std::time::Duration as StdDuration;
    let cmd = command(Operation::Delete, 1);
    let cs = space(ControlSpaceState::Deleting, "op");
    let secs = StdDuration::from_secs;
    // (case, provision, grace, expected: Ok(Some(rule)) = complete with supersede,
    //  Ok(None) = complete without supersede, Err(next attempt) = unconfirmed)
    type Expected = Result<Option<SupersedeRule>, DateTime<Utc>>;
    let cases: Vec<(&str, CommandRecord, StdDuration, Expected)> = vec![
        (
            "never claimed, pending: provably never sent",
            provision_with_window(CommandStatus::Pending, 0, None, None),
            secs(600),
            Ok(Some(SupersedeRule::Unattempted)),
        ),
        (
            "never claimed, superseded",
            provision_with_window(CommandStatus::Superseded, 0, None, None),
            secs(600),
            Ok(None),
        ),
        (
            "attempted, pending, inside the grace period",
            provision_with_window(CommandStatus::Pending, 1, Some(5), None),
            secs(60),
            Err(at(12)),
        ),
        (
            "attempted, pending, grace period over",
            provision_with_window(CommandStatus::Pending, 1, Some(5), None),
            secs(3),
            Ok(Some(SupersedeRule::AfterRemoteAbsence {
                grace: secs(3),
                observed_at: at(10),
            })),
        ),
        (
            "processing under a live lease",
            provision_with_window(CommandStatus::Processing, 1, Some(20), Some(20)),
            secs(0),
            Err(at(12)),
        ),
        (
            "processing under an expired lease, grace over",
            provision_with_window(CommandStatus::Processing, 1, Some(4), Some(4)),
            secs(5),
            Ok(Some(SupersedeRule::AfterRemoteAbsence {
                grace: secs(5),
                observed_at: at(10),
            })),
        ),
        (
            "succeeded long ago (acked without delivery)",
            provision_with_window(CommandStatus::Succeeded, 1, Some(0), None),
            secs(5),
            Ok(None),
        ),
        (
            "succeeded recently: the next lookup is when the grace ends",
            provision_with_window(CommandStatus::Succeeded, 1, Some(8), None),
            secs(3),
            Err(at(11)),
        ),
    ];
    for (name, provision, grace, expected) in cases {
        let outcome = step(&cmd).complete_absent(Some(&cs), Some(&provision), grace, at(10));
        match (outcome, expected) {
            (AbsentOutcome::Complete(settlement), Ok(rule)) => {
                assert!(settlement.completes(), "{name}");
                assert_eq!(
                    settlement.control_space.unwrap().next.state,
                    ControlSpaceState::Deleted,
                    "{name}"
                );
                assert_eq!(settlement.supersede.map(|s| s.rule), rule, "{name}");
            }
            (AbsentOutcome::Unconfirmed(settlement), Err(next)) => {
                assert_eq!(
                    retry_code(&settlement),
                    Some((ErrorCode::RemoteAbsenceUnconfirmed.as_str(), next)),
                    "{name}"
                );
            }
            (other, expected) => panic!("{name}: got {other:?}, expected {expected:?}"),
        }
    }
}

/// A lookup sent at t(6) and answered at t(10): a provision window that ended at t(5) with a
/// grace of 3 s could still land until t(8), after the lookup looked. Judged at the answer (the
/// reference) it would be quiet; judged at the send it is not (docs/protocol.md, "Absence is
/// judged when the lookup was sent").
#[test]
fn remote_absence_is_judged_when_the_lookup_was_sent_not_answered() {
    let cmd = command(Operation::Delete, 1);
    let cs = space(ControlSpaceState::Deleting, "op");
    let grace = std::time::Duration::from_secs(3);
    let provision = provision_with_window(CommandStatus::Pending, 1, Some(5), None);
    let AbsentOutcome::Unconfirmed(settlement) =
        step(&cmd).complete_absent(Some(&cs), Some(&provision), grace, at(6))
    else {
        panic!("a provision that may land after the lookup was sent must not be superseded");
    };
    assert_eq!(
        retry_code(&settlement),
        Some((ErrorCode::RemoteAbsenceUnconfirmed.as_str(), at(11)))
    );
    let AbsentOutcome::Complete(settlement) =
        step(&cmd).complete_absent(Some(&cs), Some(&provision), grace, at(8))
    else {
        panic!("quiet when the lookup was sent at t(8)");
    };
    assert_eq!(
        settlement.supersede.map(|s| s.rule),
        Some(SupersedeRule::AfterRemoteAbsence {
            grace,
            observed_at: at(8)
        })
    );
}

#[test]
fn remote_absence_retries_not_found_without_a_deleting_space_or_provision() {
    let cmd = command(Operation::Delete, 3);
    let cs = space(ControlSpaceState::Deleting, "op");
    let open = provision_record(CommandStatus::Pending, 0);
    let cases: Vec<(Option<ControlSpace>, Option<&CommandRecord>)> = vec![
        (Some(cs.clone()), None),
        (Some(space(ControlSpaceState::Deleting, "x")), Some(&open)),
        (None, Some(&open)),
    ];
    for (cs, provision) in cases {
        let AbsentOutcome::NotFound(settlement) = step(&cmd).complete_absent(
            cs.as_ref(),
            provision,
            std::time::Duration::from_secs(600),
            at(10),
        ) else {
            panic!("{cs:?} {provision:?}: expected not found");
        };
        assert_eq!(
            retry_code(&settlement),
            Some((ErrorCode::KnowledgeFsSpaceNotFound.as_str(), at(18)))
        );
    }
}

#[test]
fn step_at_moves_only_the_time() {
    let cmd = command(Operation::Provision, 2);
    let later = step(&cmd).at(at(500));
    assert_eq!(later.now, at(500));
    assert_eq!(
        retry_code(&later.retry("X", "x", None)),
        Some(("X", at(504))),
        "backoff counts from the re-timed now"
    );
}

#[test]
fn deletion_progress_settles_by_phase() {
    let cmd = command(Operation::Delete, 2);
    let mut cs = space(ControlSpaceState::Deleting, "op");
    cs.knowledge_space_revision = 9;
    let progress = |phase, irreversible_at| DeletionProgress {
        phase,
        irreversible_at,
        revision: 5,
        retry_after: None,
    };
    // accepted / draining: polled again after the default interval (2 s), nothing recorded
    for phase in [DeletionPhase::Accepted, DeletionPhase::Draining] {
        let s = step(&cmd)
            .settle_deletion(Some(&cs), &progress(phase, None))
            .unwrap();
        assert_eq!(
            retry_code(&s),
            Some((ErrorCode::RemoteDeletionPending.as_str(), at(12)))
        );
        assert_eq!(s.control_space, None);
    }
    // the remote's Retry-After sets the poll interval, whatever the attempt count
    let late = command(Operation::Delete, 9);
    let s = step(&late)
        .settle_deletion(
            Some(&cs),
            &DeletionProgress {
                retry_after: Some(std::time::Duration::from_secs(1)),
                ..progress(DeletionPhase::Draining, None)
            },
        )
        .unwrap();
    assert_eq!(
        retry_code(&s),
        Some((ErrorCode::RemoteDeletionPending.as_str(), at(11))),
        "not the failure backoff (256 s at attempt 9)"
    );
    // irreversible: retry and record the remote time once
    let s = step(&cmd)
        .settle_deletion(
            Some(&cs),
            &progress(DeletionPhase::Irreversible, Some(at(7))),
        )
        .unwrap();
    assert_eq!(
        retry_code(&s).map(|r| r.0),
        Some(ErrorCode::RemoteDeletionPending.as_str())
    );
    let cas = s.control_space.unwrap();
    assert_eq!(cas.next.deletion_irreversible_at, Some(at(7)));
    assert_eq!(cas.next.state, ControlSpaceState::Deleting);
    // irreversible again: nothing more to record
    let mut marked = cs.clone();
    marked.deletion_irreversible_at = Some(at(7));
    let s = step(&cmd)
        .settle_deletion(
            Some(&marked),
            &progress(DeletionPhase::Irreversible, Some(at(9))),
        )
        .unwrap();
    assert_eq!(s.control_space, None);
    // completed without remote time: irreversible at now, deleted with max revision
    let s = step(&cmd)
        .settle_deletion(Some(&cs), &progress(DeletionPhase::Completed, None))
        .unwrap();
    assert!(s.completes());
    let cas = s.control_space.unwrap();
    assert_eq!(cas.next.deletion_irreversible_at, Some(at(10)));
    assert_eq!(cas.next.state, ControlSpaceState::Deleted);
    assert_eq!(cas.next.knowledge_space_revision, 9);
    // another owner
    assert!(
        step(&cmd)
            .settle_deletion(
                Some(&space(ControlSpaceState::Deleting, "x")),
                &progress(DeletionPhase::Completed, None)
            )
            .is_err()
    );
}

#[test]
fn revoke_acks_only_at_or_above_the_watermark() {
    let cmd = command(Operation::Revoke, 1);
    let payload = RevokePayload {
        knowledge_space_id: ks("ks"),
        grant_id: tenantry_kernel::GrantId::parse("g").unwrap(),
        event_id: "e".into(),
        reason_code: "r".into(),
        revoke_sequence: 5,
        expected_revision: 1,
    };
    let cases = [
        (RevokeState::Revoked, 5, true),
        (RevokeState::Revoked, 6, true),
        (RevokeState::Revoked, 4, false),
        (RevokeState::Pending, 9, false),
    ];
    for (state, highest, acked) in cases {
        let s = step(&cmd).settle_revoke(
            &payload,
            &RevokeAck {
                state,
                highest_revoke_sequence: highest,
            },
        );
        if acked {
            assert!(s.completes(), "{state:?} {highest}");
        } else {
            assert_eq!(
                retry_code(&s).map(|r| r.0),
                Some(ErrorCode::RemoteRevokeWatermarkLag.as_str())
            );
        }
    }
}

#[test]
fn unsupported_and_remote_errors_retry_with_their_codes() {
    let cmd = command(Operation::Unsupported("rename".into()), 1);
    assert_eq!(
        retry_code(&step(&cmd).unsupported("rename")),
        Some((ErrorCode::UnsupportedOperation.as_str(), at(12)))
    );
    let s = step(&cmd).remote_failure(
        Some(503),
        &"KFS_BUSY".into(),
        "busy",
        Some(std::time::Duration::from_secs(40)),
    );
    assert_eq!(
        retry_code(&s),
        Some(("KFS_BUSY", at(10) + ChronoDuration::seconds(40)))
    );
}

fn failed_code(settlement: &Settlement) -> Option<(&str, DateTime<Utc>)> {
    match &settlement.outcome {
        Some(CommandOutcome::Fail {
            completed_at,
            error,
        }) => Some((error.code.as_str(), *completed_at)),
        _ => None,
    }
}

#[test]
fn permanent_remote_answers_dead_letter_at_once() {
    let cmd = command(Operation::Provision, 1);
    for (status, code) in [
        (Some(400), "INVALID_REQUEST"),
        (Some(422), "IDEMPOTENCY_KEY_REUSED"),
        (Some(409), "PROVISIONING_KEY_CONFLICT"),
        (Some(409), "KNOWLEDGE_FS_SPACE_DELETED"),
    ] {
        let s = step(&cmd).remote_failure(status, &code.into(), "no", None);
        assert_eq!(failed_code(&s), Some((code, at(10))), "{code}");
        assert_eq!(s.status(), Some(CommandStatus::Failed));
        assert!(s.completes());
    }
    for (status, code) in [
        (Some(401), "UNAUTHORIZED"),
        (Some(429), "KFS_RATE_LIMITED"),
        (Some(409), "REVISION_AHEAD"),
        (None, "REMOTE_OUTCOME_UNKNOWN"),
    ] {
        let s = step(&cmd).remote_failure(status, &code.into(), "later", None);
        assert_eq!(retry_code(&s).map(|r| r.0), Some(code), "{code}");
    }
}

#[test]
fn invalid_payload_and_identity_conflict_dead_letter() {
    let cmd = command(Operation::Provision, 1);
    assert_eq!(
        failed_code(&step(&cmd).invalid_payload("bad")),
        Some((ErrorCode::InvalidCommandPayload.as_str(), at(10)))
    );
    assert_eq!(
        failed_code(&step(&cmd).step_error(&StepError::IdentityConflict)),
        Some((ErrorCode::KnowledgeFsIdentityConflict.as_str(), at(10)))
    );
    // Ownership loss and refused transitions hand the command back at once.
    let lost = step(&cmd).step_error(&StepError::OwnershipLost { reason: "moved" });
    assert_eq!(
        retry_code(&lost),
        Some((ErrorCode::OwnershipLost.as_str(), at(10)))
    );
}

#[test]
fn the_attempt_budget_dead_letters_a_retry_but_not_a_progress_poll() {
    // POLICY.max_attempts = 5: the fifth claim's retry fails the command.
    let fourth = command(Operation::Provision, 4);
    assert!(retry_code(&step(&fourth).retry("KFS_UNAVAILABLE", "down", None)).is_some());
    let fifth = command(Operation::Provision, 5);
    let s = step(&fifth).retry("KFS_UNAVAILABLE", "down", None);
    let (code, _) = failed_code(&s).expect("dead-lettered");
    assert_eq!(code, "KFS_UNAVAILABLE");
    let Some(CommandOutcome::Fail { error, .. }) = &s.outcome else {
        unreachable!()
    };
    assert!(
        error.message.contains("max_attempts = 5"),
        "{}",
        error.message
    );
    // A progress poll never fails the command.
    let s = step(&fifth).retry(ErrorCode::RemoteDeletionPending, "draining", None);
    assert_eq!(
        retry_code(&s).map(|r| r.0),
        Some(ErrorCode::RemoteDeletionPending.as_str())
    );
    // An operator retry starts a fresh budget without resetting attempt_count.
    let mut retried = command(Operation::Provision, 7);
    retried.attempt_budget_base = 5;
    assert!(retry_code(&step(&retried).retry("KFS_UNAVAILABLE", "down", None)).is_some());
    retried.attempt_count = 10;
    assert!(failed_code(&step(&retried).retry("KFS_UNAVAILABLE", "down", None)).is_some());
}

/// Issue 29: after an operator retry the backoff starts again from the shortest step; it
/// counts the claims since the retry (`attempt_count - attempt_budget_base`), not the lifetime
/// `attempt_count`.
#[test]
fn backoff_counts_from_the_last_operator_retry() {
    // (attempt_count, attempt_budget_base, expected delay in seconds after `now` = at(10))
    let table = [
        (1, 0, 2),
        (3, 0, 8),
        (40, 0, 256),
        (41, 40, 2),
        (42, 40, 4),
        (44, 40, 16),
        (7, 5, 4),
    ];
    let policy = RetryPolicy {
        max_attempts: 100,
        ..POLICY
    };
    for (attempt_count, base, seconds) in table {
        let mut cmd = command(Operation::Provision, attempt_count);
        cmd.attempt_budget_base = base;
        let step = Step {
            policy: &policy,
            ..step(&cmd)
        };
        let retry = step.retry("KFS_UNAVAILABLE", "down", None);
        assert_eq!(
            retry_code(&retry),
            Some(("KFS_UNAVAILABLE", at(10 + seconds))),
            "attempt_count {attempt_count}, budget base {base}"
        );
    }
}

#[test]
fn revocation_of_a_deleting_or_deleted_space_is_moot() {
    let cmd = command(Operation::Revoke, 1);
    let payload = RevokePayload {
        knowledge_space_id: ks("ks1"),
        grant_id: tenantry_kernel::GrantId::parse("g1").unwrap(),
        event_id: "op".into(),
        reason_code: "r".into(),
        revoke_sequence: 1,
        expected_revision: 1,
    };
    let active = space(ControlSpaceState::Active, "op");
    assert!(matches!(
        step(&cmd).start_revoke(&payload, Some(&active)),
        RevokeStart::Deliver(_)
    ));
    for cs in [
        Some(space(ControlSpaceState::Deleting, "op-del")),
        Some(space(ControlSpaceState::Deleted, "op-del")),
        None,
    ] {
        let RevokeStart::Moot(s) = step(&cmd).start_revoke(&payload, cs.as_ref()) else {
            panic!("expected moot for {cs:?}");
        };
        assert_eq!(s.status(), Some(CommandStatus::Superseded));
        assert_eq!(
            s.outcome
                .as_ref()
                .and_then(|o| o.error())
                .map(|e| e.code.as_str()),
            Some(ErrorCode::ControlSpaceDeleting.as_str())
        );
    }
}

#[test]
fn case_010_a_far_future_retry_after_is_capped() {
    let cmd = command(Operation::Provision, 1);
    let cap = at(10) + ChronoDuration::seconds(3600);
    for after in [
        std::time::Duration::from_secs(u64::MAX),
        std::time::Duration::MAX,
        std::time::Duration::from_secs(86_400 * 365 * 100),
    ] {
        let s =
            step(&cmd).remote_failure(Some(503), &"KFS_UNAVAILABLE".into(), "busy", Some(after));
        assert_eq!(retry_code(&s), Some(("KFS_UNAVAILABLE", cap)), "{after:?}");
        // A deletion's poll interval is capped the same way.
        let delete = command(Operation::Delete, 1);
        let cs = space(ControlSpaceState::Deleting, "op");
        let progress = DeletionProgress {
            phase: DeletionPhase::Draining,
            irreversible_at: None,
            revision: 1,
            retry_after: Some(after),
        };
        let s = step(&delete).settle_deletion(Some(&cs), &progress).unwrap();
        assert_eq!(
            retry_code(&s),
            Some((ErrorCode::RemoteDeletionPending.as_str(), cap)),
            "{after:?}"
        );
    }
}

#[test]
fn case_010_a_remote_error_is_stored_bounded() {
    use tenantry_kernel::text::MAX_MESSAGE_BYTES;
    let cmd = command(Operation::Provision, 1);
    let code = ErrorCode::from("c".repeat(200 * 1024));
    let message = format!("\u{1b}[2J{}", "m".repeat(700 * 1024));
    // Retried (a 503) and dead-lettered (a 400): both store the bounded error.
    for status in [503, 400] {
        let s = step(&cmd).remote_failure(Some(status), &code, &message, None);
        let (CommandOutcome::Retry { error, .. } | CommandOutcome::Fail { error, .. }) =
            s.outcome.clone().unwrap()
        else {
            panic!("{s:?}")
        };
        assert_eq!(error.code, ErrorCode::RemoteErrorCodeInvalid, "{status}");
        assert!(error.message.len() <= MAX_MESSAGE_BYTES, "{status}");
        assert!(!error.message.contains('\u{1b}'), "{status}");
    }
    // The attempt that spends the budget keeps the bound too.
    let spent = command(Operation::Provision, 5);
    let s = step(&spent).remote_failure(Some(503), &code, &message, None);
    let Some(CommandOutcome::Fail { error, .. }) = &s.outcome else {
        panic!("{s:?}")
    };
    assert_eq!(error.code, ErrorCode::RemoteErrorCodeInvalid);
    assert!(
        error.message.contains(": gave up after 5 attempts"),
        "{}",
        &error.message[..120]
    );
    assert!(error.message.len() <= MAX_MESSAGE_BYTES);
}
