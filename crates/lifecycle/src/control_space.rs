//! The control-space state machine.
//!
//! A control space is the local record of one remote knowledge space. Its states and the
//! allowed moves between them:
//!
//! ```text
//! provisioning --Activate--> active
//! provisioning --BeginDeletion--> deleting      active --BeginDeletion--> deleting
//! deleting --RegisterRecoveredIdentity / MarkDeletionIrreversible--> deleting
//! deleting --CompleteDeletion--> deleted
//! ```
//!
//! Every persisted change is a compare-and-set ([`CasUpdate`]) on the resource version read
//! before the change, so two writers can never both apply a change to the same version.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tenantry_kernel::{ControlSpaceId, KnowledgeSpaceId, OperationId, ProvisioningKey, TenantId};

/// Lifecycle state of a control space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ControlSpaceState {
    /// A provision command is on its way to KnowledgeFS.
    Provisioning,
    /// KnowledgeFS holds the knowledge space.
    Active,
    /// A delete command is on its way to KnowledgeFS.
    Deleting,
    /// Terminal: the knowledge space is gone (or never existed).
    Deleted,
}

impl ControlSpaceState {
    /// The stored name (`provisioning`, `active`, `deleting`, `deleted`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provisioning => "provisioning",
            Self::Active => "active",
            Self::Deleting => "deleting",
            Self::Deleted => "deleted",
        }
    }

    /// Parses a stored name; `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "provisioning" => Some(Self::Provisioning),
            "active" => Some(Self::Active),
            "deleting" => Some(Self::Deleting),
            "deleted" => Some(Self::Deleted),
            _ => None,
        }
    }
}

