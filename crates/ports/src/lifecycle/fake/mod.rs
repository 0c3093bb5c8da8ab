//! In-memory fakes of the lifecycle ports (feature `testing`).
//!
//! [`InMemoryLifecycleStore`] implements every storage role with the same rules as the SeaORM
//! adapter (it passes the same conformance suite). [`FakeKnowledgeFs`] is a scriptable remote:
//! it keeps spaces by provisioning key, drains deletions for a set number of polls, lags revoke
//! watermarks, and can fail or lose the answer of the next calls.

mod admin;
mod intake;
mod queue;
mod remote;
mod retention;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tenantry_kernel::{CommandId, ControlSpaceId, TenantId};
use tenantry_lifecycle::{
    CasUpdate, CommandOutcome, CommandRecord, CommandStatus, ControlSpace, LeaseToken,
    SupersedeRule,
};

pub use remote::{FakeKnowledgeFs, RemoteCall, RemoteCounters, RemoteFault};

use crate::clock::{Clock, SystemClock};
use crate::lifecycle::{ActionRecord, AttemptError, ControlSpaceReader, StoreError, add_duration};

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in another test thread must not hide this test's result.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct StoreState {
    spaces: BTreeMap<(TenantId, ControlSpaceId), ControlSpace>,
    commands: BTreeMap<CommandId, CommandRecord>,
    /// Attempt window of each command before its current claim (the SQL column
    /// `prior_window_ends_at`), restored by a settle that sent nothing.
    prior_windows: HashMap<CommandId, Option<DateTime<Utc>>>,
    actions: Vec<ActionRecord>,
    /// The attempt-error log, in the order written.
    errors: Vec<AttemptError>,
}

/// In-memory implementation of the lifecycle storage ports. Clones share state.
///
/// Its clock plays the database clock of the SQL adapters: claims, lease expiries, renewals,
/// supersede rules and the stamps of new commands read it ([`with_clock`](Self::with_clock);
/// the system clock by default).
///
/// # Example
/// A store on a manual clock, read through the ports (the engine's examples enqueue and
/// dispatch over it, with [`FakeKnowledgeFs`] as the remote):
/// ```
/// use std::sync::Arc;
///
/// use chrono::{TimeZone, Utc};
/// use tenantry_kernel::{ControlSpaceId, TenantId};
/// use tenantry_ports::clock::ManualClock;
/// use tenantry_ports::lifecycle::ControlSpaceReader;
/// use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let clock = ManualClock::new(Utc.timestamp_opt(1_800_000_000, 0).unwrap());
/// let store = InMemoryLifecycleStore::with_clock(Arc::new(clock.clone()));
/// let (tenant, space) = (TenantId::parse("acme")?, ControlSpaceId::parse("cs-1")?);
/// assert_eq!(store.control_space(&tenant, &space).await?, None);
/// assert!(store.commands().is_empty());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct InMemoryLifecycleStore {
    state: Arc<Mutex<StoreState>>,
    fail_next: Arc<Mutex<Option<StoreError>>>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for InMemoryLifecycleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryLifecycleStore")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Default for InMemoryLifecycleStore {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            fail_next: Arc::default(),
            clock: Arc::new(SystemClock),
        }
    }
}

