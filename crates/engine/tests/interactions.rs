//! Interaction tests on the mockall mocks of `tenantry-ports` (feature `mocks`): what a use case
//! calls, and what it never calls. Behaviour (what ends up stored, what the remote holds) is
//! tested on the hand-written fakes elsewhere; here the calls themselves are the assertion: a
//! mock panics on a call it does not expect (`never()`), and on drop when `times(n)` is unmet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tenantry_directory::testing::{archived, projector_config, snapshot, workspace, ws_id};
use tenantry_directory::{DirectoryError, ProjectionTables};
use tenantry_engine::directory::{DirectoryProjector, ProjectorError};
use tenantry_engine::lifecycle::{CommandIntake, Dispatcher, DispatcherConfig, SystemClock};
use tenantry_engine::scoped_writes::{FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::{Binding, ScopeIdentity};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_lifecycle::{CommandStatus, ControlSpaceState, RemoteSpace};
use tenantry_ports::directory::fake::ScriptedProvider;
use tenantry_ports::host_storage::HostStorageError;
use tenantry_ports::lifecycle::ControlSpaceReader;
use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
use tenantry_ports::mocks::{
    MockDirectoryProjectionStore, MockEntitlementReconciler, MockHostStorage, MockKnowledgeFs,
    MockRuntimeExecutionPublisher,
};

// ---- lifecycle ----

fn tenant() -> TenantId {
    TenantId::parse("tenant-1").unwrap()
}

fn cs1() -> ControlSpaceId {
    ControlSpaceId::parse("cs1").unwrap()
}

/// A KnowledgeFS mock that fails the test on any call.
fn remote_never_called() -> MockKnowledgeFs {
    let mut remote = MockKnowledgeFs::new();
    remote.expect_provision().never();
    remote.expect_find_by_provisioning_key().never();
    remote.expect_request_deletion().never();
    remote.expect_revoke_grant().never();
    remote
}

fn intake(store: &InMemoryLifecycleStore) -> CommandIntake<InMemoryLifecycleStore> {
    CommandIntake::new(store.clone(), Arc::new(SystemClock))
}

/// A dispatcher over `store` and `remote` with the default configuration.
fn dispatcher(
    store: &InMemoryLifecycleStore,
    remote: MockKnowledgeFs,
) -> Dispatcher<InMemoryLifecycleStore, MockKnowledgeFs> {
    Dispatcher::new(store.clone(), remote, DispatcherConfig::default())
}

async fn cs1_state(store: &InMemoryLifecycleStore) -> ControlSpaceState {
    let space = store.control_space(&tenant(), &cs1()).await.unwrap();
    space.unwrap().state
}

async fn create_cs1(store: &InMemoryLifecycleStore) {
    intake(store)
        .create_control_space(
            &CreateControlSpace::new(
                tenant(),
                cs1(),
                IdempotencyKey::parse("create-cs1").unwrap(),
                "Space cs1",
                "cs1",
            )
            .with_icon("book"),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn dispatcher_never_calls_the_remote_while_the_product_is_disabled() {
    let store = InMemoryLifecycleStore::new();
    create_cs1(&store).await;
    let owner = LeaseOwner::parse("w1").unwrap();

    let disabled = dispatcher(&store, remote_never_called());
    assert!(!disabled.dispatch_one(&owner, false).await.unwrap().claimed);
    assert!(
        disabled
            .dispatch_batch(&owner, false, 8)
            .await
            .unwrap()
            .is_empty()
    );

    // Enabled, the same pending provision reaches the remote exactly once.
    let mut remote = MockKnowledgeFs::new();
    remote
        .expect_find_by_provisioning_key()
        .returning(|_, _, _| Ok(None));
    remote
        .expect_provision()
        .withf(|request| request.control_space_id == cs1())
        .times(1)
        .returning(|request| {
            Ok(RemoteSpace {
                namespace_id: request.namespace_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks-1").unwrap(),
                revision: 1,
            })
        });
    let enabled = dispatcher(&store, remote);
    assert!(enabled.dispatch_one(&owner, true).await.unwrap().completed);
    assert_eq!(cs1_state(&store).await, ControlSpaceState::Active);
}

#[tokio::test]
async fn deleting_a_never_provisioned_space_while_disabled_calls_no_remote() {
    let store = InMemoryLifecycleStore::new();
    create_cs1(&store).await;
    intake(&store)
        .request_deletion(&RequestDeletion {
            tenant_id: tenant(),
            control_space_id: cs1(),
            idempotency_key: IdempotencyKey::parse("delete-cs1").unwrap(),
        })
        .await
        .unwrap();
    let outcome = dispatcher(&store, remote_never_called())
        .dispatch_one(&LeaseOwner::parse("w1").unwrap(), false)
        .await
        .unwrap();
    assert!(outcome.completed);
    assert_eq!(cs1_state(&store).await, ControlSpaceState::Deleted);
    let record = store.command(outcome.command_id.as_ref().unwrap()).unwrap();
    assert_eq!(record.status, CommandStatus::Succeeded);
}

// ---- scoped writes ----

#[tokio::test]
async fn unreadable_fence_state_refuses_the_run_without_writing_or_dispatching() {
    let mut storage = MockHostStorage::new();
    storage
        .expect_get()
        .returning(|_, _| Err(HostStorageError::unavailable("get", "database down")));
    storage.expect_keys().returning(|_| Ok(Vec::new()));
    storage.expect_set().never();
    storage.expect_compare_and_set().never();
    let writes = ScopedWrites::new(Arc::new(storage));
    let ran = AtomicBool::new(false);
    let result: Result<(), ScopedWriteError<()>> = writes
        .run(
            &Binding::parse("inst-1").unwrap(),
            &ScopeIdentity::object("kb-1"),
            FenceMode::Enforce,
            |_ctx| async {
                ran.store(true, Ordering::SeqCst);
                Ok(())
            },
        )
        .await;
    assert!(
        matches!(result, Err(ScopedWriteError::FenceStateUnavailable { .. })),
        "{result:?}"
    );
    assert!(!ran.load(Ordering::SeqCst), "the operation must not run");
    writes.settled().await;
}

// ---- directory projector ----

#[tokio::test]
async fn projector_runs_the_hooks_once_after_a_committed_snapshot_and_never_after_a_refused_one() {
    let snap = snapshot(
        10,
        vec![workspace("ws-1", 1, &[("a", 1)]), archived("ws-2")],
    );

    // Committed: each hook is called once, with exactly the active workspaces.
    let mut store = MockDirectoryProjectionStore::new();
    store
        .expect_apply_snapshot()
        .times(1)
        .returning(|ctx, snapshot, events| {
            Ok(ProjectionTables::default().apply_snapshot(ctx, snapshot, events)?)
        });
    let mut entitlements = MockEntitlementReconciler::new();
    entitlements
        .expect_reconcile_active_workspaces()
        .withf(|_, active| *active == BTreeSet::from([ws_id("ws-1")]))
        .times(1)
        .returning(|_, _| Ok(()));
    entitlements.expect_update_workspace_activity().never();
    let mut publisher = MockRuntimeExecutionPublisher::new();
    publisher
        .expect_publish_execution_projection()
        .withf(|_, generations, affected| {
            generations.keys().eq([&ws_id("ws-1")]) && affected.is_none()
        })
        .times(1)
        .returning(|_, _, _| Ok(()));
    let projector = DirectoryProjector::new(projector_config(), ScriptedProvider::new(), store)
        .with_entitlements(Arc::new(entitlements))
        .with_runtime_publisher(Arc::new(publisher));
    projector.apply_snapshot(&snap).await.unwrap();

    // Refused by a projection rule: nothing committed, so no hook may run.
    let mut store = MockDirectoryProjectionStore::new();
    store
        .expect_apply_snapshot()
        .times(1)
        .returning(|_, snapshot, _| {
            Err(DirectoryError::SnapshotSuperseded {
                snapshot_cursor: snapshot.cursor,
                projected_cursor: snapshot.cursor + 1,
            }
            .into())
        });
    let mut entitlements = MockEntitlementReconciler::new();
    entitlements.expect_reconcile_active_workspaces().never();
    entitlements.expect_update_workspace_activity().never();
    let mut publisher = MockRuntimeExecutionPublisher::new();
    publisher.expect_publish_execution_projection().never();
    let projector = DirectoryProjector::new(projector_config(), ScriptedProvider::new(), store)
        .with_entitlements(Arc::new(entitlements))
        .with_runtime_publisher(Arc::new(publisher));
    let error = projector.apply_snapshot(&snap).await.unwrap_err();
    assert!(matches!(error, ProjectorError::Rejected(_)), "{error:?}");
}
