//! Multi-host PostgreSQL URLs on a real server (`TENANTRY_TEST_PG_URL`; skipped on SQLite):
//! the pool takes the first host that matches `target_session_attrs`, refuses a read-only
//! server naming it, and follows a failover (here: its host stops answering) without a
//! restart. The "hosts" are TCP relays on loopback in front of the one test server, so that
//! one of them can die like a primary's host does.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use tenantry_fence::Binding;
use tenantry_ports::host_storage::HostStorage;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
use tenantry_store_seaorm::testing::{TestDatabase, empty_database};
use tenantry_store_seaorm::{Backend, ConnectError, connect};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A loopback relay to the test server, which can be killed (its listener and every
/// connection through it closed) like a dead host.
struct Relay {
    port: u16,
    connections: Arc<AtomicUsize>,
    kill: watch::Sender<bool>,
}

impl Relay {
    async fn start(server: String) -> Self {
        Self::start_as(server, false).await
    }

    /// A relay whose sessions are read-only, as a hot standby's are: it adds `-c
    /// default_transaction_read_only=on` to the `options` of each session's startup message.
    async fn standby(server: String) -> Self {
        Self::start_as(server, true).await
    }

    async fn start_as(server: String, read_only: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let (kill, killed) = watch::channel(false);
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            let mut killed_accept = killed.clone();
            loop {
                let accepted = tokio::select! {
                    _ = killed_accept.changed() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut client, _)) = accepted else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let server = server.clone();
                let mut killed = killed.clone();
                tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(&server).await else {
                        return;
                    };
                    if read_only && startup_read_only(&mut client, &mut upstream).await.is_err() {
                        return;
                    }
                    tokio::select! {
                        _ = killed.changed() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                    }
                });
            }
        });
        Self {
            port,
            connections,
            kill,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn kill(&self) {
        self.kill.send(true).unwrap();
    }
}

/// Relays the start of a session from `client` to `upstream`, adding `-c
/// default_transaction_read_only=on` to the startup message's `options` (PostgreSQL's
/// frontend/backend protocol 3.0: an `SSLRequest` the server declines with `N` may come
/// first; the startup message is a length, the version and `name\0value\0` pairs ending in
/// `\0`).
async fn startup_read_only(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    const SSL_REQUEST: u32 = 80_877_103;
    loop {
        let length = client.read_u32().await?;
        let mut body = vec![0; usize::try_from(length).unwrap() - 4];
        client.read_exact(&mut body).await?;
        let code = u32::from_be_bytes(body[..4].try_into().unwrap());
        if code == SSL_REQUEST {
            upstream.write_u32(length).await?;
            upstream.write_all(&body).await?;
            let answer = upstream.read_u8().await?;
            client.write_u8(answer).await?;
            assert_eq!(
                answer, b'N',
                "the test server must not use TLS for this relay"
            );
            continue;
        }
        let mut pairs: Vec<Vec<u8>> = body[4..].split(|b| *b == 0).map(<[u8]>::to_vec).collect();
        pairs.retain(|p| !p.is_empty());
        let extra = b"-c default_transaction_read_only=on".to_vec();
        match pairs.chunks(2).position(|kv| kv[0] == b"options") {
            Some(i) => {
                let value = &mut pairs[i * 2 + 1];
                value.push(b' ');
                value.extend(extra);
            }
            None => {
                pairs.push(b"options".to_vec());
                pairs.push(extra);
            }
        }
        let mut message = body[..4].to_vec();
        for p in pairs {
            message.extend(p);
            message.push(0);
        }
        message.push(0);
        upstream
            .write_u32(u32::try_from(message.len() + 4).unwrap())
            .await?;
        upstream.write_all(&message).await?;
        return Ok(());
    }
}

/// The PostgreSQL test database, or `None` on SQLite (the test is then skipped).
async fn postgres() -> Option<TestDatabase> {
    let db = empty_database().await;
    (db.backend() == Backend::Postgres).then_some(db)
}

/// `(user, host:port, database)` of a test URL `postgres://user@host:port/database`.
fn parts(url: &str) -> (String, String, String) {
    let rest = url.split_once("://").unwrap().1;
    let (authority, database) = rest.split_once('/').unwrap();
    let (user, server) = authority.rsplit_once('@').unwrap();
    let database = database.split('?').next().unwrap();
    (user.to_owned(), server.to_owned(), database.to_owned())
}

