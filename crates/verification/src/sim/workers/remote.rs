//! The simulated remote: the reference KnowledgeFS model behind a faulty network, each call's
//! fate drawn from the run's generator, and the sender invariant checked on every call.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::Utc;
use rand::Rng;
use tenantry_kernel::{CommandId, ControlSpaceId, IdempotencyKey, LeaseOwner, TenantId};
use tenantry_lifecycle::{
    CommandRecord, CommandStatus, DeletionProgress, DeletionRequest, ProvisionRequest, RemoteSpace,
    RevokeAck, RevokeRequest,
};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::lifecycle::{KnowledgeFs, RemoteError};
use tenantry_testkit::knowledge_fs::RemoteErrorBody;
use tenantry_testkit::knowledge_fs::state::{DeletionBody, KnowledgeFsModel, ProvisionBody};

use super::backend::Backend;
use super::system::key;
use super::{CALL_DEADLINE, MAX_LANDING, REMOTE_CALL_LIMIT, Shared, World, world};

/// What the network does to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Answered,
    AnswerLost,
    ResetBeforeSending,
    ResetAfterSending,
    Stall,
    Timeout,
    Unavailable,
    Gateway(u16),
}

/// One remote call open: counted while its caller waits.
struct CallOpen {
    world: Shared,
    process: usize,
}

impl Drop for CallOpen {
    fn drop(&mut self) {
        world(&self.world).calls_open[self.process] -= 1;
    }
}

#[derive(Clone)]
pub(super) struct SimRemote<B> {
    pub(super) world: Shared,
    /// The caller's process: its open calls are counted against [`REMOTE_CALL_LIMIT`].
    pub(super) process: usize,
    /// The caller's generation: a call of a generation that crashed never leaves.
    pub(super) generation: u32,
    pub(super) store: B,
    /// The caller's process clock: the call deadline is a timer of the caller.
    pub(super) clock: ManualClock,
    /// The lease owner of the caller's process (one per process, as its pool claims with one).
    pub(super) caller: String,
}

/// The sender invariant of one remote call: `None` when `caller` holding `epoch` (the epoch it
/// claimed) sends under `command`'s current lease at `now` (processing, the same owner and
/// epoch, unexpired), else the violation to report.
pub(super) fn sender_violation(
    caller: &str,
    epoch: Option<i64>,
    command: Option<&CommandRecord>,
    now: chrono::DateTime<Utc>,
    call: &str,
) -> Option<String> {
    let ok = command.is_some_and(|r| {
        r.status == CommandStatus::Processing
            && r.lease_owner.as_ref().map(LeaseOwner::as_str) == Some(caller)
            && Some(r.lease_epoch.0) == epoch
            && r.lease_expires_at.is_some_and(|at| at > now)
    });
    if ok {
        return None;
    }
    let holder = command.map(|r| {
        format!(
            "{} under {:?} epoch {} until {:?}",
            r.status, r.lease_owner, r.lease_epoch.0, r.lease_expires_at
        )
    });
    Some(format!(
        "remote {call} sent by {caller} epoch {epoch:?} without the command's current lease \
         (command: {holder:?})"
    ))
}

fn remote_error(body: &RemoteErrorBody) -> RemoteError {
    RemoteError::answered(body.status, body.code, body.message.clone())
}

impl<B: Backend> SimRemote<B> {
    /// Checks that the caller sends under the command's current, unexpired lease: the store's
    /// (owner, epoch) must be the caller's (owner, epoch). The caller is this remote's process
    /// (one lease owner per process, as its pool claims with one); its epoch is the latest
    /// epoch of this command the store handed to that owner ([`World::leases`]). A pool that
    /// claimed a command again after its lease expired checks against the newer epoch: the
    /// older dispatch checks its own lease before every call and cancels the call when it ends.
    ///
    /// A call whose key names no command (neither a command's id nor a delete command's
    /// caller key) breaks the idempotency rule itself (docs/protocol.md, "Idempotency"): a
    /// retry would not repeat its key, so the remote could apply it twice.
    fn check_sender(
        w: &mut World,
        caller: &str,
        key: &IdempotencyKey,
        command: Option<CommandRecord>,
        call: &str,
    ) {
        if command.is_none() {
            w.violations.push(format!(
                "remote {call} sent by {caller} under key {key}, which names no command \
                 (a mutation carries its command's id as its idempotency key)"
            ));
            return;
        }
        let now = w.db_clock.now();
        let epoch = command.as_ref().and_then(|r| {
            w.leases
                .range((r.id.clone(), i64::MIN)..=(r.id.clone(), i64::MAX))
                .filter(|(_, view)| view.owner == *caller)
                .map(|((_, epoch), _)| *epoch)
                .max()
        });
        if let Some(violation) = sender_violation(caller, epoch, command.as_ref(), now, call) {
            w.violations.push(violation);
        }
    }

