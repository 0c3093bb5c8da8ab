//! Model of directory revisions: two replicas share the projection tables and apply, in any
//! order and each at most once, the provider's answers: an older and a newer snapshot, two event
//! batches with their deltas, a forged delta that gives revision 2 other contents, and a lagging
//! delta that answers revision 1 to an event announcing revision 3.
//!
//! Every apply is the real planner of `tenantry_directory::plan` (`plan_snapshot`,
//! `plan_delta`) over the rows `ProjectionTables::select` loads, written by
//! `ProjectionTables::write`: the reference semantics of a store transaction, in which the
//! state row is locked, the rows loaded, planned and written as one step. The model checks that
//! whatever order the answers arrive in, a workspace's revision never goes back and one revision
//! never takes two different contents.

use std::collections::BTreeMap;
use std::time::Duration;

use stateright::{Model, Property};
use tenantry_directory::plan::{delta_keys, plan_delta, plan_snapshot, snapshot_keys};
use tenantry_directory::testing::{at, batch, delta, dir_event, instance, snapshot, workspace};
use tenantry_directory::{
    ApplyContext, DirectoryDelta, DirectoryError, DirectoryEventBatch, DirectorySnapshot,
    ProjectionLimits, ProjectionTables, ProjectionWrite,
};

/// Replicas.
pub const REPLICAS: usize = 2;

/// A deliberately broken rule, to show the checker finds what it must.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RevisionBug {
    /// The real rules.
    None,
    /// An apply reads and plans, then writes later without holding the state-row lock in
    /// between (a lost update: a plan made on old rows overwrites newer ones).
    ApplyWithoutLock,
}

/// The directory-revisions model.
#[derive(Debug, Clone)]
pub struct RevisionProtocol {
    /// Planted bug, or [`RevisionBug::None`].
    pub bug: RevisionBug,
}

/// The projection tables, hashed through their canonical debug form (they hold no hash of their
/// own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablesView(pub ProjectionTables);

