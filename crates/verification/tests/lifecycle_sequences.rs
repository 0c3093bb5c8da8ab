//! Property test of lifecycle operation sequences: random interleavings of create, delete,
//! dispatch, a worker that claims and crashes, lost answers and time passing, run through the
//! real engine (`CommandIntake`, `Dispatcher`) over the in-memory store and the fake
//! KnowledgeFS on a manual clock, checked against a small reference model after every step and
//! once everything has drained.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use tenantry_engine::{CommandIntake, Dispatcher, DispatcherConfig};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_lifecycle::{CommandStatus, ControlSpaceState};
use tenantry_ports::clock::ManualClock;
use tenantry_ports::lifecycle::fake::{
    FakeKnowledgeFs, InMemoryLifecycleStore, RemoteCall, RemoteFault,
};
use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue, ControlSpaceReader};

const SPACES: usize = 2;

#[derive(Debug, Clone)]
enum Op {
    Create(usize),
    Delete(usize),
    Dispatch,
    /// A worker claims the next due command and crashes (never settles it).
    ClaimAndCrash,
    /// The next call of this kind (provision or lookup) is applied but its answer is lost.
    /// Lost deletion answers are left out: the in-memory `FakeKnowledgeFs` forgets a deleted
    /// space and answers a re-delivered deletion with 404, unlike the reference KnowledgeFS,
    /// which answers `completed` again, so the saga retries until its budget is spent
    /// (docs/verification.md, "Finding: the fake remote's deletion replay").
    LoseAnswer(u8),
    /// Time passes (seconds).
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..SPACES).prop_map(Op::Create),
        1 => (0..SPACES).prop_map(Op::Delete),
        3 => Just(Op::Dispatch),
        1 => Just(Op::ClaimAndCrash),
        1 => (0u8..2).prop_map(Op::LoseAnswer),
        1 => prop::sample::select(vec![1u64, 10, 31, 700]).prop_map(Op::Advance),
    ]
}

/// What a user asked for, per control space.
#[derive(Debug, Default, Clone, Copy)]
struct Asked {
    created: bool,
    deleted: bool,
}

#[allow(clippy::unwrap_used)]
fn ids(i: usize) -> (TenantId, ControlSpaceId) {
    (
        TenantId::parse("tenant-1").unwrap(),
        ControlSpaceId::parse(format!("cs-{i}")).unwrap(),
    )
}

struct System {
    clock: ManualClock,
    store: InMemoryLifecycleStore,
    remote: FakeKnowledgeFs,
    intake: CommandIntake<InMemoryLifecycleStore>,
    dispatcher: Dispatcher<InMemoryLifecycleStore, FakeKnowledgeFs>,
}

