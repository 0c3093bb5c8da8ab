//! The fence metrics port: every top-level run is counted once by how it ended (a known
//! outcome, a refusal with its reason, an unknown outcome), and an operator clear that cleared
//! a record is counted; a nested run of a held scope is part of its enclosing run.

use tenantry_ports::host_storage::metrics::{FenceMetrics, FenceRefusal, FenceWriteOutcome};

use super::*;

/// A sink that keeps every report, in order.
#[derive(Default)]
struct Recorded(Mutex<Vec<String>>);

impl Recorded {
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn push(&self, event: String) {
        self.0.lock().unwrap().push(event);
    }
}

impl FenceMetrics for Recorded {
    fn record_write(&self, outcome: FenceWriteOutcome) {
        self.push(format!("write {}", outcome.as_str()));
    }
    fn record_refusal(&self, reason: FenceRefusal) {
        self.push(format!("refused {}", reason.as_str()));
    }
    fn record_unknown_outcome(&self) {
        self.push("unknown outcome".to_owned());
    }
    fn record_clear(&self) {
        self.push("clear".to_owned());
    }
}

#[tokio::test]
async fn every_run_is_counted_once_by_how_it_ended_and_clears_are_counted() {
    let (db, storage) = store_at(NOW);
    let gate = Arc::new(Gate::default());
    let recorded = Arc::new(Recorded::default());
    let writes: Writes = ScopedWrites::with_metrics(
        Arc::new(Gated {
            inner: storage.clone(),
            gate: gate.clone(),
        }),
        clock_at(NOW),
        config(),
        recorded.clone(),
    );
    let remote = Remote::new();

    dispatch(&writes, &kb("a"), &remote, &gate, None)
        .await
        .unwrap();
    assert_eq!(recorded.take(), ["write succeeded"]);

    let answered = dispatch(
        &writes,
        &kb("a"),
        &remote,
        &gate,
        Some(DispatchOutcome::answered(409)),
    )
    .await;
    assert!(
        matches!(answered, Err(ScopedWriteError::Operation(_))),
        "{answered:?}"
    );
    assert_eq!(recorded.take(), ["write failed"]);

    let lost = dispatch(
        &writes,
        &kb("a"),
        &remote,
        &gate,
        Some(DispatchOutcome::OutcomeUnknown),
    )
    .await;
    assert!(
        matches!(lost, Err(ScopedWriteError::OutcomeUnknown { .. })),
        "{lost:?}"
    );
    assert_eq!(recorded.take(), ["unknown outcome"]);

    let refused = write_value(&writes, &kb("a"), json!(1)).await;
    assert!(
        matches!(refused, Err(ScopedWriteError::Fenced { .. })),
        "{refused:?}"
    );
    assert_eq!(recorded.take(), ["refused fenced"]);

    // A nested run of the held scope belongs to the run around it: one report.
    let nested: Result<(), Infallible> = writes
        .run(&binding(), &kb("b"), FenceMode::Enforce, |ctx| {
            let writes = writes.clone();
            async move {
                ctx.write("ke.data.v1.x", json!(1)).await?;
                write_value(&writes, &kb("b"), json!(2)).await
            }
        })
        .await;
    nested.unwrap();
    assert_eq!(recorded.take(), ["write succeeded"]);

    // Past the bound of the request the fence records (dispatch deadline + claim margin).
    db.advance(std::time::Duration::from_secs(180));
    let cleared = writes
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "reconciled")
        .await
        .unwrap();
    assert!(cleared.cleared);
    let nothing = writes
        .clear(&binding(), &ClearTarget::Scope(kb("a")), "again")
        .await
        .unwrap();
    assert!(!nothing.cleared);
    assert_eq!(
        recorded.take(),
        ["clear"],
        "a clear of nothing is not counted"
    );

    write_value(&writes, &kb("a"), json!(3)).await.unwrap();
    assert_eq!(recorded.take(), ["write succeeded"]);
}

#[tokio::test]
async fn an_unreadable_fence_state_is_counted_as_a_refusal() {
    let (_db, storage) = store_at(NOW);
    let recorded = Arc::new(Recorded::default());
    let writes = ScopedWrites::with_metrics(
        storage.clone(),
        clock_at(NOW),
        config(),
        recorded.clone() as Arc<dyn FenceMetrics>,
    );
    storage.fail_gets(10);
    let refused: Result<(), Infallible> = writes
        .run(&binding(), &kb("a"), FenceMode::Enforce, |ctx| async move {
            ctx.write("ke.data.v1.x", json!(1)).await
        })
        .await;
    assert!(
        matches!(refused, Err(ScopedWriteError::FenceStateUnavailable { .. })),
        "{refused:?}"
    );
    assert_eq!(recorded.take(), ["refused state_unavailable"]);
}
