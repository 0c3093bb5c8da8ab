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
use tenantry_ports::host_storage::testing::{InMemoryHostStorage, SetFault};
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings, HostStorageError};
use tokio::sync::{Notify, Semaphore};

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

async fn write_value(
    writes: &Writes,
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

#[tokio::test]
async fn ambiguous_failure_in_scope_a_leaves_scope_b_writable() {
    let (storage, writes) = fresh();
    let remote = Remote::new();
    let gate = Arc::new(Gate::default());
    let err = dispatch(
        &writes,
        &kb("a"),
        &remote,
        &gate,
        Some(DispatchOutcome::OutcomeUnknown),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, ScopedWriteError::OutcomeUnknown { .. }),
        "{err:?}"
    );
    assert!(matches!(
        write_value(&writes, &kb("a"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
    write_value(&writes, &kb("b"), json!(2)).await.unwrap();
    write_value(&writes, &ScopeIdentity::Installation, json!(3))
        .await
        .unwrap();
    assert!(stored_fence(&storage, &kb("a")));
    assert!(!stored_fence(&storage, &kb("b")));
}

#[tokio::test]
async fn restarted_runtime_still_refuses_fenced_scope() {
    let (storage, writes) = fresh();
    let gate = Arc::new(Gate::default());
    let _ = dispatch(
        &writes,
        &kb("a"),
        &Remote::new(),
        &gate,
        Some(DispatchOutcome::OutcomeUnknown),
    )
    .await;
    drop(writes);
    let restarted = runtime(&storage, &gate);
    let err = write_value(&restarted, &kb("a"), json!(1))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ScopedWriteError::Fenced {
            binding: binding(),
            scope: kb("a"),
            key: kb("a").fence_key()
        }
    );
    write_value(&restarted, &kb("b"), json!(1)).await.unwrap();
}

#[tokio::test]
async fn installation_fence_blocks_every_scope_of_the_binding() {
    let (_storage, writes) = fresh();
    let other = Binding::parse("inst-2").unwrap();
    writes
        .fence(&binding(), &ScopeIdentity::Installation, "operator hold")
        .await;
    for scope in [kb("a"), kb("b"), ScopeIdentity::Installation] {
        let err = write_value(&writes, &scope, json!(1)).await.unwrap_err();
        assert!(
            matches!(&err, ScopedWriteError::Fenced { key, .. } if key.is_installation()),
            "{err:?}"
        );
    }
    let ok: Result<(), Infallible> = writes
        .run(&other, &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.write("k", json!(1)).await
        })
        .await;
    ok.unwrap();
}

#[tokio::test]
async fn write_ahead_intent_is_persisted_before_dispatch() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let gate = Arc::new(Gate::default());
    let writes = runtime(&storage, &gate);
    let seen = Arc::new(Mutex::new(None));
    let (storage2, seen2) = (storage.clone(), seen.clone());
    let commit = async move {
        *seen2.lock().unwrap() = Some(stored_fence(&storage2, &kb("a")));
        Ok::<_, DispatchOutcome>(1)
    };
    let r: Result<i32> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.dispatch("create", commit).await
        })
        .await;
    assert_eq!(r.unwrap(), 1);
    assert_eq!(
        *seen.lock().unwrap(),
        Some(true),
        "intent stored when the request went out"
    );
    assert!(!stored_fence(&storage, &kb("a")), "cleared after success");
    assert_eq!(
        storage.peek(&binding(), kb("a").fence_key().as_str()),
        Some(Ok(Value::Null))
    );
    assert!(!writes.is_fenced_in_process(&binding(), &kb("a")));
}

#[tokio::test]
async fn answered_or_not_dispatched_failure_clears_the_intent() {
    for outcome in [
        DispatchOutcome::Answered { status: None },
        DispatchOutcome::answered(409),
        DispatchOutcome::NotDispatched,
    ] {
        let (storage, writes) = fresh();
        let gate = Arc::new(Gate::default());
        let err = dispatch(&writes, &kb("a"), &Remote::new(), &gate, Some(outcome))
            .await
            .unwrap_err();
        assert_eq!(err, ScopedWriteError::Operation(outcome));
        assert!(!stored_fence(&storage, &kb("a")), "{outcome:?}");
        write_value(&writes, &kb("a"), json!(1)).await.unwrap();
    }
}

#[tokio::test]
async fn unknown_outcome_replaces_the_intent_with_a_fence_recording_the_failure() {
    let (storage, writes) = fresh();
    let gate = Arc::new(Gate::default());
    let err = dispatch(
        &writes,
        &kb("a"),
        &Remote::new(),
        &gate,
        Some(DispatchOutcome::OutcomeUnknown),
    )
    .await
    .unwrap_err();
    assert!(matches!(
        err,
        ScopedWriteError::OutcomeUnknown {
            error: Some(DispatchOutcome::OutcomeUnknown),
            ..
        }
    ));
    assert!(stored_fence(&storage, &kb("a")));
    let entries = writes.list_fences(&binding()).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].kind, RecordKind::Fence);
    let marker = entries[0].marker.clone().unwrap();
    assert_eq!(marker.scope.as_deref(), Some("a"));
    assert_eq!(marker.reason, "provision knowledge space");
    assert_eq!(marker.fenced_at_ms, Some(1_700_000_000_000));
    assert_eq!(marker.kind, RecordKind::Fence, "not left as the intent");
    assert_eq!(
        marker.failure,
        Some(FailureRecord {
            kind: "outcome_unknown".into(),
            detail: DispatchOutcome::OutcomeUnknown.to_string(),
        }),
        "the fence records the failure, not only the intent's label"
    );
}

