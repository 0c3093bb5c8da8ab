//! Conformance cases of dead-lettered commands and operator actions.
//!
//! - a `Fail` outcome (status `failed`) and a `Moot` outcome (status `superseded`) settle like
//!   an ack: terminal, `completed_at` and error recorded, lease cleared, never claimed again —
//!   through `settle` and through `settle_many`;
//! - [`CommandAdmin`](crate::lifecycle::CommandAdmin): retry and abandon are compare-and-sets on
//!   a `pending` or `failed` status, recorded in the action log, refused (nothing written) on any
//!   other status; a retry keeps `attempt_count` and starts a fresh attempt budget;
//! - counts per (status, operation) and the error-code filter of `list_commands`.

use tenantry_lifecycle::ControlSpaceState;
use tenantry_lifecycle::ErrorCode;

use super::*;
use crate::lifecycle::{
    CommandAdmin, CommandCount, OperatorAction, OperatorActionError, OperatorActionKind,
};

fn action(id: &CommandId, kind: OperatorActionKind, n: u32, at: DateTime<Utc>) -> OperatorAction {
    OperatorAction {
        action_id: format!("act-{}-{n}", id.as_str()),
        command_id: id.clone(),
        kind,
        actor: "conformance".into(),
        reason: format!("reason {n}"),
        at,
    }
}

async fn fail_it<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    cs: &str,
    key: &str,
    at: i64,
) -> CommandId {
    let id = enqueue(store, clock, cs, key, t(at)).await;
    let claimed = claim_one(store, clock, "w1", t(at + 1)).await;
    assert_eq!(claimed.id(), &id);
    store
        .settle(
            &claimed.lease,
            &Settlement::fail(t(at + 2), ErrorRecord::new("INVALID_REQUEST", "bad")),
        )
        .await
        .unwrap();
    id
}

pub async fn settle_fail_dead_letters_and_is_never_claimed<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = fail_it(&store, &clock, "cs1", "k1", 0).await;
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Failed);
    assert_eq!(row.completed_at, Some(t(2)));
    assert_eq!(
        row.last_error_code.as_ref().map(ErrorCode::as_str),
        Some("INVALID_REQUEST")
    );
    assert_eq!(row.last_error_message.as_deref(), Some("bad"));
    assert_eq!((row.lease_owner, row.lease_expires_at), (None, None));
    assert_eq!(row.attempt_count, 1);
    assert!(
        claim(&store, &clock, claim_at("w2", t(100_000), 5))
            .await
            .unwrap()
            .is_empty(),
        "a failed command is never claimed"
    );
}

pub async fn settle_moot_closes_as_superseded<S: LifecycleStore>(store: S, clock: ManualClock) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    let moot = Settlement::moot(
        t(2),
        ErrorRecord::new(ErrorCode::ControlSpaceDeleting, "deleted"),
    );
    store.settle(&claimed.lease, &moot).await.unwrap();
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Superseded);
    assert_eq!(row.completed_at, Some(t(2)));
    assert_eq!(
        row.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::ControlSpaceDeleting.as_str())
    );
    assert_eq!(row.lease_owner, None);
}

