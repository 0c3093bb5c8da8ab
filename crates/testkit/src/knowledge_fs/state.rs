//! The in-memory model of the reference KnowledgeFS: spaces, deletions, grant watermarks,
//! idempotency keys, and the ground-truth effect counters.
//!
//! Synchronous and clock-free: the route layer passes `now` in. Every method is one atomic
//! step under the server's lock, so an effect is either fully applied (and counted) or not.

use std::collections::{BTreeMap, HashMap};

use crate::http::RemoteErrorBody;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tenantry_kernel::{
    ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, OperationId, ProvisioningKey,
    TenantId,
};
use tenantry_lifecycle::{DeletionPhase, DeletionProgress, RemoteSpace, RevokeAck, RevokeState};

/// Behaviour knobs of the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelConfig {
    /// Deletion requests of a space answered `accepted` (the first) or `draining` before the
    /// deletion becomes irreversible.
    pub deletion_drain_polls: u32,
    /// Deletion requests answered `irreversible` before the deletion is `completed`.
    pub deletion_irreversible_polls: u32,
    /// Revocation requests of a new sequence answered `pending` before the watermark covers it.
    pub revoke_watermark_lag_polls: u32,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            deletion_drain_polls: 2,
            deletion_irreversible_polls: 1,
            revoke_watermark_lag_polls: 0,
        }
    }
}

/// Provision body (the namespace is in the path, the idempotency key in a header).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = ProvisionRequest)]
pub struct ProvisionBody {
    /// Local control space.
    pub control_space_id: ControlSpaceId,
    /// Lifecycle operation.
    pub operation_id: OperationId,
    /// Remote idempotency key of the space: one space per key and namespace.
    pub provisioning_key: ProvisioningKey,
    /// Display name.
    pub name: String,
    /// Short name.
    pub slug: String,
    /// Icon reference.
    pub icon: String,
    /// Description.
    pub description: String,
    /// Optional model intent: opaque JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_intent: Option<serde_json::Value>,
    /// Optional profile intent: opaque JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_intent: Option<serde_json::Value>,
}

/// Deletion body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = DeletionRequest)]
pub struct DeletionBody {
    /// Local control space.
    pub control_space_id: ControlSpaceId,
    /// Lifecycle operation.
    pub operation_id: OperationId,
    /// Provisioning key of the space.
    pub provisioning_key: ProvisioningKey,
    /// Revision the caller last saw; may lag, must not be ahead.
    pub expected_revision: i64,
}

/// Revocation body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = RevocationRequest)]
pub struct RevocationBody {
    /// Local control space.
    pub control_space_id: ControlSpaceId,
    /// Lifecycle operation.
    pub operation_id: OperationId,
    /// Event id of the revocation.
    pub event_id: String,
    /// Reason.
    pub reason_code: String,
    /// Sequence this revocation must be covered by.
    pub revoke_sequence: i64,
    /// Revision the caller computed the revocation against.
    pub expected_revision: i64,
}

/// One remote space as the ground truth knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpaceRecord {
    /// Namespace (tenant).
    pub namespace_id: TenantId,
    /// Identity.
    pub knowledge_space_id: KnowledgeSpaceId,
    /// Control space that provisioned it.
    pub control_space_id: ControlSpaceId,
    /// Provisioning key.
    pub provisioning_key: ProvisioningKey,
    /// Operation that created it.
    pub created_by: OperationId,
    /// Current revision (1 at creation, +1 per deletion phase change).
    pub revision: i64,
    /// Deletion phase, once a deletion was requested.
    pub deletion_phase: Option<DeletionPhase>,
    /// When the deletion became irreversible.
    pub irreversible_at: Option<DateTime<Utc>>,
}

impl SpaceRecord {
    fn remote(&self) -> RemoteSpace {
        RemoteSpace {
            namespace_id: self.namespace_id.clone(),
            knowledge_space_id: self.knowledge_space_id.clone(),
            revision: self.revision,
        }
    }
}

