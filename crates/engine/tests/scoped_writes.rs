//! Behaviour of the `ScopedWrites` runtime over the in-memory host storage (and once over
//! SQLite/PostgreSQL): serialization, fences, write-ahead intent, cancellation safety.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};
use tenantry_engine::scoped_writes::{FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::{Binding, DispatchOutcome, FenceKey, ScopeIdentity};
use tenantry_ports::host_storage::testing::{InMemoryHostStorage, SetFault};
use tenantry_ports::host_storage::{HostStorage, HostStorageError};
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
}

fn runtime(storage: &Arc<InMemoryHostStorage>, gate: &Arc<Gate>) -> Writes {
    ScopedWrites::with_clock(
        Arc::new(Gated {
            inner: storage.clone(),
            gate: gate.clone(),
        }),
        Arc::new(|| 1_700_000_000_000),
    )
}

fn fresh() -> (Arc<InMemoryHostStorage>, Writes) {
    let storage = Arc::new(InMemoryHostStorage::new());
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
    for outcome in [DispatchOutcome::Answered, DispatchOutcome::NotDispatched] {
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
async fn unknown_outcome_keeps_the_intent() {
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
    let marker = entries[0].marker.clone().unwrap();
    assert_eq!(marker.scope.as_deref(), Some("a"));
    assert_eq!(marker.reason, "provision knowledge space");
    assert_eq!(marker.fenced_at_ms, Some(1_700_000_000_000));
}

#[tokio::test]
async fn intent_not_persisted_means_not_dispatched_and_fenced() {
    let (storage, writes) = fresh();
    storage.fail_sets([SetFault::BeforeWrite]);
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
                ScopedWriteError::HostWrite(HostStorageError::Unavailable { .. })
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
    assert!(!stored_fence(&storage, &kb("a")));
    assert!(writes.is_fenced_in_process(&binding(), &kb("a")));
    let entries = writes.list_fences(&binding()).await.unwrap();
    assert_eq!(entries.len(), 1);
    assert!(!entries[0].persisted);
    assert!(matches!(
        write_value(&writes, &kb("a"), json!(2)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
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
async fn fence_listing_failure_fails_closed_and_is_retried() {
    let (storage, writes) = fresh();
    storage.fail_keys(1);
    let err = write_value(&writes, &kb("a"), json!(1)).await.unwrap_err();
    assert!(
        matches!(err, ScopedWriteError::FenceStateUnavailable { .. }),
        "{err:?}"
    );
    assert_eq!(
        storage.peek(&binding(), "ke.data.v1.x"),
        None,
        "nothing written"
    );
    write_value(&writes, &kb("a"), json!(1)).await.unwrap();
    assert_eq!(storage.calls().keys, 2, "load retried on the next call");
    write_value(&writes, &kb("a"), json!(2)).await.unwrap();
    assert_eq!(storage.calls().keys, 2, "loaded once per binding");
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
    // Failed reads of a record also fence.
    let (storage, writes) = fresh();
    storage.put_raw(
        &binding(),
        kb("b").fence_key().as_str(),
        "{\"reason\":\"x\"}",
    );
    storage.put_raw(&binding(), kb("b").fence_key().as_str(), "null");
    storage.fail_gets(1);
    assert!(matches!(
        write_value(&writes, &kb("b"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
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
    writes
        .clear_fence(&binding(), &kb("a"), "reconciled with remote")
        .await
        .unwrap();
    write_value(&writes, &kb("a"), json!(1)).await.unwrap();
    storage.put_raw(&binding(), "ke.fence.v1.unknown", "\u{1}garbage");
    let writes = runtime(&storage, &Arc::new(Gate::default()));
    let key = FenceKey::from_storage_key("ke.fence.v1.unknown").unwrap();
    assert_eq!(writes.list_fences(&binding()).await.unwrap()[0].key, key);
    writes
        .clear_fence_key(&binding(), &key, "record unreadable, remote checked")
        .await
        .unwrap();
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
    let gate = Gate::parking_at(2); // keys, set(write) parks
    let writes = runtime(&storage, &gate);
    writes.fence(&binding(), &kb("z"), "x").await; // steps 0 (keys), 1 (set)
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
        Some(DispatchOutcome::Answered),
        Some(DispatchOutcome::OutcomeUnknown),
    ] {
        let mut step = 0;
        while let Some((settled, log)) = cancel_dispatch_at(step, outcome).await {
            let parked = log[step].as_str();
            let dispatched = matches!(parked, "set" | "commit" | "set-null");
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
            "keys, get, intent, commit (+ clear) were all visited: {step}"
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
            // Cancelled before the host write was sent: nothing written, nothing fenced.
            let sent = matches!(parked, "set");
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
            "keys, get, operation, write were all visited: {step}"
        );
    }
}

#[tokio::test]
async fn cancelled_while_waiting_for_the_lock_leaves_no_entry() {
    let storage = Arc::new(InMemoryHostStorage::new());
    let gate = Gate::parking_at(1); // keys, then the first write's set parks
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
    let gate = Gate::parking_at(2); // keys, intent set, commit parks
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
        tenantry_store_seaorm::host_storage::SeaOrmHostStorage::new(db.db.conn.clone()),
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
