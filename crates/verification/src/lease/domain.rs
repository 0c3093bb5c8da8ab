//! The real domain values the model's abstract state stands for: ticks as store times, the
//! fixed ids, control spaces, outbox rows as command records, payloads and claims, so the
//! model runs the real saga functions on them.

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, LeaseEpoch, LeaseOwner,
    OperationId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::{
    ClaimedCommand, CommandRecord, ControlSpace, DeletePayload, LeaseToken, Operation,
    ProvisionPayload, RemoteSpace, RetryPolicy,
};

use super::{DELETE, HeldLease, MAX_CLAIMS, OutboxRow, PROVISION, SpaceView};

pub(super) fn t(tick: u8) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + i64::from(tick), 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

pub(super) fn tick_of(at: DateTime<Utc>) -> u8 {
    u8::try_from(at.timestamp() - 1_800_000_000).unwrap_or(u8::MAX)
}

// The literals below are valid ids; a parse failure would be a defect of this model.
#[allow(clippy::expect_used)]
pub(super) mod ids {
    use super::*;
    pub fn tenant() -> TenantId {
        TenantId::parse("t1").expect("valid id")
    }
    pub fn space() -> ControlSpaceId {
        ControlSpaceId::parse("cs1").expect("valid id")
    }
    pub fn op(cmd: usize) -> OperationId {
        OperationId::parse(if cmd == PROVISION { "op-p" } else { "op-d" }).expect("valid id")
    }
    pub fn command(cmd: usize) -> CommandId {
        CommandId::parse(if cmd == PROVISION { "c-p" } else { "c-d" }).expect("valid id")
    }
    pub fn key(cmd: usize) -> IdempotencyKey {
        IdempotencyKey::parse(if cmd == PROVISION { "k-p" } else { "k-d" }).expect("valid id")
    }
    pub fn pk() -> ProvisioningKey {
        ProvisioningKey::parse("pk").expect("valid id")
    }
    pub fn ks(index: u8) -> KnowledgeSpaceId {
        KnowledgeSpaceId::parse(format!("ks-{index}")).expect("valid id")
    }
    pub fn owner(worker: u8) -> LeaseOwner {
        LeaseOwner::parse(format!("w{worker}")).expect("valid id")
    }
}

pub(super) fn ks_index(id: &KnowledgeSpaceId) -> u8 {
    id.as_str()
        .strip_prefix("ks-")
        .and_then(|n| n.parse().ok())
        .unwrap_or(u8::MAX)
}

pub(super) fn control_space(cs: &SpaceView) -> ControlSpace {
    ControlSpace {
        tenant_id: ids::tenant(),
        control_space_id: ids::space(),
        state: cs.state,
        lifecycle_operation_id: ids::op(if cs.owned_by_delete {
            DELETE
        } else {
            PROVISION
        }),
        resource_version: i64::from(cs.version),
        provisioning_key: ids::pk(),
        knowledge_space_id: cs.space.map(ids::ks),
        knowledge_space_revision: i64::from(cs.revision),
        deletion_irreversible_at: cs.irreversible.then(|| t(0)),
        last_revoke_sequence: 0,
        created_at: t(0),
        updated_at: t(0),
    }
}

pub(super) fn abstract_cs(cs: &ControlSpace) -> SpaceView {
    SpaceView {
        state: cs.state,
        owned_by_delete: cs.lifecycle_operation_id == ids::op(DELETE),
        version: u8::try_from(cs.resource_version).unwrap_or(u8::MAX),
        space: cs.knowledge_space_id.as_ref().map(ks_index),
        revision: u8::try_from(cs.knowledge_space_revision).unwrap_or(u8::MAX),
        irreversible: cs.deletion_irreversible_at.is_some(),
    }
}

