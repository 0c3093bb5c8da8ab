//! Workspace projection: workspaces, their memberships and execution state, the fencing of
//! workspaces a snapshot omits, and the tombstones of a delta.

use std::collections::HashSet;

use super::{Working, rolls_back};
use crate::error::DirectoryError;
use crate::ids::{AccountUuid, MembershipUuid, WorkspaceUuid};
use crate::maps::{
    ExecutionStatus, MembershipStatus, RowSource, WorkspaceStatus, execution_for,
    map_membership_status, map_role,
};
use crate::model::DirectoryWorkspace;
use crate::rows::{ExecutionRow, MembershipRow, WorkspaceRow, needs_absent_fence, to_millis};

impl Working<'_> {
    pub(super) fn apply_workspaces<'w>(
        &mut self,
        workspaces: impl IntoIterator<Item = &'w DirectoryWorkspace>,
        projected_account: impl Fn(&AccountUuid) -> bool,
    ) -> Result<(), DirectoryError> {
        for candidate in workspaces {
            let creator = if projected_account(&candidate.created_by_account_uuid) {
                Some(candidate.created_by_account_uuid.clone())
            } else if candidate.status == WorkspaceStatus::Active {
                return Err(DirectoryError::CreatorNotProjected {
                    workspace: candidate.uuid.clone(),
                    creator: candidate.created_by_account_uuid.clone(),
                });
            } else {
                None
            };
            let next = WorkspaceRow {
                uuid: candidate.uuid.clone(),
                source: RowSource::Directory,
                instance_uuid: Some(self.ctx.instance.clone()),
                name: candidate.name.clone(),
                slug: candidate.slug.clone(),
                workspace_type: candidate.workspace_type.clone(),
                status: candidate.status,
                created_by_account_uuid: creator,
                projection_revision: candidate.projection_revision,
            };
            if let Some(row) = self.workspaces.get(&candidate.uuid) {
                let uuid = &candidate.uuid;
                if row.source != RowSource::Directory {
                    return Err(DirectoryError::LocalWorkspaceCollision {
                        workspace: uuid.clone(),
                    });
                }
                if row.instance_uuid.as_ref() != Some(&self.ctx.instance) {
                    return Err(DirectoryError::WorkspaceOtherInstance {
                        workspace: uuid.clone(),
                    });
                }
                if rolls_back(row.projection_revision, candidate.projection_revision) {
                    return Err(DirectoryError::WorkspaceRevisionRolledBack {
                        workspace: uuid.clone(),
                        stored: row.projection_revision,
                        incoming: candidate.projection_revision,
                    });
                }
                if row.projection_revision == candidate.projection_revision
                    && row != &next
                    // Planted (verification only): one revision takes other content.
                    && !tenantry_kernel::planted!("revision-takes-other-content")
                {
                    return Err(DirectoryError::WorkspaceRevisionConflict {
                        workspace: uuid.clone(),
                        revision: candidate.projection_revision,
                    });
                }
            }
            let previous_status = self.workspaces.get(&candidate.uuid).map(|w| w.status);
            self.workspaces.put(candidate.uuid.clone(), next);
            self.apply_memberships(candidate, previous_status)?;
            self.apply_execution(candidate)?;
        }
        Ok(())
    }

    /// Projects the members of `candidate`. `previous_status` is the status of the stored
    /// workspace row before this apply (`None` when there was none): a stored membership's
    /// status was derived from it, so the member's own fields are compared under it.
    fn apply_memberships(
        &mut self,
        candidate: &DirectoryWorkspace,
        previous_status: Option<WorkspaceStatus>,
    ) -> Result<(), DirectoryError> {
        // Taken, not copied: nothing reads a workspace's index after its members are planned
        // (a workspace comes once in a list, `validate_workspaces`; absent fences and
        // tombstones read only workspaces the list omits).
        let existing = self
            .by_workspace
            .remove(&candidate.uuid)
            .unwrap_or_default();
        let mut included = HashSet::new();
        for member in &candidate.members {
            included.insert(&member.account_uuid);
            let role = map_role(member.role);
            let status = map_membership_status(member.membership_status, candidate.status);
            let joined_at = member.joined_at.map(to_millis);
            let Some(row) = existing
                .get(&member.account_uuid)
                .and_then(|uuid| self.memberships.get(uuid))
            else {
                if self.memberships.get(&member.membership_uuid).is_some() {
                    return Err(DirectoryError::MembershipUuidCollision {
                        membership: member.membership_uuid.clone(),
                    });
                }
                self.memberships.put(
                    member.membership_uuid.clone(),
                    MembershipRow {
                        uuid: member.membership_uuid.clone(),
                        workspace_uuid: candidate.uuid.clone(),
                        account_uuid: member.account_uuid.clone(),
                        role,
                        status,
                        joined_at,
                        projection_revision: member.projection_revision,
                    },
                );
                continue;
            };
            if row.projection_revision == 0 {
                // Revision 0 is platform-owned collaboration state (invitations, role and
                // removal decisions made locally): the directory seeds, never overwrites.
                continue;
            }
            if row.uuid != member.membership_uuid {
                return Err(DirectoryError::MembershipUuidChanged {
                    workspace: candidate.uuid.clone(),
                    account: member.account_uuid.clone(),
                    stored: row.uuid.clone(),
                    incoming: member.membership_uuid.clone(),
                });
            }
            if rolls_back(row.projection_revision, member.projection_revision) {
                return Err(DirectoryError::MembershipRevisionRolledBack {
                    membership: row.uuid.clone(),
                    workspace: candidate.uuid.clone(),
                    stored: row.projection_revision,
                    incoming: member.projection_revision,
                });
            }
            // Own fields vs derived status (a deviation from the reference, see
            // docs/protocol.md "Membership conflicts"): at one membership revision the
            // member's own fields (role, membership status, joined_at) must not change, but the
            // stored status is derived from the workspace status too, and a workspace may be
            // suspended, archived or deleted without new member revisions. So the stored row
            // is compared with what the incoming own fields give under the workspace status
            // the row was derived from, and the derived status may then follow the workspace.
            let own_status = map_membership_status(
                member.membership_status,
                previous_status.unwrap_or(candidate.status),
            );
            if row.projection_revision == member.projection_revision
                && (row.role, row.status, row.joined_at) != (role, own_status, joined_at)
            {
                return Err(DirectoryError::MembershipRevisionConflict {
                    membership: row.uuid.clone(),
                    workspace: candidate.uuid.clone(),
                    revision: member.projection_revision,
                });
            }
            let mut row = row.clone();
            row.role = role;
            row.status = status;
            row.joined_at = joined_at;
            row.projection_revision = member.projection_revision;
            self.memberships.put(row.uuid.clone(), row);
        }
        for (account, uuid) in &existing {
            if included.contains(account) {
                continue;
            }
            let Some(row) = self.memberships.get(uuid) else {
                continue;
            };
            if row.projection_revision == 0 {
                continue;
            }
            let mut row = row.clone();
            row.status = MembershipStatus::Removed;
            row.projection_revision = row.projection_revision.max(candidate.projection_revision);
            self.memberships.put(uuid.clone(), row);
        }
        Ok(())
    }

    fn apply_execution(&mut self, candidate: &DirectoryWorkspace) -> Result<(), DirectoryError> {
        let (state, write_fenced) = execution_for(candidate.status);
        let uuid = &candidate.uuid;
        if let Some(row) = self.executions.get(uuid) {
            if row.source != RowSource::Directory
                || row.instance_uuid.as_ref() != Some(&self.ctx.instance)
            {
                return Err(DirectoryError::ExecutionOwnerInvalid {
                    workspace: uuid.clone(),
                });
            }
            if rolls_back(row.active_generation, candidate.execution_generation) {
                return Err(DirectoryError::ExecutionGenerationRolledBack {
                    workspace: uuid.clone(),
                    stored: row.active_generation,
                    incoming: candidate.execution_generation,
                });
            }
            if rolls_back(row.desired_state_revision, candidate.projection_revision) {
                return Err(DirectoryError::DesiredStateRevisionRolledBack {
                    workspace: uuid.clone(),
                    stored: row.desired_state_revision,
                    incoming: candidate.projection_revision,
                });
            }
            if row.desired_state_revision == candidate.projection_revision
                && (row.active_generation, row.state, row.write_fenced)
                    != (candidate.execution_generation, state, write_fenced)
            {
                return Err(DirectoryError::ExecutionRevisionConflict {
                    workspace: uuid.clone(),
                    revision: candidate.projection_revision,
                });
            }
        }
        self.executions.put(
            uuid.clone(),
            ExecutionRow {
                workspace_uuid: uuid.clone(),
                source: RowSource::Directory,
                instance_uuid: Some(self.ctx.instance.clone()),
                active_generation: candidate.execution_generation,
                state,
                write_fenced,
                desired_state_revision: candidate.projection_revision,
            },
        );
        Ok(())
    }

    /// Archives and fences every loaded projected workspace of the instance that the snapshot
    /// omits (revisions unchanged: a snapshot proves absence, not a revision).
    /// `included` answers whether the snapshot lists a workspace.
    pub(super) fn fence_absent(&mut self, included: impl Fn(&WorkspaceUuid) -> bool) {
        let mut absent: Vec<WorkspaceUuid> = self
            .workspaces
            .values()
            .filter(|w| !included(&w.uuid))
            .filter(|w| needs_absent_fence(w, self.executions.get(&w.uuid), &self.ctx.instance))
            .map(|w| w.uuid.clone())
            .collect();
        absent.sort();
        for uuid in absent {
            if let Some(row) = self.workspaces.get(&uuid) {
                let mut row = row.clone();
                row.status = WorkspaceStatus::Archived;
                self.workspaces.put(uuid.clone(), row);
            }
            self.remove_memberships(&uuid, None);
            if let Some(row) = self.executions.get(&uuid) {
                let mut row = row.clone();
                row.state = ExecutionStatus::Inactive;
                row.write_fenced = true;
                self.executions.put(uuid.clone(), row);
            }
        }
    }

    /// Tombstones a requested workspace the delta omitted. The delta is the provider's
    /// current state, so the omission is at least as new as anything stored for the
    /// workspace: the tombstone's revision is the highest of the batch's announced revision
    /// and the stored workspace, membership and execution-state revisions. A stored revision
    /// above the announced one is not a rollback: an earlier delta answered with the
    /// workspace's state after this batch's event (deltas answer the current state, which can
    /// run ahead of the events consumed), and the removal that the omission shows came after
    /// it. The reference refuses that case ("tombstone revision rolled back"), which leaves
    /// the projection stuck on the page for good; docs/protocol.md records the deviation.
    pub(super) fn tombstone(&mut self, uuid: &WorkspaceUuid, announced: i64) {
        let Some(row) = self.workspaces.get(uuid) else {
            return;
        };
        if row.source != RowSource::Directory
            || row.instance_uuid.as_ref() != Some(&self.ctx.instance)
        {
            return;
        }
        let members: Vec<MembershipUuid> = self
            .by_workspace
            .get(uuid)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let revision = members
            .iter()
            .filter_map(|member| self.memberships.get(member))
            .map(|m| m.projection_revision)
            .chain(self.executions.get(uuid).map(|e| e.desired_state_revision))
            .fold(announced.max(row.projection_revision), i64::max);
        let mut row = row.clone();
        row.status = WorkspaceStatus::Archived;
        row.projection_revision = row.projection_revision.max(revision);
        self.workspaces.put(uuid.clone(), row);
        self.remove_memberships(uuid, Some(revision));
        if let Some(e) = self.executions.get(uuid) {
            let mut e = e.clone();
            e.state = ExecutionStatus::Inactive;
            e.write_fenced = true;
            e.desired_state_revision = e.desired_state_revision.max(revision);
            self.executions.put(uuid.clone(), e);
        }
    }

    /// Marks every membership of a workspace removed; with a tombstone revision, raises each
    /// membership's revision to at least it.
    fn remove_memberships(&mut self, workspace: &WorkspaceUuid, revision: Option<i64>) {
        let members: Vec<MembershipUuid> = self
            .by_workspace
            .get(workspace)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        for uuid in members {
            if let Some(row) = self.memberships.get(&uuid) {
                let mut row = row.clone();
                row.status = MembershipStatus::Removed;
                if let Some(revision) = revision {
                    row.projection_revision = row.projection_revision.max(revision);
                }
                self.memberships.put(uuid, row);
            }
        }
    }
}
