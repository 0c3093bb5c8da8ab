//! Metrics: the [`LifecycleMetrics`] port over the `metrics` crate, a timing decorator of the
//! KnowledgeFS port, and the Prometheus exporter behind `GET /metrics`.
//!
//! Series (Prometheus names):
//! - `tenantry_lifecycle_tasks_total{operation, status}`: dispatch task states
//!   (`running`, `succeeded`, `retry`, `failed`, `moot`, `dispatch_error`);
//! - `tenantry_lifecycle_retries_total{operation, code}`: retries by error code;
//!
//!   every `code` label (here and below) comes from a closed set,
//!   [`tenantry_lifecycle::code::metric_label`]: Tenantry's own codes, the KnowledgeFS
//!   protocol's, `KFS_HTTP_<d>XX`, and `OTHER` for any other code a remote sends (case 010);
//! - `tenantry_lifecycle_failed_total{operation, code}`: commands dead-lettered (status
//!   `failed`) by the code of the permanent or last error;
//! - `tenantry_lifecycle_lease_lost_total`: dispatches whose lease was taken over;
//! - `tenantry_lifecycle_lease_renewals_total{operation, outcome}`: lease renewals of
//!   dispatches in flight (`renewed`, `lost`, `settled`, `handed_back`, `expired`, `failed`);
//! - `tenantry_lifecycle_settle_contention_retries_total`: settle transactions run again after
//!   a deadlock or serialization failure (recorded by the store adapter);
//! - `tenantry_wake_listener_reconnections_total` and `tenantry_wake_listener_connected`: the
//!   PostgreSQL wake listener's reconnections and state (recorded by the store adapter);
//! - `tenantry_lifecycle_dispatch_errors_total{code}`: other dispatches without a settlement;
//! - `tenantry_lifecycle_settle_seconds{operation}`: histogram, enqueue to ack;
//! - `tenantry_dispatch_duration_seconds{call, outcome}`: histogram, one KnowledgeFS call;
//! - `tenantry_commands{status, operation}`: gauge, commands `pending`, `processing` and
//!   `failed` (dead-lettered, waiting for an operator), from one count query per scrape;
//! - `tenantry_fences_active{kind}`: gauge, records across all installation bindings, by kind:
//!   `fence` (outcome unknown, needs an operator) or `intent` (a write holds the scope);
//! - `tenantry_fence_writes_total{outcome}`, `tenantry_fence_refusals_total{reason}`,
//!   `tenantry_fence_unknown_outcomes_total` and `tenantry_fence_clears_total`: how the
//!   scoped writes of this replica ended (the [`FenceMetrics`](tenantry_ports::FenceMetrics)
//!   port, [`crate::fence_metrics::AppFenceMetrics`]);
//! - `tenantry_directory_staleness_seconds`: gauge, age of the directory projection (when a
//!   directory provider is configured);
//! - `tenantry_directory_refusals_total{reason}`: provider answers refused by a directory
//!   projection rule on this replica, by rule (`DirectoryError::rule`); refreshed from the
//!   projector's tally on every scrape and status read.
//! - `tenantry_directory_capacity_refusals_total{limit}`: synchronization steps refused because
//!   the directory exceeds a capacity limit (`max_snapshot_workspaces`,
//!   `max_snapshot_memberships`, `max_active_workspaces`, `max_response_bytes`), refreshed
//!   like the refusals.
//! - `tenantry_retention_removed_total{kind}`: records removed by the retention pruner of this
//!   replica, by kind (`finished_commands`, `operator_actions`, `inbox_receipts`,
//!   `cleared_fences`);
//! - `tenantry_retention_oldest_age_seconds{kind}`: gauge, age of the oldest record of each kind
//!   that retention governs (0 when there is none), after each pruner run.
//!
//! The recorder is process-global (the `metrics` crate has one), installed on first use. On
//! installation every series is described ([`SERIES`]: `# HELP` and `# TYPE` in `/metrics`)
//! and every counter is registered at 0 ([`register_counters`]), so a fresh replica exports
//! them before the first event: a rate over a counter that appears only with its first
//! increment misses that increment.

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Instant;

