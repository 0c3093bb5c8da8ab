//! One value for any lifecycle request, and the receipt intake returns for it.
//!
//! Every intake path (the engine's `CommandIntake`, the store's enqueue inside a caller's
//! transaction) runs the same steps: look up the idempotency key, treat a hit as a replay (same
//! fingerprint) or a conflict (different one), otherwise read the control space, plan, and
//! write. [`IntakeRequest`] gives those steps to every path as plain functions.

use chrono::{DateTime, Utc};
use tenantry_kernel::{
    CommandId, ControlSpaceId, Fingerprint, IdempotencyKey, OperationId, TenantId,
};

use super::{
    CreateControlSpace, IntakeError, IntakePlan, NewIds, RequestDeletion, RequestRevocation,
    request_fingerprint,
};
use crate::command::{CommandRecord, Operation};
use crate::control_space::ControlSpace;

/// Any of the three lifecycle requests. Built with `From` from each request type, so intake
/// functions can take `impl Into<IntakeRequest>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntakeRequest {
    /// Create a control space and enqueue its provision.
    Create(CreateControlSpace),
    /// Move a control space to deleting and enqueue its delete command.
    Delete(RequestDeletion),
    /// Enqueue a revoke command with the control space's next revoke sequence.
    Revoke(RequestRevocation),
}

impl From<CreateControlSpace> for IntakeRequest {
    fn from(request: CreateControlSpace) -> Self {
        Self::Create(request)
    }
}

impl From<RequestDeletion> for IntakeRequest {
    fn from(request: RequestDeletion) -> Self {
        Self::Delete(request)
    }
}

impl From<RequestRevocation> for IntakeRequest {
    fn from(request: RequestRevocation) -> Self {
        Self::Revoke(request)
    }
}

impl IntakeRequest {
    /// The request's idempotency key.
    pub fn idempotency_key(&self) -> &IdempotencyKey {
        match self {
            Self::Create(r) => &r.idempotency_key,
            Self::Delete(r) => &r.idempotency_key,
            Self::Revoke(r) => &r.idempotency_key,
        }
    }

    /// The control space the request acts on: `(tenant, control space)`.
    pub fn target(&self) -> (&TenantId, &ControlSpaceId) {
        match self {
            Self::Create(r) => (&r.tenant_id, &r.control_space_id),
            Self::Delete(r) => (&r.tenant_id, &r.control_space_id),
            Self::Revoke(r) => (&r.tenant_id, &r.control_space_id),
        }
    }

    /// The operation of the command the request enqueues.
    pub fn operation(&self) -> Operation {
        match self {
            Self::Create(_) => Operation::Provision,
            Self::Delete(_) => Operation::Delete,
            Self::Revoke(_) => Operation::Revoke,
        }
    }

    /// Whether planning needs the control space's current row (deletion and revocation do; a
    /// creation plans an insert and needs nothing).
    pub fn reads_control_space(&self) -> bool {
        !matches!(self, Self::Create(_))
    }

    /// The request's fingerprint (see [`request_fingerprint`]): what a replay with the same key
    /// must match.
    pub fn fingerprint(&self) -> Fingerprint {
        let operation = self.operation();
        match self {
            Self::Create(r) => request_fingerprint(&operation, r),
            Self::Delete(r) => request_fingerprint(&operation, r),
            Self::Revoke(r) => request_fingerprint(&operation, r),
        }
    }

    /// Plans the writes of the request against `current`, the control space as read in the
    /// transaction that will apply the plan (`None` when it does not exist; ignored by a
    /// creation). `now` stamps the control-space row.
    ///
    /// # Errors
    /// The [`IntakeError`] of the request type's own `plan`.
    pub fn plan(
        &self,
        current: Option<&ControlSpace>,
        ids: NewIds,
        now: DateTime<Utc>,
    ) -> Result<IntakePlan, IntakeError> {
        match self {
            Self::Create(r) => r.plan(ids, now),
            Self::Delete(r) => r.plan(current, ids, now),
            Self::Revoke(r) => r.plan(current, ids, now),
        }
    }

    /// The answer to a request whose idempotency key already names `existing`: the original
    /// receipt, marked as a replay, when the fingerprints match.
    ///
    /// # Errors
    /// [`IntakeError::IdempotencyConflict`] when the key was used for a different request.
    pub fn replay(&self, existing: &CommandRecord) -> Result<IntakeReceipt, IntakeError> {
        if existing.request_fingerprint == self.fingerprint() {
            Ok(IntakeReceipt::of(existing, true))
        } else {
            Err(IntakeError::IdempotencyConflict {
                key: self.idempotency_key().clone(),
            })
        }
    }

    /// The error for a creation whose control space id is taken.
    pub fn control_space_exists(&self) -> IntakeError {
        let (tenant, control_space) = self.target();
        IntakeError::ControlSpaceExists {
            tenant_id: tenant.clone(),
            control_space_id: control_space.clone(),
        }
    }

