//! An in-process KnowledgeFS that answers every call at once, successfully.
//!
//! The benchmarks measure the saga and the database, not a network: each answer is computed
//! from the request (no lock, no allocation beyond the answer), and a counter per call kind
//! lets the run check that every command was delivered exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use tenantry_kernel::{ControlSpaceId, KnowledgeSpaceId, ProvisioningKey, TenantId};
use tenantry_lifecycle::{
    DeletionPhase, DeletionProgress, DeletionRequest, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest, RevokeState,
};
use tenantry_ports::lifecycle::{KnowledgeFs, RemoteError};

/// Answers at once; counts calls. Clones share the counters.
#[derive(Debug, Clone, Default)]
pub struct InstantRemote {
    calls: Arc<Calls>,
}

#[derive(Debug, Default)]
struct Calls {
    provisions: AtomicU64,
    revokes: AtomicU64,
    other: AtomicU64,
}

impl InstantRemote {
    /// Provision calls so far.
    pub fn provisions(&self) -> u64 {
        self.calls.provisions.load(Ordering::Relaxed)
    }

    /// Revoke calls so far.
    pub fn revokes(&self) -> u64 {
        self.calls.revokes.load(Ordering::Relaxed)
    }
}

/// The knowledge space id the remote assigns to a provisioning key.
fn space_id(key: &ProvisioningKey) -> Result<KnowledgeSpaceId, RemoteError> {
    KnowledgeSpaceId::parse(format!("ks-{}", key.as_str()))
        .map_err(|e| RemoteError::answered(422, "INVALID", e.to_string()))
}

#[async_trait]
impl KnowledgeFs for InstantRemote {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        self.calls.provisions.fetch_add(1, Ordering::Relaxed);
        Ok(RemoteSpace {
            namespace_id: request.namespace_id.clone(),
            knowledge_space_id: space_id(&request.provisioning_key)?,
            revision: 1,
        })
    }

    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        _control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        self.calls.other.fetch_add(1, Ordering::Relaxed);
        Ok(Some(RemoteSpace {
            namespace_id: namespace_id.clone(),
            knowledge_space_id: space_id(provisioning_key)?,
            revision: 1,
        }))
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.calls.other.fetch_add(1, Ordering::Relaxed);
        Ok(DeletionProgress {
            phase: DeletionPhase::Completed,
            irreversible_at: None,
            revision: request.expected_revision + 1,
            retry_after: None,
        })
    }

    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        self.calls.revokes.fetch_add(1, Ordering::Relaxed);
        Ok(RevokeAck {
            state: RevokeState::Revoked,
            highest_revoke_sequence: request.revoke_sequence,
        })
    }
}
