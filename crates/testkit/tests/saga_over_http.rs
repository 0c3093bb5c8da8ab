//! The lifecycle saga end to end over real HTTP: engine + `HttpKnowledgeFs` + the reference
//! KnowledgeFS, on SQLite (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, TimeZone, Utc};
use tenantry_engine::lifecycle::{CommandIntake, Dispatcher, DispatcherConfig, ManualClock};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, ProvisioningKey, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_lifecycle::{CommandStatus, ControlSpaceState};
use tenantry_ports::lifecycle::{CommandAdmin, CommandFilter, CommandQueue, ControlSpaceReader};
use tenantry_remote_http::knowledge_fs::{HttpKnowledgeFs, KnowledgeFsConfig};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;
use tenantry_testkit::fault::{Fault, FaultProfile, Route};
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_950_000_000 + seconds, 0)
        .single()
        .unwrap()
}

fn create(tenant: &TenantId, cs: &str) -> CreateControlSpace {
    CreateControlSpace::new(
        tenant.clone(),
        ControlSpaceId::parse(cs).unwrap(),
        IdempotencyKey::parse(format!("create-{cs}")).unwrap(),
        format!("Space {cs}"),
        cs,
    )
}

struct Setup {
    _db: tenantry_store_seaorm::testing::TestDatabase,
    store: SeaOrmLifecycleStore,
    intake: CommandIntake<SeaOrmLifecycleStore>,
    dispatcher: Dispatcher<SeaOrmLifecycleStore, HttpKnowledgeFs>,
    remote: ReferenceRemote,
    /// Virtual time: the store's clock (standing in for the database clock) and the dispatcher's.
    clock: ManualClock,
}

