//! The directory projection as the operator sees it: the status `GET /v1/directory/status`,
//! `/readyz` and the console report, read through the [`ProjectionReport`] of this replica's
//! projector and the store's read ports (no storage or HTTP client types).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;
use tenantry_directory::config::CapacityLimit;
use tenantry_directory::{NotReady, ProjectorConfig, RefusalRule};
use tenantry_engine::SyncFailure;
use tenantry_engine::directory::{DirectoryProjector, Refusal, RefusalReport, ResourceSnapshot};
use tenantry_ports::clock::Clock;
use tenantry_ports::directory::{
    DirectoryProjectionStore, DirectoryProvider, ProjectionStateReader, ProjectionTablesReader,
};

/// What the operator front ends read of this replica's projector (its in-memory state); the
/// engine's [`DirectoryProjector`] is one, whatever its provider and store.
pub trait ProjectionReport: Send + Sync {
    /// The projector's configuration.
    fn config(&self) -> &ProjectorConfig;
    /// This replica's consumer cursor (`None` before its first sync).
    fn consumer_cursor(&self) -> Option<i64>;
    /// Whether execution admission is open.
    ///
    /// # Errors
    /// [`NotReady`] with the reason it is closed.
    fn require_ready(&self) -> Result<(), NotReady>;
    /// The cardinality gauges.
    fn resource_snapshot(&self) -> ResourceSnapshot;
    /// The refusals of the projection rules on this replica.
    fn refusals(&self) -> RefusalReport;
    /// Capacity refusals per limit since this replica started.
    fn capacity_refusals(&self) -> BTreeMap<CapacityLimit, u64>;
    /// The latest failed synchronization steps, when the last one failed.
    fn sync_failure(&self) -> Option<SyncFailure>;
}

impl<P: DirectoryProvider, S: DirectoryProjectionStore> ProjectionReport
    for DirectoryProjector<P, S>
{
    fn config(&self) -> &ProjectorConfig {
        DirectoryProjector::config(self)
    }
    fn consumer_cursor(&self) -> Option<i64> {
        DirectoryProjector::consumer_cursor(self)
    }
    fn require_ready(&self) -> Result<(), NotReady> {
        DirectoryProjector::require_ready(self)
    }
    fn resource_snapshot(&self) -> ResourceSnapshot {
        DirectoryProjector::resource_snapshot(self)
    }
    fn refusals(&self) -> RefusalReport {
        DirectoryProjector::refusals(self)
    }
    fn capacity_refusals(&self) -> BTreeMap<CapacityLimit, u64> {
        DirectoryProjector::capacity_refusals(self)
    }
    fn sync_failure(&self) -> Option<SyncFailure> {
        DirectoryProjector::sync_failure(self)
    }
}

/// The read ports of the projection store the operator front ends use: the shared state row
/// and the projected tables (counts, recent inbox receipts). Implemented by every store with
/// both.
pub trait DirectoryReads: ProjectionStateReader + ProjectionTablesReader {}

impl<T: ProjectionStateReader + ProjectionTablesReader> DirectoryReads for T {}

/// What the admin API and the console need to report on the projection.
#[derive(Clone)]
pub struct DirectoryHandle {
    /// This replica's projector.
    pub projector: Arc<dyn ProjectionReport>,
    /// The store, for the shared state row, the counts and the inbox receipts.
    pub store: Arc<dyn DirectoryReads>,
    /// The projector's clock (the process's one clock): the staleness of the status report
    /// is measured on it.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for DirectoryHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryHandle").finish_non_exhaustive()
    }
}

/// The answer of `GET /v1/directory/status`: [`DirectoryStatus::NotConfigured`] or
/// [`DirectoryStatus::Configured`] (told apart by `configured`). Fields are in alphabetical
/// order and nested objects are sent with sorted keys, as this answer was sent before it was
/// typed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum DirectoryStatus {
    /// No directory provider is configured.
    NotConfigured(DirectoryNotConfigured),
    /// The projection of this replica.
    Configured(Box<DirectoryProjectionStatus>),
}

/// The status when no directory provider is configured.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DirectoryNotConfigured {
    /// Always `false`.
    pub configured: bool,
    /// Always `null`.
    #[schema(value_type = Option<i64>)]
    pub cursor: Option<i64>,
    /// What to set to configure one.
    pub message: &'static str,
    /// Always `null`.
    pub ready: Option<bool>,
    /// Always `null`.
    pub staleness_seconds: Option<f64>,
}