/// The row as the in-memory store's rules read it (the columns they look at; the rest is the
/// provision's), built from a template so the rules cost a clone per call.
pub(super) fn store_view(row: &OutboxRow) -> CommandRecord {
    static TEMPLATE: std::sync::OnceLock<CommandRecord> = std::sync::OnceLock::new();
    let mut r = TEMPLATE
        .get_or_init(|| record(PROVISION, &OutboxRow::new(true)))
        .clone();
    r.status = row.status;
    r.attempt_count = i32::from(row.claims);
    r.lease_owner = row.owner.map(ids::owner);
    r.lease_expires_at = row.owner.map(|_| t(row.expires));
    r.lease_epoch = LeaseEpoch(i64::from(row.epoch));
    r.next_attempt_at = t(row.next_at);
    r.attempt_window_ends_at = row.window_end.map(t);
    r
}

pub(super) fn record(cmd: usize, row: &OutboxRow) -> CommandRecord {
    CommandRecord {
        id: ids::command(cmd),
        tenant_id: ids::tenant(),
        control_space_id: ids::space(),
        operation_id: ids::op(cmd),
        idempotency_key: ids::key(cmd),
        request_fingerprint: tenantry_kernel::fingerprint_json(&json!(cmd)),
        operation: operation(cmd),
        payload: payload(cmd),
        status: row.status,
        attempt_count: i32::from(row.claims),
        attempt_budget_base: 0,
        lease_owner: row.owner.map(ids::owner),
        lease_expires_at: row.owner.map(|_| t(row.expires)),
        lease_epoch: LeaseEpoch(i64::from(row.epoch)),
        next_attempt_at: t(row.next_at),
        turn_at: t(0),
        last_error_code: None,
        last_error_message: None,
        created_at: t(0),
        completed_at: None,
        attempt_window_ends_at: row.window_end.map(t),
        trace_context: None,
    }
}

pub(super) fn operation(cmd: usize) -> Operation {
    if cmd == PROVISION {
        Operation::Provision
    } else {
        Operation::Delete
    }
}

fn payload(cmd: usize) -> serde_json::Value {
    if cmd == PROVISION {
        json!({"provisioning_key": "pk", "name": "Docs", "slug": "docs"})
    } else {
        json!({"provisioning_key": "pk"})
    }
}

pub(super) fn provision_payload() -> ProvisionPayload {
    ProvisionPayload {
        provisioning_key: ids::pk(),
        name: "Docs".into(),
        slug: "docs".into(),
        icon: String::new(),
        description: String::new(),
        model_intent: None,
        profile_intent: None,
    }
}

pub(super) fn delete_payload() -> DeletePayload {
    DeletePayload {
        provisioning_key: ids::pk(),
    }
}

pub(super) fn claimed(worker: u8, held: &HeldLease) -> ClaimedCommand {
    let cmd = usize::from(held.cmd);
    ClaimedCommand {
        tenant_id: ids::tenant(),
        control_space_id: ids::space(),
        operation_id: ids::op(cmd),
        idempotency_key: ids::key(cmd),
        operation: operation(cmd),
        payload: payload(cmd),
        attempt_count: i32::from(held.claims),
        attempt_budget_base: 0,
        lease: LeaseToken {
            command_id: ids::command(cmd),
            owner: ids::owner(worker),
            epoch: LeaseEpoch(i64::from(held.epoch)),
            expires_at: t(held.expires),
        },
        claimed_at: t(held.claimed_at),
        created_at: t(0),
        trace_context: None,
        control_space: tenantry_lifecycle::ClaimedControlSpace::NotRead,
    }
}

pub(super) fn policy() -> RetryPolicy {
    RetryPolicy {
        max_attempts: u32::from(MAX_CLAIMS),
        ..RetryPolicy::default()
    }
}

pub(super) fn remote_space(index: u8) -> RemoteSpace {
    RemoteSpace {
        namespace_id: ids::tenant(),
        knowledge_space_id: ids::ks(index),
        revision: 1,
    }
}
