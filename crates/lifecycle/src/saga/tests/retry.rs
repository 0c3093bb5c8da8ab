//! Table tests of revocation, remote errors, dead letters, the attempt budget, backoff after
//! an operator retry, and bounded remote data (case 010).

use super::*;

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
