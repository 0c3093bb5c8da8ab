//! Behaviour tests of the saga dispatcher, intake and worker over the in-memory fakes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use tenantry_kernel::{
    CommandId, ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, LeaseEpoch, LeaseOwner,
    ProvisioningKey, TenantId,
};
use tenantry_lifecycle::ErrorCode;
use tenantry_lifecycle::intake::{
    CreateControlSpace, IntakeError, RequestDeletion, RequestRevocation,
};
use tenantry_lifecycle::{
    CommandRecord, CommandStatus, ControlSpace, ControlSpaceState, DeletionProgress,
    DeletionRequest, Operation, ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest,
};
use tenantry_ports::lifecycle::fake::{
    FakeKnowledgeFs, InMemoryLifecycleStore, RemoteCall, RemoteFault,
};
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandQueue, ControlSpaceReader, KnowledgeFs, LifecycleMetrics, MetricsError,
    RemoteError, TaskMetric, TaskStatus,
};
use tokio::sync::{Notify, watch};

use super::*;

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_900_000_000 + seconds, 0)
        .single()
        .unwrap()
}

fn tenant() -> TenantId {
    TenantId::parse("tenant-1").unwrap()
}

fn cs_id(name: &str) -> ControlSpaceId {
    ControlSpaceId::parse(name).unwrap()
}

fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::parse(name).unwrap()
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::parse(k).unwrap()
}

struct Harness {
    store: InMemoryLifecycleStore,
    remote: FakeKnowledgeFs,
    intake: CommandIntake<InMemoryLifecycleStore>,
    dispatcher: Dispatcher<InMemoryLifecycleStore, FakeKnowledgeFs>,
}

thread_local! {
    /// The test's clock: the harness sets it; it plays the database clock of the fake store and
    /// the process clock of every dispatcher. (`#[tokio::test]` runs a test, spawned tasks
    /// included, on one thread.)
    static TEST_CLOCK: ManualClock = ManualClock::new(t(0));
}

fn clock_of_test() -> ManualClock {
    TEST_CLOCK.with(Clone::clone)
}

/// Moves the test clock to `now` and passes `enabled` through: `dispatch_one(&w, at(t(5), true))`
/// dispatches when the store's clock reads `t(5)`.
fn at(now: DateTime<Utc>, enabled: bool) -> bool {
    clock_of_test().set(now);
    enabled
}

fn harness() -> Harness {
    let clock = clock_of_test();
    clock.set(t(0));
    let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
    let remote = FakeKnowledgeFs::new();
    let counter = Arc::new(AtomicUsize::new(0));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()))
        .with_id_source(move || format!("id-{}", counter.fetch_add(1, Ordering::Relaxed)));
    let dispatcher = Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default())
        .with_clock(Arc::new(clock_of_test()));
    Harness {
        store,
        remote,
        intake,
        dispatcher,
    }
}

fn create_request(cs: &str, k: &str) -> CreateControlSpace {
    CreateControlSpace {
        tenant_id: tenant(),
        control_space_id: cs_id(cs),
        idempotency_key: key(k),
        name: format!("Space {cs}"),
        slug: cs.to_owned(),
        icon: "book".into(),
        description: String::new(),
        model_intent: None,
        profile_intent: None,
    }
}

fn delete_request(cs: &str, k: &str) -> RequestDeletion {
    RequestDeletion {
        tenant_id: tenant(),
        control_space_id: cs_id(cs),
        idempotency_key: key(k),
    }
}

impl Harness {
    async fn create(&self, cs: &str) -> IntakeReceipt {
        self.intake
            .create_control_space(&create_request(cs, &format!("create-{cs}")))
            .await
            .unwrap()
    }

    async fn delete(&self, cs: &str) -> IntakeReceipt {
        self.intake
            .request_deletion(&delete_request(cs, &format!("delete-{cs}")))
            .await
            .unwrap()
    }

    async fn space(&self, cs: &str) -> ControlSpace {
        self.store
            .control_space(&tenant(), &cs_id(cs))
            .await
            .unwrap()
            .unwrap()
    }

    fn command(&self, id: &CommandId) -> CommandRecord {
        self.store.command(id).unwrap()
    }

    async fn dispatch(&self, now: DateTime<Utc>, enabled: bool) -> DispatchReport {
        self.dispatcher
            .dispatch_one(&owner("w1"), at(now, enabled))
            .await
            .unwrap()
    }

    /// Dispatches until nothing is due at `at`.
    async fn drain(&self, at: DateTime<Utc>) {
        for _ in 0..100 {
            if !self.dispatch(at, true).await.claimed {
                return;
            }
        }
        panic!("commands kept being due");
    }

    fn calls(&self, name: &str) -> u64 {
        self.remote.counters().calls.get(name).copied().unwrap_or(0)
    }
}

fn retry_of(record: &CommandRecord) -> (CommandStatus, Option<&str>, DateTime<Utc>) {
    (
        record.status,
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        record.next_attempt_at,
    )
}

#[tokio::test]
async fn dispatch_with_nothing_due_claims_nothing() {
    let h = harness();
    assert_eq!(
        h.dispatch(t(0), true).await,
        DispatchReport {
            claimed: false,
            completed: false,
            command_id: None
        }
    );
}

