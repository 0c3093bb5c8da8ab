//! The `tenantry-demo` binary: `tenantry-demo demo` and `tenantry-demo reference-remote`
//! ([`cli`]). It is its own binary so that the `tenantry` service binary ships neither the demo
//! nor the test kit; it starts the service through the app library (`tenantry_app`), exactly as
//! `tenantry serve` does.
//!
//! `tenantry-demo demo`: the whole service on real HTTP against the reference KnowledgeFS with
//! injected faults, a seeded workload driven through the admin API, and checks of the end
//! state against the remote's ground truth.
//!
//! Steps: open a database (temporary SQLite unless `--database-url`), start the reference
//! remote on a loopback port with the fault profile, start the service exactly as `serve` does
//! (admin API on a loopback port with a random token, lifecycle workers), drive the workload
//! over HTTP while a progress bar shows settled / total commands, wait until every command
//! settled, check, print the summary, shut everything down. The exit code is non-zero when a
//! check fails.
//!
//! The directory part runs alongside: a reference directory (signed Directory API v1, same
//! fault profile) of hundreds of workspaces and thousands of members changes while the
//! workload runs; the service projects it, and at the end the projected tables must equal the
//! provider's final snapshot.

pub mod args;
pub mod checks;
pub mod cli;
pub mod client;
pub mod directory;
pub mod progress;
pub mod reference_remote;
mod report;
pub mod workload;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use tenantry_app::config::{self, Config, DirectorySettings};
use tenantry_app::service::{self, Service};
use tenantry_remote_http::RemoteTls;
use tenantry_store_seaorm::Database;
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};
use tokio::time::Instant;

pub use args::{DemoArgs, Faults, RemoteArgs};
pub use checks::CheckResult;
pub use report::DemoReport;

use client::AdminClient;

/// Options of one demo run.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoOptions {
    /// Database to run on; `None`: a temporary SQLite file.
    pub database_url: Option<String>,
    /// Seed of the workload and the fault draws.
    pub seed: u64,
    /// Workload size (1.0: 5 tenants, 300 control spaces).
    pub scale: f64,
    /// Fault profile of the reference remote.
    pub faults: Faults,
    /// How long to wait for every command to settle.
    pub timeout: Duration,
    /// Lifecycle workers.
    pub workers: u32,
    /// Whether to draw a progress bar (only on a terminal).
    pub progress: bool,
    /// After the checks, keep the service (and its console at `/ui`) running until Ctrl-C.
    pub keep_open: bool,
    /// Both reference remotes over HTTPS (a CA made for the run, trusted through the
    /// service's CA file settings).
    pub tls: bool,
}

impl DemoOptions {
    /// Options from the command line.
    pub fn from_args(args: &DemoArgs) -> Self {
        Self {
            database_url: args.database_url.clone(),
            seed: args.seed,
            scale: args.scale,
            faults: args.faults,
            timeout: Duration::from_secs(args.timeout_seconds),
            workers: args.workers,
            progress: !args.no_progress,
            keep_open: args.keep_open,
            tls: args.tls,
        }
    }
}

/// Why the demo could not run at all (as opposed to a failed check).
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// An option is out of range.
    #[error("{0}")]
    Options(String),
    /// Setting up the database, the remote or the service failed.
    #[error("setup failed: {0}")]
    Setup(String),
}

/// `tenantry-demo demo`: runs, prints the summary, and maps the result to the exit code (0
/// every check passed, 1 a check failed, 2 the run could not be set up).
pub async fn main(args: &DemoArgs) -> ExitCode {
    let options = DemoOptions::from_args(args);
    match run(&options, None).await {
        Ok(report) => {
            print!("{}", report.render());
            if report.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("tenantry-demo demo: {e}");
            ExitCode::from(2)
        }
    }
}

/// Timing of the reference remote and client per fault profile: (stall, client deadline,
/// lease). Stalls outlast the deadline, and the lease outlasts the deadline.
fn timing(faults: Faults) -> (Duration, Duration, Duration) {
    match faults {
        Faults::Heavy => (
            Duration::from_secs(3),
            Duration::from_secs(1),
            Duration::from_secs(5),
        ),
        Faults::None | Faults::Default => (
            Duration::from_secs(30),
            Duration::from_secs(5),
            Duration::from_secs(8),
        ),
    }
}

/// What one demo run sets in the service's configuration besides the fixed demo settings of
/// [`service_config`].
#[derive(Debug, Clone)]
struct RunSettings {
    admin_token: String,
    workers: u32,
    lease: Duration,
    knowledge_fs_url: String,
    knowledge_fs_token: String,
    knowledge_fs_deadline: Duration,
    deletion_absence_grace: Duration,
    directory: DirectorySettings,
    /// With `--tls`: the CA that issued both reference remotes' certificates, trusted as
    /// `knowledge_fs_ca_file` and `directory_ca_file`.
    remote_ca_file: Option<std::path::PathBuf>,
}

