//! Requests sent to KnowledgeFS and the answers read back (lifecycle API v1).
//!
//! These are plain values; the HTTP shapes are in `docs/protocol.md`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenantry_kernel::{
    ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, OperationId, ProvisioningKey,
    TenantId,
};

use crate::command::{ClaimedCommand, DeletePayload, ProvisionPayload, RevokePayload};

/// A remote knowledge space as KnowledgeFS reports it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteSpace {
    /// Namespace that holds it; must equal the command's tenant.
    pub namespace_id: TenantId,
    /// Its identity.
    pub knowledge_space_id: KnowledgeSpaceId,
    /// Its revision.
    pub revision: i64,
}

/// `POST /v1/namespaces/{namespace_id}/spaces`: idempotent on `provisioning_key`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvisionRequest {
    /// Target namespace (the tenant).
    pub namespace_id: TenantId,
    /// Local control space.
    pub control_space_id: ControlSpaceId,
    /// Lifecycle operation.
    pub operation_id: OperationId,
    /// Sent as the `Idempotency-Key` header: the command's
    /// [`ClaimedCommand::remote_idempotency_key`] (its outbox id), the same on every attempt of
    /// the command and never the caller's key (docs/protocol.md, "Idempotency").
    pub idempotency_key: IdempotencyKey,
    /// Remote idempotency key of the space itself.
    pub provisioning_key: ProvisioningKey,
    /// Display name.
    pub name: String,
    /// Short name.
    pub slug: String,
    /// Icon reference.
    pub icon: String,
    /// Description.
    pub description: String,
    /// Optional model intent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_intent: Option<Value>,
    /// Optional profile intent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_intent: Option<Value>,
}

impl ProvisionRequest {
    /// The provision request of a claimed provision command.
    pub fn for_command(command: &ClaimedCommand, payload: &ProvisionPayload) -> Self {
        let mut idempotency_key = command.remote_idempotency_key();
        let mut provisioning_key = payload.provisioning_key.clone();
        // Planted mutation (docs/verification.md): each attempt sends keys of its own, so a
        // retry after a lost answer creates a second space.
        if tenantry_kernel::planted!("provision-keys-per-attempt") {
            let attempt = command.attempt_count;
            idempotency_key = IdempotencyKey::parse(format!("{idempotency_key}-{attempt}"))
                .unwrap_or(idempotency_key);
            provisioning_key = ProvisioningKey::parse(format!("{provisioning_key}-{attempt}"))
                .unwrap_or(provisioning_key);
        }
        // Planted mutation: each attempt names a provisioning key of its own, under the
        // command's one idempotency key.
        if tenantry_kernel::planted!("provisioning-key-per-attempt") {
            let attempt = command.attempt_count;
            provisioning_key = ProvisioningKey::parse(format!("{provisioning_key}-{attempt}"))
                .unwrap_or(provisioning_key);
        }
        Self {
            namespace_id: command.tenant_id.clone(),
            control_space_id: command.control_space_id.clone(),
            operation_id: command.operation_id.clone(),
            idempotency_key,
            provisioning_key,
            name: payload.name.clone(),
            slug: payload.slug.clone(),
            icon: payload.icon.clone(),
            description: payload.description.clone(),
            model_intent: payload.model_intent.clone(),
            profile_intent: payload.profile_intent.clone(),
        }
    }
}

/// `POST /v1/namespaces/{namespace_id}/spaces/{knowledge_space_id}/deletion`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionRequest {
    /// Namespace (the tenant).
    pub namespace_id: TenantId,
    /// Local control space.
    pub control_space_id: ControlSpaceId,
    /// Lifecycle operation.
    pub operation_id: OperationId,
    /// Sent as the `Idempotency-Key` header: the command's
    /// [`ClaimedCommand::remote_idempotency_key`] (its outbox id), the same on every attempt of
    /// the command and never the caller's key (docs/protocol.md, "Idempotency").
    pub idempotency_key: IdempotencyKey,
    /// The space to delete.
    pub knowledge_space_id: KnowledgeSpaceId,
    /// Provisioning key of the space.
    pub provisioning_key: ProvisioningKey,
    /// Revision the deletion was computed against.
    pub expected_revision: i64,
}

