//! Fence administration as a use case of the scoped-writes runtime: list the records of every
//! binding (raw, or as the operator's [`FenceView`], or counted per kind for a gauge), clear
//! one after reconciliation, and the idempotent clear of the admin API. The admin API and the
//! CLI only parse, call these and render.
//!
//! A clear takes the same per-(binding, scope) lock as the writers of the runtime it runs on,
//! so in one process it can never interleave with a dispatch in flight; it then reads the
//! stored record and swaps it for a JSON null tombstone by compare-and-set. Across processes
//! the record itself decides, on the store's (the database's) clock: an intent whose own
//! expiry is ahead is refused ([`tenantry_fence::clear_refusal`]), because its dispatch may
//! still be in flight elsewhere, whatever this process's settings or clock.
//!
//! Idempotent clears keep a receipt in host storage beside the fence, under
//! `ke.fence-clear.v1.` + SHA-256 hex of the idempotency key, in the cleared binding:
//! `{"fingerprint", "binding", "key", "cleared", "reason", "cleared_at_ms"}`. The same key
//! with the same request replays the receipt; with another request it is refused. Receipts are
//! never fence records (their prefix differs) and double as the audit trail of clears.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tenantry_fence::{
    Binding, CLEAR_RECEIPT_PREFIX, ClearRefused, FENCE_KEY_PREFIX, FenceKey, FenceMarker,
    RecordKind, RecordRead, ScopeIdentity, clear_receipt_key,
};
use tenantry_kernel::fingerprint::fingerprint_json;
use tenantry_ports::host_storage::{HostStorage, HostStorageBindings, HostStorageError};

use super::{FenceConfig, FenceEntry, ScopedWrites, duration_ms, locks};

/// Which record to clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClearTarget {
    /// The record of a scope identity.
    Scope(ScopeIdentity),
    /// A record by key, for the installation fence or a record whose scope is unknown.
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClearOutcome {
    /// Installation binding.
    pub binding: String,
    /// The fence key.
    pub key: String,
    /// Whether a record was there and is now cleared (false: nothing was fenced, nothing
    /// written).
    pub cleared: bool,
}

/// An idempotent clear's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClearReceipt {
    /// What the (first) clear did.
    pub outcome: ClearOutcome,
    /// Whether this answer replays an earlier request with the same idempotency key.
    pub replayed: bool,
}

/// Why listing or clearing fences failed. Nothing was cleared unless said otherwise.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FenceAdminError {
    /// Host storage failed; retry after it recovers.
    #[error("host storage failed: {0}")]
    Storage(#[from] HostStorageError),
    /// The record may not be cleared yet (a write-ahead intent whose dispatch may be in
    /// flight).
    #[error("fence not cleared: {0}")]
    Refused(#[from] ClearRefused),
    /// The record changed between reading and clearing it (another process wrote it); list
    /// the fences again and retry.
    #[error(
        "fence {key} of installation {binding} changed while it was being cleared; list the fences again and retry"
    )]
    Changed {
        /// Installation binding.
        binding: Binding,
        /// The fence key.
        key: FenceKey,
    },
    /// The idempotency key was used before with a different request.
    #[error(
        "idempotency key {key:?} was already used for a different fence clear; use a new key for a new request"
    )]
    IdempotencyKeyReused {
        /// The reused key.
        key: String,
    },
}

/// One record of one binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingFence {
    /// Installation binding.
    pub binding: Binding,
    /// The record.
    pub entry: FenceEntry,
}

/// `failure_kind` of a [`FenceView`] for a write-ahead intent past its expiry, which is shown
/// and counted as a fence ([`tenantry_fence::kind_at`]).
pub const INTENT_EXPIRED: &str = "intent_expired";

