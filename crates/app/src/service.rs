//! Wiring of `tenantry serve`: adapters into the engine, lifecycle workers, the admin API, and
//! graceful shutdown.
//!
//! Wake-ups: one [`Wakeups`] signal per service wakes its idle workers when its admin API
//! enqueues a command and, on PostgreSQL, when the process's listener connection
//! ([`crate::stores::Stores::spawn_wake_listener`]) sees another process's `NOTIFY`; the idle poll stays the backstop.
//!
//! Shutdown order: `/readyz` turns 503, workers stop claiming, the HTTP server stops
//! accepting and finishes open requests, in-flight dispatches get up to `shutdown_grace` to
//! settle (a dispatch still running then is aborted: its claim stays durable and another worker
//! re-claims it once the lease expires, so nothing is lost). Whoever opened the pool closes it
//! afterwards ([`close_pool`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tenantry_engine::lifecycle::{
    CommandIntake, Dispatcher, DispatcherConfig, GroupCommitConfig, GroupCommitStore, Wakeups,
    WorkerConfig, WorkerPool, unique_lease_owner,
};
use tenantry_engine::scoped_writes::{FenceConfig, ScopedWrites};
use tenantry_lifecycle::RetryPolicy;
use tenantry_ports::clock::{Clock, SystemClock};
use tenantry_remote_http::knowledge_fs::{HttpKnowledgeFs, KnowledgeFsConfig};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use tenantry_operator::ports::{Fences, Store};

use crate::admin::AdminState;
use crate::config::Config;
use crate::metrics::{AppMetrics, MeteredRemote};
use crate::stores::{Database, Stores, WakeHandle};

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting is missing or invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The KnowledgeFS client could not be built from the configuration.
    #[error("knowledge_fs settings are unusable: {0}")]
    Remote(String),
    /// The directory settings cannot be used (the message names the setting).
    #[error("directory settings are unusable: {0}")]
    Directory(String),
    /// The admin listener's certificate or key cannot be used (`tls_cert_file`,
    /// `tls_key_file`).
    #[error("admin listener TLS is unusable: {0}; fix tls_cert_file / tls_key_file")]
    AdminTls(#[from] crate::tls::AdminTlsError),
    /// The admin API address could not be bound.
    #[error("cannot listen on {addr}: {reason}; pick another `listen` address")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        reason: String,
    },
}

/// The process's time source: the system clock as the one [`Clock`] every engine component of
/// this process reads and sleeps on. The only place this crate constructs a [`SystemClock`]
/// (a tidy test checks it); [`Service::launch`] calls it once and hands the same instance to
/// the dispatcher, group commit, intake, operator actions, scoped writes and the directory
/// projector, the operator CLI once per command.
pub fn system_clock() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// What a shutdown did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Workers that stopped on their own (in-flight dispatches settled).
    pub workers_settled: usize,
    /// Workers aborted after the grace period (their leases expire; commands are re-claimed).
    pub workers_aborted: usize,
}

/// A running service.
pub struct Service {
    addr: SocketAddr,
    accepting: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
    workers: Vec<JoinHandle<()>>,
    server: JoinHandle<()>,
    projector: Option<JoinHandle<()>>,
    pruner: Option<JoinHandle<()>>,
    directory: Option<crate::directory::ProjectorHandle>,
    stores: Stores,
    grace: Duration,
    metrics: Arc<AppMetrics>,
    scoped_writes: Fences,
    /// The PostgreSQL listener that wakes the workers (none on SQLite).
    wake_listener: Option<WakeHandle>,
    /// The counts `/metrics` and the console share.
    counts: Arc<crate::counts::CountsCache>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("addr", &self.addr)
            .field("workers", &self.workers.len())
            .finish_non_exhaustive()
    }
}

