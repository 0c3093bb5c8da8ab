//! Operator view of reconciliation fences across installation bindings: list them, clear one.
//!
//! A thin presentation layer over the engine's fence administration
//! (`tenantry_engine::scoped_writes::admin`), which owns the rules and takes the scope locks.
//! [`FenceAdmin`] wraps the process's one `ScopedWrites` runtime: `tenantry serve` builds it
//! once and shares it between the admin API and in-process writers; the CLI builds one for its
//! own (short-lived) process. Clearing is the operator's way out of a fence *after*
//! reconciling the scope with the remote: it writes the JSON null tombstone and logs the reason.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;
pub use tenantry_engine::scoped_writes::admin::{
    ClearOutcome, ClearReceipt, ClearTarget, FenceAdminError,
};
use tenantry_engine::scoped_writes::{FenceConfig, ScopedWrites};
use tenantry_fence::{Binding, RecordKind};
use tenantry_ports::clock::SystemClock;
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings};

/// One record as shown by `GET /v1/fences` and `tenantry fences list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FenceView {
    /// Installation binding.
    pub binding: String,
    /// Fence key in host storage.
    pub key: String,
    /// `fence` (a mutation's outcome is unknown; reconcile, then clear) or `intent` (a write
    /// holds the scope and a dispatch may be in flight; it goes away by itself, and may only
    /// be cleared once older than the dispatch deadline).
    pub kind: RecordKind,
    /// Scope identity, when the marker names one (`null` for the installation scope or an
    /// unreadable marker).
    pub scope: Option<String>,
    /// Whether this is the installation-wide fence (blocks every scope of the binding).
    pub installation: bool,
    /// Why the scope was fenced (the mutation's label), when the marker is readable.
    pub reason: Option<String>,
    /// The failure that fenced the scope (`outcome_unknown`, `panicked`, `reported`, ...),
    /// when recorded.
    pub failure_kind: Option<String>,
    /// The failure's error text, when recorded.
    pub failure_detail: Option<String>,
    /// The process holding an intent.
    pub owner: Option<String>,
    /// When the record was written, when recorded.
    pub fenced_at: Option<DateTime<Utc>>,
    /// When an intent's claim lapses (it then counts as a fence).
    pub expires_at: Option<DateTime<Utc>>,
    /// Whether a record is persisted (false: set in this process only).
    pub persisted: bool,
}

/// Lists and clears fences through the process's scoped-writes runtime over host storage `S`.
pub struct FenceAdmin<S: ?Sized> {
    writes: ScopedWrites<S>,
}

impl<S: ?Sized> Clone for FenceAdmin<S> {
    fn clone(&self) -> Self {
        Self {
            writes: self.writes.clone(),
        }
    }
}

impl<S: ?Sized> std::fmt::Debug for FenceAdmin<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FenceAdmin").finish_non_exhaustive()
    }
}

fn at(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single())
}

