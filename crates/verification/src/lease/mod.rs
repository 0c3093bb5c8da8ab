//! Model of the lifecycle saga's leased outbox: 3 workers, one control space, its provision
//! command and (once requested) its delete command.
//!
//! Every saga decision is the real pure function of `tenantry_lifecycle::saga::Step`
//! (`start_provision`, `complete_provision`, `start_delete`, `deletion_target`,
//! `recover_identity`, `complete_absent`, `settle_deletion`, `remote_failure`,
//! `provision_failure`, `retry`), every
//! control-space change the real `ControlSpace::plan` / `apply`, every epoch
//! `LeaseEpoch::next`. The store's own rules are SQL statements in `store-seaorm`; the model
//! takes three of them from the in-memory store of `tenantry-ports`
//! (`tenantry_ports::lifecycle::fake::{is_due, holds_lease, supersede_allowed}`, over the row
//! as a `CommandRecord`) and writes the rest out again after that store (the settle
//! statement's sequence and writes, the control-space compare-and-set, the claim's and
//! renewal's writes) in [`LeaseProtocol`]'s store functions (module `store`).
//!
//! Time is a tick (one second of the store's clock). A worker judges its lease on its own
//! monotonic deadline, counted from before the claim (the engine's `lease` module); worker 2's
//! wall clock runs [`SKEW`] behind, which only matters to the planted bug that judges leases on
//! the wall clock. The remote is a KnowledgeFS that keeps one space per provisioning key and,
//! as the real one
//! does, refuses to provision a key whose space it deleted (409 `KNOWLEDGE_FS_SPACE_DELETED`,
//! permanent): the saga relies on that contract (docs/protocol.md).

mod domain;
mod model;
mod store;

use tenantry_lifecycle::{CommandStatus, ControlSpaceState};

/// Number of workers.
pub const WORKERS: usize = 3;
/// Lease duration, ticks.
pub const LEASE_TICKS: u8 = 2;
/// Grace period after a provision's attempt window before absence proves a deletion, ticks.
pub const GRACE_TICKS: u8 = 1;
/// How far each worker's wall clock runs behind the store's, ticks.
pub const SKEW: [u8; WORKERS] = [0, 0, 1];
/// Claims per command the model explores (a bound of the search, not a rule).
pub const MAX_CLAIMS: u8 = 2;

const PROVISION: usize = 0;
const DELETE: usize = 1;

/// A deliberately broken rule, to show the checker finds what it must.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LeaseBug {
    /// The real rules.
    None,
    /// The store settles without comparing the lease epoch (and owner).
    SettleWithoutEpochCheck,
    /// The store claims a processing command whose lease has not expired.
    ClaimWithoutExpiryCheck,
    /// Workers judge their lease on their own wall clock against the lease's expiry instead of
    /// a monotonic deadline counted from before the claim.
    LeaseCheckOnWallClock,
    /// The absence rule (`complete_absent` and the store's `AfterRemoteAbsence` re-check) is
    /// judged when the lookup's answer is acted on instead of when the lookup was sent (the
    /// reference's rule; docs/verification.md, "Finding: slow lookups"). Only a slow lookup
    /// shows it, so [`LeaseProtocol::with_bug`] turns `slow_lookups` on for it.
    AbsenceJudgedAtAnswer,
    /// The model's remote creates a new space for a provisioning key whose space exists (it
    /// forgets the key's idempotency).
    NonIdempotentRemote,
}

/// The lease-protocol model: [`LeaseBug`] variant and how many ticks time may advance.
#[derive(Debug, Clone)]
pub struct LeaseProtocol {
    /// Planted bug, or [`LeaseBug::None`].
    pub bug: LeaseBug,
    /// Last tick time may reach.
    pub max_time: u8,
    /// Whether time may pass between a lookup's answer and the decision taken on it (a slow
    /// lookup). The engine decides on the store's clock *after* the answer but judges the
    /// absence rule at the time the lookup was sent, so a late provision landing meanwhile is
    /// not missed (docs/verification.md, "Finding: slow lookups"; the planted bug
    /// [`LeaseBug::AbsenceJudgedAtAnswer`] shows what judging at the answer misses). Off in
    /// the default model (it multiplies the states); `tests/models.rs` checks it on.
    pub slow_lookups: bool,
}

impl LeaseProtocol {
    /// The real rules with the default bound (3 ticks: a lease, its expiry and a reclaim).
    pub fn correct() -> Self {
        Self::with_bug(LeaseBug::None)
    }

    /// A planted-bug variant with the default bound (slow lookups on for
    /// [`LeaseBug::AbsenceJudgedAtAnswer`], which only they show).
    pub fn with_bug(bug: LeaseBug) -> Self {
        Self {
            bug,
            max_time: 3,
            slow_lookups: bug == LeaseBug::AbsenceJudgedAtAnswer,
        }
    }
}