#[tokio::test]
async fn provision_is_not_claimed_while_product_disabled() {
    let h = harness();
    let receipt = h.create("cs1").await;
    assert!(!h.dispatch(t(1), false).await.claimed);
    let record = h.command(&receipt.command_id);
    assert_eq!(
        (record.status, record.attempt_count),
        (CommandStatus::Pending, 0)
    );
    assert!(h.dispatch(t(1), true).await.completed);
}

#[tokio::test]
async fn attempt_count_and_lease_epoch_rise_on_each_claim() {
    let h = harness();
    let receipt = h.create("cs1").await;
    for _ in 0..2 {
        h.remote.push_fault(
            RemoteCall::Provision,
            RemoteFault::Fail(RemoteError::answered(503, "KFS_UNAVAILABLE", "busy")),
        );
    }
    h.dispatch(t(0), true).await;
    h.dispatch(t(100), true).await;
    h.dispatch(t(200), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(record.attempt_count, 3);
    assert_eq!(record.lease_epoch, LeaseEpoch(3));
    assert_eq!(record.status, CommandStatus::Succeeded);
}

#[tokio::test]
async fn expired_processing_command_is_reclaimed_and_completed() {
    let h = harness();
    let receipt = h.create("cs1").await;
    // A worker claims and crashes before settling.
    let crashed = h
        .store
        .claim(&ClaimRequest {
            owner: owner("crashed"),
            lease_duration: Duration::from_secs(300),
            include_provision: true,
            limit: 1,
        })
        .await
        .unwrap();
    assert_eq!(crashed.len(), 1);
    assert!(
        !h.dispatch(t(299), true).await.claimed,
        "live lease is left alone"
    );
    let outcome = h.dispatch(t(300), true).await;
    assert!(outcome.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(record.lease_epoch, LeaseEpoch(2));
    assert_eq!(record.attempt_count, 2);
}

#[tokio::test]
async fn provision_success_activates_the_control_space_by_cas() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let before = h.space("cs1").await;
    let outcome = h.dispatch(t(5), true).await;
    assert_eq!(
        outcome,
        DispatchReport {
            claimed: true,
            completed: true,
            command_id: Some(receipt.command_id.clone())
        }
    );
    let after = h.space("cs1").await;
    assert_eq!(after.state, ControlSpaceState::Active);
    assert_eq!(
        after.knowledge_space_id,
        Some(KnowledgeSpaceId::parse("ks-1").unwrap())
    );
    assert_eq!(after.knowledge_space_revision, 1);
    assert_eq!(after.resource_version, before.resource_version + 1);
    let record = h.command(&receipt.command_id);
    assert_eq!(
        (record.status, record.completed_at),
        (CommandStatus::Succeeded, Some(t(5)))
    );
    assert_eq!(h.remote.counters().spaces_created, 1);
}

#[tokio::test]
async fn provision_is_superseded_without_delivery_when_the_space_is_no_longer_provisioning() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.delete("cs1").await;
    // Claim order is by due time: the provision (created first) comes first.
    let outcome = h.dispatch(t(1), true).await;
    assert_eq!(outcome.command_id, Some(provision.command_id.clone()));
    assert!(outcome.completed);
    assert_eq!(
        h.calls("provision"),
        0,
        "no remote call for a superseded provision"
    );
    // It did not succeed, so it is never shown as succeeded.
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Superseded
    );
}

#[tokio::test]
async fn provision_with_unknown_outcome_retries_with_the_same_provisioning_key() {
    let h = harness();
    let receipt = h.create("cs1").await;
    h.remote
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    let first = h.dispatch(t(0), true).await;
    assert!(first.claimed && !first.completed);
    assert_eq!(
        retry_of(&h.command(&receipt.command_id)),
        (CommandStatus::Pending, Some("REMOTE_OUTCOME_UNKNOWN"), t(2))
    );
    assert!(h.dispatch(t(2), true).await.completed);
    assert_eq!(
        h.remote.counters().spaces_created,
        1,
        "the replay did not create a second space"
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Active);
}

#[tokio::test]
async fn delete_acks_when_already_deleted() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let delete = h.delete("cs1").await;
    h.drain(t(1)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    // A second delete command for the same operation (e.g. an operator re-enqueue) acks at once.
    let mut again = h.command(&delete.command_id);
    again.id = CommandId::parse("again").unwrap();
    again.idempotency_key = key("again");
    again.status = CommandStatus::Pending;
    again.next_attempt_at = t(2);
    h.store.put_command(again);
    let calls = h.calls("deletion");
    assert!(h.dispatch(t(2), true).await.completed);
    assert_eq!(h.calls("deletion"), calls);
}

#[tokio::test]
async fn never_provisioned_space_is_deleted_without_remote_call_when_disabled() {
    let h = harness();
    let provision = h.create("cs1").await;
    let delete = h.delete("cs1").await;
    let outcome = h.dispatch(t(1), false).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(outcome.completed);
    let record = h.command(&provision.command_id);
    assert_eq!(record.status, CommandStatus::Superseded);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::SupersededByDelete.as_str())
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert!(
        h.remote.counters().calls.is_empty(),
        "no remote call at all"
    );
}

