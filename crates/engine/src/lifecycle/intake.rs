//! Command intake: create a control space, request its deletion, request a grant revocation.
//!
//! Each request is idempotent on its idempotency key: the same key with the same request
//! returns the original receipt; the same key with a different request is refused. Bad input
//! is refused by the pure planning functions before anything is written.

use std::sync::Arc;

use tenantry_kernel::{CommandId, OperationId};
use tenantry_lifecycle::intake::{
    CreateControlSpace, IntakeError, NewIds, RequestDeletion, RequestRevocation,
};
pub use tenantry_lifecycle::intake::{IntakeReceipt, IntakeRequest};
pub use tenantry_ports::lifecycle::IntakeFailure;
use tenantry_ports::lifecycle::{
    IntakeStoreError, LifecycleStore, MAX_INTAKE_CONFLICT_RETRIES, StoreError, Submitted,
};

use tenantry_ports::clock::Clock;
use tenantry_ports::wake::Wakeups;
use tracing::{Instrument, info_span};

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
    wakeups: Option<Wakeups>,
}

impl<S> std::fmt::Debug for CommandIntake<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandIntake").finish_non_exhaustive()
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
            wakeups: None,
        }
    }

    /// Wakes `wakeups` after every command this intake creates (not on a replay), so the
    /// idle workers of this process ([`Worker::with_wakeups`](super::Worker::with_wakeups))
    /// claim it at once instead of at their next idle poll. On SQLite and PostgreSQL alike.
    #[must_use]
    pub fn with_wakeups(mut self, wakeups: Wakeups) -> Self {
        self.wakeups = Some(wakeups);
        self
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
        self.submit(request.clone()).await
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
        self.submit(request.clone()).await
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
        self.submit(request.clone()).await
    }

    /// Applies any lifecycle request (see the three named forms above), in one transaction of
    /// the store. To enqueue inside a transaction of your own, use the store adapter's enqueue
    /// (`tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore::enqueue`).
    ///
    /// # Errors
    /// Those of the named form for the request's kind; [`IntakeFailure::Contended`] when the
    /// control space changed between read and write [`MAX_INTAKE_CONFLICT_RETRIES`] times.
    pub async fn submit(
        &self,
        request: impl Into<IntakeRequest>,
    ) -> Result<IntakeReceipt, IntakeFailure> {
        self.submit_traced(request, None).await
    }

    /// [`submit`](Self::submit) in an `intake` span, recording the caller's W3C trace context
    /// on the new command (docs/operations.md, "Tracing"): the `intake` span's own context
    /// when OpenTelemetry records it (a child of the current span, which the admin API parents
    /// on the request's `traceparent`), else `caller_traceparent` when it is a valid
    /// `traceparent` value, else none. Every dispatch of the command continues that trace.
    /// A replay stores nothing new.
    ///
    /// # Errors
    /// Those of [`submit`](Self::submit).
    pub async fn submit_traced(
        &self,
        request: impl Into<IntakeRequest>,
        caller_traceparent: Option<&str>,
    ) -> Result<IntakeReceipt, IntakeFailure> {
        let request = request.into();
        let (tenant, control_space) = request.target();
        let span = info_span!(
            "intake",
            operation = %request.operation(),
            tenant = %tenant,
            control_space = %control_space,
            command_id = tracing::field::Empty,
            replayed = tracing::field::Empty,
        );
        let trace_context = span
            .in_scope(crate::trace_context::current)
            .or_else(|| caller_traceparent.and_then(crate::trace_context::normalize));
        let result = self
            .submit_untraced(request, trace_context)
            .instrument(span.clone())
            .await;
        if let Ok(receipt) = &result {
            span.record("command_id", tracing::field::display(&receipt.command_id));
            span.record("replayed", receipt.replayed);
        }
        result
    }

    async fn submit_untraced(
        &self,
        request: IntakeRequest,
        trace_context: Option<String>,
    ) -> Result<IntakeReceipt, IntakeFailure> {
        // A replay is recognised before the request is re-validated: the control space has
        // usually moved on since the first call.
        if let Some(existing) = self
            .store
            .command_by_idempotency_key(request.idempotency_key())
            .await?
        {
            return Ok(request.replay(&existing)?);
        }
        let (tenant, control_space) = request.target();
        for _ in 0..MAX_INTAKE_CONFLICT_RETRIES {
            let current = if request.reads_control_space() {
                self.store.control_space(tenant, control_space).await?
            } else {
                None
            };
            let ids = NewIds {
                command_id: parse_generated(CommandId::parse((self.new_id)()))?,
                operation_id: parse_generated(OperationId::parse((self.new_id)()))?,
            };
            let mut plan = request.plan(current.as_ref(), ids, self.clock.now())?;
            plan.command.trace_context.clone_from(&trace_context);
            match self.store.submit(&plan).await {
                Ok(Submitted::Created(record)) => {
                    // Committed: the command is claimable now.
                    if let Some(wakeups) = &self.wakeups {
                        wakeups.wake();
                    }
                    return Ok(IntakeReceipt::of(&record, false));
                }
                Ok(Submitted::Existing(record)) => return Ok(request.replay(&record)?),
                Err(IntakeStoreError::ControlSpaceConflict { .. }) => continue,
                Err(IntakeStoreError::ControlSpaceExists) => {
                    return Err(self.control_space_taken(&request).await.into());
                }
                Err(IntakeStoreError::UnknownControlSpace) => {
                    return Err(request.unknown_control_space().into());
                }
                Err(IntakeStoreError::Store(error)) => return Err(error.into()),
                // A refusal this engine does not know yet: nothing was written; report it as
                // a storage failure with the store's own message.
                Err(other) => return Err(StoreError::unavailable(other.to_string()).into()),
            }
        }
        Err(IntakeFailure::Contended)
    }

    /// Applies many requests (a bulk import), one answer per request, in order; each answer is
    /// what [`submit`](Self::submit) gives for that request alone (created, replayed or
    /// refused, nothing written for a refused one). The cost differs: the requests that create
    /// a control space are planned at once and handed to the store together
    /// (`IntakeStore::submit_many`; the SeaORM store writes them with multi-row inserts in one
    /// transaction, about a thousand commands per call is a good batch); the others
    /// (deletions, revocations read their control space first) and any request the batch
    /// could not settle go through [`submit`](Self::submit) one by one. Idle workers are woken
    /// once for the batch.
    pub async fn submit_many(
        &self,
        requests: Vec<IntakeRequest>,
    ) -> Vec<Result<IntakeReceipt, IntakeFailure>> {
        let mut answers: Vec<Option<Result<IntakeReceipt, IntakeFailure>>> =
            requests.iter().map(|_| None).collect();
        let now = self.clock.now();
        // The whole batch continues the caller's span (a bulk import is one request).
        let trace_context = crate::trace_context::current();
        let mut batch = Vec::new();
        for (index, request) in requests.iter().enumerate() {
            if request.reads_control_space() {
                continue;
            }
            let ids = (
                CommandId::parse((self.new_id)()),
                OperationId::parse((self.new_id)()),
            );
            // A request that does not plan is left to `submit`, which answers a replay of
            // its key before validating it.
            if let (Ok(command_id), Ok(operation_id)) = ids
                && let Ok(mut plan) = request.plan(
                    None,
                    NewIds {
                        command_id,
                        operation_id,
                    },
                    now,
                )
            {
                plan.command.trace_context.clone_from(&trace_context);
                batch.push((index, plan));
            }
        }
        let plans: Vec<_> = batch.iter().map(|(_, plan)| plan.clone()).collect();
        let results = self.store.submit_many(&plans).await;
        let mut created = false;
        for ((index, _), result) in batch.iter().zip(results) {
            let request = &requests[*index];
            answers[*index] = match result {
                Ok(Submitted::Created(record)) => {
                    created = true;
                    Some(Ok(IntakeReceipt::of(&record, false)))
                }
                Ok(Submitted::Existing(record)) => {
                    Some(request.replay(&record).map_err(Into::into))
                }
                Err(IntakeStoreError::ControlSpaceExists) => {
                    Some(Err(self.control_space_taken(request).await.into()))
                }
                Err(IntakeStoreError::Store(error)) => Some(Err(error.into())),
                // Anything else: the request alone decides.
                Err(_) => None,
            };
        }
        if created && let Some(wakeups) = &self.wakeups {
            wakeups.wake();
        }
        let mut out = Vec::with_capacity(requests.len());
        for (request, answer) in requests.into_iter().zip(answers) {
            out.push(match answer {
                Some(answer) => answer,
                None => self.submit(request).await,
            });
        }
        out
    }

    /// The refusal of a creation whose id is taken: "was deleted" when the control space
    /// holding it is deleted, else "already exists" (also when it cannot be read).
    async fn control_space_taken(&self, request: &IntakeRequest) -> IntakeError {
        let (tenant, control_space) = request.target();
        let existing = self
            .store
            .control_space(tenant, control_space)
            .await
            .ok()
            .flatten();
        request.control_space_taken(existing.as_ref())
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