#[tokio::test]
async fn unknown_outcome_reported_after_a_dispatch_still_persists_the_fence() {
    // The dispatch succeeded (its intent is the run's claim), then the operation reports an
    // ambiguity of its own: the stored record must become the fence, with the failure.
    let (storage, writes) = fresh();
    let r: Result<(), DispatchOutcome> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.dispatch("upload", async { Ok::<_, DispatchOutcome>(()) })
                .await?;
            Err(ScopedWriteError::OutcomeUnknown {
                scope: ctx.scope().clone(),
                reason: "index state unreadable after upload".into(),
                error: None,
            })
        })
        .await;
    assert!(matches!(r, Err(ScopedWriteError::OutcomeUnknown { .. })));
    let stored = storage
        .peek(&binding(), kb("a").fence_key().as_str())
        .unwrap()
        .unwrap();
    let marker = FenceMarker::from_value(&stored).unwrap();
    assert_eq!(marker.kind, RecordKind::Fence, "{stored}");
    assert_eq!(
        marker.failure.map(|f| (f.kind, f.detail)),
        Some((
            "reported".into(),
            "index state unreadable after upload".into()
        ))
    );
    let restarted = runtime(&storage, &Arc::new(Gate::default()));
    assert!(matches!(
        write_value(&restarted, &kb("a"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
}

#[tokio::test]
async fn intent_not_persisted_means_not_dispatched_and_fenced() {
    let (storage, writes) = fresh();
    // The claim goes through; the intent that names the dispatch fails.
    storage.fail_cas([SetFault::Pass, SetFault::BeforeWrite]);
    let remote = Remote::new();
    let gate = Arc::new(Gate::default());
    let err = dispatch(&writes, &kb("a"), &remote, &gate, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ScopedWriteError::IntentNotPersisted(_)),
        "{err:?}"
    );
    assert_eq!(remote.started.load(Ordering::SeqCst), 0, "not dispatched");
    assert!(writes.is_fenced_in_process(&binding(), &kb("a")));
}

#[tokio::test]
async fn host_write_failure_fences_the_scope_and_returns_the_failure() {
    for fault in [SetFault::BeforeWrite, SetFault::AfterWrite] {
        let (storage, writes) = fresh();
        storage.fail_sets([fault]);
        let err = write_value(&writes, &kb("a"), json!({"v": 1}))
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ScopedWriteError::HostWrite(HostStorageError::Storage {
                    error: tenantry_ports::StoreError::Unavailable { .. },
                    ..
                })
            ),
            "{err:?}"
        );
        assert!(writes.is_fenced_in_process(&binding(), &kb("a")));
        assert!(
            stored_fence(&storage, &kb("a")),
            "the fence marker itself was persisted"
        );
        assert!(matches!(
            write_value(&writes, &kb("a"), json!(2)).await,
            Err(ScopedWriteError::Fenced { .. })
        ));
    }
}

#[tokio::test]
async fn invalid_key_fails_without_fencing() {
    let (_storage, writes) = fresh();
    let r: Result<(), Infallible> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.write("", json!(1)).await
        })
        .await;
    assert!(matches!(
        r,
        Err(ScopedWriteError::HostWrite(
            HostStorageError::InvalidKey { .. }
        ))
    ));
    assert!(!writes.is_fenced_in_process(&binding(), &kb("a")));
}

