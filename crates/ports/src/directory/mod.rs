//! Directory projection ports: the provider of the signed directory, the projection store (as
//! small role traits), and the hooks run after a projection commits.
//!
//! The rules live in `tenantry_directory`; every store adapter implements an apply as one
//! transaction that holds the instance's state-row lock, selects the rows named by
//! [`LookupKeys`], calls the pure planner (`tenantry_directory::plan`) and upserts what it
//! returns. A refused input ([`ProjectionStoreError::Rejected`]) changes nothing.
//!
//! Feature `testing` adds [`fake`] (a scripted provider, an in-memory store, recording hooks)
//! and [`conformance`] (the projection-store suite, run by
//! [`directory_projection_store_conformance!`](crate::directory_projection_store_conformance)).

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryError, DirectoryEvent,
    DirectoryEventBatch, DirectorySnapshot, InboxReceipt, InstanceUuid, ProjectionState,
    ProjectionTables, WorkspaceUuid,
};

pub use tenantry_directory::LookupKeys;

pub use self::source::{
    ActiveGenerations, AnySnapshotSource, SnapshotReadError, SnapshotSource, join_pages,
};

mod source;

use crate::error::{ErrorSource, StoreError};

/// Why the directory provider gave no usable answer. The signed HTTP client maps transport
/// failures, refusals and signature failures to these; the projector retries all of them on
/// its next sync.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The provider could not be reached or timed out; nothing is known about the answer.
    #[error("directory provider unavailable: {message}; the projector retries with backoff")]
    Unavailable {
        /// What failed (connect, timeout, reset).
        message: String,
        /// The transport's error (e.g. the HTTP client's), if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The provider answered with an error status.
    #[error("directory provider refused the request with status {status}: {message}")]
    Refused {
        /// HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The answer is unsigned, its signature or timestamp is not trusted, or it does not parse
    /// as the expected model: the provider (or something in between) misbehaved.
    #[error("directory provider answer is invalid: {message}")]
    InvalidResponse {
        /// What was wrong.
        message: String,
        /// The verifier's or decoder's error, if any.
        #[source]
        source: Option<ErrorSource>,
    },
    /// The answer's body is larger than the client reads (its capacity limit,
    /// [`CapacityLimit::ResponseBytes`](tenantry_directory::CapacityLimit::ResponseBytes)); the
    /// service's setting `directory_max_response_bytes` raises it.
    #[error(
        "directory provider answer of at least {size} bytes exceeds the {limit}-byte limit; raise the setting directory_max_response_bytes (TENANTRY_DIRECTORY_MAX_RESPONSE_BYTES) or shrink the directory"
    )]
    TooLarge {
        /// Bytes announced or read so far (at least this many).
        size: u64,
        /// The configured limit, bytes.
        limit: u64,
    },
}

impl ProviderError {
    /// [`ProviderError::Unavailable`] with `message` and no source yet.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: None,
        }
    }

    /// [`ProviderError::InvalidResponse`] with `message` and no source yet.
    pub fn invalid_response(message: impl Into<String>) -> Self {
        Self::InvalidResponse {
            message: message.into(),
            source: None,
        }
    }

    /// The same error keeping `error` (the transport's, verifier's or decoder's) as its
    /// [`source`](std::error::Error::source); a [`Refused`](Self::Refused) (an answer, not a
    /// failure) is returned unchanged.
    #[must_use]
    pub fn with_source(mut self, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        match &mut self {
            Self::Unavailable { source, .. } | Self::InvalidResponse { source, .. } => {
                *source = Some(ErrorSource::new(error));
            }
            Self::Refused { .. } | Self::TooLarge { .. } => {}
        }
        self
    }
}

