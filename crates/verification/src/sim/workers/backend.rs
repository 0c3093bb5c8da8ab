//! The stores the workers simulation runs over: the in-memory store, or the real SQL store
//! (`SeaOrmLifecycleStore`, SQLite or PostgreSQL as `tenantry_store_seaorm::testing` picks)
//! behind [`SqlBridge`].
//!
//! The simulation runs on a paused current-thread runtime, where tokio moves virtual time
//! forward whenever every task waits. A SQL statement waits on a connection's I/O, so run
//! there it would let virtual time jump (leases expiring, timers firing, a pool's acquire
//! timeout passing) while the statement is on its way. The bridge instead runs the store on a
//! runtime of its own, on its own thread, and blocks the simulation's thread until the answer
//! comes: a statement takes no virtual time, as on the in-memory store, and the run stays a
//! function of its seed. The store's "now" is the simulated database clock, read on the
//! simulation's thread before each statement and handed to the store as a stopped clock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Duration;

use async_trait::async_trait;
use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::IntakePlan;
use tenantry_lifecycle::{ClaimedCommand, CommandRecord, ControlSpace, LeaseToken, Settlement};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandAdmin, CommandFilter, CommandQueue, ControlSpaceReader, IntakeStore,
    IntakeStoreError, LifecycleStore, SettleError, StoreError, Submitted,
};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

/// A store the workers simulation can run over: the lifecycle ports, plus the reads its
/// checks make between steps (answered at once: the simulation's thread is the only writer).
pub(super) trait Backend: LifecycleStore + Clone + 'static {
    /// Every command, in creation order.
    fn commands(&self) -> Vec<CommandRecord>;
    /// One command by id.
    fn command(&self, id: &CommandId) -> Option<CommandRecord>;
    /// Ends the lease of one processing command whose lease is live, for the planted bug
    /// `WorkerBug::ClaimWithoutExpiryCheck`; `false` when this store cannot (the SQL store:
    /// that bug runs over the in-memory store only).
    fn expire_one_live_lease(&self, now: chrono::DateTime<chrono::Utc>) -> bool;
}

impl Backend for InMemoryLifecycleStore {
    fn commands(&self) -> Vec<CommandRecord> {
        InMemoryLifecycleStore::commands(self)
    }

    fn command(&self, id: &CommandId) -> Option<CommandRecord> {
        InMemoryLifecycleStore::command(self, id)
    }

    fn expire_one_live_lease(&self, now: chrono::DateTime<chrono::Utc>) -> bool {
        let live = self.commands().into_iter().find(|r| {
            r.status == tenantry_lifecycle::CommandStatus::Processing
                && r.lease_expires_at.is_some_and(|at| at > now)
        });
        let Some(mut live) = live else {
            return false;
        };
        live.lease_expires_at = Some(now);
        self.put_command(live);
        true
    }
}

type Job = Box<dyn FnOnce(SeaOrmLifecycleStore) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// The SQL store on a thread and runtime of its own, called from the simulation by blocking
/// until it answers (module docs). Cloned into every simulated process; the thread ends when
/// the last clone is dropped.
#[derive(Clone)]
pub(super) struct SqlBridge {
    jobs: SyncSender<Job>,
    /// The store's clock: set to the database clock's reading before every statement.
    store_clock: ManualClock,
    /// The simulated database clock (follows the paused runtime).
    db_clock: ManualClock,
}

impl SqlBridge {
    /// A fresh migrated database (`tenantry_store_seaorm::testing::fresh_database`: SQLite, or
    /// the PostgreSQL server of a PostgreSQL test run) behind a
    /// new bridge thread, its store reading "now" from `db_clock`.
    ///
    /// # Errors
    /// When the thread or its runtime cannot start.
    pub(super) fn start(db_clock: ManualClock) -> Result<Self, String> {
        let store_clock = ManualClock::new(db_clock.now());
        let (jobs, inbox) = sync_channel::<Job>(0);
        let (ready, started) = sync_channel(1);
        let clock = store_clock.clone();
        std::thread::Builder::new()
            .name("sim-sql-store".to_owned())
            .spawn(move || serve(inbox, clock, ready))
            .map_err(|e| format!("cannot start the SQL store's thread: {e}"))?;
        started
            .recv()
            .map_err(|_| "the SQL store's thread ended before it was ready".to_owned())??;
        Ok(Self {
            jobs,
            store_clock,
            db_clock,
        })
    }

    /// Runs `f` on the store and waits (blocking this thread, so no virtual time passes) for
    /// its answer.
    fn block<T, F, Fut>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(SeaOrmLifecycleStore) -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        self.store_clock.set(self.db_clock.now());
        let (answer, answered) = sync_channel(1);
        let job: Job = Box::new(move |store| {
            Box::pin(async move {
                let _ = answer.send(f(store).await);
            })
        });
        #[allow(clippy::expect_used)]
        {
            self.jobs
                .send(job)
                .expect("the SQL store's thread is running");
            answered.recv().expect("the SQL store answered")
        }
    }
}

