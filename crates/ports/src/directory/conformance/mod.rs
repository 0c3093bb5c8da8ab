//! The projection-store conformance suite: every function is one behaviour, run unchanged
//! against the in-memory fake, SQLite and PostgreSQL.
//!
//! Most checks replay the same inputs on the store and on the in-memory reference tables
//! (`tenantry_directory::memory`) and require equal outcomes and equal table dumps, so an
//! adapter must select, plan and write exactly like the reference.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod apply;
mod refusals;
mod scale;

pub use apply::*;
pub use refusals::*;
pub use scale::*;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tenantry_directory::maps::{
    AccountStatus, ExecutionStatus, MembershipRole, MembershipStatus, RowSource, WorkspaceStatus,
};
use tenantry_directory::testing::*;
use tenantry_directory::{
    AccountRow, ApplyContext, ApplyOutcome, DirectoryDelta, DirectoryError, DirectoryEventBatch,
    DirectorySnapshot, EventUuid, ExecutionRow, InstanceUuid, ProjectionLimits, ProjectionTables,
    WorkspaceRow,
};

use async_trait::async_trait;

use crate::directory::{DirectoryProjectionStore, ProjectionStoreError, ProjectionTablesReader};

/// What the conformance suite needs from a store beyond the ports: the read port
/// [`ProjectionTablesReader`] plus seeding.
#[async_trait]
pub trait DirectoryFixtureStore: ProjectionTablesReader {
    /// Every row of every projected table ([`ProjectionTablesReader::read_tables`]).
    async fn dump_tables(&self) -> Result<ProjectionTables, ProjectionStoreError> {
        self.read_tables().await
    }

    /// Upserts every row of `rows` as is (local accounts, platform-owned memberships, ...).
    async fn seed_rows(&self, rows: &ProjectionTables) -> Result<(), ProjectionStoreError>;
}

/// A store the suite can drive.
pub trait SuiteStore: DirectoryProjectionStore + DirectoryFixtureStore {}
impl<T: DirectoryProjectionStore + DirectoryFixtureStore> SuiteStore for T {}

fn ctx(secs: i64) -> ApplyContext {
    ApplyContext {
        instance: instance(),
        limits: ProjectionLimits::default(),
        now: at(secs),
        max_staleness: Duration::from_secs(60),
    }
}

/// Replays inputs on a store and on the reference tables side by side.
struct Replay<'s, S> {
    store: &'s S,
    reference: ProjectionTables,
    /// Receipts already compared (seeded or created by an earlier step).
    known_receipts: BTreeSet<(InstanceUuid, EventUuid)>,
}

impl<'s, S: SuiteStore> Replay<'s, S> {
    fn new(store: &'s S) -> Self {
        Self {
            store,
            reference: ProjectionTables::default(),
            known_receipts: BTreeSet::new(),
        }
    }

    async fn seed(&mut self, rows: ProjectionTables) {
        self.store.seed_rows(&rows).await.unwrap();
        self.reference.accounts.extend(rows.accounts);
        self.reference.workspaces.extend(rows.workspaces);
        self.reference.memberships.extend(rows.memberships);
        self.reference.executions.extend(rows.executions);
        self.reference.states.extend(rows.states);
        self.known_receipts.extend(rows.receipts.keys().cloned());
        self.reference.receipts.extend(rows.receipts);
    }

    async fn check(
        &mut self,
        got: Result<ApplyOutcome, ProjectionStoreError>,
        expected: Result<ApplyOutcome, DirectoryError>,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let got = got.map_err(|e| match e {
            ProjectionStoreError::Rejected(e) => e,
            other => panic!("storage failure: {other}"),
        });
        assert_eq!(got, expected, "store and reference disagree");
        let dump = self.store.dump_tables().await.unwrap();
        self.adopt_receipt_times(&dump);
        assert_tables_eq(&dump, &self.reference);
        got
    }

    /// A receipt an apply creates carries the store's clock (the database's), not the
    /// apply's `now` that the reference wrote: check that the store's stamp is this host's
    /// time (the suite's databases run here; the fake reads the system clock), far from the
    /// suite's fixed apply times, and adopt it in the reference.
    fn adopt_receipt_times(&mut self, dump: &ProjectionTables) {
        let now = crate::clock::Clock::now(&crate::clock::SystemClock);
        for (key, expected) in &mut self.reference.receipts {
            if self.known_receipts.contains(key) {
                continue;
            }
            if let Some(got) = dump.receipts.get(key) {
                assert!(
                    (got.received_at - now).abs() < chrono::TimeDelta::minutes(10),
                    "receipt {key:?} received at {} (the apply's time was {}): a new receipt \
                     must be stamped with the store's clock, {now} here",
                    got.received_at,
                    expected.received_at,
                );
                expected.received_at = got.received_at;
            }
            self.known_receipts.insert(key.clone());
        }
    }

    async fn snapshot(
        &mut self,
        c: &ApplyContext,
        s: &DirectorySnapshot,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_snapshot(c, s, &[]);
        let got = self.store.apply_snapshot(c, s, &[]).await;
        self.check(got, expected).await
    }

