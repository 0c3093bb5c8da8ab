//! The deterministic simulation of the directory projector (issue 12, part 3 of the
//! simulation): two replicas of the engine's real [`DirectoryProjector`] share one projection
//! (the in-memory tables, applied through the real planner as the SQL stores do) and sync
//! against a simulated directory whose workspaces change while they sync.
//!
//! The directory answers from its history, and the run's generator decides each answer's
//! fate: correct; unavailable; an older snapshot replayed; an older event page replayed; a
//! workspace answered from a lagging directory replica (an older revision than its event:
//! reordered); a workspace answered at its current revision with other contents (a forged or
//! corrupted answer). Replicas restart (losing their consumer cursor) and time passes.
//!
//! Checked after every step, over the shared tables: a workspace's revision never goes back
//! (nor does its row vanish), one revision never takes two contents, and the shared cursor
//! never goes back.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenantry_directory::testing::{
    at, batch, dir_event, projector_config, snapshot, workspace, ws_id,
};
use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryEvent, DirectoryEventBatch,
    DirectorySnapshot, DirectoryWorkspace, InstanceUuid, ProjectionState, ProjectionTables,
    WorkspaceUuid,
};
use tenantry_engine::DirectoryProjector;
use tenantry_ports::clock::ManualClock;
use tenantry_ports::directory::{
    DeltaApplier, DirectoryProvider, EventBatchApplier, FreshnessToucher, ProjectionStateReader,
    ProjectionStoreError, ProviderError, SnapshotApplier,
};

use super::SimFailure;

/// Workspaces of the directory.
pub const WORKSPACES: usize = 3;
/// Projector replicas.
pub const REPLICAS: usize = 2;
const TRACE: usize = 40;

/// Property: a workspace's projected revision never goes back. Each failure message of the
/// run starts with the name of the property it breaks.
pub const REVISION_NEVER_GOES_BACK: &str = "a workspace's revision never goes back";
/// Property: a projected workspace row never vanishes.
pub const ROW_NEVER_VANISHES: &str = "a workspace's row never vanishes";
/// Property: one revision of a workspace never takes two contents (name, status, memberships).
pub const ONE_CONTENT_PER_REVISION: &str = "one revision never takes two contents";
/// Property: the shared consumer cursor never goes back.
pub const CURSOR_NEVER_GOES_BACK: &str = "the shared cursor never goes back";

/// A deliberately broken component, to show the run finds what it must (test-only switch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectorBug {
    /// The store plans a delta on a read that misses the rows of the requested workspaces
    /// (a stale read, no lock): whatever the directory answers is written over them.
    DeltaPlannedOnStaleRead,
}

/// One step of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProjectorOp {
    /// The directory changes workspace `w` (a new revision and its event).
    Change(usize),
    /// Replica `r` runs one sync step.
    Sync(usize),
    /// Replica `r` restarts (it forgets its consumer cursor).
    Restart(usize),
    /// Percentage of provider answers that meet a fault from now on.
    Weather(u32),
    /// Time passes, seconds.
    Advance(u64),
}

/// Draws the next step.
pub fn draw(rng: &mut StdRng) -> ProjectorOp {
    match rng.random_range(0..16u8) {
        0..=3 => ProjectorOp::Change(rng.random_range(0..WORKSPACES)),
        4..=11 => ProjectorOp::Sync(rng.random_range(0..REPLICAS)),
        12 => ProjectorOp::Restart(rng.random_range(0..REPLICAS)),
        13 => ProjectorOp::Weather([0, 20, 50][rng.random_range(0..3usize)]),
        _ => ProjectorOp::Advance([1, 10, 100][rng.random_range(0..3usize)]),
    }
}

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectorRunSummary {
    /// Steps of the schedule.
    pub steps: u64,
    /// Directory events produced.
    pub events: usize,
    /// The shared cursor at the end.
    pub cursor: i64,
    /// Sync steps that applied something / were refused or failed.
    pub syncs: (u64, u64),
    /// The last events (equal seeds give equal traces).
    pub trace: Vec<String>,
}

fn ws_name(w: usize) -> String {
    format!("ws-{w}")
}

/// The directory's workspace `w` at `revision` (its contents are a function of both).
fn content(w: usize, revision: i64) -> DirectoryWorkspace {
    let name = ws_name(w);
    let mut ws = workspace(&name, revision, &[(&format!("acc-{w}"), revision)]);
    ws.name = format!("{name} at revision {revision}");
    ws
}

/// The simulated directory: a history of changes, answered with faults.
struct Directory {
    /// `(cursor, workspace, revision)` of every change; cursors count from 1.
    history: Vec<(i64, usize, i64)>,
    rng: StdRng,
    fault_percent: u32,
    trace: VecDeque<String>,
}

