//! Leases that hold on a real database, SQLite (default) or PostgreSQL
//! (`TENANTRY_TEST_PG_URL`), on the database's own clock:
//! - a replica whose process clock is 10 minutes ahead can neither claim nor supersede another
//!   replica's live lease;
//! - two identical creates at the same moment both get the original receipt (case 002);
//! - concurrent settle batches over crossing control spaces never fail a caller;
//! - futures dropped at random points of a unit of work never leave a pooled connection inside
//!   a transaction (case 006).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tenantry_engine::lifecycle::{
    Clock, CommandIntake, Dispatcher, DispatcherConfig, IntakeFailure, ManualClock,
};
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, LeaseOwner, OperationId, TenantId,
};
use tenantry_lifecycle::intake::{CreateControlSpace, NewIds, RequestDeletion};
use tenantry_lifecycle::{ErrorRecord, Settlement, Supersede, SupersedeRule, Transition};
use tenantry_ports::lifecycle::fake::FakeKnowledgeFs;
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandQueue, ControlSpaceReader, IntakeStore, SettleError,
};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::{
    fresh_database, fresh_database_with_pool, sessions_idle_in_transaction,
};

fn tenant() -> TenantId {
    TenantId::parse("t-1").unwrap()
}

fn create(cs: &str, key: &str) -> CreateControlSpace {
    CreateControlSpace::new(
        tenant(),
        ControlSpaceId::parse(cs).unwrap(),
        IdempotencyKey::parse(key).unwrap(),
        "X",
        "x",
    )
}

fn claim(who: &str, lease: Duration) -> ClaimRequest {
    ClaimRequest {
        owner: LeaseOwner::parse(who).unwrap(),
        lease_duration: lease,
        include_provision: true,
        limit: 10,
        call_deadline: std::time::Duration::ZERO,
    }
}

/// Two replicas on one database; replica B's process clock runs 10 minutes ahead. Claims and
/// supersede rules use the database clock, so B cannot take A's live lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_with_a_clock_10_minutes_ahead_cannot_take_a_live_lease() {
    let db = fresh_database().await;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let skewed = ManualClock::new(Utc::now() + chrono::Duration::minutes(10));
    let intake_b = CommandIntake::new(store.clone(), Arc::new(skewed.clone()));
    let receipt = intake_b
        .create_control_space(&create("cs-1", "k-1"))
        .await
        .unwrap();
    // Replica A (right clock) claims with a 60 s lease.
    let a = store
        .claim(&claim("replica-a", Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        a.len(),
        1,
        "a command created by the skewed replica is due at once"
    );
    // Replica B (10 minutes ahead) finds nothing to claim.
    let remote = FakeKnowledgeFs::new();
    let b = Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default())
        .with_clock(Arc::new(skewed.clone()));
    let outcome = b
        .dispatch_one(&LeaseOwner::parse("replica-b").unwrap(), true)
        .await
        .unwrap();
    assert!(!outcome.claimed, "B must not steal A's live lease");
    assert!(remote.counters().calls.is_empty());
    // Nor can B supersede it after a "remote absence", whatever grace it believes passed.
    let cs = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs-1").unwrap())
        .await
        .unwrap();
    let deletion = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: ControlSpaceId::parse("cs-1").unwrap(),
        idempotency_key: IdempotencyKey::parse("d-1").unwrap(),
    }
    .plan(
        cs.as_ref(),
        NewIds {
            command_id: CommandId::parse("cmd-d-1").unwrap(),
            operation_id: OperationId::parse("op-d-1").unwrap(),
        },
        Clock::now(&skewed),
    )
    .unwrap();
    store.submit(&deletion).await.unwrap();
    let mut request = claim("replica-b", Duration::from_secs(60));
    request.include_provision = false;
    let delete = store.claim(&request).await.unwrap().remove(0);
    let supersede = Supersede {
        command_id: receipt.command_id.clone(),
        rule: SupersedeRule::AfterRemoteAbsence {
            grace: Duration::ZERO,
            observed_at: Clock::now(&skewed),
        },
        completed_at: Clock::now(&skewed),
        error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "absence"),
    };
    assert_eq!(
        store
            .settle(
                &delete.lease,
                &Settlement::ack(Clock::now(&skewed)).with_supersede(supersede)
            )
            .await,
        Err(SettleError::SupersedeRefused {
            command_id: receipt.command_id.clone()
        })
    );
    // A still holds its lease and settles.
    store
        .settle(&a[0].lease, &Settlement::ack(Utc::now()))
        .await
        .unwrap();
}

