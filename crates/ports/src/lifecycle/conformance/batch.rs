//! Conformance cases of the batch operations.
//!
//! - [`CommandQueue::settle_many`](crate::lifecycle::CommandQueue::settle_many): a batch
//!   reports exactly which items were refused, writes nothing for those, and settles the rest;
//! - [`ControlSpaceReader::control_spaces`](crate::lifecycle::ControlSpaceReader::control_spaces):
//!   one answer per key, in order.

use tenantry_lifecycle::{CasUpdate, LeaseToken};

use super::*;

fn cs_id(name: &str) -> ControlSpaceId {
    ControlSpaceId::parse(name).unwrap()
}

async fn claim_n<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    who: &str,
    now: DateTime<Utc>,
    n: u32,
) -> Vec<ClaimedCommand> {
    let mut claimed = claim(store, clock, claim_at(who, now, n)).await.unwrap();
    assert_eq!(claimed.len(), n as usize);
    claimed.sort_by(|a, b| a.payload["slug"].as_str().cmp(&b.payload["slug"].as_str()));
    claimed
}

pub async fn settle_many_reports_exactly_which_leases_were_lost<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    // cs2's command is claimed by w1, then taken over by w2 after its lease expired.
    let lost = enqueue(&store, &clock, "cs2", "k2", t(0)).await;
    let stale = claim_one(&store, &clock, "w1", t(0)).await;
    for (cs, key) in [("cs1", "k1"), ("cs3", "k3"), ("cs4", "k4")] {
        enqueue(&store, &clock, cs, key, t(50)).await;
    }
    let current = claim_one(&store, &clock, "w2", t(61)).await;
    assert_eq!(current.id(), &lost);
    let mine = claim_n(&store, &clock, "w1", t(61), 3).await; // cs1, cs3, cs4
    let cs2_before = space(&store, "cs2").await;
    let items = vec![
        (mine[0].lease.clone(), Settlement::ack(t(62))),
        (
            stale.lease.clone(),
            Settlement::ack(t(62)).with_control_space(activate(&store, "cs2", t(62)).await),
        ),
        (
            mine[1].lease.clone(),
            Settlement::ack(t(62)).with_control_space(activate(&store, "cs3", t(62)).await),
        ),
        (
            mine[2].lease.clone(),
            Settlement::retry(t(90), ErrorRecord::new("REMOTE_BUSY", "busy")),
        ),
    ];
    let results = store.settle_many(&items).await.unwrap();
    assert_eq!(
        results,
        vec![
            Ok(()),
            Err(SettleError::LeaseLost {
                command_id: lost.clone()
            }),
            Ok(()),
            Ok(()),
        ]
    );
    // The lost item wrote nothing: neither the ack nor its compare-and-set.
    let row = record(&store, &lost).await;
    assert_eq!(row.status, CommandStatus::Processing);
    assert_eq!(row.lease_owner, Some(owner("w2")));
    assert_eq!(space(&store, "cs2").await, cs2_before);
    // The others settled.
    assert_eq!(
        status_of(&store, mine[0].id()).await,
        CommandStatus::Succeeded
    );
    let cs3 = space(&store, "cs3").await;
    assert_eq!(cs3.state, ControlSpaceState::Active);
    assert_eq!(
        status_of(&store, mine[1].id()).await,
        CommandStatus::Succeeded
    );
    let retried = record(&store, mine[2].id()).await;
    assert_eq!(retried.status, CommandStatus::Pending);
    assert_eq!(retried.next_attempt_at, t(90));
    assert_eq!(
        retried
            .last_error_code
            .as_ref()
            .map(tenantry_lifecycle::ErrorCode::as_str),
        Some("REMOTE_BUSY")
    );
    assert_eq!(retried.lease_owner, None);
    // The current lease holder still settles normally.
    store
        .settle(&current.lease, &Settlement::ack(t(63)))
        .await
        .unwrap();
}

pub async fn settle_many_writes_nothing_for_a_failed_compare_and_set<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    enqueue(&store, &clock, "cs2", "k2", t(0)).await;
    let claimed = claim_n(&store, &clock, "w1", t(1), 2).await;
    let cs1_before = space(&store, "cs1").await;
    let stale = stale_activate(&store, "cs1", t(2)).await;
    let items = vec![
        (
            claimed[0].lease.clone(),
            Settlement::ack(t(2)).with_control_space(stale),
        ),
        (
            claimed[1].lease.clone(),
            Settlement::ack(t(2)).with_control_space(activate(&store, "cs2", t(2)).await),
        ),
    ];
    let results = store.settle_many(&items).await.unwrap();
    assert_eq!(
        results,
        vec![
            Err(SettleError::ControlSpaceConflict {
                control_space_id: cs_id("cs1")
            }),
            Ok(()),
        ]
    );
    let row = record(&store, claimed[0].id()).await;
    assert_eq!(
        row.status,
        CommandStatus::Processing,
        "no ack without its CAS"
    );
    assert_eq!(row.lease_owner, Some(owner("w1")));
    assert_eq!(space(&store, "cs1").await, cs1_before);
    assert_eq!(
        status_of(&store, claimed[1].id()).await,
        CommandStatus::Succeeded
    );
    assert_eq!(space(&store, "cs2").await.state, ControlSpaceState::Active);
    // The refused item can still be settled under its lease.
    store
        .settle(&claimed[0].lease, &Settlement::ack(t(3)))
        .await
        .unwrap();
}

