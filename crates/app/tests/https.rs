//! TLS end to end through `serve`'s wiring (issue 26): the service calls an `https://`
//! KnowledgeFS whose certificate a CA made in the test issued (trusted through
//! `knowledge_fs_ca_file`), and the admin listener serves HTTPS with `tls_cert_file` /
//! `tls_key_file`, its console cookie then `Secure`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::{TOKEN, test_config};
use serde_json::{Value, json};
use tenantry_app::config::AdminTls;
use tenantry_app::service::Service;
use tenantry_remote_http::RemoteTls;
use tenantry_remote_http::client::client_builder;
use tenantry_store_seaorm::testing::fresh_database;
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};
use tenantry_testkit::tls::{LOOPBACK_NAMES, TestCa, server_config};

/// A CA made for the test, its PEM file, a server certificate for loopback (files), and the
/// folder holding them.
struct Pki {
    ca: TestCa,
    ca_file: PathBuf,
    cert_file: PathBuf,
    key_file: PathBuf,
    _dir: tempfile::TempDir,
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCa::new("tenantry-test-ca").unwrap();
    let ca_file = ca.write_pem(&dir.path().join("ca.pem")).unwrap();
    let (cert_file, key_file) = ca
        .server_cert(LOOPBACK_NAMES)
        .unwrap()
        .write_pem(dir.path(), "server")
        .unwrap();
    Pki {
        ca,
        ca_file,
        cert_file,
        key_file,
        _dir: dir,
    }
}

