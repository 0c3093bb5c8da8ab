//! Tests of the retention use cases: batching, busy replicas, dry runs and the pruner's timing
//! on a manual clock.

use std::sync::{Arc, Mutex};

use chrono::TimeZone;
use tenantry_ports::clock::ManualClock;
use tenantry_ports::mocks::MockRetentionStore;

use super::*;

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + seconds, 0).unwrap()
}

/// A store whose finished-command batches answer `batches` in order; other kinds remove nothing.
fn scripted(batches: Vec<PruneBatch>) -> MockRetentionStore {
    let mut store = MockRetentionStore::new();
    let batches = Mutex::new(batches.into_iter());
    store.expect_prune_batch().returning(move |kind, _, _, _| {
        Ok(match kind {
            RetentionKind::FinishedCommands => batches
                .lock()
                .unwrap()
                .next()
                .expect("no more batches scripted"),
            _ => PruneBatch::Removed(0),
        })
    });
    store.expect_oldest().returning(|_| Ok(Some(t(0))));
    store
}

#[tokio::test]
async fn prune_once_runs_batches_until_one_is_short() {
    let store = scripted(vec![
        PruneBatch::Removed(2),
        PruneBatch::Removed(2),
        PruneBatch::Removed(1),
    ]);
    let policy = RetentionPolicy::default().with_batch_size(2);
    let report = prune_once(&store, &policy, t(3600)).await.unwrap();
    let commands = report.kind(RetentionKind::FinishedCommands).unwrap();
    assert_eq!(
        (commands.removed, commands.batches, commands.busy),
        (5, 3, false)
    );
    assert_eq!(report.total_removed(), 5);
    assert_eq!(report.kinds.len(), RetentionKind::ALL.len());
    assert_eq!(
        report.oldest_age(RetentionKind::InboxReceipts),
        Some(Duration::from_secs(3600))
    );
    assert!(!report.dry_run);
}

#[tokio::test]
async fn prune_once_stops_a_kind_when_another_replica_is_pruning() {
    let store = scripted(vec![PruneBatch::Removed(2), PruneBatch::Busy]);
    let policy = RetentionPolicy::default().with_batch_size(2);
    let report = prune_once(&store, &policy, t(0)).await.unwrap();
    let commands = report.kind(RetentionKind::FinishedCommands).unwrap();
    assert_eq!(
        (commands.removed, commands.batches, commands.busy),
        (2, 1, true)
    );
}

#[tokio::test]
async fn prune_once_passes_each_kinds_window_and_the_batch_size() {
    let policy = RetentionPolicy::default().with_batch_size(7);
    let mut store = MockRetentionStore::new();
    store
        .expect_prune_batch()
        .times(RetentionKind::ALL.len())
        .returning(move |kind, now, window, limit| {
            assert_eq!(now, t(5));
            assert_eq!(window, RetentionPolicy::default().window(kind));
            assert_eq!(limit, 7);
            Ok(PruneBatch::Removed(0))
        });
    store.expect_oldest().returning(|_| Ok(None));
    let report = prune_once(&store, &policy, t(5)).await.unwrap();
    assert_eq!(report.total_removed(), 0);
    assert_eq!(report.oldest_age(RetentionKind::FinishedCommands), None);
}

#[tokio::test]
async fn a_zero_batch_size_is_refused_before_any_store_call() {
    let store = MockRetentionStore::new();
    let policy = RetentionPolicy::default().with_batch_size(0);
    assert!(matches!(
        prune_once(&store, &policy, t(0)).await,
        Err(RetentionError::InvalidPolicy(_))
    ));
    assert!(matches!(
        dry_run(&store, &policy, t(0)).await,
        Err(RetentionError::InvalidPolicy(_))
    ));
}

#[tokio::test]
async fn dry_run_counts_and_removes_nothing() {
    let mut store = MockRetentionStore::new();
    store.expect_prune_batch().never();
    store.expect_count_expired().returning(|kind, _, _| {
        Ok(if kind == RetentionKind::OperatorActions {
            4
        } else {
            0
        })
    });
    store.expect_oldest().returning(|_| Ok(None));
    let report = dry_run(&store, &RetentionPolicy::default(), t(0))
        .await
        .unwrap();
    assert!(report.dry_run);
    assert_eq!(
        report.kind(RetentionKind::OperatorActions).unwrap().removed,
        4
    );
    assert_eq!(report.total_removed(), 4);
}

#[tokio::test]
async fn a_store_failure_names_the_kind() {
    let mut store = MockRetentionStore::new();
    store
        .expect_prune_batch()
        .returning(|_, _, _, _| Err(StoreError::unavailable("database down")));
    let error = prune_once(&store, &RetentionPolicy::default(), t(0))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("finished_commands"), "{error}");
    assert!(error.to_string().contains("database down"), "{error}");
}