impl InMemoryLifecycleStore {
    /// An empty store on the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose "database clock" is `clock`.
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            clock,
            ..Self::default()
        }
    }

    /// Makes the next store call fail with `error` (then the store works again).
    pub fn fail_next_call(&self, error: StoreError) {
        *lock(&self.fail_next) = Some(error);
    }

    /// Every command, for assertions.
    pub fn commands(&self) -> Vec<CommandRecord> {
        lock(&self.state).commands.values().cloned().collect()
    }

    /// One command, for assertions.
    pub fn command(&self, id: &CommandId) -> Option<CommandRecord> {
        lock(&self.state).commands.get(id).cloned()
    }

    /// Overwrites a command row (test setup, e.g. an unknown operation or a corrupt payload).
    pub fn put_command(&self, record: CommandRecord) {
        lock(&self.state).commands.insert(record.id.clone(), record);
    }

    /// Overwrites a control space (test setup).
    pub fn put_control_space(&self, space: ControlSpace) {
        lock(&self.state).spaces.insert(
            (space.tenant_id.clone(), space.control_space_id.clone()),
            space,
        );
    }

    fn check_fault(&self) -> Result<(), StoreError> {
        match lock(&self.fail_next).take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// Store rule of the claim: a command is due when its next attempt time has come and it is
/// pending, or processing with an expired (or no) lease, on the store's clock `now` (the SQL
/// claim statement's `WHERE`). Public so the lease model (`tenantry-verification`) applies this very
/// rule instead of a copy of it.
pub fn is_due(record: &CommandRecord, now: DateTime<Utc>) -> bool {
    match record.status {
        CommandStatus::Pending => record.next_attempt_at <= now,
        // Due as well, as in the SQL stores' claim: a processing command was due when claimed,
        // so this only matters after the store's clock stepped back.
        CommandStatus::Processing => {
            record.next_attempt_at <= now
                && (record.lease_expires_at.is_none_or(|at| at <= now)
                    // Planted (verification only): a live lease taken.
                    || tenantry_kernel::planted!("claim-takes-live-lease"))
        }
        CommandStatus::Succeeded
        | CommandStatus::Superseded
        | CommandStatus::Failed
        | CommandStatus::Abandoned => false,
    }
}

/// Store rule of a settle or renewal: the command is processing under `lease`'s owner and
/// epoch (the SQL statements' compare-and-set). Public for the lease model, as [`is_due`].
pub fn holds_lease(record: &CommandRecord, lease: &LeaseToken) -> bool {
    record.status == CommandStatus::Processing
        && ((record.lease_owner.as_ref() == Some(&lease.owner) && record.lease_epoch == lease.epoch)
            // Planted (verification only): a settle or renewal without its lease predicate.
            || tenantry_kernel::planted!("settle-without-lease-check"))
}

/// Store rule of a supersede: whether `rule` lets a settle supersede `record` at the store's
/// clock `now`. `Unattempted`: pending and never claimed. `AfterRemoteAbsence`: pending, or
/// processing with an expired lease, and quiet (never claimed, or its attempt window plus
/// `grace` ended by the time the lookup was sent, `observed_at`, and by `now`). Public for the
/// lease model, as [`is_due`].
pub fn supersede_allowed(record: &CommandRecord, rule: SupersedeRule, now: DateTime<Utc>) -> bool {
    let r = record;
    match rule {
        SupersedeRule::Unattempted => r.status == CommandStatus::Pending && r.attempt_count == 0,
        SupersedeRule::AfterRemoteAbsence { grace, observed_at } => {
            let open = r.status == CommandStatus::Pending
                || (r.status == CommandStatus::Processing
                    && r.lease_expires_at.is_none_or(|at| at <= now));
            // Quiet when the lookup was sent (and by the store's clock).
            let quiet = r.attempt_count == 0
                || r.attempt_window_ends_at.is_none_or(|end| {
                    // Planted (verification only): quietness judged when the answer is
                    // acted on, not when the lookup was sent (the reference's rule).
                    let at = if tenantry_kernel::planted!("absence-judged-at-answer") {
                        now
                    } else {
                        observed_at.min(now)
                    };
                    add_duration(end, grace) <= at
                });
            open && quiet
        }
    }
}

fn cas_matches(state: &StoreState, cas: &CasUpdate) -> bool {
    let key = (
        cas.next.tenant_id.clone(),
        cas.next.control_space_id.clone(),
    );
    state.spaces.get(&key).is_some_and(|cs| {
        cs.resource_version == cas.expected_resource_version && cs.state == cas.expected_state
    })
}

fn release(record: &mut CommandRecord) {
    record.lease_owner = None;
    record.lease_expires_at = None;
}

/// Writes a settled outcome onto the claimed command.
fn apply_outcome(r: &mut CommandRecord, outcome: &CommandOutcome) {
    r.status = outcome.status();
    if let Some(completed_at) = outcome.completed_at() {
        r.completed_at = Some(completed_at);
    }
    if let CommandOutcome::Retry {
        next_attempt_at, ..
    } = outcome
    {
        r.next_attempt_at = *next_attempt_at;
    }
    if let Some(error) = outcome.error() {
        r.last_error_code = Some(error.code.clone());
        r.last_error_message = Some(error.message.clone());
    }
    release(r);
}

#[async_trait]
impl ControlSpaceReader for InMemoryLifecycleStore {
    async fn control_space(
        &self,
        tenant_id: &TenantId,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<ControlSpace>, StoreError> {
        self.check_fault()?;
        Ok(lock(&self.state)
            .spaces
            .get(&(tenant_id.clone(), control_space_id.clone()))
            .cloned())
    }
}