/// A client of the admin API that trusts `ca_file` and follows no redirect.
fn admin_client(ca_file: &std::path::Path) -> reqwest::Client {
    client_builder(&RemoteTls::new().with_ca_file(ca_file))
        .unwrap()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Polls `GET url` (with the admin token) until `ready` accepts the body; panics after 30 s.
/// Asks the admin API at `base` to create control space `cs1` of tenant `t1`; asserts 202.
async fn create_cs1(http: &reqwest::Client, base: &str) {
    let created = http
        .post(format!("{base}/v1/tenants/t1/control-spaces"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", "create-t1-cs1")
        .json(&json!({"control_space_id": "cs1", "name": "N", "slug": "n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 202);
}

async fn wait_for(http: &reqwest::Client, url: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let response = http.get(url).bearer_auth(TOKEN).send().await.unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status == 200 && ready(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{url} never got there: {status} {body}"
        );
        // Real time: the service runs its own workers and answers over HTTP.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Case 011: with an `https://` KnowledgeFS the service used to accept the command and fail
/// every attempt with "invalid URL, scheme is not http" until it was dead-lettered. Now the
/// service's own client (built by `Service::prepare` from the configuration, as `serve` does)
/// verifies the remote's certificate against `knowledge_fs_ca_file` and the command completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_011_https_remote_command_completes() {
    let p = pki();
    let tls = server_config(&p.ca.server_cert(LOOPBACK_NAMES).unwrap(), None).unwrap();
    let (url, remote) = ReferenceRemote::start_tls_on(
        ([127, 0, 0, 1], 0).into(),
        RemoteConfig::default(),
        Some(tls),
    )
    .await
    .unwrap();
    assert!(url.starts_with("https://"), "{url}");
    let db = fresh_database().await;
    let mut config = test_config(&remote);
    config.knowledge_fs_tls = RemoteTls::new().with_ca_file(&p.ca_file);
    let service = Service::start(&config, db.db.clone()).await.unwrap();
    let base = format!("http://{}", service.addr());
    let http = admin_client(&p.ca_file);
    create_cs1(&http, &base).await;
    let space = wait_for(
        &http,
        &format!("{base}/v1/tenants/t1/control-spaces/cs1"),
        |body| body["state"] == "active",
    )
    .await;
    assert!(space["knowledge_space_id"].is_string(), "{space}");
    assert_eq!(remote.truth().spaces().len(), 1);
    service.shutdown().await;
}

/// Without the CA file the same remote is not trusted: the command is not completed, and its
/// last error is a remote connection failure (`REMOTE_UNAVAILABLE`) that names the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_https_remote_is_recorded_as_a_connection_failure() {
    let p = pki();
    let tls = server_config(&p.ca.server_cert(LOOPBACK_NAMES).unwrap(), None).unwrap();
    let (_, remote) = ReferenceRemote::start_tls_on(
        ([127, 0, 0, 1], 0).into(),
        RemoteConfig::default(),
        Some(tls),
    )
    .await
    .unwrap();
    let db = fresh_database().await;
    let config = test_config(&remote);
    let service = Service::start(&config, db.db.clone()).await.unwrap();
    let base = format!("http://{}", service.addr());
    let http = admin_client(&p.ca_file);
    create_cs1(&http, &base).await;
    let commands = wait_for(&http, &format!("{base}/v1/commands"), |body| {
        body["items"][0]["last_error"]["code"].is_string()
    })
    .await;
    let command = &commands["items"][0];
    assert_eq!(
        command["last_error"]["code"], "REMOTE_UNAVAILABLE",
        "{command}"
    );
    let message = command["last_error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("not issued by a trusted CA"), "{message}");
    assert!(remote.truth().spaces().is_empty());
    service.shutdown().await;
}

/// The admin listener over TLS: the API answers over HTTPS to a client that trusts the CA,
/// a plain-HTTP request gets no answer, and the console's session cookie is `Secure`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_listener_serves_https_and_the_console_cookie_is_secure() {
    let p = pki();
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let db = fresh_database().await;
    let mut config = test_config(&remote);
    config.admin_tls = Some(AdminTls {
        cert_file: p.cert_file.clone(),
        key_file: p.key_file.clone(),
    });
    let service = Service::start(&config, db.db.clone()).await.unwrap();
    let http = admin_client(&p.ca_file);
    let base = format!("https://{}", service.addr());
    let health = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let commands = http
        .get(format!("{base}/v1/commands"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(commands.status().as_u16(), 200);
    // Plain HTTP to the TLS port is not served.
    let plain = http
        .get(format!("http://{}/healthz", service.addr()))
        .timeout(Duration::from_secs(5))
        .send()
        .await;
    assert!(
        plain.is_err() || !plain.as_ref().unwrap().status().is_success(),
        "{plain:?}"
    );
    // A client that does not trust the CA is refused.
    let untrusted = client_builder(&RemoteTls::new()).unwrap().build().unwrap();
    assert!(
        untrusted
            .get(format!("{base}/healthz"))
            .send()
            .await
            .is_err()
    );
    let login = http
        .post(format!("{base}/ui/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303);
    let cookie = login
        .headers()
        .get("set-cookie")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    service.shutdown().await;
}

/// Behind a reverse proxy that terminates TLS (plain HTTP on loopback), the cookie is `Secure`
/// when the proxy forwards `X-Forwarded-Proto: https`, and not otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_cookie_is_secure_behind_a_tls_proxy() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let db = fresh_database().await;
    let config = test_config(&remote);
    let service = Service::start(&config, db.db.clone()).await.unwrap();
    let http = client_builder(&RemoteTls::new())
        .unwrap()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = |proto: Option<&'static str>| {
        let mut request = http
            .post(format!("http://{}/ui/login", service.addr()))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={TOKEN}"));
        if let Some(proto) = proto {
            request = request.header("X-Forwarded-Proto", proto);
        }
        async move {
            let response = request.send().await.unwrap();
            response
                .headers()
                .get("set-cookie")
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned()
        }
    };
    let proxied = login(Some("https")).await;
    assert!(proxied.ends_with("; Secure"), "{proxied}");
    let direct = login(None).await;
    assert!(!direct.contains("Secure"), "{direct}");
    let plain_proxy = login(Some("http")).await;
    assert!(!plain_proxy.contains("Secure"), "{plain_proxy}");
    service.shutdown().await;
}

/// The `tenantry` binary without the caller's `TENANTRY_*` variables.
fn tenantry() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_tenantry"));
    for (name, _) in std::env::vars() {
        if name.starts_with("TENANTRY_") {
            command.env_remove(name);
        }
    }
    command
}

/// `serve` refuses a plain `http://` KnowledgeFS on a non-loopback host (exit 2, naming the
/// setting and why) and a CA file that does not exist, before touching any database.
#[test]
fn serve_refuses_plain_http_off_loopback_and_a_missing_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = tenantry()
        .current_dir(dir.path())
        .arg("serve")
        .env("TENANTRY_KNOWLEDGE_FS_URL", "http://kfs.internal:9443")
        .env("TENANTRY_KNOWLEDGE_FS_TOKEN", "t")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("knowledge_fs_url") && stderr.contains("allow_plain_http"),
        "{stderr}"
    );
    let out = tenantry()
        .current_dir(dir.path())
        .arg("serve")
        .env("TENANTRY_KNOWLEDGE_FS_URL", "https://kfs.internal:9443")
        .env("TENANTRY_KNOWLEDGE_FS_TOKEN", "t")
        .env(
            "TENANTRY_KNOWLEDGE_FS_CA_FILE",
            dir.path().join("no-ca.pem"),
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("knowledge_fs_ca_file") && stderr.contains("no-ca.pem"),
        "{stderr}"
    );
    assert!(!dir.path().join("tenantry.db").exists());
}