impl Directory {
    fn event(&mut self, text: String) {
        if self.trace.len() == TRACE {
            self.trace.pop_front();
        }
        self.trace.push_back(text);
    }

    fn cursor(&self) -> i64 {
        self.history.last().map_or(0, |(c, _, _)| *c)
    }

    /// Each workspace's revision as of `cursor` (0: not yet created).
    fn revisions_at(&self, cursor: i64) -> [i64; WORKSPACES] {
        let mut revisions = [0; WORKSPACES];
        for (c, w, r) in &self.history {
            if *c <= cursor {
                revisions[*w] = *r;
            }
        }
        revisions
    }

    fn faulty(&mut self) -> bool {
        self.rng.random_range(0..100) < self.fault_percent
    }
}

type Shared = Arc<Mutex<Directory>>;

fn directory(shared: &Shared) -> MutexGuard<'_, Directory> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Clone)]
struct SimProvider {
    directory: Shared,
}

fn snapshot_at(d: &Directory, cursor: i64) -> DirectorySnapshot {
    let workspaces = d
        .revisions_at(cursor)
        .iter()
        .enumerate()
        .filter(|(_, r)| **r > 0)
        .map(|(w, r)| content(w, *r))
        .collect();
    snapshot(cursor, workspaces)
}

fn event_of(cursor: i64, w: usize, revision: i64) -> DirectoryEvent {
    dir_event(&format!("e-{cursor}"), cursor, &ws_name(w), revision)
}

#[async_trait]
impl DirectoryProvider for SimProvider {
    async fn fetch_snapshot(
        &self,
        _instance: &InstanceUuid,
    ) -> Result<DirectorySnapshot, ProviderError> {
        let mut d = directory(&self.directory);
        let current = d.cursor();
        let cursor = if d.faulty() {
            match d.rng.random_range(0..2u8) {
                0 => {
                    d.event("snapshot: unavailable".to_owned());
                    return Err(ProviderError::unavailable("directory unavailable"));
                }
                _ => d.rng.random_range(0..=current),
            }
        } else {
            current
        };
        d.event(format!("snapshot at cursor {cursor} (current {current})"));
        Ok(snapshot_at(&d, cursor))
    }

    async fn fetch_events(
        &self,
        _instance: &InstanceUuid,
        after: i64,
        limit: u32,
    ) -> Result<DirectoryEventBatch, ProviderError> {
        let mut d = directory(&self.directory);
        let mut from = after;
        if d.faulty() {
            match d.rng.random_range(0..2u8) {
                0 => {
                    d.event(format!("events after {after}: unavailable"));
                    return Err(ProviderError::unavailable("directory unavailable"));
                }
                _ => from = d.rng.random_range(0..=after), // an older page replayed
            }
        }
        let events: Vec<DirectoryEvent> = d
            .history
            .iter()
            .filter(|(c, _, _)| *c > from)
            .take(usize::try_from(limit.clamp(1, 3)).unwrap_or(3))
            .map(|(c, w, r)| event_of(*c, *w, *r))
            .collect();
        let cursor = events.last().map_or(from, |e| e.cursor);
        let high_water = d.cursor();
        d.event(format!(
            "events after {after}: page {from}..{cursor} of {high_water}"
        ));
        Ok(batch(from, cursor, high_water, events))
    }

    async fn fetch_workspaces(
        &self,
        _instance: &InstanceUuid,
        workspace_uuids: &[WorkspaceUuid],
    ) -> Result<DirectoryDelta, ProviderError> {
        let mut d = directory(&self.directory);
        let current = d.revisions_at(d.cursor());
        let mut workspaces = Vec::new();
        let mut notes = Vec::new();
        for uuid in workspace_uuids {
            let Some(w) = (0..WORKSPACES).find(|w| ws_id(&ws_name(*w)) == *uuid) else {
                continue;
            };
            let mut revision = current[w];
            let mut ws = None;
            if d.faulty() {
                match d.rng.random_range(0..3u8) {
                    0 => {
                        d.event("workspaces: unavailable".to_owned());
                        return Err(ProviderError::unavailable("directory unavailable"));
                    }
                    1 => {
                        // A lagging directory replica answered: an older revision.
                        revision = d.rng.random_range(1..=revision.max(1));
                        notes.push(format!("{} lagging at {revision}", ws_name(w)));
                    }
                    _ => {
                        let mut forged = content(w, revision);
                        forged.name = format!("forged {}", d.rng.random_range(0..1000u32));
                        notes.push(format!("{} forged at {revision}", ws_name(w)));
                        ws = Some(forged);
                    }
                }
            }
            if revision > 0 {
                workspaces.push(ws.unwrap_or_else(|| content(w, revision)));
            }
        }
        d.event(format!("workspaces {:?}", notes));
        let mut requested = workspace_uuids.to_vec();
        requested.sort();
        Ok(DirectoryDelta {
            instance_uuid: tenantry_directory::testing::instance(),
            generated_at: at(0),
            requested_workspace_uuids: requested,
            workspaces,
        })
    }
}

