//! The HTTP clients over HTTPS (issue 26): the reference remotes served with a certificate of a
//! CA made in the test, and the clients trusting that CA through a CA file. A verified call
//! succeeds; a certificate of another CA, an expired one and one for another host name each
//! fail as a connection failure (not dispatched, `REMOTE_UNAVAILABLE`) whose message names the
//! cause; mutual TLS is accepted with the client certificate and refused without it; the
//! directory's signed pages are fetched over HTTPS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tenantry_directory::InstanceUuid;
use tenantry_kernel::{
    ControlSpaceId, DispatchOutcome, IdempotencyKey, OperationId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::{ErrorCode, ProvisionRequest};
use tenantry_ports::directory::{DirectoryProvider, ProviderError};
use tenantry_ports::lifecycle::{KnowledgeFs, RemoteError};
use tenantry_remote_http::RemoteTls;
use tenantry_remote_http::directory::signature::TrustedKeys;
use tenantry_remote_http::directory::{DirectoryClientConfig, HttpDirectoryProvider};
use tenantry_remote_http::knowledge_fs::{HttpKnowledgeFs, KnowledgeFsConfig};
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};
use tenantry_testkit::tls::{LOOPBACK_NAMES, TestCa, TestCert, server_config};

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn provision_request(n: u32) -> ProvisionRequest {
    ProvisionRequest {
        namespace_id: TenantId::parse("tenant-tls").unwrap(),
        control_space_id: ControlSpaceId::parse(format!("cs-{n}")).unwrap(),
        operation_id: OperationId::parse(format!("op-{n}")).unwrap(),
        provisioning_key: ProvisioningKey::parse(format!("op-{n}")).unwrap(),
        idempotency_key: IdempotencyKey::parse(format!("idem-{n}")).unwrap(),
        name: "Space".to_owned(),
        slug: format!("space-{n}"),
        icon: String::new(),
        description: String::new(),
        model_intent: None,
        profile_intent: None,
    }
}

/// A test CA, its PEM file in a temporary folder, and that folder.
struct Pki {
    ca: TestCa,
    ca_file: PathBuf,
    dir: tempfile::TempDir,
}

fn pki(name: &str) -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new(name).unwrap();
    let ca_file = ca
        .write_pem(&dir.path().join(format!("{name}.pem")))
        .unwrap();
    Pki { ca, ca_file, dir }
}

/// The reference KnowledgeFS over HTTPS with `cert` (and a required client certificate of
/// `client_ca`, if given).
async fn remote(cert: &TestCert, client_ca: Option<&TestCa>) -> (String, ReferenceRemote) {
    let tls = server_config(cert, client_ca).unwrap();
    ReferenceRemote::start_tls_on(loopback(), RemoteConfig::default(), Some(tls))
        .await
        .unwrap()
}

fn client(url: &str, remote: &ReferenceRemote, tls: RemoteTls) -> HttpKnowledgeFs {
    HttpKnowledgeFs::new(&KnowledgeFsConfig::new(url, remote.bearer_token()).with_tls(tls)).unwrap()
}

/// A provision over HTTPS that must fail during the handshake: asserts it is a connection
/// failure (not dispatched, `REMOTE_UNAVAILABLE`) and that the remote saw no request.
async fn refused_handshake(url: &str, remote: &ReferenceRemote, tls: RemoteTls) -> RemoteError {
    let error = client(url, remote, tls)
        .provision(&provision_request(1))
        .await
        .unwrap_err();
    assert_eq!(error.failure, DispatchOutcome::NotDispatched, "{error:?}");
    assert_eq!(error.code, ErrorCode::RemoteUnavailable, "{error:?}");
    assert!(error.message.contains("TLS handshake failed"), "{error}");
    let requests = remote.truth().requests();
    assert!(
        requests.is_empty(),
        "the remote saw no request: {requests:?}"
    );
    error
}

#[tokio::test]
async fn verified_https_call_succeeds_with_the_ca_file() {
    let p = pki("kfs-ca");
    let (url, remote) = remote(&p.ca.server_cert(LOOPBACK_NAMES).unwrap(), None).await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let fs = client(&url, &remote, RemoteTls::new().with_ca_file(&p.ca_file));
    let space = fs.provision(&provision_request(1)).await.unwrap();
    assert_eq!(remote.truth().spaces().len(), 1);
    assert_eq!(
        Some(&space.knowledge_space_id),
        remote
            .truth()
            .spaces()
            .first()
            .map(|s| &s.knowledge_space_id)
    );
}