pub async fn settle_many_dead_letters_beside_acks_and_retries<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    for (cs, key) in [("cs1", "k1"), ("cs2", "k2"), ("cs3", "k3"), ("cs4", "k4")] {
        enqueue(&store, &clock, cs, key, t(0)).await;
    }
    let mut claimed = claim(&store, &clock, claim_at("w1", t(1), 4))
        .await
        .unwrap();
    claimed.sort_by(|a, b| a.payload["slug"].as_str().cmp(&b.payload["slug"].as_str()));
    let cs2 = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs2").unwrap())
        .await
        .unwrap()
        .unwrap();
    let activate = cs2
        .plan(
            &[Transition::Activate {
                operation_id: cs2.lifecycle_operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks-cs2").unwrap(),
                revision: 1,
            }],
            t(2),
        )
        .unwrap();
    let fail = |code: &str| Settlement::fail(t(2), ErrorRecord::new(code, "permanent"));
    let items = vec![
        (claimed[0].lease.clone(), fail("INVALID_REQUEST")),
        (
            claimed[1].lease.clone(),
            Settlement::ack(t(2)).with_control_space(activate),
        ),
        (
            claimed[2].lease.clone(),
            Settlement::retry(t(30), ErrorRecord::new("KFS_UNAVAILABLE", "down")),
        ),
        (
            claimed[3].lease.clone(),
            Settlement::moot(
                t(2),
                ErrorRecord::new(ErrorCode::ControlSpaceDeleting, "gone"),
            ),
        ),
    ];
    let results = store.settle_many(&items).await.unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let expected = [
        (CommandStatus::Failed, Some("INVALID_REQUEST"), Some(t(2))),
        (CommandStatus::Succeeded, None, Some(t(2))),
        (CommandStatus::Pending, Some("KFS_UNAVAILABLE"), None),
        (
            CommandStatus::Superseded,
            Some(ErrorCode::ControlSpaceDeleting.as_str()),
            Some(t(2)),
        ),
    ];
    for (c, (status, code, completed)) in claimed.iter().zip(expected) {
        let row = record(&store, c.id()).await;
        assert_eq!(row.status, status, "{}", c.id());
        assert_eq!(
            row.last_error_code.as_ref().map(ErrorCode::as_str),
            code,
            "{}",
            c.id()
        );
        assert_eq!(row.completed_at, completed, "{}", c.id());
        assert_eq!(row.lease_owner, None);
    }
    let cs2 = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs2").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cs2.state, ControlSpaceState::Active);
    // A failed item in a batch that also settles a lease-lost item.
    let id = enqueue(&store, &clock, "cs5", "k5", t(10)).await;
    let c = claim_one(&store, &clock, "w1", t(11)).await;
    let results = store
        .settle_many(&[
            (c.lease.clone(), fail("IDEMPOTENCY_KEY_REUSED")),
            (claimed[0].lease.clone(), fail("INVALID_REQUEST")),
        ])
        .await
        .unwrap();
    assert_eq!(results[0], Ok(()));
    assert!(matches!(results[1], Err(SettleError::LeaseLost { .. })));
    assert_eq!(status_of(&store, &id).await, CommandStatus::Failed);
}

pub async fn operator_retry_keeps_the_attempt_count_and_starts_a_fresh_budget<
    S: LifecycleStore + CommandAdmin,
>(
    store: S,
    clock: ManualClock,
) {
    let id = fail_it(&store, &clock, "cs1", "k1", 0).await;
    clock.set(t(50));
    let after = store
        .act_on_command(&action(&id, OperatorActionKind::Retry, 1, t(50)))
        .await
        .unwrap();
    assert_eq!(after.status, CommandStatus::Pending);
    assert_eq!(after.next_attempt_at, t(50));
    assert_eq!(after.attempt_count, 1, "attempt_count is never reset");
    assert_eq!(after.attempt_budget_base, 1);
    assert_eq!(after.completed_at, None);
    assert_eq!(record(&store, &id).await, after);
    assert!(
        claim(&store, &clock, claim_at("w2", t(49), 5))
            .await
            .unwrap()
            .is_empty()
    );
    let claimed = claim_one(&store, &clock, "w2", t(50)).await;
    assert_eq!(claimed.attempt_count, 2);
    assert_eq!(claimed.attempt_budget_base, 1);
    assert_eq!(claimed.attempts_in_budget(), 1);
    let log = store.command_actions(&id).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(
        log[0].action,
        action(&id, OperatorActionKind::Retry, 1, t(50))
    );
    assert_eq!(log[0].previous_status, CommandStatus::Failed);
    assert_eq!(
        log[0].previous_error_code.as_ref().map(ErrorCode::as_str),
        Some("INVALID_REQUEST")
    );
    assert_eq!(log[0].attempt_count, 1);
}

/// An abandon closes the command; its `completed_at` and the action log's time are the store's
/// (t(60)), not the operator process's clock, an hour behind (issue 29: retention's cut-offs
/// read them).
pub async fn operator_abandon_closes_a_pending_or_failed_command<
    S: LifecycleStore + CommandAdmin,
