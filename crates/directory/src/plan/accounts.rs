//! Account projection: every member's account at the apply's revision.

use std::collections::{HashMap, HashSet};

use super::{Working, rolls_back};
use crate::error::DirectoryError;
use crate::ids::AccountUuid;
use crate::maps::{AccountStatus, RowSource, map_account_status};
use crate::model::{DirectoryMember, DirectoryWorkspace};
use crate::rows::AccountRow;

type AccountProjection<'m> = (&'m str, &'m str, AccountStatus);

fn member_projection(member: &DirectoryMember) -> AccountProjection<'_> {
    (
        &member.normalized_email,
        &member.display_name,
        map_account_status(member.account_status),
    )
}

impl Working<'_> {
    /// Accounts of every member, at revision `cursor`. Returns the projected account uuids.
    pub(super) fn apply_accounts(
        &mut self,
        workspaces: &[DirectoryWorkspace],
        cursor: i64,
    ) -> Result<HashSet<AccountUuid>, DirectoryError> {
        let mut selected: Vec<&DirectoryMember> = Vec::new();
        let mut by_account: HashMap<&AccountUuid, &DirectoryMember> = HashMap::new();
        let mut email_owner: HashMap<&str, &AccountUuid> = HashMap::new();
        for member in workspaces.iter().flat_map(|w| &w.members) {
            let owner = *email_owner
                .entry(member.normalized_email.as_str())
                .or_insert(&member.account_uuid);
            if owner != &member.account_uuid {
                return Err(DirectoryError::EmailMapsToSeveralAccounts {
                    email: member.normalized_email.clone(),
                    first: owner.clone(),
                    second: member.account_uuid.clone(),
                });
            }
            match by_account.get(&member.account_uuid) {
                Some(previous) => {
                    if member_projection(previous) != member_projection(member) {
                        return Err(DirectoryError::ConflictingAccountProjections {
                            account: member.account_uuid.clone(),
                        });
                    }
                }
                None => {
                    by_account.insert(&member.account_uuid, member);
                    selected.push(member);
                }
            }
        }
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
        Ok(by_account.into_keys().cloned().collect())
    }
}