impl std::hash::Hash for TablesView {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        format!("{:?}", self.0).hash(state);
    }
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RevisionState {
    /// The shared tables.
    pub tables: TablesView,
    /// Which answers each replica has applied (or had refused), bit per answer.
    pub done: [u8; REPLICAS],
    /// A plan read but not yet written (bug [`RevisionBug::ApplyWithoutLock`] only): the answer
    /// and the tables it was planned on.
    pub pending: [Option<(u8, TablesView)>; REPLICAS],
    /// Ghost: highest revision each workspace ever had, and the name it had at each revision.
    pub seen: BTreeMap<(String, i64), String>,
    /// Ghost: a workspace's revision went back.
    pub went_back: bool,
    /// Ghost: one revision took two contents.
    pub conflicting: bool,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RevisionAction {
    /// Replica applies answer (atomically; with the lock bug: reads and plans it).
    Apply(u8, u8),
    /// Replica writes its pending plan (lock bug only).
    Write(u8),
}

/// The provider's answers the replicas receive.
enum ProviderAnswer {
    Snapshot(DirectorySnapshot),
    Delta(DirectoryDelta, DirectoryEventBatch),
}

fn answers() -> Vec<ProviderAnswer> {
    let ws = |revision: i64, name: &str| {
        let mut w = workspace("ws-1", revision, &[("acc-1", revision)]);
        w.name = name.to_owned();
        w
    };
    vec![
        ProviderAnswer::Snapshot(snapshot(1, vec![ws(1, "one")])),
        ProviderAnswer::Snapshot(snapshot(2, vec![ws(2, "two")])),
        ProviderAnswer::Delta(
            delta(&["ws-1"], vec![ws(1, "one")]),
            batch(0, 1, 2, vec![dir_event("e-1", 1, "ws-1", 1)]),
        ),
        ProviderAnswer::Delta(
            delta(&["ws-1"], vec![ws(2, "two")]),
            batch(1, 2, 2, vec![dir_event("e-2", 2, "ws-1", 2)]),
        ),
        // A forged or corrupted answer: revision 2 with other contents.
        ProviderAnswer::Delta(
            delta(&["ws-1"], vec![ws(2, "forged")]),
            batch(1, 2, 2, vec![dir_event("e-2", 2, "ws-1", 2)]),
        ),
        // A lagging directory replica's answer: the event announces revision 3, the delta
        // still has revision 1 (refused as older than its event).
        ProviderAnswer::Delta(
            delta(&["ws-1"], vec![ws(1, "one")]),
            batch(2, 3, 3, vec![dir_event("e-3", 3, "ws-1", 3)]),
        ),
    ]
}

fn context() -> ApplyContext {
    ApplyContext {
        instance: instance(),
        limits: ProjectionLimits::default(),
        now: at(100),
        max_staleness: Duration::from_secs(60),
    }
}

impl RevisionProtocol {
    /// The real rules.
    pub fn correct() -> Self {
        Self {
            bug: RevisionBug::None,
        }
    }

    /// A planted-bug variant.
    pub fn with_bug(bug: RevisionBug) -> Self {
        Self { bug }
    }

    /// Plans answer `index` on `tables` with the real planner.
    fn plan(
        &self,
        tables: &ProjectionTables,
        index: u8,
    ) -> Result<ProjectionWrite, DirectoryError> {
        let ctx = context();
        let state = tables.states.get(&ctx.instance).cloned();
        match &answers()[usize::from(index)] {
            ProviderAnswer::Snapshot(s) => {
                let existing = tables.select(&snapshot_keys(s, &[]), &ctx.instance);
                plan_snapshot(&ctx, state.as_ref(), &existing, s, &[])
            }
            ProviderAnswer::Delta(d, b) => {
                let existing = tables.select(&delta_keys(d, b), &ctx.instance);
                plan_delta(&ctx, state.as_ref(), &existing, d, b)
            }
        }
    }

    fn write(state: &mut RevisionState, plan: &ProjectionWrite) {
        state.tables.0.write(plan);
        for row in state.tables.0.workspaces.values() {
            let uuid = row.uuid.as_str().to_owned();
            let highest = state
                .seen
                .keys()
                .filter(|(w, _)| *w == uuid)
                .map(|(_, r)| *r)
                .max();
            if highest.is_some_and(|h| h > row.projection_revision) {
                state.went_back = true;
            }
            let key = (uuid, row.projection_revision);
            match state.seen.get(&key) {
                Some(name) if *name != row.name => state.conflicting = true,
                Some(_) => {}
                None => {
                    state.seen.insert(key, row.name.clone());
                }
            }
        }
    }
}

impl Model for RevisionProtocol {
    type State = RevisionState;
    type Action = RevisionAction;

    fn init_states(&self) -> Vec<RevisionState> {
        vec![RevisionState {
            tables: TablesView(ProjectionTables::default()),
            done: [0; REPLICAS],
            pending: [None, None],
            seen: BTreeMap::new(),
            went_back: false,
            conflicting: false,
        }]
    }

    fn actions(&self, state: &RevisionState, actions: &mut Vec<RevisionAction>) {
        let count = answers().len() as u8;
        for r in 0..REPLICAS as u8 {
            if state.pending[usize::from(r)].is_some() {
                actions.push(RevisionAction::Write(r));
                continue;
            }
            for i in 0..count {
                if state.done[usize::from(r)] & (1 << i) == 0 {
                    actions.push(RevisionAction::Apply(r, i));
                }
            }
        }
    }

    fn next_state(&self, last: &RevisionState, action: RevisionAction) -> Option<RevisionState> {
        let mut s = last.clone();
        match action {
            RevisionAction::Apply(r, i) => {
                let r = usize::from(r);
                s.done[r] |= 1 << i;
                if self.bug == RevisionBug::ApplyWithoutLock {
                    s.pending[r] = Some((i, s.tables.clone()));
                    return Some(s);
                }
                // A refused answer changes nothing (the transaction rolls back).
                if let Ok(plan) = self.plan(&s.tables.0, i) {
                    Self::write(&mut s, &plan);
                }
            }
            RevisionAction::Write(r) => {
                let r = usize::from(r);
                let (i, read) = s.pending[r].take()?;
                if let Ok(plan) = self.plan(&read.0, i) {
                    Self::write(&mut s, &plan);
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("revisions never go back", |_, s: &RevisionState| {
                !s.went_back
            }),
            Property::always(
                "the same revision never takes different content",
                |_, s: &RevisionState| !s.conflicting,
            ),
            Property::sometimes("revision 2 is projected", |_, s: &RevisionState| {
                s.tables
                    .0
                    .workspaces
                    .values()
                    .any(|w| w.projection_revision == 2)
            }),
        ]
    }
}
