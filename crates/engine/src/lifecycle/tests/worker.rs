//! The worker loop: idle polling, wake-ups (intake, due times), shutdown with a dispatch in
//! flight, lease owner ids.

use super::*;

fn worker_config(idle: Duration) -> WorkerConfig {
    WorkerConfig {
        idle_poll: idle,
        claim_batch: 1,
        ..WorkerConfig::default()
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

/// A command enqueued through an intake of this process while the workers sleep is claimed at
/// once: the clock never moves, the idle poll is an hour.
#[tokio::test]
async fn an_intake_wakes_idle_workers_without_waiting_for_the_poll() {
    let h = harness();
    let wakeups = Wakeups::new();
    let intake = CommandIntake::new(h.store.clone(), Arc::new(clock_of_test()))
        .with_wakeups(wakeups.clone());
    let dispatcher = Arc::new(
        Dispatcher::new(
            h.store.clone(),
            h.remote.clone(),
            DispatcherConfig::default(),
        )
        .with_clock(Arc::new(clock_of_test())),
    );
    let (stop, stopped) = watch::channel(false);
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let worker = Worker::new(
                dispatcher.clone(),
                owner(&format!("w{i}")),
                worker_config(Duration::from_secs(3600)),
            )
            .with_wakeups(&wakeups);
            tokio::spawn(worker.run(stopped.clone()))
        })
        .collect();
    let_tasks_run().await; // both found nothing and sleep
    for cs in ["cs1", "cs2"] {
        let receipt = intake
            .create_control_space(&create_request(cs, &format!("create-{cs}")))
            .await
            .unwrap();
        let_tasks_run().await;
        assert_eq!(
            h.command(&receipt.command_id).status,
            CommandStatus::Succeeded,
            "{cs} claimed and settled without the clock moving"
        );
    }
    // A replay creates nothing and wakes nobody.
    let sent = wakeups.sent();
    intake
        .create_control_space(&create_request("cs1", "create-cs1"))
        .await
        .unwrap();
    assert_eq!(wakeups.sent(), sent);
    stop.send(true).unwrap();
    let mut claimed = 0;
    for worker in workers {
        claimed += worker.await.unwrap().claimed;
    }
    assert_eq!(claimed, 2);
}

/// Without a wake-up signal the same worker waits for its idle poll: the wake is what makes
/// the difference above.
#[tokio::test]
async fn without_wakeups_a_new_command_waits_for_the_idle_poll() {
    let h = harness();
    let clock = clock_of_test();
    let dispatcher = Arc::new(
        Dispatcher::new(
            h.store.clone(),
            h.remote.clone(),
            DispatcherConfig::default(),
        )
        .with_clock(Arc::new(clock.clone())),
    );
    let (stop, stopped) = watch::channel(false);
    let worker = Worker::new(
        dispatcher,
        owner("w"),
        worker_config(Duration::from_secs(3600)),
    );
    let handle = tokio::spawn(worker.run(stopped));
    let_tasks_run().await;
    let receipt = h.create("cs1").await;
    let_tasks_run().await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Pending
    );
    clock.advance(Duration::from_secs(3600));
    let_tasks_run().await;
    assert_eq!(
        h.command(&receipt.command_id).status,
        CommandStatus::Succeeded
    );
    stop.send(true).unwrap();
    handle.await.unwrap();
}

/// A command retried after a backoff is claimed when the backoff ends, not at the next idle
/// poll: the worker sleeps until the store's next due time.
#[tokio::test]
async fn an_idle_worker_wakes_when_a_backoff_comes_due() {
    let h = harness();
    let clock = clock_of_test();
    let receipt = h.create("cs1").await;
    h.remote.push_fault(
        RemoteCall::Provision,
        RemoteFault::Fail(RemoteError::answered(503, "KFS_UNAVAILABLE", "busy")),
    );
    let dispatcher = Arc::new(
        Dispatcher::new(
            h.store.clone(),
            h.remote.clone(),
            DispatcherConfig::default(),
        )
        .with_clock(Arc::new(clock.clone())),
    );
    let (stop, stopped) = watch::channel(false);
    let worker = Worker::new(
        dispatcher,
        owner("w"),
        worker_config(Duration::from_secs(3600)),
    );
    let handle = tokio::spawn(worker.run(stopped));
    let_tasks_run().await;
    assert_claimed_when_the_backoff_ends(&h, &clock, &receipt.command_id).await;
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed), (2, 1));
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

/// A worker whose shutdown sender is dropped stops instead of spinning (see the pool's test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_shutdown_sender_is_dropped_stops() {
    let store = InMemoryLifecycleStore::with_clock(Arc::new(ManualClock::new(t(0))));
    let dispatcher = Arc::new(
        Dispatcher::new(store, FakeKnowledgeFs::new(), DispatcherConfig::default())
            .with_clock(Arc::new(ManualClock::new(t(0)))),
    );
    let worker = Worker::new(dispatcher, owner("w"), WorkerConfig::default());
    let (stop, stopped) = watch::channel(false);
    drop(stop);
    let report = tokio::time::timeout(Duration::from_secs(10), tokio::spawn(worker.run(stopped)))
        .await
        .expect("the worker stopped")
        .unwrap();
    assert_eq!(report.claimed, 0);
}
