//! Wiring of the directory projection: the signed HTTP provider and the SeaORM store into the
//! engine's `DirectoryProjector`, and the status `GET /v1/directory/status` and `/readyz`
//! report.

use std::sync::Arc;

use serde_json::{Value, json};
use tenantry_directory::{ProjectionLimits, ProjectorConfig};
use tenantry_engine::directory::DirectoryProjector;
use tenantry_ports::clock::Clock;
use tenantry_ports::directory::ProjectionStateReader;
use tenantry_remote_http::directory::signature::TrustedKeys;
use tenantry_remote_http::directory::{DirectoryClientConfig, HttpDirectoryProvider};
use tenantry_store_seaorm::Database;
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;

use crate::config::DirectorySettings;

/// The projector as the service runs it.
pub type Projector = DirectoryProjector<HttpDirectoryProvider, SeaOrmDirectoryStore>;

/// What the admin API needs to report on the projection.
#[derive(Clone)]
pub struct DirectoryHandle {
    /// This replica's projector.
    pub projector: Arc<Projector>,
    /// The store, for the shared state row.
    pub store: SeaOrmDirectoryStore,
    /// The projector's clock (the process's one clock): the staleness of the status report
    /// is measured on it.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for DirectoryHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryHandle").finish_non_exhaustive()
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

/// Checks the settings and builds the provider client; touches no database.
///
/// # Errors
/// A message naming the setting that cannot be used (`directory_trusted_keys`,
/// `directory_url`, `directory_instance`).
pub fn prepare(settings: &DirectorySettings) -> Result<PreparedDirectory, String> {
    let mut keys = TrustedKeys::new();
    for (id, hex) in &settings.trusted_keys {
        keys.insert_hex(id.clone(), hex)
            .map_err(|e| format!("directory_trusted_keys: {e}"))?;
    }
    let mut client = DirectoryClientConfig::new(settings.url.clone(), keys);
    client.bearer_token = settings.token.clone();
    let provider =
        HttpDirectoryProvider::new(&client).map_err(|e| format!("directory_url: {e}"))?;
    let config = ProjectorConfig::new(
        &settings.instance,
        settings.sync_interval,
        settings.max_staleness,
        settings.event_limit,
        ProjectionLimits::default(),
    )
    .map_err(|e| format!("directory_instance: {e}"))?;
    Ok(PreparedDirectory { config, provider })
}

impl PreparedDirectory {
    /// The projector over the store of `db`, reading and sleeping on `clock`.
    pub fn attach(self, db: &Database, clock: Arc<dyn Clock>) -> DirectoryHandle {
        let store = SeaOrmDirectoryStore::new(db);
        let projector = Arc::new(
            DirectoryProjector::new(self.config, self.provider, store.clone())
                .with_clock(clock.clone()),
        );
        DirectoryHandle {
            projector,
            store,
            clock,
        }
    }
}

/// Builds the projector from the settings ([`prepare`] then [`PreparedDirectory::attach`]).
///
/// # Errors
/// A message naming the setting that cannot be used (`directory_trusted_keys`,
/// `directory_url`, `directory_instance`).
pub fn build(
    settings: &DirectorySettings,
    db: &Database,
    clock: Arc<dyn Clock>,
) -> Result<DirectoryHandle, String> {
    Ok(prepare(settings)?.attach(db, clock))
}

/// The status document of `GET /v1/directory/status`; also sets the
/// `tenantry_directory_staleness_seconds` gauge and the `tenantry_directory_refusals_total`
/// counters.
///
/// `last_refusal` is the latest provider answer a projection rule refused on this replica
/// (`rule`, `workspace`, `message`, `since`, `last_at`, `count`, `resolved_at`; `null` when
/// none): while it is unresolved the whole projection waits, not only the named workspace.
pub async fn status(handle: Option<&DirectoryHandle>) -> Value {
    let Some(handle) = handle else {
        return json!({
            "configured": false,
            "ready": null,
            "cursor": null,
            "staleness_seconds": null,
            "message": "no directory provider is configured (set directory_url)"
        });
    };
    let config = handle.projector.config();
    let readiness = handle.projector.require_ready();
    let state = handle.store.projection_state(&config.instance).await;
    let (shared_cursor, last_applied_at, staleness, state_error) = match &state {
        Ok(Some(s)) => {
            let age = (handle.clock.now() - s.last_applied_at)
                .num_milliseconds()
                .max(0) as f64
                / 1000.0;
            (Some(s.cursor), Some(s.last_applied_at), Some(age), None)
        }
        Ok(None) => (None, None, None, None),
        Err(e) => (None, None, None, Some(e.to_string())),
    };
    if let Some(age) = staleness {
        crate::metrics::set_directory_staleness(age);
    }
    let refusals = handle.projector.refusals();
    for (rule, count) in &refusals.total_by_rule {
        crate::metrics::set_directory_refusals(rule.as_str(), *count);
    }
    json!({
        "configured": true,
        "instance_uuid": config.instance.as_str(),
        "ready": readiness.is_ok(),
        "not_ready_reason": readiness.err().map(|e| e.to_string()),
        "cursor": handle.projector.consumer_cursor(),
        "projection_cursor": shared_cursor,
        "last_applied_at": last_applied_at,
        "staleness_seconds": staleness,
        "max_staleness_seconds": config.max_staleness.as_secs_f64(),
        "resources": handle.projector.resource_snapshot(),
        "last_refusal": refusals.last,
        "refusals_total": refusals.total_by_rule,
        "storage_error": state_error,
    })
}