#[tokio::test]
async fn fence_persist_failure_is_logged_and_fence_holds_in_process() {
    let (storage, writes) = fresh();
    // The host write fails, then persisting its fence fails too.
    storage.fail_sets([SetFault::BeforeWrite, SetFault::BeforeWrite]);
    let err = write_value(&writes, &kb("a"), json!(1)).await.unwrap_err();
    assert!(matches!(err, ScopedWriteError::HostWrite(_)));
    let stored_kind = |storage: &InMemoryHostStorage| {
        storage
            .peek(&binding(), kb("a").fence_key().as_str())
            .and_then(|v| FenceMarker::from_value(&v.unwrap()))
            .map(|m| m.kind)
    };
    // Only the run's claim is stored (other processes wait for it, then treat it as a fence).
    assert_eq!(stored_kind(&storage), Some(RecordKind::Intent));
    assert!(writes.is_fenced_in_process(&binding(), &kb("a")));
    let entries = writes.list_fences(&binding()).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert!(!entries[0].persisted);
    assert_eq!(entries[0].kind, RecordKind::Fence);
    assert!(matches!(
        write_value(&writes, &kb("a"), json!(2)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
    // Before refusing, the next write persisted the in-process fence again.
    assert_eq!(stored_kind(&storage), Some(RecordKind::Fence));
    assert!(writes.list_fences(&binding()).await.unwrap()[0].persisted);
}

#[tokio::test]
async fn operation_reporting_outcome_unknown_fences_its_scope() {
    let (storage, writes) = fresh();
    let r: Result<(), Infallible> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            Err(ScopedWriteError::OutcomeUnknown {
                scope: ctx.scope().clone(),
                reason: "ambiguous remote mutation".into(),
                error: None,
            })
        })
        .await;
    assert!(r.is_err());
    assert!(stored_fence(&storage, &kb("a")));
    assert!(writes.is_fenced_in_process(&binding(), &kb("a")));
}

#[tokio::test]
async fn deterministic_error_before_dispatch_does_not_fence() {
    let (storage, writes) = fresh();
    let r: Result<(), &str> = writes
        .run(
            &binding(),
            &kb("a"),
            FenceMode::Enforce,
            |_ctx| async move { Err(ScopedWriteError::Operation("invalid request")) },
        )
        .await;
    assert_eq!(r, Err(ScopedWriteError::Operation("invalid request")));
    assert!(!stored_fence(&storage, &kb("a")));
    write_value(&writes, &kb("a"), json!(1)).await.unwrap();
}

#[tokio::test]
async fn fence_read_failure_fails_closed_and_is_retried() {
    let (storage, writes) = fresh();
    for failed_reads in [1, 2] {
        storage.fail_gets(failed_reads);
        let err = write_value(&writes, &kb("a"), json!(1)).await.unwrap_err();
        assert!(
            matches!(err, ScopedWriteError::FenceStateUnavailable { .. }),
            "{err:?}"
        );
        storage.fail_gets(0);
        assert_eq!(
            storage.peek(&binding(), "ke.data.v1.x"),
            None,
            "nothing written"
        );
    }
    write_value(&writes, &kb("a"), json!(1)).await.unwrap();
    let before = storage.calls();
    write_value(&writes, &kb("a"), json!(2)).await.unwrap();
    let after = storage.calls();
    assert_eq!(
        (after.get - before.get, after.cas - before.cas),
        (1, 3),
        "a write to a released scope reads the installation's record, and takes, renews \
         (before the host write) and releases the claim by compare-and-set without reading \
         the scope's record first"
    );
    // A record another process left (here a fence) is not the tombstone: the claim's swap
    // fails, the record is read and decides (fail closed).
    storage
        .set(
            &binding(),
            kb("a").fence_key().as_str(),
            &FenceMarker::new(&kb("a"), "elsewhere", 1).to_value(),
        )
        .await
        .unwrap();
    let before = storage.calls();
    let err = write_value(&writes, &kb("a"), json!(3)).await.unwrap_err();
    assert!(matches!(err, ScopedWriteError::Fenced { .. }), "{err:?}");
    let after = storage.calls();
    assert_eq!((after.get - before.get, after.cas - before.cas), (2, 1));
}

#[tokio::test]
async fn unreadable_fence_record_counts_as_fence() {
    let (storage, writes) = fresh();
    storage.put_raw(&binding(), kb("a").fence_key().as_str(), "{torn");
    storage.put_raw(&binding(), kb("c").fence_key().as_str(), "null");
    assert!(matches!(
        write_value(&writes, &kb("a"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
    write_value(&writes, &kb("c"), json!(1)).await.unwrap();
    let entries = writes.list_fences(&binding()).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].marker, None);
    assert_eq!(entries[0].kind, RecordKind::Fence);
}

#[tokio::test]
async fn allow_fenced_passes_through_and_clear_writes_null_tombstone() {
    let (storage, writes) = fresh();
    writes.fence(&binding(), &kb("a"), "ambiguous").await;
    let r: Result<(), Infallible> = writes
        .run(
            &binding(),
            &kb("a"),
            FenceMode::AllowFenced,
            |ctx| async move {
                ctx.write("ke.config.v1.a", Value::Null).await?;
                ctx.clear_fence().await;
                Ok(())
            },
        )
        .await;
    r.unwrap();
    assert_eq!(
        storage.peek(&binding(), kb("a").fence_key().as_str()),
        Some(Ok(Value::Null))
    );
    write_value(&writes, &kb("a"), json!(1)).await.unwrap();
    // The restarted runtime sees the tombstone, not a fence.
    let restarted = runtime(&storage, &Arc::new(Gate::default()));
    write_value(&restarted, &kb("a"), json!(2)).await.unwrap();
}

#[tokio::test]
async fn operator_clears_fence_by_scope_or_key() {
    let (storage, writes) = fresh();
    writes.fence(&binding(), &kb("a"), "ambiguous").await;
    let outcome = writes
        .clear(
            &binding(),
            &ClearTarget::Scope(kb("a")),
            "reconciled with remote",
        )
        .await
        .unwrap();
    assert!(outcome.cleared);
    write_value(&writes, &kb("a"), json!(1)).await.unwrap();
    storage.put_raw(&binding(), "ke.fence.v1.unknown", "\u{1}garbage");
    let writes = runtime(&storage, &Arc::new(Gate::default()));
    let key = FenceKey::from_storage_key("ke.fence.v1.unknown").unwrap();
    assert_eq!(writes.list_fences(&binding()).await.unwrap()[0].key, key);
    let outcome = writes
        .clear(
            &binding(),
            &ClearTarget::Key(key),
            "record unreadable, remote checked",
        )
        .await
        .unwrap();
    assert!(outcome.cleared);
    assert!(writes.list_fences(&binding()).await.unwrap().is_empty());
}

#[tokio::test]
async fn nested_run_for_same_scope_in_same_task_does_not_deadlock() {
    let (storage, writes) = fresh();
    let inner_writes = writes.clone();
    let r: Result<u32, Infallible> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.write("outer", json!(1)).await?;
            let nested: Result<u32, Infallible> = inner_writes
                .run(
                    &binding(),
                    &kb("a"),
                    FenceMode::Enforce,
                    |inner| async move {
                        inner.write("inner", json!(2)).await?;
                        Ok(2)
                    },
                )
                .await;
            nested
        })
        .await;
    assert_eq!(r.unwrap(), 2);
    assert_eq!(storage.peek(&binding(), "inner"), Some(Ok(json!(2))));
    assert_quiet(&writes);
}

#[tokio::test]
async fn writes_to_one_scope_are_serialized() {
    let (_storage, writes) = fresh();
    let active = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (writes, active, max) = (writes.clone(), active.clone(), max.clone());
        tasks.push(tokio::spawn(async move {
            let r: Result<(), Infallible> = writes
                .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
                    let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    ctx.write("k", json!(now)).await?;
                    active.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                })
                .await;
            r.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(max.load(Ordering::SeqCst), 1);
    assert_quiet(&writes);
}

#[tokio::test]
async fn scope_lock_map_does_not_grow_without_bound() {
    let (_storage, writes) = fresh();
    for i in 0..500 {
        write_value(&writes, &kb(&format!("kb-{i}")), json!(i))
            .await
            .unwrap();
    }
    assert_quiet(&writes);
}

#[tokio::test]
async fn revoke_installation_releases_locks_owners_and_fence_cache() {
    let storage = Arc::new(InMemoryHostStorage::new());
    // The fence: get, get, claim, set (steps 0-3); the write: get, get, claim, set parks.
    let gate = Gate::parking_at(7);
    let writes = runtime(&storage, &gate);
    writes.fence(&binding(), &kb("z"), "x").await;
    let w = writes.clone();
    let held = tokio::spawn(async move { write_value(&w, &kb("a"), json!(1)).await });
    gate.reached.notified().await;
    assert_eq!(writes.lock_entries(), 1);
    assert_eq!(writes.owner_count(), 1);
    assert_eq!(writes.cached_bindings(), 1);
    writes.revoke_installation(&binding());
    assert_eq!(writes.lock_entries(), 0);
    assert_eq!(writes.owner_count(), 0);
    assert_eq!(writes.cached_bindings(), 0);
    gate.open();
    held.await.unwrap().unwrap();
    writes.settled().await;
    assert_quiet(&writes);
    // The fence is still persisted: the next write reloads it.
    assert!(matches!(
        write_value(&writes, &kb("z"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
}

/// What a cancellation test expects once everything settled.
#[derive(Debug, PartialEq)]
struct Settled {
    commit_started: usize,
    commit_finished: usize,
    fenced_in_process: bool,
    fenced_in_storage: bool,
}

/// Drops a dispatched mutation's future at await point `step` and returns the settled state,
/// or `None` when the run finished before reaching that step.
async fn cancel_dispatch_at(
    step: usize,
    outcome: Option<DispatchOutcome>,
) -> Option<(Settled, Vec<String>)> {
    let storage = Arc::new(InMemoryHostStorage::new());
    // An old tombstoned fence of another scope makes the load read a record too.
    storage
        .set(&binding(), kb("old").fence_key().as_str(), &Value::Null)
        .await
        .unwrap();
    let gate = Gate::parking_at(step);
    let writes = runtime(&storage, &gate);
    let remote = Remote::new();
    let scope = kb("a");
    let fut = dispatch(&writes, &scope, &remote, &gate, outcome);
    tokio::select! {
        _ = fut => { return None; }
        () = gate.reached.notified() => {}
    }
    // The caller's future is dropped here, at `step`.
    gate.open();
    writes.settled().await;
    assert_quiet(&writes);
    let settled = Settled {
        commit_started: remote.started.load(Ordering::SeqCst),
        commit_finished: remote.finished.load(Ordering::SeqCst),
        fenced_in_process: writes.is_fenced_in_process(&binding(), &kb("a")),
        fenced_in_storage: stored_fence(&storage, &kb("a")),
    };
    // A restarted runtime agrees with the settled state.
    let restarted = runtime(&storage, &Arc::new(Gate::default()));
    let refused = matches!(
        write_value(&restarted, &kb("a"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    );
    assert_eq!(refused, settled.fenced_in_storage);
    Some((settled, gate.log.lock().unwrap().clone()))
}

#[tokio::test]
async fn cancellation_at_every_await_point_of_a_dispatched_mutation() {
    for outcome in [
        None,
        Some(DispatchOutcome::answered(409)),
        Some(DispatchOutcome::OutcomeUnknown),
    ] {
        let mut step = 0;
        while let Some((settled, log)) = cancel_dispatch_at(step, outcome).await {
            let parked = log[step].as_str();
            let dispatched = matches!(parked, "cas-intent" | "commit" | "set" | "cas-release");
            let fenced = dispatched && outcome == Some(DispatchOutcome::OutcomeUnknown);
            assert_eq!(
                settled,
                Settled {
                    commit_started: usize::from(dispatched),
                    commit_finished: usize::from(dispatched),
                    fenced_in_process: fenced,
                    fenced_in_storage: fenced,
                },
                "outcome {outcome:?}, cancelled at step {step} ({parked}), log {log:?}"
            );
            step += 1;
        }
        assert!(
            step >= 4,
            "get, get, claim, intent, commit (+ fence or release) were all visited: {step}"
        );
    }
}

/// Drops a serialized host write at await point `step`.
async fn cancel_write_at(
    step: usize,
    fault: Option<SetFault>,
) -> Option<(Settled, Vec<String>, Option<Value>)> {
    let storage = Arc::new(InMemoryHostStorage::new());
    storage
        .set(
            &binding(),
            kb("old").fence_key().as_str(),
            &json!({"reason": "old"}),
        )
        .await
        .unwrap();
    if let Some(fault) = fault {
        storage.fail_sets([fault]);
    }
    let gate = Gate::parking_at(step);
    let writes = runtime(&storage, &gate);
    let op_gate = gate.clone();
    let (b, scope) = (binding(), kb("a"));
    let fut = writes.run(&b, &scope, FenceMode::Enforce, |ctx| async move {
        // An await point of the operation itself, before its write.
        op_gate.step("operation").await;
        ctx.write::<Infallible>("ke.data.v1.x", json!({"v": 1}))
            .await
    });
    tokio::select! {
        _ = fut => { return None; }
        () = gate.reached.notified() => {}
    }
    gate.open();
    writes.settled().await;
    assert_quiet(&writes);
    let settled = Settled {
        commit_started: 0,
        commit_finished: 0,
        fenced_in_process: writes.is_fenced_in_process(&binding(), &kb("a")),
        fenced_in_storage: stored_fence(&storage, &kb("a")),
    };
    let value = storage.peek(&binding(), "ke.data.v1.x").map(|v| v.unwrap());
    Some((settled, gate.log.lock().unwrap().clone(), value))
}

#[tokio::test]
async fn cancellation_at_every_await_point_of_a_serialized_write() {
    for fault in [
        None,
        Some(SetFault::AfterWrite),
        Some(SetFault::BeforeWrite),
    ] {
        let mut step = 0;
        while let Some((settled, log, value)) = cancel_write_at(step, fault).await {
            let parked = log[step].as_str();
            // Cancelled before the host write was started (before the claim's renewal, the
            // first step of the write's own task): nothing written, nothing fenced.
            let sent = matches!(parked, "cas-intent" | "set" | "cas-release");
            let fenced = sent && fault.is_some();
            assert_eq!(
                settled.fenced_in_process, fenced,
                "{fault:?} step {step} {log:?}"
            );
            assert_eq!(
                settled.fenced_in_storage, fenced,
                "{fault:?} step {step} {log:?}"
            );
            let stored = sent && fault != Some(SetFault::BeforeWrite);
            assert_eq!(value.is_some(), stored, "{fault:?} step {step} {log:?}");
            step += 1;
        }
        assert!(
            step >= 4,
            "get, get, claim, operation, write were all visited: {step}"
        );
    }
}

#[tokio::test]
async fn cancelled_while_waiting_for_the_lock_leaves_no_entry() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let gate = Gate::parking_at(3); // get, get, claim, then the first write's set parks
    let writes = runtime(&storage, &gate);
    let w = writes.clone();
    let holder = tokio::spawn(async move { write_value(&w, &kb("a"), json!(1)).await });
    gate.reached.notified().await;
    {
        let scope = kb("a");
        let waiter = write_value(&writes, &scope, json!(2));
        tokio::pin!(waiter);
        for _ in 0..3 {
            tokio::select! {
                biased;
                _ = &mut waiter => panic!("the lock is held"),
                () = tokio::task::yield_now() => {}
            }
        }
    } // waiter dropped while queued on the lock
    gate.open();
    holder.await.unwrap().unwrap();
    writes.settled().await;
    assert_quiet(&writes);
    assert_eq!(storage.peek(&binding(), "ke.data.v1.x"), Some(Ok(json!(1))));
}

#[tokio::test]
async fn dispatched_commit_keeps_the_lock_after_caller_is_dropped() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let gate = Gate::parking_at(4); // get, get, claim, intent, commit parks
    let writes = runtime(&storage, &gate);
    let remote = Remote::new();
    {
        let scope = kb("a");
        let fut = dispatch(&writes, &scope, &remote, &gate, None);
        tokio::select! {
            _ = fut => panic!("parked"),
            () = gate.reached.notified() => {}
        }
    }
    assert_eq!(
        writes.lock_entries(),
        1,
        "the spawned commit still holds the scope"
    );
    let w = writes.clone();
    let next = tokio::spawn(async move { write_value(&w, &kb("a"), json!(9)).await });
    tokio::task::yield_now().await;
    assert!(
        !next.is_finished(),
        "the next write waits for the commit to settle"
    );
    gate.open();
    next.await.unwrap().unwrap();
    writes.settled().await;
    assert_eq!(remote.finished.load(Ordering::SeqCst), 1);
    assert!(!stored_fence(&storage, &kb("a")));
    assert_quiet(&writes);
}

#[tokio::test]
async fn restarted_runtime_over_sql_storage_still_refuses_fenced_scope() {
    let db = tenantry_store_seaorm::testing::fresh_database().await;
    let storage: Arc<dyn HostStorage> = Arc::new(
        tenantry_store_seaorm::host_storage::SeaOrmHostStorage::new(&db.db),
    );
    let writes = ScopedWrites::new(storage.clone());
    let r: Result<(), DispatchOutcome> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.dispatch("delete", async {
                Err::<(), _>(DispatchOutcome::OutcomeUnknown)
            })
            .await
        })
        .await;
    assert!(matches!(r, Err(ScopedWriteError::OutcomeUnknown { .. })));
    drop(writes);
    let restarted = ScopedWrites::new(storage);
    let r: Result<(), Infallible> = restarted
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.write("k", json!(1)).await
        })
        .await;
    assert!(matches!(r, Err(ScopedWriteError::Fenced { .. })));
    let r: Result<(), Infallible> = restarted
        .run(&binding(), &kb("b"), FenceMode::Enforce, |ctx| async move {
            ctx.write("k", json!(1)).await
        })
        .await;
    r.unwrap();
}

#[tokio::test]
async fn clear_waits_for_a_dispatch_in_flight_in_the_same_process() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let gate = Gate::parking_at(4); // get, get, claim, intent, commit parks
    let writes = runtime(&storage, &gate);
    let remote = Remote::new();
    let (w, g, r) = (writes.clone(), gate.clone(), remote.clone());
    let dispatching = tokio::spawn(async move {
        dispatch(&w, &kb("a"), &r, &g, Some(DispatchOutcome::OutcomeUnknown)).await
    });
    gate.reached.notified().await;
    let w = writes.clone();
    let clearing = tokio::spawn(async move {
        w.clear(&binding(), &ClearTarget::Scope(kb("a")), "reconciled")
            .await
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        !clearing.is_finished(),
        "the clear waits for the scope lock held by the dispatch"
    );
    gate.open();
    assert!(matches!(
        dispatching.await.unwrap(),
        Err(ScopedWriteError::OutcomeUnknown { .. })
    ));
    let outcome = clearing.await.unwrap().unwrap();
    assert!(
        outcome.cleared,
        "the clear removed the fence the dispatch left"
    );
    assert!(!stored_fence(&storage, &kb("a")));
    assert!(!writes.is_fenced_in_process(&binding(), &kb("a")));
    write_value(&writes, &kb("a"), json!(1)).await.unwrap();
}

#[tokio::test]
async fn listing_tells_intents_from_fences_and_a_young_intent_is_not_cleared() {
    let (db, storage) = store_at(NOW);
    let gate = Gate::parking_at(4); // the dispatch parks in its commit
    let holder = runtime(&storage, &gate);
    let remote = Remote::new();
    let (w, g, r) = (holder.clone(), gate.clone(), remote.clone());
    let dispatching = tokio::spawn(async move { dispatch(&w, &kb("a"), &r, &g, None).await });
    gate.reached.notified().await;
    holder.fence(&binding(), &kb("f"), "operator hold").await;

    // Another process, 149 s later: the intent expires at 180 s (deadline + margin).
    db.set(at(NOW + 149_000));
    let operator = runtime_at(&storage, &Arc::new(Gate::default()), NOW + 149_000);
    let listed = operator.list_all_fences(None).await.unwrap();
    let kinds: Vec<_> = listed
        .iter()
        .map(|f| {
            (
                f.entry.marker.as_ref().unwrap().scope.clone().unwrap(),
                f.entry.kind,
            )
        })
        .collect();
    assert_eq!(kinds.len(), 2, "{listed:?}");
    assert!(kinds.contains(&("a".to_owned(), RecordKind::Intent)));
    assert!(kinds.contains(&("f".to_owned(), RecordKind::Fence)));
    let err = operator
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "looks stuck")
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            FenceAdminError::Refused(ClearRefused::IntentLive {
                expires_at_ms,
                remaining_ms: 31_000,
                ..
            }) if *expires_at_ms == NOW + 180_000
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("can be cleared from then on"),
        "{err}"
    );
    assert!(stored_fence(&storage, &kb("a")), "nothing cleared");
    gate.open();
    assert_eq!(dispatching.await.unwrap().unwrap(), 7);
    assert!(!stored_fence(&storage, &kb("a")), "the claim was released");

    // An intent left by a process that vanished: past the deadline an operator may clear it.
    let ghost = FenceMarker::intent(&kb("b"), "upload", "ghost", NOW, NOW + 180_000);
    storage
        .set(&binding(), kb("b").fence_key().as_str(), &ghost.to_value())
        .await
        .unwrap();
    db.set(at(NOW + 180_000));
    let later = runtime_at(&storage, &Arc::new(Gate::default()), NOW + 180_000);
    let outcome = later
        .clear(
            &binding(),
            &ClearTarget::Scope(kb("b")),
            "upload verified absent",
        )
        .await
        .unwrap();
    assert!(outcome.cleared);
}