/// The configuration the demo runs the service with: the defaults, then `settings`; every
/// other setting keeps its default (meanings: docs/operations.md).
fn service_config(settings: RunSettings) -> Config {
    let mut config = Config::defaults();
    config.listen = ([127, 0, 0, 1], 0).into();
    config.admin_token = Some(settings.admin_token.into());
    config.workers = settings.workers;
    config.claim_batch = 4;
    config.idle_poll = Duration::from_millis(50);
    config.lease = settings.lease;
    config.retry_max_delay = Duration::from_secs(1);
    config.shutdown_grace = Duration::from_secs(10);
    config.knowledge_fs_url = Some(settings.knowledge_fs_url);
    config.knowledge_fs_token = Some(settings.knowledge_fs_token.into());
    config.knowledge_fs_deadline = settings.knowledge_fs_deadline;
    config.deletion_absence_grace = settings.deletion_absence_grace;
    config.knowledge_fs_max_concurrent_calls = 16;
    // With `--tls` both remotes serve HTTPS with a certificate of the run's CA.
    let remote_tls = RemoteTls {
        ca_file: settings.remote_ca_file,
        ..RemoteTls::default()
    };
    config.knowledge_fs_tls = remote_tls.clone();
    config.directory = Some(DirectorySettings {
        tls: remote_tls,
        ..settings.directory
    });
    config
}