#[allow(clippy::unwrap_used)]
impl System {
    fn new() -> Self {
        let clock = ManualClock::new(Utc.timestamp_opt(1_900_000_000, 0).unwrap());
        let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
        let remote = FakeKnowledgeFs::new();
        let counter = Arc::new(AtomicUsize::new(0));
        let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()))
            .with_id_source(move || format!("id-{}", counter.fetch_add(1, Ordering::Relaxed)));
        let dispatcher =
            Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default())
                .with_clock(Arc::new(clock.clone()));
        Self {
            clock,
            store,
            remote,
            intake,
            dispatcher,
        }
    }

    async fn apply(&self, op: &Op, asked: &mut [Asked; SPACES]) {
        match op {
            Op::Create(i) => {
                let (tenant, space) = ids(*i);
                let key = IdempotencyKey::parse(format!("create-{i}")).unwrap();
                let request = CreateControlSpace::new(tenant, space, key, "Docs", "docs");
                let result = self.intake.create_control_space(&request).await;
                // The same key replays; a first create always succeeds.
                assert!(result.is_ok(), "{op:?}: {result:?}");
                asked[*i].created = true;
            }
            Op::Delete(i) => {
                let (tenant, space) = ids(*i);
                let key = IdempotencyKey::parse(format!("delete-{i}")).unwrap();
                let request = RequestDeletion::new(tenant, space, key);
                let result = self.intake.request_deletion(&request).await;
                if asked[*i].created {
                    assert!(result.is_ok(), "{op:?}: {result:?}");
                    asked[*i].deleted = true;
                } else {
                    assert!(
                        result.is_err(),
                        "deleting an unknown control space must fail"
                    );
                }
            }
            Op::Dispatch => {
                let owner = LeaseOwner::parse("worker-1").unwrap();
                self.dispatcher.dispatch_one(&owner, true).await.unwrap();
            }
            Op::ClaimAndCrash => {
                let request = ClaimRequest {
                    owner: LeaseOwner::parse("crashed-worker").unwrap(),
                    lease_duration: Duration::from_secs(30),
                    include_provision: true,
                    limit: 1,
                };
                self.store.claim(&request).await.unwrap();
            }
            Op::LoseAnswer(kind) => {
                let call = [RemoteCall::Provision, RemoteCall::Lookup][usize::from(*kind)];
                self.remote.push_fault(call, RemoteFault::LoseAck);
            }
            Op::Advance(secs) => self.clock.advance(Duration::from_secs(*secs)),
        }
    }

    /// Invariants that hold after every step.
    async fn check(&self, asked: &[Asked; SPACES]) {
        let created = asked.iter().filter(|a| a.created).count() as u64;
        assert!(
            self.remote.counters().spaces_created <= created,
            "more remote spaces than control spaces"
        );
        for (i, a) in asked.iter().enumerate() {
            let (tenant, space) = ids(i);
            let cs = self.store.control_space(&tenant, &space).await.unwrap();
            let Some(cs) = cs else {
                assert!(!a.created, "cs-{i} was created but has no row");
                continue;
            };
            let expected: &[ControlSpaceState] = if a.deleted {
                &[ControlSpaceState::Deleting, ControlSpaceState::Deleted]
            } else {
                &[ControlSpaceState::Provisioning, ControlSpaceState::Active]
            };
            assert!(expected.contains(&cs.state), "cs-{i}: {cs:?} for {a:?}");
            if cs.state == ControlSpaceState::Deleted {
                assert!(
                    !self.remote.has_space(&cs.provisioning_key),
                    "cs-{i} is deleted but its remote space exists"
                );
            }
        }
    }

    /// Lets every lease expire and every backoff pass, dispatching until nothing is due.
    async fn drain(&self) {
        let owner = LeaseOwner::parse("worker-1").unwrap();
        for _ in 0..30 {
            self.clock.advance(Duration::from_secs(700));
            for _ in 0..20 {
                if !self
                    .dispatcher
                    .dispatch_one(&owner, true)
                    .await
                    .unwrap()
                    .claimed
                {
                    break;
                }
            }
        }
    }

    /// The outcome the reference model predicts once everything drained.
    async fn check_settled(&self, asked: &[Asked; SPACES]) {
        for command in self.store.commands() {
            assert!(
                matches!(
                    command.status,
                    CommandStatus::Succeeded | CommandStatus::Superseded
                ),
                "{command:?}"
            );
        }
        for (i, a) in asked.iter().enumerate().filter(|(_, a)| a.created) {
            let (tenant, space) = ids(i);
            let cs = self
                .store
                .control_space(&tenant, &space)
                .await
                .unwrap()
                .unwrap();
            let remote = self.remote.has_space(&cs.provisioning_key);
            if a.deleted {
                assert_eq!(cs.state, ControlSpaceState::Deleted, "cs-{i}");
                assert!(!remote, "cs-{i}: remote space left after deletion");
            } else {
                assert_eq!(cs.state, ControlSpaceState::Active, "cs-{i}");
                assert!(remote, "cs-{i}: active without a remote space");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn lifecycle_sequences_match_the_reference_model(ops in prop::collection::vec(op(), 1..40)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        runtime.block_on(async {
            let system = System::new();
            let mut asked = [Asked::default(); SPACES];
            for op in &ops {
                system.apply(op, &mut asked).await;
                system.check(&asked).await;
            }
            system.drain().await;
            system.check(&asked).await;
            system.check_settled(&asked).await;
        });
    }
}