/// Counts of remote effects: what the remote actually did, for exactly-once checks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EffectCounters {
    /// Knowledge spaces created.
    pub spaces_created: u64,
    /// Provision requests answered with an existing space (same provisioning key).
    pub provision_replays: u64,
    /// Deletions started (first deletion request of a space).
    pub deletions_started: u64,
    /// Deletions that reached `completed`.
    pub deletions_completed: u64,
    /// Deletion requests answered (including polls).
    pub deletion_polls: u64,
    /// Revocation sequences applied to a grant watermark.
    pub revocations_applied: u64,
    /// Revocation requests already covered by the watermark.
    pub revocation_replays: u64,
    /// Requests refused because their idempotency key was used with another body (422).
    pub idempotency_conflicts: u64,
}

#[derive(Debug, Default)]
struct Deletion {
    polls: u32,
}

#[derive(Debug, Default)]
struct Grant {
    highest_revoke_sequence: i64,
    /// Sequences above the watermark with the number of `pending` answers still owed.
    pending: BTreeMap<i64, u32>,
    applied: BTreeMap<i64, u32>,
}

/// The whole remote state.
#[derive(Debug, Default)]
pub struct KnowledgeFsModel {
    config: ModelConfig,
    next_space: u64,
    spaces: BTreeMap<KnowledgeSpaceId, SpaceRecord>,
    deletions: HashMap<KnowledgeSpaceId, Deletion>,
    grants: BTreeMap<(KnowledgeSpaceId, GrantId), Grant>,
    idempotency: HashMap<(TenantId, IdempotencyKey), String>,
    created_per_control_space: BTreeMap<(TenantId, ControlSpaceId), u32>,
    created_per_provisioning_key: BTreeMap<(TenantId, ProvisioningKey), u32>,
    counters: EffectCounters,
}

/// Answer of a provision: the space and whether it was created by this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// The space.
    pub space: RemoteSpace,
    /// True when this request created it (201), false when it existed (200).
    pub created: bool,
}

impl KnowledgeFsModel {
    /// An empty remote.
    pub fn new(config: ModelConfig) -> Self {
        Self {
            config,
            ..Self::default()
        }
    }

    /// Binds `key` to `fingerprint` in `namespace`, or checks an earlier binding.
    ///
    /// # Errors
    /// 422 `IDEMPOTENCY_KEY_REUSED` when the key was used with a different request.
    pub fn check_idempotency(
        &mut self,
        namespace: &TenantId,
        key: &IdempotencyKey,
        fingerprint: String,
    ) -> Result<(), RemoteErrorBody> {
        match self.idempotency.get(&(namespace.clone(), key.clone())) {
            Some(existing) if *existing != fingerprint => {
                self.counters.idempotency_conflicts += 1;
                Err(RemoteErrorBody::new(
                    422,
                    "IDEMPOTENCY_KEY_REUSED",
                    format!(
                        "Idempotency-Key {key} was already used with a different request; \
                         send a new key for a new request"
                    ),
                ))
            }
            Some(_) => Ok(()),
            None => {
                self.idempotency
                    .insert((namespace.clone(), key.clone()), fingerprint);
                Ok(())
            }
        }
    }

    /// Provisions a space, idempotent on the provisioning key within the namespace.
    ///
    /// # Errors
    /// 409 `PROVISIONING_KEY_CONFLICT` when the key belongs to another control space;
    /// 409 `KNOWLEDGE_FS_SPACE_DELETED` when its space is being or was deleted.
    pub fn provision(
        &mut self,
        namespace: &TenantId,
        body: &ProvisionBody,
    ) -> Result<Provisioned, RemoteErrorBody> {
        if let Some(existing) = self
            .spaces
            .values()
            .find(|s| s.namespace_id == *namespace && s.provisioning_key == body.provisioning_key)
        {
            if existing.control_space_id != body.control_space_id {
                return Err(RemoteErrorBody::new(
                    409,
                    "PROVISIONING_KEY_CONFLICT",
                    format!(
                        "provisioning key {} belongs to control space {}",
                        body.provisioning_key, existing.control_space_id
                    ),
                ));
            }
            if existing.deletion_phase.is_some() {
                return Err(RemoteErrorBody::new(
                    409,
                    "KNOWLEDGE_FS_SPACE_DELETED",
                    format!(
                        "the space of provisioning key {} is deleted; use a new key",
                        body.provisioning_key
                    ),
                ));
            }
            self.counters.provision_replays += 1;
            return Ok(Provisioned {
                space: existing.remote(),
                created: false,
            });
        }
        self.next_space += 1;
        let id = KnowledgeSpaceId::parse(format!("ks-{:06}", self.next_space)).map_err(|e| {
            RemoteErrorBody::new(500, "INTERNAL", format!("cannot mint a space id: {e}"))
        })?;
        let record = SpaceRecord {
            namespace_id: namespace.clone(),
            knowledge_space_id: id.clone(),
            control_space_id: body.control_space_id.clone(),
            provisioning_key: body.provisioning_key.clone(),
            created_by: body.operation_id.clone(),
            revision: 1,
            deletion_phase: None,
            irreversible_at: None,
        };
        let space = record.remote();
        self.spaces.insert(id, record);
        self.counters.spaces_created += 1;
        *self
            .created_per_control_space
            .entry((namespace.clone(), body.control_space_id.clone()))
            .or_default() += 1;
        *self
            .created_per_provisioning_key
            .entry((namespace.clone(), body.provisioning_key.clone()))
            .or_default() += 1;
        Ok(Provisioned {
            space,
            created: true,
        })
    }

