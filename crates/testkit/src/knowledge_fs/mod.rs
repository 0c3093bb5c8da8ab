//! The reference KnowledgeFS lifecycle API v1: an in-memory remote with fault injection and
//! ground-truth effect counters.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use tenantry_testkit::knowledge_fs::ReferenceRemote;
//! use tenantry_testkit::fault::FaultProfile;
//!
//! let (base_url, remote) = ReferenceRemote::start_with_profile(FaultProfile::Default).await?;
//! // ... point the client at `base_url` with `remote.bearer_token()`, run the workload ...
//! assert_eq!(remote.truth().check_exactly_once(), Ok(()));
//! remote.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Semantics (documented for clients in `docs/protocol.md`):
//! - provision is idempotent on the provisioning key within a namespace (201 when created,
//!   200 when it existed);
//! - an `Idempotency-Key` is bound to the first request that used it (route, path and body):
//!   the same key with the same request applies the effect at most once and answers with the
//!   current state of that effect; with another request it is refused with 422;
//! - a deletion advances one step per request: `accepted`, `draining` (for
//!   [`ModelConfig::deletion_drain_polls`] requests in all), `irreversible`, `completed`;
//! - a revocation answers `pending` until the grant's watermark covers its sequence
//!   ([`ModelConfig::revoke_watermark_lag_polls`], or a [`Fault::LagWatermark`]).

mod routes;
pub mod state;

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::http::HeaderMap;
use tenantry_kernel::{ControlSpaceId, GrantId, KnowledgeSpaceId, ProvisioningKey, TenantId};

pub use crate::http::RemoteErrorBody;
pub use routes::PATHS;
pub(crate) use routes::document_json;
pub use state::{EffectCounters, ModelConfig, SpaceRecord};

use crate::fault::{DEFAULT_STALL, Fault, FaultInjector, FaultProfile, Route, RoutePlan};
use crate::serve::Server;
use state::KnowledgeFsModel;

/// Bearer token the reference remote accepts unless configured otherwise.
pub const DEFAULT_TOKEN: &str = "reference-remote-token";

/// Configuration of a reference KnowledgeFS.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteConfig {
    /// The bearer token every `/v1` request must carry (`Authorization: Bearer <token>`).
    pub bearer_token: String,
    /// Fault plans of every route.
    pub profile: FaultProfile,
    /// Seed of the random fault draws.
    pub seed: u64,
    /// Deletion and revocation behaviour.
    pub model: ModelConfig,
    /// How long a stalled request waits before answering; must exceed the client deadline.
    pub stall: Duration,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        Self {
            bearer_token: DEFAULT_TOKEN.to_owned(),
            profile: FaultProfile::None,
            seed: 0,
            model: ModelConfig::default(),
            stall: DEFAULT_STALL,
        }
    }
}

impl RemoteConfig {
    /// The default configuration with `profile`.
    pub fn with_profile(profile: FaultProfile) -> Self {
        Self {
            profile,
            ..Self::default()
        }
    }
}

/// A running reference KnowledgeFS on `127.0.0.1`. Dropping it stops the server; call
/// [`ReferenceRemote::shutdown`] to wait for that.
#[derive(Debug)]
pub struct ReferenceRemote {
    server: Server,
    base_url: String,
    shared: Arc<Shared>,
}