    fn draw_fate(w: &mut World) -> Fate {
        if w.rng.random_range(0..100) >= w.fault_percent {
            return Fate::Answered;
        }
        match w.rng.random_range(0..8u8) {
            0 => Fate::AnswerLost,
            1 => Fate::ResetBeforeSending,
            2 => Fate::ResetAfterSending,
            3 => Fate::Stall,
            4 => Fate::Timeout,
            5 => Fate::Unavailable,
            _ => Fate::Gateway([500, 502, 504][w.rng.random_range(0..3usize)]),
        }
    }

    /// Sends one call: its effect `apply` lands (or not) in its own task, as the network
    /// decides; the caller waits for the answer until the call deadline.
    async fn call<T: Send + 'static>(
        &self,
        name: &str,
        key: &IdempotencyKey,
        apply: impl FnOnce(&mut KnowledgeFsModel, chrono::DateTime<Utc>) -> Result<T, RemoteErrorBody>
        + Send
        + 'static,
    ) -> Result<T, RemoteError> {
        // The sender: mutations carry their command's id as the key (docs/protocol.md,
        // "Idempotency"); a lookup carries its delete command's caller key.
        let command = match CommandId::parse(key.as_str())
            .ok()
            .and_then(|id| self.store.command(&id))
        {
            Some(command) => Some(command),
            None => match self.store.command_by_idempotency_key(key).await {
                Ok(found) => found,
                Err(e) => {
                    // Reported first, so it is not mistaken for a key that names no command.
                    world(&self.world)
                        .violations
                        .push(format!("the sender check could not read the store: {e}"));
                    None
                }
            },
        };
        if world(&self.world).running[self.process] != Some(self.generation) {
            // A dispatch task of a crashed process that ran before its abort took effect: the
            // process is gone, so nothing is sent.
            std::future::pending::<()>().await;
        }
        let (fate, landing, answer_after) = {
            let mut w = world(&self.world);
            w.remote_calls += 1;
            Self::check_sender(&mut w, &self.caller, key, command, name);
            w.calls_open[self.process] += 1;
            let open = w.calls_open[self.process];
            w.most_calls_open = w.most_calls_open.max(open);
            if open > REMOTE_CALL_LIMIT {
                w.violations.push(format!(
                    "{} has {open} remote calls open, over its {REMOTE_CALL_LIMIT} slots",
                    self.caller
                ));
            }
            let fate = Self::draw_fate(&mut w);
            let lands = match fate {
                Fate::ResetBeforeSending | Fate::Unavailable => false,
                Fate::ResetAfterSending | Fate::Gateway(_) => w.rng.random_bool(0.5),
                _ => true,
            };
            let landing = match fate {
                _ if !lands => None,
                Fate::Timeout | Fate::Gateway(_) => Some(Duration::from_secs(
                    w.rng.random_range(0..=MAX_LANDING.as_secs()),
                )),
                _ => Some(Duration::from_millis(w.rng.random_range(0..1_500))),
            };
            let answer_after = match fate {
                Fate::Stall => Duration::from_secs(w.rng.random_range(35..140)),
                _ => Duration::from_millis(w.rng.random_range(0..1_500)),
            };
            w.event(format!("{} {name} {key}: {fate:?}", self.caller));
            (fate, landing, answer_after)
        };
        // Closes the call when the caller stops waiting: answered, past its deadline, or
        // dropped with its process.
        let _open = CallOpen {
            world: Arc::clone(&self.world),
            process: self.process,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Some(delay) = landing {
            world(&self.world).pending_deliveries += 1;
            let shared = Arc::clone(&self.world);
            let name = name.to_owned();
            let key = key.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let mut w = world(&shared);
                let now = w.db_clock.now();
                let result = apply(&mut w.remote, now);
                let outcome = match &result {
                    Ok(_) => "applied".to_owned(),
                    Err(e) => format!("refused {} {}", e.status, e.code),
                };
                w.event(format!("{name} {key} lands: {outcome}"));
                w.pending_deliveries -= 1;
                drop(w);
                if tx.send(result).is_err() {
                    // The caller stopped waiting (answer lost, timeout, crash): a late landing.
                    world(&shared).late_landings += 1;
                }
            });
        }
        let answer = async {
            match fate {
                Fate::Answered | Fate::Stall => {
                    let result = rx.await.map_err(|_| {
                        RemoteError::outcome_unknown("the request was lost on the way")
                    })?;
                    tokio::time::sleep(answer_after).await;
                    result.map_err(|e| remote_error(&e))
                }
                Fate::AnswerLost => {
                    let _ = rx.await;
                    Err(RemoteError::outcome_unknown(
                        "connection closed after the request was sent",
                    ))
                }
                Fate::ResetBeforeSending => Err(RemoteError::not_dispatched(
                    "connection reset before the request was sent",
                )),
                Fate::ResetAfterSending => Err(RemoteError::outcome_unknown(
                    "connection reset after the request was sent",
                )),
                Fate::Timeout => std::future::pending().await,
                Fate::Unavailable => Err(RemoteError::answered(
                    503,
                    "KNOWLEDGE_FS_UNAVAILABLE",
                    "try again later",
                )),
                Fate::Gateway(status) => Err(RemoteError::answered(
                    status,
                    "GATEWAY_ERROR",
                    "the gateway gave up; the backend may go on",
                )),
            }
        };
        tokio::select! {
            biased;
            result = answer => result,
            () = self.clock.sleep(CALL_DEADLINE) => {
                Err(RemoteError::outcome_unknown("no answer before the call deadline"))
            }
        }
    }
}