    /// Spaces of `namespace` with `provisioning_key` (and `control_space_id`, if given) whose
    /// deletion has not completed.
    pub fn lookup(
        &self,
        namespace: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: Option<&ControlSpaceId>,
    ) -> Vec<RemoteSpace> {
        self.spaces
            .values()
            .filter(|s| {
                s.namespace_id == *namespace
                    && s.provisioning_key == *provisioning_key
                    && control_space_id.is_none_or(|c| *c == s.control_space_id)
                    && s.deletion_phase != Some(DeletionPhase::Completed)
            })
            .map(SpaceRecord::remote)
            .collect()
    }

    /// Requests or polls the deletion of a space; each call advances it one poll.
    ///
    /// # Errors
    /// 404 `KNOWLEDGE_FS_SPACE_NOT_FOUND` for an unknown space (or one of another namespace);
    /// 409 `KNOWLEDGE_FS_SCOPE_MISMATCH` when control space or provisioning key differ;
    /// 409 `REVISION_AHEAD` when `expected_revision` is above the space's revision.
    pub fn delete(
        &mut self,
        namespace: &TenantId,
        space_id: &KnowledgeSpaceId,
        body: &DeletionBody,
        now: DateTime<Utc>,
    ) -> Result<DeletionProgress, RemoteErrorBody> {
        let cfg = self.config;
        let space = self.space_mut(namespace, space_id)?;
        if space.control_space_id != body.control_space_id
            || space.provisioning_key != body.provisioning_key
        {
            return Err(scope_mismatch(space_id));
        }
        if body.expected_revision > space.revision {
            return Err(RemoteErrorBody::new(
                409,
                "REVISION_AHEAD",
                format!(
                    "expected revision {} is above the space's revision {}",
                    body.expected_revision, space.revision
                ),
            ));
        }
        let deletion = self.deletions.entry(space_id.clone()).or_default();
        let first = deletion.polls == 0;
        deletion.polls = deletion.polls.saturating_add(1);
        let poll = deletion.polls;
        let phase = if poll <= cfg.deletion_drain_polls {
            if poll == 1 {
                DeletionPhase::Accepted
            } else {
                DeletionPhase::Draining
            }
        } else if poll <= cfg.deletion_drain_polls + cfg.deletion_irreversible_polls {
            DeletionPhase::Irreversible
        } else {
            DeletionPhase::Completed
        };
        let mut completed_now = false;
        if let Some(space) = self.spaces.get_mut(space_id) {
            let previous = space.deletion_phase;
            if previous != Some(DeletionPhase::Completed) && previous != Some(phase) {
                space.revision += 1;
                if matches!(
                    phase,
                    DeletionPhase::Irreversible | DeletionPhase::Completed
                ) && space.irreversible_at.is_none()
                {
                    space.irreversible_at = Some(now);
                }
                completed_now = phase == DeletionPhase::Completed;
                space.deletion_phase = Some(phase);
            }
        }
        self.counters.deletion_polls += 1;
        if first {
            self.counters.deletions_started += 1;
        }
        if completed_now {
            self.counters.deletions_completed += 1;
        }
        let space = self.space_mut(namespace, space_id)?;
        Ok(DeletionProgress {
            phase: space.deletion_phase.unwrap_or(DeletionPhase::Accepted),
            irreversible_at: space.irreversible_at,
            revision: space.revision,
            retry_after: None,
        })
    }

