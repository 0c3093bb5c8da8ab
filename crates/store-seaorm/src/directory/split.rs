//! Which rows of a plan are new: the apply inserts them with a plain `INSERT` and upserts only
//! the rows that replace a stored one (issue 34: `ON CONFLICT DO UPDATE` made the first apply
//! of a large snapshot slower than inserting the same rows).
//!
//! A row is new when its primary key is not among the rows the store loaded for the plan
//! ([`ExistingRows`]): the load read every key the plan can write (accounts by uuid,
//! workspaces, their memberships and execution state, memberships by uuid, receipts by event
//! uuid; `tenantry_directory::plan`). The state row's lock keeps the instance's other applies
//! out, but not every writer of these tables: the platform's own rows and another instance's
//! apply do not take it. A row such a writer inserts between the load and the write makes the
//! `INSERT` fail, and the apply rolls back as a storage failure; the next apply loads the row
//! and upserts or refuses it. (An upsert would have overwritten it unseen.)

use std::collections::HashSet;
use std::hash::Hash;

use tenantry_directory::plan::PageWrite;
use tenantry_directory::{ExistingRows, ProjectionWrite};

/// How many rows of each table of a plan are new: after [`new_rows_first`], the first that
/// many rows of each table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct NewRows {
    pub(super) accounts: usize,
    pub(super) workspaces: usize,
    pub(super) memberships: usize,
    pub(super) executions: usize,
    pub(super) receipts: usize,
}

/// Moves each table's new rows (key not among `existing`) before the others, keeping the
/// order within both groups, and counts them. The order of a plan's rows is not part of its
/// meaning (each is an upsert by primary key).
pub(super) fn new_rows_first(plan: &mut ProjectionWrite, existing: &ExistingRows) -> NewRows {
    NewRows {
        accounts: partition(&mut plan.accounts, &existing.accounts, |r| &r.uuid),
        workspaces: partition(&mut plan.workspaces, &existing.workspaces, |r| &r.uuid),
        memberships: partition(&mut plan.memberships, &existing.memberships, |r| &r.uuid),
        executions: partition(&mut plan.executions, &existing.executions, |r| {
            &r.workspace_uuid
        }),
        // Receipts are loaded and written for the apply's instance only: the event uuid is
        // the key within it.
        receipts: partition(&mut plan.receipts, &existing.receipts, |r| &r.event_uuid),
    }
}

/// [`new_rows_first`] for one page of a paged snapshot (no receipts).
pub(super) fn new_page_rows_first(page: &mut PageWrite, existing: &ExistingRows) -> NewRows {
    NewRows {
        accounts: partition(&mut page.accounts, &existing.accounts, |r| &r.uuid),
        workspaces: partition(&mut page.workspaces, &existing.workspaces, |r| &r.uuid),
        memberships: partition(&mut page.memberships, &existing.memberships, |r| &r.uuid),
        executions: partition(&mut page.executions, &existing.executions, |r| {
            &r.workspace_uuid
        }),
        receipts: 0,
    }
}

/// Stable partition of `rows`: rows whose key is not a key of `known` first. Returns how many.
fn partition<R, K: Eq + Hash>(rows: &mut Vec<R>, known: &[R], key: impl Fn(&R) -> &K) -> usize {
    if known.is_empty() {
        return rows.len();
    }
    let known: HashSet<&K> = known.iter().map(&key).collect();
    let (mut new, old): (Vec<R>, Vec<R>) = std::mem::take(rows)
        .into_iter()
        .partition(|r| !known.contains(key(r)));
    let count = new.len();
    new.extend(old);
    *rows = new;
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_without_a_stored_key_come_first_in_their_order() {
        let mut rows = vec![(1, 'a'), (2, 'b'), (3, 'c'), (4, 'd'), (5, 'e')];
        let known = [(2, 'x'), (4, 'y'), (9, 'z')];
        let new = partition(&mut rows, &known, |r| &r.0);
        assert_eq!(new, 3);
        assert_eq!(rows, [(1, 'a'), (3, 'c'), (5, 'e'), (2, 'b'), (4, 'd')]);
    }

    #[test]
    fn with_nothing_stored_every_row_is_new() {
        let mut rows = vec![(2, 'b'), (1, 'a')];
        assert_eq!(partition(&mut rows, &[], |r: &(i32, char)| &r.0), 2);
        assert_eq!(rows, [(2, 'b'), (1, 'a')]);
    }
}
