//! The demo's summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tenantry_testkit::fault::Route;
use tenantry_testkit::knowledge_fs::EffectCounters;

use super::checks::CheckResult;
use super::directory::{Churn, DirectoryCounts};
use crate::args::Faults;

/// Everything a demo run measured and checked.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// Seed of the run.
    pub seed: u64,
    /// Scale of the workload.
    pub scale: f64,
    /// Fault profile.
    pub faults: Faults,
    /// Database description (password redacted).
    pub database: String,
    /// The remotes' scheme as the service called them: `https` with `--tls`, else `http`.
    pub remote_scheme: &'static str,
    /// Tenants in the workload.
    pub tenants: usize,
    /// Control spaces in the workload.
    pub control_spaces: usize,
    /// Commands per (operation, status) at the end.
    pub commands: BTreeMap<(String, String), u64>,
    /// Requests replayed with the same key and answered with the original.
    pub replays_matched: u64,
    /// Retries per error code (from the metrics sink).
    pub retries: BTreeMap<String, u64>,
    /// Dispatches that ended without a settlement, per code.
    pub dispatch_errors: BTreeMap<String, u64>,
    /// Faults the reference remote injected, per (route, kind).
    pub faults_injected: BTreeMap<(Route, &'static str), u64>,
    /// What the remote really did.
    pub effects: EffectCounters,
    /// Faults the reference directory injected, per (route, kind).
    pub directory_faults: BTreeMap<(Route, &'static str), u64>,
    /// Directory changes made while the workload ran.
    pub churn: Churn,
    /// Sizes of the directory's final snapshot.
    pub directory: DirectoryCounts,
    /// Time until the directory projection caught up.
    pub directory_settled_in: Duration,
    /// Every check.
    pub checks: Vec<CheckResult>,
    /// Time until the workload was submitted.
    pub submitted_in: Duration,
    /// Time until every command settled.
    pub settled_in: Duration,
    /// Whole run, shutdown included.
    pub total: Duration,
}

/// Faults that commit the effect and then lose the answer.
const AMBIGUOUS: [&str; 3] = ["lost_ack", "reset_after_commit", "stall"];

impl DemoReport {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed)
    }

    /// Commands in total.
    pub fn command_total(&self) -> u64 {
        self.commands.values().sum()
    }

    /// Ambiguous outcomes (answer lost after the remote may have committed) that the saga
    /// had to recover from.
    pub fn ambiguous_outcomes(&self) -> u64 {
        self.faults_injected
            .iter()
            .filter(|((route, kind), _)| route.is_mutation() && AMBIGUOUS.contains(kind))
            .map(|(_, n)| n)
            .sum()
    }

    /// The summary as printed by `tenantry-demo demo`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let faults = format!("{:?}", self.faults).to_lowercase();
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Tenantry demo: seed {}, scale {}, faults {faults}, database: {}, remotes over {}",
            self.seed, self.scale, self.database, self.remote_scheme
        );
        let _ = writeln!(
            out,
            "  {} tenants, {} control spaces, {} commands; submitted in {:.1} s, settled in {:.1} s, total {:.1} s",
            self.tenants,
            self.control_spaces,
            self.command_total(),
            self.submitted_in.as_secs_f64(),
            self.settled_in.as_secs_f64(),
            self.total.as_secs_f64()
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {:<12} {:>8} {:>10} {:>11} {:>6}",
            "commands", "total", "succeeded", "superseded", "open"
        );
        let mut ops: BTreeMap<&str, [u64; 3]> = BTreeMap::new();
        for ((op, status), n) in &self.commands {
            let row = ops.entry(op.as_str()).or_default();
            match status.as_str() {
                "succeeded" => row[0] += n,
                "superseded" => row[1] += n,
                _ => row[2] += n,
            }
        }
        for (op, [ok, sup, open]) in &ops {
            let _ = writeln!(
                out,
                "  {:<12} {:>8} {:>10} {:>11} {:>6}",
                op,
                ok + sup + open,
                ok,
                sup,
                open
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "  retries by cause");
        if self.retries.is_empty() {
            let _ = writeln!(out, "    (none)");
        }
        for (code, n) in &self.retries {
            let _ = writeln!(out, "    {code:<34} {n:>6}");
        }
        for (code, n) in &self.dispatch_errors {
            let _ = writeln!(out, "    {:<34} {n:>6}", format!("{code} (no settlement)"));
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "  faults injected by the remote");
        if self.faults_injected.is_empty() {
            let _ = writeln!(out, "    (none)");
        }
        for ((route, kind), n) in &self.faults_injected {
            let _ = writeln!(out, "    {:<34} {n:>6}", format!("{route:?} {kind}"));
        }
        let _ = writeln!(
            out,
            "  lost ACKs recovered (answer lost after commit): {}",
            self.ambiguous_outcomes()
        );
        let e = &self.effects;
        let _ = writeln!(
            out,
            "  remote effects: {} spaces created, {} provision replays, {} deletions completed, {} revocations applied, {} revocation replays",
            e.spaces_created,
            e.provision_replays,
            e.deletions_completed,
            e.revocations_applied,
            e.revocation_replays
        );
        let _ = writeln!(out);
        let c = &self.churn;
        let _ = writeln!(
            out,
            "  directory: final snapshot {} workspaces, {} memberships, {} accounts; {} changes while running ({} members added, {} removed, {} workspaces created, {} suspended/archived/deleted, {} removed, {} entitlement events); projection caught up at {:.1} s",
            self.directory.workspaces,
            self.directory.memberships,
            self.directory.accounts,
            c.total(),
            c.members_added,
            c.members_removed,
            c.workspaces_created,
            c.workspaces_archived,
            c.workspaces_removed,
            c.entitlement_events,
            self.directory_settled_in.as_secs_f64()
        );
        if !self.directory_faults.is_empty() {
            let faults: Vec<String> = self
                .directory_faults
                .iter()
                .map(|((route, kind), n)| format!("{route:?} {kind} {n}"))
                .collect();
            let _ = writeln!(out, "  directory faults injected: {}", faults.join(", "));
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "  checks");
        for c in &self.checks {
            let mark = if c.passed { "PASS" } else { "FAIL" };
            let _ = writeln!(out, "    {mark}  {:<60} {}", c.name, c.detail);
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Result: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        );
        out
    }
}
