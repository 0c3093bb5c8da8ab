//! Table tests of the deletion decisions: already deleted, never provisioned, the deletion
//! target, lost-acknowledgement recovery, remote absence and its grace, deletion progress.

use super::*;

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
