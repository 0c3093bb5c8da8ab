//! Conformance cases of tenant-fair claims (`tenantry_lifecycle::turn`; docs/protocol.md,
//! "Fair claims across tenants"): each command's turn as intake gives it, one tenant's backlog
//! not holding back another tenant's command, and no turn debt once a backlog is drained.

use super::*;

const MS: chrono::Duration = chrono::Duration::milliseconds(1);

/// A create plan of tenant `tenant` for control space `cs` with key `key` (command id
/// `cmd-<key>`), enqueued at `at`.
fn tenant_plan(tenant: &str, cs: &str, key: &str, at: DateTime<Utc>) -> IntakePlan {
    let mut plan = create_plan(cs, key, at);
    let tenant = TenantId::parse(tenant).unwrap();
    plan.command.tenant_id = tenant.clone();
    if let ControlSpaceWrite::Insert(space) = &mut plan.control_space {
        space.tenant_id = tenant;
    }
    plan
}

/// Submits `plans` in one `submit_many` at `at` and returns the created records.
async fn submit_all<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    plans: &[IntakePlan],
    at: DateTime<Utc>,
) -> Vec<tenantry_lifecycle::CommandRecord> {
    clock.set(at);
    store
        .submit_many(plans)
        .await
        .into_iter()
        .map(|answer| match answer.unwrap() {
            Submitted::Created(record) => record,
            Submitted::Existing(record) => panic!("unexpected replay of {}", record.id),
        })
        .collect()
}

pub async fn a_tenants_backlog_takes_consecutive_turns_and_does_not_hold_back_another_tenant<
    S: LifecycleStore,
>(
    store: S,
    clock: ManualClock,
) {
    // Tenant a enqueues a backlog of 5 in one batch; tenant b one command a moment later.
    let backlog: Vec<IntakePlan> = (0..5)
        .map(|i| tenant_plan("tenant-a", &format!("a{i}"), &format!("ka{i}"), t(0)))
        .collect();
    let created = submit_all(&store, &clock, &backlog, t(0)).await;
    let turns: Vec<_> = created.iter().map(|r| r.turn_at).collect();
    let expected: Vec<_> = (0..5).map(|i| t(0) + MS * i).collect();
    assert_eq!(
        turns, expected,
        "the backlog's turns as intake answered them"
    );
    let later = t(0) + MS * 2;
    let b = submit_all(
        &store,
        &clock,
        &[tenant_plan("tenant-b", "b0", "kb0", later)],
        later,
    )
    .await;
    assert_eq!(
        b[0].turn_at,
        t(0),
        "a tenant without live commands: the head of the queue (before its enqueue time)"
    );
    // One more of tenant a's queues behind its backlog, however early it is enqueued.
    let a5 = submit_all(
        &store,
        &clock,
        &[tenant_plan("tenant-a", "a5", "ka5", later)],
        later,
    )
    .await;
    assert_eq!(
        a5[0].turn_at,
        t(0) + MS * 5,
        "after the tenant's latest live turn"
    );
    for record in created.iter().chain(&b).chain(&a5) {
        assert_eq!(
            super::record(&store, &record.id).await.turn_at,
            record.turn_at,
            "stored as answered: {}",
            record.id
        );
    }
    // Claims take turns in order: tenant b's command (the head's turn, due later than the
    // head) comes second, ahead of the rest of tenant a's backlog, which follows in its
    // enqueue order.
    let mut order = Vec::new();
    for _ in 0..7 {
        let claimed = claim(&store, &clock, claim_at("w1", t(1), 1))
            .await
            .unwrap();
        order.extend(claimed.iter().map(|c| c.id().as_str().to_owned()));
    }
    assert_eq!(
        order,
        [
            "cmd-ka0", "cmd-kb0", "cmd-ka1", "cmd-ka2", "cmd-ka3", "cmd-ka4", "cmd-ka5"
        ],
        "turn order (ties: due time, enqueue time, id)"
    );
}

pub async fn a_drained_tenant_owes_no_turns<S: LifecycleStore>(store: S, clock: ManualClock) {
    let backlog: Vec<IntakePlan> = (0..3)
        .map(|i| tenant_plan("tenant-a", &format!("a{i}"), &format!("ka{i}"), t(0)))
        .collect();
    submit_all(&store, &clock, &backlog, t(0)).await;
    let claimed = claim(&store, &clock, claim_at("w1", t(0), 10))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    for command in &claimed {
        store
            .settle(&command.lease, &Settlement::ack(t(0)))
            .await
            .unwrap();
    }
    // Turns 0, 1 and 2 ms were taken, but none of them is live any more.
    let next = submit_all(
        &store,
        &clock,
        &[tenant_plan("tenant-a", "a3", "ka3", t(0))],
        t(0),
    )
    .await;
    assert_eq!(next[0].turn_at, t(0), "no debt outlives the backlog");
}

pub async fn a_retry_keeps_its_turn<S: LifecycleStore>(store: S, clock: ManualClock) {
    let first = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(0)).await;
    store
        .settle(
            &claimed.lease,
            &Settlement::retry(
                t(10),
                ErrorRecord {
                    code: tenantry_lifecycle::ErrorCode::RemoteUnavailable,
                    message: "busy".into(),
                },
            ),
        )
        .await
        .unwrap();
    // Another tenant's command enqueued meanwhile (at the head of the queue: the live retry's
    // turn), and one of the same tenant (just after the retry's turn).
    let other = submit_all(
        &store,
        &clock,
        &[tenant_plan("tenant-b", "b0", "kb0", t(5))],
        t(5),
    )
    .await;
    let same = enqueue(&store, &clock, "cs2", "k2", t(6)).await;
    assert_eq!(super::record(&store, &first).await.turn_at, t(0));
    assert_eq!(other[0].turn_at, t(0));
    assert_eq!(super::record(&store, &same).await.turn_at, t(0) + MS);
    // Not due before t(10): the others go first; once due, the retry's early turn leads.
    let early = claim(&store, &clock, claim_at("w1", t(6), 1))
        .await
        .unwrap();
    assert_eq!(early[0].id(), &other[0].id);
    let due = claim(&store, &clock, claim_at("w1", t(10), 1))
        .await
        .unwrap();
    assert_eq!(
        due[0].id(),
        &first,
        "the retry's turn (0) before the later command's (1 ms)"
    );
}