    /// The error for a creation whose control space id is taken by `existing` (as read after
    /// the refusal; `None` when it could not be read): [`IntakeError::ControlSpaceDeleted`]
    /// when that control space is deleted, so the answer says it was deleted rather than that
    /// it exists; otherwise [`Self::control_space_exists`].
    pub fn control_space_taken(&self, existing: Option<&ControlSpace>) -> IntakeError {
        match existing {
            Some(cs) if cs.state == crate::ControlSpaceState::Deleted => {
                let (tenant, control_space) = self.target();
                IntakeError::ControlSpaceDeleted {
                    tenant_id: tenant.clone(),
                    control_space_id: control_space.clone(),
                }
            }
            _ => self.control_space_exists(),
        }
    }

    /// The error for a request whose control space does not exist.
    pub fn unknown_control_space(&self) -> IntakeError {
        let (tenant, control_space) = self.target();
        IntakeError::UnknownControlSpace {
            tenant_id: tenant.clone(),
            control_space_id: control_space.clone(),
        }
    }
}

/// What a request created (or, for a replay, created the first time).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntakeReceipt {
    /// The enqueued command.
    pub command_id: CommandId,
    /// Its lifecycle operation.
    pub operation_id: OperationId,
    /// Owning tenant.
    pub tenant_id: TenantId,
    /// Target control space.
    pub control_space_id: ControlSpaceId,
    /// What it does.
    pub operation: Operation,
    /// Whether this call replayed an earlier request with the same key.
    pub replayed: bool,
}

impl IntakeReceipt {
    /// The receipt of `record`; `replayed` says whether this call created it (`false`) or
    /// found it under its idempotency key (`true`).
    pub fn of(record: &CommandRecord, replayed: bool) -> Self {
        Self {
            command_id: record.id.clone(),
            operation_id: record.operation_id.clone(),
            tenant_id: record.tenant_id.clone(),
            control_space_id: record.control_space_id.clone(),
            operation: record.operation.clone(),
            replayed,
        }
    }

    /// The receipt of the command `plan` enqueues, for the call that wrote it.
    pub fn created(plan: &IntakePlan) -> Self {
        let command = &plan.command;
        Self {
            command_id: command.id.clone(),
            operation_id: command.operation_id.clone(),
            tenant_id: command.tenant_id.clone(),
            control_space_id: command.control_space_id.clone(),
            operation: command.operation.clone(),
            replayed: false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn create(key: &str, name: &str) -> IntakeRequest {
        CreateControlSpace::new(
            TenantId::parse("acme").unwrap(),
            ControlSpaceId::parse("cs-1").unwrap(),
            IdempotencyKey::parse(key).unwrap(),
            name,
            "docs",
        )
        .into()
    }

    fn ids() -> NewIds {
        NewIds {
            command_id: CommandId::parse("cmd-1").unwrap(),
            operation_id: OperationId::parse("op-1").unwrap(),
        }
    }

    fn record_of(request: &IntakeRequest) -> CommandRecord {
        let plan = request.plan(None, ids(), DateTime::UNIX_EPOCH).unwrap();
        CommandRecord::enqueued(&plan.command, DateTime::UNIX_EPOCH)
    }

    #[test]
    fn a_replay_with_the_same_request_returns_the_original_receipt() {
        let request = create("k-1", "Docs");
        let receipt = request.replay(&record_of(&request)).unwrap();
        assert!(receipt.replayed);
        assert_eq!(receipt.command_id.as_str(), "cmd-1");
        assert_eq!(receipt.operation, Operation::Provision);
    }

    #[test]
    fn a_replay_with_a_different_request_is_an_idempotency_conflict() {
        let original = record_of(&create("k-1", "Docs"));
        let error = create("k-1", "Other name").replay(&original).unwrap_err();
        assert!(matches!(error, IntakeError::IdempotencyConflict { key } if key.as_str() == "k-1"));
    }

    #[test]
    fn the_key_does_not_change_the_fingerprint() {
        assert_eq!(
            create("k-1", "Docs").fingerprint(),
            create("k-2", "Docs").fingerprint()
        );
    }

    #[test]
    fn only_creation_plans_without_the_control_space() {
        assert!(!create("k", "Docs").reads_control_space());
        let delete = IntakeRequest::from(RequestDeletion::new(
            TenantId::parse("acme").unwrap(),
            ControlSpaceId::parse("cs-1").unwrap(),
            IdempotencyKey::parse("k").unwrap(),
        ));
        assert!(delete.reads_control_space());
        assert_eq!(delete.operation(), Operation::Delete);
        assert!(matches!(
            delete.plan(None, ids(), DateTime::UNIX_EPOCH),
            Err(IntakeError::UnknownControlSpace { .. })
        ));
    }

    #[test]
    fn a_created_receipt_names_the_planned_command() {
        let plan = create("k", "Docs")
            .plan(None, ids(), DateTime::UNIX_EPOCH)
            .unwrap();
        let receipt = IntakeReceipt::created(&plan);
        assert!(!receipt.replayed);
        assert_eq!(receipt.operation_id.as_str(), "op-1");
        assert_eq!(receipt.control_space_id.as_str(), "cs-1");
    }
}
