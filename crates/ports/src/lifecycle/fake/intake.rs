//! The fake store's intake ([`IntakeStore`]): a plan's commands and control-space write applied
//! at once, idempotent by key.

use async_trait::async_trait;
use tenantry_kernel::IdempotencyKey;
use tenantry_lifecycle::CommandRecord;
use tenantry_lifecycle::intake::{ControlSpaceWrite, IntakePlan};

use super::{InMemoryLifecycleStore, cas_matches, lock};
use crate::lifecycle::{IntakeStore, IntakeStoreError, StoreError, Submitted};

#[async_trait]
impl IntakeStore for InMemoryLifecycleStore {
    async fn submit(&self, plan: &IntakePlan) -> Result<Submitted, IntakeStoreError> {
        self.check_fault()?;
        let mut state = lock(&self.state);
        if let Some(existing) = state
            .commands
            .values()
            .find(|r| r.idempotency_key == plan.command.idempotency_key)
        {
            return Ok(Submitted::Existing(existing.clone()));
        }
        match &plan.control_space {
            ControlSpaceWrite::Insert(space) => {
                let key = (space.tenant_id.clone(), space.control_space_id.clone());
                if state.spaces.contains_key(&key) {
                    return Err(IntakeStoreError::ControlSpaceExists);
                }
                state.spaces.insert(key, space.clone());
            }
            ControlSpaceWrite::Update(cas) => {
                let key = (
                    cas.next.tenant_id.clone(),
                    cas.next.control_space_id.clone(),
                );
                if !state.spaces.contains_key(&key) {
                    return Err(IntakeStoreError::UnknownControlSpace);
                }
                if !cas_matches(&state, cas) {
                    return Err(IntakeStoreError::ControlSpaceConflict {
                        control_space_id: cas.next.control_space_id.clone(),
                    });
                }
                state.spaces.insert(key, cas.next.clone());
            }
            ControlSpaceWrite::BumpRevokeSequence {
                tenant_id,
                control_space_id,
                expected,
            } => {
                let Some(cs) = state
                    .spaces
                    .get_mut(&(tenant_id.clone(), control_space_id.clone()))
                else {
                    return Err(IntakeStoreError::UnknownControlSpace);
                };
                if cs.last_revoke_sequence != *expected {
                    return Err(IntakeStoreError::ControlSpaceConflict {
                        control_space_id: control_space_id.clone(),
                    });
                }
                cs.last_revoke_sequence = expected.saturating_add(1);
            }
        }
        let c = &plan.command;
        let now = self.clock.now();
        let mut record = CommandRecord::enqueued(c, now);
        // The tenant-fair turn, read from the live commands as the SQL stores do.
        let live = || state.commands.values().filter(|r| r.completed_at.is_none());
        let queue = tenantry_lifecycle::turn::Queue {
            now,
            head: live().map(|r| r.turn_at).min(),
        };
        let latest = live()
            .filter(|r| r.tenant_id == c.tenant_id)
            .map(|r| r.turn_at)
            .max();
        record.turn_at = tenantry_lifecycle::turn::next_turn(queue, latest);
        state.commands.insert(record.id.clone(), record.clone());
        Ok(Submitted::Created(record))
    }

    async fn command_by_idempotency_key(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<CommandRecord>, StoreError> {
        self.check_fault()?;
        Ok(lock(&self.state)
            .commands
            .values()
            .find(|r| &r.idempotency_key == key)
            .cloned())
    }
}
