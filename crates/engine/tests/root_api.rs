//! The engine as an embedding platform uses it: every type is named from the crate root
//! (`tenantry_engine::WorkerReport`, not a module path), the request types and configs are
//! built with their constructors and `with_*` setters, and the stores and remotes are passed
//! as whatever handle the platform holds (`Arc<T>`, `&T`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::any::type_name;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use tenantry_engine::{
    BindingFence, BulkReport, ClearOutcome, ClearReceipt, ClearTarget, CommandIntake,
    ConnectorError, ConnectorState, DirectoryProjector, DispatchError, DispatchReport, Dispatcher,
    DispatcherConfig, FenceAdminError, FenceConfig, FenceEntry, FenceMode, GroupCommitConfig,
    GroupCommitStore, IntakeFailure, IntakeReceipt, IntakeRequest, OperatorActions,
    OperatorRequestError, ProjectorError, Refusal, RefusalReport, ResourceSnapshot, ScopeContext,
    ScopedWriteError, ScopedWrites, Worker, WorkerConfig, WorkerReport, unique_lease_owner,
};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_lifecycle::{CommandStatus, RetryPolicy};
use tenantry_ports::directory::fake::{InMemoryProjectionStore, ScriptedProvider};
use tenantry_ports::host_storage::fake::InMemoryHostStorage;
use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, InMemoryLifecycleStore};
use tenantry_ports::{Clock, CommandFilter, CommandQueue, ManualClock};

type Store = InMemoryLifecycleStore;
type Remote = FakeKnowledgeFs;

#[test]
fn every_root_reexport_names_the_engine_type() {
    let names = [
        type_name::<BindingFence>(),
        type_name::<BulkReport>(),
        type_name::<ClearOutcome>(),
        type_name::<ClearReceipt>(),
        type_name::<ClearTarget>(),
        type_name::<CommandIntake<Store>>(),
        type_name::<ConnectorError>(),
        type_name::<ConnectorState<InMemoryHostStorage>>(),
        type_name::<DirectoryProjector<ScriptedProvider, InMemoryProjectionStore>>(),
        type_name::<DispatchError>(),
        type_name::<DispatchReport>(),
        type_name::<Dispatcher<Store, Remote>>(),
        type_name::<DispatcherConfig>(),
        type_name::<FenceAdminError>(),
        type_name::<FenceConfig>(),
        type_name::<FenceEntry>(),
        type_name::<FenceMode>(),
        type_name::<GroupCommitConfig>(),
        type_name::<GroupCommitStore<Store>>(),
        type_name::<OperatorActions<Store>>(),
        type_name::<OperatorRequestError>(),
        type_name::<ProjectorError>(),
        type_name::<Refusal>(),
        type_name::<RefusalReport>(),
        type_name::<ResourceSnapshot>(),
        type_name::<ScopeContext<InMemoryHostStorage>>(),
        type_name::<ScopedWriteError<std::io::Error>>(),
        type_name::<ScopedWrites<InMemoryHostStorage>>(),
        type_name::<Worker<Store, Remote>>(),
        type_name::<WorkerConfig>(),
        type_name::<WorkerReport>(),
    ];
    for name in names {
        assert!(name.starts_with("tenantry_engine::"), "{name}");
    }
    // Intake's request, receipt and error are shared with the storage adapters' enqueue, so
    // they live below the engine; the engine's root still names them.
    let shared = [
        type_name::<IntakeRequest>(),
        type_name::<IntakeReceipt>(),
        type_name::<IntakeFailure>(),
    ];
    for name in shared {
        assert!(
            name.starts_with("tenantry_lifecycle::") || name.starts_with("tenantry_ports::"),
            "{name}"
        );
    }
}