/// The authoritative directory (Directory API v1). Implementations verify signatures and
/// return parsed models.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait DirectoryProvider: Send + Sync {
    /// `GET /v1/instances/{instance}/directory/snapshot`.
    ///
    /// # Errors
    /// [`ProviderError`] when no verified snapshot was obtained.
    async fn fetch_snapshot(
        &self,
        instance: &InstanceUuid,
    ) -> Result<DirectorySnapshot, ProviderError>;

    /// The same snapshot as a [`SnapshotSource`], read back page by page by the apply: a
    /// provider that pages its snapshot keeps the verified pages out of memory (the HTTP
    /// client spools them to a temporary file). By default the joined
    /// [`fetch_snapshot`](Self::fetch_snapshot) as one page.
    ///
    /// # Errors
    /// As [`fetch_snapshot`](Self::fetch_snapshot).
    async fn fetch_snapshot_source(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Box<dyn SnapshotSource>, ProviderError> {
        Ok(Box::new(self.fetch_snapshot(instance).await?))
    }

    /// `GET /v1/instances/{instance}/directory/events?after={after}&limit={limit}`.
    ///
    /// # Errors
    /// [`ProviderError`] when no verified batch was obtained.
    async fn fetch_events(
        &self,
        instance: &InstanceUuid,
        after: i64,
        limit: u32,
    ) -> Result<DirectoryEventBatch, ProviderError>;

    /// `POST /v1/instances/{instance}/directory/workspaces` with `{workspace_uuids}` (sorted).
    ///
    /// # Errors
    /// [`ProviderError`] when no verified delta was obtained.
    async fn fetch_workspaces(
        &self,
        instance: &InstanceUuid,
        workspace_uuids: &[WorkspaceUuid],
    ) -> Result<DirectoryDelta, ProviderError>;
}

/// Why a projection store call failed.
///
/// A rule's refusal ([`Rejected`](Self::Rejected)) or the storage failure every storage port
/// shares ([`Storage`](Self::Storage), a [`StoreError`]). `source()` of a `Storage` error is
/// the driver's error itself (as for a [`StoreError`]), not the wrapped `StoreError`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProjectionStoreError {
    /// A projection rule refused the input; the transaction rolled back and nothing changed.
    Rejected(DirectoryError),
    /// The database failed (connection, lock timeout, deadlock, schema not migrated, a row
    /// that does not decode); the transaction rolled back.
    Storage(StoreError),
}

impl std::fmt::Display for ProjectionStoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Rejected(refusal) => std::fmt::Display::fmt(refusal, f),
            Self::Storage(StoreError::Unavailable { message, .. }) => write!(
                f,
                "directory projection storage failed: {message}; the projector retries"
            ),
            Self::Storage(error) if error.is_transient() => write!(
                f,
                "directory projection storage failed: {error}; the projector retries"
            ),
            Self::Storage(error) => write!(f, "directory projection storage failed: {error}"),
        }
    }
}

impl std::error::Error for ProjectionStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            // As `#[error(transparent)]` did: the refusal's own source.
            Self::Rejected(refusal) => std::error::Error::source(refusal),
            Self::Storage(error) => std::error::Error::source(error),
        }
    }
}

impl From<DirectoryError> for ProjectionStoreError {
    fn from(refusal: DirectoryError) -> Self {
        Self::Rejected(refusal)
    }
}

impl From<StoreError> for ProjectionStoreError {
    fn from(error: StoreError) -> Self {
        Self::Storage(error)
    }
}

impl ProjectionStoreError {
    /// [`ProjectionStoreError::Storage`] with a [`StoreError::Unavailable`] of `message` and no
    /// source yet.
    pub fn storage(message: impl Into<String>) -> Self {
        Self::Storage(StoreError::unavailable(message))
    }

    /// The same error keeping `error` (the driver's) as its
    /// [`source`](std::error::Error::source); a [`Rejected`](Self::Rejected) is returned
    /// unchanged (its source is the rule's refusal).
    #[must_use]
    pub fn with_source(self, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        match self {
            Self::Storage(store) => Self::Storage(store.with_source(error)),
            rejected @ Self::Rejected(_) => rejected,
        }
    }

    /// True when another replica's newer projection superseded a snapshot.
    pub fn is_superseded(&self) -> bool {
        matches!(self, Self::Rejected(e) if e.is_superseded())
    }
}

