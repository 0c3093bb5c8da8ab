//! Pure rules of the lifecycle saga.
//!
//! Contract: every function here is deterministic. The crate does no I/O, reads no clock and
//! draws no random numbers: the current time (`now`), the jitter draw and the observed state
//! (claimed command, control space, remote answer) are arguments, and each step returns a
//! decision value that the engine persists. The saga is the dispatch loop specified in
//! `docs/protocol.md` (section 1, "The saga") expressed as such steps.
//!
//! - [`control_space`]: the control-space state machine and compare-and-set updates;
//! - [`code`]: the error codes recorded on commands ([`ErrorCode`], stable strings);
//! - [`command`]: outbox commands, payloads, leases and settlements;
//! - [`remote`]: the requests sent to and the answers read from KnowledgeFS;
//! - [`saga`]: the decisions of each saga step;
//! - [`retry`]: the backoff policy and the attempt budget;
//! - [`failure`]: which outcomes dead-letter a command (status `failed`);
//! - [`intake`]: validation and fingerprints of new requests;
//! - [`operator`]: what an operator's action does to the control space, and what a given-up
//!   command may have left in KnowledgeFS;
//! - [`retention`]: which finished commands and operator action records may be removed;
//! - [`turn`]: each command's turn, the tenant-fair claim order.

pub mod code;
pub mod command;
pub mod control_space;
pub mod failure;
pub mod intake;
mod intake_builders;
pub mod operator;
pub mod remote;
pub mod retention;
pub mod retry;
pub mod saga;
pub mod turn;

pub use code::{ErrorCode, OtherCode};
pub use command::{
    ClaimedCommand, ClaimedControlSpace, CommandBody, CommandOutcome, CommandRecord, CommandStatus,
    DeletePayload, ErrorRecord, LeaseToken, Operation, PayloadError, ProvisionPayload,
    RevokePayload, Settlement, Supersede, SupersedeRule,
};
pub use control_space::{CasUpdate, ControlSpace, ControlSpaceState, Transition, TransitionError};
pub use remote::{
    DeletionPhase, DeletionProgress, DeletionRequest, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest, RevokeState,
};
pub use retry::RetryPolicy;
