//! One chaos run: set up the remotes, the database and the replicas; drive the workload while
//! the fault schedule runs; drain; check; report; tear down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use hyper::Method;
use serde_json::Value;
use tenantry_demo::client::AdminClient;
use tenantry_demo::workload::{self, CONTROL_SPACES_AT_SCALE_1, Plan};
use tenantry_demo::{CheckResult, reference_remote};
use tenantry_store_seaorm::{SeaOrmDirectoryStore, throwaway};
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};
use tokio::time::Instant;

use crate::args::{ChaosArgs, FaultLevel};
use crate::checks::{self, ClockStepRecord, PauseRecord, check};
use crate::logs::LeaseLog;
use crate::pg::Postgres;
use crate::replica::{self, Replica};
use crate::report::{ChaosReport, FaultEvent, quantile};
use crate::schedule::{Capabilities, FaultKind, Schedule, ScheduledFault};
use crate::writers::{self, Writers};

/// Lease of the replicas: short, so takeovers happen within seconds.
const LEASE: Duration = Duration::from_secs(4);
/// Client deadline of one KnowledgeFS call (renewal keeps a lease past it).
const KNOWLEDGE_FS_DEADLINE: Duration = Duration::from_secs(3);
/// How long the reference remote stalls a request (past the deadline).
const STALL: Duration = Duration::from_secs(6);
/// Graceful shutdown time of a replica.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Commands per control space in the demo's plan (1 create, 0.35 deletes, 0.25 × 2 revokes).
const COMMANDS_PER_SPACE: f64 = 1.85;
/// How long a replica may take to re-read its libfaketime timestamp file (cache of 1 s, whole
/// seconds compared).
const CLOCK_REREAD: Duration = Duration::from_millis(2_100);
/// Longest wait for a (re)started replica to answer.
const START_LIMIT: Duration = Duration::from_secs(120);

/// Runs and maps the result to the exit code (0 passed, 1 a check failed, 2 no run).
pub async fn main(args: ChaosArgs) -> ExitCode {
    match run(&args).await {
        Ok((report, folder)) => {
            print!("{}", report.render());
            match write_json(&args.out, &report) {
                Ok(path) => println!("\nsummary: {}", path.display()),
                Err(e) => eprintln!("tenantry-chaos: cannot write the summary: {e}"),
            }
            if report.passed() {
                println!("all checks passed (seed {})", report.seed);
                ExitCode::SUCCESS
            } else {
                eprintln!(
                    "tenantry-chaos: a check FAILED; repeat with --seed {} --replicas {} --commands {} --faults {} (logs kept in {})",
                    report.seed,
                    report.replicas,
                    args.commands,
                    args.faults.as_str(),
                    folder.display()
                );
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("tenantry-chaos: {e} (seed {})", args.seed);
            ExitCode::from(2)
        }
    }
}

fn write_json(out: &Path, report: &ChaosReport) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let text = serde_json::to_string_pretty(&report.to_json()).unwrap_or_default();
    let path = out.join(format!(
        "chaos-{}-seed{}-{}r-{}c-{}.json",
        report.database, report.seed, report.replicas, report.commands, report.faults
    ));
    std::fs::write(&path, &text)?;
    std::fs::write(out.join("latest.json"), &text)?;
    Ok(path)
}

/// The database of a run.
enum Db {
    Postgres {
        admin_url: String,
        name: String,
        pg: Postgres,
    },
    Sqlite {
        url: String,
    },
}

impl Db {
    fn url(&self) -> &str {
        match self {
            Db::Postgres { pg, .. } => &pg.url,
            Db::Sqlite { url } => url,
        }
    }
    fn pg(&self) -> Option<&Postgres> {
        match self {
            Db::Postgres { pg, .. } => Some(pg),
            Db::Sqlite { .. } => None,
        }
    }
}

async fn setup_database(args: &ChaosArgs, run_id: &str, folder: &Path) -> Result<Db, String> {
    if args.database == "sqlite" {
        if args.replicas != 1 {
            return Err("--database sqlite runs one replica: pass --replicas 1".to_owned());
        }
        return Ok(Db::Sqlite {
            url: format!("sqlite://{}?mode=rwc", folder.join("chaos.db").display()),
        });
    }
    if !args.database.starts_with("postgres") {
        return Err(format!(
            "--database {}: give a postgres:// URL or `sqlite`",
            args.database
        ));
    }
    let bindir = args
        .pg_bindir
        .clone()
        .ok_or("--pg-bindir is needed with PostgreSQL (psql, pg_ctl)")?;
    let name = format!("chaos_{run_id}");
    let url = throwaway::create_postgres_database(&args.database, &name)
        .await
        .map_err(|e| e.to_string())?;
    let pg = Postgres {
        bindir,
        data: args.pg_data.clone(),
        log: args.pg_log.clone(),
        as_postgres: args.pg_as_postgres,
        url,
        ha_monitor: args.ha_monitor.clone(),
    };
    Ok(Db::Postgres {
        admin_url: args.database.clone(),
        name,
        pg,
    })
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}

