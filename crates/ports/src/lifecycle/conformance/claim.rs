//! Conformance cases of claiming: turn order, the limit, leases and their epochs, provision only
//! while the product is enabled, the control space a claim carries, `next_due_in`, and
//! concurrent claimers never sharing a command.

use super::*;

pub async fn claim_takes_a_due_command_with_a_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    assert_eq!(claimed.id(), &id);
    assert_eq!(claimed.lease.owner, owner("w1"));
    assert_eq!(claimed.lease.epoch, LeaseEpoch(1));
    assert_eq!(claimed.lease.expires_at, t(61));
    assert_eq!(claimed.attempt_count, 1);
    assert_eq!(claimed.operation, Operation::Provision);
    assert_eq!(claimed.payload["slug"], "cs1");
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Processing);
    assert_eq!(row.lease_owner, Some(owner("w1")));
    assert_eq!(row.lease_expires_at, Some(t(61)));
    assert!(
        claim(&store, &clock, claim_at("w2", t(2), 5))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn claim_skips_commands_not_yet_due<S: LifecycleStore>(store: S, clock: ManualClock) {
    enqueue(&store, &clock, "cs1", "k1", t(10)).await;
    assert!(
        claim(&store, &clock, claim_at("w1", t(9), 5))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        claim(&store, &clock, claim_at("w1", t(10), 5))
            .await
            .unwrap()
            .len(),
        1
    );
}

pub async fn claim_reclaims_an_expired_lease_with_a_higher_epoch<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    let second = claim_one(&store, &clock, "w2", t(60)).await;
    assert_eq!(second.id(), &id);
    assert_eq!(second.lease.epoch, LeaseEpoch(2));
    assert!(second.lease.epoch > first.lease.epoch);
    assert_eq!(second.attempt_count, 2);
    assert_eq!(second.lease.owner, owner("w2"));
}

pub async fn claim_leaves_a_live_lease_alone<S: LifecycleStore>(store: S, clock: ManualClock) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    claim_one(&store, &clock, "w1", t(0)).await;
    assert!(
        claim(&store, &clock, claim_at("w2", t(59), 5))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn claim_skips_provision_when_product_disabled<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let mut request = claim_at("w1", t(1), 5);
    request.0.include_provision = false;
    assert!(
        claim(&store, &clock, request.clone())
            .await
            .unwrap()
            .is_empty()
    );
    // A delete command is still claimed while the product is disabled.
    let cs = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap();
    let plan = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: ControlSpaceId::parse("cs1").unwrap(),
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
    store.submit(&plan).await.unwrap();
    let claimed = claim(&store, &clock, request).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].operation, Operation::Delete);
}

/// `next_due_in`: nothing waiting is `None`; a due command is zero; otherwise the time to the
/// earliest `next_attempt_at` of a pending command or lease expiry of a processing one, by the
/// store's clock; provision commands count only when they may be claimed.
pub async fn next_due_in_names_the_earliest_waiting_command<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    clock.set(t(0));
    assert_eq!(store.next_due_in(true).await.unwrap(), None);
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    assert_eq!(store.next_due_in(true).await.unwrap(), Some(Duration::ZERO));
    // Claimed with a 60 s lease: claimable again when the lease expires.
    claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(10));
    assert_eq!(
        store.next_due_in(true).await.unwrap(),
        Some(Duration::from_secs(50))
    );
    // A command due at t(20) comes first.
    enqueue(&store, &clock, "cs2", "k2", t(20)).await;
    clock.set(t(10));
    assert_eq!(
        store.next_due_in(true).await.unwrap(),
        Some(Duration::from_secs(10))
    );
    // Both are provisions: none counts while provisions may not be claimed.
    assert_eq!(store.next_due_in(false).await.unwrap(), None);
    // Past its time it is due: zero.
    clock.set(t(25));
    assert_eq!(store.next_due_in(true).await.unwrap(), Some(Duration::ZERO));
}

/// A claim hands each command over with its control space as read after the claim
/// ([`ClaimedCommand::control_space`]): the row a read right after returns.
pub async fn claim_carries_each_commands_control_space<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    enqueue(&store, &clock, "cs2", "k2", t(1)).await;
    let claimed = claim(&store, &clock, claim_at("w1", t(5), 5))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    for command in &claimed {
        let read = store
            .control_space(&command.tenant_id, &command.control_space_id)
            .await
            .unwrap();
        assert!(
            read.is_some(),
            "intake created {}",
            command.control_space_id
        );
        assert_eq!(
            command.control_space,
            ClaimedControlSpace::Read(read),
            "{}",
            command.control_space_id
        );
    }
}

pub async fn claim_respects_the_limit_in_turn_order<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    // One tenant, one command a second: each command's turn is its enqueue time.
    for i in 0..5 {
        enqueue(&store, &clock, &format!("cs{i}"), &format!("k{i}"), t(i)).await;
    }
    let claimed = claim(&store, &clock, claim_at("w1", t(20), 3))
        .await
        .unwrap();
    let mut slugs: Vec<String> = claimed
        .iter()
        .map(|c| c.payload["slug"].as_str().unwrap().to_owned())
        .collect();
    slugs.sort();
    assert_eq!(slugs, ["cs0", "cs1", "cs2"], "the three earliest turns");
    assert_eq!(
        claim(&store, &clock, claim_at("w1", t(20), 10))
            .await
            .unwrap()
            .len(),
        2
    );
}

/// A claimed batch is handed out in turn order, also when a command's row was rewritten since
/// it was enqueued (here: its lease was taken and expired), which on PostgreSQL moves it to
/// the end of the table, where an `UPDATE … RETURNING` would answer it last.
pub async fn claim_hands_out_its_batch_in_turn_order<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    for i in 0..3 {
        enqueue(&store, &clock, &format!("cs{i}"), &format!("k{i}"), t(i)).await;
    }
    let first = claim_one(&store, &clock, "w1", t(3)).await;
    assert_eq!(first.payload["slug"], "cs0");
    // cs0's lease (60 s) expired: it is due again, with the earliest turn.
    let claimed = claim(&store, &clock, claim_at("w2", t(70), 3))
        .await
        .unwrap();
    let slugs: Vec<&str> = claimed
        .iter()
        .map(|c| c.payload["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["cs0", "cs1", "cs2"], "the batch in turn order");
}

pub async fn concurrent_claimers_never_share_a_command<S: LifecycleStore + Clone + 'static>(
    store: S,
    clock: ManualClock,
) {
    const COMMANDS: usize = 40;
    for i in 0..COMMANDS {
        enqueue(&store, &clock, &format!("cs{i}"), &format!("k{i}"), t(0)).await;
    }
    let mut tasks = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        let clock = clock.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = claim(&store, &clock, claim_at(&format!("w{w}"), t(1), 3))
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    break;
                }
                mine.extend(claimed.into_iter().map(|c| c.id().clone()));
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), total, "a command was claimed twice");
    assert_eq!(total, COMMANDS, "every command claimed once");
}
