//! The retention port: bounded removal of expired history (finished commands, operator action
//! records, directory inbox receipts, cleared fence records), a dry-run count and the oldest
//! record per kind.
//!
//! The rules of what is expired are the domain crates' (`tenantry_lifecycle::retention`,
//! `tenantry_directory::retention`, `tenantry_fence::retention`); an adapter expresses them in its own query language and
//! the conformance suites (feature `testing`) check that it agrees with them. The use case that
//! drives the port is `tenantry_engine::retention` (docs/operations.md, "Retention").
//!
//! The port cuts across the mechanisms, so its fakes and suites live with the mechanism whose
//! history they cover (the mechanism modules depend on this one, never the reverse):
//! `lifecycle::fake::InMemoryLifecycleStore` and `lifecycle::conformance::retention`
//! ([`retention_store_conformance!`](crate::retention_store_conformance)) for the lifecycle
//! kinds, `host_storage::fake::InMemoryHostStorage` and `host_storage::conformance::retention`
//! ([`fence_retention_conformance!`](macro@crate::fence_retention_conformance)) for cleared
//! fence records.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::StoreError;

/// A kind of record retention removes. Each has its own window ([`RetentionPolicy`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum RetentionKind {
    /// Outbox commands that are `succeeded`, `superseded` or `abandoned`, timed by
    /// `completed_at` (the idempotency key's lifetime). A provision of a control space that is
    /// not `deleted` is kept (a deletion may still need it as evidence).
    FinishedCommands,
    /// The operator action log (`lifecycle_command_actions`), timed by `created_at`.
    OperatorActions,
    /// Directory inbox receipts, timed by `received_at`, and only those at or below their
    /// instance's projection cursor (a replica lagging past a removed receipt re-initializes
    /// from a snapshot).
    InboxReceipts,
    /// Cleared fence records: JSON null tombstones at fence keys (`ke.fence.v1.…`) in host
    /// storage, timed by their last write (`updated_at`, migration `m0012`). Fences and
    /// intents (live or lapsed), undecodable records, records of unknown age and other keys
    /// are kept (`tenantry_fence::retention`).
    ClearedFences,
}

impl RetentionKind {
    /// Every kind, in the order a prune run visits them.
    pub const ALL: [RetentionKind; 4] = [
        Self::FinishedCommands,
        Self::OperatorActions,
        Self::InboxReceipts,
        Self::ClearedFences,
    ];

    /// The stable snake_case name: the metrics label and the CLI's row name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FinishedCommands => "finished_commands",
            Self::OperatorActions => "operator_actions",
            Self::InboxReceipts => "inbox_receipts",
            Self::ClearedFences => "cleared_fences",
        }
    }
}

impl std::fmt::Display for RetentionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How long each kind of record is kept after it finished, and how many rows one delete
/// statement removes. Defaults: finished commands 30 days, operator actions 180 days, inbox
/// receipts 7 days, cleared fence records 7 days, batches of 500 (docs/operations.md,
/// "Retention").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Window of [`RetentionKind::FinishedCommands`]: the documented lifetime of an idempotency
    /// key (a replay inside it answers with the original command).
    pub finished_commands: Duration,
    /// Window of [`RetentionKind::OperatorActions`].
    pub operator_actions: Duration,
    /// Window of [`RetentionKind::InboxReceipts`].
    pub inbox_receipts: Duration,
    /// Window of [`RetentionKind::ClearedFences`]: how long a cleared fence record stays
    /// listed (for operators) before it goes; it decides nothing (a tombstone and an absent
    /// record are the same free scope).
    pub cleared_fences: Duration,
    /// Rows removed by one statement (one short transaction), at least 1.
    pub batch_size: u32,
}

/// One day.
const DAY: Duration = Duration::from_secs(86_400);

impl Default for RetentionPolicy {
    fn default() -> Self {
        Self {
            finished_commands: 30 * DAY,
            operator_actions: 180 * DAY,
            inbox_receipts: 7 * DAY,
            cleared_fences: 7 * DAY,
            batch_size: 500,
        }
    }
}

impl RetentionPolicy {
    /// The window of `kind`.
    pub fn window(&self, kind: RetentionKind) -> Duration {
        match kind {
            RetentionKind::FinishedCommands => self.finished_commands,
            RetentionKind::OperatorActions => self.operator_actions,
            RetentionKind::InboxReceipts => self.inbox_receipts,
            RetentionKind::ClearedFences => self.cleared_fences,
        }
    }