pub async fn settle_many_refused_supersede_leaves_the_other_items_settled<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let attempted = claim_one(&store, &clock, "w1", t(0)).await;
    store
        .settle(
            &attempted.lease,
            &Settlement::retry(t(5), ErrorRecord::new("X", "x")),
        )
        .await
        .unwrap();
    let delete = deletion_claim(&store, &clock, t(1)).await;
    enqueue(&store, &clock, "cs2", "k2", t(1)).await;
    let other = claim_one(&store, &clock, "w2", t(2)).await;
    let supersede = Supersede {
        command_id: provision.clone(),
        rule: SupersedeRule::Unattempted,
        completed_at: t(2),
        error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "x"),
    };
    let items = vec![
        (
            delete.lease.clone(),
            Settlement::ack(t(2)).with_supersede(supersede),
        ),
        (other.lease.clone(), Settlement::ack(t(2))),
    ];
    let results = store.settle_many(&items).await.unwrap();
    assert_eq!(
        results,
        vec![
            Err(SettleError::SupersedeRefused {
                command_id: provision.clone()
            }),
            Ok(()),
        ]
    );
    assert_eq!(status_of(&store, &provision).await, CommandStatus::Pending);
    assert_eq!(
        status_of(&store, delete.id()).await,
        CommandStatus::Processing,
        "ack rolled back with its supersede"
    );
    assert_eq!(
        status_of(&store, other.id()).await,
        CommandStatus::Succeeded
    );
}

pub async fn settle_many_lets_one_compare_and_set_of_a_control_space_win<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    assert_eq!(first.id(), &provision);
    let second = deletion_claim(&store, &clock, t(1)).await;
    // Both commands read the control space at the same resource version.
    let read = space(&store, "cs1").await;
    let cas = |revision: i64, at: DateTime<Utc>| {
        let mut next = read.clone();
        next.resource_version += 1;
        next.knowledge_space_revision = revision;
        next.updated_at = at;
        CasUpdate {
            expected_resource_version: read.resource_version,
            expected_state: read.state,
            next,
        }
    };
    let winner = cas(7, t(2));
    let items = vec![
        (
            first.lease.clone(),
            Settlement::ack(t(2)).with_control_space(winner.clone()),
        ),
        (
            second.lease.clone(),
            Settlement::ack(t(2)).with_control_space(cas(8, t(3))),
        ),
    ];
    let results = store.settle_many(&items).await.unwrap();
    assert_eq!(
        results,
        vec![
            Ok(()),
            Err(SettleError::ControlSpaceConflict {
                control_space_id: cs_id("cs1")
            }),
        ],
        "items on one control space apply in the order given"
    );
    assert_eq!(space(&store, "cs1").await, winner.next);
    assert_eq!(
        status_of(&store, first.id()).await,
        CommandStatus::Succeeded
    );
    assert_eq!(
        status_of(&store, second.id()).await,
        CommandStatus::Processing
    );
}

pub async fn settle_many_settles_a_command_at_most_once<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(0)).await;
    let items = vec![
        (claimed.lease.clone(), Settlement::ack(t(1))),
        (
            claimed.lease.clone(),
            Settlement::retry(t(9), ErrorRecord::new("X", "x")),
        ),
    ];
    let results = store.settle_many(&items).await.unwrap();
    assert_eq!(
        results,
        vec![
            Ok(()),
            Err(SettleError::LeaseLost {
                command_id: id.clone()
            })
        ]
    );
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Succeeded);
    assert_eq!(row.last_error_code, None);
}

pub async fn settle_many_keeps_a_lease_without_outcome<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let delete = deletion_claim(&store, &clock, t(1)).await;
    enqueue(&store, &clock, "cs2", "k2", t(1)).await;
    let other = claim_one(&store, &clock, "w2", t(1)).await;
    let cs = space(&store, "cs1").await;
    let register = cs
        .plan(
            &[Transition::RegisterRecoveredIdentity {
                operation_id: delete.operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks-r").unwrap(),
                revision: 4,
            }],
            t(2),
        )
        .unwrap();
    let items = vec![
        (
            delete.lease.clone(),
            Settlement {
                outcome: None,
                control_space: Some(register),
                supersede: None,
                may_have_sent: true,
                spends_attempt: true,
            },
        ),
        (other.lease.clone(), Settlement::ack(t(2))),
    ];
    assert_eq!(
        store.settle_many(&items).await.unwrap(),
        vec![Ok(()), Ok(())]
    );
    let row = record(&store, delete.id()).await;
    assert_eq!(row.status, CommandStatus::Processing);
    assert_eq!(row.lease_owner, Some(delete.lease.owner.clone()));
    assert_eq!(space(&store, "cs1").await.knowledge_space_revision, 4);
    // The kept lease still settles.
    store
        .settle(&delete.lease, &Settlement::ack(t(3)))
        .await
        .unwrap();
}

pub async fn settle_many_of_no_items_writes_nothing<S: LifecycleStore>(
    store: S,
    _clock: ManualClock,
) {
    let items: Vec<(LeaseToken, Settlement)> = Vec::new();
    assert_eq!(store.settle_many(&items).await.unwrap(), Vec::new());
}

pub async fn control_spaces_reads_many_in_the_order_asked<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    enqueue(&store, &clock, "cs2", "k2", t(0)).await;
    let key = |cs: &str| (tenant(), cs_id(cs));
    let other_tenant = (TenantId::parse("tenant-b").unwrap(), cs_id("cs1"));
    let spaces = store
        .control_spaces(&[
            key("cs2"),
            key("missing"),
            key("cs1"),
            other_tenant,
            key("cs2"),
        ])
        .await
        .unwrap();
    let cs1 = space(&store, "cs1").await;
    let cs2 = space(&store, "cs2").await;
    assert_eq!(
        spaces,
        vec![Some(cs2.clone()), None, Some(cs1), None, Some(cs2)]
    );
    assert_eq!(store.control_spaces(&[]).await.unwrap(), Vec::new());
}