impl std::fmt::Display for ControlSpaceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One control space as stored in `control_spaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControlSpace {
    /// Owning tenant; also the KnowledgeFS namespace.
    pub tenant_id: TenantId,
    /// Identity of the control space within the tenant.
    pub control_space_id: ControlSpaceId,
    /// Current lifecycle state.
    pub state: ControlSpaceState,
    /// The operation that currently owns the control space (the latest provision or delete).
    pub lifecycle_operation_id: OperationId,
    /// Compare-and-set counter, incremented by every change.
    pub resource_version: i64,
    /// The key on which the remote provision is idempotent.
    pub provisioning_key: ProvisioningKey,
    /// The remote knowledge space, once known.
    pub knowledge_space_id: Option<KnowledgeSpaceId>,
    /// Highest remote revision observed (0 before any).
    pub knowledge_space_revision: i64,
    /// When the remote deletion became irreversible; recorded once.
    pub deletion_irreversible_at: Option<DateTime<Utc>>,
    /// Highest revoke sequence handed out to a revoke command of this control space.
    pub last_revoke_sequence: i64,
    /// Creation time.
    pub created_at: DateTime<Utc>,
    /// Time of the last change.
    pub updated_at: DateTime<Utc>,
}

/// A requested change of a control space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// The provision operation completed remotely: provisioning → active.
    Activate {
        /// Must equal the owning operation.
        operation_id: OperationId,
        /// The identity KnowledgeFS assigned.
        knowledge_space_id: KnowledgeSpaceId,
        /// The remote revision reported with it.
        revision: i64,
    },
    /// A deletion was requested: provisioning or active → deleting, owned by a new operation.
    BeginDeletion {
        /// The delete operation that takes ownership.
        operation_id: OperationId,
    },
    /// Lost-ACK recovery found the remote identity: deleting → deleting with the identity.
    RegisterRecoveredIdentity {
        /// Must equal the owning operation.
        operation_id: OperationId,
        /// The recovered identity.
        knowledge_space_id: KnowledgeSpaceId,
        /// The recovered revision.
        revision: i64,
    },
    /// The remote deletion can no longer be undone: recorded once, later calls keep the first.
    MarkDeletionIrreversible {
        /// Must equal the owning operation.
        operation_id: OperationId,
        /// When it became irreversible.
        at: DateTime<Utc>,
    },
    /// The deletion finished: deleting → deleted, revision = max(local, remote).
    CompleteDeletion {
        /// Must equal the owning operation.
        operation_id: OperationId,
        /// The remote revision reported with completion.
        revision: i64,
    },
}

impl Transition {
    fn name(&self) -> &'static str {
        match self {
            Self::Activate { .. } => "activate",
            Self::BeginDeletion { .. } => "begin_deletion",
            Self::RegisterRecoveredIdentity { .. } => "register_recovered_identity",
            Self::MarkDeletionIrreversible { .. } => "mark_deletion_irreversible",
            Self::CompleteDeletion { .. } => "complete_deletion",
        }
    }
}

/// Why a transition was refused. Nothing is written when one is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The state machine has no such move from the current state (caller's mistake or a
    /// concurrent change: re-read the control space).
    #[error("control space is {from}; {transition} is not allowed from that state")]
    Forbidden {
        /// Current state.
        from: ControlSpaceState,
        /// Name of the refused transition.
        transition: &'static str,
    },
    /// Another operation owns the control space now.
    #[error("control space is owned by operation {owner}, not {requested}")]
    NotOwner {
        /// The owning operation.
        owner: OperationId,
        /// The operation that asked.
        requested: OperationId,
    },
    /// A recovered identity differs from the one already registered.
    #[error(
        "control space already registers knowledge space {registered}; recovered {recovered} conflicts"
    )]
    IdentityConflict {
        /// The registered identity.
        registered: KnowledgeSpaceId,
        /// The conflicting identity.
        recovered: KnowledgeSpaceId,
    },
}

impl ControlSpace {
    /// Applies `transition` at `now` and returns the next value (resource version + 1).
    ///
    /// # Errors
    /// [`TransitionError::Forbidden`] for a move the state machine does not have,
    /// [`TransitionError::NotOwner`] when the transition names another operation,
    /// [`TransitionError::IdentityConflict`] when a recovered identity contradicts the registered one.
    pub fn apply(
        &self,
        transition: &Transition,
        now: DateTime<Utc>,
    ) -> Result<Self, TransitionError> {
        use ControlSpaceState as S;
        let forbidden = || TransitionError::Forbidden {
            from: self.state,
            transition: transition.name(),
        };
        let mut next = self.clone();
        match transition {
            Transition::Activate {
                operation_id,
                knowledge_space_id,
                revision,
            } => {
                // Planted (verification only): see `Step::complete_provision`.
                let over_deletion = tenantry_kernel::planted!("provision-activates-over-deletion")
                    && self.state == S::Deleting;
                if self.state != S::Provisioning && !over_deletion {
                    return Err(forbidden());
                }
                if !over_deletion {
                    self.require_owner(operation_id)?;
                }
                next.state = S::Active;
                next.knowledge_space_id = Some(knowledge_space_id.clone());
                next.knowledge_space_revision = *revision;
            }
            Transition::BeginDeletion { operation_id } => {
                if !matches!(self.state, S::Provisioning | S::Active) {
                    return Err(forbidden());
                }
                // Planted (verification only): the deletion request leaves the state as it was.
                if !tenantry_kernel::planted!("deletion-keeps-state") {
                    next.state = S::Deleting;
                }
                next.lifecycle_operation_id = operation_id.clone();
            }
            Transition::RegisterRecoveredIdentity {
                operation_id,
                knowledge_space_id,
                revision,
            } => {
                if self.state != S::Deleting {
                    return Err(forbidden());
                }
                self.require_owner(operation_id)?;
                match &self.knowledge_space_id {
                    Some(registered) if registered != knowledge_space_id => {
                        return Err(TransitionError::IdentityConflict {
                            registered: registered.clone(),
                            recovered: knowledge_space_id.clone(),
                        });
                    }
                    Some(_) => {}
                    None => {
                        next.knowledge_space_id = Some(knowledge_space_id.clone());
                        next.knowledge_space_revision = *revision;
                    }
                }
            }
            Transition::MarkDeletionIrreversible { operation_id, at } => {
                if self.state != S::Deleting {
                    return Err(forbidden());
                }
                self.require_owner(operation_id)?;
                next.deletion_irreversible_at = self.deletion_irreversible_at.or(Some(*at));
            }
            Transition::CompleteDeletion {
                operation_id,
                revision,
            } => {
                if self.state != S::Deleting {
                    return Err(forbidden());
                }
                self.require_owner(operation_id)?;
                next.state = S::Deleted;
                next.knowledge_space_revision = self.knowledge_space_revision.max(*revision);
            }
        }
        next.resource_version = self.resource_version.saturating_add(1);
        next.updated_at = now;
        Ok(next)
    }

    fn require_owner(&self, operation_id: &OperationId) -> Result<(), TransitionError> {
        if &self.lifecycle_operation_id == operation_id {
            Ok(())
        } else {
            Err(TransitionError::NotOwner {
                owner: self.lifecycle_operation_id.clone(),
                requested: operation_id.clone(),
            })
        }
    }

    /// Applies each transition in order and returns the compare-and-set that writes the result.
    ///
    /// # Errors
    /// The first [`TransitionError`] of the sequence.
    pub fn plan(
        &self,
        transitions: &[Transition],
        now: DateTime<Utc>,
    ) -> Result<CasUpdate, TransitionError> {
        let mut next = self.clone();
        for transition in transitions {
            next = next.apply(transition, now)?;
        }
        // A plan writes one new version, however many steps it took.
        next.resource_version = self.resource_version.saturating_add(1);
        Ok(CasUpdate {
            expected_resource_version: self.resource_version,
            expected_state: self.state,
            next,
        })
    }
}

/// A compare-and-set write of a control space: store `next` only if the stored row still has
/// `expected_resource_version` and `expected_state`; otherwise the store reports a conflict and
/// writes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasUpdate {
    /// The resource version the change was computed from.
    pub expected_resource_version: i64,
    /// The state the change was computed from.
    pub expected_state: ControlSpaceState,
    /// The full row to write (its `resource_version` is the expected one + 1).
    pub next: ControlSpace,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use chrono::TimeZone;

    pub(crate) fn at(seconds: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + seconds, 0)
            .single()
            .unwrap()
    }

    pub(crate) fn op(s: &str) -> OperationId {
        OperationId::parse(s).unwrap()
    }

    pub(crate) fn ks(s: &str) -> KnowledgeSpaceId {
        KnowledgeSpaceId::parse(s).unwrap()
    }

    pub(crate) fn space(state: ControlSpaceState, owner: &str) -> ControlSpace {
        ControlSpace {
            tenant_id: TenantId::parse("t1").unwrap(),
            control_space_id: ControlSpaceId::parse("cs1").unwrap(),
            state,
            lifecycle_operation_id: op(owner),
            resource_version: 3,
            provisioning_key: ProvisioningKey::parse("pk1").unwrap(),
            knowledge_space_id: None,
            knowledge_space_revision: 0,
            deletion_irreversible_at: None,
            last_revoke_sequence: 0,
            created_at: at(0),
            updated_at: at(0),
        }
    }

    #[test]
    fn allowed_and_forbidden_transitions_follow_the_table() {
        use ControlSpaceState as S;
        let activate = Transition::Activate {
            operation_id: op("op"),
            knowledge_space_id: ks("k"),
            revision: 1,
        };
        let delete = Transition::BeginDeletion {
            operation_id: op("op2"),
        };
        let register = Transition::RegisterRecoveredIdentity {
            operation_id: op("op"),
            knowledge_space_id: ks("k"),
            revision: 1,
        };
        let irreversible = Transition::MarkDeletionIrreversible {
            operation_id: op("op"),
            at: at(5),
        };
        let complete = Transition::CompleteDeletion {
            operation_id: op("op"),
            revision: 1,
        };
        let table: &[(S, &Transition, Option<S>)] = &[
            (S::Provisioning, &activate, Some(S::Active)),
            (S::Active, &activate, None),
            (S::Deleting, &activate, None),
            (S::Deleted, &activate, None),
            (S::Provisioning, &delete, Some(S::Deleting)),
            (S::Active, &delete, Some(S::Deleting)),
            (S::Deleting, &delete, None),
            (S::Deleted, &delete, None),
            (S::Deleting, &register, Some(S::Deleting)),
            (S::Active, &register, None),
            (S::Deleting, &irreversible, Some(S::Deleting)),
            (S::Provisioning, &irreversible, None),
            (S::Deleting, &complete, Some(S::Deleted)),
            (S::Active, &complete, None),
            (S::Deleted, &complete, None),
        ];
        for (from, transition, expected) in table {
            let result = space(*from, "op").apply(transition, at(1));
            match expected {
                Some(to) => {
                    let next = result.unwrap_or_else(|e| panic!("{from} {transition:?}: {e}"));
                    assert_eq!(next.state, *to);
                    assert_eq!(next.resource_version, 4);
                    assert_eq!(next.updated_at, at(1));
                }
                None => assert!(
                    matches!(result, Err(TransitionError::Forbidden { .. })),
                    "{from} {transition:?} should be forbidden, got {result:?}"
                ),
            }
        }
    }

    #[test]
    fn transitions_of_another_operation_are_refused() {
        let result = space(ControlSpaceState::Provisioning, "owner").apply(
            &Transition::Activate {
                operation_id: op("other"),
                knowledge_space_id: ks("k"),
                revision: 1,
            },
            at(1),
        );
        assert_eq!(
            result,
            Err(TransitionError::NotOwner {
                owner: op("owner"),
                requested: op("other")
            })
        );
    }

    #[test]
    fn irreversible_time_is_recorded_once() {
        let cs = space(ControlSpaceState::Deleting, "op");
        let first = cs
            .apply(
                &Transition::MarkDeletionIrreversible {
                    operation_id: op("op"),
                    at: at(5),
                },
                at(5),
            )
            .unwrap();
        let second = first
            .apply(
                &Transition::MarkDeletionIrreversible {
                    operation_id: op("op"),
                    at: at(9),
                },
                at(9),
            )
            .unwrap();
        assert_eq!(second.deletion_irreversible_at, Some(at(5)));
    }

    #[test]
    fn complete_deletion_keeps_the_higher_revision() {
        let mut cs = space(ControlSpaceState::Deleting, "op");
        cs.knowledge_space_revision = 7;
        for (remote, expected) in [(3, 7), (7, 7), (9, 9)] {
            let next = cs
                .apply(
                    &Transition::CompleteDeletion {
                        operation_id: op("op"),
                        revision: remote,
                    },
                    at(1),
                )
                .unwrap();
            assert_eq!(next.knowledge_space_revision, expected);
        }
    }

    #[test]
    fn recovered_identity_conflict_is_detected() {
        let mut cs = space(ControlSpaceState::Deleting, "op");
        cs.knowledge_space_id = Some(ks("a"));
        let same = Transition::RegisterRecoveredIdentity {
            operation_id: op("op"),
            knowledge_space_id: ks("a"),
            revision: 9,
        };
        assert_eq!(cs.apply(&same, at(1)).unwrap().knowledge_space_revision, 0);
        let other = Transition::RegisterRecoveredIdentity {
            operation_id: op("op"),
            knowledge_space_id: ks("b"),
            revision: 9,
        };
        assert_eq!(
            cs.apply(&other, at(1)),
            Err(TransitionError::IdentityConflict {
                registered: ks("a"),
                recovered: ks("b")
            })
        );
    }

    #[test]
    fn plan_writes_one_version_for_several_steps() {
        let cs = space(ControlSpaceState::Deleting, "op");
        let cas = cs
            .plan(
                &[
                    Transition::MarkDeletionIrreversible {
                        operation_id: op("op"),
                        at: at(2),
                    },
                    Transition::CompleteDeletion {
                        operation_id: op("op"),
                        revision: 4,
                    },
                ],
                at(3),
            )
            .unwrap();
        assert_eq!(cas.expected_resource_version, 3);
        assert_eq!(cas.expected_state, ControlSpaceState::Deleting);
        assert_eq!(cas.next.resource_version, 4);
        assert_eq!(cas.next.state, ControlSpaceState::Deleted);
        assert_eq!(cas.next.deletion_irreversible_at, Some(at(2)));
    }

    #[test]
    fn state_names_round_trip() {
        use ControlSpaceState as S;
        for s in [S::Provisioning, S::Active, S::Deleting, S::Deleted] {
            assert_eq!(S::parse(s.as_str()), Some(s));
        }
        assert_eq!(S::parse("gone"), None);
    }
}
