//! The summary of a chaos run: a table on the terminal and the same figures as JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::{Value, json};
use tenantry_demo::CheckResult;

/// One fault as it was injected.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultEvent {
    /// Seconds since the start of the workload.
    pub at: f64,
    /// `FaultKind::as_str`.
    pub kind: &'static str,
    /// Target replica, for process faults.
    pub replica: Option<usize>,
    /// What happened.
    pub detail: String,
}

/// Everything a run measured and checked.
#[derive(Debug, Clone, Default)]
pub struct ChaosReport {
    /// Seed.
    pub seed: u64,
    /// Replicas.
    pub replicas: usize,
    /// Fault level.
    pub faults: &'static str,
    /// `postgresql` or `sqlite`.
    pub database: &'static str,
    /// Commands enqueued.
    pub commands: u64,
    /// Commands per (operation, status) at the end.
    pub outcomes: BTreeMap<(String, String), u64>,
    /// Faults injected, in order.
    pub events: Vec<FaultEvent>,
    /// Replica processes started after the first ones.
    pub restarts: u64,
    /// Commands of paused replicas taken over by another worker.
    pub takeovers: u64,
    /// Attempts dropped with `LEASE_LOST` in all logs.
    pub lease_lost: u64,
    /// Faults the reference remotes injected, per kind.
    pub remote_faults: BTreeMap<String, u64>,
    /// What the reference KnowledgeFS did.
    pub effects: Value,
    /// From the end of the last fault until every command settled.
    pub drain_after_last_fault: Duration,
    /// Median and 99th percentile of enqueue-to-settle, in ms.
    pub settle_p50_ms: i64,
    /// See `settle_p50_ms`.
    pub settle_p99_ms: i64,
    /// Time until the workload was submitted.
    pub submitted_in: Duration,
    /// Whole run.
    pub total: Duration,
    /// Every check, in order.
    pub checks: Vec<CheckResult>,
}

impl ChaosReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c.passed)
    }

    /// Faults per kind.
    pub fn faults_by_kind(&self) -> BTreeMap<&'static str, u64> {
        let mut by_kind = BTreeMap::new();
        for e in &self.events {
            *by_kind.entry(e.kind).or_default() += 1;
        }
        by_kind
    }

    /// The terminal table.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\ntenantry chaos: seed {}, {} replica(s) on {}, faults {}",
            self.seed, self.replicas, self.database, self.faults
        );
        let _ = writeln!(s, "\n| faults injected | count |\n|---|---|");
        for (kind, n) in self.faults_by_kind() {
            let _ = writeln!(s, "| {kind} | {n} |");
        }
        let _ = writeln!(s, "\n| commands | count |\n|---|---|");
        for ((op, status), n) in &self.outcomes {
            let _ = writeln!(s, "| {op} {status} | {n} |");
        }
        let _ = writeln!(s, "\n| figure | value |\n|---|---|");
        for (name, value) in [
            ("commands enqueued", self.commands.to_string()),
            ("replica restarts", self.restarts.to_string()),
            ("takeovers of paused replicas", self.takeovers.to_string()),
            ("attempts dropped (LEASE_LOST)", self.lease_lost.to_string()),
            (
                "remote faults injected",
                self.remote_faults.values().sum::<u64>().to_string(),
            ),
            (
                "drain after the last fault",
                format!("{:.1} s", self.drain_after_last_fault.as_secs_f64()),
            ),
            (
                "enqueue to settle p50",
                format!("{} ms", self.settle_p50_ms),
            ),
            (
                "enqueue to settle p99",
                format!("{} ms", self.settle_p99_ms),
            ),
            (
                "workload submitted in",
                format!("{:.1} s", self.submitted_in.as_secs_f64()),
            ),
            ("whole run", format!("{:.1} s", self.total.as_secs_f64())),
        ] {
            let _ = writeln!(s, "| {name} | {value} |");
        }
        let _ = writeln!(s, "\n| check | result | detail |\n|---|---|---|");
        for c in &self.checks {
            let verdict = if c.passed { "pass" } else { "FAIL" };
            let _ = writeln!(s, "| {} | {verdict} | {} |", c.name, c.detail);
        }
        s
    }

    /// The JSON document written under `target/chaos/`.
    pub fn to_json(&self) -> Value {
        let outcomes: Vec<Value> = self
            .outcomes
            .iter()
            .map(|((op, status), n)| json!({"operation": op, "status": status, "count": n}))
            .collect();
        let events: Vec<Value> = self
            .events
            .iter()
            .map(
                |e| json!({"at_s": e.at, "kind": e.kind, "replica": e.replica, "detail": e.detail}),
            )
            .collect();
        let checks: Vec<Value> = self
            .checks
            .iter()
            .map(|c| json!({"name": c.name, "passed": c.passed, "detail": c.detail}))
            .collect();
        json!({
            "seed": self.seed,
            "replicas": self.replicas,
            "faults": self.faults,
            "database": self.database,
            "passed": self.passed(),
            "commands": self.commands,
            "outcomes": outcomes,
            "faults_by_kind": self.faults_by_kind(),
            "fault_events": events,
            "replica_restarts": self.restarts,
            "takeovers_of_paused_replicas": self.takeovers,
            "attempts_dropped_lease_lost": self.lease_lost,
            "remote_faults": self.remote_faults,
            "remote_effects": self.effects,
            "drain_after_last_fault_s": self.drain_after_last_fault.as_secs_f64(),
            "settle_p50_ms": self.settle_p50_ms,
            "settle_p99_ms": self.settle_p99_ms,
            "submitted_in_s": self.submitted_in.as_secs_f64(),
            "total_s": self.total.as_secs_f64(),
            "checks": checks,
        })
    }
}

/// The `q` quantile (0..=1) of `sorted` values, nearest rank; 0 when empty.
pub fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_by_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 50);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(quantile(&[7], 0.99), 7);
    }

    #[test]
    fn a_failed_check_fails_the_run_and_shows_in_the_table() {
        let mut report = ChaosReport {
            checks: vec![CheckResult {
                name: "x",
                passed: true,
                detail: "ok".into(),
            }],
            ..ChaosReport::default()
        };
        assert!(report.passed());
        report.checks.push(CheckResult {
            name: "y",
            passed: false,
            detail: "bad".into(),
        });
        assert!(!report.passed());
        assert!(report.render().contains("| y | FAIL | bad |"));
        assert_eq!(report.to_json()["passed"], false);
    }
}
