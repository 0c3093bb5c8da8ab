//! One chaos run: set up the remotes, the database and the replicas; drive the workload while
//! the fault schedule runs; drain; check; report; tear down.

mod faults;
mod verdict;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tenantry_demo::client::AdminClient;
use tenantry_demo::reference_remote;
use tenantry_demo::workload::{self, CONTROL_SPACES_AT_SCALE_1};
use tenantry_store_seaorm::throwaway;
use tenantry_testkit::knowledge_fs::{ReferenceRemote, RemoteConfig};
use tokio::time::Instant;

use crate::args::{ChaosArgs, FaultLevel};
use crate::checks::{self, ClockStepRecord, PauseRecord};
use crate::pg::Postgres;
use crate::replica::Replica;
use crate::report::{ChaosReport, FaultEvent};
use crate::schedule::{Capabilities, Schedule};
use crate::writers::Writers;

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