/// The wait for another process's claim is timed on the runtime's clock port: on a paused
/// runtime a minute of tokio's time changes nothing; the write gives up (`ScopeBusy`) once the
/// runtime's clock advanced `claim_wait` (5 s).
#[tokio::test(start_paused = true)]
async fn the_claim_wait_is_timed_on_the_runtime_clock() {
    let (_db, storage) = store_at(NOW);
    let ghost = FenceMarker::intent(&kb("a"), "upload", "ghost", NOW, NOW + 180_000);
    storage
        .set(&binding(), kb("a").fence_key().as_str(), &ghost.to_value())
        .await
        .unwrap();
    let clock = clock_at(NOW);
    let writes = runtime_on(&storage, &Arc::new(Gate::default()), clock.clone());
    let mut waiting = tokio::spawn(async move { write_value(&writes, &kb("a"), json!(1)).await });
    tokio::time::sleep(std::time::Duration::from_secs(60)).await;
    assert!(
        !waiting.is_finished(),
        "tokio's clock does not pace the wait"
    );
    clock.advance(std::time::Duration::from_millis(4_900));
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished(), "4.9 s of 5 s");
    clock.advance(std::time::Duration::from_millis(1_100));
    let r = (&mut waiting).await.unwrap();
    assert!(
        matches!(&r, Err(ScopedWriteError::ScopeBusy { owner, .. }) if owner == "ghost"),
        "{r:?}"
    );
    assert_eq!(storage.peek(&binding(), "ke.data.v1.x"), None);
}