use async_trait::async_trait;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tenantry_kernel::{ControlSpaceId, DispatchOutcome, ProvisioningKey, TenantId};
use tenantry_lifecycle::code::metric_label;
use tenantry_lifecycle::{
    DeletionProgress, DeletionRequest, ProvisionRequest, RemoteSpace, RevokeAck, RevokeRequest,
};
use tenantry_ports::lifecycle::{
    KnowledgeFs, LifecycleMetrics, MetricsError, RemoteError, RenewalOutcome, TaskMetric,
    TaskStatus,
};

/// Histogram buckets, seconds: 5 ms to 5 minutes.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// The Prometheus type of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeriesType {
    /// Monotonic count (`# TYPE … counter`).
    Counter,
    /// Value that goes up and down (`# TYPE … gauge`).
    Gauge,
    /// Distribution in `BUCKETS` (`# TYPE … histogram`: `_bucket`, `_sum`, `_count`).
    Histogram,
}

impl SeriesType {
    /// `counter`, `gauge` or `histogram`, as in `# TYPE` and the table of docs/operations.md.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// Every series this process records: (Prometheus name, type, `# HELP` text). The series table
/// of docs/operations.md ("Health and metrics") lists exactly these (a test checks it, and
/// another that every name the crates record is here).
pub const SERIES: [(&str, SeriesType, &str); 22] = [
    (
        "tenantry_lifecycle_tasks_total",
        SeriesType::Counter,
        "Dispatch task states by operation and status (running, succeeded, retry, failed, moot, dispatch_error).",
    ),
    (
        "tenantry_lifecycle_failed_total",
        SeriesType::Counter,
        "Commands dead-lettered (status failed) by operation and the code of the permanent or last error.",
    ),
    (
        "tenantry_lifecycle_retries_total",
        SeriesType::Counter,
        "Retries scheduled by operation and error code.",
    ),
    (
        "tenantry_lifecycle_lease_lost_total",
        SeriesType::Counter,
        "Dispatches whose lease was taken over before settling.",
    ),
    (
        "tenantry_lifecycle_lease_renewals_total",
        SeriesType::Counter,
        "Lease renewals of dispatches in flight by operation and outcome (renewed, lost, settled, handed_back, expired, failed).",
    ),
    (
        "tenantry_wake_listener_reconnections_total",
        SeriesType::Counter,
        "PostgreSQL wake listener connections re-established.",
    ),
    (
        "tenantry_wake_listener_connected",
        SeriesType::Gauge,
        "1 while the PostgreSQL wake listener is listening, 0 while it reconnects.",
    ),
    (
        "tenantry_lifecycle_settle_contention_retries_total",
        SeriesType::Counter,
        "Settle transactions run again after a deadlock or serialization failure.",
    ),
    (
        "tenantry_lifecycle_dispatch_errors_total",
        SeriesType::Counter,
        "Dispatches that ended without a settlement (left to lease expiry) by error code.",
    ),
    (
        "tenantry_lifecycle_settle_seconds",
        SeriesType::Histogram,
        "Seconds from enqueue to acknowledgement of succeeded commands, by operation.",
    ),
    (
        "tenantry_dispatch_duration_seconds",
        SeriesType::Histogram,
        "Seconds of one KnowledgeFS call by call and outcome.",
    ),
    (
        "tenantry_commands",
        SeriesType::Gauge,
        "Commands pending, processing and failed (dead-lettered), by status and operation.",
    ),
    (
        "tenantry_fences_active",
        SeriesType::Gauge,
        "Fence records across installation bindings by kind (fence: needs an operator; intent: a write holds the scope).",
    ),
    (
        "tenantry_fence_writes_total",
        SeriesType::Counter,
        "Scoped writes whose operation ended with a known outcome, by outcome (succeeded, failed).",
    ),
    (
        "tenantry_fence_refusals_total",
        SeriesType::Counter,
        "Scoped writes refused before their mutation ran, by reason (fenced, scope_busy, state_unavailable, claim_lost).",
    ),
    (
        "tenantry_fence_unknown_outcomes_total",
        SeriesType::Counter,
        "Scoped writes whose outcome was unknown, each fencing its scope until an operator reconciles.",
    ),
    (
        "tenantry_fence_clears_total",
        SeriesType::Counter,
        "Fences and expired intents cleared by an operator through this replica.",
    ),
    (
        "tenantry_directory_staleness_seconds",
        SeriesType::Gauge,
        "Seconds since the directory projection was last applied.",
    ),
    (
        "tenantry_directory_refusals_total",
        SeriesType::Counter,
        "Directory provider answers refused by a projection rule on this replica, by rule.",
    ),
    (
        "tenantry_directory_capacity_refusals_total",
        SeriesType::Counter,
        "Directory synchronization steps refused on this replica because the directory exceeds a capacity limit, by limit (the setting directory_<limit> raises it).",
    ),
    (
        "tenantry_retention_removed_total",
        SeriesType::Counter,
        "Records removed by this replica's retention pruner, by kind.",
    ),
    (
        "tenantry_retention_oldest_age_seconds",
        SeriesType::Gauge,
        "Seconds since the oldest record of each kind retention governs (0: none), after each pruner run.",
    ),
];

/// The process's Prometheus handle; installs the global recorder on first call, then
/// describes every series ([`SERIES`]) and registers the counters at 0
/// ([`register_counters`]). `None` when another recorder was installed first (the metrics
/// then go there, `/metrics` is empty).
pub fn prometheus() -> Option<PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new().set_buckets(&BUCKETS).ok()?;
            let handle = builder.install_recorder().ok()?;
            describe_series();
            register_counters();
            Some(handle)
        })
        .clone()
}

