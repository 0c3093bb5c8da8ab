//! The checks after the drain: the fenced writers' journals against the stored counters, and
//! every invariant of the run, gathered into the report.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tenantry_demo::CheckResult;
use tenantry_demo::client::AdminClient;
use tenantry_demo::workload::{self, Plan};
use tenantry_store_seaorm::SeaOrmDirectoryStore;
use tokio::time::Instant;

use super::Harness;
use crate::checks::{self, check};
use crate::logs::LeaseLog;
use crate::replica::{self, Replica};
use crate::report::{ChaosReport, quantile};
use crate::writers;

impl Harness {
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

    #[allow(clippy::too_many_arguments)]
    pub(super) async fn check(
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
