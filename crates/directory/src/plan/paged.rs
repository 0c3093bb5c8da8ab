//! The second pass over a paged snapshot: the apply planned one page at a time, each page's
//! rows written before the next page is read, all in the store's one transaction.
//!
//! The rows of a workspace (the workspace, its memberships, its execution state) depend only on
//! that workspace and on stored rows of the same keys, so they are final once its page is
//! planned. What spans pages comes from the [`SurveyedSnapshot`] (listed workspaces, projected
//! accounts) and from two ledgers kept here: the account rules over the members planned so far
//! (first account per email, each account's projection, by digest; an account is planned from
//! its first member, as the one-body planner does) and the stored owners of emails an earlier
//! page changed (so a later page is checked against the emails as they stood before the apply,
//! not as the earlier page left them).
//!
//! A store drives it ([`crate::memory`] is the reference):
//! 1. survey every page ([`super::SnapshotSurvey`]);
//! 2. take the state row's lock, then [`PagedSnapshotApply::begin`];
//! 3. when [`rows_needed`](PagedSnapshotApply::rows_needed), for each page: load
//!    [`page_keys`](PagedSnapshotApply::page_keys), [`plan_page`](PagedSnapshotApply::plan_page),
//!    write the [`PageWrite`];
//! 4. load the absent candidates the snapshot does not list
//!    ([`SurveyedSnapshot::lists`]) and the event receipts, then
//!    [`finish`](PagedSnapshotApply::finish) and write its [`ProjectionWrite`] like a one-body
//!    plan's (committed capacity check included);
//! 5. commit; on any error roll back, so a refused snapshot changes nothing.
//!
//! The result equals [`super::plan_snapshot`] on the joined pages (the property test in
//! `tests/paged.rs`). When one snapshot breaks several rules, the one reported may differ:
//! pages report their first broken row rule in page order, and receipts are checked last.

use std::collections::{BTreeSet, HashMap};

use super::accounts::check_member;
use super::survey::{HashedLedger, SurveyedSnapshot};
use super::working::Working;
use super::{ApplyContext, LookupKeys, ProjectionWrite, snapshot_already_projected};
use crate::error::DirectoryError;
use crate::fingerprint::incremental_marker;
use crate::ids::{AccountUuid, WorkspaceUuid};
use crate::model::{DirectoryEvent, DirectoryWorkspace};
use crate::rows::ExistingRows;
use crate::rows::{AccountRow, ExecutionRow, MembershipRow, ProjectionState, WorkspaceRow};

/// The rows one page writes, like the same fields of [`ProjectionWrite`]: only rows whose
/// contents change, sorted by primary key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageWrite {
    /// `accounts` rows.
    pub accounts: Vec<AccountRow>,
    /// `workspaces` rows.
    pub workspaces: Vec<WorkspaceRow>,
    /// `workspace_memberships` rows.
    pub memberships: Vec<MembershipRow>,
    /// `workspace_execution_state` rows.
    pub executions: Vec<ExecutionRow>,
}

/// A snapshot apply in progress, page by page (see the module documentation).
pub struct PagedSnapshotApply<'a> {
    ctx: &'a ApplyContext,
    survey: SurveyedSnapshot,
    rows_needed: bool,
    /// The account rules over the members planned so far ([`check_member`]).
    ledger: HashedLedger,
    vacated_emails: HashMap<String, AccountUuid>,
}

impl<'a> PagedSnapshotApply<'a> {
    /// Starts the apply under the state row's lock (`state` is `None` when no row existed).
    ///
    /// # Errors
    /// In the one-body planner's order: [`DirectoryError::SnapshotSuperseded`], then
    /// [`DirectoryError::SnapshotConflict`].
    pub fn begin(
        ctx: &'a ApplyContext,
        state: Option<&ProjectionState>,
        survey: SurveyedSnapshot,
    ) -> Result<Self, DirectoryError> {
        if let Some(state) = state {
            if survey.cursor < state.cursor
                // Planted (verification only; the one-body planner carries the same switch).
                && !tenantry_kernel::planted!("older-snapshot-applied")
            {
                return Err(DirectoryError::SnapshotSuperseded {
                    snapshot_cursor: survey.cursor,
                    projected_cursor: state.cursor,
                });
            }
            if survey.cursor == state.cursor
                && state.snapshot_fingerprint != survey.fingerprint
                && state.snapshot_fingerprint != incremental_marker()
            {
                return Err(DirectoryError::SnapshotConflict {
                    cursor: survey.cursor,
                });
            }
        }
        let rows_needed = !snapshot_already_projected(state, survey.cursor, &survey.fingerprint);
        Ok(Self {
            ctx,
            survey,
            rows_needed,
            ledger: HashedLedger::default(),
            vacated_emails: HashMap::new(),
        })
    }

    /// Whether pages must be planned: `false` when the projection already holds this snapshot
    /// (same cursor and fingerprint; [`super::snapshot_already_projected`]), and then
    /// [`plan_page`](Self::plan_page) writes nothing and the pages need not be read again.
    pub fn rows_needed(&self) -> bool {
        self.rows_needed
    }

    /// The survey this apply plans against.
    pub fn survey(&self) -> &SurveyedSnapshot {
        &self.survey
    }

