//! The app's side of `tenantry demo` (feature `demo`): [`AppHost`] starts this crate's
//! [`Service`] for the demo crate (`tenantry_demo`), which holds the workload, the checks and
//! the report. [`run`] is the demo with this service.

use std::net::SocketAddr;

use async_trait::async_trait;
use tenantry_demo::{RunningService, ServiceHost, ServiceSettings, ServiceTally};
use tenantry_ports::directory::ProjectionTablesReader;
use tenantry_store_seaorm::Database;
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;

pub use tenantry_demo::{DemoError, DemoOptions, DemoReport, Faults};

use crate::config::{self, Config, DirectorySettings};
use crate::service::{self, Service};

/// Starts [`Service`] for the demo, exactly as `serve` does, with the demo's settings over
/// [`Config::defaults`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AppHost;

/// The configuration the demo runs the service with: the defaults, then `settings`.
pub fn demo_config(settings: ServiceSettings) -> Config {
    let mut config = Config::defaults();
    config.listen = settings.listen;
    config.admin_token = Some(settings.admin_token);
    config.workers = settings.workers;
    config.claim_batch = settings.claim_batch;
    config.idle_poll = settings.idle_poll;
    config.lease = settings.lease;
    config.retry_max_delay = settings.retry_max_delay;
    config.shutdown_grace = settings.shutdown_grace;
    config.knowledge_fs_url = Some(settings.knowledge_fs_url);
    config.knowledge_fs_token = Some(settings.knowledge_fs_token);
    config.knowledge_fs_deadline = settings.knowledge_fs_deadline;
    config.deletion_absence_grace = settings.deletion_absence_grace;
    config.knowledge_fs_max_concurrent_calls = settings.knowledge_fs_max_concurrent_calls;
    let directory = settings.directory;
    // With `tenantry demo --tls` both remotes serve HTTPS with a certificate of the run's CA.
    let remote_tls = tenantry_remote_http::RemoteTls {
        ca_file: settings.remote_ca_file,
        ..tenantry_remote_http::RemoteTls::default()
    };
    config.knowledge_fs_tls = remote_tls.clone();
    config.directory = Some(DirectorySettings {
        url: directory.url,
        token: directory.token,
        instance: directory.instance,
        trusted_keys: directory.trusted_keys,
        sync_interval: directory.sync_interval,
        max_staleness: directory.max_staleness,
        event_limit: directory.event_limit,
        tls: remote_tls,
    });
    config
}

#[async_trait]
impl ServiceHost for AppHost {
    type Running = Service;

    async fn start(&self, settings: ServiceSettings, db: Database) -> Result<Service, String> {
        Service::start(&demo_config(settings), db)
            .await
            .map_err(|e| e.to_string())
    }

    fn connections_besides_workers(&self) -> u32 {
        config::CONNECTIONS_BESIDES_WORKERS
    }

    fn redact_url(&self, url: &str) -> String {
        config::redact_url(url)
    }

    async fn close_pool(&self, db: Database) {
        service::close_pool(db).await;
    }
}

#[async_trait]
impl RunningService for Service {
    fn addr(&self) -> SocketAddr {
        Service::addr(self)
    }

    fn tally(&self) -> ServiceTally {
        let tally = self.metrics().tally();
        ServiceTally {
            retries: tally.retries,
            dispatch_errors: tally.dispatch_errors,
        }
    }

    fn directory_tables(&self) -> Box<dyn ProjectionTablesReader> {
        Box::new(SeaOrmDirectoryStore::new(self.database()))
    }

    async fn shutdown(self) {
        Service::shutdown(self).await;
    }
}

/// Runs the demo with this crate's service on `database` (already migrated) or, when `None`,
/// on `options.database_url` or a temporary SQLite file ([`tenantry_demo::run`]).
///
/// # Errors
/// [`DemoError`] when the run could not be set up; failed checks are in the report instead.
pub async fn run(
    options: &DemoOptions,
    database: Option<Database>,
) -> Result<DemoReport, DemoError> {
    tenantry_demo::run(&AppHost, options, database).await
}