#[tokio::test]
async fn expired_intent_of_a_vanished_process_counts_as_a_fence() {
    let (db, storage) = store_at(NOW + 180_000);
    let ghost = FenceMarker::intent(&kb("a"), "upload", "ghost", NOW, NOW + 180_000);
    storage
        .set(&binding(), kb("a").fence_key().as_str(), &ghost.to_value())
        .await
        .unwrap();
    let after = runtime_at(&storage, &Arc::new(Gate::default()), NOW + 180_000);
    assert!(matches!(
        write_value(&after, &kb("a"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
    // While it is live, a write waits at most `claim_wait`, then reports the holder.
    db.set(at(NOW + 1));
    let impatient = ScopedWrites::with_config(
        storage.clone(),
        clock_at(NOW + 1),
        FenceConfig {
            claim_wait: std::time::Duration::ZERO,
            ..config()
        },
    );
    let r: Result<(), Infallible> = impatient
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.write("k", json!(1)).await
        })
        .await;
    assert!(
        matches!(&r, Err(ScopedWriteError::ScopeBusy { owner, .. }) if owner == "ghost"),
        "{r:?}"
    );
    assert_eq!(storage.peek(&binding(), "k"), None);
}

/// Two runtimes over one storage behave as two processes over one database: a dispatch in
/// one serializes the other's write on the same scope, the fence it leaves is seen by the
/// other before its next write, and a clear in the other reaches the first.
async fn runtimes_share_claims_fences_and_clears<S>(storage: Arc<S>)
where
    S: HostStorage + HostStorageBindings + ?Sized + 'static,
{
    let a = ScopedWrites::with_config(storage.clone(), clock_at(NOW), config());
    let b_clock = clock_at(NOW);
    let b = ScopedWrites::with_config(storage.clone(), b_clock.clone(), config());
    async fn write<S: HostStorage + ?Sized + 'static>(
        w: &ScopedWrites<S>,
        scope: ScopeIdentity,
        v: i64,
    ) -> Result<(), Infallible> {
        w.run(&binding(), &scope, FenceMode::Enforce, |ctx| async move {
            ctx.write("ke.data.v1.x", json!(v)).await
        })
        .await
    }
    // b writes first, so whatever b keeps in process is warm.
    write(&b, kb("a"), 1).await.unwrap();

    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let commit = {
        let (started, release) = (started.clone(), release.clone());
        async move {
            started.notify_one();
            release.notified().await;
            Err::<(), _>(DispatchOutcome::OutcomeUnknown)
        }
    };
    let a2 = a.clone();
    let dispatching = tokio::spawn(async move {
        a2.run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.dispatch("upload document", commit).await
        })
        .await
    });
    started.notified().await;
    let b2 = b.clone();
    let mut waiting = tokio::spawn(async move { write(&b2, kb("a"), 2).await });
    // Real time for b's reads (database I/O); then b polls on its own clock, which stands
    // still until the test advances it, so only the claim can keep b from writing here.
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(200), &mut waiting)
            .await
            .is_err(),
        "b's write on the scope waits while a's dispatch holds its claim"
    );
    write(&b, kb("other"), 3).await.unwrap();
    release.notify_one();
    assert!(matches!(
        dispatching.await.unwrap(),
        Err(ScopedWriteError::OutcomeUnknown { .. })
    ));
    // b's next poll is due within its longest pause (1 s).
    b_clock.advance(std::time::Duration::from_secs(1));
    let err = waiting.await.unwrap().unwrap_err();
    assert!(
        matches!(&err, ScopedWriteError::Fenced { key, .. } if *key == kb("a").fence_key()),
        "b sees a's fence before its write: {err:?}"
    );
    assert_eq!(
        storage.get(&binding(), "ke.data.v1.x").await.unwrap(),
        Some(json!(3)),
        "the refused write wrote nothing"
    );

    assert!(a.is_fenced_in_process(&binding(), &kb("a")));
    let outcome = b
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "upload verified")
        .await
        .unwrap();
    assert!(outcome.cleared);
    write(&a, kb("a"), 4).await.unwrap();
    assert!(
        !a.is_fenced_in_process(&binding(), &kb("a")),
        "the clear in b reached a"
    );
    a.settled().await;
    b.settled().await;
    assert_eq!(
        storage
            .get(&binding(), kb("a").fence_key().as_str())
            .await
            .unwrap(),
        Some(Value::Null),
        "no claim left behind"
    );
}