    async fn snapshot_with_events(
        &mut self,
        c: &ApplyContext,
        s: &DirectorySnapshot,
        events: &[tenantry_directory::DirectoryEvent],
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_snapshot(c, s, events);
        let got = self.store.apply_snapshot(c, s, events).await;
        self.check(got, expected).await
    }

    async fn delta(
        &mut self,
        c: &ApplyContext,
        d: &DirectoryDelta,
        b: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_delta(c, d, b);
        let got = self.store.apply_delta(c, d, b).await;
        self.check(got, expected).await
    }

    async fn events(
        &mut self,
        c: &ApplyContext,
        b: &DirectoryEventBatch,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.apply_event_batch(c, b);
        let got = self.store.apply_event_batch(c, b).await;
        self.check(got, expected).await
    }

    async fn touch(
        &mut self,
        c: &ApplyContext,
        cursor: i64,
    ) -> Result<ApplyOutcome, DirectoryError> {
        let expected = self.reference.touch_freshness(c, cursor);
        let got = self.store.touch_freshness(c, cursor).await;
        self.check(got, expected).await
    }
}

/// Compares table by table so a failure names the table (and stays readable at scale).
fn assert_tables_eq(got: &ProjectionTables, expected: &ProjectionTables) {
    fn diff<K: Ord + std::fmt::Debug, V: PartialEq + std::fmt::Debug>(
        name: &str,
        got: &BTreeMap<K, V>,
        expected: &BTreeMap<K, V>,
    ) {
        if got == expected {
            return;
        }
        let first = got
            .iter()
            .zip(expected.iter())
            .find(|(g, e)| g != e)
            .map(|(g, e)| format!("first difference: got {g:?}, expected {e:?}"))
            .unwrap_or_default();
        panic!(
            "table {name} differs ({} rows, expected {}); {first}",
            got.len(),
            expected.len()
        );
    }
    diff("accounts", &got.accounts, &expected.accounts);
    diff("workspaces", &got.workspaces, &expected.workspaces);
    diff(
        "workspace_memberships",
        &got.memberships,
        &expected.memberships,
    );
    diff(
        "workspace_execution_state",
        &got.executions,
        &expected.executions,
    );
    diff("directory_projection_state", &got.states, &expected.states);
    diff(
        "directory_projection_inbox",
        &got.receipts,
        &expected.receipts,
    );
}

fn base() -> DirectorySnapshot {
    snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("c", 1)]),
        ],
    )
}

fn local_account(uuid: &str, email: &str) -> AccountRow {
    AccountRow {
        uuid: acc_id(uuid),
        normalized_email: email.into(),
        display_name: "Local".into(),
        status: AccountStatus::Active,
        source: RowSource::Local,
        projection_revision: 0,
    }
}

/// Instantiates the projection-store conformance suite: one `#[tokio::test]` per behaviour.
/// `$ctor` is an expression (evaluated inside an async test) yielding `(guard, store)`; the
/// guard lives as long as the test (e.g. a temporary database).
///
/// Invoke it at module level of an integration test (e.g. `tests/directory_store.rs`).
///
/// # What the store and the test crate need
/// - the store implements [`DirectoryProjectionStore`](crate::directory::DirectoryProjectionStore)
///   and [`DirectoryFixtureStore`](crate::directory::conformance::DirectoryFixtureStore) (dump
///   every table, seed local rows: the suite compares whole tables with the reference);
/// - dev-dependencies: `tenantry-ports` with features `directory` (default) and `testing`, and
///   `tokio` with features `macros` and `rt-multi-thread` (the cases run on two workers).
///
/// # Example
/// The suite against the in-memory fake:
/// ```
/// use tenantry_ports::directory::fake::InMemoryProjectionStore;
///
/// tenantry_ports::directory_projection_store_conformance!(((), InMemoryProjectionStore::new()));
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! directory_projection_store_conformance {
    ($ctor:expr) => {
        $crate::directory_projection_store_conformance!(@tests $ctor;
            snapshot_apply_matches_reference,
            snapshot_superseded_and_conflict_are_rejected,
            delta_apply_matches_reference,
            delta_already_applied_by_another_replica_only_refreshes,
            entitlement_batches_and_freshness,
            inbox_skips_duplicates_and_rejects_conflicts,
            local_rows_are_never_taken_over,
            revision_zero_memberships_are_never_overwritten,
            local_workspaces_and_foreign_execution_rows_are_refused,
            every_rejected_input_changes_nothing,
            accounts_are_looked_up_across_chunks,
            committed_active_capacity_rolls_back,
            concurrent_replicas_serialize_on_the_state_row,
            large_snapshot_applies,
            projection_counts_match_the_tables,
            recent_receipts_are_the_newest_first,
            receipts_are_stamped_with_the_store_clock,
        );
    };
    (@tests $ctor:expr; $($name:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let (_guard, store) = $ctor;
                $crate::directory::conformance::$name(&store).await;
            }
        )*
    };
}