/// Describes every series of [`SERIES`] to the recorder (its `# HELP` line).
fn describe_series() {
    for (name, kind, help) in SERIES {
        match kind {
            SeriesType::Counter => metrics::describe_counter!(name, help),
            SeriesType::Gauge => metrics::describe_gauge!(name, help),
            SeriesType::Histogram => metrics::describe_histogram!(name, help),
        }
    }
}

/// Registers every counter of [`SERIES`] at 0, so each exists from the start: the label-free
/// ones as they are; labelled ones for every value of their closed label sets (operation ×
/// task status, operation × renewal outcome, retention kind, directory refusal rule); those
/// labelled by an error code (`retries`, `failed`: the code is only known when it happens) as
/// one series per operation without `code`, and `dispatch_errors` with its one code
/// `STORE_UNAVAILABLE`. Adding 0 changes no count, so registering again is harmless.
pub fn register_counters() {
    use tenantry_lifecycle::Operation;
    const OPERATIONS: [Operation; 3] = [Operation::Provision, Operation::Delete, Operation::Revoke];
    const STATUSES: [TaskStatus; 6] = [
        TaskStatus::Running,
        TaskStatus::Succeeded,
        TaskStatus::Retry,
        TaskStatus::Failed,
        TaskStatus::Moot,
        TaskStatus::DispatchError,
    ];
    const RENEWALS: [RenewalOutcome; 6] = RenewalOutcome::ALL;
    for name in [
        "tenantry_lifecycle_lease_lost_total",
        "tenantry_wake_listener_reconnections_total",
        "tenantry_lifecycle_settle_contention_retries_total",
        "tenantry_fence_unknown_outcomes_total",
        "tenantry_fence_clears_total",
    ] {
        metrics::counter!(name).increment(0);
    }
    for outcome in tenantry_ports::FenceWriteOutcome::ALL {
        metrics::counter!("tenantry_fence_writes_total", "outcome" => outcome.as_str())
            .increment(0);
    }
    for reason in tenantry_ports::FenceRefusal::ALL {
        metrics::counter!("tenantry_fence_refusals_total", "reason" => reason.as_str())
            .increment(0);
    }
    metrics::counter!("tenantry_lifecycle_dispatch_errors_total", "code" => "STORE_UNAVAILABLE")
        .increment(0);
    for operation in OPERATIONS {
        let operation = operation.as_str().to_owned();
        for status in STATUSES {
            metrics::counter!(
                "tenantry_lifecycle_tasks_total",
                "operation" => operation.clone(),
                "status" => status.as_str()
            )
            .increment(0);
        }
        for outcome in RENEWALS {
            metrics::counter!(
                "tenantry_lifecycle_lease_renewals_total",
                "operation" => operation.clone(),
                "outcome" => outcome.as_str()
            )
            .increment(0);
        }
        for name in [
            "tenantry_lifecycle_retries_total",
            "tenantry_lifecycle_failed_total",
        ] {
            metrics::counter!(name, "operation" => operation.clone()).increment(0);
        }
    }
    for kind in tenantry_ports::retention::RetentionKind::ALL {
        metrics::counter!("tenantry_retention_removed_total", "kind" => kind.as_str()).increment(0);
    }
    for rule in tenantry_directory::RefusalRule::ALL {
        metrics::counter!("tenantry_directory_refusals_total", "reason" => rule.as_str())
            .increment(0);
    }
    for limit in tenantry_directory::CapacityLimit::ALL {
        metrics::counter!("tenantry_directory_capacity_refusals_total", "limit" => limit.as_str())
            .increment(0);
    }
}

