//! A snapshot applied page by page in its one transaction (issue 34;
//! `tenantry_directory::plan::PagedSnapshotApply`).
//!
//! 1. Before the transaction: the workspaces are put in uuid order and cut into pages of about
//!    [`PAGE_MEMBERSHIPS`] memberships (or the store's
//!    [`with_snapshot_page`](SeaOrmDirectoryStore::with_snapshot_page)) (a larger workspace is a page alone), and the survey
//!    reads every page: capacity, fingerprint and the rules that span pages. A refusal here
//!    opens no transaction.
//! 2. Under the state row's lock: the superseded and conflict rules; then, unless the
//!    projection already holds the snapshot, each page loads its stored rows, is planned, and
//!    is written (new rows inserted, others upserted) before the next page loads. Into empty
//!    tables (a first projection) no page has stored rows to load, so none is read. On
//!    PostgreSQL the lookups are planned for their values and the writes may use the prepared
//!    statements' generic plans ([`Phase`]).
//! 3. The instance's absent candidates not in the snapshot and the event receipts are loaded;
//!    the last step fences the absent workspaces and writes the receipts and the state row,
//!    then the committed active workspaces are counted and checked.
//!
//! What a page holds in memory is its own rows, stored and planned; what spans pages is the
//! survey's ledger of digests. A refusal at any page rolls the whole transaction back, so the
//! projection's all-or-nothing rule holds.

use tenantry_directory::fingerprint::SnapshotFingerprinter;
use tenantry_directory::plan::{PagedSnapshotApply, SnapshotSurvey, SurveyedSnapshot};
use tenantry_directory::{
    ApplyContext, ApplyOutcome, DirectoryEvent, DirectoryWorkspace, ExistingRows, WorkspaceUuid,
};
use tenantry_ports::StoreError;
use tenantry_ports::directory::{AnySnapshotSource, ProjectionStoreError, SnapshotReadError};

use sea_orm::{ConnectionTrait, DatabaseTransaction, EntityTrait};

use super::entity::{account, execution, membership, workspace};
use super::{SeaOrmDirectoryStore, off_runtime, split, storage};
use crate::connect::Backend;

/// By default a page planned and written at once holds about this many memberships (the same
/// default as a paged snapshot's page on the wire;
/// [`SeaOrmDirectoryStore::with_snapshot_page`]).
pub const PAGE_MEMBERSHIPS: usize = 10_000;

/// The workspaces in uuid order, cut into pages of at most `size` memberships (a workspace
/// with more is a page of its own; a page holds at least one workspace; `size` 0 puts each
/// workspace on its own page).
pub(super) fn pages_of(
    workspaces: &[DirectoryWorkspace],
    size: usize,
) -> Vec<Vec<&DirectoryWorkspace>> {
    let mut sorted: Vec<&DirectoryWorkspace> = workspaces.iter().collect();
    sorted.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    let mut pages = Vec::new();
    let mut page: Vec<&DirectoryWorkspace> = Vec::new();
    let mut members = 0;
    for workspace in sorted {
        if !page.is_empty() && (size == 0 || members + workspace.members.len() > size) {
            pages.push(std::mem::take(&mut page));
            members = 0;
        }
        members += workspace.members.len();
        page.push(workspace);
    }
    if !page.is_empty() {
        pages.push(page);
    }
    pages
}