#[tokio::test]
async fn two_runtimes_over_one_in_memory_storage_share_claims_fences_and_clears() {
    runtimes_share_claims_fences_and_clears(Arc::new(InMemoryHostStorage::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_over_one_database_share_claims_fences_and_clears() {
    // SQLite file, or PostgreSQL when TENANTRY_TEST_PG_URL is set.
    let db = tenantry_store_seaorm::testing::fresh_database().await;
    let storage = Arc::new(tenantry_store_seaorm::host_storage::SeaOrmHostStorage::new(
        &db.db,
    ));
    runtimes_share_claims_fences_and_clears(storage).await;
}

#[tokio::test]
async fn dispatch_after_the_run_fenced_its_scope_is_refused_and_keeps_the_fence() {
    let (storage, writes) = fresh();
    storage.fail_sets([SetFault::AfterWrite]);
    let remote = Remote::new();
    let gate = Arc::new(Gate::default());
    let commit = remote.commit(&gate, None);
    let r: Result<u64, DispatchOutcome> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            let failed: Result<(), DispatchOutcome> = ctx.write("ke.data.v1.x", json!(1)).await;
            assert!(failed.is_err());
            ctx.dispatch("upload", commit).await
        })
        .await;
    assert!(matches!(r, Err(ScopedWriteError::Fenced { .. })), "{r:?}");
    assert_eq!(remote.started.load(Ordering::SeqCst), 0, "not dispatched");
    let stored = storage
        .peek(&binding(), kb("a").fence_key().as_str())
        .unwrap()
        .unwrap();
    assert_eq!(
        FenceMarker::from_value(&stored).map(|m| m.kind),
        Some(RecordKind::Fence),
        "the write's fence stays: {stored}"
    );
}

/// The claim a run reads from inside: the scope's stored record, shared with the store.
fn own_claim(storage: &InMemoryHostStorage, scope: &ScopeIdentity) -> Arc<Value> {
    storage
        .get_now(&binding(), scope.fence_key().as_str())
        .unwrap()
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn a_claim_refreshed_by_a_dispatch_is_not_stamped_again_as_a_later_runs_claim() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let writes = ScopedWrites::with_clock(storage.clone(), clock_at(1_700_000_000_000));
    let scope = kb("a");
    let reasons = Arc::new(Mutex::new(Vec::new()));
    for dispatches in [false, true, false, false] {
        let (storage_in_run, reasons) = (storage.clone(), reasons.clone());
        let scope_in_run = scope.clone();
        let ran: Result<()> = writes
            .run(&binding(), &scope, FenceMode::Enforce, |ctx| async move {
                let claim = own_claim(&storage_in_run, &scope_in_run);
                reasons
                    .lock()
                    .unwrap()
                    .push(FenceMarker::from_value(&claim).unwrap().reason);
                if dispatches {
                    ctx.dispatch("upload a", async { Ok::<_, DispatchOutcome>(()) })
                        .await?;
                    let refreshed = own_claim(&storage_in_run, &scope_in_run);
                    assert_eq!(
                        FenceMarker::from_value(&refreshed).unwrap().reason,
                        "upload a"
                    );
                }
                Ok(())
            })
            .await;
        ran.unwrap();
        assert_eq!(
            storage.peek(&binding(), scope.fence_key().as_str()),
            Some(Ok(Value::Null))
        );
    }
    assert_eq!(*reasons.lock().unwrap(), ["write in progress"; 4]);
}

#[tokio::test]
async fn a_store_that_answers_at_once_keeps_the_runs_claim_without_copying_it() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let writes = ScopedWrites::new(storage.clone());
    let scope = kb("a");
    for _ in 0..3 {
        let storage_in_run = storage.clone();
        let scope_in_run = scope.clone();
        let ran: Result<()> = writes
            .run(&binding(), &scope, FenceMode::Enforce, |_ctx| async move {
                let claim = own_claim(&storage_in_run, &scope_in_run);
                // The store, the run and this read share one value: it was stored by
                // reference count (`compare_and_set_now`), not deep-copied.
                assert_eq!(Arc::strong_count(&claim), 3);
                Ok(())
            })
            .await;
        ran.unwrap();
    }
    let calls = storage.calls();
    // Warm-up run: 2 reads (scope, installation); later runs: the installation read only;
    // plus this test's 3 reads.
    assert_eq!((calls.get, calls.cas), (4 + 3, 6));
}