/// `../shared/cases/002-concurrent-same-key-create.md`: two identical creates released
/// together both get the same command; one of them is a replay, never a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn case_002_concurrent_same_key_creates_both_get_the_original_receipt() {
    let db = fresh_database().await;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let intake = Arc::new(CommandIntake::new(
        store.clone(),
        Arc::new(tenantry_engine::lifecycle::SystemClock),
    ));
    for round in 0..20 {
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let intake = intake.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    intake
                        .create_control_space(&create(
                            &format!("cs-{round}"),
                            &format!("same-{round}"),
                        ))
                        .await
                })
            })
            .collect();
        let mut receipts = Vec::new();
        for run in runs {
            let result: Result<_, IntakeFailure> = run.await.unwrap();
            receipts.push(result.unwrap_or_else(|e| panic!("round {round}: {e:?}")));
        }
        assert_eq!(
            receipts[0].command_id, receipts[1].command_id,
            "round {round}"
        );
        assert_eq!(
            receipts.iter().filter(|r| r.replayed).count(),
            1,
            "round {round}: exactly one replay"
        );
    }
}

/// Two batches settle at once and cross: batch A settles the provisions of control spaces
/// 0..n (each with a compare-and-set of its space), batch B the deletions of the same spaces in
/// the opposite order (each with a compare-and-set of the same space). Without one global lock
/// order they would lock the spaces in opposite orders and deadlock;
/// the store orders its row locks (and reruns a lost deadlock), so over many rounds no failure
/// reaches a caller: every item is either settled or refused as a compare-and-set conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crossing_settle_batches_never_fail_a_caller() {
    let db = fresh_database().await;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let intake = CommandIntake::new(
        store.clone(),
        Arc::new(tenantry_engine::lifecycle::SystemClock),
    );
    const SPACES: usize = 6;
    let mut settled = 0;
    for round in 0..15 {
        for i in 0..SPACES {
            intake
                .create_control_space(&create(
                    &format!("r{round}-cs{i}"),
                    &format!("r{round}-k{i}"),
                ))
                .await
                .unwrap();
        }
        // Claim the provisions, then request the deletions and claim those too.
        let provisions = store
            .claim(&ClaimRequest {
                limit: SPACES as u32,
                ..claim("wa", Duration::from_secs(60))
            })
            .await
            .unwrap();
        assert_eq!(provisions.len(), SPACES);
        for i in 0..SPACES {
            intake
                .request_deletion(&RequestDeletion {
                    tenant_id: tenant(),
                    control_space_id: ControlSpaceId::parse(format!("r{round}-cs{i}")).unwrap(),
                    idempotency_key: IdempotencyKey::parse(format!("r{round}-d{i}")).unwrap(),
                })
                .await
                .unwrap();
        }
        let mut deletions = store
            .claim(&ClaimRequest {
                limit: SPACES as u32,
                include_provision: false,
                ..claim("wb", Duration::from_secs(60))
            })
            .await
            .unwrap();
        assert_eq!(deletions.len(), SPACES);
        deletions.reverse();
        let mut batch_a = Vec::new();
        for command in &provisions {
            let cs = store
                .control_space(&command.tenant_id, &command.control_space_id)
                .await
                .unwrap()
                .unwrap();
            // Planned against the space as it was before the deletion: a stale CAS on purpose.
            let mut before = cs.clone();
            before.state = tenantry_lifecycle::ControlSpaceState::Provisioning;
            before.resource_version -= 1;
            before.lifecycle_operation_id = command.operation_id.clone();
            let cas = before
                .plan(
                    &[Transition::Activate {
                        operation_id: command.operation_id.clone(),
                        knowledge_space_id: KnowledgeSpaceId::parse(format!("ks-{}", command.id()))
                            .unwrap(),
                        revision: 1,
                    }],
                    Utc::now(),
                )
                .unwrap();
            batch_a.push((
                command.lease.clone(),
                Settlement::ack(Utc::now()).with_control_space(cas),
            ));
        }
        let mut batch_b = Vec::new();
        for command in &deletions {
            let cs = store
                .control_space(&command.tenant_id, &command.control_space_id)
                .await
                .unwrap()
                .unwrap();
            let cas = cs
                .plan(
                    &[Transition::CompleteDeletion {
                        operation_id: command.operation_id.clone(),
                        revision: 0,
                    }],
                    Utc::now(),
                )
                .unwrap();
            batch_b.push((
                command.lease.clone(),
                Settlement::ack(Utc::now()).with_control_space(cas),
            ));
        }
        let (a, b) = tokio::join!(store.settle_many(&batch_a), store.settle_many(&batch_b));
        let a = a.unwrap_or_else(|e| panic!("round {round}: batch A failed: {e}"));
        let b = b.unwrap_or_else(|e| panic!("round {round}: batch B failed: {e}"));
        for result in a.iter().chain(&b) {
            match result {
                Ok(()) => settled += 1,
                Err(
                    SettleError::ControlSpaceConflict { .. } | SettleError::SupersedeRefused { .. },
                ) => {}
                Err(other) => panic!("round {round}: {other}"),
            }
        }
        // Release whatever is still held so the next round starts clean.
        for (lease, _) in batch_a.iter().chain(&batch_b) {
            let _ = store.settle(lease, &Settlement::ack(Utc::now())).await;
        }
    }
    assert!(settled >= 15 * SPACES, "the deletions settled: {settled}");
}

