//! Serialization and cancellation safety: nested runs of one scope, serialized writes, the
//! bounded lock map, revoking an installation, and cancellation at every await point of a
//! dispatched mutation or a serialized write.

use super::*;

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
        // Idle entries are kept for the next run of their scope, and swept once the map
        // reaches 64 entries (twice the entries in use, at least 64).
        assert!(
            writes.lock_map_len() <= 64,
            "{} lock entries after {} scopes",
            writes.lock_map_len(),
            i + 1
        );
    }
    assert!(
        writes.lock_map_len() > 0,
        "idle entries are kept until a sweep"
    );
    assert_quiet(&writes);
}

#[tokio::test]
async fn many_scopes_held_at_once_keep_their_entries_through_a_sweep() {
    let (_storage, writes) = fresh();
    // 100 runs hold their scopes until the semaphore opens.
    let open = Arc::new(Semaphore::new(0));
    let held: Vec<_> = (0..100)
        .map(|i| {
            let (w, open) = (writes.clone(), open.clone());
            tokio::spawn(async move {
                let r: Result<(), Infallible> = w
                    .run(
                        &binding(),
                        &kb(&format!("held-{i}")),
                        FenceMode::Enforce,
                        |_ctx| async move {
                            drop(open.acquire().await.unwrap());
                            Ok(())
                        },
                    )
                    .await;
                r
            })
        })
        .collect();
    while writes.owner_count() < 100 {
        tokio::task::yield_now().await;
    }
    // Writes of 300 other scopes, one after the other, sweep idle entries; the held ones stay
    // (a second lock for a held scope would let the write below through).
    for i in 0..300 {
        write_value(&writes, &kb(&format!("idle-{i}")), json!(i))
            .await
            .unwrap();
    }
    assert_eq!(writes.lock_entries(), 100);
    assert_eq!(writes.owner_count(), 100);
    assert!(
        writes.lock_map_len() <= 2 * 100 + 64,
        "{} entries",
        writes.lock_map_len()
    );
    let w = writes.clone();
    let waiting = tokio::spawn(async move { write_value(&w, &kb("held-7"), json!("next")).await });
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    assert!(
        !waiting.is_finished(),
        "a held scope's lock survived the sweeps"
    );
    open.add_permits(100);
    for task in held {
        task.await.unwrap().unwrap();
    }
    waiting.await.unwrap().unwrap();
    writes.settled().await;
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