impl SeaOrmDirectoryStore {
    /// Applies the snapshot of `source` (with receipts of `events`) page by page in one
    /// transaction (see the module documentation). Each of the source's pages is read twice:
    /// once for the survey, once for the apply.
    pub(super) async fn apply_snapshot_pages(
        &self,
        ctx: &ApplyContext,
        source: &AnySnapshotSource,
        events: &[DirectoryEvent],
    ) -> Result<ApplyOutcome, ProjectionStoreError> {
        let survey = off_runtime(|| self.survey(ctx, source))?;
        let txn = self.begin().await?;
        let result = async {
            self.enter(&txn, Phase::PageLookups).await?;
            let state = self.lock_state(&txn, &ctx.instance, true).await?;
            let mut apply = PagedSnapshotApply::begin(ctx, state.as_ref(), survey)?;
            if apply.rows_needed() {
                // Into empty tables every page's lookup would find nothing: a page's
                // workspaces and memberships are its own (the survey refused duplicates), and
                // it asks only for accounts no earlier page planned (an email that an earlier
                // page gave another account is refused by the apply's ledger first). On
                // PostgreSQL a row committed after this check (another instance's first
                // projection sharing an account, a host's local account) makes a plain INSERT
                // fail: the apply rolls back as a storage failure and the next attempt, finding
                // rows, looks them up.
                let stored = self.holds_rows(&txn).await?;
                self.write_pages(&txn, ctx, source, &mut apply, stored)
                    .await?;
            }
            self.enter(&txn, Phase::LastStep).await?;
            // A snapshot the projection already holds fences nothing: no candidate to read.
            let absent = if apply.rows_needed() {
                self.absent_candidates(&txn, &ctx.instance).await?
            } else {
                Vec::new()
            };
            let absent = absent
                .into_iter()
                .map(|uuid| WorkspaceUuid::parse(&uuid))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| super::corrupt(format!("absent workspace candidate: {e}")))?;
            let keys = apply.finish_keys(absent, events);
            let existing = self.load(&txn, &keys, &ctx.instance).await?;
            let plan = apply.finish(&existing, events)?;
            self.write_plan(&txn, ctx, plan, existing).await
        }
        .await;
        // A refusal lets the state row's lock go before it answers (`crate::txn`).
        crate::txn::finish(txn, result, |_| true, storage("commit")).await
    }

    /// Sets how PostgreSQL plans the statements of `phase` in `txn` (nothing on SQLite): both
    /// settings of [`Phase`] in one `SET LOCAL` round trip.
    async fn enter(
        &self,
        txn: &DatabaseTransaction,
        phase: Phase,
    ) -> Result<(), ProjectionStoreError> {
        if self.backend != Backend::Postgres {
            return Ok(());
        }
        let (seqscan, plans) = match phase {
            Phase::PageLookups => ("off", "force_custom_plan"),
            Phase::PageWrites => ("off", "auto"),
            Phase::LastStep => ("on", "force_custom_plan"),
        };
        txn.execute_unprepared(&format!(
            "SET LOCAL enable_seqscan = {seqscan}; SET LOCAL plan_cache_mode = {plans}"
        ))
        .await
        .map(drop)
        .map_err(storage("choose how the next statements are planned"))
    }

    /// Whether any of the projected tables (accounts, workspaces, memberships, execution
    /// state) holds a row, read in `txn`: one `LIMIT 1` read per table. Accounts are shared by
    /// every instance, so the check is not per instance.
    async fn holds_rows(&self, txn: &DatabaseTransaction) -> Result<bool, ProjectionStoreError> {
        Ok(has_row::<account::Entity>(txn).await?
            || has_row::<workspace::Entity>(txn).await?
            || has_row::<membership::Entity>(txn).await?
            || has_row::<execution::Entity>(txn).await?)
    }

    /// Each page in turn: its stored rows loaded (after the earlier pages were written; none
    /// when the tables held no row, `stored` false), planned, written. Every database call is
    /// an await of this task, so the apply can be cancelled between any two (a stopping
    /// projector does not wait for the last page).
    async fn write_pages(
        &self,
        txn: &DatabaseTransaction,
        ctx: &ApplyContext,
        source: &AnySnapshotSource,
        apply: &mut PagedSnapshotApply<'_>,
        stored: bool,
    ) -> Result<(), ProjectionStoreError> {
        if !stored {
            self.enter(txn, Phase::PageWrites).await?;
        }
        for index in 0..source.page_count() {
            let page = off_runtime(|| source.read_page(index)).map_err(read_back)?;
            for page in pages_of(&page, self.page_memberships) {
                let existing = if stored {
                    self.enter(txn, Phase::PageLookups).await?;
                    self.load(txn, &apply.page_keys(&page), &ctx.instance)
                        .await?
                } else {
                    ExistingRows::default()
                };
                let mut rows = off_runtime(|| apply.plan_page(&existing, &page))?;
                let new = split::new_page_rows_first(&mut rows, &existing);
                drop(existing);
                if stored {
                    self.enter(txn, Phase::PageWrites).await?;
                }
                self.write_page(txn, &rows, new).await?;
            }
        }
        Ok(())
    }

    /// The survey of every page of `source` (CPU and, for a spooled source, reading back).
    /// The fingerprint (about half the survey's CPU) runs on a second thread beside it.
    fn survey(
        &self,
        ctx: &ApplyContext,
        source: &AnySnapshotSource,
    ) -> Result<SurveyedSnapshot, ProjectionStoreError> {
        let mut fingerprint = SnapshotFingerprinter::new(source.instance_uuid());
        let mut survey = SnapshotSurvey::new(source.instance_uuid().clone(), source.cursor())
            .without_fingerprint();
        for index in 0..source.page_count() {
            let page = source.read_page(index).map_err(read_back)?;
            let pages = pages_of(&page, self.page_memberships);
            std::thread::scope(|scope| {
                let hashed = scope.spawn(|| {
                    for workspace in pages.iter().flatten() {
                        fingerprint.push(workspace);
                    }
                });
                for page in &pages {
                    survey.push(page);
                }
                if let Err(panic) = hashed.join() {
                    std::panic::resume_unwind(panic);
                }
            });
        }
        Ok(survey.finish_with(ctx, fingerprint.finish())?)
    }
}