>(
    store: S,
    clock: ManualClock,
) {
    let failed = fail_it(&store, &clock, "cs2", "k2", 0).await;
    let pending = enqueue(&store, &clock, "cs1", "k1", t(10)).await;
    clock.set(t(60));
    for (n, id) in [&pending, &failed].into_iter().enumerate() {
        let n = u32::try_from(n).unwrap();
        let after = store
            .act_on_command(&action(id, OperatorActionKind::Abandon, n, t(60 - 3600)))
            .await
            .unwrap();
        assert_eq!(after.status, CommandStatus::Abandoned);
        assert_eq!(after.completed_at, Some(t(60)), "the store's time");
        assert_eq!(
            after.last_error_code.as_ref().map(ErrorCode::as_str),
            Some(ErrorCode::AbandonedByOperator.as_str())
        );
        assert_eq!(after.last_error_message, Some(format!("reason {n}")));
        let log = store.command_actions(id).await.unwrap();
        assert_eq!(log.len(), 1);
        assert_eq!(log[0].action.kind, OperatorActionKind::Abandon);
        assert_eq!(log[0].action.at, t(60), "logged at the store's time");
    }
    assert!(
        claim(&store, &clock, claim_at("w", t(100_000), 5))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn operator_actions_refuse_other_statuses_and_write_nothing<
    S: LifecycleStore + CommandAdmin,
>(
    store: S,
    clock: ManualClock,
) {
    let processing = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    let succeeded = enqueue(&store, &clock, "cs2", "k2", t(2)).await;
    let c = claim_one(&store, &clock, "w1", t(3)).await;
    store
        .settle(&c.lease, &Settlement::ack(t(4)))
        .await
        .unwrap();
    let abandoned = enqueue(&store, &clock, "cs3", "k3", t(5)).await;
    store
        .act_on_command(&action(&abandoned, OperatorActionKind::Abandon, 0, t(6)))
        .await
        .unwrap();
    for (id, status) in [
        (&processing, CommandStatus::Processing),
        (&succeeded, CommandStatus::Succeeded),
        (&abandoned, CommandStatus::Abandoned),
    ] {
        let before = record(&store, id).await;
        let before_log = store.command_actions(id).await.unwrap().len();
        for kind in [OperatorActionKind::Retry, OperatorActionKind::Abandon] {
            assert_eq!(
                store.act_on_command(&action(id, kind, 9, t(7))).await,
                Err(OperatorActionError::NotActionable {
                    command_id: id.clone(),
                    status,
                })
            );
        }
        assert_eq!(record(&store, id).await, before);
        assert_eq!(store.command_actions(id).await.unwrap().len(), before_log);
    }
    // The in-flight lease still settles.
    store
        .settle(&claimed.lease, &Settlement::ack(t(8)))
        .await
        .unwrap();
    let unknown = CommandId::parse("no-such-command").unwrap();
    assert_eq!(
        store
            .act_on_command(&action(&unknown, OperatorActionKind::Retry, 0, t(9)))
            .await,
        Err(OperatorActionError::UnknownCommand {
            command_id: unknown.clone()
        })
    );
    assert!(store.command_actions(&unknown).await.unwrap().is_empty());
    assert_eq!(
        store
            .command_by_id(&succeeded)
            .await
            .unwrap()
            .map(|r| r.status),
        Some(CommandStatus::Succeeded)
    );
    assert_eq!(store.command_by_id(&unknown).await.unwrap(), None);
}

pub async fn count_commands_groups_by_status_and_operation<S: LifecycleStore + CommandAdmin>(
    store: S,
    clock: ManualClock,
) {
    let first = fail_it(&store, &clock, "cs1", "k1", 0).await;
    fail_it(&store, &clock, "cs2", "k2", 10).await;
    enqueue(&store, &clock, "cs3", "k3", t(20)).await;
    enqueue(&store, &clock, "cs4", "k4", t(20)).await;
    enqueue(&store, &clock, "cs5", "k5", t(20)).await;
    claim_one(&store, &clock, "w1", t(21)).await;
    let mut counts = store
        .count_commands(&[
            CommandStatus::Pending,
            CommandStatus::Processing,
            CommandStatus::Failed,
        ])
        .await
        .unwrap();
    counts.sort_by_key(|c| c.status.as_str());
    let count = |status, count| CommandCount {
        status,
        operation: tenantry_lifecycle::Operation::Provision,
        count,
    };
    assert_eq!(
        counts,
        vec![
            count(CommandStatus::Failed, 2),
            count(CommandStatus::Pending, 2),
            count(CommandStatus::Processing, 1),
        ]
    );
    assert!(
        store
            .count_commands(&[CommandStatus::Succeeded])
            .await
            .unwrap()
            .is_empty()
    );
    // An operator action takes a command out of the failed count; a later failure adds it back.
    store
        .act_on_command(&action(&first, OperatorActionKind::Retry, 1, t(30)))
        .await
        .unwrap();
    // How many commands of `status` the counts hold (over all operations).
    let total = |counts: &[CommandCount], status: CommandStatus| {
        counts
            .iter()
            .filter(|c| c.status == status)
            .map(|c| c.count)
            .sum::<u64>()
    };
    let now = store
        .count_commands(&[CommandStatus::Failed, CommandStatus::Pending])
        .await
        .unwrap();
    assert_eq!(total(&now, CommandStatus::Failed), 1);
    assert_eq!(total(&now, CommandStatus::Pending), 3);
    let mut claimed = claim(&store, &clock, claim_at("w2", t(31), 10))
        .await
        .unwrap();
    let again = claimed
        .iter()
        .position(|c| c.id() == &first)
        .expect("the retried command is claimable");
    let again = claimed.swap_remove(again);
    let batch = [(
        again.lease.clone(),
        Settlement::fail(t(32), ErrorRecord::new("INVALID_REQUEST", "still bad")),
    )];
    assert_eq!(store.settle_many(&batch).await.unwrap(), vec![Ok(())]);
    let now = store
        .count_commands(&[CommandStatus::Failed])
        .await
        .unwrap();
    assert_eq!(total(&now, CommandStatus::Failed), 2);
    store
        .act_on_command(&action(&first, OperatorActionKind::Abandon, 2, t(33)))
        .await
        .unwrap();
    let now = store
        .count_commands(&[CommandStatus::Failed, CommandStatus::Abandoned])
        .await
        .unwrap();
    assert_eq!(total(&now, CommandStatus::Failed), 1);
    assert_eq!(total(&now, CommandStatus::Abandoned), 1);
}

pub async fn list_commands_filters_by_error_code<S: LifecycleStore>(store: S, clock: ManualClock) {
    let bad = fail_it(&store, &clock, "cs1", "k1", 0).await;
    let busy = enqueue(&store, &clock, "cs2", "k2", t(10)).await;
    let c = claim_one(&store, &clock, "w1", t(11)).await;
    store
        .settle(
            &c.lease,
            &Settlement::retry(t(20), ErrorRecord::new("KFS_UNAVAILABLE", "down")),
        )
        .await
        .unwrap();
    enqueue(&store, &clock, "cs3", "k3", t(12)).await;
    let page = |code: &str| CommandFilter {
        error_code: Some(code.into()),
        limit: 100,
        ..CommandFilter::default()
    };
    let ids = |rows: Vec<tenantry_lifecycle::CommandRecord>| {
        rows.into_iter().map(|r| r.id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.list_commands(&page("INVALID_REQUEST")).await.unwrap()),
        vec![bad.clone()]
    );
    assert_eq!(
        ids(store.list_commands(&page("KFS_UNAVAILABLE")).await.unwrap()),
        vec![busy]
    );
    let failed_bad = CommandFilter {
        status: Some(CommandStatus::Failed),
        ..page("INVALID_REQUEST")
    };
    assert_eq!(
        ids(store.list_commands(&failed_bad).await.unwrap()),
        vec![bad]
    );
    assert!(store.list_commands(&page("NOPE")).await.unwrap().is_empty());
}

/// `count_matching` counts exactly what `list_commands` lists for the same filter (cursor and
/// limit ignored); `count_by_error_code` groups one status by last error code, largest first.
pub async fn count_matching_and_by_error_code<S: LifecycleStore + CommandAdmin>(
    store: S,
    clock: ManualClock,
) {
    fail_it(&store, &clock, "cs1", "k1", 0).await;
    fail_it(&store, &clock, "cs2", "k2", 10).await;
    let busy = enqueue(&store, &clock, "cs3", "k3", t(20)).await;
    let c = claim_one(&store, &clock, "w1", t(21)).await;
    assert_eq!(c.id(), &busy);
    store
        .settle(
            &c.lease,
            &Settlement::fail(t(22), ErrorRecord::new("KFS_UNAVAILABLE", "down")),
        )
        .await
        .unwrap();
    enqueue(&store, &clock, "cs4", "k4", t(30)).await;
    let filters = [
        CommandFilter::default(),
        CommandFilter {
            status: Some(CommandStatus::Failed),
            ..CommandFilter::default()
        },
        CommandFilter {
            status: Some(CommandStatus::Failed),
            error_code: Some("INVALID_REQUEST".into()),
            ..CommandFilter::default()
        },
        CommandFilter {
            tenant_id: Some(tenant()),
            control_space_id: Some(ControlSpaceId::parse("cs4").unwrap()),
            ..CommandFilter::default()
        },
        CommandFilter {
            status: Some(CommandStatus::Succeeded),
            ..CommandFilter::default()
        },
    ];
    let expected = [4, 3, 2, 1, 0];
    for (filter, expected) in filters.iter().zip(expected) {
        let listed = store
            .list_commands(&CommandFilter {
                limit: 1000,
                ..filter.clone()
            })
            .await
            .unwrap()
            .len() as u64;
        // A cursor and a small limit change nothing in the count.
        let counted = store
            .count_matching(&CommandFilter {
                limit: 1,
                after: Some(busy.clone()),
                ..filter.clone()
            })
            .await
            .unwrap();
        assert_eq!((listed, counted), (expected, expected), "{filter:?}");
    }
    let by_code = store
        .count_by_error_code(CommandStatus::Failed, 10)
        .await
        .unwrap();
    let code = |c: &str| Some(ErrorCode::from(c));
    assert_eq!(
        by_code,
        vec![
            crate::lifecycle::ErrorCodeCount {
                code: code("INVALID_REQUEST"),
                count: 2
            },
            crate::lifecycle::ErrorCodeCount {
                code: code("KFS_UNAVAILABLE"),
                count: 1
            },
        ]
    );
    assert_eq!(
        store
            .count_by_error_code(CommandStatus::Failed, 1)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .count_by_error_code(CommandStatus::Abandoned, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `settled_since` lists succeeded commands completed at or after the bound, newest first, up
/// to the limit; `live_summary` names the oldest pending command and the lease owners of
/// processing ones.
pub async fn settled_since_and_live_summary<S: LifecycleStore + CommandAdmin>(
    store: S,
    clock: ManualClock,
) {
    assert_eq!(
        store.live_summary().await.unwrap(),
        crate::lifecycle::LiveSummary::default()
    );
    for (i, cs) in ["cs1", "cs2", "cs3"].into_iter().enumerate() {
        let at = 10 * i as i64;
        enqueue(&store, &clock, cs, &format!("k{i}"), t(at)).await;
        let c = claim_one(&store, &clock, "w1", t(at + 1)).await;
        store
            .settle(&c.lease, &Settlement::ack(t(at + 5)))
            .await
            .unwrap();
    }
    fail_it(&store, &clock, "cs4", "k4", 40).await;
    let settled = store.settled_since(t(15), 10).await.unwrap();
    let completed: Vec<_> = settled.iter().map(|s| s.completed_at).collect();
    assert_eq!(
        completed,
        vec![t(25), t(15)],
        "newest first, failed left out"
    );
    assert_eq!(settled[0].created_at, t(20));
    assert_eq!(store.settled_since(t(0), 1).await.unwrap().len(), 1);
    assert!(store.settled_since(t(26), 10).await.unwrap().is_empty());

    enqueue(&store, &clock, "cs5", "k5", t(50)).await;
    enqueue(&store, &clock, "cs6", "k6", t(51)).await;
    enqueue(&store, &clock, "cs7", "k7", t(52)).await;
    claim_one(&store, &clock, "w-b", t(53)).await;
    claim_one(&store, &clock, "w-a", t(54)).await;
    let live = store.live_summary().await.unwrap();
    assert_eq!(live.oldest_pending_created_at, Some(t(52)));
    assert_eq!(
        live.lease_owners,
        vec![("w-a".to_owned(), 1), ("w-b".to_owned(), 1)]
    );
}

/// Case 012: a plain abandon of the delete that owns its `deleting` control space is refused
/// (nothing written); mark-deleted abandons it and moves the control space to `deleted` in
/// the same transaction, recorded in the action log; mark-deleted of any other command is
/// refused.
pub async fn case_012_an_owning_delete_is_marked_deleted_not_abandoned<
    S: LifecycleStore + CommandAdmin,
>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let cs_id = ControlSpaceId::parse("cs1").unwrap();
    let cs = store.control_space(&tenant(), &cs_id).await.unwrap();
    let plan = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: cs_id.clone(),
        idempotency_key: IdempotencyKey::parse("kd").unwrap(),
    }
    .plan(
        cs.as_ref(),
        NewIds {
            command_id: CommandId::parse("cmd-kd").unwrap(),
            operation_id: OperationId::parse("op-kd").unwrap(),
        },
        t(1),
    )
    .unwrap();
    clock.set(t(1));
    store.submit(&plan).await.unwrap();
    let delete = CommandId::parse("cmd-kd").unwrap();
    let before = record(&store, &delete).await;
    let refused = store
        .act_on_command(&action(&delete, OperatorActionKind::Abandon, 0, t(5)))
        .await;
    assert!(
        matches!(refused, Err(OperatorActionError::ControlSpace(_))),
        "{refused:?}"
    );
    assert_eq!(record(&store, &delete).await, before);
    assert!(store.command_actions(&delete).await.unwrap().is_empty());
    // Mark-deleted of a command that is not an owning delete: refused, nothing written.
    let refused = store
        .act_on_command(&action(
            &provision,
            OperatorActionKind::MarkDeleted,
            1,
            t(5),
        ))
        .await;
    assert!(
        matches!(refused, Err(OperatorActionError::ControlSpace(_))),
        "{refused:?}"
    );
    let deleting = store
        .control_space(&tenant(), &cs_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(deleting.state, ControlSpaceState::Deleting);
    clock.set(t(6));
    let after = store
        .act_on_command(&action(&delete, OperatorActionKind::MarkDeleted, 2, t(6)))
        .await
        .unwrap();
    assert_eq!(after.status, CommandStatus::Abandoned);
    assert_eq!(after.completed_at, Some(t(6)));
    let deleted = store
        .control_space(&tenant(), &cs_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(deleted.state, ControlSpaceState::Deleted);
    assert_eq!(deleted.resource_version, deleting.resource_version + 1);
    let log = store.command_actions(&delete).await.unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].action.kind, OperatorActionKind::MarkDeleted);
    assert_eq!(log[0].action.reason, "reason 2");
}

/// Issue 29: a claim handed back before its remote call (`Settlement::gives_attempt_back`)
/// raises `attempt_budget_base` by one, through `settle` and through `settle_many` (beside an
/// ordinary ack), so it spends neither the budget nor a backoff step; `attempt_count` still
/// counts every claim.
pub async fn a_claim_handed_back_unsent_gives_its_attempt_back<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let hand_back = |at: i64| {
        Settlement::retry(
            t(at),
            ErrorRecord::new(ErrorCode::ShutdownBeforeCall, "nothing was sent"),
        )
        .gives_attempt_back()
    };
    let first = claim_one(&store, &clock, "w1", t(1)).await;
    assert_eq!(first.attempts_in_budget(), 1);
    store.settle(&first.lease, &hand_back(1)).await.unwrap();
    let row = record(&store, &id).await;
    assert_eq!(
        (row.status, row.attempt_count, row.attempt_budget_base),
        (CommandStatus::Pending, 1, 1)
    );

    let second = claim_one(&store, &clock, "w1", t(2)).await;
    assert_eq!((second.attempt_count, second.attempts_in_budget()), (2, 1));
    enqueue(&store, &clock, "cs2", "k2", t(2)).await;
    let other = claim_one(&store, &clock, "w2", t(2)).await;
    let results = store
        .settle_many(&[
            (second.lease.clone(), hand_back(2)),
            (other.lease.clone(), Settlement::ack(t(2))),
        ])
        .await
        .unwrap();
    assert_eq!(results, vec![Ok(()), Ok(())]);
    let row = record(&store, &id).await;
    assert_eq!((row.attempt_count, row.attempt_budget_base), (2, 2));
    assert_eq!(
        record(&store, other.id()).await.attempt_budget_base,
        0,
        "an ack spends its attempt"
    );

    let third = claim_one(&store, &clock, "w1", t(3)).await;
    assert_eq!((third.attempt_count, third.attempts_in_budget()), (3, 1));
}
