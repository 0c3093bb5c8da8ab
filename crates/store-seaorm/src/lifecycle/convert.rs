//! Conversions between the private entities and the domain types, at the adapter boundary.

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::Set;
use tenantry_kernel::{
    CommandId, ControlSpaceId, Fingerprint, IdempotencyKey, KnowledgeSpaceId, LeaseEpoch,
    LeaseOwner, OperationId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::intake::NewCommand;
use tenantry_lifecycle::{
    ClaimedCommand, ClaimedControlSpace, CommandRecord, CommandStatus, ControlSpace,
    ControlSpaceState, LeaseToken, Operation,
};
use tenantry_ports::lifecycle::StoreError;

use super::entity::{control_space, outbox};

/// Unix milliseconds of a time.
pub fn millis(at: DateTime<Utc>) -> i64 {
    at.timestamp_millis()
}

fn time(column: &str, ms: i64) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_millis(ms).ok_or_else(|| corrupt(column, &ms.to_string()))
}

fn corrupt(column: &str, value: &str) -> StoreError {
    StoreError::corrupt(format!("column {column} holds an invalid value {value:?}"))
}

fn id<T, E>(
    column: &str,
    value: String,
    parse: impl FnOnce(String) -> Result<T, E>,
) -> Result<T, StoreError> {
    let shown = value.clone();
    parse(value).map_err(|_| corrupt(column, &shown))
}

pub fn to_control_space(row: control_space::Model) -> Result<ControlSpace, StoreError> {
    Ok(ControlSpace {
        state: ControlSpaceState::parse(&row.state).ok_or_else(|| corrupt("state", &row.state))?,
        tenant_id: id("tenant_id", row.tenant_id, TenantId::parse)?,
        control_space_id: id(
            "control_space_id",
            row.control_space_id,
            ControlSpaceId::parse,
        )?,
        lifecycle_operation_id: id(
            "lifecycle_operation_id",
            row.lifecycle_operation_id,
            OperationId::parse,
        )?,
        resource_version: row.resource_version,
        provisioning_key: id(
            "provisioning_key",
            row.provisioning_key,
            ProvisioningKey::parse,
        )?,
        knowledge_space_id: row
            .knowledge_space_id
            .map(|v| id("knowledge_space_id", v, KnowledgeSpaceId::parse))
            .transpose()?,
        knowledge_space_revision: row.knowledge_space_revision,
        deletion_irreversible_at: row
            .deletion_irreversible_at
            .map(|ms| time("deletion_irreversible_at", ms))
            .transpose()?,
        last_revoke_sequence: row.last_revoke_sequence,
        created_at: time("created_at", row.created_at)?,
        updated_at: time("updated_at", row.updated_at)?,
    })
}

pub fn control_space_row(space: &ControlSpace) -> control_space::ActiveModel {
    control_space::ActiveModel {
        tenant_id: Set(space.tenant_id.as_str().to_owned()),
        control_space_id: Set(space.control_space_id.as_str().to_owned()),
        state: Set(space.state.as_str().to_owned()),
        lifecycle_operation_id: Set(space.lifecycle_operation_id.as_str().to_owned()),
        resource_version: Set(space.resource_version),
        provisioning_key: Set(space.provisioning_key.as_str().to_owned()),
        knowledge_space_id: Set(space
            .knowledge_space_id
            .as_ref()
            .map(|k| k.as_str().to_owned())),
        knowledge_space_revision: Set(space.knowledge_space_revision),
        deletion_irreversible_at: Set(space.deletion_irreversible_at.map(millis)),
        last_revoke_sequence: Set(space.last_revoke_sequence),
        created_at: Set(millis(space.created_at)),
        updated_at: Set(millis(space.updated_at)),
    }
}

