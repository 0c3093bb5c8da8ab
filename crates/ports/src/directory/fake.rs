//! Test doubles of the directory ports (the fakes).
//!
//! - [`ScriptedProvider`]: answers from queues the test fills, records every call;
//! - [`InMemoryProjectionStore`]: the reference semantics of `tenantry_directory::memory`
//!   behind a mutex, with injectable storage failures;
//! - [`RecordingHooks`]: records post-commit hook calls and fails on demand;
//!
//! The in-memory store implements [`DirectoryFixtureStore`], what the suite of
//! [`conformance`](super::conformance) needs beyond the ports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryEvent, DirectoryEventBatch,
    DirectorySnapshot, InstanceUuid, ProjectionState, ProjectionTables, WorkspaceUuid,
};

use super::conformance::DirectoryFixtureStore;
use crate::clock::{Clock, SystemClock};

use super::{
    DeltaApplier, DirectoryProvider, EntitlementReconciler, EventBatchApplier, FreshnessToucher,
    HookError, ProjectionStateReader, ProjectionStoreError, ProjectionTablesReader, ProviderError,
    RuntimeExecutionPublisher, SnapshotApplier,
};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ----- provider -----

/// One call the [`ScriptedProvider`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderCall {
    /// `fetch_snapshot`.
    Snapshot,
    /// `fetch_events(after, limit)`.
    Events {
        /// `after`.
        after: i64,
        /// `limit`.
        limit: u32,
    },
    /// `fetch_workspaces(uuids)`.
    Workspaces {
        /// The requested uuids, in request order.
        uuids: Vec<WorkspaceUuid>,
    },
}

#[derive(Debug, Default)]
struct Script {
    snapshots: VecDeque<Result<DirectorySnapshot, ProviderError>>,
    events: VecDeque<Result<DirectoryEventBatch, ProviderError>>,
    deltas: VecDeque<Result<DirectoryDelta, ProviderError>>,
    calls: Vec<ProviderCall>,
}

/// A provider answering from queues; an empty queue answers
/// [`ProviderError::Unavailable`]. Clones share the script.
#[derive(Debug, Clone, Default)]
pub struct ScriptedProvider {
    script: Arc<Mutex<Script>>,
}

impl ScriptedProvider {
    /// A provider with empty queues.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues the answer of the next `fetch_snapshot`.
    pub fn push_snapshot(&self, answer: Result<DirectorySnapshot, ProviderError>) {
        lock(&self.script).snapshots.push_back(answer);
    }

    /// Queues the answer of the next `fetch_events`.
    pub fn push_events(&self, answer: Result<DirectoryEventBatch, ProviderError>) {
        lock(&self.script).events.push_back(answer);
    }

    /// Queues the answer of the next `fetch_workspaces`.
    pub fn push_delta(&self, answer: Result<DirectoryDelta, ProviderError>) {
        lock(&self.script).deltas.push_back(answer);
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<ProviderCall> {
        lock(&self.script).calls.clone()
    }
}

fn unscripted(what: &str) -> ProviderError {
    ProviderError::unavailable(format!("no scripted {what} answer"))
}

#[async_trait]
impl DirectoryProvider for ScriptedProvider {
    async fn fetch_snapshot(
        &self,
        _instance: &InstanceUuid,
    ) -> Result<DirectorySnapshot, ProviderError> {
        let mut script = lock(&self.script);
        script.calls.push(ProviderCall::Snapshot);
        script
            .snapshots
            .pop_front()
            .unwrap_or_else(|| Err(unscripted("snapshot")))
    }

    async fn fetch_events(
        &self,
        _instance: &InstanceUuid,
        after: i64,
        limit: u32,
    ) -> Result<DirectoryEventBatch, ProviderError> {
        let mut script = lock(&self.script);
        script.calls.push(ProviderCall::Events { after, limit });
        script
            .events
            .pop_front()
            .unwrap_or_else(|| Err(unscripted("events")))
    }

