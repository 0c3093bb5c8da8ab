//! The first pass over a snapshot that arrives in pages: the rules that span pages and must
//! hold before any page is planned, checked without holding the pages.
//!
//! A [`SnapshotSurvey`] reads each page once and keeps what a later page needs: counts for the
//! capacity limits, the snapshot fingerprint, and 128-bit digests of the workspace uuids, the
//! membership uuids and every member's account (a workspace's creator must be some member's
//! account, perhaps on a later page). Memory is therefore proportional to the snapshot's
//! identifiers (about 40 bytes per membership), not to its pages. The account rules (one
//! account per email, one projection per account) are checked by the second pass,
//! [`super::PagedSnapshotApply`], as it plans each page ([`HashedLedger`]): a snapshot the
//! projection already holds skips them, as the one-body planner does.
//!
//! Specification: `docs/protocol.md`, "Paged snapshots" (applying page by page).

use std::collections::{HashMap, HashSet};

use std::hash::{DefaultHasher, Hasher};

use super::ApplyContext;
use super::accounts::{AccountLedger, member_projection};
use crate::batch::{BatchCardinality, validate_workspace};
use crate::error::DirectoryError;
use crate::fingerprint::SnapshotFingerprinter;
use crate::ids::{AccountUuid, InstanceUuid};
use crate::maps::WorkspaceStatus;
use crate::model::{DirectoryMember, DirectoryWorkspace};
use tenantry_kernel::Fingerprint;

/// A 128-bit digest that stands for a string in a ledger: two 64-bit SipHash-1-3 values
/// (`std::hash::DefaultHasher`, fixed keys) over distinct seeds, a kind tag and the
/// length-prefixed parts. Two distinct strings share one with probability about 2^-128 per
/// pair; a provider could craft a collision (the keys are fixed), which would only refuse or
/// narrow its own snapshot, so no secret key is needed. (SHA-256 cost about 250 ns per
/// identifier, a tenth of the survey at 100,000 memberships.)
pub(super) type Key = u128;

/// The digest of `parts` under the tag `kind` (one tag per kind of identifier).
pub(super) fn key(kind: u8, parts: &[&str]) -> Key {
    let half = |seed: u8| {
        let mut hasher = DefaultHasher::new();
        hasher.write_u8(seed);
        hasher.write_u8(kind);
        for part in parts {
            hasher.write_usize(part.len());
            hasher.write(part.as_bytes());
        }
        hasher.finish()
    };
    (u128::from(half(0x5a)) << 64) | u128::from(half(0xa5))
}

const WORKSPACE: u8 = 1;
const MEMBERSHIP: u8 = 2;
const ACCOUNT: u8 = 3;
const EMAIL: u8 = 4;
const PROJECTION: u8 = 5;

/// The ledger key of an account uuid.
pub(super) fn account_key(account: &AccountUuid) -> Key {
    key(ACCOUNT, &[account.as_str()])
}

/// The ledger key of a workspace uuid.
pub(super) fn workspace_key(workspace: &crate::ids::WorkspaceUuid) -> Key {
    key(WORKSPACE, &[workspace.as_str()])
}

/// The account rules over every page, by digest (kept by the second pass, which checks each
/// member as its page is planned).
#[derive(Default)]
pub(super) struct HashedLedger {
    /// Email digest → the first account named with it.
    email_owner: HashMap<Key, AccountUuid>,
    /// Account digest → digest of its projection (email, display name, status).
    projections: HashMap<Key, Key>,
}

impl HashedLedger {
    /// Whether a member of `account` was checked already (its row is planned).
    pub(super) fn has_account(&self, account: &AccountUuid) -> bool {
        self.projections.contains_key(&account_key(account))
    }
}

impl AccountLedger<'_> for HashedLedger {
    fn email_owner(&mut self, member: &DirectoryMember) -> Option<AccountUuid> {
        let owner = self
            .email_owner
            .entry(key(EMAIL, &[&member.normalized_email]))
            .or_insert_with(|| member.account_uuid.clone());
        (owner != &member.account_uuid).then(|| owner.clone())
    }

    fn projection(&mut self, member: &DirectoryMember) -> Option<bool> {
        let (email, name, status) = member_projection(member);
        let projection = key(PROJECTION, &[email, name, status.as_str()]);
        match self.projections.entry(account_key(&member.account_uuid)) {
            std::collections::hash_map::Entry::Occupied(seen) => {
                (*seen.get() == projection).then_some(false)
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(projection);
                Some(true)
            }
        }
    }
}

/// The first pass over a snapshot's pages ([`push`](Self::push) each page's workspaces in the
/// order received, then [`finish`](Self::finish)). A snapshot served whole is one page.
pub struct SnapshotSurvey {
    instance_uuid: InstanceUuid,
    cursor: i64,
    /// `None` when the caller computes the fingerprint itself ([`Self::without_fingerprint`]).
    fingerprint: Option<SnapshotFingerprinter>,
    workspaces: usize,
    memberships: usize,
    active: usize,
    workspace_keys: HashSet<Key>,
    membership_keys: HashSet<Key>,
    /// Digests of every member's account.
    account_keys: HashSet<Key>,
    /// The first broken rule of `validate_workspaces`, in input order.
    invalid: Option<DirectoryError>,
}

impl SnapshotSurvey {
    /// Starts the survey of the snapshot of `instance_uuid` at `cursor` (as its first page
    /// names them).
    pub fn new(instance_uuid: InstanceUuid, cursor: i64) -> Self {
        Self {
            fingerprint: Some(SnapshotFingerprinter::new(&instance_uuid)),
            instance_uuid,
            cursor,
            workspaces: 0,
            memberships: 0,
            active: 0,
            workspace_keys: HashSet::new(),
            membership_keys: HashSet::new(),
            account_keys: HashSet::new(),
            invalid: None,
        }
    }