/// Renders every series in Prometheus text format (empty without a recorder).
pub fn render() -> String {
    match prometheus() {
        Some(handle) => {
            handle.run_upkeep();
            handle.render()
        }
        None => String::new(),
    }
}

/// In-process tallies of what the metrics saw, for the demo's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Task states per (operation, status).
    pub tasks: BTreeMap<(String, &'static str), u64>,
    /// Retries per error code.
    pub retries: BTreeMap<String, u64>,
    /// Dead-letters per error code.
    pub failed: BTreeMap<String, u64>,
    /// Dispatches without a settlement per error code (`LEASE_LOST` included).
    pub dispatch_errors: BTreeMap<String, u64>,
    /// KnowledgeFS calls per (call, outcome).
    pub calls: BTreeMap<(&'static str, &'static str), u64>,
    /// Lease renewals per outcome (`renewed`, `lost`, `failed`).
    pub renewals: BTreeMap<&'static str, u64>,
}

/// The lifecycle metrics sink of the app: records into the `metrics` crate and a [`Tally`].
#[derive(Debug, Default)]
pub struct AppMetrics {
    tally: Mutex<Tally>,
}

impl AppMetrics {
    /// A sink with empty tallies; installs the Prometheus recorder if needed.
    pub fn new() -> Self {
        let _ = prometheus();
        Self::default()
    }

    /// A copy of the tallies so far.
    pub fn tally(&self) -> Tally {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        // Tallies are plain counters; a poisoned lock still holds usable numbers.
        self.tally.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record_call(&self, call: &'static str, outcome: &'static str, seconds: f64) {
        metrics::histogram!(
            "tenantry_dispatch_duration_seconds",
            "call" => call,
            "outcome" => outcome
        )
        .record(seconds);
        *self.lock().calls.entry((call, outcome)).or_default() += 1;
    }
}

impl LifecycleMetrics for AppMetrics {
    fn record_task(&self, metric: &TaskMetric) -> Result<(), MetricsError> {
        let operation = metric.operation.clone();
        let status = metric.status.as_str();
        metrics::counter!(
            "tenantry_lifecycle_tasks_total",
            "operation" => operation.clone(),
            "status" => status
        )
        .increment(1);
        // Label values come from a closed set (case 010): a remote's own code is `OTHER`
        // unless Tenantry or the KnowledgeFS protocol names it (the code is on the command).
        let code = metric_label(metric.error_code.as_deref().unwrap_or_default());
        let mut tally = self.lock();
        *tally.tasks.entry((operation.clone(), status)).or_default() += 1;
        match metric.status {
            TaskStatus::Retry => {
                metrics::counter!(
                    "tenantry_lifecycle_retries_total",
                    "operation" => operation,
                    "code" => code
                )
                .increment(1);
                *tally.retries.entry(code.to_owned()).or_default() += 1;
            }
            TaskStatus::Succeeded => {
                if let Some(seconds) = metric.duration_seconds {
                    metrics::histogram!("tenantry_lifecycle_settle_seconds", "operation" => operation)
                        .record(seconds);
                }
            }
            TaskStatus::DispatchError => {
                if code == "LEASE_LOST" {
                    metrics::counter!("tenantry_lifecycle_lease_lost_total").increment(1);
                } else {
                    metrics::counter!("tenantry_lifecycle_dispatch_errors_total", "code" => code)
                        .increment(1);
                }
                *tally.dispatch_errors.entry(code.to_owned()).or_default() += 1;
            }
            TaskStatus::Failed => {
                metrics::counter!(
                    "tenantry_lifecycle_failed_total",
                    "operation" => operation,
                    "code" => code
                )
                .increment(1);
                *tally.failed.entry(code.to_owned()).or_default() += 1;
            }
            TaskStatus::Running | TaskStatus::Moot => {}
        }
        Ok(())
    }

