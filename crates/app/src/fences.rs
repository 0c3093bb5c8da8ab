//! Operator view of reconciliation fences across installation bindings: list them, clear one.
//!
//! A thin layer over `tenantry_engine::scoped_writes::ScopedWrites` (which owns the rules) and
//! the host-storage binding listing. Clearing is the operator's way out of a fence *after*
//! reconciling the scope with the remote: it writes the JSON null tombstone and logs the reason.

use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;
use tenantry_engine::scoped_writes::ScopedWrites;
use tenantry_fence::{Binding, FENCE_KEY_PREFIX, FenceKey, ScopeIdentity};
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings, HostStorageError};

/// One fence as shown by `GET /v1/fences` and `tenantry fences list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FenceView {
    /// Installation binding.
    pub binding: String,
    /// Fence key in host storage.
    pub key: String,
    /// Scope identity, when the marker names one (`null` for the installation scope or an
    /// unreadable marker).
    pub scope: Option<String>,
    /// Whether this is the installation-wide fence (blocks every scope of the binding).
    pub installation: bool,
    /// Why the scope was fenced, when the marker is readable.
    pub reason: Option<String>,
    /// When the fence was set, when recorded.
    pub fenced_at: Option<DateTime<Utc>>,
    /// Whether a fence record is persisted (false: set in this process only).
    pub persisted: bool,
}

/// Which fence to clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClearTarget {
    /// The fence of a scope identity (taken under the scope's lock).
    Scope(ScopeIdentity),
    /// A fence by key, for a record whose scope identity is unknown.
    Key(FenceKey),
}

impl ClearTarget {
    /// The fence key this target clears.
    pub fn key(&self) -> FenceKey {
        match self {
            Self::Scope(scope) => scope.fence_key(),
            Self::Key(key) => key.clone(),
        }
    }
}

/// What a clear did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClearOutcome {
    /// Installation binding.
    pub binding: String,
    /// The fence key.
    pub key: String,
    /// Whether a fence was there and is now cleared (false: nothing was fenced, nothing written).
    pub cleared: bool,
}

/// Why listing or clearing fences failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FenceAdminError {
    /// Host storage failed; retry after it recovers.
    #[error("host storage failed: {0}")]
    Storage(#[from] HostStorageError),
    /// The fence state of the binding could not be loaded; nothing was cleared.
    #[error("fence not cleared: {0}")]
    NotCleared(String),
}

/// Lists and clears fences over host storage `S`.
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

impl<S: HostStorage + HostStorageBindings + ?Sized + 'static> FenceAdmin<S> {
    /// Fence administration over `storage`.
    pub fn new(storage: Arc<S>) -> Self {
        Self {
            writes: ScopedWrites::new(storage),
        }
    }

    /// Every fence of `binding`, or of every binding that holds a fence key when `None`,
    /// ordered by binding then key.
    ///
    /// # Errors
    /// [`FenceAdminError::Storage`] when a listing fails (no partial answer is given).
    pub async fn list(&self, binding: Option<&Binding>) -> Result<Vec<FenceView>, FenceAdminError> {
        let bindings = match binding {
            Some(b) => vec![b.clone()],
            None => {
                self.writes
                    .storage()
                    .bindings_with_key_prefix(FENCE_KEY_PREFIX)
                    .await?
            }
        };
        let mut views = Vec::new();
        for binding in bindings {
            for entry in self.writes.list_fences(&binding).await? {
                let marker = entry.marker.as_ref();
                views.push(FenceView {
                    binding: binding.to_string(),
                    installation: entry.key.is_installation(),
                    key: entry.key.to_string(),
                    scope: marker.and_then(|m| m.scope.clone()),
                    reason: marker.map(|m| m.reason.clone()),
                    fenced_at: marker
                        .and_then(|m| m.fenced_at_ms)
                        .and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
                    persisted: entry.persisted,
                });
            }
        }
        Ok(views)
    }

    /// Clears the fence `target` of `binding` after reconciliation, logging `reason`. When
    /// nothing is fenced there, nothing is written and `cleared` is false.
    ///
    /// # Errors
    /// [`FenceAdminError`] when host storage fails; the fence then stays.
    pub async fn clear(
        &self,
        binding: &Binding,
        target: &ClearTarget,
        reason: &str,
    ) -> Result<ClearOutcome, FenceAdminError> {
        let key = target.key();
        let fenced = self
            .writes
            .list_fences(binding)
            .await?
            .into_iter()
            .any(|entry| entry.key == key);
        if fenced {
            tracing::warn!(%binding, %key, reason, "clearing fence on operator request");
            match target {
                ClearTarget::Scope(scope) => self
                    .writes
                    .clear_fence(binding, scope, reason)
                    .await
                    .map_err(|e| FenceAdminError::NotCleared(e.to_string()))?,
                ClearTarget::Key(key) => self.writes.clear_fence_key(binding, key, reason).await?,
            }
            self.writes.settled().await;
        }
        Ok(ClearOutcome {
            binding: binding.to_string(),
            key: key.to_string(),
            cleared: fenced,
        })
    }

    /// How many fences are active across all bindings (for the `tenantry_fences_active` gauge).
    ///
    /// # Errors
    /// [`FenceAdminError::Storage`] when a listing fails.
    pub async fn count(&self) -> Result<u64, FenceAdminError> {
        Ok(self.list(None).await?.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tenantry_fence::FenceMarker;
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
        let admin = FenceAdmin::new(storage.clone());
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
        assert_eq!(admin.count().await.unwrap(), 1);
    }

    #[tokio::test]
    async fn clearing_an_unfenced_scope_writes_nothing() {
        let storage = Arc::new(InMemoryHostStorage::new());
        let admin = FenceAdmin::new(storage.clone());
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
    }
}
