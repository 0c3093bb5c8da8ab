//! PostgreSQL over TLS (issue 26, case 011), against a server that accepts TCP connections
//! only over TLS: `cargo xtask ci` starts one (`cargo xtask pg --tls` for a manual run) and
//! sets `TENANTRY_TEST_PG_TLS_URL` (its URL, without TLS parameters) and
//! `TENANTRY_TEST_PG_TLS_CA` (the CA file that signed its certificate).
//!
//! Without those variables every test here is skipped (it prints why and passes), unless
//! `TENANTRY_REQUIRE_PG_TLS=1` is set, as the gate sets it: then a missing server fails.
//!
//! `verify-full` with the CA connects, migrates, listens and runs a saga; `sslmode=disable`
//! is refused by the server and the error says that it requires TLS; a certificate from
//! another CA is refused naming the problem, also for `require` with that CA (libpq's rule).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use tenantry_engine::lifecycle::{Dispatcher, DispatcherConfig};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::ControlSpaceState;
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_ports::lifecycle::ControlSpaceReader;
use tenantry_ports::lifecycle::fake::FakeKnowledgeFs;
use tenantry_ports::wake::Wakeups;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::throwaway::create_postgres_database;
use tenantry_store_seaorm::wake::{ListenerConfig, WakeListener};
use tenantry_store_seaorm::{ConnectError, Database, connect, connect_existing};

/// The TLS server's URL, without TLS parameters.
const URL_ENV: &str = "TENANTRY_TEST_PG_TLS_URL";
/// The CA file (PEM) that signed the server's certificate.
const CA_ENV: &str = "TENANTRY_TEST_PG_TLS_CA";
/// Set to `1` (by `cargo xtask ci`) to fail instead of skipping without a server.
const REQUIRE_ENV: &str = "TENANTRY_REQUIRE_PG_TLS";

/// The TLS server's URL and CA file, or `None` (the test is skipped) when not given.
///
/// # Panics
/// When they are not given but [`REQUIRE_ENV`] is `1`.
fn tls_server() -> Option<(String, String)> {
    let given = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    match (given(URL_ENV), given(CA_ENV)) {
        (Some(url), Some(ca)) => Some((url, ca)),
        _ => {
            assert!(
                given(REQUIRE_ENV).as_deref() != Some("1"),
                "{REQUIRE_ENV}=1 but {URL_ENV} and {CA_ENV} are not both set: start a TLS-only \
                 server with `cargo xtask pg --tls` and set them as it prints"
            );
            eprintln!("skipped: no TLS PostgreSQL server ({URL_ENV}, {CA_ENV})");
            None
        }
    }
}

/// `url` with `params` appended to its query.
fn with_params(url: &str, params: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{params}")
}

/// The URL of a new empty database on the server (created over verified TLS), with `params`.
async fn fresh_database_url(server: &str, ca: &str, params: &str) -> String {
    let verified = with_params(server, &format!("sslmode=verify-full&sslrootcert={ca}"));
    let name = format!("tenantry_tls_{}", uuid::Uuid::new_v4().simple());
    let url = create_postgres_database(&verified, &name)
        .await
        .expect("create a database over TLS");
    // The created URL keeps the verified parameters; the test's own replace them.
    let base = url.split_once('?').map_or(url.as_str(), |(base, _)| base);
    with_params(base, params)
}

/// Whether the session of `db`'s connection is encrypted, from the server's own view.
async fn session_is_encrypted(db: &Database) -> bool {
    let row = db
        .conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
        ))
        .await
        .unwrap()
        .expect("a pg_stat_ssl row for this session");
    row.try_get::<bool>("", "ssl").unwrap()
}

/// A CA file that did not sign the server's certificate.
fn other_ca(dir: &std::path::Path) -> String {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "some other CA");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let path = dir.join("other-ca.pem");
    std::fs::write(&path, cert.pem()).unwrap();
    path.display().to_string()
}

/// `verify-full` with the server's CA connects over TLS, applies the migrations (the
/// advisory-lock path), opens the schema again as an operator tool does, and the wake
/// listener's own connection is encrypted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_011_verify_full_with_the_ca_connects_migrates_and_listens_over_tls() {
    let Some((server, ca)) = tls_server() else {
        return;
    };
    let (url, db) = verified_database(&server, &ca).await;
    assert!(session_is_encrypted(&db).await);
    let existing = connect_existing(&url, 1)
        .await
        .expect("open the migrated schema");
    assert!(session_is_encrypted(&existing).await);

    let config = ListenerConfig {
        answer_timeout: Duration::from_secs(5),
        ..ListenerConfig::default()
    };
    let listener = WakeListener::spawn(&db, Wakeups::new(), config).expect("PostgreSQL");
    let mut state = listener.watch();
    tokio::time::timeout(Duration::from_secs(30), state.wait_for(|s| s.listening))
        .await
        .expect("the listener connects over TLS")
        .expect("listener alive");
    let row = db
        .conn
        .query_one_raw(Statement::from_string(
            DbBackend::Postgres,
            "SELECT bool_and(s.ssl) AS ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = 'tenantry-wake-listener' AND a.datname = current_database()",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.try_get::<Option<bool>>("", "ssl").unwrap(), Some(true));
    listener.stop().await;
}