/// Applies full snapshots.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait SnapshotApplier: Send + Sync {
    /// Applies `snapshot` (and receipts of `events`) in one transaction:
    /// `tenantry_directory::plan::plan_snapshot` under the state-row lock, the row inserted
    /// first when missing.
    ///
    /// # Errors
    /// [`ProjectionStoreError::Rejected`] (nothing changed) or [`ProjectionStoreError::Storage`].
    async fn apply_snapshot(
        &self,
        ctx: &ApplyContext,
        snapshot: &DirectorySnapshot,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError>;

    /// Applies the snapshot of `source` like [`apply_snapshot`](Self::apply_snapshot), in one
    /// transaction. A store that applies page by page reads the pages one at a time
    /// (`tenantry_directory::plan::PagedSnapshotApply`); by default the pages are joined and
    /// applied whole.
    ///
    /// # Errors
    /// As [`apply_snapshot`](Self::apply_snapshot); a page that cannot be read back is
    /// [`ProjectionStoreError::Storage`] (nothing changed).
    async fn apply_snapshot_source(
        &self,
        ctx: &ApplyContext,
        source: &AnySnapshotSource,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        let snapshot = join_pages(source, ctx.now)
            .map_err(|e| ProjectionStoreError::Storage(StoreError::unavailable(e.to_string())))?;
        self.apply_snapshot(ctx, &snapshot, events).await
    }
}

/// Applies per-workspace deltas of an event batch.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait DeltaApplier: Send + Sync {
    /// Applies `delta` for `batch` in one transaction (`plan_delta`).
    ///
    /// # Errors
    /// [`ProjectionStoreError::Rejected`] (nothing changed) or [`ProjectionStoreError::Storage`].
    async fn apply_delta(
        &self,
        ctx: &ApplyContext,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
}

/// Applies batches without directory changes (receipts and cursor only).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait EventBatchApplier: Send + Sync {
    /// Applies `batch` in one transaction (`plan_event_batch`).
    ///
    /// # Errors
    /// [`ProjectionStoreError::Rejected`] (nothing changed) or [`ProjectionStoreError::Storage`].
    async fn apply_event_batch(
        &self,
        ctx: &ApplyContext,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
}

/// Confirms freshness after an empty batch.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait FreshnessToucher: Send + Sync {
    /// Refreshes `last_applied_at` / `lease_expires_at` when the shared cursor equals
    /// `replica_cursor` (`plan_touch`).
    ///
    /// # Errors
    /// [`ProjectionStoreError::Rejected`] (nothing changed) or [`ProjectionStoreError::Storage`].
    async fn touch_freshness(
        &self,
        ctx: &ApplyContext,
        replica_cursor: i64,
    ) -> Result<ApplyOutcome, ProjectionStoreError>;
}

/// Reads the shared projection state (directory status, health).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ProjectionStateReader: Send + Sync {
    /// The state row of `instance`, `None` before the first snapshot.
    ///
    /// # Errors
    /// [`ProjectionStoreError::Storage`].
    async fn projection_state(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Option<ProjectionState>, ProjectionStoreError>;
}

/// Reads every projected table at once (accounts, workspaces, memberships, executions, state
/// rows, inbox receipts): the read port for checks that compare a whole projection with the
/// provider's snapshot (`tenantry-demo demo`'s ground-truth check, the conformance suite). Not a
/// role of [`DirectoryProjectionStore`]: the projector never needs it, and it reads every row.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait ProjectionTablesReader: Send + Sync {
    /// Every row of every projected table, keyed as in [`ProjectionTables`].
    ///
    /// # Errors
    /// [`ProjectionStoreError::Storage`] when the store cannot be read (any kind);
    /// [`ProjectionStoreError::Storage`] holding [`StoreError::Corrupt`] when a stored row does not decode.
    async fn read_tables(&self) -> Result<ProjectionTables, ProjectionStoreError>;

    /// How many rows the projected tables hold (accounts, workspaces, memberships, across
    /// instances, local rows included): the console's directory counts. SQL adapters answer
    /// with one `COUNT` per table; the default counts a [`read_tables`](Self::read_tables)
    /// dump (fine for in-memory stores, too slow for a database).
    ///
    /// # Errors
    /// [`ProjectionStoreError::Storage`] when the store cannot be read.
    async fn count_rows(&self) -> Result<ProjectionCounts, ProjectionStoreError> {
        let tables = self.read_tables().await?;
        Ok(ProjectionCounts {
            accounts: tables.accounts.len() as u64,
            workspaces: tables.workspaces.len() as u64,
            memberships: tables.memberships.len() as u64,
        })
    }

    /// The `limit` inbox receipts received last (every instance), newest first: the
    /// console's "recent applies". SQL adapters read the `received_at` index (m0011); the
    /// default sorts a [`read_tables`](Self::read_tables) dump.
    ///
    /// # Errors
    /// [`ProjectionStoreError::Storage`] when the store cannot be read or a row does not decode.
    async fn recent_receipts(&self, limit: u32) -> Result<Vec<InboxReceipt>, ProjectionStoreError> {
        let mut receipts: Vec<InboxReceipt> =
            self.read_tables().await?.receipts.into_values().collect();
        receipts
            .sort_by(|a, b| (b.received_at, &b.event_uuid).cmp(&(a.received_at, &a.event_uuid)));
        receipts.truncate(limit as usize);
        Ok(receipts)
    }
}

