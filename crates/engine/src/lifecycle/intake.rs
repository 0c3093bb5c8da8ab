//! Command intake: create a control space, request its deletion, request a grant revocation.
//!
//! Each request is idempotent on its idempotency key: the same key with the same request
//! returns the original receipt; the same key with a different request is refused. Bad input
//! is refused by the pure planning functions before anything is written.

use std::sync::Arc;

use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, OperationId, TenantId};
use tenantry_lifecycle::intake::{
    CreateControlSpace, IntakeError, IntakePlan, NewIds, RequestDeletion, RequestRevocation,
    request_fingerprint,
};
use tenantry_lifecycle::{CommandRecord, ControlSpace, Operation};
use tenantry_ports::lifecycle::{IntakeStoreError, LifecycleStore, StoreError, Submitted};

use tenantry_ports::clock::Clock;

/// How many times a request is re-planned after a concurrent change of its control space.
const MAX_CONFLICT_RETRIES: usize = 5;

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
    fn of(record: &CommandRecord, replayed: bool) -> Self {
        Self {
            command_id: record.id.clone(),
            operation_id: record.operation_id.clone(),
            tenant_id: record.tenant_id.clone(),
            control_space_id: record.control_space_id.clone(),
            operation: record.operation.clone(),
            replayed,
        }
    }
}

/// Why a request was not accepted. Nothing was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IntakeFailure {
    /// The request is invalid or not allowed now (the caller's to fix).
    #[error(transparent)]
    Rejected(#[from] IntakeError),
    /// The control space kept changing concurrently; retry the request.
    #[error("control space changed concurrently {MAX_CONFLICT_RETRIES} times; retry the request")]
    Contended,
    /// Storage failed; retry later.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Accepts lifecycle requests and enqueues their commands.
///
/// # Example
/// Over the in-memory fake (`tenantry-ports`, feature `testing`); a service passes
/// `SeaOrmLifecycleStore` instead:
/// ```
/// use std::sync::Arc;
///
/// use tenantry_engine::lifecycle::{CommandIntake, SystemClock};
/// use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
/// use tenantry_lifecycle::intake::CreateControlSpace;
/// use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let intake = CommandIntake::new(InMemoryLifecycleStore::new(), Arc::new(SystemClock));
/// let request = CreateControlSpace {
///     tenant_id: TenantId::parse("acme")?,
///     control_space_id: ControlSpaceId::parse("cs-1")?,
///     idempotency_key: IdempotencyKey::parse("create-cs-1")?,
///     name: "Docs".into(),
///     slug: "docs".into(),
///     icon: String::new(),
///     description: String::new(),
///     model_intent: None,
///     profile_intent: None,
/// };
/// let receipt = intake.create_control_space(&request).await?;
/// assert!(!receipt.replayed);
///
/// // The same key with the same request: the first receipt again, nothing new enqueued.
/// let again = intake.create_control_space(&request).await?;
/// assert_eq!((&again.command_id, again.replayed), (&receipt.command_id, true));
/// # Ok(())
/// # }
/// ```
pub struct CommandIntake<S> {
    store: S,
    clock: Arc<dyn Clock>,
    new_id: Arc<dyn Fn() -> String + Send + Sync>,
}

impl<S> std::fmt::Debug for CommandIntake<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandIntake").finish_non_exhaustive()
    }
}

