//! Wake-ups across processes (`tenantry_store_seaorm::wake`), on PostgreSQL
//! (`TENANTRY_TEST_PG_URL`; on SQLite only the absence of a listener is checked): an intake's
//! `NOTIFY` reaches the listener at commit and nothing on rollback; a listener connection
//! terminated by the server, or one that stops answering (a frozen proxy), is back,
//! `LISTEN`ing and counted, within a second, and workers woken by it wait no longer than one
//! idle poll for any command meanwhile.
//!
//! These tests run on real time (a real server and its connections); they wait on the
//! listener's state and wake signal with timeouts, never for a fixed time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sea_orm::{ConnectionTrait, DatabaseConnection, DbBackend, Statement, TransactionTrait};
use tenantry_engine::lifecycle::{
    CommandIntake, Dispatcher, DispatcherConfig, SystemClock, Worker, WorkerConfig,
};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_ports::lifecycle::fake::FakeKnowledgeFs;
use tenantry_ports::lifecycle::{CommandAdmin, IntakeStore, OperatorAction, OperatorActionKind};
use tenantry_ports::wake::Wakeups;
use tenantry_store_seaorm::Backend;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;
use tenantry_store_seaorm::wake::{ListenerConfig, ListenerState, WakeListener};
use tokio::sync::watch;
use tokio::time::{Instant, timeout};

fn create(cs: &str) -> CreateControlSpace {
    CreateControlSpace::new(
        TenantId::parse("acme").unwrap(),
        ControlSpaceId::parse(cs).unwrap(),
        IdempotencyKey::parse(format!("create-{cs}")).unwrap(),
        "Docs",
        cs,
    )
}

/// Waits (at most `within`) until the listener's state satisfies `ready`.
async fn wait_state(
    state: &mut watch::Receiver<ListenerState>,
    within: Duration,
    ready: impl FnMut(&ListenerState) -> bool,
) -> ListenerState {
    *timeout(within, state.wait_for(ready))
        .await
        .expect("listener state reached in time")
        .expect("listener alive")
}

/// Terminates this database's listener connections from the server side; returns how many.
async fn terminate_listener(conn: &DatabaseConnection) -> i64 {
    let row = conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT COUNT(pg_terminate_backend(pid)) AS n FROM pg_stat_activity \
             WHERE application_name = 'tenantry-wake-listener' AND datname = current_database()",
        ))
        .await
        .unwrap()
        .unwrap();
    row.try_get("", "n").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_notifies_a_rollback_does_not_and_a_terminated_listener_is_back_within_a_second() {
    let test_db = fresh_database().await;
    let db = &test_db.db;
    let wakeups = Wakeups::new();
    let listener = WakeListener::spawn(db, wakeups.clone(), ListenerConfig::default());
    if test_db.backend() == Backend::Sqlite {
        assert!(listener.is_none(), "SQLite has no notifications");
        return;
    }
    let listener = listener.unwrap();
    let mut state = listener.watch();
    wait_state(&mut state, Duration::from_secs(5), |s| s.listening).await;
    let mut woken = wakeups.subscribe();

    // Another "process": an intake without this process's wake signal.
    let store = SeaOrmLifecycleStore::new(db);
    let intake = CommandIntake::new(store.clone(), Arc::new(SystemClock));
    woken.mark_seen();
    intake.create_control_space(&create("cs1")).await.unwrap();
    timeout(Duration::from_secs(1), woken.woken())
        .await
        .expect("the commit's NOTIFY woke the listener's workers");
    let notified = wait_state(&mut state, Duration::from_secs(1), |s| s.notifications == 1)
        .await
        .notifications;

    // Enqueued in a transaction that rolls back: nothing is sent.
    {
        let txn = db.conn.begin().await.unwrap();
        store.enqueue(&txn, create("cs-rolled-back")).await.unwrap();
        txn.rollback().await.unwrap();
    }
    // A later commit's notification arrives; the rolled-back one never did.
    intake.create_control_space(&create("cs2")).await.unwrap();
    let after = wait_state(&mut state, Duration::from_secs(1), |s| {
        s.notifications > notified
    })
    .await;
    assert_eq!(after.notifications, notified + 1, "one notification: cs2's");

    // An operator's retry makes a command due now: it notifies too.
    let retried = store
        .act_on_command(&OperatorAction {
            action_id: "retry-1".into(),
            command_id: store
                .command_by_idempotency_key(&IdempotencyKey::parse("create-cs1").unwrap())
                .await
                .unwrap()
                .unwrap()
                .id,
            kind: OperatorActionKind::Retry,
            actor: "cli:test".into(),
            reason: "wake test".into(),
            at: chrono::Utc::now(),
        })
        .await;
    assert!(retried.is_ok(), "{retried:?}");
    wait_state(&mut state, Duration::from_secs(1), |s| {
        s.notifications == notified + 2
    })
    .await;

    // Killed by the server: detected, reconnected, LISTEN again, counted, within a second.
    woken.mark_seen();
    let killed_at = Instant::now();
    assert_eq!(terminate_listener(&db.conn).await, 1);
    wait_state(&mut state, Duration::from_secs(1), |s| {
        s.reconnections == 1 && s.listening
    })
    .await;
    let back_after = killed_at.elapsed();
    assert!(
        back_after < Duration::from_secs(1),
        "listener back after {back_after:?}"
    );
    assert!(
        woken.pending(),
        "the reconnection woke the workers (catch-up)"
    );
    assert_eq!(listener.reconnections(), 1);

    // And it listens again.
    woken.mark_seen();
    intake.create_control_space(&create("cs3")).await.unwrap();
    timeout(Duration::from_secs(1), woken.woken())
        .await
        .expect("notifications arrive on the new connection");
    listener.stop().await;
}