#[tokio::test]
async fn certificate_of_another_ca_is_a_connection_failure_naming_the_unknown_issuer() {
    let trusted = pki("trusted-ca");
    let other = TestCa::new("other-ca").unwrap();
    let (url, remote) = remote(&other.server_cert(LOOPBACK_NAMES).unwrap(), None).await;
    let error = refused_handshake(
        &url,
        &remote,
        RemoteTls::new().with_ca_file(&trusted.ca_file),
    )
    .await;
    assert!(
        error.message.contains("not issued by a trusted CA"),
        "{error}"
    );
    // Without a CA file only the platform's roots are trusted: the same refusal.
    let error = refused_handshake(&url, &remote, RemoteTls::new()).await;
    assert!(error.message.contains("unknown issuer"), "{error}");
}

#[tokio::test]
async fn expired_certificate_is_a_connection_failure_naming_the_expiry() {
    let p = pki("kfs-ca");
    let (url, remote) = remote(&p.ca.expired_server_cert(LOOPBACK_NAMES).unwrap(), None).await;
    let error = refused_handshake(&url, &remote, RemoteTls::new().with_ca_file(&p.ca_file)).await;
    assert!(error.message.contains("has expired"), "{error}");
}

#[tokio::test]
async fn certificate_for_another_host_name_is_a_connection_failure_naming_the_host() {
    let p = pki("kfs-ca");
    let (url, remote) = remote(&p.ca.server_cert(&["kfs.example"]).unwrap(), None).await;
    let error = refused_handshake(&url, &remote, RemoteTls::new().with_ca_file(&p.ca_file)).await;
    assert!(
        error.message.contains("not valid for the host name"),
        "{error}"
    );
}

#[tokio::test]
async fn mutual_tls_is_accepted_with_the_client_certificate_and_refused_without() {
    let p = pki("kfs-ca");
    let (url, remote) = remote(&p.ca.server_cert(LOOPBACK_NAMES).unwrap(), Some(&p.ca)).await;
    let (cert, key) =
        p.ca.client_cert("tenantry")
            .unwrap()
            .write_pem(p.dir.path(), "client")
            .unwrap();
    let with_identity = RemoteTls::new()
        .with_ca_file(&p.ca_file)
        .with_client_identity(&cert, &key);
    client(&url, &remote, with_identity)
        .provision(&provision_request(1))
        .await
        .unwrap();
    assert_eq!(remote.truth().spaces().len(), 1);

    let error = client(&url, &remote, RemoteTls::new().with_ca_file(&p.ca_file))
        .provision(&provision_request(2))
        .await
        .unwrap_err();
    assert_eq!(error.failure, DispatchOutcome::NotDispatched, "{error:?}");
    assert_eq!(error.code, ErrorCode::RemoteUnavailable, "{error:?}");
    assert!(error.message.contains("client certificate"), "{error}");
    assert_eq!(
        remote.truth().spaces().len(),
        1,
        "the refused call created nothing"
    );

    // A client certificate of another CA is refused the same way.
    let stranger = TestCa::new("stranger").unwrap();
    let (cert, key) = stranger
        .client_cert("tenantry")
        .unwrap()
        .write_pem(p.dir.path(), "stranger")
        .unwrap();
    let error = client(
        &url,
        &remote,
        RemoteTls::new()
            .with_ca_file(&p.ca_file)
            .with_client_identity(&cert, &key),
    )
    .provision(&provision_request(3))
    .await
    .unwrap_err();
    assert_eq!(error.failure, DispatchOutcome::NotDispatched, "{error:?}");
    assert_eq!(remote.truth().spaces().len(), 1);
}