/// The status of the projection of this replica.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DirectoryProjectionStatus {
    /// Always `true`.
    pub configured: bool,
    /// This replica's consumer cursor (`null` before its first sync).
    pub cursor: Option<i64>,
    /// The directory instance projected.
    pub instance_uuid: String,
    /// When the shared projection last applied a change (`null`: never).
    pub last_applied_at: Option<DateTime<Utc>>,
    /// The latest provider answer a projection rule refused on this replica (`null` when
    /// none); while it is unresolved the whole projection waits.
    #[serde(serialize_with = "keys_sorted")]
    pub last_refusal: Option<Refusal>,
    /// Configured `directory_max_staleness`, in seconds.
    pub max_staleness_seconds: f64,
    /// Why execution admission is closed, when it is.
    pub not_ready_reason: Option<String>,
    /// The shared projection's cursor (`null`: never applied).
    pub projection_cursor: Option<i64>,
    /// Whether execution admission is open (the projection is fresh enough).
    pub ready: bool,
    /// Refusals per rule since this replica started.
    #[schema(value_type = BTreeMap<String, u64>)]
    pub refusals_total: BTreeMap<RefusalRule, u64>,
    /// Cardinality gauges.
    #[serde(serialize_with = "keys_sorted")]
    pub resources: ResourceSnapshot,
    /// Seconds since `last_applied_at` (`null`: never applied).
    pub staleness_seconds: Option<f64>,
    /// Why the shared state row could not be read, when it could not.
    pub storage_error: Option<String>,
    /// This replica's latest synchronization steps, when they failed for a reason other than
    /// a refusal (provider unreachable or answering an error, storage failing): `message`,
    /// `since`, `last_at`, `count` (failed steps in a row); `null` once a step succeeded.
    /// Shows a provider outage long before staleness closes readiness.
    #[serde(serialize_with = "keys_sorted")]
    pub sync_failure: Option<tenantry_engine::SyncFailure>,
}

/// Serializes `value` with its keys in alphabetical order (through a JSON value), as the
/// status document has always sent its nested objects.
fn keys_sorted<T: Serialize, S: serde::Serializer>(value: &T, to: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(to)
}

/// The status document of `GET /v1/directory/status`; also sets the
/// `tenantry_directory_staleness_seconds` gauge and the `tenantry_directory_refusals_total`
/// and `tenantry_directory_capacity_refusals_total` counters.
///
/// `last_refusal` is the latest provider answer a projection rule refused on this replica
/// (`rule`, `workspace`, `message`, `since`, `last_at`, `count`, `resolved_at`; `null` when
/// none): while it is unresolved the whole projection waits, not only the named workspace.
pub async fn status(handle: Option<&DirectoryHandle>) -> DirectoryStatus {
    let Some(handle) = handle else {
        return DirectoryStatus::NotConfigured(DirectoryNotConfigured {
            configured: false,
            cursor: None,
            message: "no directory provider is configured (set directory_url)",
            ready: None,
            staleness_seconds: None,
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
    for (limit, count) in handle.projector.capacity_refusals() {
        crate::metrics::set_directory_capacity_refusals(limit.as_str(), count);
    }
    DirectoryStatus::Configured(Box::new(DirectoryProjectionStatus {
        configured: true,
        cursor: handle.projector.consumer_cursor(),
        instance_uuid: config.instance.as_str().to_owned(),
        last_applied_at,
        last_refusal: refusals.last,
        max_staleness_seconds: config.max_staleness.as_secs_f64(),
        not_ready_reason: readiness.as_ref().err().map(ToString::to_string),
        projection_cursor: shared_cursor,
        ready: readiness.is_ok(),
        refusals_total: refusals.total_by_rule,
        resources: handle.projector.resource_snapshot(),
        staleness_seconds: staleness,
        storage_error: state_error,
        sync_failure: handle.projector.sync_failure(),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The typed answer is sent byte for byte as the `json!` document it replaced (keys sorted
    /// at every level).
    #[test]
    fn status_answers_keep_their_wire_format() {
        let not_configured = DirectoryStatus::NotConfigured(DirectoryNotConfigured {
            configured: false,
            cursor: None,
            message: "no directory provider is configured (set directory_url)",
            ready: None,
            staleness_seconds: None,
        });
        let before = json!({
            "configured": false,
            "ready": null,
            "cursor": null,
            "staleness_seconds": null,
            "message": "no directory provider is configured (set directory_url)"
        });
        assert_eq!(
            serde_json::to_string(&not_configured).unwrap(),
            before.to_string()
        );

        let at = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap();
        let rule = RefusalRule::ALL[0];
        let refusal = Refusal {
            rule,
            workspace: None,
            message: "refused".to_owned(),
            since: at,
            last_at: at,
            count: 2,
            resolved_at: None,
        };
        let resources = ResourceSnapshot::default();
        let totals = BTreeMap::from([(rule, 2u64)]);
        let configured = DirectoryStatus::Configured(Box::new(DirectoryProjectionStatus {
            configured: true,
            cursor: Some(7),
            instance_uuid: "inst-1".to_owned(),
            last_applied_at: Some(at),
            last_refusal: Some(refusal.clone()),
            max_staleness_seconds: 30.0,
            not_ready_reason: Some("stale".to_owned()),
            projection_cursor: Some(6),
            ready: false,
            refusals_total: totals.clone(),
            resources,
            staleness_seconds: Some(1.5),
            storage_error: None,
            sync_failure: None,
        }));
        let before = json!({
            "configured": true,
            "instance_uuid": "inst-1",
            "ready": false,
            "not_ready_reason": "stale",
            "cursor": 7,
            "projection_cursor": 6,
            "last_applied_at": at,
            "staleness_seconds": 1.5,
            "max_staleness_seconds": 30.0,
            "resources": resources,
            "last_refusal": Some(refusal),
            "refusals_total": totals,
            "storage_error": Option::<String>::None,
            "sync_failure": Option::<String>::None,
        });
        assert_eq!(
            serde_json::to_string(&configured).unwrap(),
            before.to_string()
        );
    }
}