/// Commands enqueued by another process every 40 ms while a worker idles with the default
/// 1 s poll; the listener is terminated by the server halfway. Every command is claimed within
/// one poll interval of its commit, and most within a few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_listener_terminated_mid_run_no_command_waits_longer_than_one_poll() {
    let test_db = fresh_database().await;
    if test_db.backend() == Backend::Sqlite {
        return; // no listener on SQLite: the in-process wake is tested in the engine
    }
    let db = &test_db.db;
    let wakeups = Wakeups::new();
    let listener = WakeListener::spawn(db, wakeups.clone(), ListenerConfig::default()).unwrap();
    let mut state = listener.watch();
    wait_state(&mut state, Duration::from_secs(5), |s| s.listening).await;

    let store = SeaOrmLifecycleStore::new(db);
    let remote = FakeKnowledgeFs::new();
    let calls: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let seen = calls.clone();
    remote.set_hook(move |_| seen.lock().unwrap().push(Instant::now()));
    let idle_poll = WorkerConfig::default().idle_poll;
    let dispatcher = Arc::new(Dispatcher::new(
        store.clone(),
        remote,
        DispatcherConfig::default(),
    ));
    let worker = Worker::new(
        dispatcher,
        LeaseOwner::parse("w1").unwrap(),
        WorkerConfig::default().with_claim_batch(1),
    )
    .with_wakeups(&wakeups);
    let (stop, stopped) = watch::channel(false);
    let running = tokio::spawn(worker.run(stopped));

    let intake = CommandIntake::new(store.clone(), Arc::new(SystemClock));
    let total = 24;
    let mut committed = Vec::with_capacity(total);
    for i in 0..total {
        if i == total / 2 {
            assert_eq!(terminate_listener(&db.conn).await, 1);
        }
        intake
            .create_control_space(&create(&format!("cs{i}")))
            .await
            .unwrap();
        committed.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(40)).await; // the producer's pace
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while calls.lock().unwrap().len() < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    running.await.unwrap();
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), total, "every command was delivered");
    let mut waits: Vec<Duration> = calls
        .iter()
        .zip(&committed)
        .map(|(call, commit)| call.saturating_duration_since(*commit))
        .collect();
    waits.sort();
    let worst = waits[total - 1];
    assert!(
        worst < idle_poll,
        "worst enqueue-to-delivery {worst:?} exceeds one poll interval {idle_poll:?}"
    );
    assert!(
        waits[total / 2] < Duration::from_millis(100),
        "median {:?}: the listener, not the poll, woke the worker",
        waits[total / 2]
    );
    assert_eq!(listener.reconnections(), 1);
    assert!(listener.state().listening);
    listener.stop().await;
}