    fn record_lease_renewal(
        &self,
        operation: &str,
        outcome: RenewalOutcome,
    ) -> Result<(), MetricsError> {
        metrics::counter!(
            "tenantry_lifecycle_lease_renewals_total",
            "operation" => operation.to_owned(),
            "outcome" => outcome.as_str()
        )
        .increment(1);
        *self.lock().renewals.entry(outcome.as_str()).or_default() += 1;
        Ok(())
    }
}

/// Sets the commands gauge for one (status, operation).
pub fn set_open_commands(status: &'static str, operation: &str, count: u64) {
    metrics::gauge!("tenantry_commands", "status" => status, "operation" => operation.to_owned())
        .set(count as f64);
}

/// Sets the active-fences gauge of one record kind (`fence` or `intent`).
pub fn set_fences_active(kind: &'static str, count: u64) {
    metrics::gauge!("tenantry_fences_active", "kind" => kind).set(count as f64);
}

/// Records one retention run: the removed counter and the oldest-age gauge of every kind.
pub fn record_prune(report: &tenantry_engine::retention::PruneReport) {
    for kind in &report.kinds {
        let label = kind.kind.as_str();
        metrics::counter!("tenantry_retention_removed_total", "kind" => label)
            .increment(kind.removed);
        let age = report
            .oldest_age(kind.kind)
            .map_or(0.0, |age| age.as_secs_f64());
        metrics::gauge!("tenantry_retention_oldest_age_seconds", "kind" => label).set(age);
    }
}

/// Sets the directory staleness gauge (seconds since the projection was last applied).
pub fn set_directory_staleness(seconds: f64) {
    metrics::gauge!("tenantry_directory_staleness_seconds").set(seconds);
}

/// Sets `tenantry_directory_refusals_total{reason}` to the projector's count for `rule`
/// (the projector keeps the monotonic tally; this mirrors it).
pub fn set_directory_refusals(rule: &str, count: u64) {
    metrics::counter!("tenantry_directory_refusals_total", "reason" => rule.to_owned())
        .absolute(count);
}

/// Sets `tenantry_directory_capacity_refusals_total{limit}` to the projector's count for
/// `limit` (the projector keeps the monotonic tally; this mirrors it).
pub fn set_directory_capacity_refusals(limit: &str, count: u64) {
    metrics::counter!("tenantry_directory_capacity_refusals_total", "limit" => limit.to_owned())
        .absolute(count);
}

/// A [`KnowledgeFs`] that times every call of the wrapped remote into
/// `tenantry_dispatch_duration_seconds{call, outcome}`.
pub struct MeteredRemote<R> {
    inner: R,
    metrics: std::sync::Arc<AppMetrics>,
}

impl<R> MeteredRemote<R> {
    /// Wraps `inner`, recording into `metrics`.
    pub fn new(inner: R, metrics: std::sync::Arc<AppMetrics>) -> Self {
        Self { inner, metrics }
    }

    fn observe<T>(&self, call: &'static str, started: Instant, result: &Result<T, RemoteError>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(e) => match e.failure {
                DispatchOutcome::NotDispatched => "not_dispatched",
                DispatchOutcome::Answered { .. } => "answered",
                DispatchOutcome::OutcomeUnknown => "outcome_unknown",
            },
        };
        self.metrics
            .record_call(call, outcome, started.elapsed().as_secs_f64());
    }
}

#[async_trait]
impl<R: KnowledgeFs> KnowledgeFs for MeteredRemote<R> {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let started = Instant::now();
        let result = self.inner.provision(request).await;
        self.observe("provision", started, &result);
        result
    }

    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        let started = Instant::now();
        let result = self
            .inner
            .find_by_provisioning_key(namespace_id, provisioning_key, control_space_id)
            .await;
        self.observe("lookup", started, &result);
        result
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        let started = Instant::now();
        let result = self.inner.request_deletion(request).await;
        self.observe("deletion", started, &result);
        result
    }

    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        let started = Instant::now();
        let result = self.inner.revoke_grant(request).await;
        self.observe("revocation", started, &result);
        result
    }
}