/// The row of a new command, due at `now` (the store's clock), enqueued at `now`, taking turn
/// `turn` (`tenantry_lifecycle::turn`).
pub fn new_command_row(
    command: &NewCommand,
    now: DateTime<Utc>,
    turn: DateTime<Utc>,
) -> outbox::ActiveModel {
    outbox::ActiveModel {
        id: Set(command.id.as_str().to_owned()),
        tenant_id: Set(command.tenant_id.as_str().to_owned()),
        control_space_id: Set(command.control_space_id.as_str().to_owned()),
        operation_id: Set(command.operation_id.as_str().to_owned()),
        idempotency_key: Set(command.idempotency_key.as_str().to_owned()),
        request_fingerprint: Set(command.request_fingerprint.as_str().to_owned()),
        operation: Set(command.operation.as_str().to_owned()),
        payload: Set(command.payload.to_string()),
        status: Set(CommandStatus::Pending.as_str().to_owned()),
        attempt_count: Set(0),
        lease_owner: Set(None),
        lease_expires_at: Set(None),
        lease_epoch: Set(0),
        next_attempt_at: Set(millis(now)),
        last_error_code: Set(None),
        last_error_message: Set(None),
        created_at: Set(millis(now)),
        completed_at: Set(None),
        attempt_window_ends_at: Set(None),
        prior_window_ends_at: Set(None),
        attempt_budget_base: Set(0),
        failed_at: Set(None),
        trace_context: Set(command.trace_context.clone()),
        turn_at: Set(millis(turn)),
    }
}

pub fn to_record(row: outbox::Model) -> Result<CommandRecord, StoreError> {
    Ok(CommandRecord {
        status: CommandStatus::parse(&row.status).ok_or_else(|| corrupt("status", &row.status))?,
        payload: serde_json::from_str(&row.payload)
            .map_err(|_| corrupt("payload", &row.payload))?,
        id: id("id", row.id, CommandId::parse)?,
        tenant_id: id("tenant_id", row.tenant_id, TenantId::parse)?,
        control_space_id: id(
            "control_space_id",
            row.control_space_id,
            ControlSpaceId::parse,
        )?,
        operation_id: id("operation_id", row.operation_id, OperationId::parse)?,
        idempotency_key: id(
            "idempotency_key",
            row.idempotency_key,
            IdempotencyKey::parse,
        )?,
        request_fingerprint: Fingerprint::from_stored(row.request_fingerprint),
        operation: Operation::parse(&row.operation),
        attempt_count: row.attempt_count,
        attempt_budget_base: row.attempt_budget_base,
        lease_owner: row
            .lease_owner
            .map(|v| id("lease_owner", v, LeaseOwner::parse))
            .transpose()?,
        lease_expires_at: row
            .lease_expires_at
            .map(|ms| time("lease_expires_at", ms))
            .transpose()?,
        lease_epoch: LeaseEpoch(row.lease_epoch),
        next_attempt_at: time("next_attempt_at", row.next_attempt_at)?,
        turn_at: time("turn_at", row.turn_at)?,
        // Any stored string decodes: one Tenantry names, or a remote's own code verbatim.
        last_error_code: row.last_error_code.map(tenantry_lifecycle::ErrorCode::from),
        last_error_message: row.last_error_message,
        created_at: time("created_at", row.created_at)?,
        completed_at: row
            .completed_at
            .map(|ms| time("completed_at", ms))
            .transpose()?,
        attempt_window_ends_at: row
            .attempt_window_ends_at
            .map(|ms| time("attempt_window_ends_at", ms))
            .transpose()?,
        trace_context: row.trace_context,
    })
}

/// A claimed row as the domain's claimed command; `lease_duration` is the claim's lease
/// length, so the claim time is `lease_expires_at - lease_duration` (store clock).
pub fn to_claimed(
    row: outbox::Model,
    lease_duration: std::time::Duration,
) -> Result<ClaimedCommand, StoreError> {
    let record = to_record(row)?;
    let (Some(owner), Some(expires_at)) = (record.lease_owner, record.lease_expires_at) else {
        return Err(StoreError::corrupt(format!(
            "claimed command {} did not carry a complete lease",
            record.id
        )));
    };
    Ok(ClaimedCommand {
        tenant_id: record.tenant_id,
        control_space_id: record.control_space_id,
        operation_id: record.operation_id,
        idempotency_key: record.idempotency_key,
        operation: record.operation,
        payload: record.payload,
        attempt_count: record.attempt_count,
        attempt_budget_base: record.attempt_budget_base,
        lease: LeaseToken {
            command_id: record.id,
            owner,
            epoch: record.lease_epoch,
            expires_at,
        },
        claimed_at: expires_at
            - chrono::Duration::from_std(lease_duration).unwrap_or(chrono::Duration::zero()),
        created_at: record.created_at,
        trace_context: record.trace_context,
        // Filled in by the claim once it has read the claimed commands' control spaces.
        control_space: ClaimedControlSpace::NotRead,
    })
}