/// The shared projection: the in-memory tables through the real planner (the reference
/// semantics of the SQL stores' transactions), with the planted bug.
#[derive(Clone)]
struct SimStore {
    tables: Arc<Mutex<ProjectionTables>>,
    bug: Option<ProjectorBug>,
}

impl SimStore {
    fn tables(&self) -> MutexGuard<'_, ProjectionTables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn rejected(error: tenantry_directory::DirectoryError) -> ProjectionStoreError {
    ProjectionStoreError::Rejected(error)
}

#[async_trait]
impl SnapshotApplier for SimStore {
    async fn apply_snapshot(
        &self,
        ctx: &ApplyContext,
        snapshot: &DirectorySnapshot,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        // The shipped SQL store applies page by page: so does the simulation, two workspaces
        // to a page in uuid order (`PagedSnapshotApply`, the planner the store runs).
        let mut sorted: Vec<_> = snapshot.workspaces.clone();
        sorted.sort_by(|a, b| a.uuid.cmp(&b.uuid));
        let pages: Vec<Vec<_>> = sorted.chunks(2).map(<[_]>::to_vec).collect();
        self.tables()
            .apply_snapshot_pages(
                ctx,
                &snapshot.instance_uuid,
                snapshot.cursor,
                &pages,
                events,
            )
            .map_err(rejected)
    }
}

#[async_trait]
impl DeltaApplier for SimStore {
    async fn apply_delta(
        &self,
        ctx: &ApplyContext,
        delta: &DirectoryDelta,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        let mut tables = self.tables();
        if self.bug == Some(ProjectorBug::DeltaPlannedOnStaleRead) {
            let mut stale = tables.clone();
            for uuid in &delta.requested_workspace_uuids {
                stale.workspaces.remove(uuid);
            }
            let outcome = stale.apply_delta(ctx, delta, batch).map_err(rejected)?;
            for uuid in &delta.requested_workspace_uuids {
                if let Some(row) = stale.workspaces.get(uuid) {
                    tables.workspaces.insert(uuid.clone(), row.clone());
                }
            }
            tables.states = stale.states;
            tables.receipts = stale.receipts;
            return Ok(outcome);
        }
        tables.apply_delta(ctx, delta, batch).map_err(rejected)
    }
}

#[async_trait]
impl EventBatchApplier for SimStore {
    async fn apply_event_batch(
        &self,
        ctx: &ApplyContext,
        batch: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.tables()
            .apply_event_batch(ctx, batch)
            .map_err(rejected)
    }
}

#[async_trait]
impl FreshnessToucher for SimStore {
    async fn touch_freshness(
        &self,
        ctx: &ApplyContext,
        replica_cursor: i64,
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        self.tables()
            .touch_freshness(ctx, replica_cursor)
            .map_err(rejected)
    }
}

#[async_trait]
impl ProjectionStateReader for SimStore {
    async fn projection_state(
        &self,
        instance: &InstanceUuid,
    ) -> Result<Option<ProjectionState>, ProjectionStoreError> {
        Ok(self.tables().states.get(instance).cloned())
    }
}

type Replica = DirectoryProjector<SimProvider, SimStore>;

/// The simulated system of one run.
struct ProjectorSim {
    directory: Shared,
    store: SimStore,
    clock: ManualClock,
    replicas: Vec<Replica>,
    /// Ghost: per workspace, the highest revision seen and the contents seen at each revision.
    seen: BTreeMap<WorkspaceUuid, (i64, BTreeMap<i64, String>)>,
    seen_cursor: i64,
    syncs: (u64, u64),
}

impl ProjectorSim {
    fn new(seed: u64, bug: Option<ProjectorBug>) -> Self {
        let directory = Arc::new(Mutex::new(Directory {
            history: Vec::new(),
            rng: StdRng::seed_from_u64(seed ^ 0xd1_4ec7),
            fault_percent: 20,
            trace: VecDeque::new(),
        }));
        let store = SimStore {
            tables: Arc::default(),
            bug,
        };
        let clock = ManualClock::new(at(1_000));
        let mut sim = Self {
            directory,
            store,
            clock,
            replicas: Vec::new(),
            seen: BTreeMap::new(),
            seen_cursor: 0,
            syncs: (0, 0),
        };
        // The directory starts with every workspace at revision 1.
        for w in 0..WORKSPACES {
            sim.change(w);
        }
        for _ in 0..REPLICAS {
            let replica = sim.replica();
            sim.replicas.push(replica);
        }
        sim
    }