    async fn fetch_workspaces(
        &self,
        _instance: &InstanceUuid,
        workspace_uuids: &[WorkspaceUuid],
    ) -> Result<DirectoryDelta, ProviderError> {
        let mut script = lock(&self.script);
        script.calls.push(ProviderCall::Workspaces {
            uuids: workspace_uuids.to_vec(),
        });
        script
            .deltas
            .pop_front()
            .unwrap_or_else(|| Err(unscripted("workspaces")))
    }
}

// ----- store -----

#[derive(Debug, Default)]
struct StoreState {
    tables: ProjectionTables,
    failures: VecDeque<String>,
    applies: usize,
}

/// In-memory projection store; clones share the tables (several replicas, one database).
/// Its clock plays the database's: it stamps the `received_at` of the inbox receipts an
/// apply creates, as the SQL stores stamp them with the database's `now` (retention's cut-off
/// must not follow a replica's wall clock, issue 29).
#[derive(Clone)]
pub struct InMemoryProjectionStore {
    state: Arc<Mutex<StoreState>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for InMemoryProjectionStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryProjectionStore")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Default for InMemoryProjectionStore {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl InMemoryProjectionStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose "database clock" is `clock`: new inbox receipts are stamped with
    /// its reading, whatever the apply's [`ApplyContext::now`] says.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }

    /// The next store call fails with [`ProjectionStoreError::Storage`] and changes nothing.
    pub fn fail_next(&self, message: &str) {
        lock(&self.state).failures.push_back(message.to_owned());
    }

    /// A copy of every table.
    pub fn tables(&self) -> ProjectionTables {
        lock(&self.state).tables.clone()
    }

    /// Keeps only the inbox receipts for which `keep` answers true (what a retention run does
    /// to the `directory_projection_inbox` table).
    pub fn retain_receipts(&self, mut keep: impl FnMut(&tenantry_directory::InboxReceipt) -> bool) {
        lock(&self.state)
            .tables
            .receipts
            .retain(|_, receipt| keep(receipt));
    }

    /// How many apply / touch calls reached the store (failed ones included).
    pub fn applies(&self) -> usize {
        lock(&self.state).applies
    }

    /// One apply of `events` (their receipts) to the instance of `ctx`: the receipts it
    /// creates get the store's clock as `received_at`.
    fn run<'e>(
        &self,
        ctx: &ApplyContext,
        events: impl IntoIterator<Item = &'e DirectoryEvent>,
        f: impl FnOnce(
            &mut ProjectionTables,
        ) -> Result<ApplyOutcome, tenantry_directory::DirectoryError>,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        let mut state = lock(&self.state);
        state.applies += 1;
        if let Some(message) = state.failures.pop_front() {
            return Err(ProjectionStoreError::storage(message));
        }
        let new: Vec<_> = events
            .into_iter()
            .map(|event| (ctx.instance.clone(), event.uuid.clone()))
            .filter(|key| !state.tables.receipts.contains_key(key))
            .collect();
        let outcome = f(&mut state.tables).map_err(ProjectionStoreError::Rejected)?;
        let now = self.clock.now();
        let now = chrono::DateTime::from_timestamp_millis(now.timestamp_millis()).unwrap_or(now);
        for key in new {
            if let Some(receipt) = state.tables.receipts.get_mut(&key) {
                receipt.received_at = now;
            }
        }
        Ok(outcome)
    }
}

#[async_trait]
impl SnapshotApplier for InMemoryProjectionStore {
    async fn apply_snapshot(
        &self,
        ctx: &ApplyContext,
        snapshot: &DirectorySnapshot,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.run(ctx, events, |t| t.apply_snapshot(ctx, snapshot, events))
    }
}

#[async_trait]
impl DeltaApplier for InMemoryProjectionStore {
    async fn apply_delta(
        &self,
        ctx: &ApplyContext,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.run(ctx, &batch.events, |t| t.apply_delta(ctx, delta, batch))
    }
}

#[async_trait]
impl EventBatchApplier for InMemoryProjectionStore {
    async fn apply_event_batch(
        &self,
        ctx: &ApplyContext,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.run(ctx, &batch.events, |t| t.apply_event_batch(ctx, batch))
    }
}