/// `sslmode=disable` (and `allow`, which the driver treats alike) is refused by the server,
/// and the error says that it requires TLS and what to set.
#[tokio::test]
async fn case_011_a_connection_without_tls_is_refused_saying_the_server_requires_tls() {
    let Some((server, _)) = tls_server() else {
        return;
    };
    for mode in ["disable", "allow"] {
        let url = with_params(&server, &format!("sslmode={mode}"));
        let error = connect_existing(&url, 1).await.unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, ConnectError::PostgresTlsRequired { .. }),
            "{mode}: {message}"
        );
        assert!(message.contains("requires TLS"), "{message}");
        assert!(message.contains("no encryption"), "{message}");
        assert!(message.contains("sslmode=verify-full"), "{message}");
    }
}

/// A server certificate that another CA signed is refused, naming the problem, for
/// `verify-full`, `verify-ca`, and `require` with that CA as `sslrootcert` (libpq's rule: the
/// driver alone would not check the chain for `require`).
#[tokio::test]
async fn case_011_a_certificate_from_another_ca_is_refused_naming_the_problem() {
    let Some((server, _)) = tls_server() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let other = other_ca(dir.path());
    for mode in ["verify-full", "verify-ca", "require"] {
        let url = with_params(&server, &format!("sslmode={mode}&sslrootcert={other}"));
        let message = refused_as_unknown_issuer(&url, mode).await;
        assert!(
            message.contains("not signed by a CA this client trusts"),
            "{message}"
        );
        assert!(message.contains("sslrootcert"), "{message}");
    }
}

/// `sslrootcert=system` (libpq 16) checks against the platform's roots alone: the test CA is
/// not among them, so the server's certificate is refused as unknown (the driver is not left
/// to read a file named `system`).
#[tokio::test]
async fn case_011_sslrootcert_system_trusts_the_platform_roots_only() {
    let Some((server, _)) = tls_server() else {
        return;
    };
    let url = with_params(&server, "sslrootcert=system");
    refused_as_unknown_issuer(&url, "sslrootcert=system").await;
}

/// A fresh database on `server` (its URL with `sslmode=verify-full` and the test CA `ca`),
/// opened and migrated over that verified TLS.
async fn verified_database(server: &str, ca: &str) -> (String, Database) {
    let url =
        fresh_database_url(server, ca, &format!("sslmode=verify-full&sslrootcert={ca}")).await;
    let db = connect(&url, 2).await.expect("connect over verified TLS");
    (url, db)
}

/// Connects to `url`, asserts a TLS refusal for a certificate of an unknown issuer (`what`
/// names the case in the failure message), and returns the error's text.
async fn refused_as_unknown_issuer(url: &str, what: &str) -> String {
    let error = connect_existing(url, 1).await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, ConnectError::PostgresTls { .. }),
        "{what}: {message}"
    );
    assert!(message.contains("UnknownIssuer"), "{what}: {message}");
    message
}

/// `prefer` (the default) and `require` without a CA encrypt and check no certificate, as
/// libpq does.
#[tokio::test]
async fn case_011_prefer_and_require_encrypt_without_a_certificate_check() {
    let Some((server, ca)) = tls_server() else {
        return;
    };
    let url = fresh_database_url(&server, &ca, "sslmode=require").await;
    let db = connect(&url, 1).await.expect("require connects");
    assert!(session_is_encrypted(&db).await);
    let default = url.replace("?sslmode=require", "");
    let db = connect_existing(&default, 1)
        .await
        .expect("prefer connects");
    assert!(session_is_encrypted(&db).await);
}

/// One saga over TLS: a provision enqueued and dispatched to completion against the fake
/// KnowledgeFS, every statement on a verified TLS connection.
#[tokio::test]
async fn case_011_a_provision_saga_completes_over_tls() {
    let Some((server, ca)) = tls_server() else {
        return;
    };
    let (_, db) = verified_database(&server, &ca).await;
    let store = SeaOrmLifecycleStore::new(&db);
    let tenant = TenantId::parse("acme").unwrap();
    let space = ControlSpaceId::parse("cs-tls").unwrap();
    store
        .enqueue(
            &db.conn,
            CreateControlSpace::new(
                tenant.clone(),
                space.clone(),
                IdempotencyKey::parse("create-cs-tls").unwrap(),
                "Docs",
                "docs",
            ),
        )
        .await
        .unwrap();
    let remote = FakeKnowledgeFs::new();
    let dispatcher = Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default());
    let outcome = dispatcher
        .dispatch_one(&LeaseOwner::parse("worker-tls").unwrap(), true)
        .await
        .unwrap();
    assert!(outcome.claimed);
    let created = store.control_space(&tenant, &space).await.unwrap().unwrap();
    assert_eq!(created.state, ControlSpaceState::Active);
    assert!(remote.has_space(&created.provisioning_key));
    assert!(session_is_encrypted(&db).await);
}
