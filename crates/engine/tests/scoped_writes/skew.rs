//! Time across processes (issue 29): records judged on the store's clock whatever a process's
//! own clock says, clears refused until an intent's own expiry, dispatches that outlive their
//! deadline, expired plain claims taken over, and claims renewed by writes and mutations.

use super::*;

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
        let r = write_value(&skewed, &kb("a"), json!(1)).await;
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
    let r = write_value(&skewed, &kb("a"), json!(1)).await;
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
        write_value(&writes, &kb("a"), json!(1)).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
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
    write_value(&restarted, &kb("b"), json!(2)).await.unwrap();
    assert_eq!(
        storage.peek(&binding(), kb("b").fence_key().as_str()),
        Some(Ok(Value::Null)),
        "taken over and released"
    );
    assert!(matches!(
        write_value(&restarted, &kb("c"), json!(3)).await,
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
