//! [`FakeKnowledgeFs`]: a scriptable KnowledgeFS that keeps spaces by provisioning key, drains
//! deletions for a set number of polls, lags revoke watermarks, and can fail or lose the answer
//! of the next calls.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tenantry_kernel::{ControlSpaceId, KnowledgeSpaceId, ProvisioningKey, TenantId};
use tenantry_lifecycle::{
    DeletionPhase, DeletionProgress, DeletionRequest, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest, RevokeState,
};

use super::lock;
use crate::lifecycle::{KnowledgeFs, RemoteError};

/// A scripted reaction of [`FakeKnowledgeFs`] to the next call of one kind.
#[derive(Debug, Clone)]
pub enum RemoteFault {
    /// Answer with this error and do nothing.
    Fail(RemoteError),
    /// Apply the call, then report an unknown outcome (lost ACK).
    LoseAck,
}

/// Which remote call a [`RemoteFault`] applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RemoteCall {
    /// `provision`.
    Provision,
    /// `find_by_provisioning_key`.
    Lookup,
    /// `request_deletion`.
    Deletion,
    /// `revoke_grant`.
    Revoke,
}

/// Counters of remote effects and calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteCounters {
    /// Spaces created (a replayed provision does not count).
    pub spaces_created: u64,
    /// Calls per kind, including failed ones.
    pub calls: HashMap<&'static str, u64>,
}

#[derive(Debug, Clone)]
struct FakeSpace {
    namespace_id: TenantId,
    knowledge_space_id: KnowledgeSpaceId,
    revision: i64,
    deletion_polls: Option<u32>,
}

#[derive(Default)]
struct RemoteState {
    spaces: HashMap<ProvisioningKey, FakeSpace>,
    /// Spaces whose deletion completed (at the revision of the `completed` answer), kept to
    /// answer a re-delivered deletion `completed` again, as the reference KnowledgeFS does.
    deleted: HashMap<ProvisioningKey, FakeSpace>,
    faults: HashMap<RemoteCall, VecDeque<RemoteFault>>,
    drain_polls: u32,
    revoke_lag: i64,
    counters: RemoteCounters,
    next_id: u64,
    hook: Option<Arc<dyn Fn(RemoteCall) + Send + Sync>>,
}

/// Scriptable in-memory KnowledgeFS. Clones share state.
#[derive(Clone, Default)]
pub struct FakeKnowledgeFs {
    state: Arc<Mutex<RemoteState>>,
}

impl std::fmt::Debug for FakeKnowledgeFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeKnowledgeFs").finish_non_exhaustive()
    }
}

impl FakeKnowledgeFs {
    /// A remote that answers every call at once.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues a fault for the next call of `call`.
    pub fn push_fault(&self, call: RemoteCall, fault: RemoteFault) {
        lock(&self.state)
            .faults
            .entry(call)
            .or_default()
            .push_back(fault);
    }

    /// Deletions answer `accepted`, then `draining` for `polls - 1` polls, then `irreversible`
    /// once, then `completed`. 0 (the default) completes at once.
    pub fn set_deletion_polls(&self, polls: u32) {
        lock(&self.state).drain_polls = polls;
    }

    /// Revocations report a watermark `lag` below the requested sequence.
    pub fn set_revoke_lag(&self, lag: i64) {
        lock(&self.state).revoke_lag = lag;
    }

    /// Runs `hook` at the start of every call (e.g. to probe that no transaction is open).
    pub fn set_hook(&self, hook: impl Fn(RemoteCall) + Send + Sync + 'static) {
        lock(&self.state).hook = Some(Arc::new(hook));
    }

    /// Puts a space in place as if an earlier provision had been applied.
    pub fn insert_space(
        &self,
        namespace_id: TenantId,
        provisioning_key: ProvisioningKey,
        knowledge_space_id: KnowledgeSpaceId,
        revision: i64,
    ) {
        lock(&self.state).spaces.insert(
            provisioning_key,
            FakeSpace {
                namespace_id,
                knowledge_space_id,
                revision,
                deletion_polls: None,
            },
        );
    }

    /// Drops the space of `key` as if it vanished out of band (removed by hand, or lost by
    /// the remote): its deletion is then answered `404 KNOWLEDGE_FS_SPACE_NOT_FOUND` and a
    /// lookup finds nothing (case 012).
    pub fn forget_space(&self, key: &ProvisioningKey) {
        let mut state = lock(&self.state);
        state.spaces.remove(key);
        state.deleted.remove(key);
    }

    /// Whether a (not deleted) space exists for `key`.
    pub fn has_space(&self, key: &ProvisioningKey) -> bool {
        lock(&self.state).spaces.contains_key(key)
    }

    /// Effect counters.
    pub fn counters(&self) -> RemoteCounters {
        lock(&self.state).counters.clone()
    }