/// One record as operators see it: an item of `GET /v1/fences` and a line of
/// `tenantry fences list`, flattened from a [`BindingFence`] and its marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = Fence))]
pub struct FenceView {
    /// Installation binding.
    pub binding: String,
    /// Fence key in host storage.
    pub key: String,
    /// `fence` (a mutation's outcome is unknown; reconcile, then clear) or `intent` (a write
    /// holds the scope and a dispatch may be in flight; it goes away by itself, and may only
    /// be cleared once its own expiry passed). A dispatched intent past its expiry is a
    /// `fence` (its holder is gone; `failure_kind` `intent_expired`).
    #[cfg_attr(feature = "openapi", schema(value_type = String))]
    pub kind: RecordKind,
    /// Scope identity, when the marker names one (`null` for the installation scope or an
    /// unreadable marker).
    pub scope: Option<String>,
    /// Whether this is the installation-wide fence (blocks every scope of the binding).
    pub installation: bool,
    /// Why the scope was fenced (the mutation's label), when the marker is readable.
    pub reason: Option<String>,
    /// The failure that fenced the scope (`outcome_unknown`, `panicked`, `reported`, ...),
    /// when recorded; `intent_expired` for an intent past its expiry.
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

impl From<BindingFence> for FenceView {
    fn from(listed: BindingFence) -> Self {
        let at = |ms: Option<i64>| ms.and_then(|ms| Utc.timestamp_millis_opt(ms).single());
        let marker = listed.entry.marker.as_ref();
        let failure = marker.and_then(|m| m.failure.as_ref());
        // A stored intent listed as a fence lapsed: its holder is gone past its expiry.
        let lapsed = listed.entry.kind == RecordKind::Fence
            && failure.is_none()
            && marker.is_some_and(|m| m.kind == RecordKind::Intent);
        Self {
            binding: listed.binding.to_string(),
            installation: listed.entry.key.is_installation(),
            key: listed.entry.key.to_string(),
            kind: listed.entry.kind,
            scope: marker.and_then(|m| m.scope.clone()),
            reason: marker.map(|m| m.reason.clone()),
            failure_kind: failure
                .map(|x| x.kind.clone())
                .or_else(|| lapsed.then(|| INTENT_EXPIRED.to_owned())),
            failure_detail: failure.map(|x| x.detail.clone()).or_else(|| {
                lapsed.then(|| {
                    "the write-ahead intent's holder is gone past its expiry; the outcome of its \
                     dispatch is unknown: reconcile the scope, then clear"
                        .to_owned()
                })
            }),
            owner: marker.and_then(|m| m.owner.clone()),
            fenced_at: at(marker.and_then(|m| m.fenced_at_ms)),
            expires_at: at(marker.and_then(|m| m.expires_at_ms)),
            persisted: listed.entry.persisted,
        }
    }
}

impl<S: HostStorage + HostStorageBindings + ?Sized + 'static> ScopedWrites<S> {
    /// A runtime of its own over `storage`, for a process that administers fences and writes
    /// nothing else (the CLI): the system clock (records are judged on the database's
    /// clock all the same); `dispatch_deadline` (the fence dispatch deadline of the service
    /// whose fences these are) only ages intents written without an expiry.
    /// A service administers fences through its one runtime instead, so a clear takes the
    /// same scope locks as its writers.
    pub fn for_fence_admin(storage: Arc<S>, dispatch_deadline: Duration) -> Self {
        Self::with_config(
            storage,
            Arc::new(tenantry_ports::clock::SystemClock),
            FenceConfig::with_deadline(dispatch_deadline),
        )
    }

    /// [`Self::list_all_fences`] as operators see it ([`FenceView`]), same order.
    ///
    /// # Errors
    /// [`FenceAdminError::Storage`] when a listing fails (no partial answer is given).
    pub async fn fence_views(
        &self,
        binding: Option<&Binding>,
    ) -> Result<Vec<FenceView>, FenceAdminError> {
        let listed = self.list_all_fences(binding).await?;
        Ok(listed.into_iter().map(FenceView::from).collect())
    }