/// Everything the fault loop acts on.
struct Harness {
    replicas: Vec<Replica>,
    db: Db,
    token: String,
    started: Instant,
    events: Vec<FaultEvent>,
    pauses: Vec<PauseRecord>,
    restarts: u64,
    unexpected_exits: Vec<String>,
    faults_done: Arc<AtomicU64>,
    /// When the last database fault ended.
    last_database_fault: Option<Instant>,
    /// Wall-clock steps so far.
    clock_steps: Vec<ClockStepRecord>,
    /// The formation's failovers (`--ha-monitor`).
    failovers: Vec<checks::FailoverRecord>,
    /// The replica whose wall clock is stepped now, and when it steps back.
    clock_back: Option<(usize, Instant)>,
    /// The idempotency keys the admin API acknowledged with 202 so far (the workload adds).
    acknowledged: workload::Acknowledged,
    /// The fenced-writes workload's writer processes (none: no workload).
    writers: Writers,
    /// When the writers were killed at the end of the fault phase.
    writers_killed_at: Option<Instant>,
}

async fn run(args: &ChaosArgs) -> Result<(ChaosReport, PathBuf), String> {
    if args.replicas == 0 || args.replicas > 16 {
        return Err("--replicas must be in 1..=16".to_owned());
    }
    if args.commands < 10 {
        return Err("--commands must be at least 10".to_owned());
    }
    let run_id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let folder = std::path::absolute(args.out.join(format!("run-{}-{run_id}", args.seed)))
        .map_err(|e| format!("run folder: {e}"))?;
    std::fs::create_dir_all(&folder).map_err(|e| format!("create {}: {e}", folder.display()))?;
    let db = setup_database(args, &run_id, &folder).await?;

    let profile = reference_remote::profile(args.faults.remote());
    let (remote_url, remote) = ReferenceRemote::start(RemoteConfig {
        seed: args.seed,
        stall: STALL,
        ..RemoteConfig::with_profile(profile)
    })
    .await
    .map_err(|e| format!("reference KnowledgeFS: {e}"))?;
    let truth = remote.truth();
    let scale = args.commands as f64 / (CONTROL_SPACES_AT_SCALE_1 * COMMANDS_PER_SPACE);
    let (directory, target) =
        tenantry_demo::directory::start(args.seed, scale.min(1.0), profile, &run_id, None).await?;
    let directory = Arc::new(directory);

    let token = uuid::Uuid::new_v4().simple().to_string();
    let keys: Vec<String> = target
        .trusted_keys
        .iter()
        .map(|(id, key)| format!("{id}={key}"))
        .collect();
    let mut env: Vec<(String, String)> = vec![
        ("DATABASE_URL", db.url().to_owned()),
        ("DATABASE_MAX_CONNECTIONS", (args.workers + 6).to_string()),
        ("ADMIN_TOKEN", token.clone()),
        ("LOG_FORMAT", "json".to_owned()),
        ("WORKERS", args.workers.to_string()),
        ("CLAIM_BATCH", "4".to_owned()),
        ("GROUP_COMMIT", args.group_commit.to_string()),
        ("IDLE_POLL_MS", "50".to_owned()),
        ("LEASE_SECONDS", LEASE.as_secs().to_string()),
        ("RETRY_MAX_DELAY_MS", "1000".to_owned()),
        (
            "SHUTDOWN_GRACE_SECONDS",
            SHUTDOWN_GRACE.as_secs().to_string(),
        ),
        ("KNOWLEDGE_FS_URL", remote_url),
        ("KNOWLEDGE_FS_TOKEN", remote.bearer_token().to_owned()),
        (
            "KNOWLEDGE_FS_DEADLINE_MS",
            KNOWLEDGE_FS_DEADLINE.as_millis().to_string(),
        ),
        ("KNOWLEDGE_FS_MAX_CONCURRENT_CALLS", "16".to_owned()),
        (
            "DELETION_ABSENCE_GRACE_SECONDS",
            (STALL.as_secs() + 1).to_string(),
        ),
        ("DIRECTORY_URL", target.url.clone()),
        ("DIRECTORY_INSTANCE", target.instance.clone()),
        ("DIRECTORY_TRUSTED_KEYS", keys.join(",")),
        (
            "DIRECTORY_SYNC_INTERVAL_MS",
            target.sync_interval.as_millis().to_string(),
        ),
        (
            "DIRECTORY_MAX_STALENESS_SECONDS",
            target.max_staleness.as_secs().max(1).to_string(),
        ),
        ("DIRECTORY_EVENT_LIMIT", target.event_limit.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (format!("TENANTRY_{k}"), v))
    .collect();
    if let Some(t) = &target.token {
        env.push(("TENANTRY_DIRECTORY_TOKEN".to_owned(), t.expose().to_owned()));
    }
    // The wall-clock step needs libfaketime, and PostgreSQL: SQLite's clock is the replica's
    // own, so stepping it would step the database's clock too. Only the levels that draw every
    // kind step clocks; the others run the replicas without the preload.
    let faketime = args.libfaketime().filter(|_| {
        db.pg().is_some() && matches!(args.faults, FaultLevel::Default | FaultLevel::Heavy)
    });
    let mut replicas = Vec::new();
    for index in 0..args.replicas {
        let slot = Replica::new(
            index,
            free_port()?,
            &args.tenantry_bin,
            env.clone(),
            &folder,
        );
        replicas.push(match &faketime {
            Some(lib) => slot.with_faketime(lib)?,
            None => slot,
        });
    }
    // The first replica migrates the database alone; the others start once it is ready.
    for r in &mut replicas {
        r.spawn()?;
        r.wait_for("/readyz", START_LIMIT).await?;
    }
    // The fenced-writes workload: on PostgreSQL at the levels that draw every kind (the
    // database is migrated now).
    let writer_count =
        if db.pg().is_some() && matches!(args.faults, FaultLevel::Default | FaultLevel::Heavy) {
            args.fence_writers
        } else {
            0
        };
    let writer_bin = std::env::current_exe()
        .map_err(|e| format!("own path: {e}"))?
        .with_file_name("tenantry-chaos-fence-writer");
    let mut fence_writers = Writers::new(writer_count, &writer_bin, db.url(), &folder);
    for i in 0..writer_count {
        fence_writers.spawn(i)?;
    }
    let bases: Vec<String> = replicas.iter().map(Replica::base).collect();
    let client = AdminClient::replicas(bases, &token, 60, Duration::from_secs(5))
        .map_err(|e| e.to_string())?;

    let plan = workload::plan(args.seed, scale, &run_id);
    let acknowledged = workload::Acknowledged::default();
    let mut harness = Harness {
        replicas,
        db,
        token,
        started: Instant::now(),
        events: Vec::new(),
        pauses: Vec::new(),
        restarts: 0,
        unexpected_exits: Vec::new(),
        faults_done: Arc::new(AtomicU64::new(0)),
        last_database_fault: None,
        clock_steps: Vec::new(),
        failovers: Vec::new(),
        clock_back: None,
        acknowledged: acknowledged.clone(),
        writers: fence_writers,
        writers_killed_at: None,
    };
    let enqueued = Arc::new(AtomicU64::new(0));
    let bar = tenantry_demo::progress::bar(!args.no_progress);
    let progress = tokio::spawn(tenantry_demo::progress::track(
        client.clone(),
        plan.tenants.clone(),
        enqueued.clone(),
        Some(harness.faults_done.clone()),
        bar.clone(),
        Duration::from_secs(1),
    ));
    let (stop_churn, churn_stopped) = tokio::sync::watch::channel(false);
    let churn = {
        let dir = directory.clone();
        let seed = args.seed;
        tokio::spawn(async move { dir.churn(seed, churn_stopped).await })
    };
    let drive_deadline = Instant::now() + Duration::from_secs(args.timeout) * 2;
    let submitted = AtomicBool::new(false);
    let drive = async {
        let driven = workload::drive_recording(
            &client,
            &plan,
            enqueued.clone(),
            &acknowledged,
            drive_deadline,
        )
        .await;
        submitted.store(true, Ordering::SeqCst);
        driven
    };

    // The fault phase: until the workload is submitted and `--duration` has passed.
    let caps = Capabilities {
        replicas: args.replicas,
        postgres: harness.db.pg().is_some(),
        restartable: harness
            .db
            .pg()
            .is_some_and(|pg| pg.data.is_some() && pg.log.is_some()),
        lease: LEASE,
        clock_step: faketime.is_some(),
        fence_writers: harness.writers.len(),
        failover: harness.db.pg().is_some_and(|pg| pg.ha_monitor.is_some()),
    };
    let mut schedule = Schedule::new(args.seed, args.faults, caps);
    let min_phase = Duration::from_secs(args.duration);
    let faults = async {
        while !(submitted.load(Ordering::SeqCst) && harness.started.elapsed() >= min_phase) {
            harness.reap_crashes();
            match schedule.next_fault() {
                Some(fault) => {
                    harness.sleep_restoring_clock(fault.gap).await;
                    harness.apply(fault, &plan).await;
                    harness.faults_done.fetch_add(1, Ordering::Relaxed);
                }
                None => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    };
    // The workload and the schedule run concurrently in this task.
    let (driven, ()) = tokio::join!(drive, faults);
    // Every wall clock is right again before the drain; the fence writers end (SIGKILL, as
    // they never stop by themselves).
    harness.restore_clock().await;
    harness.writers.kill_all().await;
    harness.writers_killed_at = Some(Instant::now());
    harness.reap_crashes();
    for r in &mut harness.replicas {
        if !r.running() {
            r.spawn()?;
            harness.restarts += 1;
        }
    }
    for r in &mut harness.replicas {
        r.wait_for("/healthz", START_LIMIT).await?;
    }
    let last_fault_at = Instant::now();
    let submitted_in = harness.started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let open_left = wait_settled(&client, &plan.tenants, deadline).await;
    let drain = last_fault_at.elapsed();
    progress.abort();
    bar.finish_and_clear();

    let _ = stop_churn.send(true);
    let _ = churn.await;
    let report = harness
        .check(
            &client, &plan, &driven, open_left, &truth, &directory, deadline,
        )
        .await;
    let mut report = ChaosReport {
        seed: args.seed,
        replicas: args.replicas,
        faults: args.faults.as_str(),
        database: if harness.db.pg().is_some() {
            "postgresql"
        } else {
            "sqlite"
        },
        commands: driven.commands,
        events: harness.events.clone(),
        restarts: harness.restarts,
        remote_faults: truth
            .faults_injected()
            .into_iter()
            .map(|((route, kind), n)| (format!("{route:?} {kind}"), n))
            .collect(),
        effects: serde_json::to_value(truth.effects()).unwrap_or_default(),
        drain_after_last_fault: drain,
        submitted_in,
        total: harness.started.elapsed(),
        ..report
    };
    for (kind, n) in directory.server.faults_injected() {
        *report
            .remote_faults
            .entry(format!("directory {:?} {}", kind.0, kind.1))
            .or_default() += n;
    }

    // Teardown.
    for r in &mut harness.replicas {
        let _ = r.terminate(SHUTDOWN_GRACE * 2).await;
    }
    remote.shutdown().await;
    if let Ok(dir) = Arc::try_unwrap(directory) {
        dir.server.shutdown().await;
    }
    let keep = args.keep || !report.passed();
    if !keep {
        if let Db::Postgres {
            admin_url, name, ..
        } = &harness.db
        {
            let _ = throwaway::drop_postgres_database(admin_url, name).await;
        }
        let _ = std::fs::remove_dir_all(&folder);
    }
    Ok((report, folder))
}

impl Harness {
    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn event(&mut self, kind: FaultKind, replica: Option<usize>, detail: String) {
        let at = self.elapsed();
        self.events.push(FaultEvent {
            at,
            kind: kind.as_str(),
            replica,
            detail,
        });
    }

    /// Notes replicas that exited by themselves (a crash) and restarts them.
    fn reap_crashes(&mut self) {
        for r in &mut self.replicas {
            if let Some(status) = r.exited() {
                self.unexpected_exits.push(format!(
                    "replica {} generation {} exited by itself ({status})",
                    r.index, r.generation
                ));
                if r.spawn().is_ok() {
                    self.restarts += 1;
                }
            }
        }
    }

    /// A client of one running replica other than `not` (for reads while `not` is stopped).
    fn other_client(&self, not: usize) -> Option<AdminClient> {
        let other = self
            .replicas
            .iter()
            .find(|r| r.index != not && r.running())?;
        AdminClient::replicas(vec![other.base()], &self.token, 20, Duration::from_secs(10)).ok()
    }

    async fn apply(&mut self, fault: ScheduledFault, plan: &Plan) {
        let i = fault.replica;
        match fault.kind {
            FaultKind::Kill | FaultKind::Term => {
                let r = &mut self.replicas[i];
                let detail = if fault.kind == FaultKind::Kill {
                    r.kill().await;
                    format!("SIGKILL, restart after {} ms", fault.hold.as_millis())
                } else {
                    let (graceful, status) = r.terminate(SHUTDOWN_GRACE * 2).await;
                    format!(
                        "SIGTERM ({}: {status}), restart after {} ms",
                        if graceful { "exited" } else { "killed" },
                        fault.hold.as_millis()
                    )
                };
                tokio::time::sleep(fault.hold).await;
                let restarted = match r.spawn() {
                    Ok(()) => r.wait_for("/healthz", START_LIMIT).await,
                    Err(e) => Err(e),
                };
                self.restarts += 1;
                let detail = match restarted {
                    Ok(()) => detail,
                    Err(e) => format!("{detail}; restart: {e}"),
                };
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::Pause => {
                // A database fault can strand a claim whose answer was lost (the replica never
                // learns it holds the command): let such leases expire and be taken over
                // before a pause, so every command the paused replica holds is one it works on.
                if let Some(at) = self.last_database_fault {
                    tokio::time::sleep_until(at + LEASE * 2).await;
                }
                let detail = match self.pause(i, fault.hold, plan).await {
                    Ok(record) => {
                        let d = format!(
                            "SIGSTOP for {} ms holding {} command(s), {} taken over",
                            fault.hold.as_millis(),
                            record.held,
                            record.taken_over.len()
                        );
                        self.pauses.push(record);
                        d
                    }
                    Err(e) => format!("pause not measured: {e}"),
                };
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::TerminateConnections => {
                let detail = match self.db.pg() {
                    Some(pg) => match pg.terminate_connections(fault.count).await {
                        Ok(n) => format!("{n} of up to {} connections terminated", fault.count),
                        Err(e) => format!("failed: {e}"),
                    },
                    None => "no PostgreSQL".to_owned(),
                };
                self.last_database_fault = Some(Instant::now());
                self.event(fault.kind, None, detail);
            }
            FaultKind::KillFenceWriter => {
                let owner = self.writers.kill(i).await;
                tokio::time::sleep(fault.hold).await;
                let restarted = self.writers.spawn(i);
                let detail = format!(
                    "SIGKILL {}, restart after {} ms{}",
                    owner.as_deref().unwrap_or("(not running)"),
                    fault.hold.as_millis(),
                    restarted
                        .err()
                        .map(|e| format!("; restart: {e}"))
                        .unwrap_or_default()
                );
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::ClockStep => {
                let detail = self.step_clock(i, fault.clock_step, fault.hold).await;
                self.event(fault.kind, Some(i), detail);
            }
            FaultKind::Failover | FaultKind::PrimaryKill | FaultKind::StandbyKill => {
                let detail = match self.db.pg().cloned() {
                    Some(pg) => self.formation_fault(&pg, fault).await,
                    None => "no PostgreSQL".to_owned(),
                };
                self.last_database_fault = Some(Instant::now());
                self.event(fault.kind, None, detail);
            }
            FaultKind::RestartDatabase => {
                let started = Instant::now();
                let detail = match self.db.pg() {
                    Some(pg) => match pg.restart().await {
                        Ok(()) => format!("server back after {} ms", started.elapsed().as_millis()),
                        Err(e) => format!("failed: {e}"),
                    },
                    None => "no PostgreSQL".to_owned(),
                };
                self.last_database_fault = Some(Instant::now());
                self.event(fault.kind, None, detail);
            }
        }
    }

    /// A fault of the failover formation, once it has one primary and one standby: a
    /// failover, a crash of the primary (the monitor promotes the standby; the crashed node is
    /// started again `hold` later) or of the standby (started again after `hold`). After a
    /// move of the primary, the new primary's outbox is checked for every command
    /// acknowledged before the fault began. Returns the event's detail.
    async fn formation_fault(&mut self, pg: &crate::pg::Postgres, fault: ScheduledFault) -> String {
        let (primary, standby) = match pg.wait_healthy().await {
            Ok(nodes) => nodes,
            Err(e) => {
                if fault.kind != FaultKind::StandbyKill {
                    self.failovers.push(checks::FailoverRecord {
                        cause: fault.kind.as_str(),
                        outcome: Err(e.clone()),
                        acknowledged: 0,
                        missing: Ok(Vec::new()),
                    });
                }
                return format!("not injected: {e}");
            }
        };
        let acknowledged: Vec<String> = self
            .acknowledged
            .snapshot()
            .into_iter()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let started = Instant::now();
        let outcome = match fault.kind {
            FaultKind::Failover => pg.failover().await,
            FaultKind::PrimaryKill => match pg.crash_node(&primary.name).await {
                Ok(_) => {
                    let promoted = pg.wait_promoted(&primary.name).await;
                    tokio::time::sleep(fault.hold).await;
                    let back = pg.restart_node(&primary.name);
                    promoted.and_then(|new| {
                        back.map(|()| (primary.port.to_string(), new.port.to_string()))
                    })
                }
                Err(e) => Err(e),
            },
            _ => {
                let crashed = pg.crash_node(&standby.name).await;
                tokio::time::sleep(fault.hold).await;
                let back = pg.restart_node(&standby.name);
                return match crashed.and(back) {
                    Ok(()) => format!(
                        "standby {} (port {}) crashed, started again after {} ms",
                        standby.name,
                        standby.port,
                        fault.hold.as_millis()
                    ),
                    Err(e) => format!("failed: {e}"),
                };
            }
        };
        let took = started.elapsed().as_millis();
        let missing = match &outcome {
            Ok(_) => pg.missing_from_outbox(&acknowledged).await,
            Err(_) => Ok(Vec::new()),
        };
        let detail = match (&outcome, &missing) {
            (Ok((before, after)), Ok(missing)) => format!(
                "primary moved from port {before} to port {after} in {took} ms; {} of {} acknowledged commands missing from the outbox",
                missing.len(),
                acknowledged.len()
            ),
            (Ok((before, after)), Err(e)) => format!(
                "primary moved from port {before} to port {after} in {took} ms; outbox not read: {e}"
            ),
            (Err(e), _) => format!("failed: {e}"),
        };
        self.failovers.push(checks::FailoverRecord {
            cause: fault.kind.as_str(),
            outcome,
            acknowledged: acknowledged.len(),
            missing,
        });
        detail
    }

    /// The fenced-writes check: the writers' journals against the stored counters.
    async fn fenced_writes(&self, db: &tenantry_store_seaorm::Database) -> Vec<CheckResult> {
        use tenantry_ports::host_storage::HostStorage as _;
        let storage = tenantry_store_seaorm::SeaOrmHostStorage::new(db);
        let Ok(binding) = tenantry_fence::Binding::parse(writers::BINDING) else {
            return vec![CheckResult {
                name: "fenced writes across processes: every increment committed once",
                passed: false,
                detail: "invalid binding".to_owned(),
            }];
        };
        let mut counters = BTreeMap::new();
        for k in 0..writers::SCOPES {
            match storage.get(&binding, &writers::counter_key(k)).await {
                Ok(v) => {
                    counters.insert(k, v.and_then(|v| v.as_u64()).unwrap_or(0));
                }
                Err(e) => {
                    return vec![CheckResult {
                        name: "fenced writes across processes: every increment committed once",
                        passed: false,
                        detail: format!("cannot read scope {k}'s counter: {e}"),
                    }];
                }
            }
        }
        let mut result = writers::committed_once(&self.writers.journals(), &counters);
        result.detail.push_str(&format!(
            "; {} writer processes started, {} killed",
            self.writers.starts(),
            self.writers.killed.len()
        ));
        // Every claim of a dead writer has expired (the claim lives 2 s) before the listing.
        if let Some(at) = self.writers_killed_at {
            tokio::time::sleep_until(at + Duration::from_secs(3)).await;
        }
        let listed = tenantry_engine::scoped_writes::ScopedWrites::for_fence_admin(
            std::sync::Arc::new(storage),
            Duration::from_secs(1),
        )
        .fence_views(Some(&binding))
        .await;
        let now = chrono::Utc::now();
        let fences = match listed {
            Ok(views) => {
                let left: Vec<writers::FenceLeft> = views
                    .into_iter()
                    .map(|v| writers::FenceLeft {
                        scope: v.scope.unwrap_or_else(|| v.key.clone()),
                        fence: v.kind == tenantry_fence::RecordKind::Fence,
                        failure_kind: v.failure_kind,
                        owner: v.owner,
                        expired: v.expires_at.is_none_or(|at| at <= now),
                    })
                    .collect();
                writers::fences_explained(&left, &self.writers.killed)
            }
            Err(e) => CheckResult {
                name: "fenced writes across processes: every fence left was a killed writer's dispatched write",
                passed: false,
                detail: format!("cannot list the fences: {e}"),
            },
        };
        vec![result, fences]
    }

    /// Sleeps `gap`, stepping a stepped wall clock back when its hold ends meanwhile.
    async fn sleep_restoring_clock(&mut self, gap: Duration) {
        let until = Instant::now() + gap;
        if let Some((_, back_at)) = self.clock_back
            && back_at < until
        {
            tokio::time::sleep_until(back_at).await;
            self.restore_clock().await;
        }
        tokio::time::sleep_until(until).await;
    }

    /// Steps replica `i`'s wall clock by `seconds` (it stays stepped across restarts until
    /// stepped back) and records what a process with its environment reads then.
    async fn step_clock(&mut self, i: usize, seconds: i64, hold: Duration) -> String {
        // One stepped replica at a time.
        self.restore_clock().await;
        if let Err(e) = self.replicas[i].set_clock_offset(seconds) {
            // Recorded unread: the check fails, the schedule's step did not happen.
            self.clock_steps.push(ClockStepRecord {
                replica: i,
                step: seconds,
                ..ClockStepRecord::default()
            });
            return format!("failed: {e}");
        }
        // The replica re-reads the file within two seconds (`FAKETIME_CACHE_DURATION=1`).
        tokio::time::sleep(CLOCK_REREAD).await;
        let observed = self.replicas[i].observed_clock_offset().await;
        let mut detail = format!(
            "wall clock {seconds:+} s for at least {} ms; libfaketime environment reads {}",
            hold.as_millis(),
            match &observed {
                Ok(o) => format!("{o:+} s"),
                Err(e) => e.clone(),
            }
        );
        // In-process evidence too, when it can show: hyper's `Date` header follows a forward
        // step at once (a backward one only once the clock passes its cached second).
        if let Ok(date) = replica::clock_offset(self.replicas[i].port, "/healthz").await {
            detail.push_str(&format!(", the replica's HTTP Date header {date:+} s"));
        }
        self.clock_steps.push(ClockStepRecord {
            replica: i,
            step: seconds,
            observed: observed.ok(),
            observed_back: None,
        });
        self.clock_back = Some((i, Instant::now() + hold));
        detail
    }

    /// Steps the stepped replica's wall clock back to the real time, if one is stepped, and
    /// records what its environment reads then.
    async fn restore_clock(&mut self) {
        let Some((i, _)) = self.clock_back.take() else {
            return;
        };
        let restored = self.replicas[i].set_clock_offset(0);
        tokio::time::sleep(CLOCK_REREAD).await;
        let observed = match restored {
            Ok(()) => self.replicas[i].observed_clock_offset().await.ok(),
            Err(_) => None,
        };
        if let Some(record) = self.clock_steps.last_mut() {
            record.observed_back = observed;
        }
    }

    /// SIGSTOP replica `i` for `hold`; lists the commands it held (through another replica)
    /// and which of them were claimed again before SIGCONT.
    async fn pause(
        &mut self,
        i: usize,
        hold: Duration,
        plan: &Plan,
    ) -> Result<PauseRecord, String> {
        let client = self
            .other_client(i)
            .ok_or("no other replica running to observe the pause")?;
        let r = &self.replicas[i];
        let pid = r.pid().ok_or("replica not running")?;
        let generation = r.generation;
        r.stop().await?;
        let started = Instant::now();
        // A settle the process sent just before it stopped may still be committing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listed = workload::commands_of(&client, &plan.tenants, Some("processing")).await;
        let held: Vec<Value> = match listed {
            Ok(all) => all
                .into_iter()
                .filter(|c| c["lease_owner"].as_str().and_then(checks::owner_pid) == Some(pid))
                .collect(),
            Err(e) => {
                tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
                let _ = self.replicas[i].resume().await;
                return Err(e.to_string());
            }
        };
        tokio::time::sleep(hold.saturating_sub(started.elapsed())).await;
        let mut taken_over = Vec::new();
        for c in &held {
            let (Some(id), Some(epoch), Some(attempt)) = (
                c["id"].as_str(),
                c["lease_epoch"].as_i64(),
                c["attempt_count"].as_i64(),
            ) else {
                continue;
            };
            let path = format!(
                "/v1/commands?tenant_id={}&control_space_id={}&limit=1000",
                c["tenant_id"].as_str().unwrap_or(""),
                c["control_space_id"].as_str().unwrap_or("")
            );
            if let Ok(page) = client.expect(200, Method::GET, &path, None, None).await
                && let Some(now) = page["items"]
                    .as_array()
                    .and_then(|items| items.iter().find(|x| x["id"] == id))
                && now["lease_epoch"].as_i64().is_some_and(|e| e > epoch)
            {
                taken_over.push((id.to_owned(), epoch, attempt));
            }
        }
        self.replicas[i].resume().await?;
        Ok(PauseRecord {
            replica: i,
            generation,
            held: held.len(),
            taken_over,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn check(
        &mut self,
        client: &AdminClient,
        plan: &Plan,
        driven: &workload::Driven,
        open_left: Option<u64>,
        truth: &tenantry_testkit::knowledge_fs::GroundTruth,
        directory: &tenantry_demo::directory::DemoDirectory,
        deadline: Instant,
    ) -> ChaosReport {
        let outcome = tenantry_demo::checks::run(client, plan, driven, open_left, truth).await;
        let mut checks = outcome.checks;

        // Late settles of paused owners.
        let mut logs: BTreeMap<(usize, u32), LeaseLog> = BTreeMap::new();
        for r in &self.replicas {
            for (g, path) in r.logs.iter().enumerate() {
                let mut log = LeaseLog::default();
                log.read(&std::fs::read_to_string(path).unwrap_or_default());
                logs.insert((r.index, g as u32 + 1), log);
            }
        }
        checks.push(checks::late_settles_refused(&self.pauses, &logs));
        checks.push(checks::clock_steps_took_effect(&self.clock_steps));
        if self.db.pg().is_some_and(|pg| pg.ha_monitor.is_some()) {
            checks.push(checks::failovers_moved_the_primary(&self.failovers));
            checks.push(checks::acknowledged_survived_failovers(&self.failovers));
        }
        let takeovers = self.pauses.iter().map(|p| p.taken_over.len() as u64).sum();
        let lease_lost = logs.values().map(|l| l.dropped.len() as u64).sum();

        // Directory: every replica caught up and ready; the shared tables equal the snapshot.
        let mut problems = Vec::new();
        for r in &self.replicas {
            let Ok(one) =
                AdminClient::replicas(vec![r.base()], &self.token, 5, Duration::from_secs(10))
            else {
                continue;
            };
            if let Err(e) = directory.wait_caught_up(&one, deadline).await {
                problems.push(format!("replica {}: {e}", r.index));
            }
        }
        checks.push(check(
            "every replica's directory projection caught up with the provider",
            &problems,
            format!(
                "{} replicas at cursor {}",
                self.replicas.len(),
                directory.server.cursor()
            ),
        ));
        match tenantry_store_seaorm::connect_existing(self.db.url(), 2).await {
            Ok(db) => {
                let store = SeaOrmDirectoryStore::new(&db);
                let (result, _) = directory.check(&store).await;
                checks.push(result);
                if self.writers.len() > 0 {
                    checks.extend(self.fenced_writes(&db).await);
                }
            }
            Err(e) => checks.push(CheckResult {
                name: "local directory tables equal the provider's final snapshot",
                passed: false,
                detail: format!("cannot open the database: {e}"),
            }),
        }
        let mut problems = Vec::new();
        for r in &self.replicas {
            match replica::probe(r.port, "/readyz").await {
                Ok(200) => {}
                Ok(status) => problems.push(format!("replica {}: /readyz {status}", r.index)),
                Err(e) => problems.push(format!("replica {}: /readyz {e}", r.index)),
            }
        }
        checks.push(check(
            "/readyz answers 200 on every replica",
            &problems,
            format!("{} replicas ready", self.replicas.len()),
        ));

        // Database sessions and leases.
        if let Some(pg) = self.db.pg() {
            let problems = match pg.idle_in_transaction().await {
                Ok(sessions) => sessions,
                Err(e) => vec![e],
            };
            checks.push(check(
                "no session left idle in transaction",
                &problems,
                "none".to_owned(),
            ));
        }
        let live: BTreeSet<u32> = self.replicas.iter().filter_map(Replica::pid).collect();
        let commands = workload::commands_of(client, &plan.tenants, None)
            .await
            .unwrap_or_default();
        checks.push(checks::no_orphan_leases(&commands, &live));
        checks.push(check(
            "no replica exited by itself",
            &self.unexpected_exits,
            format!(
                "{} process starts, all ended by the schedule",
                self.replicas
                    .iter()
                    .map(|r| u64::from(r.generation))
                    .sum::<u64>()
            ),
        ));

        let mut latencies: Vec<i64> = commands
            .iter()
            .filter_map(|c| {
                let created =
                    chrono::DateTime::parse_from_rfc3339(c["created_at"].as_str()?).ok()?;
                let done =
                    chrono::DateTime::parse_from_rfc3339(c["completed_at"].as_str()?).ok()?;
                Some((done - created).num_milliseconds())
            })
            .collect();
        latencies.sort_unstable();
        ChaosReport {
            outcomes: outcome.commands,
            takeovers,
            lease_lost,
            settle_p50_ms: quantile(&latencies, 0.5),
            settle_p99_ms: quantile(&latencies, 0.99),
            checks,
            ..ChaosReport::default()
        }
    }
}

/// Polls until no command is open or `deadline`; returns how many stayed open (`None` when
/// no replica answered).
async fn wait_settled(client: &AdminClient, tenants: &[String], deadline: Instant) -> Option<u64> {
    loop {
        let open = workload::open_commands(client, tenants).await.ok();
        if open == Some(0) || Instant::now() >= deadline {
            return open;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_needs_one_replica() {
        let args = ChaosArgs {
            tenantry_bin: PathBuf::from("tenantry"),
            database: "sqlite".to_owned(),
            pg_bindir: None,
            pg_data: None,
            pg_log: None,
            pg_as_postgres: false,
            ha_monitor: None,
            replicas: 3,
            commands: 100,
            seed: 1,
            duration: 0,
            faults: FaultLevel::Default,
            keep: false,
            out: PathBuf::from("target/chaos"),
            timeout: 10,
            workers: 2,
            group_commit: true,
            faketime_lib: None,
            fence_writers: 0,
            no_progress: true,
        };
        let rt = tokio::runtime::Builder::new_current_thread().build();
        let Ok(rt) = rt else { return };
        let err = rt
            .block_on(setup_database(&args, "x", Path::new("/nonexistent")))
            .err();
        assert!(err.is_some_and(|e| e.contains("--replicas 1")));
    }
}