#[tokio::test]
async fn lost_ack_deletion_recovers_the_identity_by_provisioning_key() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote
        .push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    h.dispatch(t(0), true).await; // remote space exists, local does not know it
    let delete = h.delete("cs1").await;
    let outcome = h.dispatch(t(1), true).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(outcome.completed);
    let space = h.space("cs1").await;
    assert_eq!(space.state, ControlSpaceState::Deleted);
    assert_eq!(
        space.knowledge_space_id,
        Some(KnowledgeSpaceId::parse("ks-1").unwrap())
    );
    assert_eq!(h.calls("lookup"), 1);
    let pk = ProvisioningKey::parse(provision.operation_id.as_str()).unwrap();
    assert!(!h.remote.has_space(&pk), "the remote space was deleted");
    // The pending provision retry then closes without delivery, as superseded.
    h.drain(t(10)).await;
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Superseded
    );
    assert_eq!(h.remote.counters().spaces_created, 1);
}

#[tokio::test]
async fn recovered_identity_in_another_namespace_retries_with_scope_mismatch() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::not_dispatched("refused")),
    );
    h.dispatch(t(0), true).await; // attempted once: no never-provisioned shortcut
    h.remote.insert_space(
        TenantId::parse("someone-else").unwrap(),
        ProvisioningKey::parse(provision.operation_id.as_str()).unwrap(),
        KnowledgeSpaceId::parse("foreign").unwrap(),
        1,
    );
    let delete = h.delete("cs1").await;
    h.dispatch(t(1), false).await;
    let record = h.command(&delete.command_id);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::KnowledgeFsScopeMismatch.as_str())
    );
    assert_eq!(
        h.space("cs1").await.knowledge_space_id,
        None,
        "nothing registered"
    );
}

#[tokio::test]
async fn conflicting_recovered_identity_dead_letters_the_delete() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::not_dispatched("refused")),
    );
    h.dispatch(t(0), true).await; // provision retry due at t(2)
    let delete = h.delete("cs1").await;
    h.remote.insert_space(
        tenant(),
        ProvisioningKey::parse(provision.operation_id.as_str()).unwrap(),
        KnowledgeSpaceId::parse("remote-id").unwrap(),
        1,
    );
    // The control space registers another identity after the target was resolved as unknown:
    // simulate by registering it between lookup and re-read through the remote hook.
    let store = h.store.clone();
    let injected = Arc::new(AtomicBool::new(false));
    let flag = injected.clone();
    h.remote.set_hook(move |call| {
        if call == RemoteCall::Lookup && !flag.swap(true, Ordering::SeqCst) {
            let mut cs = futures::executor::block_on(store.control_space(&tenant(), &cs_id("cs1")))
                .unwrap()
                .unwrap();
            cs.knowledge_space_id = Some(KnowledgeSpaceId::parse("local-id").unwrap());
            store.put_control_space(cs);
        }
    });
    let outcome = h
        .dispatcher
        .dispatch_one(&owner("w1"), at(t(1), true))
        .await
        .unwrap();
    assert!(outcome.completed, "settled, not left to lease expiry");
    let record = h.command(&delete.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::KnowledgeFsIdentityConflict.as_str())
    );
    assert_eq!(record.lease_owner, None);
    assert_eq!(record.completed_at, Some(t(1)));
    assert_eq!(h.calls("deletion"), 0);
}

#[tokio::test]
async fn remote_absence_completes_the_deletion_when_product_disabled() {
    let h = harness();
    let provision = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::outcome_unknown(
            "connection reset after sending",
        )),
    );
    h.dispatch(t(0), true).await; // attempted once (window ends at t(0)), outcome unknown
    let delete = h.delete("cs1").await;
    let outcome = h.dispatch(t(1), false).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(
        !outcome.completed,
        "a provision sent with an unknown outcome may still land until the grace period ends"
    );
    assert_eq!(
        h.command(&delete.command_id)
            .last_error_code
            .as_ref()
            .map(ErrorCode::as_str),
        Some(ErrorCode::RemoteAbsenceUnconfirmed.as_str())
    );
    // Grace (600 s) after the provision's last attempt ended: absence is proof now.
    let outcome = h.dispatch(t(600), false).await;
    assert!(outcome.completed);
    assert_eq!(
        h.command(&provision.command_id).status,
        CommandStatus::Superseded
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert_eq!(h.calls("lookup"), 2);
}

#[tokio::test]
async fn remote_absence_completes_at_once_when_no_provision_request_can_land() {
    // Never left (connection refused), or refused by KnowledgeFS with a status its protocol
    // defines as applying nothing (429, 503, 4xx).
    for failure in [
        RemoteError::not_dispatched("connection refused"),
        RemoteError::answered(503, "KFS_UNAVAILABLE", "busy"),
        RemoteError::answered(429, "KFS_RATE_LIMITED", "slow down"),
    ] {
        let h = harness();
        let provision = h.create("cs1").await;
        h.remote
            .push_fault(RemoteCall::Provision, RemoteFault::Fail(failure.clone()));
        h.dispatch(t(0), true).await; // claimed; nothing can land
        let delete = h.delete("cs1").await;
        let outcome = h.dispatch(t(1), false).await;
        assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
        assert!(outcome.completed, "{failure:?}: absence is proof");
        assert_eq!(
            h.command(&provision.command_id).status,
            CommandStatus::Superseded
        );
        assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    }
}

