//! Behaviour of the `ScopedWrites` runtime over the in-memory host storage (and once over
//! SQLite/PostgreSQL): serialization, fences, write-ahead intent, cancellation safety.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use tenantry_engine::scoped_writes::admin::{ClearTarget, FenceAdminError};
use tenantry_engine::scoped_writes::{FenceConfig, FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::{
    Binding, ClearRefused, DispatchOutcome, FailureRecord, FenceKey, FenceMarker, RecordKind,
    ScopeIdentity,
};
use tenantry_ports::clock::ManualClock;
use tenantry_ports::host_storage::fake::{InMemoryHostStorage, SetFault};
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings, HostStorageError};
use tokio::sync::{Notify, Semaphore};

mod fences;
mod metrics;
mod processes;
mod serialization;
mod skew;
mod spans;

type Writes = ScopedWrites<Gated>;
type Result<T, E = DispatchOutcome> = std::result::Result<T, ScopedWriteError<E>>;

fn binding() -> Binding {
    Binding::parse("inst-1").unwrap()
}

fn kb(id: &str) -> ScopeIdentity {
    ScopeIdentity::object(id)
}

/// Counts every await point (storage call or remote commit) and can park one of them until
/// the test releases it.
struct Gate {
    steps: AtomicUsize,
    park_at: Mutex<Option<usize>>,
    reached: Notify,
    release: Semaphore,
    log: Mutex<Vec<String>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            steps: AtomicUsize::new(0),
            park_at: Mutex::new(None),
            reached: Notify::new(),
            release: Semaphore::new(0),
            log: Mutex::new(Vec::new()),
        }
    }
}

impl Gate {
    fn parking_at(step: usize) -> Arc<Self> {
        let gate = Self::default();
        *gate.park_at.lock().unwrap() = Some(step);
        Arc::new(gate)
    }

    async fn step(&self, name: &str) {
        let n = self.steps.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push(name.to_owned());
        if *self.park_at.lock().unwrap() == Some(n) {
            self.reached.notify_one();
            let _permit = self.release.acquire().await.unwrap();
        }
    }

    fn open(&self) {
        self.release.add_permits(1_000);
    }
}

/// Host storage whose every call is a gate step.
struct Gated {
    inner: Arc<InMemoryHostStorage>,
    gate: Arc<Gate>,
}

#[async_trait]
impl HostStorage for Gated {
    async fn now_ms(&self) -> std::result::Result<i64, HostStorageError> {
        self.inner.now_ms().await
    }
    async fn keys(&self, binding: &Binding) -> std::result::Result<Vec<String>, HostStorageError> {
        self.gate.step("keys").await;
        self.inner.keys(binding).await
    }
    async fn get(
        &self,
        binding: &Binding,
        key: &str,
    ) -> std::result::Result<Option<Value>, HostStorageError> {
        self.gate.step("get").await;
        self.inner.get(binding, key).await
    }
    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> std::result::Result<(), HostStorageError> {
        self.gate
            .step(if value.is_null() { "set-null" } else { "set" })
            .await;
        self.inner.set(binding, key, value).await
    }
    async fn compare_and_set(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        value: &Value,
    ) -> std::result::Result<bool, HostStorageError> {
        let name = if value.is_null() {
            "cas-release"
        } else if expected.is_none_or(Value::is_null) {
            "cas-claim"
        } else {
            "cas-intent"
        };
        self.gate.step(name).await;
        self.inner
            .compare_and_set(binding, key, expected, value)
            .await
    }
}

#[async_trait]
impl HostStorageBindings for Gated {
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> std::result::Result<Vec<Binding>, HostStorageError> {
        self.inner.bindings_with_key_prefix(key_prefix).await
    }
}

const NOW: i64 = 1_700_000_000_000;

/// A clock stopped at `now` (Unix ms); it moves only when a test advances it.
fn clock_at(now: i64) -> Arc<ManualClock> {
    let start = chrono::DateTime::from_timestamp_millis(now).expect("a valid test time");
    Arc::new(ManualClock::new(start))
}

