//! What the demo needs from the service it drives: the binary that embeds the demo (the
//! `tenantry` app) implements [`ServiceHost`], so this crate depends on the app's wiring only
//! through these traits (the app depends on this crate, not the other way round).
//!
//! The demo starts the service exactly as `serve` does, with [`ServiceSettings`] laid over the
//! service's defaults, and afterwards reads what it checks through [`RunningService`]: the
//! admin API's address, the metrics tally, and the projected directory tables through the
//! store's read port.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use tenantry_ports::directory::ProjectionTablesReader;
use tenantry_store_seaorm::Database;

/// Where the service's directory projector reads from: the `directory_*` settings of
/// `serve` (see docs/operations.md), pointing at the demo's reference directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryTarget {
    /// Base URL of the reference directory.
    pub url: String,
    /// Bearer token the directory requires.
    pub token: Option<String>,
    /// Directory instance projected.
    pub instance: String,
    /// Trusted signing keys: (key id, 64 hex digits of the Ed25519 public key).
    pub trusted_keys: Vec<(String, String)>,
    /// Time between syncs.
    pub sync_interval: Duration,
    /// Age after which the projection is stale.
    pub max_staleness: Duration,
    /// Events asked per page (1..=100).
    pub event_limit: u32,
}

/// The settings the demo changes from the service's defaults; every other setting keeps its
/// default. Field meanings are those of the `serve` settings of the same name
/// (docs/operations.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceSettings {
    /// Admin API address (the demo uses a loopback port 0).
    pub listen: SocketAddr,
    /// Admin API bearer token (random per run).
    pub admin_token: String,
    /// Lifecycle workers.
    pub workers: u32,
    /// Commands claimed per batch.
    pub claim_batch: u32,
    /// Sleep of an idle worker.
    pub idle_poll: Duration,
    /// Lease of a claimed command.
    pub lease: Duration,
    /// Ceiling of the retry back-off.
    pub retry_max_delay: Duration,
    /// Time in-flight dispatches get at shutdown.
    pub shutdown_grace: Duration,
    /// Base URL of the reference KnowledgeFS.
    pub knowledge_fs_url: String,
    /// Its bearer token.
    pub knowledge_fs_token: String,
    /// Client deadline of one KnowledgeFS call.
    pub knowledge_fs_deadline: Duration,
    /// Grace before a deletion trusts the remote's "absent".
    pub deletion_absence_grace: Duration,
    /// Concurrent KnowledgeFS calls at most.
    pub knowledge_fs_max_concurrent_calls: usize,
    /// The directory projection's provider.
    pub directory: DirectoryTarget,
    /// With `--tls`: the PEM file of the CA that issued both reference remotes' certificates,
    /// to trust as `knowledge_fs_ca_file` and `directory_ca_file`.
    pub remote_ca_file: Option<std::path::PathBuf>,
}

/// Counters of the service's metrics sink the report quotes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceTally {
    /// Retries per error code.
    pub retries: BTreeMap<String, u64>,
    /// Dispatches without a settlement per error code.
    pub dispatch_errors: BTreeMap<String, u64>,
}

/// Starts the service the demo drives, and knows the service's database conventions.
#[async_trait]
pub trait ServiceHost: Send + Sync {
    /// The running service.
    type Running: RunningService;

    /// Starts the service on `db` (already migrated) with `settings` over its defaults, as
    /// `serve` does.
    ///
    /// # Errors
    /// The reason, as text, when the service cannot start (a bad setting, a port in use).
    async fn start(&self, settings: ServiceSettings, db: Database)
    -> Result<Self::Running, String>;

    /// Pool connections the service needs beyond one per lifecycle worker.
    fn connections_besides_workers(&self) -> u32;

    /// `url` with any password hidden, for the report.
    fn redact_url(&self, url: &str) -> String;

    /// Closes a pool the demo opened itself.
    async fn close_pool(&self, db: Database);
}

/// A service started by [`ServiceHost::start`].
#[async_trait]
pub trait RunningService: Send + Sync {
    /// Address of the admin API.
    fn addr(&self) -> SocketAddr;

    /// The metrics counters so far.
    fn tally(&self) -> ServiceTally;

    /// The store's read port of the projected directory tables.
    fn directory_tables(&self) -> Box<dyn ProjectionTablesReader>;

    /// Stops the workers and the admin API gracefully.
    async fn shutdown(self);
}