#[tokio::test]
async fn remote_absence_after_an_ack_without_delivery_completes_at_once() {
    let h = harness();
    let provision = h.create("cs1").await;
    let delete = h.delete("cs1").await;
    // The provision is claimed first and acks without delivery (the space is deleting).
    let outcome = h.dispatch(t(0), true).await;
    assert_eq!(outcome.command_id, Some(provision.command_id.clone()));
    assert!(outcome.completed);
    assert_eq!(h.calls("provision"), 0);
    assert_eq!(
        h.command(&provision.command_id).attempt_window_ends_at,
        None,
        "an attempt that sent nothing leaves no window"
    );
    let outcome = h.dispatch(t(0), true).await;
    assert_eq!(outcome.command_id, Some(delete.command_id.clone()));
    assert!(
        outcome.completed,
        "create-then-delete does not wait out a grace period"
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
}

#[tokio::test]
async fn remote_absence_retries_while_a_provision_may_still_deliver() {
    let h = harness();
    h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::answered(502, "KFS_HTTP_502", "bad gateway")),
    );
    h.dispatch(t(0), true).await; // provision sent, a gateway answered 502; retry at t(2)
    let delete = h.delete("cs1").await;
    assert_eq!(
        h.dispatch(t(1), true).await.command_id,
        Some(delete.command_id.clone())
    );
    assert_eq!(
        retry_of(&h.command(&delete.command_id)),
        (
            CommandStatus::Pending,
            Some(ErrorCode::RemoteAbsenceUnconfirmed.as_str()),
            t(3)
        )
    );
    // The provision acks without delivery at t(3) (its window stays at t(0)); absence proves
    // the deletion 600 s after t(0).
    h.drain(t(3)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleting);
    h.drain(t(600)).await;
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert_eq!(
        h.command(&delete.command_id).status,
        CommandStatus::Succeeded
    );
    assert_eq!(h.remote.counters().spaces_created, 0);
}

/// A provision answered 504 by a gateway while the backend goes on and commits it 30 s later
/// (virtual time). The deletion requested meanwhile must not complete on the lookup's absence:
/// it keeps looking until the space appears, then deletes it. Nothing is orphaned.
#[tokio::test]
async fn deletion_never_orphans_a_provision_that_lands_after_a_504() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let pending_commit: Arc<Mutex<Option<ProvisionRequest>>> = Arc::default();
    let remote = LateCommitRemote {
        inner: h.remote.clone(),
        held: pending_commit.clone(),
    };
    let dispatcher = Dispatcher::new(h.store.clone(), remote, DispatcherConfig::default())
        .with_clock(Arc::new(clock_of_test()));
    let dispatch = |now| {
        let dispatcher = &dispatcher;
        async move {
            let mut claimed = 0;
            while dispatcher
                .dispatch_one(&owner("w"), at(now, true))
                .await
                .unwrap()
                .claimed
            {
                claimed += 1;
                assert!(claimed < 100, "dispatch loop did not settle down");
            }
        }
    };
    dispatch(t(0)).await; // provision: 504, the backend goes on
    assert!(pending_commit.lock().unwrap().is_some());
    h.delete("cs1").await;
    for second in 1..30 {
        dispatch(t(second)).await;
        assert_eq!(
            h.space("cs1").await.state,
            ControlSpaceState::Deleting,
            "absence at t({second}) is no proof: the provision may still land"
        );
    }
    // The backend commits the provision at t(30).
    let late = pending_commit.lock().unwrap().take().unwrap();
    h.remote.provision(&late).await.unwrap();
    assert_eq!(h.remote.counters().spaces_created, 1);
    for second in 30..700 {
        dispatch(t(second)).await;
    }
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Deleted);
    assert!(
        !h.remote.has_space(&h.space("cs1").await.provisioning_key),
        "the late space was found and deleted"
    );
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Superseded,
        "the provision closed as moot, without a second delivery"
    );
    assert_eq!(
        h.calls("provision"),
        1,
        "only the held request reached the backend (committed by the test at t(30))"
    );
}

/// A remote whose first provision answers 504 while holding the request, for the test to
/// commit later (a backend behind a gateway that goes on after the gateway gave up).
struct LateCommitRemote {
    inner: FakeKnowledgeFs,
    held: Arc<Mutex<Option<ProvisionRequest>>>,
}

#[async_trait]
impl KnowledgeFs for LateCommitRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let first = {
            let mut held = self.held.lock().unwrap();
            let first = held.is_none();
            if first {
                *held = Some(request.clone());
            }
            first
        };
        if first {
            return Err(RemoteError::answered(
                504,
                "KFS_HTTP_504",
                "gateway timeout",
            ));
        }
        self.inner.provision(request).await
    }
    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        self.inner
            .find_by_provisioning_key(namespace_id, provisioning_key, control_space_id)
            .await
    }
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.inner.request_deletion(request).await
    }
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        self.inner.revoke_grant(request).await
    }
}