/// Row counts of the projected tables ([`ProjectionTablesReader::count_rows`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProjectionCounts {
    /// Rows of `tenantry_accounts`.
    pub accounts: u64,
    /// Rows of `tenantry_workspaces`.
    pub workspaces: u64,
    /// Rows of `tenantry_workspace_memberships`.
    pub memberships: u64,
}

/// Every role a directory projector needs from its store.
pub trait DirectoryProjectionStore:
    SnapshotApplier + DeltaApplier + EventBatchApplier + FreshnessToucher + ProjectionStateReader
{
}

impl<T> DirectoryProjectionStore for T where
    T: SnapshotApplier
        + DeltaApplier
        + EventBatchApplier
        + FreshnessToucher
        + ProjectionStateReader
{
}

crate::error::message_error! {
    /// A post-commit hook failed. The projection stays committed; the projector logs this.
    /// Build it with [`HookError::new`], and keep the hook's own error with
    /// [`with_source`](HookError::with_source).
    pub struct HookError;
    display: "directory post-commit hook failed";
    source: " The hook's own error (e.g. its client's), if any."
}

/// Keeps entitlement caches in step with the projected workspaces (runs after commit).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait EntitlementReconciler: Send + Sync {
    /// After a full snapshot: exactly `active` are the instance's active workspaces.
    ///
    /// # Errors
    /// [`HookError`]; logged, never undoes the projection.
    async fn reconcile_active_workspaces(
        &self,
        instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError>;

    /// After a delta: `active` became or stayed active, `inactive` did not (includes
    /// tombstoned workspaces).
    ///
    /// # Errors
    /// [`HookError`]; logged, never undoes the projection.
    async fn update_workspace_activity(
        &self,
        instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
        inactive: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError>;
}

/// Tells local runtimes which execution generations are current so they retire stale ones
/// promptly (runs after commit; call-time database fences remain authoritative).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait RuntimeExecutionPublisher: Send + Sync {
    /// `active_generations`: active workspace → execution generation. `affected`: the
    /// workspaces this update covers (`None` after a full snapshot: all of them).
    ///
    /// # Errors
    /// [`HookError`]; logged, never undoes the projection.
    ///
    /// The lifetimes are named only so that mockall can mock the `Option<&_>` argument
    /// (feature `mocks`); implementations write the signature with elided lifetimes as usual.
    async fn publish_execution_projection<'s, 'i, 'g, 'a>(
        &'s self,
        instance: &'i InstanceUuid,
        active_generations: &'g BTreeMap<WorkspaceUuid, i64>,
        affected: Option<&'a BTreeSet<WorkspaceUuid>>,
    ) -> Result<(), HookError>;
}

/// Hooks that do nothing (a deployment without entitlements or local runtimes).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

#[async_trait]
impl EntitlementReconciler for NoHooks {
    async fn reconcile_active_workspaces(
        &self,
        _instance: &InstanceUuid,
        _active: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError> {
        Ok(())
    }

    async fn update_workspace_activity(
        &self,
        _instance: &InstanceUuid,
        _active: &BTreeSet<WorkspaceUuid>,
        _inactive: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError> {
        Ok(())
    }
}

#[async_trait]
impl RuntimeExecutionPublisher for NoHooks {
    async fn publish_execution_projection(
        &self,
        _instance: &InstanceUuid,
        _active_generations: &BTreeMap<WorkspaceUuid, i64>,
        _affected: Option<&BTreeSet<WorkspaceUuid>>,
    ) -> Result<(), HookError> {
        Ok(())
    }
}

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod fake;
