//! Wiring of the directory projection: the signed HTTP provider and the projection store
//! ([`crate::stores::Stores::directory`]) into the engine's `DirectoryProjector`. The status it reports (`GET /v1/directory/status`,
//! `/readyz`, the console) is the operator crate's ([`tenantry_operator::directory`]).

use std::sync::Arc;

use tenantry_directory::ProjectorConfig;
use tenantry_engine::directory::DirectoryProjector;
use tenantry_ports::clock::Clock;
use tenantry_remote_http::directory::signature::TrustedKeys;
use tenantry_remote_http::directory::{DirectoryClientConfig, HttpDirectoryProvider};

use crate::config::{DirectoryCapacity, DirectorySettings};
use crate::stores::ProjectionStore;

/// The projector as the service runs it.
pub type Projector = DirectoryProjector<HttpDirectoryProvider, Arc<dyn ProjectionStore>>;

/// The projector the service runs, its store and clock.
#[derive(Clone)]
pub struct ProjectorHandle {
    /// This replica's projector.
    pub projector: Arc<Projector>,
    /// The store, for the shared state row.
    pub store: Arc<dyn ProjectionStore>,
    /// The projector's clock (the process's one clock): the staleness of the status report
    /// is measured on it.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ProjectorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectorHandle").finish_non_exhaustive()
    }
}

impl ProjectorHandle {
    /// The same projector and store as the operator front ends read them (through the read
    /// ports only).
    pub fn reports(&self) -> tenantry_operator::directory::DirectoryHandle {
        tenantry_operator::directory::DirectoryHandle {
            projector: self.projector.clone(),
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }
}

/// The directory settings checked and turned into a client, before any database is opened
/// (so a bad setting stops `serve` before a migration runs).
pub struct PreparedDirectory {
    config: ProjectorConfig,
    provider: HttpDirectoryProvider,
}

impl std::fmt::Debug for PreparedDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedDirectory").finish_non_exhaustive()
    }
}

/// Checks the settings and builds the provider client (reading at most
/// `capacity.max_response_bytes` of an answer) and the projector's configuration (with
/// `capacity.limits`); touches no database.
///
/// # Errors
/// A message naming the setting that cannot be used (`directory_trusted_keys`,
/// `directory_url`, `directory_instance`).
pub fn prepare(
    settings: &DirectorySettings,
    capacity: &DirectoryCapacity,
) -> Result<PreparedDirectory, String> {
    let mut keys = TrustedKeys::new();
    for (id, hex) in &settings.trusted_keys {
        keys.insert_hex(id.clone(), hex)
            .map_err(|e| format!("directory_trusted_keys: {e}"))?;
    }
    let mut client = DirectoryClientConfig::new(settings.url.clone(), keys)
        .with_tls(settings.tls.clone())
        .with_max_response_bytes(capacity.max_response_bytes)
        .with_snapshot_page_size(
            (capacity.snapshot_page_size > 0).then_some(capacity.snapshot_page_size),
        );
    client.bearer_token = settings.token.as_ref().map(|t| t.expose().to_owned());
    let provider =
        HttpDirectoryProvider::new(&client).map_err(|e| format!("directory_url: {e}"))?;
    let config = ProjectorConfig::new(
        &settings.instance,
        settings.sync_interval,
        settings.max_staleness,
        settings.event_limit,
        capacity.limits,
    )
    .map_err(|e| format!("directory_instance: {e}"))?;
    Ok(PreparedDirectory { config, provider })
}

impl PreparedDirectory {
    /// The projector over `store`, reading and sleeping on `clock`.
    pub fn attach(self, store: Arc<dyn ProjectionStore>, clock: Arc<dyn Clock>) -> ProjectorHandle {
        let projector = Arc::new(
            DirectoryProjector::new(self.config, self.provider, store.clone())
                .with_clock(clock.clone()),
        );
        ProjectorHandle {
            projector,
            store,
            clock,
        }
    }
}
