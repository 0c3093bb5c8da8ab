//! The worker loop: idle polling, shutdown with a dispatch in flight, lease owner ids.

use super::*;

fn worker_config(idle: Duration) -> WorkerConfig {
    WorkerConfig {
        idle_poll: idle,
        claim_batch: 1,
        ..WorkerConfig::default()
    }
}

/// Lets the spawned tasks run until they wait (for the clock or a channel): the fakes never
/// wait on I/O, so a few turns of the current-thread runtime are enough.
async fn let_tasks_run() {
    for _ in 0..16 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn worker_sleeps_when_idle_and_picks_up_new_commands() {
    let h = harness();
    let clock = clock_of_test();
    let dispatcher = Arc::new(
        Dispatcher::new(
            h.store.clone(),
            h.remote.clone(),
            DispatcherConfig::default(),
        )
        .with_clock(Arc::new(clock_of_test())),
    );
    let (stop, stopped) = watch::channel(false);
    let worker = Worker::new(
        dispatcher,
        owner("w"),
        worker_config(Duration::from_secs(5)),
    );
    let handle = tokio::spawn(worker.run(stopped));
    let_tasks_run().await; // the first poll finds nothing: the worker sleeps 5 s on the clock
    clock.advance(Duration::from_secs(1));
    let receipt = h.create("cs1").await;
    clock.advance(Duration::from_millis(100));
    let_tasks_run().await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Pending,
        "still asleep"
    );
    clock.advance(Duration::from_millis(3900));
    let_tasks_run().await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Succeeded
    );
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed, report.errors), (1, 1, 0));
}

#[tokio::test]
async fn worker_shutdown_lets_the_in_flight_dispatch_settle() {
    let h = harness();
    let receipt = h.create("cs1").await;
    h.create("cs2").await;
    let remote = GatedRemote::new(h.remote.clone());
    let dispatcher = Arc::new(
        Dispatcher::new(h.store.clone(), remote.clone(), DispatcherConfig::default())
            .with_clock(Arc::new(clock_of_test())),
    );
    let (stop, stopped) = watch::channel(false);
    let worker = Worker::new(
        dispatcher,
        owner("w"),
        worker_config(Duration::from_millis(10)),
    );
    let handle = tokio::spawn(worker.run(stopped));
    remote.entered.notified().await;
    stop.send(true).unwrap();
    remote.release.notify_one();
    let report = handle.await.unwrap();
    assert_eq!(report.claimed, 1, "no claim after shutdown");
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Succeeded
    );
    let pending: Vec<_> = h
        .store
        .commands()
        .into_iter()
        .filter(|c| c.status == CommandStatus::Pending)
        .collect();
    assert_eq!(pending.len(), 1);
}

#[test]
fn unique_lease_owners_differ() {
    let a = unique_lease_owner("host a");
    let b = unique_lease_owner("host a");
    assert_ne!(a, b);
    assert!(a.as_str().starts_with("hosta-"));
}