async fn setup(config: RemoteConfig) -> Setup {
    let db = fresh_database().await;
    let clock = ManualClock::new(t(0));
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock.clone()));
    let (url, remote) = ReferenceRemote::start(config).await.unwrap();
    let client = HttpKnowledgeFs::new(&KnowledgeFsConfig::new(url, remote.bearer_token())).unwrap();
    let ids = Arc::new(AtomicUsize::new(0));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()))
        .with_id_source(move || format!("id-{}", ids.fetch_add(1, Ordering::Relaxed)));
    let dispatcher = Dispatcher::new(store.clone(), client, DispatcherConfig::default())
        .with_clock(Arc::new(clock.clone()));
    Setup {
        _db: db,
        store,
        intake,
        dispatcher,
        remote,
        clock,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_ack_provision_ends_with_one_remote_space_and_an_active_control_space() {
    let s = setup(RemoteConfig::default()).await;
    let tenant = TenantId::parse("tenant-1").unwrap();
    let receipt = s
        .intake
        .create_control_space(&create(&tenant, "cs1"))
        .await
        .unwrap();
    s.remote.script(Route::Provision, [Some(Fault::LostAck)]);
    let owner = LeaseOwner::parse("w1").unwrap();
    let first = s.dispatcher.dispatch_one(&owner, true).await.unwrap();
    assert!(first.claimed && !first.completed, "lost ACK is retried");
    let record = s
        .store
        .list_commands(&CommandFilter {
            limit: 10,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        record[0]
            .last_error_code
            .as_ref()
            .map(tenantry_lifecycle::ErrorCode::as_str),
        Some("REMOTE_OUTCOME_UNKNOWN")
    );
    s.clock.set(t(10));
    let second = s.dispatcher.dispatch_one(&owner, true).await.unwrap();
    assert!(second.completed);
    let space = s
        .store
        .control_space(&tenant, &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.state, ControlSpaceState::Active);
    let truth = s.remote.truth();
    let pk = ProvisioningKey::parse(receipt.operation_id.as_str()).unwrap();
    assert_eq!(truth.spaces_by_provisioning_key(&tenant, &pk).len(), 1);
    assert_eq!(
        truth
            .created_per_provisioning_key()
            .values()
            .copied()
            .collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(
        Some(&space.knowledge_space_id.clone().unwrap()),
        truth.spaces().first().map(|s| &s.knowledge_space_id)
    );
    assert_eq!(truth.check_exactly_once(), Ok(()));
    let injected: u64 = truth.faults_injected().values().sum();
    assert!(injected > 0, "the fault profile injected faults");
    s.remote.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_remote_still_settles_every_command_exactly_once() {
    let mut config = RemoteConfig::with_profile(FaultProfile::Default);
    config.seed = 7;
    let s = setup(config).await;
    let tenant = TenantId::parse("tenant-2").unwrap();
    const SPACES: usize = 24;
    for i in 0..SPACES {
        s.intake
            .create_control_space(&create(&tenant, &format!("cs{i}")))
            .await
            .unwrap();
    }
    // Delete every third space before anything was provisioned.
    for i in (0..SPACES).step_by(3) {
        s.intake
            .request_deletion(&RequestDeletion {
                tenant_id: tenant.clone(),
                control_space_id: ControlSpaceId::parse(format!("cs{i}")).unwrap(),
                idempotency_key: IdempotencyKey::parse(format!("delete-{i}")).unwrap(),
            })
            .await
            .unwrap();
    }
    let owner = LeaseOwner::parse("w1").unwrap();
    let mut now = t(0);
    for _ in 0..200 {
        s.clock.set(now);
        let results = s.dispatcher.dispatch_batch(&owner, true, 8).await.unwrap();
        if results.is_empty() {
            let open = s
                .store
                .list_commands(&CommandFilter {
                    status: Some(CommandStatus::Pending),
                    limit: 1,
                    ..CommandFilter::default()
                })
                .await
                .unwrap();
            if open.is_empty() {
                break;
            }
            // Jump to the next due time instead of sleeping.
            now = now.max(open[0].next_attempt_at) + chrono::Duration::seconds(301);
        }
    }
    let all = s
        .store
        .list_commands(&CommandFilter {
            limit: 1000,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    assert!(
        all.iter().all(|c| c.status.is_terminal()),
        "every command settled: {:?}",
        all.iter()
            .filter(|c| !c.status.is_terminal())
            .collect::<Vec<_>>()
    );
    let truth = s.remote.truth();
    for i in 0..SPACES {
        let cs = ControlSpaceId::parse(format!("cs{i}")).unwrap();
        let space = s.store.control_space(&tenant, &cs).await.unwrap().unwrap();
        let remote_spaces = truth.spaces_by_control_space(&tenant, &cs);
        if i % 3 == 0 {
            assert_eq!(space.state, ControlSpaceState::Deleted, "cs{i}");
            assert!(remote_spaces.is_empty(), "cs{i} left a remote space");
        } else {
            assert_eq!(space.state, ControlSpaceState::Active, "cs{i}");
            assert_eq!(remote_spaces.len(), 1, "cs{i}");
        }
    }
    assert_eq!(truth.check_exactly_once(), Ok(()));
    let injected: u64 = truth.faults_injected().values().sum();
    assert!(injected > 0, "the fault profile injected faults");
    s.remote.shutdown().await;
}

/// Dispatches until no command is due, jumping the virtual clock to each next due time.
async fn settle_all(s: &Setup, mut now: DateTime<Utc>) -> DateTime<Utc> {
    let owner = LeaseOwner::parse("w1").unwrap();
    for _ in 0..100 {
        s.clock.set(now);
        if s.dispatcher
            .dispatch_one(&owner, true)
            .await
            .unwrap()
            .claimed
        {
            continue;
        }
        let open = s
            .store
            .list_commands(&CommandFilter {
                status: Some(CommandStatus::Pending),
                limit: 1,
                ..CommandFilter::default()
            })
            .await
            .unwrap();
        match open.first() {
            Some(next) => now = now.max(next.next_attempt_at),
            None => return now,
        }
    }
    panic!("commands kept being due");
}

/// `shared/cases/013-key-reuse-after-retention.md` against the reference KnowledgeFS (which
/// remembers every idempotency key for good): `cs-a` is created with key `K`, deleted, and
/// its commands pruned two days later with a one-day window; `K` then creates `cs-b` as a new
/// request, and a revocation key is used again after its command was pruned. Before: the
/// remote got the caller's key again with another body, refused it with
/// `IDEMPOTENCY_KEY_REUSED`, and `cs-b` stayed `provisioning`. Now each command sends its own
/// id, so both complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_013_a_key_reused_after_retention_completes_against_the_reference_remote() {
    use tenantry_lifecycle::intake::RequestRevocation;
    use tenantry_ports::retention::{RetentionKind, RetentionPolicy};

    let s = setup(RemoteConfig::default()).await;
    let tenant = TenantId::parse("tenant-13").unwrap();
    let with_key = |cs: &str| CreateControlSpace {
        idempotency_key: IdempotencyKey::parse("K").unwrap(),
        ..create(&tenant, cs)
    };
    let first = s
        .intake
        .create_control_space(&with_key("cs-a"))
        .await
        .unwrap();
    let now = settle_all(&s, t(0)).await;
    s.intake
        .request_deletion(&RequestDeletion {
            tenant_id: tenant.clone(),
            control_space_id: ControlSpaceId::parse("cs-a").unwrap(),
            idempotency_key: IdempotencyKey::parse("delete-a").unwrap(),
        })
        .await
        .unwrap();
    settle_all(&s, now).await;
    let day = 86_400;
    let policy = RetentionPolicy::default().with_window(
        RetentionKind::FinishedCommands,
        std::time::Duration::from_secs(day),
    );
    let retention = tenantry_store_seaorm::SeaOrmRetentionStore::new(&s._db.db);
    tenantry_engine::retention::prune_once(&retention, &policy, t(2 * day as i64))
        .await
        .unwrap();
    assert_eq!(
        s.store.command_by_id(&first.command_id).await.unwrap(),
        None,
        "cs-a's provision was pruned"
    );

    let second = s
        .intake
        .create_control_space(&with_key("cs-b"))
        .await
        .unwrap();
    assert!(!second.replayed, "a new request after the key's lifetime");
    let now = settle_all(&s, t(2 * day as i64)).await;
    let record = s
        .store
        .command_by_id(&second.command_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, CommandStatus::Succeeded, "{record:?}");
    let cs_b = ControlSpaceId::parse("cs-b").unwrap();
    let space = s
        .store
        .control_space(&tenant, &cs_b)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(space.state, ControlSpaceState::Active);

    let revoke = || RequestRevocation {
        tenant_id: tenant.clone(),
        control_space_id: cs_b.clone(),
        grant_id: tenantry_kernel::GrantId::parse("g1").unwrap(),
        reason_code: "member_removed".into(),
        idempotency_key: IdempotencyKey::parse("R").unwrap(),
    };
    let revoked = s.intake.request_revocation(&revoke()).await.unwrap();
    let now = settle_all(&s, now).await;
    tenantry_engine::retention::prune_once(&retention, &policy, now + chrono::Duration::days(2))
        .await
        .unwrap();
    assert_eq!(
        s.store.command_by_id(&revoked.command_id).await.unwrap(),
        None
    );
    let again = s.intake.request_revocation(&revoke()).await.unwrap();
    assert!(!again.replayed);
    settle_all(&s, now + chrono::Duration::days(2)).await;
    let record = s
        .store
        .command_by_id(&again.command_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, CommandStatus::Succeeded, "{record:?}");
    assert_eq!(s.remote.truth().effects().idempotency_conflicts, 0);
    s.remote.shutdown().await;
}