/// The bridge thread: builds the runtime and the database, reports ready, then runs each job
/// to its end in order; the database (and a SQLite file's folder) goes with the thread when
/// the last bridge is dropped.
fn serve(inbox: Receiver<Job>, clock: ManualClock, ready: SyncSender<Result<(), String>>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(format!("cannot start the SQL store's runtime: {e}")));
            return;
        }
    };
    let db = runtime.block_on(fresh_database());
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock));
    if ready.send(Ok(())).is_err() {
        return;
    }
    while let Ok(job) = inbox.recv() {
        runtime.block_on(job(store.clone()));
    }
    drop(store);
    runtime.block_on(async move { drop(db) });
}

// A read the checks depend on that fails ends the run loudly: a partial answer could make a
// check pass that should not (the drain's "nothing open", the drained state).
#[allow(clippy::panic)]
impl Backend for SqlBridge {
    fn commands(&self) -> Vec<CommandRecord> {
        let listed = self.block(|store| async move {
            let mut all = Vec::new();
            let mut after = None;
            loop {
                let filter = CommandFilter {
                    after: after.clone(),
                    limit: 500,
                    ..CommandFilter::default()
                };
                let page = store.list_commands(&filter).await?;
                let Some(last) = page.last() else {
                    return Ok::<_, StoreError>(all);
                };
                after = Some(last.id.clone());
                all.extend(page);
            }
        });
        listed.unwrap_or_else(|e| {
            panic!("the simulation could not list the SQL store's commands: {e}")
        })
    }

    fn command(&self, id: &CommandId) -> Option<CommandRecord> {
        let id = id.clone();
        self.block(move |store| async move { store.command_by_id(&id).await })
            .unwrap_or_else(|e| {
                panic!("the simulation could not read a command of the SQL store: {e}")
            })
    }

    fn expire_one_live_lease(&self, _now: chrono::DateTime<chrono::Utc>) -> bool {
        false
    }
}

#[async_trait]
impl CommandQueue for SqlBridge {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedCommand>, StoreError> {
        let request = request.clone();
        self.block(move |store| async move { store.claim(&request).await })
    }

    async fn renew_lease(
        &self,
        lease: &LeaseToken,
        lease_duration: Duration,
    ) -> Result<LeaseToken, SettleError> {
        let lease = lease.clone();
        self.block(move |store| async move { store.renew_lease(&lease, lease_duration).await })
    }

    async fn settle(&self, lease: &LeaseToken, settlement: &Settlement) -> Result<(), SettleError> {
        let (lease, settlement) = (lease.clone(), settlement.clone());
        self.block(move |store| async move { store.settle(&lease, &settlement).await })
    }

    async fn settle_many(
        &self,
        items: &[(LeaseToken, Settlement)],
    ) -> Result<Vec<Result<(), SettleError>>, StoreError> {
        let items = items.to_vec();
        self.block(move |store| async move { store.settle_many(&items).await })
    }

    async fn next_due_in(&self, include_provision: bool) -> Result<Option<Duration>, StoreError> {
        self.block(move |store| async move { store.next_due_in(include_provision).await })
    }

    async fn latest_provision(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<CommandRecord>, StoreError> {
        let (tenant_id, control_space_id) = (tenant_id.clone(), control_space_id.clone());
        self.block(move |store| async move {
            store.latest_provision(&tenant_id, &control_space_id).await
        })
    }

    async fn list_commands(
        &self,
        filter: &CommandFilter,
    ) -> Result<Vec<CommandRecord>, StoreError> {
        let filter = filter.clone();
        self.block(move |store| async move { store.list_commands(&filter).await })
    }
}

#[async_trait]
impl ControlSpaceReader for SqlBridge {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        let (tenant_id, control_space_id) = (tenant_id.clone(), control_space_id.clone());
        self.block(
            move |store| async move { store.control_space(&tenant_id, &control_space_id).await },
        )
    }

    async fn control_spaces(
        &self,
        keys: &[(TenantId, ControlSpaceId)],
    ) -> Result<Vec<Option<ControlSpace>>, StoreError> {
        let keys = keys.to_vec();
        self.block(move |store| async move { store.control_spaces(&keys).await })
    }
}

#[async_trait]
impl IntakeStore for SqlBridge {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        let plan = plan.clone();
        self.block(move |store| async move { store.submit(&plan).await })
    }

    async fn submit_many(&self, plans: &[IntakePlan]) -> Vec<Result<Submitted, IntakeStoreError>> {
        let plans = plans.to_vec();
        self.block(move |store| async move { store.submit_many(&plans).await })
    }

    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        let key = key.clone();
        self.block(move |store| async move { store.command_by_idempotency_key(&key).await })
    }
}