impl<S: HostStorage + HostStorageBindings + ?Sized + 'static> FenceAdmin<S> {
    /// Fence administration through `writes`, the process's one scoped-writes runtime (so a
    /// clear takes the same scope locks as the process's writers).
    pub fn new(writes: ScopedWrites<S>) -> Self {
        Self { writes }
    }

    /// A runtime of its own over `storage` whose intents may be cleared once older than
    /// `dispatch_deadline`: for a process that writes nothing else (the CLI).
    pub fn standalone(storage: Arc<S>, dispatch_deadline: Duration) -> Self {
        Self::new(ScopedWrites::with_config(
            storage,
            Arc::new(SystemClock),
            FenceConfig::with_deadline(dispatch_deadline),
        ))
    }

    /// The runtime behind this view.
    pub fn writes(&self) -> &ScopedWrites<S> {
        &self.writes
    }

    /// Every record of `binding`, or of every binding that holds a fence key when `None`,
    /// ordered by binding then key.
    ///
    /// # Errors
    /// [`FenceAdminError::Storage`] when a listing fails (no partial answer is given).
    pub async fn list(&self, binding: Option<&Binding>) -> Result<Vec<FenceView>, FenceAdminError> {
        let listed = self.writes.list_all_fences(binding).await?;
        Ok(listed
            .into_iter()
            .map(|f| {
                let marker = f.entry.marker.as_ref();
                let failure = marker.and_then(|m| m.failure.as_ref());
                FenceView {
                    binding: f.binding.to_string(),
                    installation: f.entry.key.is_installation(),
                    key: f.entry.key.to_string(),
                    kind: f.entry.kind,
                    scope: marker.and_then(|m| m.scope.clone()),
                    reason: marker.map(|m| m.reason.clone()),
                    failure_kind: failure.map(|x| x.kind.clone()),
                    failure_detail: failure.map(|x| x.detail.clone()),
                    owner: marker.and_then(|m| m.owner.clone()),
                    fenced_at: at(marker.and_then(|m| m.fenced_at_ms)),
                    expires_at: at(marker.and_then(|m| m.expires_at_ms)),
                    persisted: f.entry.persisted,
                }
            })
            .collect())
    }

    /// Clears the record `target` of `binding` after reconciliation, logging `reason`, under
    /// the scope's lock. When nothing is there, nothing is written and `cleared` is false.
    ///
    /// # Errors
    /// [`FenceAdminError`]; the record then stays.
    pub async fn clear(
        &self,
        binding: &Binding,
        target: &ClearTarget,
        reason: &str,
    ) -> Result<ClearOutcome, FenceAdminError> {
        self.writes.clear(binding, target, reason).await
    }

    /// [`Self::clear`] under an idempotency key (the admin API).
    ///
    /// # Errors
    /// [`FenceAdminError::IdempotencyKeyReused`] or those of [`Self::clear`].
    pub async fn clear_idempotent(
        &self,
        binding: &Binding,
        target: &ClearTarget,
        reason: &str,
        idempotency_key: &str,
    ) -> Result<ClearReceipt, FenceAdminError> {
        self.writes
            .clear_idempotent(binding, target, reason, idempotency_key)
            .await
    }

    /// How many records are active across all bindings, per kind (for the
    /// `tenantry_fences_active{kind}` gauge); both kinds are always present.
    ///
    /// # Errors
    /// [`FenceAdminError::Storage`] when a listing fails.
    pub async fn count(&self) -> Result<BTreeMap<RecordKind, u64>, FenceAdminError> {
        let mut counts = BTreeMap::from([(RecordKind::Fence, 0), (RecordKind::Intent, 0)]);
        for view in self.list(None).await? {
            *counts.entry(view.kind).or_default() += 1;
        }
        Ok(counts)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tenantry_fence::{FenceMarker, ScopeIdentity};
    use tenantry_ports::host_storage::testing::InMemoryHostStorage;

    use super::*;

    fn binding(s: &str) -> Binding {
        Binding::parse(s).unwrap()
    }

    #[tokio::test]
    async fn fences_are_listed_across_bindings_and_cleared_with_a_tombstone() {
        let storage = Arc::new(InMemoryHostStorage::new());
        let scope = ScopeIdentity::object("kb-1");
        let marker = FenceMarker::new(&scope, "lost ACK on upload", 1_700_000_000_000);
        storage
            .set(
                &binding("inst-1"),
                scope.fence_key().as_str(),
                &marker.to_value(),
            )
            .await
            .unwrap();
        storage
            .set(
                &binding("inst-2"),
                "ke.fence.v1.installation",
                &json!({"x": 1}),
            )
            .await
            .unwrap();
        storage
            .set(
                &binding("inst-3"),
                "ke.fence.v1.gone",
                &serde_json::Value::Null,
            )
            .await
            .unwrap();
        let admin = FenceAdmin::standalone(storage.clone(), Duration::from_secs(150));
        let views = admin.list(None).await.unwrap();
        assert_eq!(views.len(), 2, "{views:?}");
        assert_eq!(views[0].binding, "inst-1");
        assert_eq!(views[0].scope.as_deref(), Some("kb-1"));
        assert_eq!(views[0].reason.as_deref(), Some("lost ACK on upload"));
        assert!(views[1].installation);

        let outcome = admin
            .clear(
                &binding("inst-1"),
                &ClearTarget::Scope(scope.clone()),
                "reconciled",
            )
            .await
            .unwrap();
        assert!(outcome.cleared);
        assert_eq!(
            storage
                .get(&binding("inst-1"), scope.fence_key().as_str())
                .await
                .unwrap(),
            Some(serde_json::Value::Null)
        );
        assert_eq!(admin.count().await.unwrap()[&RecordKind::Fence], 1);
        assert_eq!(admin.count().await.unwrap()[&RecordKind::Intent], 0);
    }

    #[tokio::test]
    async fn clearing_an_unfenced_scope_writes_nothing() {
        let storage = Arc::new(InMemoryHostStorage::new());
        let admin = FenceAdmin::standalone(storage.clone(), Duration::from_secs(150));
        let outcome = admin
            .clear(
                &binding("inst-1"),
                &ClearTarget::Scope(ScopeIdentity::object("kb-9")),
                "nothing there",
            )
            .await
            .unwrap();
        assert!(!outcome.cleared);
        assert_eq!(storage.calls().set, 0);
        assert_eq!(storage.calls().cas, 0);
    }
}