    /// The rows [`plan_page`](Self::plan_page) reads for `workspaces` (nothing when
    /// [`rows_needed`](Self::rows_needed) is `false`): the workspaces with their memberships
    /// and execution state, the memberships by uuid, and the accounts (by uuid and email) of
    /// the members whose account no earlier page planned.
    pub fn page_keys(&self, workspaces: &[&DirectoryWorkspace]) -> LookupKeys {
        if !self.rows_needed {
            return LookupKeys::default();
        }
        let mut keys = super::keys::workspace_keys(
            std::iter::empty(),
            workspaces.iter().map(|w| w.uuid.clone()),
        );
        let mut accounts = BTreeSet::new();
        let mut emails = BTreeSet::new();
        let mut memberships = Vec::new();
        for member in workspaces.iter().flat_map(|w| &w.members) {
            memberships.push(member.membership_uuid.clone());
            if !self.ledger.has_account(&member.account_uuid) {
                accounts.insert(member.account_uuid.clone());
                emails.insert(member.normalized_email.clone());
            }
        }
        memberships.sort();
        keys.account_uuids = accounts.into_iter().collect();
        keys.emails = emails.into_iter().collect();
        keys.membership_uuids = memberships;
        keys
    }

    /// Plans one page against `existing` (the rows of [`page_keys`](Self::page_keys), read in
    /// the apply's transaction after the earlier pages were written).
    ///
    /// # Errors
    /// The first broken account or workspace rule of the page, in the one-body planner's order
    /// ([`DirectoryError::EmailMapsToSeveralAccounts`] and
    /// [`DirectoryError::ConflictingAccountProjections`] against every member planned so far
    /// first); the store then rolls back the whole apply.
    pub fn plan_page(
        &mut self,
        existing: &ExistingRows,
        workspaces: &[&DirectoryWorkspace],
    ) -> Result<PageWrite, DirectoryError> {
        if !self.rows_needed {
            return Ok(PageWrite::default());
        }
        let mut work = Working::new(self.ctx, existing);
        let members = workspaces.iter().flat_map(|w| &w.members);
        for member in members.clone() {
            if let Some(owner) = self.vacated_emails.get(&member.normalized_email) {
                work.accounts_by_email
                    .entry(member.normalized_email.clone())
                    .or_insert_with(|| owner.clone());
            }
        }
        // One account per email and one projection per account, over every member so far:
        // a member's account is planned from its first member.
        let mut selected = Vec::new();
        for member in members {
            if check_member(&mut self.ledger, member)? {
                selected.push(member);
            }
        }
        work.plan_accounts(selected, self.survey.cursor)?;
        for (before, after) in work.accounts.replaced() {
            if before.normalized_email != after.normalized_email {
                self.vacated_emails
                    .entry(before.normalized_email.clone())
                    .or_insert_with(|| before.uuid.clone());
            }
        }
        let survey = &self.survey;
        work.apply_workspaces(workspaces.iter().copied(), |account| {
            survey.projects(account)
        })?;
        Ok(work.finish_rows())
    }

    /// The rows [`finish`](Self::finish) reads: the stored projected workspaces of the
    /// instance that need an absent fence and that the snapshot does not list (`absent`,
    /// with their memberships and execution state), and the receipts of `events`.
    pub fn finish_keys(
        &self,
        absent: impl IntoIterator<Item = WorkspaceUuid>,
        events: &[DirectoryEvent],
    ) -> LookupKeys {
        let mut workspace_uuids: Vec<WorkspaceUuid> = if self.rows_needed {
            absent
                .into_iter()
                .filter(|uuid| !self.survey.lists(uuid))
                .collect()
        } else {
            Vec::new()
        };
        workspace_uuids.sort();
        workspace_uuids.dedup();
        LookupKeys {
            workspace_uuids,
            event_uuids: events.iter().map(|e| e.uuid.clone()).collect(),
            ..LookupKeys::default()
        }
    }

    /// Ends the apply: the receipts of `events`, the absent workspaces archived and fenced,
    /// and the new state row (cursor, coverage cursor and fingerprint of the snapshot).
    /// `existing` holds the rows of [`finish_keys`](Self::finish_keys). The store writes the
    /// result as a one-body plan, with its committed capacity check.
    ///
    /// # Errors
    /// [`DirectoryError::ReceiptConflict`].
    pub fn finish(
        self,
        existing: &ExistingRows,
        events: &[DirectoryEvent],
    ) -> Result<ProjectionWrite, DirectoryError> {
        let mut work = Working::new(self.ctx, existing);
        work.record_events(events, -1, None)?;
        if self.rows_needed {
            let survey = &self.survey;
            work.fence_absent(|uuid| survey.lists(uuid));
        }
        work.mark_applied(events);
        let state = ProjectionState {
            instance_uuid: self.ctx.instance.clone(),
            cursor: self.survey.cursor,
            snapshot_coverage_cursor: self.survey.cursor,
            snapshot_fingerprint: self.survey.fingerprint.clone(),
            last_applied_at: self.ctx.now(),
            lease_expires_at: self.ctx.lease_expires_at(),
        };
        Ok(work.finish(state, true, Some(self.survey.cardinality), true))
    }
}