#[async_trait]
impl<B: Backend> KnowledgeFs for SimRemote<B> {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let namespace = request.namespace_id.clone();
        let body = ProvisionBody {
            control_space_id: request.control_space_id.clone(),
            operation_id: request.operation_id.clone(),
            provisioning_key: request.provisioning_key.clone(),
            name: request.name.clone(),
            slug: request.slug.clone(),
            icon: request.icon.clone(),
            description: request.description.clone(),
            model_intent: request.model_intent.clone(),
            profile_intent: request.profile_intent.clone(),
        };
        self.call("provision", &request.idempotency_key, move |model, _| {
            model.provision(&namespace, &body).map(|p| p.space)
        })
        .await
    }

    async fn find_by_provisioning_key(
        &self,
        namespace: &TenantId,
        key: &tenantry_kernel::ProvisioningKey,
        control_space: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        let (namespace, key, control_space) =
            (namespace.clone(), key.clone(), control_space.clone());
        // A lookup carries no idempotency key; the sender is checked through the delete
        // command of its control space.
        let idempotency = self::key(format!("delete-{control_space}"));
        self.call("lookup", &idempotency, move |model, _| {
            Ok(model
                .lookup(&namespace, &key, Some(&control_space))
                .into_iter()
                .next())
        })
        .await
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        let namespace = request.namespace_id.clone();
        let space = request.knowledge_space_id.clone();
        let body = DeletionBody {
            control_space_id: request.control_space_id.clone(),
            operation_id: request.operation_id.clone(),
            provisioning_key: request.provisioning_key.clone(),
            expected_revision: request.expected_revision,
        };
        self.call("deletion", &request.idempotency_key, move |model, now| {
            model.delete(&namespace, &space, &body, now)
        })
        .await
    }

    async fn revoke_grant(&self, _request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        Err(RemoteError::answered(
            501,
            "NOT_SIMULATED",
            "revocations are not simulated",
        ))
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use tenantry_kernel::{LeaseEpoch, OperationId, fingerprint_json};
    use tenantry_lifecycle::Operation;

    use super::*;

    fn processing(owner: &str, epoch: i64, until: chrono::DateTime<Utc>) -> CommandRecord {
        CommandRecord {
            id: CommandId::parse("c-1").expect("valid id"),
            tenant_id: TenantId::parse("t1").expect("valid id"),
            control_space_id: ControlSpaceId::parse("cs1").expect("valid id"),
            operation_id: OperationId::parse("op-1").expect("valid id"),
            idempotency_key: IdempotencyKey::parse("k-1").expect("valid id"),
            request_fingerprint: fingerprint_json(&serde_json::json!(1)),
            operation: Operation::Provision,
            payload: serde_json::json!({}),
            status: CommandStatus::Processing,
            attempt_count: 2,
            attempt_budget_base: 0,
            lease_owner: Some(LeaseOwner::parse(owner).expect("valid id")),
            lease_expires_at: Some(until),
            lease_epoch: LeaseEpoch(epoch),
            next_attempt_at: until,
            turn_at: until,
            last_error_code: None,
            last_error_message: None,
            created_at: until,
            completed_at: None,
            attempt_window_ends_at: Some(until),
            trace_context: None,
        }
    }

    /// The sender check compares (owner, epoch): a caller of the lease's owner that claimed an
    /// older epoch (its lease was taken over and handed back to the same owner) is reported.
    #[test]
    fn the_sender_check_compares_owner_and_epoch() {
        let now = Utc
            .timestamp_opt(1_900_000_000, 0)
            .single()
            .expect("valid time");
        let later = now + chrono::Duration::seconds(30);
        let record = processing("p0w0", 3, later);
        assert_eq!(
            sender_violation("p0w0", Some(3), Some(&record), now, "provision"),
            None
        );
        let stale = sender_violation("p0w0", Some(1), Some(&record), now, "provision")
            .expect("an older epoch of the same owner is not the current lease");
        assert!(
            stale.contains("without the command's current lease"),
            "{stale}"
        );
        assert!(sender_violation("p1w0", Some(3), Some(&record), now, "provision").is_some());
        assert!(sender_violation("p0w0", Some(3), Some(&record), later, "provision").is_some());
        assert!(sender_violation("p0w0", None, Some(&record), now, "provision").is_some());
    }
}