/// The phases of an apply's transaction, each planned its own way on PostgreSQL
/// ([`SeaOrmDirectoryStore::enter`]). The transaction begins planning every statement for its
/// own values ([`SeaOrmDirectoryStore::begin`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A page's key lookups (`IN` lists) against tables this transaction grows: index scans
    /// (`enable_seqscan = off`: PostgreSQL costs a 5,000-key lookup against a table of a few
    /// hundred thousand rows as a sequential scan, which made the per-page lookups 12.8 s of a
    /// 34 s apply at 1,000,000 memberships), each planned for its values
    /// (`plan_cache_mode = force_custom_plan`).
    PageLookups,
    /// A page's multi-row `INSERT`s: the prepared statement's generic plan once PostgreSQL
    /// chooses one (`plan_cache_mode = auto`, from the sixth execution); planning each one for
    /// its thousands of values made a 1,000,000-membership first projection's writes take 21 s
    /// instead of 11 s (docs/benchmarks.md, "A first projection writes without lookups").
    PageWrites,
    /// The last step's reads (absent candidates, the active count), which are not key lookups:
    /// planned freely, each for its values.
    LastStep,
}

/// Whether the table of `E` holds any row (one `LIMIT 1` read in `txn`).
async fn has_row<E: EntityTrait>(txn: &DatabaseTransaction) -> Result<bool, ProjectionStoreError> {
    E::find()
        .one(txn)
        .await
        .map(|row| row.is_some())
        .map_err(storage("check whether the projected tables hold rows"))
}

/// The port's error for a page of a spooled snapshot that could not be read back: a local
/// failure the projector retries with a new fetch (nothing was written).
fn read_back(error: SnapshotReadError) -> ProjectionStoreError {
    ProjectionStoreError::Storage(StoreError::unavailable(error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenantry_directory::testing::workspace;

    #[test]
    fn pages_hold_whole_workspaces_in_uuid_order_up_to_the_size() {
        let workspaces = vec![
            workspace("ws-3", 1, &[("a", 1)]),
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("a", 1), ("b", 1), ("c", 1)]),
            workspace("ws-4", 1, &[]),
        ];
        let uuids = |pages: Vec<Vec<&DirectoryWorkspace>>| -> Vec<Vec<String>> {
            pages
                .iter()
                .map(|p| p.iter().map(|w| w.uuid.to_string()).collect())
                .collect()
        };
        assert_eq!(
            uuids(pages_of(&workspaces, 3)),
            [vec!["ws-1"], vec!["ws-2"], vec!["ws-3", "ws-4"]]
        );
        assert_eq!(
            uuids(pages_of(&workspaces, 2)),
            [vec!["ws-1"], vec!["ws-2"], vec!["ws-3", "ws-4"]]
        );
        assert_eq!(
            uuids(pages_of(&workspaces, 100)),
            [vec!["ws-1", "ws-2", "ws-3", "ws-4"]]
        );
        assert!(pages_of(&[], 10).is_empty());
        assert_eq!(
            uuids(pages_of(&workspaces, 0)),
            [vec!["ws-1"], vec!["ws-2"], vec!["ws-3"], vec!["ws-4"]]
        );
    }
}