/// `../shared/cases/006-cancelled-request-transaction.md`: on a pool of one connection, 1,000
/// intakes and settles are dropped at random points (timeouts of 0–2 ms); afterwards a claim and
/// an intake succeed, and (PostgreSQL) no session of the test database is idle in a transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_006_cancelled_units_never_leave_a_transaction_open() {
    let db = fresh_database_with_pool(1).await;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let intake = CommandIntake::new(
        store.clone(),
        Arc::new(tenantry_engine::lifecycle::SystemClock),
    );
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for i in 0..1000 {
        let budget = Duration::from_micros(next() % 2000);
        if i % 2 == 0 {
            let request = create(&format!("c-{i}"), &format!("k-{i}"));
            let _ = tokio::time::timeout(budget, intake.create_control_space(&request)).await;
        } else {
            let request = claim("w", Duration::from_secs(60));
            let _ = tokio::time::timeout(budget, async {
                if let Ok(claimed) = store.claim(&request).await {
                    for command in claimed {
                        let _ = store
                            .settle(&command.lease, &Settlement::ack(Utc::now()))
                            .await;
                    }
                }
            })
            .await;
        }
    }
    // Every detached unit finishes; the one connection is usable for both kinds of work.
    // Real time: the detached units wait on database I/O, not on a lease or the clock.
    tokio::time::sleep(Duration::from_millis(200)).await;
    intake
        .create_control_space(&create("after", "after"))
        .await
        .expect("an intake after the cancellations");
    store
        .claim(&claim("w-after", Duration::from_secs(60)))
        .await
        .expect("a claim after the cancellations");
    let idle = sessions_idle_in_transaction(&db.db).await;
    assert_eq!(idle, 0, "{idle} sessions idle in transaction");
}