enum Request<'a> {
    Create(&'a CreateControlSpace),
    Delete(&'a RequestDeletion),
    Revoke(&'a RequestRevocation),
}

impl Request<'_> {
    fn key(&self) -> &IdempotencyKey {
        match self {
            Self::Create(r) => &r.idempotency_key,
            Self::Delete(r) => &r.idempotency_key,
            Self::Revoke(r) => &r.idempotency_key,
        }
    }

    fn target(&self) -> (&TenantId, &ControlSpaceId) {
        match self {
            Self::Create(r) => (&r.tenant_id, &r.control_space_id),
            Self::Delete(r) => (&r.tenant_id, &r.control_space_id),
            Self::Revoke(r) => (&r.tenant_id, &r.control_space_id),
        }
    }

    fn fingerprint(&self) -> tenantry_kernel::Fingerprint {
        match self {
            Self::Create(r) => request_fingerprint(&Operation::Provision, r),
            Self::Delete(r) => request_fingerprint(&Operation::Delete, r),
            Self::Revoke(r) => request_fingerprint(&Operation::Revoke, r),
        }
    }

    fn plan(
        &self,
        current: Option<&ControlSpace>,
        ids: NewIds,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<IntakePlan, IntakeError> {
        match self {
            Self::Create(r) => r.plan(ids, now),
            Self::Delete(r) => r.plan(current, ids, now),
            Self::Revoke(r) => r.plan(current, ids, now),
        }
    }
}

impl<S: LifecycleStore> CommandIntake<S> {
    /// Intake over `store`, timestamping with `clock` and naming commands and operations with
    /// random UUIDs.
    pub fn new(store: S, clock: Arc<dyn Clock>) -> Self {
        Self {
            store,
            clock,
            new_id: Arc::new(|| uuid::Uuid::new_v4().to_string()),
        }
    }

    /// Names new commands and operations with `new_id` instead (deterministic tests).
    #[must_use]
    pub fn with_id_source(mut self, new_id: impl Fn() -> String + Send + Sync + 'static) -> Self {
        self.new_id = Arc::new(new_id);
        self
    }

    /// Creates a control space (state provisioning) and enqueues its provision, in one transaction.
    ///
    /// # Errors
    /// [`IntakeFailure::Rejected`] for invalid fields, an existing control space id or a reused
    /// key with a different request; [`IntakeFailure::Store`] when storage fails.
    pub async fn create_control_space(
        &self,
        request: &CreateControlSpace,
    ) -> Result<IntakeReceipt, IntakeFailure> {
        self.submit(Request::Create(request)).await
    }

    /// Moves a control space to deleting and enqueues its delete command, in one transaction.
    ///
    /// # Errors
    /// [`IntakeFailure::Rejected`] for an unknown control space, one already deleting or
    /// deleted, or a reused key with a different request.
    pub async fn request_deletion(
        &self,
        request: &RequestDeletion,
    ) -> Result<IntakeReceipt, IntakeFailure> {
        self.submit(Request::Delete(request)).await
    }

    /// Enqueues a revoke command with the control space's next revoke sequence.
    ///
    /// # Errors
    /// [`IntakeFailure::Rejected`] for an unknown or not yet provisioned control space, an empty
    /// reason, or a reused key with a different request.
    pub async fn request_revocation(
        &self,
        request: &RequestRevocation,
    ) -> Result<IntakeReceipt, IntakeFailure> {
        self.submit(Request::Revoke(request)).await
    }

    async fn submit(&self, request: Request<'_>) -> Result<IntakeReceipt, IntakeFailure> {
        let fingerprint = request.fingerprint();
        let replay = |record: CommandRecord| {
            if record.request_fingerprint == fingerprint {
                Ok(IntakeReceipt::of(&record, true))
            } else {
                Err(IntakeFailure::Rejected(IntakeError::IdempotencyConflict {
                    key: request.key().clone(),
                }))
            }
        };
        // A replay is recognised before the request is re-validated: the control space has
        // usually moved on since the first call.
        if let Some(existing) = self.store.command_by_idempotency_key(request.key()).await? {
            return replay(existing);
        }
        let (tenant, control_space) = request.target();
        for _ in 0..MAX_CONFLICT_RETRIES {
            let current = match &request {
                Request::Create(_) => None,
                _ => self.store.control_space(tenant, control_space).await?,
            };
            let ids = NewIds {
                command_id: parse_generated(CommandId::parse((self.new_id)()))?,
                operation_id: parse_generated(OperationId::parse((self.new_id)()))?,
            };
            let plan = request.plan(current.as_ref(), ids, self.clock.now())?;
            match self.store.submit(&plan).await {
                Ok(Submitted::Created(record)) => return Ok(IntakeReceipt::of(&record, false)),
                Ok(Submitted::Existing(record)) => return replay(record),
                Err(IntakeStoreError::ControlSpaceConflict) => continue,
                Err(IntakeStoreError::ControlSpaceExists) => {
                    return Err(IntakeError::ControlSpaceExists {
                        tenant_id: tenant.clone(),
                        control_space_id: control_space.clone(),
                    }
                    .into());
                }
                Err(IntakeStoreError::UnknownControlSpace) => {
                    return Err(IntakeError::UnknownControlSpace {
                        tenant_id: tenant.clone(),
                        control_space_id: control_space.clone(),
                    }
                    .into());
                }
                Err(IntakeStoreError::Store(error)) => return Err(error.into()),
            }
        }
        Err(IntakeFailure::Contended)
    }
}

fn parse_generated<T>(parsed: Result<T, tenantry_kernel::IdError>) -> Result<T, IntakeFailure> {
    parsed.map_err(|e| {
        IntakeFailure::Rejected(IntakeError::InvalidField {
            field: "generated id",
            reason: e.to_string(),
        })
    })
}