/// A TCP proxy to the PostgreSQL server whose existing connections can be frozen: they stay
/// open but nothing passes any more (a connection that "stops answering"). Connections made
/// after the freeze pass.
struct FreezingProxy {
    addr: std::net::SocketAddr,
    frozen_below: Arc<std::sync::atomic::AtomicUsize>,
    opened: Arc<std::sync::atomic::AtomicUsize>,
}

impl FreezingProxy {
    async fn start(upstream: String) -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen_below = Arc::new(AtomicUsize::new(0));
        let opened = Arc::new(AtomicUsize::new(0));
        let (frozen, count) = (frozen_below.clone(), opened.clone());
        tokio::spawn(async move {
            loop {
                let (client, _) = listener.accept().await.unwrap();
                let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
                let id = count.fetch_add(1, Ordering::SeqCst);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                for (mut from, mut to) in [(client_read, server_write), (server_read, client_write)]
                {
                    let frozen = frozen.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match from.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if id < frozen.load(Ordering::SeqCst) {
                                std::future::pending::<()>().await;
                            }
                            if to.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Self {
            addr,
            frozen_below,
            opened,
        }
    }

    /// Freezes every connection opened so far.
    fn freeze(&self) {
        use std::sync::atomic::Ordering;
        self.frozen_below
            .store(self.opened.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

/// The listener's connection goes silent (a frozen proxy: open, but no answer). The heartbeat
/// notices, the listener reconnects, issues `LISTEN` again and is back within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_connection_that_stops_answering_is_replaced_within_a_second() {
    let test_db = fresh_database().await;
    if test_db.backend() == Backend::Sqlite {
        return;
    }
    let db = &test_db.db;
    // The same database, reached through the proxy.
    let server_url = std::env::var(tenantry_store_seaorm::testing::PG_URL_ENV).unwrap();
    let rest = server_url.split_once("://").unwrap().1;
    let (credentials, host_and_path) = rest.rsplit_once('@').unwrap_or(("", rest));
    let upstream = host_and_path.split('/').next().unwrap().to_owned();
    let name: String = db
        .conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT current_database() AS name",
        ))
        .await
        .unwrap()
        .unwrap()
        .try_get("", "name")
        .unwrap();
    let proxy = FreezingProxy::start(upstream).await;
    let at = if credentials.is_empty() { "" } else { "@" };
    let proxied_url = format!("postgres://{credentials}{at}{}/{name}", proxy.addr);
    let proxied = tenantry_store_seaorm::connect_existing(&proxied_url, 2)
        .await
        .unwrap();

    let wakeups = Wakeups::new();
    let listener =
        WakeListener::spawn(&proxied, wakeups.clone(), ListenerConfig::default()).unwrap();
    let mut state = listener.watch();
    wait_state(&mut state, Duration::from_secs(5), |s| s.listening).await;
    let mut woken = wakeups.subscribe();

    proxy.freeze();
    let frozen_at = Instant::now();
    woken.mark_seen();
    wait_state(&mut state, Duration::from_secs(2), |s| {
        s.reconnections == 1 && s.listening
    })
    .await;
    let back_after = frozen_at.elapsed();
    assert!(
        back_after < Duration::from_secs(1),
        "silent listener replaced after {back_after:?}"
    );
    assert!(
        woken.pending(),
        "the reconnection woke the workers (catch-up)"
    );

    // The new connection receives the notifications of a commit on the direct connection.
    woken.mark_seen();
    let intake = CommandIntake::new(SeaOrmLifecycleStore::new(db), Arc::new(SystemClock));
    intake.create_control_space(&create("cs1")).await.unwrap();
    timeout(Duration::from_secs(1), woken.woken())
        .await
        .expect("notifications arrive on the new connection");
    listener.stop().await;
}