    fn begin(&self, call: RemoteCall, name: &'static str) -> Option<RemoteFault> {
        let hook = {
            let mut state = lock(&self.state);
            *state.counters.calls.entry(name).or_default() += 1;
            state.hook.clone()
        };
        if let Some(hook) = hook {
            hook(call);
        }
        lock(&self.state)
            .faults
            .get_mut(&call)
            .and_then(VecDeque::pop_front)
    }
}

fn lost_ack() -> RemoteError {
    RemoteError::outcome_unknown("connection closed after the request was sent")
}

#[async_trait]
impl KnowledgeFs for FakeKnowledgeFs {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let fault = self.begin(RemoteCall::Provision, "provision");
        if let Some(RemoteFault::Fail(e)) = fault {
            return Err(e);
        }
        let mut state = lock(&self.state);
        let space = match state.spaces.get(&request.provisioning_key) {
            Some(existing) => existing.clone(),
            None => {
                state.next_id += 1;
                let space = FakeSpace {
                    namespace_id: request.namespace_id.clone(),
                    knowledge_space_id: KnowledgeSpaceId::parse(format!("ks-{}", state.next_id))
                        .map_err(|e| RemoteError::answered(500, "INTERNAL", e.to_string()))?,
                    revision: 1,
                    deletion_polls: None,
                };
                state.counters.spaces_created += 1;
                state
                    .spaces
                    .insert(request.provisioning_key.clone(), space.clone());
                space
            }
        };
        if let Some(RemoteFault::LoseAck) = fault {
            return Err(lost_ack());
        }
        Ok(RemoteSpace {
            namespace_id: space.namespace_id,
            knowledge_space_id: space.knowledge_space_id,
            revision: space.revision,
        })
    }

    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        _control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        match self.begin(RemoteCall::Lookup, "lookup") {
            Some(RemoteFault::Fail(e)) => return Err(e),
            Some(RemoteFault::LoseAck) => return Err(lost_ack()),
            None => {}
        }
        let state = lock(&self.state);
        // The namespace is not filtered here on purpose: the saga checks it.
        let _ = namespace_id;
        Ok(state.spaces.get(provisioning_key).map(|s| RemoteSpace {
            namespace_id: s.namespace_id.clone(),
            knowledge_space_id: s.knowledge_space_id.clone(),
            revision: s.revision,
        }))
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        let fault = self.begin(RemoteCall::Deletion, "deletion");
        if let Some(RemoteFault::Fail(e)) = fault {
            return Err(e);
        }
        let mut state = lock(&self.state);
        let drain = state.drain_polls;
        let key = request.provisioning_key.clone();
        let Some(space) = state
            .spaces
            .get_mut(&key)
            .filter(|s| s.knowledge_space_id == request.knowledge_space_id)
        else {
            // A re-delivered deletion of a space whose deletion completed (e.g. its answer was
            // lost) is answered `completed` again, as by the reference KnowledgeFS
            // (`tenantry_testkit::knowledge_fs`); only an unknown space is 404.
            let replay = state
                .deleted
                .get(&key)
                .filter(|s| s.knowledge_space_id == request.knowledge_space_id)
                .map(|s| DeletionProgress {
                    phase: DeletionPhase::Completed,
                    irreversible_at: None,
                    revision: s.revision,
                    retry_after: None,
                });
            return match (replay, fault) {
                (Some(_), Some(RemoteFault::LoseAck)) => Err(lost_ack()),
                (Some(progress), _) => Ok(progress),
                (None, _) => Err(RemoteError::answered(
                    404,
                    "KNOWLEDGE_FS_SPACE_NOT_FOUND",
                    "no such knowledge space",
                )),
            };
        };
        let polls = space.deletion_polls.map_or(1, |p| p + 1);
        space.deletion_polls = Some(polls);
        let revision = space.revision + 1;
        let phase = if polls > drain + 1 {
            DeletionPhase::Completed
        } else if polls == drain + 1 {
            DeletionPhase::Irreversible
        } else if polls == 1 {
            DeletionPhase::Accepted
        } else {
            DeletionPhase::Draining
        };
        let phase = if drain == 0 {
            DeletionPhase::Completed
        } else {
            phase
        };
        if phase == DeletionPhase::Completed
            && let Some(mut gone) = state.spaces.remove(&key)
        {
            gone.revision = revision;
            state.deleted.insert(key, gone);
        }
        if let Some(RemoteFault::LoseAck) = fault {
            return Err(lost_ack());
        }
        Ok(DeletionProgress {
            phase,
            irreversible_at: None,
            revision,
            retry_after: None,
        })
    }

    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        let fault = self.begin(RemoteCall::Revoke, "revoke");
        if let Some(RemoteFault::Fail(e)) = fault {
            return Err(e);
        }
        let lag = {
            let mut state = lock(&self.state);
            let lag = state.revoke_lag;
            state.revoke_lag = (lag - 1).max(0);
            lag
        };
        if let Some(RemoteFault::LoseAck) = fault {
            return Err(lost_ack());
        }
        Ok(RevokeAck {
            state: RevokeState::Revoked,
            highest_revoke_sequence: request.revoke_sequence - lag,
        })
    }
}
