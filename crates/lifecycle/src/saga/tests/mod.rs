//! Table tests of the saga decisions: shared fixtures and the provision decisions here;
//! deletions in `delete`, revocations, errors and retries in `retry`.

use chrono::Duration as ChronoDuration;
use serde_json::json;
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, LeaseEpoch, LeaseOwner, ProvisioningKey, TenantId,
};

use super::*;
use crate::command::{CommandOutcome, LeaseToken, Operation};
use crate::control_space::tests::{at, ks, op, space};

mod delete;
mod retry;

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
        trace_context: None,
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

/// A provision refused for good (`409 KNOWLEDGE_FS_SPACE_DELETED`) fails only while its
/// control space still waits for it; overtaken by the control space's deletion (found by the
/// worker simulation once a claimed provision could wait for a remote-call slot), it closes
/// as superseded, as its next attempt would. Retryable errors are untouched.
#[test]
fn a_provision_refused_for_good_after_its_control_space_was_deleted_is_superseded() {
    let cmd = command(Operation::Provision, 1);
    let s = step(&cmd);
    let deleted = ErrorCode::KnowledgeFsSpaceDeleted;
    let refuse = |cs: Option<&ControlSpace>, status: u16, code: &ErrorCode| {
        s.provision_failure(cs, Some(status), code, "refused", None)
            .status()
    };
    let table = [
        // (control space, status, code, expected)
        (
            Some(space(ControlSpaceState::Provisioning, "op")),
            409,
            deleted.clone(),
            CommandStatus::Failed,
        ),
        (
            Some(space(ControlSpaceState::Deleting, "op-del")),
            409,
            deleted.clone(),
            CommandStatus::Superseded,
        ),
        (
            Some(space(ControlSpaceState::Deleted, "op-del")),
            409,
            deleted.clone(),
            CommandStatus::Superseded,
        ),
        (None, 409, deleted.clone(), CommandStatus::Superseded),
        (
            Some(space(ControlSpaceState::Active, "op")),
            409,
            deleted.clone(),
            CommandStatus::Succeeded,
        ),
        (
            Some(space(ControlSpaceState::Deleted, "op-del")),
            503,
            ErrorCode::from("KFS_UNAVAILABLE"),
            CommandStatus::Pending,
        ),
        (
            Some(space(ControlSpaceState::Provisioning, "op")),
            400,
            ErrorCode::from("INVALID_REQUEST"),
            CommandStatus::Failed,
        ),
    ];
    for (cs, status, code, expected) in table {
        assert_eq!(
            refuse(cs.as_ref(), status, &code),
            Some(expected),
            "{cs:?} {status} {code:?}"
        );
    }
    // A failure because the budget ran out (here a 504 on the fifth and last attempt) is no
    // refusal: its request may still land, so it fails and keeps its attempt window.
    let last = command(Operation::Provision, 5);
    let gave_up = step(&last).provision_failure(
        Some(&space(ControlSpaceState::Deleted, "op-del")),
        Some(504),
        &ErrorCode::from("GATEWAY_TIMEOUT"),
        "gateway timeout",
        None,
    );
    assert_eq!(gave_up.status(), Some(CommandStatus::Failed));
    assert!(gave_up.may_have_sent);
}