#[tokio::test]
async fn deletion_progress_records_irreversibility_once_and_completes() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    h.remote.set_deletion_polls(3); // accepted, draining, draining, irreversible, completed
    let delete = h.delete("cs1").await;
    let mut at = 1;
    let mut irreversible_seen = None;
    for _ in 0..10 {
        let outcome = h.dispatch(t(at), true).await;
        let space = h.space("cs1").await;
        if let (None, Some(when)) = (irreversible_seen, space.deletion_irreversible_at) {
            irreversible_seen = Some(when);
        }
        if let Some(first) = irreversible_seen {
            assert_eq!(space.deletion_irreversible_at, Some(first), "recorded once");
        }
        if outcome.completed {
            break;
        }
        assert_eq!(
            h.command(&delete.command_id)
                .last_error_code
                .as_ref()
                .map(ErrorCode::as_str),
            Some(ErrorCode::RemoteDeletionPending.as_str())
        );
        at += 1000;
    }
    let space = h.space("cs1").await;
    assert_eq!(space.state, ControlSpaceState::Deleted);
    assert_eq!(irreversible_seen, Some(t(3001)));
    assert_eq!(space.knowledge_space_revision, 2, "max(local 1, remote 2)");
    assert_eq!(h.calls("deletion"), 5);
}

#[tokio::test]
async fn revoke_acks_only_when_the_watermark_reaches_the_sequence() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let revoke = RequestRevocation {
        tenant_id: tenant(),
        control_space_id: cs_id("cs1"),
        grant_id: GrantId::parse("g1").unwrap(),
        reason_code: "member_removed".into(),
        idempotency_key: key("revoke-1"),
    };
    let receipt = h.intake.request_revocation(&revoke).await.unwrap();
    h.remote.set_revoke_lag(1);
    assert!(!h.dispatch(t(1), true).await.completed);
    assert_eq!(
        retry_of(&h.command(&receipt.command_id)),
        (
            CommandStatus::Pending,
            Some(ErrorCode::RemoteRevokeWatermarkLag.as_str()),
            t(3)
        )
    );
    assert!(h.dispatch(t(3), true).await.completed);
}

#[tokio::test]
async fn unknown_operation_retries_with_unsupported_operation() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let mut record = h.command(&receipt.command_id);
    record.operation = Operation::Unsupported("rename".into());
    h.store.put_command(record);
    h.dispatch(t(0), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(
        retry_of(&record),
        (
            CommandStatus::Pending,
            Some(ErrorCode::UnsupportedOperation.as_str()),
            t(2)
        )
    );
}

#[tokio::test]
async fn malformed_payload_dead_letters_with_invalid_command_payload() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let mut record = h.command(&receipt.command_id);
    record.payload = json!({"unexpected": true});
    h.store.put_command(record);
    assert!(h.dispatch(t(0), true).await.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(record.status, CommandStatus::Failed);
    assert_eq!(
        record.last_error_code.as_ref().map(ErrorCode::as_str),
        Some(ErrorCode::InvalidCommandPayload.as_str())
    );
    assert_eq!(record.completed_at, Some(t(0)));
    assert!(!h.dispatch(t(100_000), true).await.claimed, "never again");
}

#[tokio::test]
async fn remote_error_retries_with_its_code_and_honours_retry_after() {
    let h = harness();
    let receipt = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(
            RemoteError::answered(503, "KFS_MAINTENANCE", "down")
                .with_retry_after(Duration::from_secs(120)),
        ),
    );
    h.dispatch(t(0), true).await;
    let record = h.command(&receipt.command_id);
    assert_eq!(
        retry_of(&record),
        (CommandStatus::Pending, Some("KFS_MAINTENANCE"), t(120))
    );
    assert_eq!(record.last_error_message.as_deref(), Some("down"));
    assert_eq!(record.lease_owner, None);
}

#[tokio::test]
async fn backoff_grows_with_attempts_up_to_the_cap() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let mut now = t(0);
    let mut delays = Vec::new();
    for _ in 0..10 {
        h.remote.push_fault(
            RemoteCall::Provision,
            RemoteFault::Fail(RemoteError::answered(500, "E", "e")),
        );
        h.dispatch(now, true).await;
        let next = h.command(&receipt.command_id).next_attempt_at;
        delays.push((next - now).num_seconds());
        now = next;
    }
    assert_eq!(delays, [2, 4, 8, 16, 32, 64, 128, 256, 256, 256]);
}

/// A remote whose first provision call waits until released.
#[derive(Clone)]
struct GatedRemote {
    inner: FakeKnowledgeFs,
    entered: Arc<Notify>,
    release: Arc<Notify>,
    gated: Arc<AtomicBool>,
}

impl GatedRemote {
    fn new(inner: FakeKnowledgeFs) -> Self {
        Self {
            inner,
            entered: Arc::new(Notify::new()),
            release: Arc::new(Notify::new()),
            gated: Arc::new(AtomicBool::new(true)),
        }
    }
}