/// A runtime over `storage` (no gate) on `clock`, with `config`.
fn plain_runtime(
    storage: &Arc<InMemoryHostStorage>,
    clock: Arc<ManualClock>,
    config: FenceConfig,
) -> ScopedWrites<InMemoryHostStorage> {
    ScopedWrites::with_config(storage.clone(), clock, config)
}

/// Plants `marker` as the record of `scope`.
async fn plant(storage: &InMemoryHostStorage, scope: &ScopeIdentity, marker: &FenceMarker) {
    storage
        .set(&binding(), scope.fence_key().as_str(), &marker.to_value())
        .await
        .unwrap();
}

/// A scope's stored record, as a marker.
fn stored_marker(storage: &InMemoryHostStorage, scope: &ScopeIdentity) -> FenceMarker {
    let value = storage
        .peek(&binding(), scope.fence_key().as_str())
        .unwrap()
        .unwrap();
    FenceMarker::from_value(&value).unwrap()
}

/// Issue 29: every record is judged on the store's clock. Processes whose clocks are ten
/// minutes ahead or behind the database neither take over nor clear a live intent, and the
/// claims they write expire when every other process expects (database time + 180 s).
#[tokio::test]
async fn a_process_whose_clock_is_minutes_off_neither_takes_over_nor_clears_a_live_intent() {
    const TEN_MINUTES: i64 = 600_000;
    let (_db, storage) = store_at(NOW);
    // A live intent of another process, written at database time NOW.
    let live = FenceMarker::intent(&kb("a"), "upload", "writer", NOW, NOW + 180_000);
    plant(&storage, &kb("a"), &live).await;
    let impatient = FenceConfig {
        claim_wait: std::time::Duration::ZERO,
        ..config()
    };
    for skew in [TEN_MINUTES, -TEN_MINUTES] {
        let skewed = plain_runtime(&storage, clock_at(NOW + skew), impatient.clone());
        let r: Result<(), Infallible> = skewed
            .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
                ctx.write("ke.data.v1.x", json!(1)).await
            })
            .await;
        assert!(
            matches!(&r, Err(ScopedWriteError::ScopeBusy { owner, .. }) if owner == "writer"),
            "skew {skew}: {r:?}"
        );
        let refused = skewed
            .clear(&binding(), &ClearTarget::Scope(kb("a")), "looks stuck")
            .await
            .unwrap_err();
        assert!(
            matches!(
                &refused,
                FenceAdminError::Refused(ClearRefused::IntentLive {
                    remaining_ms: 180_000,
                    ..
                })
            ),
            "skew {skew}: {refused:?}"
        );
        let listed = skewed.list_all_fences(None).await.unwrap();
        assert_eq!(listed[0].entry.kind, RecordKind::Intent, "skew {skew}");
        assert_eq!(stored_marker(&storage, &kb("a")), live, "skew {skew}");
    }
    assert_eq!(storage.peek(&binding(), "ke.data.v1.x"), None);

    // A process ten minutes behind stamps its claim on the database's clock.
    let behind = plain_runtime(&storage, clock_at(NOW - TEN_MINUTES), config());
    let (storage_in_run, scope) = (storage.clone(), kb("b"));
    let r: Result<()> = behind
        .run(
            &binding(),
            &kb("b"),
            FenceMode::Enforce,
            |_ctx| async move {
                let claim = stored_marker(&storage_in_run, &scope);
                assert_eq!(claim.fenced_at_ms, Some(NOW));
                assert_eq!(claim.expires_at_ms, Some(NOW + 180_000));
                Ok(())
            },
        )
        .await;
    r.unwrap();
}

/// The same over SQLite / PostgreSQL, where the store's clock is the database's own: a
/// process whose wall clock runs ten minutes ahead finds the intent live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_skewed_process_over_a_database_neither_takes_over_nor_clears_a_live_intent() {
    let db = tenantry_store_seaorm::testing::fresh_database().await;
    let storage = Arc::new(tenantry_store_seaorm::host_storage::SeaOrmHostStorage::new(
        &db.db,
    ));
    let now = storage.now_ms().await.unwrap();
    let live = FenceMarker::intent(&kb("a"), "upload", "writer", now, now + 180_000);
    storage
        .set(&binding(), kb("a").fence_key().as_str(), &live.to_value())
        .await
        .unwrap();
    let skewed = ScopedWrites::with_config(
        storage.clone(),
        clock_at(now + 600_000),
        FenceConfig {
            claim_wait: std::time::Duration::ZERO,
            ..config()
        },
    );
    let r: Result<(), Infallible> = skewed
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.write("ke.data.v1.x", json!(1)).await
        })
        .await;
    assert!(
        matches!(&r, Err(ScopedWriteError::ScopeBusy { owner, .. }) if owner == "writer"),
        "{r:?}"
    );
    let refused = skewed
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "looks stuck")
        .await;
    assert!(
        matches!(
            &refused,
            Err(FenceAdminError::Refused(ClearRefused::IntentLive { .. }))
        ),
        "{refused:?}"
    );
    assert_eq!(
        storage
            .get(&binding(), kb("a").fence_key().as_str())
            .await
            .unwrap(),
        Some(live.to_value())
    );
}

/// Issue 29: a clear is refused while the record's own expiry (its writer's bound) is ahead,
/// whatever the clearing process's dispatch deadline; the error says when it can be cleared.
#[tokio::test]
async fn a_clear_is_refused_until_the_intents_own_expiry_whatever_the_clearing_settings() {
    let (db, storage) = store_at(NOW + 60_000);
    let live = FenceMarker::intent(&kb("a"), "upload", "writer", NOW, NOW + 180_000);
    plant(&storage, &kb("a"), &live).await;
    let hasty = plain_runtime(
        &storage,
        clock_at(NOW + 60_000),
        FenceConfig::with_deadline(std::time::Duration::from_secs(1)),
    );
    let refused = hasty
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "looks stuck")
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        FenceAdminError::Refused(ClearRefused::IntentLive {
            owner: "writer".into(),
            expires_at_ms: NOW + 180_000,
            remaining_ms: 120_000,
        })
    );
    assert!(
        refused.to_string().contains(&(NOW + 180_000).to_string()),
        "{refused}"
    );
    db.set(at(NOW + 180_000));
    let later = plain_runtime(
        &storage,
        clock_at(NOW + 180_000),
        FenceConfig::with_deadline(std::time::Duration::from_secs(1)),
    );
    let outcome = later
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "upload verified")
        .await
        .unwrap();
    assert!(outcome.cleared);
}