    /// How many records are active across all bindings, per kind (for the
    /// `tenantry_fences_active{kind}` gauge); both kinds are always present.
    ///
    /// # Errors
    /// [`FenceAdminError::Storage`] when a listing fails.
    ///
    /// Storage that reads records across bindings at once
    /// ([`HostStorageBindings::records_with_key_prefix`]) is read with that one call; other
    /// storage is listed binding by binding as [`Self::list_all_fences`] does. Both count the
    /// same records: stored non-null fence-key records by their kind (undecodable ones as
    /// fences), and this process's fences as fences.
    pub async fn count_fences(&self) -> Result<BTreeMap<RecordKind, u64>, FenceAdminError> {
        let mut counts = BTreeMap::from([(RecordKind::Fence, 0), (RecordKind::Intent, 0)]);
        let Some(records) = self
            .storage()
            .records_with_key_prefix(FENCE_KEY_PREFIX)
            .await?
        else {
            for listed in self.list_all_fences(None).await? {
                *counts.entry(listed.entry.kind).or_default() += 1;
            }
            return Ok(counts);
        };
        let now_ms = self.read_store_clock().await?;
        let mut kinds: BTreeMap<(Binding, FenceKey), RecordKind> = BTreeMap::new();
        for record in records {
            let Some(key) = FenceKey::from_storage_key(&record.key) else {
                continue;
            };
            let read = match record.value {
                Some(value) => RecordRead::Value(value),
                None => RecordRead::Unreadable,
            };
            if !tenantry_fence::record_is_fence(&read) {
                continue;
            }
            let kind = match &read {
                RecordRead::Value(value) => {
                    // An intent past its expiry is a fence (its holder is gone).
                    FenceMarker::from_value(value)
                        .map_or(RecordKind::Fence, |m| tenantry_fence::kind_at(&m, now_ms))
                }
                RecordRead::Unreadable => RecordKind::Fence,
            };
            kinds.insert((record.binding, key), kind);
        }
        {
            let state = self.inner.shared.state();
            for binding in state.fences.bindings() {
                for (key, _persisted) in state.fences.fenced_keys(&binding) {
                    // Fenced here even if the stored record is still this process's intent.
                    kinds.insert((binding.clone(), key), RecordKind::Fence);
                }
            }
        }
        for kind in kinds.into_values() {
            *counts.entry(kind).or_default() += 1;
        }
        Ok(counts)
    }

    /// Every record (fence or intent) of `binding`, or of every binding that holds a fence
    /// key when `None`, ordered by binding then key, plus this process's unpersisted fences.
    ///
    /// # Errors
    /// [`FenceAdminError::Storage`] when a listing fails (no partial answer is given).
    pub async fn list_all_fences(
        &self,
        binding: Option<&Binding>,
    ) -> Result<Vec<BindingFence>, FenceAdminError> {
        let bindings = match binding {
            Some(b) => vec![b.clone()],
            None => {
                let mut bindings = self
                    .storage()
                    .bindings_with_key_prefix(FENCE_KEY_PREFIX)
                    .await?;
                for cached in self.inner.shared.state().fences.bindings() {
                    if !bindings.contains(&cached) {
                        bindings.push(cached);
                    }
                }
                bindings.sort();
                bindings
            }
        };
        let mut all = Vec::new();
        for binding in bindings {
            for entry in self.list_fences(&binding).await? {
                all.push(BindingFence {
                    binding: binding.clone(),
                    entry,
                });
            }
        }
        Ok(all)
    }

    /// Clears the record `target` of `binding` after reconciliation, logging `reason`: under
    /// the scope's lock, the stored record is swapped for a JSON null tombstone (by
    /// compare-and-set) and this process's fence is dropped. When nothing is there, nothing is
    /// written and `cleared` is false. Call it outside any run of the same scope (it waits for
    /// the scope's lock).
    ///
    /// # Errors
    /// [`FenceAdminError::Refused`] for an intent whose own expiry is ahead on the store's
    /// clock (the error says when it can be cleared),
    /// [`FenceAdminError::Changed`] when another process rewrote the record meanwhile,
    /// [`FenceAdminError::Storage`] when host storage fails (the record then stays).
    pub async fn clear(
        &self,
        binding: &Binding,
        target: &ClearTarget,
        reason: &str,
    ) -> Result<ClearOutcome, FenceAdminError> {
        let key = target.key();
        let guard = locks::acquire(&self.inner.shared, &(binding.clone(), key.clone())).await;
        let storage = self.storage();
        let stored = match storage.get(binding, key.as_str()).await {
            Ok(value) => value.map(Ok),
            Err(HostStorageError::CorruptValue { .. }) => Some(Err(())),
            Err(error) => return Err(error.into()),
        };
        let cleared = match stored {
            None | Some(Ok(Value::Null)) => self.inner.shared.state().fences.clear(binding, &key),
            Some(Ok(value)) => {
                if let Some(marker) = FenceMarker::from_value(&value) {
                    tenantry_fence::clear_refusal(
                        &marker,
                        self.read_store_clock().await?,
                        duration_ms(self.inner.config.dispatch_deadline),
                    )?;
                }
                if !storage
                    .compare_and_set(binding, key.as_str(), Some(&value), &Value::Null)
                    .await?
                {
                    return Err(FenceAdminError::Changed {
                        binding: binding.clone(),
                        key,
                    });
                }
                self.inner.shared.state().fences.clear(binding, &key);
                true
            }
            Some(Err(())) => {
                // Undecodable: no value to compare with; the scope lock is held.
                storage.set(binding, key.as_str(), &Value::Null).await?;
                self.inner.shared.state().fences.clear(binding, &key);
                true
            }
        };
        drop(guard);
        if cleared {
            self.inner.metrics.record_clear();
            tracing::warn!(%binding, %key, reason, owner = %self.inner.config.owner, "fence cleared on operator request");
        }
        Ok(ClearOutcome {
            binding: binding.to_string(),
            key: key.to_string(),
            cleared,
        })
    }