impl ReferenceRemote {
    /// Starts a reference remote on `127.0.0.1:0`; returns its base URL
    /// (`http://127.0.0.1:<port>`, no trailing slash) and its handle.
    ///
    /// # Errors
    /// The bind error when no local port can be bound.
    pub async fn start(config: RemoteConfig) -> io::Result<(String, Self)> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), config).await
    }

    /// Starts a reference remote on `addr` (the standalone binary uses a fixed port).
    ///
    /// # Errors
    /// The bind error when `addr` cannot be bound.
    pub async fn start_on(addr: SocketAddr, config: RemoteConfig) -> io::Result<(String, Self)> {
        Self::start_tls_on(addr, config, None).await
    }

    /// Starts a reference remote on `addr` serving HTTPS with `tls` (for example
    /// [`crate::tls::server_config`]; plain HTTP when `None`); the base URL is
    /// `https://<addr>`.
    ///
    /// # Errors
    /// The bind error when `addr` cannot be bound.
    pub async fn start_tls_on(
        addr: SocketAddr,
        config: RemoteConfig,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<(String, Self)> {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let shared = Arc::new(Shared {
            token: config.bearer_token,
            stall: config.stall,
            inner: Mutex::new(Inner {
                model: KnowledgeFsModel::new(config.model),
                faults: FaultInjector::new(config.profile, config.seed),
                requests: BTreeMap::new(),
                traceparents: Vec::new(),
            }),
        });
        let server = Server::start_tls_on(addr, routes::router(Arc::clone(&shared)), tls).await?;
        let base_url = format!("{scheme}://{}", server.addr());
        let remote = Self {
            server,
            base_url: base_url.clone(),
            shared,
        };
        Ok((base_url, remote))
    }

    /// Starts a reference remote with `profile` and otherwise default configuration.
    ///
    /// # Errors
    /// The bind error when no local port can be bound.
    pub async fn start_with_profile(profile: FaultProfile) -> io::Result<(String, Self)> {
        Self::start(RemoteConfig::with_profile(profile)).await
    }

    /// Base URL, `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The accepted bearer token.
    pub fn bearer_token(&self) -> &str {
        &self.shared.token
    }

    /// Appends `faults` to the script of `route`: the next requests on that route meet them in
    /// order (`None` lets one through), before any random draw.
    pub fn script(&self, route: Route, faults: impl IntoIterator<Item = Option<Fault>>) {
        self.shared.lock().faults.script(route, faults);
    }

    /// Replaces the fault plan of `route`.
    pub fn set_plan(&self, route: Route, plan: RoutePlan) {
        self.shared.lock().faults.set_plan(route, plan);
    }

    /// Read access to the ground truth; stays usable after shutdown.
    pub fn truth(&self) -> GroundTruth {
        GroundTruth {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Stops the server: open connections are dropped, in-flight requests get no answer.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// What the remote really did: spaces, effect counters, faults and requests.
#[derive(Debug, Clone)]
pub struct GroundTruth {
    shared: Arc<Shared>,
}

impl GroundTruth {
    /// Every space ever created, deleted ones included.
    pub fn spaces(&self) -> Vec<SpaceRecord> {
        self.shared.lock().model.spaces()
    }

    /// Spaces of `namespace` created with `provisioning_key` (exactly-once: at most one).
    pub fn spaces_by_provisioning_key(
        &self,
        namespace: &TenantId,
        provisioning_key: &ProvisioningKey,
    ) -> Vec<SpaceRecord> {
        self.spaces()
            .into_iter()
            .filter(|s| s.namespace_id == *namespace && s.provisioning_key == *provisioning_key)
            .collect()
    }

    /// Spaces of `namespace` created for `control_space_id`.
    pub fn spaces_by_control_space(
        &self,
        namespace: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Vec<SpaceRecord> {
        self.spaces()
            .into_iter()
            .filter(|s| s.namespace_id == *namespace && s.control_space_id == *control_space_id)
            .collect()
    }

    /// Spaces created per (namespace, provisioning key).
    pub fn created_per_provisioning_key(&self) -> BTreeMap<(TenantId, ProvisioningKey), u32> {
        self.shared.lock().model.created_per_provisioning_key()
    }

    /// Spaces created per (namespace, control space).
    pub fn created_per_control_space(&self) -> BTreeMap<(TenantId, ControlSpaceId), u32> {
        self.shared.lock().model.created_per_control_space()
    }

    /// Effect counters.
    pub fn effects(&self) -> EffectCounters {
        self.shared.lock().model.counters()
    }

    /// The revoke watermark of a grant (0 when never revoked).
    pub fn watermark(&self, space: &KnowledgeSpaceId, grant: &GrantId) -> i64 {
        self.shared.lock().model.watermark(space, grant)
    }

    /// Faults injected per route and fault name ([`Fault::name`]).
    pub fn faults_injected(&self) -> BTreeMap<(Route, &'static str), u64> {
        self.shared.lock().faults.injected()
    }

    /// Requests that passed auth and parsing, per route.
    pub fn requests(&self) -> BTreeMap<Route, u64> {
        self.shared.lock().requests.clone()
    }

    /// The W3C `traceparent` header of every authorized request that carried one, in arrival
    /// order (the clients send the caller's trace context: docs/protocol.md).
    pub fn traceparents(&self) -> Vec<String> {
        self.shared.lock().traceparents.clone()
    }

    /// `Ok` when no control space or provisioning key got more than one space and no
    /// revocation was applied twice; otherwise every violation found.
    ///
    /// # Errors
    /// The list of violations, one sentence each.
    pub fn check_exactly_once(&self) -> Result<(), Vec<String>> {
        let violations = self.shared.lock().model.violations();
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }
}

/// State shared by the handlers.
#[derive(Debug)]
pub(crate) struct Shared {
    token: String,
    stall: Duration,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    model: KnowledgeFsModel,
    faults: FaultInjector,
    requests: BTreeMap<Route, u64>,
    /// The `traceparent` header of every authorized request that carried one, in order.
    traceparents: Vec<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves a consistent model (every step is applied
        // whole or not at all), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn authorize(&self, headers: &HeaderMap) -> Result<(), RemoteErrorBody> {
        crate::http::check_bearer(headers, &self.token)?;
        if let Some(traceparent) = headers.get("traceparent").and_then(|v| v.to_str().ok()) {
            self.lock().traceparents.push(traceparent.to_owned());
        }
        Ok(())
    }

    fn next_fault(&self, route: Route) -> Option<Fault> {
        let mut inner = self.lock();
        *inner.requests.entry(route).or_default() += 1;
        inner.faults.next(route)
    }

    fn apply<T>(&self, step: impl FnOnce(&mut KnowledgeFsModel) -> T) -> T {
        step(&mut self.lock().model)
    }
}
