//! The error of a scoped write ([`ScopedWriteError`]) and what each variant leaves behind.

use tenantry_fence::{Binding, FenceKey, ScopeIdentity};
use tenantry_ports::host_storage::HostStorageError;

/// Why a scoped write did not complete. `E` is the error type of the wrapped mutation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScopedWriteError<E> {
    /// The scope needs reconciliation: an earlier mutation's outcome is unknown. Nothing was
    /// written. An operator must reconcile with the remote and clear the fence (or delete or
    /// rebuild the object with an `AllowFenced` run).
    #[error(
        "scope {scope} of installation {binding} is fenced ({key}) after a mutation with unknown outcome; reconcile with the remote, then clear the fence"
    )]
    Fenced {
        /// The installation binding.
        binding: Binding,
        /// The scope written to.
        scope: ScopeIdentity,
        /// The fence that blocks it (the scope's own or the installation's).
        key: FenceKey,
    },
    /// The fence records of the scope could not be read (or its claim could not be taken), so
    /// the write was refused (a failed read is no proof that no fence exists). Retry after host
    /// storage recovers.
    #[error(
        "fence state of installation {binding} could not be read or claimed ({source}); write refused, retry after host storage recovers"
    )]
    FenceStateUnavailable {
        /// The installation binding.
        binding: Binding,
        /// The storage failure.
        source: HostStorageError,
    },
    /// Another process held the scope's claim (a write in progress there) for longer than
    /// [`FenceConfig::claim_wait`](super::FenceConfig::claim_wait). Nothing was written; retry later.
    #[error(
        "scope {scope} of installation {binding} is held by {owner} until {expires_at_ms} (Unix ms); nothing written, retry later"
    )]
    ScopeBusy {
        /// The installation binding.
        binding: Binding,
        /// The scope written to.
        scope: ScopeIdentity,
        /// The process holding the claim.
        owner: String,
        /// When its claim lapses, Unix milliseconds.
        expires_at_ms: i64,
    },
    /// This run no longer holds its claim on the scope: the record was replaced (an operator
    /// cleared it after its expiry, or another process took it over after it lapsed under a
    /// run that sent nothing for longer than the claim's lifetime). Checked before every
    /// dispatch, `mutate` and `write`; the mutation was not run. Retry the write in a new run.
    #[error(
        "the claim of scope {scope} of installation {binding} was lost while the run held it (cleared, or taken over after it lapsed); mutation not run, retry in a new run"
    )]
    ClaimLost {
        /// The installation binding.
        binding: Binding,
        /// The scope.
        scope: ScopeIdentity,
    },
    /// A dispatched mutation's outcome is unknown; the scope is now fenced. Return this from
    /// an operation to fence its scope for an ambiguity detected by the caller.
    #[error(
        "mutation on scope {scope} has an unknown outcome ({reason}); the scope is fenced until reconciled"
    )]
    OutcomeUnknown {
        /// The scope now fenced.
        scope: ScopeIdentity,
        /// What was dispatched and what was observed.
        reason: String,
        /// The mutation's error, when it returned one (none after a panic).
        error: Option<E>,
    },
    /// The mutation failed with a known outcome (answered, or never dispatched); the scope
    /// stays writable.
    #[error("mutation failed: {0}")]
    Operation(E),
    /// A host-storage write failed; unless the key was refused outright, the scope is fenced
    /// because the write may or may not have been stored.
    #[error("host-storage write failed: {0}")]
    HostWrite(HostStorageError),
    /// The write-ahead intent could not be persisted, so the remote mutation was not
    /// dispatched. The scope is fenced in process (the intent may have been stored);
    /// retry after host storage recovers and clear the fence.
    #[error(
        "write-ahead intent could not be persisted ({0}); mutation not dispatched, scope fenced"
    )]
    IntentNotPersisted(HostStorageError),
}