#[async_trait]
impl KnowledgeFs for GatedRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        if self.gated.swap(false, Ordering::SeqCst) {
            self.entered.notify_one();
            self.release.notified().await;
        }
        self.inner.provision(request).await
    }
    async fn find_by_provisioning_key(
        &self,
        n: &TenantId,
        k: &ProvisioningKey,
        c: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        self.inner.find_by_provisioning_key(n, k, c).await
    }
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.inner.request_deletion(request).await
    }
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        self.inner.revoke_grant(request).await
    }
}

#[derive(Default)]
struct RecordingMetrics {
    records: Mutex<Vec<TaskMetric>>,
}

impl LifecycleMetrics for RecordingMetrics {
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError> {
        self.records.lock().unwrap().push(metric.clone());
        Ok(())
    }
}

struct FailingMetrics;

impl LifecycleMetrics for FailingMetrics {
    fn record_task(&self, _metric: &TaskMetric) -> Result<(), MetricsError> {
        Err(MetricsError::new("exporter down"))
    }
}

#[tokio::test]
async fn late_settle_after_lease_takeover_changes_nothing() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let remote = GatedRemote::new(h.remote.clone());
    let metrics = Arc::new(RecordingMetrics::default());
    let slow = Arc::new(
        Dispatcher::new(h.store.clone(), remote.clone(), DispatcherConfig::default())
            .with_clock(Arc::new(clock_of_test()))
            .with_metrics(metrics.clone()),
    );
    let task = {
        let slow = slow.clone();
        tokio::spawn(async move { slow.dispatch_one(&owner("slow"), at(t(0), true)).await })
    };
    remote.entered.notified().await;
    // The lease expires; another worker takes over and completes the command.
    assert!(h.dispatch(t(301), true).await.completed);
    let settled = h.space("cs1").await;
    let record = h.command(&receipt.command_id);
    remote.release.notify_one();
    let late = task.await.unwrap();
    assert_eq!(
        late,
        Err(DispatchError::LeaseLost {
            command_id: receipt.command_id.clone()
        })
    );
    assert_eq!(h.space("cs1").await, settled, "late settle changed nothing");
    assert_eq!(h.command(&receipt.command_id), record);
    let statuses: Vec<TaskStatus> = metrics
        .records
        .lock()
        .unwrap()
        .iter()
        .map(|m| m.status)
        .collect();
    assert_eq!(statuses, [TaskStatus::Running, TaskStatus::DispatchError]);
    assert_eq!(h.remote.counters().spaces_created, 1);
}

#[tokio::test]
async fn metrics_record_each_task_state_with_duration_since_creation() {
    let h = harness();
    h.create("cs1").await;
    let metrics = Arc::new(RecordingMetrics::default());
    let dispatcher = Dispatcher::new(
        h.store.clone(),
        h.remote.clone(),
        DispatcherConfig::default(),
    )
    .with_clock(Arc::new(clock_of_test()))
    .with_metrics(metrics.clone());
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::answered(503, "BUSY", "busy")),
    );
    dispatcher
        .dispatch_one(&owner("w"), at(t(0), true))
        .await
        .unwrap();
    dispatcher
        .dispatch_one(&owner("w"), at(t(7), true))
        .await
        .unwrap();
    let records = metrics.records.lock().unwrap().clone();
    let expected = [
        (TaskStatus::Running, None, None),
        (TaskStatus::Retry, None, Some("BUSY")),
        (TaskStatus::Running, None, None),
        (TaskStatus::Succeeded, Some(7.0), None),
    ];
    assert_eq!(records.len(), expected.len());
    for (record, (status, duration, code)) in records.iter().zip(expected) {
        assert_eq!(record.operation, "provision");
        assert_eq!(record.status, status);
        assert_eq!(record.duration_seconds, duration);
        assert_eq!(record.error_code.as_deref(), code);
    }
}

#[tokio::test]
async fn failing_metrics_sink_never_breaks_dispatch() {
    let h = harness();
    h.create("cs1").await;
    let dispatcher = Dispatcher::new(
        h.store.clone(),
        h.remote.clone(),
        DispatcherConfig::default(),
    )
    .with_clock(Arc::new(clock_of_test()))
    .with_metrics(Arc::new(FailingMetrics));
    assert!(
        dispatcher
            .dispatch_one(&owner("w"), at(t(0), true))
            .await
            .unwrap()
            .completed
    );
}

#[tokio::test]
async fn batch_dispatch_claims_several_commands_in_one_call() {
    let h = harness();
    for i in 0..5 {
        h.create(&format!("cs{i}")).await;
    }
    let results = h
        .dispatcher
        .dispatch_batch(&owner("w"), at(t(0), true), 3)
        .await
        .unwrap();
    assert_eq!(results.len(), 3);
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|o| o.completed))
    );
    assert_eq!(
        h.dispatcher
            .dispatch_batch(&owner("w"), at(t(0), true), 10)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(h.remote.counters().spaces_created, 5);
}

// ---- intake ----

