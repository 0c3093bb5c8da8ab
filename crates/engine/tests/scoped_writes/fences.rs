//! Fences and the write-ahead intent: an ambiguous failure fences only its scope (and an
//! installation fence every scope of its binding), across restarts; the intent is persisted
//! before dispatch and replaced by a fence on an unknown outcome; host write, persist and read
//! failures; `AllowFenced` runs and operator clears.

use super::*;

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
