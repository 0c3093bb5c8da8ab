//! Several processes: fences over SQL storage across restarts, clears that wait for a dispatch
//! in flight, listing intents and fences, the claim wait on the runtime's clock, expired intents
//! of vanished processes, runtimes sharing claims, fences and clears, and the run's claim as
//! stored.

use super::*;

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
    let (db, storage) = store_at(NOW);
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
    // The request may still land until its intent's expiry: the fence keeps it, and the
    // clear that waited is refused until then.
    let refused = clearing.await.unwrap().unwrap_err();
    assert!(
        matches!(
            refused,
            FenceAdminError::Refused(ClearRefused::RequestMayLand { remaining_ms, .. })
                if remaining_ms == 180_000
        ),
        "{refused:?}"
    );
    assert!(stored_fence(&storage, &kb("a")));
    db.advance(std::time::Duration::from_secs(180));
    let outcome = writes
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "reconciled")
        .await
        .unwrap();
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
    // Both storages answer on real time: a short deadline and margin, so the request a's
    // fence records can no longer land a moment later and the fence can be cleared.
    let short = || FenceConfig {
        dispatch_deadline: std::time::Duration::from_millis(200),
        claim_margin: std::time::Duration::from_millis(100),
        ..config()
    };
    let a = ScopedWrites::with_config(storage.clone(), clock_at(NOW), short());
    let b_clock = clock_at(NOW);
    let b = ScopedWrites::with_config(storage.clone(), b_clock.clone(), short());
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
    // Past the deadline and margin of a's request (300 ms after it went out).
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
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