#[tokio::test]
async fn intake_replays_the_same_request_and_refuses_a_different_one_with_the_same_key() {
    let h = harness();
    let first = h
        .intake
        .create_control_space(&create_request("cs1", "k1"))
        .await
        .unwrap();
    assert!(!first.replayed);
    h.drain(t(0)).await; // the space moved on; a replay must still be recognised
    let again = h
        .intake
        .create_control_space(&create_request("cs1", "k1"))
        .await
        .unwrap();
    assert_eq!(
        again,
        IntakeReceipt {
            replayed: true,
            ..first.clone()
        }
    );
    let mut different = create_request("cs1", "k1");
    different.name = "Renamed".into();
    assert_eq!(
        h.intake.create_control_space(&different).await,
        Err(IntakeFailure::Rejected(IntakeError::IdempotencyConflict {
            key: key("k1")
        }))
    );
    assert_eq!(h.store.commands().len(), 1);
}

#[tokio::test]
async fn intake_refuses_bad_input_and_writes_nothing() {
    let h = harness();
    h.create("cs1").await;
    let commands = h.store.commands();
    let space = h.space("cs1").await;
    let mut oversized = create_request("cs2", "k2");
    oversized.description = "x".repeat(70 * 1024);
    let mut nameless = create_request("cs3", "k3");
    nameless.name = String::new();
    assert!(matches!(
        h.intake.create_control_space(&oversized).await,
        Err(IntakeFailure::Rejected(IntakeError::PayloadTooLarge { .. }))
    ));
    assert!(matches!(
        h.intake.create_control_space(&nameless).await,
        Err(IntakeFailure::Rejected(IntakeError::InvalidField {
            field: "name",
            ..
        }))
    ));
    assert!(matches!(
        h.intake
            .create_control_space(&create_request("cs1", "k4"))
            .await,
        Err(IntakeFailure::Rejected(
            IntakeError::ControlSpaceExists { .. }
        ))
    ));
    assert!(matches!(
        h.intake
            .request_deletion(&delete_request("missing", "k5"))
            .await,
        Err(IntakeFailure::Rejected(
            IntakeError::UnknownControlSpace { .. }
        ))
    ));
    let revoke_early = RequestRevocation {
        tenant_id: tenant(),
        control_space_id: cs_id("cs1"),
        grant_id: GrantId::parse("g").unwrap(),
        reason_code: "r".into(),
        idempotency_key: key("k6"),
    };
    assert!(matches!(
        h.intake.request_revocation(&revoke_early).await,
        Err(IntakeFailure::Rejected(IntakeError::NotProvisioned { .. }))
    ));
    assert_eq!(h.store.commands(), commands, "no command written");
    assert_eq!(h.space("cs1").await, space, "control space untouched");
    assert!(
        h.store
            .control_space(&tenant(), &cs_id("cs2"))
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn intake_refuses_a_transition_the_state_machine_forbids() {
    let h = harness();
    h.create("cs1").await;
    h.delete("cs1").await;
    let result = h
        .intake
        .request_deletion(&delete_request("cs1", "another-key"))
        .await;
    assert!(
        matches!(
            result,
            Err(IntakeFailure::Rejected(IntakeError::Transition(_)))
        ),
        "{result:?}"
    );
}

#[tokio::test]
async fn revocations_take_increasing_revoke_sequences() {
    let h = harness();
    h.create("cs1").await;
    h.drain(t(0)).await;
    let mut sequences = Vec::new();
    for i in 0..3 {
        let receipt = h
            .intake
            .request_revocation(&RequestRevocation {
                tenant_id: tenant(),
                control_space_id: cs_id("cs1"),
                grant_id: GrantId::parse(format!("g{i}")).unwrap(),
                reason_code: "r".into(),
                idempotency_key: key(&format!("rk{i}")),
            })
            .await
            .unwrap();
        sequences.push(
            h.command(&receipt.command_id).payload["revoke_sequence"]
                .as_i64()
                .unwrap(),
        );
    }
    assert_eq!(sequences, [1, 2, 3]);
}

#[tokio::test]
async fn intake_store_failure_is_reported_and_writes_nothing() {
    let h = harness();
    h.store
        .fail_next_call(tenantry_ports::lifecycle::StoreError::unavailable("down"));
    assert!(matches!(
        h.intake
            .create_control_space(&create_request("cs1", "k1"))
            .await,
        Err(IntakeFailure::Store(_))
    ));
    assert!(h.store.commands().is_empty());
}

// ---- worker ----

fn worker_config(idle: Duration) -> WorkerConfig {
    WorkerConfig {
        idle_poll: idle,
        claim_batch: 1,
        ..WorkerConfig::default()
    }
}

#[tokio::test(start_paused = true)]
async fn worker_sleeps_when_idle_and_picks_up_new_commands() {
    let h = harness();
    let dispatcher = Arc::new(
        Dispatcher::new(
            h.store.clone(),
            h.remote.clone(),
            DispatcherConfig::default(),
        )
        .with_clock(Arc::new(clock_of_test())),
    );
    let (stop, stopped) = watch::channel(false);
    let worker = Worker::new(
        dispatcher,
        owner("w"),
        worker_config(Duration::from_secs(5)),
    );
    let handle = tokio::spawn(worker.run(stopped));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let receipt = h.create("cs1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Pending,
        "still asleep"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Succeeded
    );
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed, report.errors), (1, 1, 0));
}

