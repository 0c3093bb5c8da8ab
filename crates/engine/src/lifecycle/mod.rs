//! The lifecycle saga over the ports: the dispatcher that claims, delivers and settles one
//! command at a time, the worker loop around it, and command intake.
//!
//! Each store call is its own transaction and no transaction is open while KnowledgeFS is
//! called: claim (transaction 1), call the remote, settle (transaction 2). Over a
//! [`GroupCommitStore`], the settles of concurrent dispatches share one transaction (group
//! commit) and their control-space reads one statement.

mod dispatcher;
mod group_commit;
mod intake;
mod lease;
mod worker;

pub use dispatcher::{DispatchError, DispatchOutcome, Dispatcher, DispatcherConfig};
pub use group_commit::{GroupCommitConfig, GroupCommitStore};
pub use intake::{CommandIntake, IntakeFailure, IntakeReceipt};
pub use tenantry_ports::clock::{Clock, ManualClock, SystemClock};
pub use worker::{Worker, WorkerConfig, unique_lease_owner};

#[cfg(test)]
mod tests;