/// What `serve` checks and reserves before it opens (and migrates) the database: the
/// KnowledgeFS client (its URL parsed), the directory client, and the bound admin listener.
/// A bad URL or a port already in use thus stops the start before any migration runs.
pub struct Prepared {
    remote: HttpKnowledgeFs,
    knowledge_fs_url: String,
    directory: Option<crate::directory::PreparedDirectory>,
    listener: crate::tls::AdminListener,
    addr: SocketAddr,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Prepared {
    /// The bound admin API address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Service {
    /// Checks the remote settings and binds `config.listen`, without touching a database.
    ///
    /// # Errors
    /// [`StartError`] when KnowledgeFS or the directory is not configured usably, or the
    /// address cannot be bound (in use, not local, not permitted).
    pub async fn prepare(config: &Config) -> Result<Prepared, StartError> {
        let (url, token) = config.knowledge_fs()?;
        let mut remote_config =
            KnowledgeFsConfig::new(url, token).with_tls(config.knowledge_fs_tls.clone());
        remote_config.deadline = config.knowledge_fs_deadline;
        remote_config.max_concurrent_calls = config.knowledge_fs_max_concurrent_calls;
        let remote =
            HttpKnowledgeFs::new(&remote_config).map_err(|e| StartError::Remote(e.to_string()))?;
        let directory = config
            .directory
            .as_ref()
            .map(|settings| crate::directory::prepare(settings, &config.directory_capacity))
            .transpose()
            .map_err(StartError::Directory)?;
        let admin_tls = config
            .admin_tls
            .as_ref()
            .map(crate::tls::server_config)
            .transpose()?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| StartError::Bind {
                addr: config.listen,
                reason: e.to_string(),
            })?;
        let addr = listener.local_addr().map_err(|e| StartError::Bind {
            addr: config.listen,
            reason: e.to_string(),
        })?;
        let listener =
            crate::tls::AdminListener::new(listener, admin_tls).map_err(|e| StartError::Bind {
                addr: config.listen,
                reason: e.to_string(),
            })?;
        Ok(Prepared {
            remote,
            knowledge_fs_url: url.to_owned(),
            directory,
            listener,
            addr,
        })
    }

    /// Starts the admin API on `config.listen` and `config.workers` lifecycle workers over the
    /// migrated database `db`, calling KnowledgeFS as configured ([`Service::prepare`], then
    /// [`Service::launch`]).
    ///
    /// # Errors
    /// [`StartError`] when KnowledgeFS is not configured or the address cannot be bound.
    pub async fn start(config: &Config, db: Database) -> Result<Self, StartError> {
        let prepared = Self::prepare(config).await?;
        Ok(Self::launch(config, prepared, db))
    }

    /// Starts the workers, the directory projector and the admin API over the migrated
    /// database `db`, with what [`Service::prepare`] checked and bound.
    pub fn launch(config: &Config, prepared: Prepared, db: Database) -> Self {
        Self::launch_with(config, prepared, Stores::new(&db))
    }

