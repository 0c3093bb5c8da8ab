//! Account projection: every member's account at the apply's revision.

use std::collections::{HashMap, HashSet};

use super::{Working, rolls_back};
use crate::error::DirectoryError;
use crate::ids::AccountUuid;
use crate::maps::{AccountStatus, RowSource, map_account_status};
use crate::model::{DirectoryMember, DirectoryWorkspace};
use crate::rows::AccountRow;

pub(super) type AccountProjection<'m> = (&'m str, &'m str, AccountStatus);

pub(super) fn member_projection(member: &DirectoryMember) -> AccountProjection<'_> {
    (
        &member.normalized_email,
        &member.display_name,
        map_account_status(member.account_status),
    )
}

/// The snapshot-wide account rules, remembered over the members seen so far: one account per
/// email, one projection per account. [`check_member`] applies them member by member.
pub(super) trait AccountLedger<'m> {
    /// Records `member`'s email for its account; returns the account recorded first for that
    /// email when it is another one.
    fn email_owner(&mut self, member: &'m DirectoryMember) -> Option<AccountUuid>;
    /// Records `member`'s account projection: `Some(true)` the first time the account is
    /// seen, `Some(false)` when it repeats the recorded projection, `None` when it differs.
    fn projection(&mut self, member: &'m DirectoryMember) -> Option<bool>;
}

/// Checks one member against the ledger. Returns whether the member is its account's first
/// occurrence (the one the account row is planned from).
///
/// # Errors
/// [`DirectoryError::EmailMapsToSeveralAccounts`] or
/// [`DirectoryError::ConflictingAccountProjections`].
pub(super) fn check_member<'m>(
    ledger: &mut impl AccountLedger<'m>,
    member: &'m DirectoryMember,
) -> Result<bool, DirectoryError> {
    if let Some(first) = ledger.email_owner(member) {
        return Err(DirectoryError::EmailMapsToSeveralAccounts {
            email: member.normalized_email.clone(),
            first,
            second: member.account_uuid.clone(),
        });
    }
    ledger
        .projection(member)
        .ok_or_else(|| DirectoryError::ConflictingAccountProjections {
            account: member.account_uuid.clone(),
        })
}

/// The ledger of one input held in memory, by reference.
#[derive(Default)]
struct InputLedger<'m> {
    email_owner: HashMap<&'m str, &'m AccountUuid>,
    by_account: HashMap<&'m AccountUuid, &'m DirectoryMember>,
}

impl<'m> AccountLedger<'m> for InputLedger<'m> {
    fn email_owner(&mut self, member: &'m DirectoryMember) -> Option<AccountUuid> {
        let owner = *self
            .email_owner
            .entry(member.normalized_email.as_str())
            .or_insert(&member.account_uuid);
        (owner != &member.account_uuid).then(|| owner.clone())
    }

    fn projection(&mut self, member: &'m DirectoryMember) -> Option<bool> {
        match self.by_account.get(&member.account_uuid) {
            Some(previous) => {
                (member_projection(previous) == member_projection(member)).then_some(false)
            }
            None => {
                self.by_account.insert(&member.account_uuid, member);
                Some(true)
            }
        }
    }
}

impl Working<'_> {
    /// Accounts of every member, at revision `cursor`. Returns the projected account uuids.
    pub(super) fn apply_accounts(
        &mut self,
        workspaces: &[DirectoryWorkspace],
        cursor: i64,
    ) -> Result<HashSet<AccountUuid>, DirectoryError> {
        let mut ledger = InputLedger::default();
        let mut selected: Vec<&DirectoryMember> = Vec::new();
        for member in workspaces.iter().flat_map(|w| &w.members) {
            if check_member(&mut ledger, member)? {
                selected.push(member);
            }
        }
        self.plan_accounts(selected, cursor)?;
        Ok(ledger.by_account.into_keys().cloned().collect())
    }

    /// Plans the account row of each member in `selected` (one member per account, already
    /// checked with [`check_member`]) against the stored rows, at revision `cursor`.
    pub(super) fn plan_accounts<'m>(
        &mut self,
        selected: impl IntoIterator<Item = &'m DirectoryMember>,
        cursor: i64,
    ) -> Result<(), DirectoryError> {
        for member in selected {
            let account = &member.account_uuid;
            if let Some(owner) = self.accounts_by_email.get(&member.normalized_email)
                && owner != account
            {
                return Err(DirectoryError::EmailCollision {
                    account: account.clone(),
                    other: owner.clone(),
                });
            }
            let status = map_account_status(member.account_status);
            let Some(row) = self.accounts.get(account) else {
                self.accounts.put(
                    account.clone(),
                    AccountRow {
                        uuid: account.clone(),
                        normalized_email: member.normalized_email.clone(),
                        display_name: member.display_name.clone(),
                        status,
                        source: RowSource::Directory,
                        projection_revision: cursor,
                    },
                );
                self.accounts_by_email
                    .insert(member.normalized_email.clone(), account.clone());
                continue;
            };
            if row.source != RowSource::Directory {
                return Err(DirectoryError::LocalAccountCollision {
                    account: account.clone(),
                });
            }
            if rolls_back(row.projection_revision, cursor) {
                return Err(DirectoryError::AccountRevisionRolledBack {
                    account: account.clone(),
                    stored: row.projection_revision,
                    incoming: cursor,
                });
            }
            let persisted = (
                row.normalized_email.as_str(),
                row.display_name.as_str(),
                row.status,
            );
            let unchanged = persisted == member_projection(member);
            if row.projection_revision == cursor && !unchanged {
                return Err(DirectoryError::AccountRevisionConflict {
                    account: account.clone(),
                    revision: cursor,
                });
            }
            if unchanged {
                // A rename of the workspace or another member's change must not bump this
                // account's revision: it advances only when its own projection changes.
                continue;
            }
            let mut row = row.clone();
            row.normalized_email = member.normalized_email.clone();
            row.display_name = member.display_name.clone();
            row.status = status;
            row.projection_revision = cursor;
            self.accounts.put(account.clone(), row);
        }
        Ok(())
    }
}