/// Issue 29: `dispatch` is bounded by the runtime's own dispatch deadline: when it elapses
/// (on the runtime's clock) the outcome is unknown and the scope is fenced.
#[tokio::test(start_paused = true)]
async fn a_dispatch_that_outlives_the_deadline_has_an_unknown_outcome_and_fences() {
    let (_db, storage) = store_at(NOW);
    let clock = clock_at(NOW);
    let writes = plain_runtime(
        &storage,
        clock.clone(),
        FenceConfig::with_deadline(std::time::Duration::from_secs(20)),
    );
    let started = Arc::new(Notify::new());
    let commit = {
        let started = started.clone();
        async move {
            started.notify_one();
            std::future::pending::<std::result::Result<(), DispatchOutcome>>().await
        }
    };
    let w = writes.clone();
    let mut dispatching = tokio::spawn(async move {
        w.run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.dispatch("upload document", commit).await
        })
        .await
    });
    started.notified().await;
    clock.advance(std::time::Duration::from_millis(19_999));
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
    assert!(!dispatching.is_finished(), "19.999 s of 20 s");
    clock.advance(std::time::Duration::from_millis(1));
    let r = tokio::time::timeout(std::time::Duration::from_secs(3600), &mut dispatching)
        .await
        .expect("the dispatch ends at its deadline")
        .unwrap();
    assert!(
        matches!(&r, Err(ScopedWriteError::OutcomeUnknown { reason, .. }) if reason.contains("dispatch deadline of 20000 ms")),
        "{r:?}"
    );
    let fence = stored_marker(&storage, &kb("a"));
    assert_eq!(fence.kind, RecordKind::Fence);
    assert_eq!(fence.failure.unwrap().kind, "deadline_elapsed");
    assert!(matches!(
        write_value_on(&writes, &kb("a"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
}

async fn write_value_on<S: HostStorage + ?Sized + 'static>(
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

/// Issue 29: a run's plain claim under which nothing was sent (its process died before
/// dispatching) is taken over once expired, by another process or the restarted one; a
/// write-ahead intent (something was sent) turns into a fence instead.
#[tokio::test]
async fn an_expired_claim_that_never_dispatched_is_taken_over_not_fenced() {
    let (db, storage) = store_at(NOW);
    // The claim a run writes says that nothing was sent under it yet ...
    let writes = plain_runtime(&storage, clock_at(NOW), config());
    let (storage_in_run, scope) = (storage.clone(), kb("a"));
    let r: Result<()> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            assert!(!stored_marker(&storage_in_run, &scope).dispatched);
            ctx.write("ke.data.v1.x", json!(1)).await?;
            // ... until the run writes: then its death would leave the outcome unknown.
            assert!(stored_marker(&storage_in_run, &scope).dispatched);
            Ok(())
        })
        .await;
    r.unwrap();

    // A process died holding its claim, before dispatching anything.
    let dead = FenceMarker::claim(&kb("b"), "write in progress", "dead", NOW, NOW + 180_000);
    plant(&storage, &kb("b"), &dead).await;
    // Died mid-dispatch: an intent.
    let mid = FenceMarker::intent(&kb("c"), "upload", "dead", NOW, NOW + 180_000);
    plant(&storage, &kb("c"), &mid).await;

    db.set(at(NOW + 180_000));
    let restarted = plain_runtime(&storage, clock_at(NOW + 180_000), config());
    let counts = restarted.count_fences().await.unwrap();
    assert_eq!(
        counts[&RecordKind::Fence],
        1,
        "only the dispatched intent: {counts:?}"
    );
    write_value_on(&restarted, &kb("b"), json!(2))
        .await
        .unwrap();
    assert_eq!(
        storage.peek(&binding(), kb("b").fence_key().as_str()),
        Some(Ok(Value::Null)),
        "taken over and released"
    );
    assert!(matches!(
        write_value_on(&restarted, &kb("c"), json!(3)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
}

/// Issue 29: `ctx.write` and `ctx.mutate` check that the run still holds its claim (renewing
/// it), and fail with `ClaimLost`, writing nothing, once another process took it.
#[tokio::test]
async fn write_and_mutate_renew_the_claim_and_fail_with_claim_lost_once_it_was_taken() {
    let (db, storage) = store_at(NOW);
    let clock = clock_at(NOW);
    let writes = plain_runtime(&storage, clock.clone(), config());
    let ran = Arc::new(AtomicUsize::new(0));
    let (storage_in_run, db_in_run, ran_in_run) = (storage.clone(), db.clone(), ran.clone());
    let r: Result<(), HostStorageError> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            // Near its expiry, a write renews the claim on the database's clock.
            db_in_run.set(at(NOW + 170_000));
            clock.advance(std::time::Duration::from_secs(170));
            ctx.write::<HostStorageError>("ke.data.v1.x", json!(1))
                .await
                .unwrap();
            assert_eq!(
                stored_marker(&storage_in_run, &kb("a")).expires_at_ms,
                Some(NOW + 170_000 + 180_000)
            );
            // Another process takes the scope over (as after the claim lapsed).
            let other = FenceMarker::claim(&kb("a"), "write in progress", "other", NOW, NOW + 1);
            plant(&storage_in_run, &kb("a"), &other).await;
            let lost = ctx
                .write::<HostStorageError>("ke.data.v1.x", json!(2))
                .await;
            assert!(
                matches!(lost, Err(ScopedWriteError::ClaimLost { .. })),
                "{lost:?}"
            );
            assert!(lost.unwrap_err().to_string().contains("claim"));
            let ran = ran_in_run.clone();
            let mutated = ctx
                .mutate("host write", async move {
                    ran.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, HostStorageError>(())
                })
                .await;
            assert!(
                matches!(mutated, Err(ScopedWriteError::ClaimLost { .. })),
                "{mutated:?}"
            );
            Ok(())
        })
        .await;
    r.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 0, "the mutation never ran");
    assert_eq!(storage.peek(&binding(), "ke.data.v1.x"), Some(Ok(json!(1))));
    assert_eq!(
        stored_marker(&storage, &kb("a")).owner.as_deref(),
        Some("other"),
        "the other process's claim is left alone"
    );
}