    fn replica(&self) -> Replica {
        DirectoryProjector::new(
            projector_config(),
            SimProvider {
                directory: Arc::clone(&self.directory),
            },
            self.store.clone(),
        )
        .with_clock(Arc::new(self.clock.clone()))
    }

    fn change(&mut self, w: usize) {
        let mut d = directory(&self.directory);
        let cursor = d.cursor() + 1;
        let revision = d.revisions_at(cursor - 1)[w] + 1;
        d.history.push((cursor, w, revision));
        d.event(format!(
            "directory: {} to revision {revision} (cursor {cursor})",
            ws_name(w)
        ));
    }

    async fn apply(&mut self, op: ProjectorOp) {
        match op {
            ProjectorOp::Change(w) => self.change(w),
            ProjectorOp::Sync(r) => {
                let result = self.replicas[r].sync_once().await;
                let text = match &result {
                    Ok(()) => {
                        self.syncs.0 += 1;
                        "ok".to_owned()
                    }
                    Err(e) => {
                        self.syncs.1 += 1;
                        e.to_string()
                    }
                };
                directory(&self.directory).event(format!("replica {r} sync: {text}"));
            }
            ProjectorOp::Restart(r) => {
                self.replicas[r] = self.replica();
                directory(&self.directory).event(format!("replica {r} restarts"));
            }
            ProjectorOp::Weather(percent) => {
                let mut d = directory(&self.directory);
                d.fault_percent = percent;
                d.event(format!("{percent} % of answers meet a fault"));
            }
            ProjectorOp::Advance(secs) => self.clock.advance(Duration::from_secs(secs)),
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let tables = self.store.tables().clone();
        for (uuid, (highest, _)) in &self.seen {
            let Some(row) = tables.workspaces.get(uuid) else {
                return Err(format!(
                    "{ROW_NEVER_VANISHES}: workspace {uuid} at revision {highest} vanished"
                ));
            };
            if row.projection_revision < *highest {
                return Err(format!(
                    "{REVISION_NEVER_GOES_BACK}: workspace {uuid} went back from revision {highest} to {}",
                    row.projection_revision
                ));
            }
        }
        for (uuid, row) in &tables.workspaces {
            let members: Vec<String> = tables
                .memberships
                .values()
                .filter(|m| &m.workspace_uuid == uuid)
                .map(|m| format!("{}@{}", m.account_uuid, m.projection_revision))
                .collect();
            let text = format!("{} {:?} {:?}", row.name, row.status, members);
            let (highest, contents) = self.seen.entry(uuid.clone()).or_default();
            *highest = (*highest).max(row.projection_revision);
            match contents.get(&row.projection_revision) {
                Some(before) if *before != text => {
                    return Err(format!(
                        "{ONE_CONTENT_PER_REVISION}: workspace {uuid} revision {} took two contents: \
                         {before:?}, then {text:?}",
                        row.projection_revision
                    ));
                }
                Some(_) => {}
                None => {
                    contents.insert(row.projection_revision, text);
                }
            }
        }
        let cursor = tables
            .states
            .values()
            .next()
            .map_or(self.seen_cursor, |s| s.cursor);
        if cursor < self.seen_cursor {
            return Err(format!(
                "{CURSOR_NEVER_GOES_BACK}: the shared cursor went back from {} to {cursor}",
                self.seen_cursor
            ));
        }
        self.seen_cursor = cursor;
        Ok(())
    }

    fn trace(&self) -> Vec<String> {
        directory(&self.directory).trace.iter().cloned().collect()
    }
}

/// Runs `steps` seeded steps of the projector simulation with `bug` planted or none.
///
/// # Errors
/// The first broken invariant, with the seed, the step and the last events.
pub fn run(
    seed: u64,
    steps: u64,
    bug: Option<ProjectorBug>,
) -> Result<ProjectorRunSummary, SimFailure> {
    let fail = SimFailure::of("projector", seed);
    let runtime = super::paused_runtime("projector", seed)?;
    runtime.block_on(async move {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut sim = ProjectorSim::new(seed, bug);
        for step in 0..steps {
            let op = draw(&mut rng);
            directory(&sim.directory).event(format!("step {step}: {op:?}"));
            sim.apply(op).await;
            if let Err(message) = sim.check() {
                return Err(fail(step + 1, message, sim.trace()));
            }
        }
        let events = directory(&sim.directory).history.len();
        Ok(ProjectorRunSummary {
            steps,
            events,
            cursor: sim.seen_cursor,
            syncs: sim.syncs,
            trace: sim.trace(),
        })
    })
}
