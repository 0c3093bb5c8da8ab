//! The lifecycle saga over the ports: the dispatcher that claims, delivers and settles one
//! command at a time, the worker loop around it (or the worker pool: one claimer per process
//! feeding bounded dispatch slots), command intake, and operator actions (retry / abandon of
//! dead-lettered or pending commands).
//!
//! Each store call is its own transaction and no transaction is open while KnowledgeFS is
//! called: claim (transaction 1), call the remote, settle (transaction 2). Over a
//! [`GroupCommitStore`], the settles of concurrent dispatches share one transaction (group
//! commit) and their control-space reads one statement.

mod dispatcher;
mod group_commit;
mod intake;
mod lease;
mod operator;
mod pool;
mod worker;

pub use dispatcher::{DispatchError, DispatchReport, Dispatcher, DispatcherConfig};
pub use group_commit::{GroupCommitConfig, GroupCommitStore};
pub use intake::{CommandIntake, IntakeFailure, IntakeReceipt, IntakeRequest};
pub use operator::{
    BulkReport, MAX_ACTOR_CHARS, MAX_BULK, MAX_REASON_CHARS, OperatorActions, OperatorRequestError,
};
pub use pool::{IN_FLIGHT_PER_SLOT, PROMPT_PLACES, WorkerPool};
pub use tenantry_ports::clock::{Clock, ManualClock, SystemClock};
pub use tenantry_ports::wake::{WakeSubscription, Wakeups};
pub use worker::{Worker, WorkerConfig, WorkerReport, unique_lease_owner};

#[cfg(test)]
mod tests;