    /// [`Service::launch`] over the stores `stores` (those of [`Stores::new`], some perhaps
    /// decorated: [`Stores::map_lifecycle`]).
    pub fn launch_with(config: &Config, prepared: Prepared, stores: Stores) -> Self {
        let Prepared {
            remote,
            knowledge_fs_url: url,
            directory,
            listener,
            addr,
        } = prepared;
        let metrics = Arc::new(AppMetrics::new());
        let store = stores.lifecycle.clone();
        let clock = system_clock();

        // Settles go through group commit: concurrent dispatches share one transaction. With
        // `group_commit = false` every settle is its own transaction (batches of one).
        let group_config = if config.group_commit {
            GroupCommitConfig::default()
        } else {
            GroupCommitConfig {
                max_batch: 1,
                max_in_flight: (config.workers * config.claim_batch) as usize,
                coalesce_reads: false,
                ..GroupCommitConfig::default()
            }
        };
        let dispatcher = Arc::new(
            Dispatcher::new(
                GroupCommitStore::start_with_clock(store.clone(), group_config, clock.clone()),
                MeteredRemote::new(remote, metrics.clone()),
                DispatcherConfig {
                    lease_duration: config.lease,
                    renew_leases: config.lease_renewal,
                    absence_grace: config.deletion_absence_grace,
                    retry_policy: RetryPolicy {
                        max_delay: config.retry_max_delay,
                        max_attempts: config.max_attempts,
                        jitter_ratio: 0.2,
                        ..RetryPolicy::default()
                    },
                    call_deadline: config.knowledge_fs_deadline,
                },
            )
            .with_clock(clock.clone())
            .with_metrics(metrics.clone())
            .with_jitter(rand::random::<f64>),
        );
        let directory =
            directory.map(|prepared| prepared.attach(stores.directory.clone(), clock.clone()));
        let (stop, stopped) = watch::channel(false);
        let product_enabled = Arc::new(AtomicBool::new(config.product_enabled));
        let wakeups = Wakeups::new();
        // PostgreSQL: one listener connection wakes the workers on other processes' commands.
        let wake_listener = stores.spawn_wake_listener(wakeups.clone());
        // One claimer for the process (issue 14): `workers × claim_batch` remote calls at once,
        // as many workers each claiming their own batch would make, in fewer, larger claims.
        let pool = WorkerPool::new(
            dispatcher.clone(),
            unique_lease_owner("tenantry"),
            config.workers,
            WorkerConfig {
                idle_poll: config.idle_poll,
                claim_batch: config.claim_batch,
                product_enabled: product_enabled.clone(),
            },
        )
        .with_wakeups(&wakeups)
        // Calls wait for a slot in the pool (lease renewed, checked before the call), not in
        // the KnowledgeFS client, whose call deadline counts its queueing.
        .with_remote_call_limit(config.knowledge_fs_max_concurrent_calls)
        .with_tenant_call_limit(config.knowledge_fs_max_concurrent_calls_per_tenant);
        let workers = vec![{
            let stopped = stopped.clone();
            tokio::spawn(async move {
                pool.run(stopped).await;
            })
        }];

        let projector_task = directory.as_ref().map(|handle| {
            let projector = handle.projector.clone();
            let mut stopped = stopped.clone();
            tokio::spawn(async move {
                let shutdown = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                projector.run(shutdown).await;
            })
        });
        // The retention pruner (`[retention]`): its batches take the database's retention
        // lock, so one replica prunes at a time.
        let pruner = config.retention.enabled.then(|| {
            let pruner = tenantry_engine::retention::Pruner::new(
                stores.retention.clone(),
                config.retention.policy,
                config.retention.interval,
                clock.clone(),
            );
            let stopped = stopped.clone();
            tokio::spawn(async move {
                pruner.run(stopped, crate::metrics::record_prune).await;
            })
        });
        let accepting = Arc::new(AtomicBool::new(true));
        // The process's one scoped-writes runtime: the admin API clears fences through it, so
        // a clear takes the same scope locks as in-process writers (`Service::scoped_writes`).
        let scoped_writes: Fences = ScopedWrites::with_metrics(
            stores.fences.clone(),
            clock.clone(),
            FenceConfig::with_deadline(config.fence_dispatch_deadline),
            Arc::new(tenantry_operator::fence_metrics::AppFenceMetrics::new()),
        );
        // The counts `/metrics` and the console share: at most one refresh a second.
        // The operator front ends get the stores as ports (trait objects), never their types.
        let operator_store: Store = store;
        let counts = Arc::new(crate::counts::CountsCache::new(
            operator_store.clone(),
            scoped_writes.clone(),
            directory.as_ref().map(|d| d.reports().store),
            clock.clone(),
        ));
        let state = AdminState {
            store: operator_store.clone(),
            intake: Arc::new(
                CommandIntake::new(operator_store, clock.clone()).with_wakeups(wakeups),
            ),
            clock,
            counts: counts.clone(),
            fences: scoped_writes.clone(),
            operators: Arc::new(config.all_operators()),
            accepting: accepting.clone(),
            directory: directory
                .as_ref()
                .map(crate::directory::ProjectorHandle::reports),
        };
        let ui = config.ui.then(|| crate::ui::UiSettings {
            read_only: config.ui_read_only,
            // With TLS on the listener the session cookie is `Secure`.
            secure_cookie: listener.is_tls(),
            session_key: config.ui_session_key.clone(),
            throttle: crate::ui::throttle::ThrottleRule::default(),
        });
        let mut server_stop = stopped;
        // The operator console at `/ui` beside the admin API, unless `ui = false`, behind the
        // listener's guards (body deadline; host check without a token) and connection bounds.
        let limits = config.listener_limits();
        let app = crate::listener::guard(
            crate::ui::app(state, ui),
            limits,
            config.has_operators(),
            addr,
        );
        crate::listener::warn_without_token(config.has_operators(), config.listen);
        let server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = server_stop.wait_for(|s| *s).await;
            };
            crate::listener::serve(listener, app, limits, shutdown).await;
        });
        tracing::info!(
            %addr,
            tls = config.admin_tls.is_some(),
            workers = config.workers,
            database = %crate::config::redact_url(&config.database_url),
            knowledge_fs = %url,
            "tenantry serving"
        );
        Self {
            addr,
            accepting,
            stop,
            workers,
            server,
            projector: projector_task,
            pruner,
            directory,
            stores,
            grace: config.shutdown_grace,
            metrics,
            scoped_writes,
            wake_listener,
            counts,
        }
    }

    /// The counts `/metrics` and the operator console share (read at most once a second).
    pub fn counts(&self) -> &Arc<crate::counts::CountsCache> {
        &self.counts
    }

    /// The bound admin API address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The metrics sink (its tallies feed the demo's summary).
    pub fn metrics(&self) -> &Arc<AppMetrics> {
        &self.metrics
    }

    /// The directory projection, when configured.
    pub fn directory(&self) -> Option<&crate::directory::ProjectorHandle> {
        self.directory.as_ref()
    }

    /// The process's one scoped-writes runtime (host storage of this database, dispatch
    /// deadline `fence_dispatch_deadline_ms`): in-process writers must use this one, so their
    /// scopes share locks with the admin API's fence clears.
    pub fn scoped_writes(&self) -> &Fences {
        &self.scoped_writes
    }

    /// The database the service runs on.
    pub fn database(&self) -> &Database {
        self.stores.database()
    }

    /// Stops the service gracefully (see the module docs). The pool stays open; close it with
    /// [`close_pool`] when nothing else uses it.
    pub async fn shutdown(self) -> ShutdownReport {
        tracing::info!("shutdown: stop claiming, settle in-flight dispatches");
        self.accepting.store(false, Ordering::SeqCst);
        let _ = self.stop.send(true);
        let mut report = ShutdownReport::default();
        let deadline = tokio::time::Instant::now() + self.grace;
        for mut worker in self.workers {
            match tokio::time::timeout_at(deadline, &mut worker).await {
                Ok(_) => report.workers_settled += 1,
                Err(_) => {
                    worker.abort();
                    let _ = worker.await;
                    report.workers_aborted += 1;
                }
            }
        }
        if let Some(listener) = self.wake_listener {
            listener.stop().await;
        }
        if let Some(mut projector) = self.projector {
            // The projector stops at once on shutdown (every apply is one transaction).
            if tokio::time::timeout_at(deadline, &mut projector)
                .await
                .is_err()
            {
                projector.abort();
            }
        }
        if let Some(mut pruner) = self.pruner {
            // A run stops after its current batch (each batch is one short transaction).
            if tokio::time::timeout_at(deadline, &mut pruner)
                .await
                .is_err()
            {
                pruner.abort();
            }
        }
        let mut server = self.server;
        if tokio::time::timeout_at(deadline + Duration::from_secs(1), &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
        if report.workers_aborted > 0 {
            tracing::warn!(
                aborted = report.workers_aborted,
                "grace period over; dispatches still in flight were aborted and will be re-claimed after their leases expire"
            );
        }
        tracing::info!(
            settled = report.workers_settled,
            aborted = report.workers_aborted,
            "shutdown complete"
        );
        report
    }
}

/// Closes the database pool (after [`Service::shutdown`]; [`crate::stores::close`]).
pub async fn close_pool(db: Database) {
    crate::stores::close(db).await;
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("SIGINT received"),
        () = terminate => tracing::info!("SIGTERM received"),
    }
}