/// A port nothing listens on.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_host_list_skips_a_dead_host_and_migrates_on_the_first_writable_one() {
    let Some(test) = postgres().await else { return };
    let (user, server, database) = parts(test.url());
    let dead = closed_port().await;
    let url = format!("postgres://{user}@127.0.0.1:{dead},{server}/{database}");
    let db = connect(&url, 2).await.unwrap();
    assert_eq!(db.backend, Backend::Postgres);
    let storage = SeaOrmHostStorage::new(&db);
    let binding = Binding::parse("b1").unwrap();
    storage.set(&binding, "k", &json!(1)).await.unwrap();
    assert_eq!(storage.get(&binding, "k").await.unwrap(), Some(json!(1)));
    db.conn.close().await.unwrap();
}

/// Issue 30: the formation's URL lists the standby first (as after a failover): the pool
/// skips it for the writable host and migrates and writes there.
#[tokio::test]
async fn a_host_list_whose_first_host_is_a_standby_connects_to_the_second() {
    let Some(test) = postgres().await else { return };
    let (user, server, database) = parts(test.url());
    let standby = Relay::standby(server.clone()).await;
    let primary = Relay::start(server.clone()).await;
    // The standby relay on its own is read-only, and refused as such.
    let alone = format!("postgres://{user}@127.0.0.1:{}/{database}", standby.port);
    assert!(
        matches!(
            connect(&alone, 1).await.unwrap_err(),
            ConnectError::ReadOnlyServer { .. }
        ),
        "the standby relay's sessions are read-only"
    );
    let url = format!(
        "postgres://{user}@127.0.0.1:{},127.0.0.1:{}/{database}",
        standby.port, primary.port
    );
    let db = connect(&url, 2).await.unwrap();
    let storage = SeaOrmHostStorage::new(&db);
    let binding = Binding::parse("b1").unwrap();
    storage
        .set(&binding, "k", &json!("on the primary"))
        .await
        .unwrap();
    assert_eq!(
        storage.get(&binding, "k").await.unwrap(),
        Some(json!("on the primary"))
    );
    assert!(standby.connections() > 0, "the standby was asked first");
    assert!(primary.connections() > 0);
    db.conn.close().await.unwrap();
}

#[tokio::test]
async fn a_single_read_only_server_is_refused_at_start_naming_it() {
    let Some(test) = postgres().await else { return };
    let (user, server, database) = parts(test.url());
    // Every session of this URL is read-only, as a hot standby's are.
    let url = format!(
        "postgres://{user}@{server}/{database}?options=-c%20default_transaction_read_only%3Don"
    );
    let error = connect(&url, 1).await.unwrap_err();
    assert!(
        matches!(&error, ConnectError::ReadOnlyServer { server: named } if *named == server),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("read-only") && text.contains("primary"),
        "{text}"
    );
    // Written explicitly, `any` takes it (for a read-only look, e.g. at a standby).
    let any = format!("{url}&target_session_attrs=any");
    let db = tenantry_store_seaorm::connect_existing(&any, 1).await;
    assert!(
        !matches!(db, Err(ConnectError::ReadOnlyServer { .. })),
        "{db:?}"
    );
}

#[tokio::test]
async fn no_matching_server_is_refused_with_what_each_answered() {
    let Some(test) = postgres().await else { return };
    let (user, server, database) = parts(test.url());
    let dead = closed_port().await;
    let url = format!(
        "postgres://{user}@127.0.0.1:{dead},{server}/{database}?options=-c%20default_transaction_read_only%3Don"
    );
    let error = connect(&url, 1).await.unwrap_err();
    let ConnectError::NoMatchingServer { attrs, answers } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(*attrs, "read-write");
    assert!(answers.contains(&format!("127.0.0.1:{dead}")), "{answers}");
    assert!(
        answers.contains(&format!(
            "{server}: does not match target_session_attrs=read-write"
        )),
        "{answers}"
    );
}