/// The pruner runs at once, then once per interval of the clock port (a frozen manual clock:
/// tokio's time alone never triggers a run), and stops on shutdown.
#[tokio::test(start_paused = true)]
async fn the_pruner_runs_on_the_clock_port_until_shut_down() {
    let clock = ManualClock::new(t(0));
    let mut store = MockRetentionStore::new();
    store
        .expect_prune_batch()
        .returning(|_, _, _, _| Ok(PruneBatch::Removed(0)));
    store.expect_oldest().returning(|_| Ok(None));
    // The store's clock follows the same manual time here.
    let store_clock = clock.clone();
    store.expect_now().returning(move || Ok(store_clock.now()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (stop, shutdown) = watch::channel(false);
    let pruner = Pruner::new(
        store,
        RetentionPolicy::default(),
        Duration::from_secs(60),
        Arc::new(clock.clone()),
    );
    let observed = seen.clone();
    let task = tokio::spawn(pruner.run(shutdown, move |report: &PruneReport| {
        observed.lock().unwrap().push(report.at);
    }));
    let settle = || async {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    };
    settle().await;
    assert_eq!(*seen.lock().unwrap(), vec![t(0)]);
    // An hour of tokio's time, with the clock frozen: no run.
    tokio::time::advance(Duration::from_secs(3600)).await;
    settle().await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    clock.advance(Duration::from_secs(60));
    settle().await;
    assert_eq!(*seen.lock().unwrap(), vec![t(0), t(60)]);
    stop.send(true).unwrap();
    assert_eq!(task.await.unwrap(), 2);
}

#[tokio::test]
async fn a_stop_request_ends_the_run_between_two_batches() {
    let store = scripted(vec![PruneBatch::Removed(2); 100]);
    let policy = RetentionPolicy::default().with_batch_size(2);
    let calls = std::sync::atomic::AtomicU32::new(0);
    // Stop once three batches ran.
    let stop = || calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= 3;
    let report = prune_until(&store, &policy, t(0), &stop).await.unwrap();
    let commands = report.kind(RetentionKind::FinishedCommands).unwrap();
    assert_eq!((commands.removed, commands.batches), (6, 3));
    assert_eq!(
        report.total_removed(),
        6,
        "no batch of the other kinds after the stop"
    );
}

/// Case 013: the pruner measures every window from the store's clock (the database's), not
/// from the process clock. Here the process clock runs two days behind the database: the
/// cut-off still follows the database, and a process clock running ahead would not move it.
#[tokio::test(start_paused = true)]
async fn case_013_the_pruner_cutoff_is_on_the_store_clock_not_the_process_clock() {
    const DAY: i64 = 86_400;
    for process_offset in [-2 * DAY, 0, 3 * DAY] {
        let process_clock = ManualClock::new(t(2 * DAY + process_offset));
        let mut store = MockRetentionStore::new();
        store.expect_now().returning(|| Ok(t(2 * DAY)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let calls = seen.clone();
        store
            .expect_prune_batch()
            .returning(move |kind, now, _, _| {
                calls.lock().unwrap().push((kind, now));
                Ok(PruneBatch::Removed(0))
            });
        store.expect_oldest().returning(|_| Ok(None));
        let (stop, shutdown) = watch::channel(false);
        let pruner = Pruner::new(
            store,
            RetentionPolicy::default(),
            Duration::from_secs(60),
            Arc::new(process_clock),
        );
        let reports = Arc::new(Mutex::new(Vec::new()));
        let observed = reports.clone();
        let task = tokio::spawn(pruner.run(shutdown, move |report: &PruneReport| {
            observed.lock().unwrap().push(report.at);
        }));
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
        stop.send(true).unwrap();
        assert_eq!(task.await.unwrap(), 1);
        assert_eq!(*reports.lock().unwrap(), vec![t(2 * DAY)]);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), RetentionKind::ALL.len());
        assert!(seen.iter().all(|(_, now)| *now == t(2 * DAY)), "{seen:?}");
    }
}

/// A store that cannot tell its time fails the run (logged, retried at the next interval);
/// nothing is pruned on a guessed clock.
#[tokio::test(start_paused = true)]
async fn case_013_no_prune_without_the_store_clock() {
    let mut store = MockRetentionStore::new();
    store
        .expect_now()
        .returning(|| Err(StoreError::unavailable("database down")));
    store.expect_prune_batch().never();
    let (stop, shutdown) = watch::channel(false);
    let pruner = Pruner::new(
        store,
        RetentionPolicy::default(),
        Duration::from_secs(60),
        Arc::new(ManualClock::new(t(0))),
    );
    let task = tokio::spawn(pruner.run(shutdown, |_: &PruneReport| {}));
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    stop.send(true).unwrap();
    assert_eq!(task.await.unwrap(), 0);
}
