//! The saga over the SeaORM store, on SQLite (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeZone, Utc};
use tenantry_engine::lifecycle::{CommandIntake, Dispatcher, DispatcherConfig, ManualClock};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, ProvisioningKey, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_lifecycle::{
    CommandStatus, ControlSpaceState, DeletionProgress, DeletionRequest, ProvisionRequest,
    RemoteSpace, RevokeAck, RevokeRequest, Settlement,
};
use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, RemoteCall, RemoteFault};
use tenantry_ports::lifecycle::{
    CommandFilter, CommandQueue, ControlSpaceReader, KnowledgeFs, RemoteError,
};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_900_000_000 + seconds, 0)
        .single()
        .unwrap()
}

/// Before every remote call, proves that no database transaction of the dispatcher is open:
/// a no-op write on the claimed command's row (same lease, no outcome) must go through at
/// once. A transaction held over the call would block it (SQLite: the write lock; PostgreSQL:
/// the row lock taken by the claim or a settle).
#[derive(Clone)]
struct ProbingRemote {
    inner: FakeKnowledgeFs,
    store: SeaOrmLifecycleStore,
}

impl ProbingRemote {
    async fn probe(&self) {
        let processing = self
            .store
            .list_commands(&CommandFilter {
                status: Some(CommandStatus::Processing),
                limit: 10,
                ..CommandFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(
            processing.len(),
            1,
            "exactly the dispatched command is processing"
        );
        let row = &processing[0];
        let lease = tenantry_lifecycle::LeaseToken {
            command_id: row.id.clone(),
            owner: row.lease_owner.clone().unwrap(),
            epoch: row.lease_epoch,
            expires_at: row.lease_expires_at.unwrap(),
        };
        let keep = Settlement {
            outcome: None,
            control_space: None,
            supersede: None,
            may_have_sent: true,
            spends_attempt: true,
        };
        let probe =
            tokio::time::timeout(Duration::from_secs(3), self.store.settle(&lease, &keep)).await;
        assert!(
            matches!(probe, Ok(Ok(()))),
            "a transaction was open during the remote call: {probe:?}"
        );
    }
}

#[async_trait]
impl KnowledgeFs for ProbingRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        self.probe().await;
        self.inner.provision(request).await
    }
    async fn find_by_provisioning_key(
        &self,
        n: &TenantId,
        k: &ProvisioningKey,
        c: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        self.probe().await;
        self.inner.find_by_provisioning_key(n, k, c).await
    }
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.probe().await;
        self.inner.request_deletion(request).await
    }
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        self.probe().await;
        self.inner.revoke_grant(request).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_transaction_is_open_while_the_remote_is_called() {
    let db = fresh_database().await;
    let clock = ManualClock::new(t(0));
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock.clone()));
    let fake = FakeKnowledgeFs::new();
    let remote = ProbingRemote {
        inner: fake.clone(),
        store: store.clone(),
    };
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()));
    let dispatcher = Dispatcher::new(store.clone(), remote, DispatcherConfig::default());
    let owner = LeaseOwner::parse("w1").unwrap();
    let tenant = TenantId::parse("tenant").unwrap();
    let cs = ControlSpaceId::parse("cs1").unwrap();
    let receipt = intake
        .create_control_space(&CreateControlSpace::new(
            tenant.clone(),
            cs.clone(),
            IdempotencyKey::parse("create").unwrap(),
            "Docs",
            "docs",
        ))
        .await
        .unwrap();
    // Provision answered but lost: the deletion later recovers the identity (lookup + delete).
    fake.push_fault(RemoteCall::Provision, RemoteFault::LoseAck);
    let first = dispatcher.dispatch_one(&owner, true).await.unwrap();
    assert!(first.claimed && !first.completed);
    intake
        .request_deletion(&RequestDeletion {
            tenant_id: tenant.clone(),
            control_space_id: cs.clone(),
            idempotency_key: IdempotencyKey::parse("delete").unwrap(),
        })
        .await
        .unwrap();
    clock.set(t(1));
    let second = dispatcher.dispatch_one(&owner, true).await.unwrap();
    assert!(
        second.completed,
        "the deletion recovered the identity and completed"
    );
    clock.set(t(10));
    let third = dispatcher.dispatch_one(&owner, true).await.unwrap();
    assert_eq!(third.command_id, Some(receipt.command_id.clone()));
    assert!(third.completed, "the provision retry acks without delivery");
    let space = store.control_space(&tenant, &cs).await.unwrap().unwrap();
    assert_eq!(space.state, ControlSpaceState::Deleted);
    assert_eq!(fake.counters().spaces_created, 1);
    assert_eq!(fake.counters().calls.get("provision"), Some(&1));
    assert_eq!(fake.counters().calls.get("lookup"), Some(&1));
    assert_eq!(fake.counters().calls.get("deletion"), Some(&1));
}