#[tokio::test]
async fn worker_shutdown_lets_the_in_flight_dispatch_settle() {
    let h = harness();
    let receipt = h.create("cs1").await;
    h.create("cs2").await;
    let remote = GatedRemote::new(h.remote.clone());
    let dispatcher = Arc::new(
        Dispatcher::new(h.store.clone(), remote.clone(), DispatcherConfig::default())
            .with_clock(Arc::new(clock_of_test())),
    );
    let (stop, stopped) = watch::channel(false);
    let worker = Worker::new(
        dispatcher,
        owner("w"),
        worker_config(Duration::from_millis(10)),
    );
    let handle = tokio::spawn(worker.run(stopped));
    remote.entered.notified().await;
    stop.send(true).unwrap();
    remote.release.notify_one();
    let report = handle.await.unwrap();
    assert_eq!(report.claimed, 1, "no claim after shutdown");
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Succeeded
    );
    let pending: Vec<_> = h
        .store
        .commands()
        .into_iter()
        .filter(|c| c.status == CommandStatus::Pending)
        .collect();
    assert_eq!(pending.len(), 1);
}

#[test]
fn unique_lease_owners_differ() {
    let a = unique_lease_owner("host a");
    let b = unique_lease_owner("host a");
    assert_ne!(a, b);
    assert!(a.as_str().starts_with("hosta-"));
}

/// A store whose first settle carrying a control-space CAS finds the control space changed
/// by a concurrent writer (its resource version bumped just before).
#[derive(Clone)]
struct RacingStore {
    inner: InMemoryLifecycleStore,
    raced: Arc<AtomicBool>,
}

#[async_trait]
impl CommandQueue for RacingStore {
    async fn claim(
        &self,
        request: &ClaimRequest,
    ) -> Result<Vec<tenantry_lifecycle::ClaimedCommand>, tenantry_ports::lifecycle::StoreError>
    {
        self.inner.claim(request).await
    }
    async fn renew_lease(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        lease_duration: Duration,
    ) -> Result<tenantry_lifecycle::LeaseToken, tenantry_ports::lifecycle::SettleError> {
        self.inner.renew_lease(lease, lease_duration).await
    }
    async fn settle(
        &self,
        lease: &tenantry_lifecycle::LeaseToken,
        settlement: &tenantry_lifecycle::Settlement,
    ) -> Result<(), tenantry_ports::lifecycle::SettleError> {
        if let Some(cas) = &settlement.control_space
            && !self.raced.swap(true, Ordering::SeqCst)
        {
            let mut current = cas.next.clone();
            current.resource_version = cas.expected_resource_version + 1;
            current.state = cas.expected_state;
            self.inner.put_control_space(current);
        }
        self.inner.settle(lease, settlement).await
    }
    async fn latest_provision(
        &self,
        t: &TenantId,
        c: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, tenantry_ports::lifecycle::StoreError> {
        self.inner.latest_provision(t, c).await
    }
    async fn list_commands(
        &self,
        f: &tenantry_ports::lifecycle::CommandFilter,
    ) -> Result<Vec<CommandRecord>, tenantry_ports::lifecycle::StoreError> {
        self.inner.list_commands(f).await
    }
}

#[async_trait]
impl ControlSpaceReader for RacingStore {
    async fn control_space(
        &self,
        t: &TenantId,
        c: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, tenantry_ports::lifecycle::StoreError> {
        self.inner.control_space(t, c).await
    }
}

#[async_trait]
impl tenantry_ports::lifecycle::IntakeStore for RacingStore {
    async fn submit(
        &self,
        plan: &tenantry_lifecycle::intake::IntakePlan,
    ) -> Result<tenantry_ports::lifecycle::Submitted, tenantry_ports::lifecycle::IntakeStoreError>
    {
        self.inner.submit(plan).await
    }
    async fn command_by_idempotency_key(
        &self,
        k: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, tenantry_ports::lifecycle::StoreError> {
        self.inner.command_by_idempotency_key(k).await
    }
}

#[tokio::test]
async fn control_space_conflict_at_settle_hands_the_command_back_for_a_re_read() {
    let h = harness();
    let receipt = h.create("cs1").await;
    let racing = RacingStore {
        inner: h.store.clone(),
        raced: Arc::new(AtomicBool::new(false)),
    };
    let dispatcher = Dispatcher::new(racing, h.remote.clone(), DispatcherConfig::default())
        .with_clock(Arc::new(clock_of_test()));
    let first = dispatcher
        .dispatch_one(&owner("w1"), at(t(0), true))
        .await
        .unwrap();
    assert!(first.claimed && !first.completed);
    let record = h.command(&receipt.command_id);
    assert_eq!(
        retry_of(&record),
        (
            CommandStatus::Pending,
            Some(ErrorCode::ControlSpaceConflict.as_str()),
            t(2)
        ),
        "retried at once instead of waiting for the lease to expire"
    );
    assert_eq!(record.lease_owner, None);
    assert!(
        dispatcher
            .dispatch_one(&owner("w1"), at(t(2), true))
            .await
            .unwrap()
            .completed
    );
    assert_eq!(h.space("cs1").await.state, ControlSpaceState::Active);
    assert_eq!(h.remote.counters().spaces_created, 1);
}

mod failures;
mod leases;