#[async_trait]
impl FreshnessToucher for InMemoryProjectionStore {
    async fn touch_freshness(
        &self,
        ctx: &ApplyContext,
        replica_cursor: i64,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.run(ctx, [], |t| t.touch_freshness(ctx, replica_cursor))
    }
}

#[async_trait]
impl ProjectionStateReader for InMemoryProjectionStore {
    async fn projection_state(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Option<ProjectionState>, ProjectionStoreError> {
        Ok(lock(&self.state).tables.states.get(instance).cloned())
    }
}

#[async_trait]
impl ProjectionTablesReader for InMemoryProjectionStore {
    async fn read_tables(&self) -> Result<ProjectionTables, ProjectionStoreError> {
        Ok(self.tables())
    }
}

#[async_trait]
impl DirectoryFixtureStore for InMemoryProjectionStore {
    async fn seed_rows(&self, rows: &ProjectionTables) -> Result<(), ProjectionStoreError> {
        let mut state = lock(&self.state);
        let t = &mut state.tables;
        t.accounts.extend(rows.accounts.clone());
        t.workspaces.extend(rows.workspaces.clone());
        t.memberships.extend(rows.memberships.clone());
        t.executions.extend(rows.executions.clone());
        t.states.extend(rows.states.clone());
        t.receipts.extend(rows.receipts.clone());
        Ok(())
    }
}

// ----- hooks -----

/// One post-commit hook call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookCall {
    /// `reconcile_active_workspaces`.
    Reconcile {
        /// Active workspaces of the snapshot.
        active: BTreeSet<WorkspaceUuid>,
    },
    /// `update_workspace_activity`.
    Activity {
        /// Active returned workspaces.
        active: BTreeSet<WorkspaceUuid>,
        /// Requested workspaces that are not active.
        inactive: BTreeSet<WorkspaceUuid>,
    },
    /// `publish_execution_projection`.
    Publish {
        /// Active workspace → generation.
        active_generations: BTreeMap<WorkspaceUuid, i64>,
        /// Covered workspaces (`None`: all).
        affected: Option<BTreeSet<WorkspaceUuid>>,
    },
}

#[derive(Debug, Default)]
struct HookLog {
    calls: Vec<HookCall>,
    fail: bool,
}

/// Hooks that record their calls; [`RecordingHooks::fail_all`] makes every call fail (after
/// recording it).
#[derive(Debug, Clone, Default)]
pub struct RecordingHooks {
    log: Arc<Mutex<HookLog>>,
}

impl RecordingHooks {
    /// Hooks that succeed.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every later call fails.
    pub fn fail_all(&self) {
        lock(&self.log).fail = true;
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<HookCall> {
        lock(&self.log).calls.clone()
    }

    fn record(&self, call: HookCall) -> Result<(), HookError> {
        let mut log = lock(&self.log);
        log.calls.push(call);
        if log.fail {
            return Err(HookError::new("injected hook failure"));
        }
        Ok(())
    }
}

#[async_trait]
impl EntitlementReconciler for RecordingHooks {
    async fn reconcile_active_workspaces(
        &self,
        _instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError> {
        self.record(HookCall::Reconcile {
            active: active.clone(),
        })
    }

    async fn update_workspace_activity(
        &self,
        _instance: &InstanceUuid,
        active: &BTreeSet<WorkspaceUuid>,
        inactive: &BTreeSet<WorkspaceUuid>,
    ) -> Result<(), HookError> {
        self.record(HookCall::Activity {
            active: active.clone(),
            inactive: inactive.clone(),
        })
    }
}

#[async_trait]
impl RuntimeExecutionPublisher for RecordingHooks {
    async fn publish_execution_projection(
        &self,
        _instance: &InstanceUuid,
        active_generations: &BTreeMap<WorkspaceUuid, i64>,
        affected: Option<&BTreeSet<WorkspaceUuid>>,
    ) -> Result<(), HookError> {
        self.record(HookCall::Publish {
            active_generations: active_generations.clone(),
            affected: affected.cloned(),
        })
    }
}