    /// Revokes `grant` up to `body.revoke_sequence`; `lag` forces a `pending` answer without
    /// advancing the watermark.
    ///
    /// # Errors
    /// 404 `KNOWLEDGE_FS_SPACE_NOT_FOUND` for an unknown space; 409
    /// `KNOWLEDGE_FS_SCOPE_MISMATCH` when the control space differs.
    pub fn revoke(
        &mut self,
        namespace: &TenantId,
        space_id: &KnowledgeSpaceId,
        grant_id: &GrantId,
        body: &RevocationBody,
        lag: bool,
    ) -> Result<RevokeAck, RemoteErrorBody> {
        let lag_polls = self.config.revoke_watermark_lag_polls;
        let space = self.space_mut(namespace, space_id)?;
        if space.control_space_id != body.control_space_id {
            return Err(scope_mismatch(space_id));
        }
        let grant = self
            .grants
            .entry((space_id.clone(), grant_id.clone()))
            .or_default();
        let seq = body.revoke_sequence;
        if seq <= grant.highest_revoke_sequence {
            self.counters.revocation_replays += 1;
            return Ok(RevokeAck {
                state: RevokeState::Revoked,
                highest_revoke_sequence: grant.highest_revoke_sequence,
            });
        }
        let owed = grant.pending.entry(seq).or_insert(lag_polls);
        if lag || *owed > 0 {
            if !lag {
                *owed -= 1;
            }
            return Ok(RevokeAck {
                state: RevokeState::Pending,
                highest_revoke_sequence: grant.highest_revoke_sequence,
            });
        }
        // Apply every pending sequence up to this one: the watermark covers them all.
        let covered: Vec<i64> = grant.pending.range(..=seq).map(|(s, _)| *s).collect();
        for s in covered {
            grant.pending.remove(&s);
            *grant.applied.entry(s).or_default() += 1;
            self.counters.revocations_applied += 1;
        }
        grant.highest_revoke_sequence = seq;
        Ok(RevokeAck {
            state: RevokeState::Revoked,
            highest_revoke_sequence: seq,
        })
    }

    fn space_mut(
        &mut self,
        namespace: &TenantId,
        space_id: &KnowledgeSpaceId,
    ) -> Result<&mut SpaceRecord, RemoteErrorBody> {
        match self.spaces.get_mut(space_id) {
            Some(s) if s.namespace_id == *namespace => Ok(s),
            _ => Err(RemoteErrorBody::new(
                404,
                "KNOWLEDGE_FS_SPACE_NOT_FOUND",
                format!("no knowledge space {space_id} in namespace {namespace}"),
            )),
        }
    }

    /// Every space ever created (deleted ones included), by id.
    pub fn spaces(&self) -> Vec<SpaceRecord> {
        self.spaces.values().cloned().collect()
    }

    /// The effect counters.
    pub fn counters(&self) -> EffectCounters {
        self.counters.clone()
    }

    /// Spaces created per (namespace, provisioning key).
    pub fn created_per_provisioning_key(&self) -> BTreeMap<(TenantId, ProvisioningKey), u32> {
        self.created_per_provisioning_key.clone()
    }

    /// Spaces created per (namespace, control space).
    pub fn created_per_control_space(&self) -> BTreeMap<(TenantId, ControlSpaceId), u32> {
        self.created_per_control_space.clone()
    }

    /// The revoke watermark of a grant (0 when never revoked).
    pub fn watermark(&self, space_id: &KnowledgeSpaceId, grant_id: &GrantId) -> i64 {
        self.grants
            .get(&(space_id.clone(), grant_id.clone()))
            .map_or(0, |g| g.highest_revoke_sequence)
    }