    /// The same survey without the fingerprint, for a caller that computes it beside the
    /// survey (on another thread, with [`SnapshotFingerprinter`] over the same pages in the
    /// same order) and ends with [`finish_with`](Self::finish_with).
    #[must_use]
    pub fn without_fingerprint(mut self) -> Self {
        self.fingerprint = None;
        self
    }

    /// Reads one page's workspaces. Pages must come in ascending uuid order (each page's
    /// workspaces above the previous page's, as `crate::paging::SnapshotPages` checks); within
    /// a page any order is accepted. A broken rule is kept for [`finish`](Self::finish), which
    /// reports them in the one-body planner's order, so every page is still counted.
    pub fn push(&mut self, workspaces: &[&DirectoryWorkspace]) {
        self.workspaces += workspaces.len();
        for workspace in workspaces.iter().copied() {
            self.memberships += workspace.members.len();
            if workspace.status == WorkspaceStatus::Active {
                self.active += 1;
            }
        }
        if self.invalid.is_some() {
            return;
        }
        for workspace in workspaces.iter().copied() {
            let checked = validate_workspace(
                workspace,
                |uuid| self.workspace_keys.insert(workspace_key(uuid)),
                |uuid| {
                    self.membership_keys
                        .insert(key(MEMBERSHIP, &[uuid.as_str()]))
                },
            );
            if let Err(error) = checked {
                self.invalid = Some(error);
                return;
            }
            for member in &workspace.members {
                self.account_keys.insert(account_key(&member.account_uuid));
            }
        }
        if let Some(fingerprint) = &mut self.fingerprint {
            let mut sorted: Vec<&DirectoryWorkspace> = workspaces.to_vec();
            sorted.sort_by(|a, b| a.uuid.cmp(&b.uuid));
            for workspace in sorted {
                fingerprint.push(workspace);
            }
        }
    }

    /// Ends the survey with the rules the one-body planner checks first, in its order:
    /// capacity, instance, then the list's own consistency.
    ///
    /// # Errors
    /// [`DirectoryError::SnapshotWorkspaceCapacity`], [`DirectoryError::MembershipCapacity`],
    /// [`DirectoryError::ActiveWorkspaceCapacity`], [`DirectoryError::WrongInstance`], or the
    /// first broken rule of [`crate::batch::validate_workspaces`] over all pages.
    pub fn finish(mut self, ctx: &ApplyContext) -> Result<SurveyedSnapshot, DirectoryError> {
        let fingerprint = match self.fingerprint.take() {
            Some(fingerprint) => fingerprint,
            None => SnapshotFingerprinter::new(&self.instance_uuid),
        };
        self.finish_with(ctx, fingerprint.finish())
    }

    /// [`finish`](Self::finish) with the snapshot's fingerprint computed by the caller (see
    /// [`without_fingerprint`](Self::without_fingerprint)).
    ///
    /// # Errors
    /// As [`finish`](Self::finish).
    pub fn finish_with(
        self,
        ctx: &ApplyContext,
        fingerprint: Fingerprint,
    ) -> Result<SurveyedSnapshot, DirectoryError> {
        let limits = &ctx.limits;
        if self.workspaces > limits.max_snapshot_workspaces {
            return Err(DirectoryError::SnapshotWorkspaceCapacity {
                count: self.workspaces,
                limit: limits.max_snapshot_workspaces,
            });
        }
        if self.memberships > limits.max_snapshot_memberships {
            return Err(DirectoryError::MembershipCapacity {
                count: self.memberships,
                limit: limits.max_snapshot_memberships,
            });
        }
        if self.active > limits.max_active_workspaces {
            return Err(DirectoryError::ActiveWorkspaceCapacity {
                count: self.active,
                limit: limits.max_active_workspaces,
            });
        }
        if self.instance_uuid != ctx.instance {
            return Err(DirectoryError::WrongInstance {
                what: "snapshot",
                expected: ctx.instance.clone(),
                actual: self.instance_uuid,
            });
        }
        if let Some(invalid) = self.invalid {
            return Err(invalid);
        }
        Ok(SurveyedSnapshot {
            cursor: self.cursor,
            fingerprint,
            cardinality: BatchCardinality {
                workspaces: self.workspaces,
                memberships: self.memberships,
            },
            accounts: self.account_keys,
            workspaces: self.workspace_keys,
        })
    }
}

/// What the survey of a valid snapshot keeps for the second pass.
#[derive(Debug)]
pub struct SurveyedSnapshot {
    /// The snapshot's cursor.
    pub cursor: i64,
    /// The snapshot's fingerprint ([`crate::fingerprint::snapshot_fingerprint`] of the
    /// joined pages).
    pub fingerprint: Fingerprint,
    /// Sizes of the snapshot.
    pub cardinality: BatchCardinality,
    /// Digests of the projected accounts (every member's account).
    accounts: HashSet<Key>,
    /// Digests of the listed workspaces.
    workspaces: HashSet<Key>,
}

impl SurveyedSnapshot {
    /// Whether the snapshot lists `workspace`.
    pub fn lists(&self, workspace: &crate::ids::WorkspaceUuid) -> bool {
        self.workspaces.contains(&workspace_key(workspace))
    }

    /// Whether `account` is some member's account in the snapshot.
    pub(super) fn projects(&self, account: &AccountUuid) -> bool {
        self.accounts.contains(&account_key(account))
    }
}