/// Claim settings for tests: a 150 s dispatch deadline, and short waits for claims of other
/// runtimes (the clocks are fixed, so a live claim only ends when it is released).
fn config() -> FenceConfig {
    FenceConfig {
        claim_poll: std::time::Duration::from_millis(1),
        claim_wait: std::time::Duration::from_secs(5),
        ..FenceConfig::with_deadline(std::time::Duration::from_secs(150))
    }
}

/// A runtime (another process, as far as claims go: its own owner, locks and cache) over
/// `storage`, with a clock fixed at `now` (Unix ms).
fn runtime_at(storage: &Arc<InMemoryHostStorage>, gate: &Arc<Gate>, now: i64) -> Writes {
    runtime_on(storage, gate, clock_at(now))
}

/// The same on `clock`.
fn runtime_on(
    storage: &Arc<InMemoryHostStorage>,
    gate: &Arc<Gate>,
    clock: Arc<ManualClock>,
) -> Writes {
    ScopedWrites::with_config(
        Arc::new(Gated {
            inner: storage.clone(),
            gate: gate.clone(),
        }),
        clock,
        config(),
    )
}

fn runtime(storage: &Arc<InMemoryHostStorage>, gate: &Arc<Gate>) -> Writes {
    runtime_at(storage, gate, NOW)
}

/// A database's clock, stopped at `now` (Unix ms), and an in-memory store on it.
fn store_at(now: i64) -> (Arc<ManualClock>, Arc<InMemoryHostStorage>) {
    let db = clock_at(now);
    let storage = Arc::new(InMemoryHostStorage::new().with_clock(db.clone()));
    (db, storage)
}

fn at(ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap()
}

/// An empty store on a database clock at `NOW` and a runtime over it.
fn fresh() -> (Arc<InMemoryHostStorage>, Writes) {
    let (_db, storage) = store_at(NOW);
    let writes = runtime(&storage, &Arc::new(Gate::default()));
    (storage, writes)
}

/// Whether a non-null fence record is stored for `scope`.
fn stored_fence(storage: &InMemoryHostStorage, scope: &ScopeIdentity) -> bool {
    match storage.peek(&binding(), scope.fence_key().as_str()) {
        None | Some(Ok(Value::Null)) => false,
        Some(_) => true,
    }
}

/// A remote commit that counts itself and ends with `outcome`.
struct Remote {
    started: AtomicUsize,
    finished: AtomicUsize,
}

impl Remote {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            started: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
        })
    }

    fn commit(
        self: &Arc<Self>,
        gate: &Arc<Gate>,
        outcome: Option<DispatchOutcome>,
    ) -> impl Future<Output = std::result::Result<u64, DispatchOutcome>> + Send + 'static {
        let (remote, gate) = (self.clone(), gate.clone());
        async move {
            remote.started.fetch_add(1, Ordering::SeqCst);
            gate.step("commit").await;
            remote.finished.fetch_add(1, Ordering::SeqCst);
            match outcome {
                None => Ok(7),
                Some(outcome) => Err(outcome),
            }
        }
    }
}

/// Writes `value` at `ke.data.v1.x` under `scope` (enforced fences) through `writes`.
async fn write_value<S: HostStorage + ?Sized + 'static>(
    writes: &ScopedWrites<S>,
    scope: &ScopeIdentity,
    value: Value,
) -> Result<(), Infallible> {
    writes
        .run(&binding(), scope, FenceMode::Enforce, |ctx| async move {
            ctx.write("ke.data.v1.x", value).await
        })
        .await
}

async fn dispatch(
    writes: &Writes,
    scope: &ScopeIdentity,
    remote: &Arc<Remote>,
    gate: &Arc<Gate>,
    outcome: Option<DispatchOutcome>,
) -> Result<u64> {
    let commit = remote.commit(gate, outcome);
    writes
        .run(&binding(), scope, FenceMode::Enforce, |ctx| async move {
            ctx.dispatch("provision knowledge space", commit).await
        })
        .await
}

fn assert_quiet(writes: &Writes) {
    assert_eq!(writes.lock_entries(), 0, "no lock entry remains");
    assert_eq!(writes.owner_count(), 0, "no owner remains");
}