    /// Sets the window of `kind`.
    #[must_use]
    pub fn with_window(mut self, kind: RetentionKind, window: Duration) -> Self {
        match kind {
            RetentionKind::FinishedCommands => self.finished_commands = window,
            RetentionKind::OperatorActions => self.operator_actions = window,
            RetentionKind::InboxReceipts => self.inbox_receipts = window,
            RetentionKind::ClearedFences => self.cleared_fences = window,
        }
        self
    }

    /// Sets the batch size.
    #[must_use]
    pub fn with_batch_size(mut self, batch_size: u32) -> Self {
        self.batch_size = batch_size;
        self
    }
}

/// The instant at or before which a record is past `window` at `now` (saturates to the
/// earliest time for a window too large for the calendar: nothing expires).
pub fn cutoff(now: DateTime<Utc>, window: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(window)
        .ok()
        .and_then(|w| now.checked_sub_signed(w))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// What one [`RetentionStore::prune_batch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PruneBatch {
    /// This many records were removed (fewer than the limit: none are left, or the rest are
    /// locked right now).
    Removed(u64),
    /// Another pruner (another replica) holds the store's retention lock for its own batch:
    /// nothing was removed; try again later.
    Busy,
}

impl PruneBatch {
    /// The records removed (0 when [`PruneBatch::Busy`]).
    pub fn removed(self) -> u64 {
        match self {
            Self::Removed(n) => n,
            Self::Busy => 0,
        }
    }
}

/// Storage of the history retention removes. A store that does not hold a kind (e.g. the
/// in-memory lifecycle fake and inbox receipts) removes nothing of it and has no oldest record.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait RetentionStore: Send + Sync {
    /// Removes at most `limit` records of `kind` that are expired at `now` with `window` (the
    /// rules of [`RetentionKind`]), oldest first, in one bounded statement and one short
    /// transaction that never waits for a row another transaction holds (PostgreSQL skips
    /// locked rows). Returns how many it removed; fewer than `limit` means none are left (or
    /// the rest are locked right now). Two callers at once remove each record once.
    ///
    /// # Errors
    /// [`StoreError`] when the backend fails; nothing of this batch was removed then.
    async fn prune_batch(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
        limit: u32,
    ) -> Result<PruneBatch, StoreError>;

    /// How many records of `kind` are expired at `now` with `window` (what a prune would
    /// remove; nothing is written).
    ///
    /// # Errors
    /// [`StoreError`] when the backend fails.
    async fn count_expired(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
    ) -> Result<u64, StoreError>;

    /// The store's clock: the time every window is measured from. SQL stores read the
    /// database's clock (`statement_timestamp()` on PostgreSQL, `unixepoch('subsec')` on
    /// SQLite), the same clock that stamped `completed_at`, `created_at`, `received_at` and
    /// `updated_at`, so a replica whose process clock runs ahead never removes a record
    /// early (case 013); fakes read their injected clock.
    ///
    /// # Errors
    /// [`StoreError`] when the backend fails.
    async fn now(&self) -> Result<DateTime<Utc>, StoreError>;

    /// The time stamp of the oldest record of `kind` that retention governs (finished
    /// commands: `completed_at` of the oldest finished one; actions: `created_at`; receipts:
    /// `received_at`; cleared fences: the last write of the oldest aged tombstone at a fence
    /// key), or `None` when there is none. The gauge of age is `now` minus this.
    ///
    /// # Errors
    /// [`StoreError`] when the backend fails.
    async fn oldest(&self, kind: RetentionKind) -> Result<Option<DateTime<Utc>>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_setters() {
        let policy = RetentionPolicy::default();
        assert_eq!(policy.window(RetentionKind::FinishedCommands), 30 * DAY);
        assert_eq!(policy.window(RetentionKind::OperatorActions), 180 * DAY);
        assert_eq!(policy.window(RetentionKind::InboxReceipts), 7 * DAY);
        assert_eq!(policy.window(RetentionKind::ClearedFences), 7 * DAY);
        let policy = policy
            .with_window(RetentionKind::InboxReceipts, DAY)
            .with_batch_size(7);
        assert_eq!(policy.inbox_receipts, DAY);
        assert_eq!(policy.batch_size, 7);
        let names: Vec<_> = RetentionKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "finished_commands",
                "operator_actions",
                "inbox_receipts",
                "cleared_fences"
            ]
        );
    }
}