/// The reader of the documented series table, shared with the end-to-end tests.
#[cfg(test)]
#[path = "../../app/tests/common/documented_series.rs"]
mod documented_series;

#[cfg(test)]
mod tests {
    use super::*;

    use super::documented_series::documented_series;

    /// Every described series is documented with its type, and every documented one described.
    #[test]
    fn described_series_are_the_documented_ones() {
        let mut described: Vec<(String, String)> = SERIES
            .iter()
            .map(|(name, kind, _)| ((*name).to_owned(), kind.as_str().to_owned()))
            .collect();
        let mut documented = documented_series();
        described.sort();
        documented.sort();
        assert_eq!(described, documented);
    }

    /// The alert rules and the dashboard in `deploy/` (docs/operations.md, "Dashboards and
    /// alerts") name only series of [`SERIES`] (a histogram's `_bucket`, `_sum` and `_count`
    /// included), so a renamed series cannot leave them silently empty.
    #[test]
    fn shipped_alerts_and_dashboard_name_only_real_series() {
        let deploy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
        let files = [
            "prometheus/tenantry-alerts.yml",
            "prometheus/tenantry-alerts.test.yml",
            "grafana/tenantry-dashboard.json",
        ];
        let known: Vec<&str> = SERIES.iter().map(|(name, _, _)| *name).collect();
        let mut used = std::collections::BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(deploy.join(file)).unwrap();
            for (at, _) in text.match_indices("tenantry_") {
                let name: String = text[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix))
                    .filter(|base| known.contains(base))
                    .unwrap_or(&name);
                assert!(
                    known.contains(&base),
                    "{file} names {name}, not a series of SERIES"
                );
                used.insert(base.to_owned());
            }
        }
        let dashboard: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(deploy.join("grafana/tenantry-dashboard.json")).unwrap(),
        )
        .unwrap();
        let panels = dashboard["panels"].as_array().unwrap();
        assert!(
            panels
                .iter()
                .all(|p| p["targets"].as_array().is_some_and(|t| !t.is_empty()))
        );
        // Every series is on the dashboard.
        let unused: Vec<_> = known.iter().filter(|n| !used.contains(**n)).collect();
        assert!(
            unused.is_empty(),
            "series on no dashboard panel or alert: {unused:?}"
        );
    }

    /// `promtool check rules` and `promtool test rules` on the shipped alert rules, when
    /// `promtool` (Debian: prometheus) is installed; with `TENANTRY_REQUIRE_PROMTOOL=1` (as
    /// `.ci/run` sets) a missing promtool fails instead of skipping.
    #[test]
    fn shipped_alert_rules_pass_promtool() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus");
        let required = std::env::var_os("TENANTRY_REQUIRE_PROMTOOL").is_some();
        for args in [
            ["check", "rules", "tenantry-alerts.yml"],
            ["test", "rules", "tenantry-alerts.test.yml"],
        ] {
            let out = match std::process::Command::new("promtool")
                .args(args)
                .current_dir(&dir)
                .output()
            {
                Ok(out) => out,
                Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => panic!("promtool (Debian: apt-get install prometheus): {e}"),
            };
            assert!(
                out.status.success(),
                "promtool {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// Every metric name the crates record (`counter!`, `gauge!`, `histogram!` with a
    /// `"tenantry_…"` literal) is described in [`SERIES`], so it gets its `# HELP` line.
    #[test]
    fn every_recorded_metric_is_described() {
        fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    rust_files(&path, out);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    out.push(path);
                }
            }
        }
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&crates).unwrap() {
            let src = entry.unwrap().path().join("src");
            if src.is_dir() {
                rust_files(&src, &mut files);
            }
        }
        let mut recorded = std::collections::BTreeSet::new();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for macro_name in ["counter!(", "gauge!(", "histogram!("] {
                for (at, _) in text.match_indices(macro_name) {
                    let rest = text[at + macro_name.len()..].trim_start();
                    if let Some(name) = rest
                        .strip_prefix('"')
                        .and_then(|r| r.split('"').next())
                        .filter(|n| n.starts_with("tenantry_"))
                    {
                        recorded.insert(name.to_owned());
                    }
                }
            }
        }
        assert!(recorded.len() >= 10, "{recorded:?}");
        let described: Vec<&str> = SERIES.iter().map(|(name, _, _)| *name).collect();
        let missing: Vec<_> = recorded
            .iter()
            .filter(|n| !described.contains(&n.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "recorded but not in SERIES: {missing:?}"
        );
    }

    #[test]
    fn lease_renewals_are_counted_by_outcome() {
        let sink = AppMetrics::new();
        for outcome in [
            RenewalOutcome::Renewed,
            RenewalOutcome::Renewed,
            RenewalOutcome::Lost,
        ] {
            sink.record_lease_renewal("delete", outcome).unwrap();
        }
        let tally = sink.tally();
        assert_eq!(tally.renewals.get("renewed"), Some(&2));
        assert_eq!(tally.renewals.get("lost"), Some(&1));
        let text = render();
        assert!(
            text.contains(
                "tenantry_lifecycle_lease_renewals_total{operation=\"delete\",outcome=\"renewed\"}"
            ),
            "{text}"
        );
    }

    #[test]
    fn case_010_remote_codes_never_become_new_label_values() {
        let sink = AppMetrics::new();
        let metric = |code: String| TaskMetric {
            // An operation name of this test only: the recorder is process-global.
            operation: "case010".into(),
            status: TaskStatus::Failed,
            duration_seconds: None,
            error_code: Some(code),
        };
        for i in 0..50 {
            sink.record_task(&metric(format!("REMOTE_CODE_{i}")))
                .unwrap();
        }
        sink.record_task(&metric("X".repeat(200 * 1024))).unwrap();
        sink.record_task(&metric("\u{1b}[2J".into())).unwrap();
        sink.record_task(&metric("KFS_HTTP_502".into())).unwrap();
        let text = render();
        let mut series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tenantry_lifecycle_failed_total{operation=\"case010\""))
            .collect();
        series.sort_unstable();
        assert_eq!(
            series,
            [
                "tenantry_lifecycle_failed_total{operation=\"case010\",code=\"KFS_HTTP_5XX\"} 1",
                "tenantry_lifecycle_failed_total{operation=\"case010\",code=\"OTHER\"} 52",
            ],
            "{text}"
        );
        assert!(
            text.lines().all(|l| l.len() < 1024),
            "a long label was rendered"
        );
        assert_eq!(sink.tally().failed.len(), 2, "the tally is bounded too");
    }

    #[test]
    fn retries_and_lease_loss_are_tallied_by_code() {
        let sink = AppMetrics::new();
        let metric = |status, code: Option<&str>| TaskMetric {
            operation: "provision".into(),
            status,
            duration_seconds: None,
            error_code: code.map(str::to_owned),
        };
        sink.record_task(&metric(TaskStatus::Retry, Some("KFS_UNAVAILABLE")))
            .unwrap();
        sink.record_task(&metric(TaskStatus::Retry, Some("KFS_UNAVAILABLE")))
            .unwrap();
        sink.record_task(&metric(TaskStatus::DispatchError, Some("LEASE_LOST")))
            .unwrap();
        sink.record_task(&metric(TaskStatus::Failed, Some("INVALID_REQUEST")))
            .unwrap();
        let tally = sink.tally();
        assert_eq!(tally.retries.get("KFS_UNAVAILABLE"), Some(&2));
        assert_eq!(tally.dispatch_errors.get("LEASE_LOST"), Some(&1));
        assert_eq!(tally.failed.get("INVALID_REQUEST"), Some(&1));
        assert_eq!(
            tally.tasks.get(&("provision".to_owned(), "retry")),
            Some(&2)
        );
        let text = render();
        assert!(text.contains("tenantry_lifecycle_retries_total"), "{text}");
        assert!(
            text.contains("tenantry_lifecycle_lease_lost_total"),
            "{text}"
        );
        assert!(
            text.contains(
                "tenantry_lifecycle_failed_total{operation=\"provision\",code=\"INVALID_REQUEST\"} 1"
            ),
            "{text}"
        );
    }
}