    /// [`Self::clear`] under `idempotency_key`: a request already answered under that key is
    /// replayed from its receipt (nothing cleared again); a different request under it is
    /// refused.
    ///
    /// # Errors
    /// [`FenceAdminError::IdempotencyKeyReused`], or those of [`Self::clear`].
    pub async fn clear_idempotent(
        &self,
        binding: &Binding,
        target: &ClearTarget,
        reason: &str,
        idempotency_key: &str,
    ) -> Result<ClearReceipt, FenceAdminError> {
        let fingerprint = fingerprint_json(&json!({
            "binding": binding.as_str(),
            "scope": match target { ClearTarget::Scope(s) => s.as_object(), ClearTarget::Key(_) => None },
            "key": match target { ClearTarget::Key(k) => Some(k.as_str()), ClearTarget::Scope(_) => None },
            "reason": reason,
        }))
        .as_str()
        .to_owned();
        let receipt_key = clear_receipt_key(idempotency_key);
        let storage = self.storage();
        for holder in storage.bindings_with_key_prefix(&receipt_key).await? {
            if let Some(found) = storage.get(&holder, &receipt_key).await?
                && !found.is_null()
            {
                return replay(&found, &fingerprint, idempotency_key);
            }
        }
        let outcome = self.clear(binding, target, reason).await?;
        let receipt = json!({
            "fingerprint": fingerprint,
            "binding": outcome.binding,
            "key": outcome.key,
            "cleared": outcome.cleared,
            "reason": reason,
            "cleared_at_ms": self.stamp_ms(),
        });
        if storage
            .compare_and_set(binding, &receipt_key, None, &receipt)
            .await?
        {
            return Ok(ClearReceipt {
                outcome,
                replayed: false,
            });
        }
        // A concurrent request with the same key wrote its receipt first.
        match storage.get(binding, &receipt_key).await? {
            Some(found) if !found.is_null() => replay(&found, &fingerprint, idempotency_key),
            _ => Ok(ClearReceipt {
                outcome,
                replayed: false,
            }),
        }
    }
}

fn replay(
    found: &Value,
    fingerprint: &str,
    idempotency_key: &str,
) -> Result<ClearReceipt, FenceAdminError> {
    #[derive(Deserialize)]
    struct Stored {
        fingerprint: String,
        binding: String,
        key: String,
        cleared: bool,
    }
    let stored: Stored = serde_json::from_value(found.clone()).map_err(|e| {
        HostStorageError::corrupt_value(CLEAR_RECEIPT_PREFIX, e.to_string()).with_source(e)
    })?;
    if stored.fingerprint != fingerprint {
        return Err(FenceAdminError::IdempotencyKeyReused {
            key: idempotency_key.to_owned(),
        });
    }
    Ok(ClearReceipt {
        outcome: ClearOutcome {
            binding: stored.binding,
            key: stored.key,
            cleared: stored.cleared,
        },
        replayed: true,
    })
}