/// Runs the demo with the service on `database` (already migrated) or, when `None`, on
/// `options.database_url` or a temporary SQLite file.
///
/// # Errors
/// [`DemoError`] when the run could not be set up; failed checks are in the report instead.
pub async fn run(
    options: &DemoOptions,
    database: Option<Database>,
) -> Result<DemoReport, DemoError> {
    if !(options.scale.is_finite() && options.scale > 0.0 && options.scale <= 100.0) {
        return Err(DemoError::Options(format!(
            "--scale {} must be above 0 and at most 100",
            options.scale
        )));
    }
    if options.workers == 0 || options.workers > 256 {
        return Err(DemoError::Options(
            "--workers must be in 1..=256".to_owned(),
        ));
    }
    let started = Instant::now();
    let mut _temp_dir = None;
    let owns_pool = database.is_none();
    let (db, database_label) = match database {
        Some(db) => (db, "given database".to_owned()),
        None => {
            let url = match &options.database_url {
                Some(url) => url.clone(),
                None => {
                    let dir = tempfile::tempdir()
                        .map_err(|e| DemoError::Setup(format!("temporary folder: {e}")))?;
                    let url = format!("sqlite://{}?mode=rwc", dir.path().join("demo.db").display());
                    _temp_dir = Some(dir);
                    url
                }
            };
            let label = if options.database_url.is_some() {
                config::redact_url(&url)
            } else {
                "temporary SQLite file".to_owned()
            };
            // One connection per worker plus the service's others, and never fewer than 16.
            let pool = (options.workers + config::CONNECTIONS_BESIDES_WORKERS).max(16);
            let db = tenantry_store_seaorm::connect(&url, pool)
                .await
                .map_err(|e| DemoError::Setup(e.to_string()))?;
            (db, label)
        }
    };

    let (stall, deadline, lease) = timing(options.faults);
    let remote_config = RemoteConfig {
        seed: options.seed,
        stall,
        ..RemoteConfig::with_profile(reference_remote::profile(options.faults))
    };
    // With --tls both remotes present a certificate of a CA made for this run; the service
    // trusts it through its CA file settings, never by turning verification off.
    let remote_tls = if options.tls {
        Some(
            reference_remote::RemoteCertificates::make(None)
                .map_err(|e| DemoError::Setup(format!("certificates: {e}")))?,
        )
    } else {
        None
    };
    let (remote_url, remote) = ReferenceRemote::start_tls_on(
        ([127, 0, 0, 1], 0).into(),
        remote_config,
        remote_tls.as_ref().map(|t| t.server_config.clone()),
    )
    .await
    .map_err(|e| DemoError::Setup(format!("reference remote: {e}")))?;
    let truth = remote.truth();

    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let profile = reference_remote::profile(options.faults);
    let (demo_directory, directory_settings) = directory::start(
        options.seed,
        options.scale,
        profile,
        &run_id,
        remote_tls.as_ref().map(|t| t.server_config.clone()),
    )
    .await
    .map_err(DemoError::Setup)?;
    let demo_directory = Arc::new(demo_directory);

    let token = uuid::Uuid::new_v4().simple().to_string();
    let settings = RunSettings {
        admin_token: token.clone(),
        workers: options.workers,
        lease,
        knowledge_fs_url: remote_url,
        knowledge_fs_token: remote.bearer_token().to_owned(),
        knowledge_fs_deadline: deadline,
        // The reference remote applies a stalled request at most `stall` after it arrived, so
        // a provision can land that late after its attempt ended; the deletion's absence grace
        // covers exactly that (a real deployment keeps the 600 s default).
        deletion_absence_grace: stall + Duration::from_secs(1),
        directory: directory_settings,
        remote_ca_file: remote_tls.as_ref().map(|t| t.ca_file.clone()),
    };
    let service = Service::start(&service_config(settings), db.clone())
        .await
        .map_err(|e| DemoError::Setup(e.to_string()))?;
    let client = AdminClient::new(format!("http://{}", service.addr()), &token)
        .map_err(|e| DemoError::Setup(e.to_string()))?;
    // The operator console of the running service (until the run ends, or Ctrl-C with
    // --keep-open); the token is this run's own.
    eprintln!(
        "tenantry-demo demo: operator console at http://{}/ui (sign in with the admin token {token})",
        service.addr()
    );

    let plan = workload::plan(options.seed, options.scale, &run_id);
    let deadline_at = Instant::now() + options.timeout;
    let enqueued = Arc::new(AtomicU64::new(0));
    let bar = progress::bar(options.progress);
    let progress = tokio::spawn(progress::track(
        client.clone(),
        plan.tenants.clone(),
        enqueued.clone(),
        None,
        bar.clone(),
        Duration::from_millis(300),
    ));
    let (stop_churn, churn_stopped) = tokio::sync::watch::channel(false);
    let churn = {
        let dir = demo_directory.clone();
        let seed = options.seed;
        tokio::spawn(async move { dir.churn(seed, churn_stopped).await })
    };
    let driven = workload::drive(&client, &plan, enqueued.clone(), deadline_at).await;
    let submitted_in = started.elapsed();
    let open_left = wait_settled(&client, &plan.tenants, deadline_at).await;
    progress.abort();
    bar.finish_and_clear();
    let settled_in = started.elapsed();

    let _ = stop_churn.send(true);
    let churn = churn.await.unwrap_or_default();
    let caught_up = demo_directory.wait_caught_up(&client, deadline_at).await;
    let directory_settled_in = started.elapsed();

    let mut outcome = checks::run(&client, &plan, &driven, open_left, &truth).await;
    outcome.checks.push(CheckResult {
        name: "directory projection caught up and ready",
        passed: caught_up.is_ok(),
        detail: match &caught_up {
            Ok(()) => format!("cursor {} reached", demo_directory.server.cursor()),
            Err(e) => e.clone(),
        },
    });
    let tables = SeaOrmDirectoryStore::new(service.database());
    let (directory_check, directory_counts) = demo_directory.check(&tables).await;
    outcome.checks.push(directory_check);
    let directory_faults = demo_directory.server.faults_injected();
    let tally = service.metrics().tally();
    // The time the console stayed open for the operator is not the run's: it is left out of
    // the summary's total.
    let mut kept_open = Duration::ZERO;
    if options.keep_open {
        eprintln!(
            "tenantry-demo demo: checks done; the service and its console stay open at http://{}/ui until Ctrl-C (the summary follows)",
            service.addr()
        );
        let waiting = Instant::now();
        let _ = tokio::signal::ctrl_c().await;
        kept_open = waiting.elapsed();
    }
    service.shutdown().await;
    remote.shutdown().await;
    if let Ok(dir) = Arc::try_unwrap(demo_directory) {
        dir.server.shutdown().await;
    }
    if owns_pool {
        service::close_pool(db).await;
    }

    Ok(DemoReport {
        seed: options.seed,
        scale: options.scale,
        faults: options.faults,
        database: database_label,
        remote_scheme: if remote_tls.is_some() {
            "https"
        } else {
            "http"
        },
        tenants: plan.tenants.len(),
        control_spaces: plan.spaces.len(),
        commands: outcome.commands,
        replays_matched: driven.replays_matched,
        retries: tally.retries,
        dispatch_errors: tally.dispatch_errors,
        faults_injected: truth.faults_injected(),
        directory_faults,
        churn,
        directory: directory_counts,
        directory_settled_in,
        effects: truth.effects(),
        checks: outcome.checks,
        submitted_in,
        settled_in,
        total: started.elapsed().saturating_sub(kept_open),
    })
}

/// Polls until no command of `tenants` is open or `deadline`; returns how many stayed open
/// (`None` when the admin API could not be asked).
async fn wait_settled(client: &AdminClient, tenants: &[String], deadline: Instant) -> Option<u64> {
    loop {
        let open = workload::open_commands(client, tenants).await.ok();
        if open == Some(0) || Instant::now() >= deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