#[test]
fn config_setters_change_only_their_field() {
    let default = DispatcherConfig::default();
    let policy = RetryPolicy {
        max_attempts: 7,
        ..RetryPolicy::default()
    };
    let dispatcher = DispatcherConfig::default()
        .with_lease_duration(Duration::from_secs(200))
        .with_renew_leases(false)
        .with_absence_grace(Duration::from_secs(5))
        .with_retry_policy(policy);
    assert_eq!(
        dispatcher,
        DispatcherConfig {
            lease_duration: Duration::from_secs(200),
            renew_leases: false,
            absence_grace: Duration::from_secs(5),
            retry_policy: policy,
            call_deadline: Duration::from_secs(150),
        }
    );
    assert_ne!(dispatcher, default);

    let enabled = Arc::new(AtomicBool::new(false));
    let worker = WorkerConfig::default()
        .with_idle_poll(Duration::from_millis(20))
        .with_claim_batch(3)
        .with_product_enabled(Arc::clone(&enabled));
    assert_eq!(worker.idle_poll, Duration::from_millis(20));
    assert_eq!(worker.claim_batch, 3);
    assert!(Arc::ptr_eq(&worker.product_enabled, &enabled));

    let group = GroupCommitConfig::default()
        .with_max_batch(8)
        .with_max_wait(Duration::from_millis(2))
        .with_max_in_flight(1)
        .with_coalesce_reads(false);
    assert_eq!(
        group,
        GroupCommitConfig {
            max_batch: 8,
            max_wait: Duration::from_millis(2),
            max_in_flight: 1,
            coalesce_reads: false,
            wait_only_when_busy: true,
        }
    );

    let fence = FenceConfig::with_deadline(Duration::from_secs(10))
        .with_claim_margin(Duration::from_secs(2))
        .with_claim_poll(Duration::from_millis(5))
        .with_owner("me");
    assert_eq!(fence.claim_wait, Duration::from_secs(12));
    assert_eq!(fence.claim_poll, Duration::from_millis(5));
    assert_eq!(fence.owner, "me");
    let fence = fence.with_claim_wait(Duration::from_secs(1));
    assert_eq!(fence.claim_wait, Duration::from_secs(1));
}

#[tokio::test]
async fn a_worker_over_shared_handles_reports_through_the_root_type() {
    let clock = ManualClock::new(Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap());
    let clock: Arc<dyn Clock> = Arc::new(clock);
    // The platform keeps its own Arc of the store and the remote and lends them out.
    let store = Arc::new(InMemoryLifecycleStore::with_clock(Arc::clone(&clock)));
    let remote = Arc::new(FakeKnowledgeFs::new());
    let intake = CommandIntake::new(Arc::clone(&store), Arc::clone(&clock));
    let receipt = intake
        .create_control_space(&CreateControlSpace::new(
            TenantId::parse("t1").unwrap(),
            ControlSpaceId::parse("cs1").unwrap(),
            IdempotencyKey::parse("k1").unwrap(),
            "Name",
            "slug",
        ))
        .await
        .unwrap();
    assert!(!receipt.replayed);

    let dispatcher = Arc::new(Dispatcher::new(
        Arc::clone(&store),
        Arc::clone(&remote),
        DispatcherConfig::default(),
    ));
    let worker = Worker::new(
        dispatcher,
        unique_lease_owner("root-api"),
        WorkerConfig::default().with_claim_batch(1),
    );
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.run(shutdown));
    while store
        .list_commands(&CommandFilter {
            status: Some(CommandStatus::Succeeded),
            limit: 10,
            ..CommandFilter::default()
        })
        .await
        .unwrap()
        .is_empty()
    {
        tokio::task::yield_now().await;
    }
    stop.send(true).unwrap();
    let report: WorkerReport = running.await.unwrap();
    assert_eq!(
        report,
        WorkerReport {
            claimed: 1,
            completed: 1,
            errors: 0,
        }
    );
    assert_eq!(remote.counters().spaces_created, 1);
    // A borrow works as a handle too: a dispatcher over `&store` finds nothing left to do.
    let borrowed = Dispatcher::new(&*store, &*remote, DispatcherConfig::default());
    let idle = borrowed
        .dispatch_one(&unique_lease_owner("root-api"), true)
        .await
        .unwrap();
    assert!(!idle.claimed);
}