/// One outbox row, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutboxRow {
    /// Whether intake created it (the delete row appears on request).
    pub enqueued: bool,
    /// Status.
    pub status: CommandStatus,
    /// Current lease owner (worker index).
    pub owner: Option<u8>,
    /// Lease epoch.
    pub epoch: u8,
    /// Lease expiry, tick.
    pub expires: u8,
    /// Earliest next claim, tick.
    pub next_at: u8,
    /// Claims so far.
    pub claims: u8,
    /// Attempt window end (see `CommandRecord::attempt_window_ends_at`), tick.
    pub window_end: Option<u8>,
    /// The window before the current claim (restored by a settle that sent nothing).
    pub prior_window: Option<u8>,
    /// The lease epoch of the last settle statement the store accepted for this row since its
    /// last claim (what the store's compare-and-set let through; a claim clears it). The
    /// property "no settle accepted from a stale epoch" compares it with [`Self::epoch`], the
    /// epoch of the row's current lease, which only a claim changes.
    pub settled_epoch: Option<u8>,
}

impl OutboxRow {
    fn new(enqueued: bool) -> Self {
        Self {
            enqueued,
            status: CommandStatus::Pending,
            owner: None,
            epoch: 0,
            expires: 0,
            next_at: 0,
            claims: 0,
            window_end: None,
            prior_window: None,
            settled_epoch: None,
        }
    }
}

/// The control space, abstracted to what the rules read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpaceView {
    /// State.
    pub state: ControlSpaceState,
    /// Whether the delete operation owns it (else the provision).
    pub owned_by_delete: bool,
    /// Resource version.
    pub version: u8,
    /// Registered remote space (index).
    pub space: Option<u8>,
    /// Registered revision.
    pub revision: u8,
    /// Whether `deletion_irreversible_at` is set.
    pub irreversible: bool,
}

/// A remote call a worker is about to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KfsCall {
    /// Provision by provisioning key.
    Provision,
    /// Lookup by provisioning key (lost-ACK recovery).
    Lookup,
    /// Delete the space with this index.
    Delete(u8),
}

/// What a call answered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallAnswer {
    /// The provision answered with the space of this index.
    Provisioned(u8),
    /// The lookup answered (a space or none); the provision row read right after it.
    Looked {
        /// The tick the lookup was sent (and, in the model, answered).
        sent_at: u8,
        /// The space found.
        found: Option<u8>,
        /// The provision row read after the lookup.
        provision: OutboxRow,
    },
    /// The deletion completed.
    Deleted,
    /// The answer was lost: outcome unknown.
    Unknown,
    /// The provision was refused: the key's space was deleted (409).
    SpaceDeleted,
}

/// Where a worker is in its attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AttemptPhase {
    /// Claimed, nothing read yet.
    Claimed,
    /// Read the control space and decided to call.
    ToCall(KfsCall),
    /// The call ended.
    Answered(CallAnswer),
}

/// A worker holding a lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeldLease {
    /// Command index.
    pub cmd: u8,
    /// Epoch of the claim.
    pub epoch: u8,
    /// Lease expiry (and the worker's monotonic deadline), tick.
    pub expires: u8,
    /// Claim tick.
    pub claimed_at: u8,
    /// Claims of the command including this one.
    pub claims: u8,
    /// Progress.
    pub phase: AttemptPhase,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseState {
    /// Store clock, tick.
    pub now: u8,
    /// Outbox rows: provision, delete.
    pub rows: [OutboxRow; 2],
    /// The control space.
    pub cs: SpaceView,
    /// Remote spaces ever created for the provisioning key.
    pub created: u8,
    /// The remote space that exists now (index), if any.
    pub alive: Option<u8>,
    /// KnowledgeFS keeps a tombstone of a deleted key and refuses to provision it again (409
    /// `KNOWLEDGE_FS_SPACE_DELETED`, permanent).
    pub tombstone: bool,
    /// Workers: `None` idle (or crashed and restarted).
    pub workers: [Option<HeldLease>; WORKERS],
}

/// One step of the system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LeaseAction {
    /// Time advances one tick.
    Tick,
    /// A user requests the deletion (intake: `BeginDeletion`, delete command enqueued).
    RequestDelete,
    /// Worker claims command.
    Claim(u8, u8),
    /// Worker renews its lease.
    Renew(u8),
    /// Worker reads the control space and decides.
    Read(u8),
    /// Worker makes its call; `answered`: the answer arrives; `landed`: the request took
    /// effect (a lost answer may or may not have).
    Call {
        /// Worker.
        worker: u8,
        /// The answer arrives.
        answered: bool,
        /// The request took effect remotely.
        landed: bool,
    },
    /// Worker settles.
    Settle(u8),
    /// Worker crashes (its attempt is dropped; restarts idle).
    Crash(u8),
}