/// Issue 30: after a failover the pool finds the new primary without a restart. The first
/// host dies (its relay closes every connection and refuses new ones); within a few watchdog
/// rounds the store writes again, through the second host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_follows_when_its_host_dies() {
    let Some(test) = postgres().await else { return };
    let (user, server, database) = parts(test.url());
    let first = Relay::start(server.clone()).await;
    let second = Relay::start(server.clone()).await;
    let url = format!(
        "postgres://{user}@127.0.0.1:{},127.0.0.1:{}/{database}",
        first.port, second.port
    );
    let db = connect(&url, 4).await.unwrap();
    let storage = SeaOrmHostStorage::new(&db);
    let binding = Binding::parse("b1").unwrap();
    storage.set(&binding, "k", &json!("before")).await.unwrap();
    assert!(first.connections() > 0);
    assert_eq!(second.connections(), 0, "the first host matched");

    first.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut failures = 0;
    loop {
        match storage.set(&binding, "k", &json!("after")).await {
            Ok(()) => break,
            Err(error) => {
                failures += 1;
                assert!(
                    Instant::now() < deadline,
                    "still failing after 30 s ({failures} failures): {error}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert!(
        second.connections() > 0,
        "the pool moved to the second host"
    );
    assert_eq!(
        storage.get(&binding, "k").await.unwrap(),
        Some(json!("after"))
    );
    db.conn.close().await.unwrap();
}

/// Issue 30: a write the server refuses as read-only (SQLSTATE 25006, what the old primary
/// answers once it is a standby) is a storage outage, retried, never a command failure.
#[tokio::test]
async fn a_write_refused_as_read_only_is_storage_unavailable() {
    let Some(test) = postgres().await else { return };
    test.db
        .migrate(tenantry_store_seaorm::Mechanisms::ALL)
        .await
        .unwrap();
    let read_only = format!(
        "{}?options=-c%20default_transaction_read_only%3Don&target_session_attrs=any",
        test.url()
    );
    let db = tenantry_store_seaorm::connect_existing(&read_only, 1)
        .await
        .unwrap();
    let storage = SeaOrmHostStorage::new(&db);
    let error = storage
        .set(&Binding::parse("b1").unwrap(), "k", &json!(1))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        matches!(
            &error,
            tenantry_ports::host_storage::HostStorageError::Storage {
                error: tenantry_ports::StoreError::Unavailable { .. },
                ..
            }
        ),
        "{error:?}"
    );
    assert!(text.contains("read-only transaction"), "{text}");
    assert!(text.contains("a standby, as after a failover"), "{text}");
    db.conn.close().await.unwrap();
}

/// A server that turns read-only while the pool holds writable sessions to it (their setting
/// was read when they opened) is not used through those sessions: once the watchdog sees it,
/// storage calls fail (so `/readyz` answers 503) until it takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_sessions_are_not_reused_once_the_server_turned_read_only() {
    let Some(test) = postgres().await else { return };
    let (user, server, database) = parts(test.url());
    let dead = closed_port().await;
    let url = format!("postgres://{user}@127.0.0.1:{dead},{server}/{database}");
    let db = connect(&url, 4).await.unwrap();
    let storage = SeaOrmHostStorage::new(&db);
    let binding = Binding::parse("b1").unwrap();
    storage.set(&binding, "k", &json!(1)).await.unwrap();

    // New sessions of this database are read-only from now on; the pool's are not. The
    // watchdog's own session is closed, so its next check opens one that sees it.
    // Through the server's `postgres` database: sessions of this one turn read-only.
    let server_url = std::env::var("TENANTRY_TEST_PG_URL").unwrap();
    let admin = sea_orm::Database::connect(server_url.as_str())
        .await
        .unwrap();
    use sea_orm::ConnectionTrait as _;
    admin
        .execute_unprepared(&format!(
            "ALTER DATABASE {database} SET default_transaction_read_only = on"
        ))
        .await
        .unwrap();
    admin
        .execute_unprepared(&format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}' \
             AND application_name = '{}'",
            tenantry_store_seaorm::pg_hosts::PROBE_APPLICATION_NAME
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if storage.get(&binding, "k").await.is_err() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the pool kept using its writable sessions to a read-only server"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    admin
        .execute_unprepared(&format!(
            "ALTER DATABASE {database} RESET default_transaction_read_only"
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while storage.set(&binding, "k", &json!(2)).await.is_err() {
        assert!(Instant::now() < deadline, "no recovery");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    db.conn.close().await.unwrap();
    admin.close().await.unwrap();
}