#[tokio::test]
async fn directory_signed_pages_are_fetched_over_https() {
    let p = pki("dir-ca");
    let instance = InstanceUuid::parse("instance-tls").unwrap();
    let tls = server_config(&p.ca.server_cert(LOOPBACK_NAMES).unwrap(), None).unwrap();
    let (url, dir) = ReferenceDirectory::start_tls_on(
        loopback(),
        DirectoryServerConfig::new(instance.clone()),
        Some(tls),
    )
    .await
    .unwrap();
    assert!(url.starts_with("https://"), "{url}");
    let mut keys = TrustedKeys::new();
    for (id, key) in dir.trusted_public_keys() {
        keys.insert_hex(id, &hex::encode(key)).unwrap();
    }
    let config = DirectoryClientConfig::new(url.clone(), keys.clone())
        .with_tls(RemoteTls::new().with_ca_file(&p.ca_file));
    let provider = HttpDirectoryProvider::new(&config).unwrap();
    let snapshot = provider.fetch_snapshot(&instance).await.unwrap();
    assert_eq!(snapshot.instance_uuid, instance);
    let events = provider.fetch_events(&instance, 0, 10).await.unwrap();
    assert_eq!(events.instance_uuid, instance);

    // Without the CA file the directory is unavailable, and the message says why.
    let untrusted = HttpDirectoryProvider::new(&DirectoryClientConfig::new(url, keys)).unwrap();
    match untrusted.fetch_snapshot(&instance).await.unwrap_err() {
        ProviderError::Unavailable { message, .. } => {
            assert!(message.contains("not issued by a trusted CA"), "{message}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn unusable_tls_files_are_refused_when_the_client_is_built() {
    let p = pki("kfs-ca");
    let missing = p.dir.path().join("missing.pem");
    let error = HttpKnowledgeFs::new(
        &KnowledgeFsConfig::new("https://127.0.0.1:1", "t")
            .with_tls(RemoteTls::new().with_ca_file(&missing)),
    )
    .unwrap_err();
    assert!(error.to_string().contains("missing.pem"), "{error}");
}

/// A command whose remote presents a certificate the client does not trust is recorded as a
/// remote connection failure (`REMOTE_UNAVAILABLE`, retried), never as a protocol error or an
/// unknown outcome, and its recorded message names the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_records_an_untrusted_certificate_as_a_remote_connection_failure() {
    use tenantry_engine::lifecycle::{CommandIntake, Dispatcher, DispatcherConfig, ManualClock};
    use tenantry_kernel::LeaseOwner;
    use tenantry_lifecycle::CommandStatus;
    use tenantry_lifecycle::intake::CreateControlSpace;
    use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

    let trusted = pki("trusted-ca");
    let other = TestCa::new("other-ca").unwrap();
    let (url, remote) = remote(&other.server_cert(LOOPBACK_NAMES).unwrap(), None).await;
    let db = tenantry_store_seaorm::testing::fresh_database().await;
    let clock = ManualClock::new(chrono::DateTime::UNIX_EPOCH + chrono::Duration::days(20_000));
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock.clone()));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()));
    let dispatcher = Dispatcher::new(
        store.clone(),
        client(
            &url,
            &remote,
            RemoteTls::new().with_ca_file(&trusted.ca_file),
        ),
        DispatcherConfig::default(),
    )
    .with_clock(Arc::new(clock.clone()));
    intake
        .create_control_space(&CreateControlSpace::new(
            TenantId::parse("tenant-tls").unwrap(),
            ControlSpaceId::parse("cs-1").unwrap(),
            IdempotencyKey::parse("create-cs-1").unwrap(),
            "Space",
            "space-1",
        ))
        .await
        .unwrap();
    let owner = LeaseOwner::parse("w1").unwrap();
    let outcome = dispatcher.dispatch_one(&owner, true).await.unwrap();
    assert!(outcome.claimed && !outcome.completed, "{outcome:?}");
    let commands = store
        .list_commands(&CommandFilter {
            limit: 10,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    let command = &commands[0];
    assert_eq!(command.status, CommandStatus::Pending, "{command:?}");
    assert_eq!(
        command.last_error_code.as_ref().map(ErrorCode::as_str),
        Some("REMOTE_UNAVAILABLE"),
        "{command:?}"
    );
    let message = command.last_error_message.clone().unwrap_or_default();
    assert!(message.contains("not issued by a trusted CA"), "{message}");
    assert!(remote.truth().spaces().is_empty());
}