    /// Exactly-once violations: a control space or provisioning key with more than one space
    /// created, or a revocation sequence applied more than once.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        for ((ns, cs), n) in &self.created_per_control_space {
            if *n > 1 {
                out.push(format!("{n} spaces created for control space {ns}/{cs}"));
            }
        }
        for ((ns, key), n) in &self.created_per_provisioning_key {
            if *n > 1 {
                out.push(format!(
                    "{n} spaces created for provisioning key {ns}/{key}"
                ));
            }
        }
        for ((space, grant), g) in &self.grants {
            for (seq, n) in &g.applied {
                if *n > 1 {
                    out.push(format!(
                        "revocation {seq} of grant {space}/{grant} applied {n} times"
                    ));
                }
            }
        }
        out
    }
}

fn scope_mismatch(space_id: &KnowledgeSpaceId) -> RemoteErrorBody {
    RemoteErrorBody::new(
        409,
        "KNOWLEDGE_FS_SCOPE_MISMATCH",
        format!("knowledge space {space_id} belongs to another control space or provisioning key"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns() -> TenantId {
        TenantId::parse("tenant-1").unwrap()
    }

    fn provision_body(cs: &str, key: &str) -> ProvisionBody {
        ProvisionBody {
            control_space_id: ControlSpaceId::parse(cs).unwrap(),
            operation_id: OperationId::parse("op-1").unwrap(),
            provisioning_key: ProvisioningKey::parse(key).unwrap(),
            name: "Docs".into(),
            slug: "docs".into(),
            icon: "book".into(),
            description: String::new(),
            model_intent: None,
            profile_intent: None,
        }
    }

    fn deletion_body(cs: &str, key: &str) -> DeletionBody {
        DeletionBody {
            control_space_id: ControlSpaceId::parse(cs).unwrap(),
            operation_id: OperationId::parse("op-2").unwrap(),
            provisioning_key: ProvisioningKey::parse(key).unwrap(),
            expected_revision: 1,
        }
    }

    fn revoke_body(cs: &str, seq: i64) -> RevocationBody {
        RevocationBody {
            control_space_id: ControlSpaceId::parse(cs).unwrap(),
            operation_id: OperationId::parse("op-3").unwrap(),
            event_id: format!("ev-{seq}"),
            reason_code: "member_removed".into(),
            revoke_sequence: seq,
            expected_revision: 1,
        }
    }

    #[test]
    fn provision_is_idempotent_on_provisioning_key() {
        let mut m = KnowledgeFsModel::new(ModelConfig::default());
        let a = m.provision(&ns(), &provision_body("cs-1", "pk-1")).unwrap();
        let b = m.provision(&ns(), &provision_body("cs-1", "pk-1")).unwrap();
        assert!(a.created);
        assert!(!b.created);
        assert_eq!(a.space, b.space);
        assert_eq!(m.counters().spaces_created, 1);
        assert_eq!(m.counters().provision_replays, 1);
        assert!(m.violations().is_empty());
    }

    #[test]
    fn provisioning_key_of_another_control_space_conflicts() {
        let mut m = KnowledgeFsModel::new(ModelConfig::default());
        m.provision(&ns(), &provision_body("cs-1", "pk-1")).unwrap();
        let err = m
            .provision(&ns(), &provision_body("cs-2", "pk-1"))
            .unwrap_err();
        assert_eq!((err.status, err.code), (409, "PROVISIONING_KEY_CONFLICT"));
    }

    #[test]
    fn second_key_for_one_control_space_is_a_violation() {
        let mut m = KnowledgeFsModel::new(ModelConfig::default());
        m.provision(&ns(), &provision_body("cs-1", "pk-1")).unwrap();
        m.provision(&ns(), &provision_body("cs-1", "pk-2")).unwrap();
        assert_eq!(m.violations().len(), 1);
    }

    #[test]
    fn idempotency_key_with_different_body_is_refused() {
        let mut m = KnowledgeFsModel::new(ModelConfig::default());
        let key = IdempotencyKey::parse("idem-1").unwrap();
        m.check_idempotency(&ns(), &key, "a".into()).unwrap();
        m.check_idempotency(&ns(), &key, "a".into()).unwrap();
        let err = m.check_idempotency(&ns(), &key, "b".into()).unwrap_err();
        assert_eq!((err.status, err.code), (422, "IDEMPOTENCY_KEY_REUSED"));
        assert_eq!(m.counters().idempotency_conflicts, 1);
    }

    #[test]
    fn deletion_drains_then_becomes_irreversible_then_completed() {
        let mut m = KnowledgeFsModel::new(ModelConfig {
            deletion_drain_polls: 3,
            deletion_irreversible_polls: 2,
            revoke_watermark_lag_polls: 0,
        });
        let space = m
            .provision(&ns(), &provision_body("cs-1", "pk-1"))
            .unwrap()
            .space;
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let phases: Vec<_> = (0..7)
            .map(|_| {
                m.delete(
                    &ns(),
                    &space.knowledge_space_id,
                    &deletion_body("cs-1", "pk-1"),
                    now,
                )
                .unwrap()
            })
            .collect();
        use DeletionPhase::*;
        assert_eq!(
            phases.iter().map(|p| p.phase).collect::<Vec<_>>(),
            [
                Accepted,
                Draining,
                Draining,
                Irreversible,
                Irreversible,
                Completed,
                Completed
            ]
        );
        assert!(phases[..3].iter().all(|p| p.irreversible_at.is_none()));
        assert!(phases[3..].iter().all(|p| p.irreversible_at == Some(now)));
        assert!(phases.windows(2).all(|w| w[0].revision <= w[1].revision));
        assert_eq!(m.counters().deletions_started, 1);
        assert_eq!(m.counters().deletions_completed, 1);
        assert!(m.lookup(&ns(), &space_key("pk-1"), None).is_empty());
    }

    fn space_key(k: &str) -> ProvisioningKey {
        ProvisioningKey::parse(k).unwrap()
    }

    #[test]
    fn deletion_of_unknown_or_foreign_space_is_not_found_or_mismatch() {
        let mut m = KnowledgeFsModel::new(ModelConfig::default());
        let now = DateTime::from_timestamp(0, 0).unwrap();
        let unknown = KnowledgeSpaceId::parse("ks-x").unwrap();
        let err = m
            .delete(&ns(), &unknown, &deletion_body("cs-1", "pk-1"), now)
            .unwrap_err();
        assert_eq!(err.code, "KNOWLEDGE_FS_SPACE_NOT_FOUND");
        let space = m
            .provision(&ns(), &provision_body("cs-1", "pk-1"))
            .unwrap()
            .space;
        let other_ns = TenantId::parse("tenant-2").unwrap();
        let err = m
            .delete(
                &other_ns,
                &space.knowledge_space_id,
                &deletion_body("cs-1", "pk-1"),
                now,
            )
            .unwrap_err();
        assert_eq!(err.status, 404);
        let err = m
            .delete(
                &ns(),
                &space.knowledge_space_id,
                &deletion_body("cs-9", "pk-1"),
                now,
            )
            .unwrap_err();
        assert_eq!(err.code, "KNOWLEDGE_FS_SCOPE_MISMATCH");
    }

    #[test]
    fn revocation_watermark_lags_then_covers() {
        let mut m = KnowledgeFsModel::new(ModelConfig {
            revoke_watermark_lag_polls: 2,
            ..ModelConfig::default()
        });
        let space = m
            .provision(&ns(), &provision_body("cs-1", "pk-1"))
            .unwrap()
            .space;
        let grant = GrantId::parse("g-1").unwrap();
        let ks = &space.knowledge_space_id;
        let ack = |m: &mut KnowledgeFsModel, seq, lag| {
            m.revoke(&ns(), ks, &grant, &revoke_body("cs-1", seq), lag)
                .unwrap()
        };
        assert_eq!(ack(&mut m, 5, false).state, RevokeState::Pending);
        assert_eq!(ack(&mut m, 5, false).state, RevokeState::Pending);
        assert_eq!(ack(&mut m, 5, true).state, RevokeState::Pending);
        let done = ack(&mut m, 5, false);
        assert_eq!(
            (done.state, done.highest_revoke_sequence),
            (RevokeState::Revoked, 5)
        );
        let replay = ack(&mut m, 3, false);
        assert_eq!(
            (replay.state, replay.highest_revoke_sequence),
            (RevokeState::Revoked, 5)
        );
        assert_eq!(m.counters().revocations_applied, 1);
        assert_eq!(m.counters().revocation_replays, 1);
        assert_eq!(m.watermark(ks, &grant), 5);
    }
}
