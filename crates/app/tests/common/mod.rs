//! Shared harness of the app's end-to-end tests: a fresh database (SQLite, or PostgreSQL with
//! `TENANTRY_TEST_PG_URL`), a reference KnowledgeFS, and the service on loopback ports.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

pub mod console;
pub mod directory;
pub mod documented_series;

use std::time::Duration;

use serde_json::Value;
use tenantry_app::config::Config;
use tenantry_app::service::Service;
use tenantry_lifecycle::CommandRecord;
use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::{TestDatabase, fresh_database};
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};

/// Admin token of every test service.
pub const TOKEN: &str = "test-admin-token-0123456789";

/// A reqwest client with Tenantry's TLS configuration: reqwest is built without a default
/// crypto provider, so `reqwest::Client::new()` would panic.
pub fn http_client() -> reqwest::Client {
    tenantry_remote_http::client::client_builder(&tenantry_remote_http::RemoteTls::default())
        .unwrap()
        .build()
        .unwrap()
}

/// A running service with its remote and database.
pub struct Harness {
    pub service: Option<Service>,
    pub remote: ReferenceRemote,
    pub base: String,
    pub http: reqwest::Client,
    pub db: TestDatabase,
    pub config: Config,
}

/// The test configuration: loopback, token, fast polls and retries.
pub fn test_config(remote: &ReferenceRemote) -> Config {
    let mut config = Config::defaults();
    config.listen = ([127, 0, 0, 1], 0).into();
    config.admin_token = Some(TOKEN.into());
    config.workers = 2;
    config.idle_poll = Duration::from_millis(20);
    config.retry_max_delay = Duration::from_millis(200);
    config.lease = Duration::from_secs(10);
    config.shutdown_grace = Duration::from_secs(10);
    config.knowledge_fs_url = Some(remote.base_url().to_owned());
    config.knowledge_fs_token = Some(remote.bearer_token().into());
    config.knowledge_fs_deadline = Duration::from_secs(5);
    config
}

impl Harness {
    /// Starts everything with `remote` configuration and `tweak` applied to the service's.
    pub async fn start_with(remote: RemoteConfig, tweak: impl FnOnce(&mut Config)) -> Self {
        let db = fresh_database().await;
        let (_, remote) = ReferenceRemote::start(remote).await.unwrap();
        let mut config = test_config(&remote);
        tweak(&mut config);
        let service = Service::start(&config, db.db.clone()).await.unwrap();
        let base = format!("http://{}", service.addr());
        Self {
            service: Some(service),
            remote,
            base,
            http: http_client(),
            db,
            config,
        }
    }

    /// Starts with a fault-free remote and the test configuration.
    pub async fn start() -> Self {
        Self::start_with(RemoteConfig::default(), |_| {}).await
    }

    /// Starts a new service on the same database and remote (after a shutdown).
    pub async fn restart(&mut self) {
        let service = Service::start(&self.config, self.db.db.clone())
            .await
            .unwrap();
        self.base = format!("http://{}", service.addr());
        self.service = Some(service);
    }

    /// Shuts the service down.
    pub async fn stop(&mut self) -> tenantry_app::service::ShutdownReport {
        self.service.take().unwrap().shutdown().await
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `method path` with the token, an optional JSON body and Idempotency-Key.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self.http.request(method, self.url(path)).bearer_auth(TOKEN);
        if let Some(body) = body {
            request = request.json(body);
        }
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None, None).await
    }

    pub async fn post(&self, path: &str, body: &Value, key: Option<&str>) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body), key)
            .await
    }

    pub async fn delete(&self, path: &str, key: Option<&str>) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, path, None, key).await
    }

    /// Creates a control space and returns the 202 body.
    pub async fn create(&self, tenant: &str, cs: &str) -> Value {
        let (status, body) = self
            .post(
                &format!("/v1/tenants/{tenant}/control-spaces"),
                &serde_json::json!({"control_space_id": cs, "name": "N", "slug": "n"}),
                Some(&format!("create-{tenant}-{cs}")),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        body
    }

    /// Creates control space `cs` of tenant `t-1` with the remote refusing its provision once
    /// (400 INVALID_REQUEST), waits until the command has failed, and returns its id.
    pub async fn failed_command(&self, cs: &str) -> String {
        self.remote.script(
            tenantry_testkit::fault::Route::Provision,
            [Some(tenantry_testkit::fault::Fault::InvalidRequest)],
        );
        let created = self.create("t-1", cs).await;
        let id = created["command_id"].as_str().unwrap().to_owned();
        self.wait_for(
            &format!("/v1/tenants/t-1/control-spaces/{cs}"),
            |b| b["lifecycle_status"] == "failed",
            Duration::from_secs(20),
        )
        .await;
        id
    }

    /// Every command in the database.
    pub async fn commands(&self) -> Vec<CommandRecord> {
        SeaOrmLifecycleStore::new(&self.db.db)
            .list_commands(&CommandFilter {
                limit: 10_000,
                ..CommandFilter::default()
            })
            .await
            .unwrap()
    }

    /// Polls the control space until its state is `state` (panics after `within`).
    pub async fn wait_state(&self, tenant: &str, cs: &str, state: &str, within: Duration) -> Value {
        let path = format!("/v1/tenants/{tenant}/control-spaces/{cs}");
        self.wait_for(&path, |body| body["state"] == state, within)
            .await
    }

    /// Polls `GET path` until it answers 200 with a body `ready` accepts (panics after
    /// `within`, naming the last answer).
    pub async fn wait_for(
        &self,
        path: &str,
        ready: impl Fn(&Value) -> bool,
        within: Duration,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (status, body) = self.get(path).await;
            if status == 200 && ready(&body) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path} never got there: {status} {body}"
            );
            // Real time: the service under test runs on its own runtime and answers over HTTP.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The Prometheus text of `GET /metrics`.
    pub async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// Asserts an error answer: `expected_status`, `code`, and a non-empty `message`.
pub fn assert_error(status: u16, body: &Value, expected_status: u16, code: &str) {
    assert_eq!(status, expected_status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
}