impl DeletionRequest {
    /// The deletion request of a claimed delete command for a resolved identity.
    pub fn for_command(
        command: &ClaimedCommand,
        payload: &DeletePayload,
        knowledge_space_id: KnowledgeSpaceId,
        expected_revision: i64,
    ) -> Self {
        Self {
            namespace_id: command.tenant_id.clone(),
            control_space_id: command.control_space_id.clone(),
            operation_id: command.operation_id.clone(),
            idempotency_key: command.remote_idempotency_key(),
            knowledge_space_id,
            provisioning_key: payload.provisioning_key.clone(),
            expected_revision,
        }
    }
}

/// Phase of a remote deletion.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeletionPhase {
    /// Accepted, not started.
    Accepted,
    /// In progress, still reversible.
    Draining,
    /// Can no longer be undone, not finished.
    Irreversible,
    /// Finished.
    Completed,
}

impl DeletionPhase {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accepted => "accepted",
            Self::Draining => "draining",
            Self::Irreversible => "irreversible",
            Self::Completed => "completed",
        }
    }
}

/// Answer to a deletion request.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionProgress {
    /// Current phase.
    pub phase: DeletionPhase,
    /// When it became irreversible, if the remote says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irreversible_at: Option<DateTime<Utc>>,
    /// Remote revision.
    pub revision: i64,
    /// How long the remote suggests waiting before polling again (its `Retry-After` on the
    /// answer; not part of the JSON body). A pending deletion is polled at this interval, not
    /// with the failure backoff.
    #[serde(skip)]
    pub retry_after: Option<std::time::Duration>,
}

/// `POST .../grants/{grant_id}/revocations`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeRequest {
    /// Namespace (the tenant).
    pub namespace_id: TenantId,
    /// Local control space.
    pub control_space_id: ControlSpaceId,
    /// Lifecycle operation.
    pub operation_id: OperationId,
    /// Sent as the `Idempotency-Key` header: the command's
    /// [`ClaimedCommand::remote_idempotency_key`] (its outbox id), the same on every attempt of
    /// the command and never the caller's key (docs/protocol.md, "Idempotency").
    pub idempotency_key: IdempotencyKey,
    /// Space holding the grant.
    pub knowledge_space_id: KnowledgeSpaceId,
    /// The grant.
    pub grant_id: GrantId,
    /// Event id.
    pub event_id: String,
    /// Reason.
    pub reason_code: String,
    /// Sequence of this revocation.
    pub revoke_sequence: i64,
    /// Revision it was computed against.
    pub expected_revision: i64,
}

impl RevokeRequest {
    /// The revoke request of a claimed revoke command.
    pub fn for_command(command: &ClaimedCommand, payload: &RevokePayload) -> Self {
        Self {
            namespace_id: command.tenant_id.clone(),
            control_space_id: command.control_space_id.clone(),
            operation_id: command.operation_id.clone(),
            idempotency_key: command.remote_idempotency_key(),
            knowledge_space_id: payload.knowledge_space_id.clone(),
            grant_id: payload.grant_id.clone(),
            event_id: payload.event_id.clone(),
            reason_code: payload.reason_code.clone(),
            revoke_sequence: payload.revoke_sequence,
            expected_revision: payload.expected_revision,
        }
    }
}

/// State of a grant revocation.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevokeState {
    /// Revoked up to `highest_revoke_sequence`.
    Revoked,
    /// Not yet effective.
    Pending,
}

/// Answer to a revoke request.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokeAck {
    /// Revocation state.
    pub state: RevokeState,
    /// The remote's revoke watermark.
    pub highest_revoke_sequence: i64,
}
