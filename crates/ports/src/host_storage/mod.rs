//! Host-storage port: installation-bound key/value storage behind fences and connector state.
//!
//! The host platform gives each installation binding its own key space. Values are JSON
//! (`serde_json::Value`); a stored JSON null is a tombstone: the key stays listed and reads
//! back as `Some(Value::Null)`, which is how deletions are made explicit without a delete
//! call. Keys are 1 to [`MAX_KEY_LEN`] bytes.
//!
//! Contract every adapter meets (checked by `host_storage_conformance!` under feature
//! `testing`):
//! - `keys` lists every stored key of the binding, tombstones included, in ascending byte
//!   order; a listing that returns `Ok` is authoritative (a key it does not contain is absent);
//! - `get` of an absent key is `Ok(None)`; a stored value that is not valid JSON is
//!   [`HostStorageError::CorruptValue`], never a default;
//! - `set` is an upsert; the last write wins; bindings never see each other's keys;
//! - a failed `set` may or may not have been stored (the outcome is unknown);
//! - `compare_and_set` stores only when the current value equals the expected one (absent,
//!   a tombstone, or a value compared as a JSON value: the same value spelled otherwise, with
//!   its keys in another order or other whitespace, is equal), atomically against every other
//!   writer on the same database; it is how processes take a scope's claim;
//! - `now_ms` reads the store's clock (the database's for the SQL adapter, the one that stamps
//!   `updated_at`; a fake's own clock): the one clock every fence record's age and expiry is
//!   judged on, so a process whose clock is off neither takes over nor clears a live record;
//! - `get_now` / `compare_and_set_now` answer exactly like `get` / `compare_and_set` when the
//!   adapter can answer without waiting (an in-memory store), and say `None` (nothing done)
//!   when it cannot; the default says `None`, so an adapter that does I/O simply leaves them.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tenantry_fence::{Binding, DispatchFailure, DispatchOutcome};

use crate::error::{ErrorSource, StoreError};

/// Longest accepted key, in bytes.
pub const MAX_KEY_LEN: usize = 255;

/// Installation-bound JSON key/value storage.
#[async_trait]
pub trait HostStorage: Send + Sync {
    /// Every stored key of `binding`, tombstones included, in ascending byte order.
    ///
    /// # Errors
    /// [`HostStorageError::Storage`] when the backend cannot answer; the caller must not
    /// treat that as "no keys".
    async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError>;

    /// The value under `key`: `None` when absent, `Some(Value::Null)` for a tombstone.
    ///
    /// # Errors
    /// [`HostStorageError::InvalidKey`] for a key outside the limits,
    /// [`HostStorageError::CorruptValue`] when the stored text is not JSON,
    /// [`HostStorageError::Storage`] when the backend cannot answer.
    async fn get(&self, binding: &Binding, key: &str) -> Result<Option<Value>, HostStorageError>;

    /// Stores `value` under `key` (insert or replace). `Value::Null` writes a tombstone.
    ///
    /// # Errors
    /// [`HostStorageError::InvalidKey`] (nothing was stored) or
    /// [`HostStorageError::Storage`] (the write may or may not have been stored).
    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> Result<(), HostStorageError>;

    /// Stores `value` under `key` only if the current value is `expected`: `None` means the
    /// key must be absent, `Some(v)` that the stored value is `v` (`Some(Value::Null)`: a
    /// tombstone). Returns whether it stored. Atomic against concurrent writers of any
    /// process sharing the backend.
    ///
    /// # Errors
    /// [`HostStorageError::InvalidKey`] (nothing was stored) or
    /// [`HostStorageError::Storage`] (the write may or may not have been stored).
    ///
    /// The lifetimes are named only so that mockall can mock the `Option<&Value>` argument
    /// (feature `mocks`); implementations write the signature with elided lifetimes as usual.
    async fn compare_and_set<'s, 'b, 'k, 'e, 'v>(
        &'s self,
        binding: &'b Binding,
        key: &'k str,
        expected: Option<&'e Value>,
        value: &'v Value,
    ) -> Result<bool, HostStorageError>;

    /// The store's clock now, Unix milliseconds: the database's clock for an SQL adapter
    /// (`statement_timestamp()` on PostgreSQL, `unixepoch('subsec')` on SQLite: the clock that
    /// stamps `updated_at`), a fake's own clock. Fence records are stamped and judged on it
    /// (claim and intent expiries, clear refusals), never on a process's wall clock.
    ///
    /// # Errors
    /// [`HostStorageError::Storage`] when the backend cannot answer.
    async fn now_ms(&self) -> Result<i64, HostStorageError>;

    /// [`get`](Self::get) answered without waiting, the value shared (`Arc`) rather than
    /// copied: `Some(answer)` is exactly what `get` would answer now; `None` means the adapter
    /// cannot answer without waiting (I/O), read nothing, and the caller awaits `get` instead.
    ///
    /// The default is `None`: adapters that do I/O (the SQL adapter) do not override it. An
    /// in-memory store overrides it so a caller on the hot path (the fence runtime's claim,
    /// `ScopedWrites::run`) neither boxes a future nor deep-copies a record.
    ///
    /// # Errors
    /// As [`get`](Self::get), inside `Some`.
    fn get_now(
        &self,
        binding: &Binding,
        key: &str,
    ) -> Option<Result<Option<Arc<Value>>, HostStorageError>> {
        let _ = (binding, key);
        None
    }

    /// [`compare_and_set`](Self::compare_and_set) answered without waiting: `Some(answer)` is
    /// exactly what `compare_and_set` would answer (and store) now; `None` means the adapter
    /// cannot answer without waiting, stored nothing, and the caller awaits `compare_and_set`.
    /// `value` is shared: a store may keep it by reference count, and may compare `expected`
    /// with the stored record by pointer first (the same `Arc` is the same value) and
    /// structurally only when the pointers differ.
    ///
    /// The default is `None` (see [`get_now`](Self::get_now)).
    ///
    /// # Errors
    /// As [`compare_and_set`](Self::compare_and_set), inside `Some`.
    fn compare_and_set_now(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Arc<Value>>,
        value: &Arc<Value>,
    ) -> Option<Result<bool, HostStorageError>> {
        let _ = (binding, key, expected, value);
        None
    }
}

#[cfg(feature = "mocks")]
mockall::mock! {
    /// mockall mock of [`HostStorage`]: expectations for `keys`, `get`, `set` and
    /// `compare_and_set`. `get_now` and `compare_and_set_now` keep their defaults (`None`), so
    /// callers use the mocked async methods, as with an adapter that does I/O.
    pub HostStorage {}

    #[async_trait]
    impl HostStorage for HostStorage {
        async fn now_ms(&self) -> Result<i64, HostStorageError>;
        async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError>;
        async fn get(
            &self,
            binding: &Binding,
            key: &str,
        ) -> Result<Option<Value>, HostStorageError>;
        async fn set(
            &self,
            binding: &Binding,
            key: &str,
            value: &Value,
        ) -> Result<(), HostStorageError>;
        async fn compare_and_set<'s, 'b, 'k, 'e, 'v>(
            &'s self,
            binding: &'b Binding,
            key: &'k str,
            expected: Option<&'e Value>,
            value: &'v Value,
        ) -> Result<bool, HostStorageError>;
    }
}

/// Listing of installation bindings, for operator views across installations (the admin
/// API's `GET /v1/fences`, `tenantry fences list`). A separate role trait: writers never need it.
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait HostStorageBindings: Send + Sync {
    /// Every binding that holds at least one key starting with `key_prefix` (tombstones
    /// included), in ascending order, each once. An empty prefix lists every binding.
    ///
    /// # Errors
    /// [`HostStorageError::Storage`] when the backend cannot answer;
    /// [`HostStorageError::CorruptValue`] when a stored binding is not a valid binding.
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Vec<Binding>, HostStorageError>;

    /// Every live record (tombstones left out) whose key starts with `key_prefix`, across all
    /// bindings, ordered by binding then key, read at once: one statement for the SQL
    /// adapters, where listing the bindings, then each binding's keys, then each value would
    /// take one round trip per record. `value` is `None` for a stored text that is not JSON.
    /// The operators' counts (`tenantry_fences_active`, the console) read fences through it.
    ///
    /// `Ok(None)` (the default) means the adapter does not offer it; the caller then lists
    /// bindings, keys and values one by one.
    ///
    /// # Errors
    /// [`HostStorageError::Storage`] when the backend cannot answer;
    /// [`HostStorageError::CorruptValue`] when a stored binding is not a valid binding.
    async fn records_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Option<Vec<PrefixedRecord>>, HostStorageError> {
        let _ = key_prefix;
        Ok(None)
    }
}

/// One live record read by [`HostStorageBindings::records_with_key_prefix`].
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixedRecord {
    /// The installation binding that holds it.
    pub binding: Binding,
    /// Its key.
    pub key: String,
    /// Its value; `None` when the stored text is not JSON (a damaged record).
    pub value: Option<Value>,
}

/// Why a host-storage operation failed.
///
/// Port-specific refusals ([`InvalidKey`](Self::InvalidKey), [`CorruptValue`](Self::CorruptValue))
/// beside the storage failure every storage port shares ([`Storage`](Self::Storage), a
/// [`StoreError`]). `source()` of a `Storage` error is the driver's error itself (as for a
/// [`StoreError`]), not the wrapped `StoreError`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HostStorageError {
    /// The caller passed a key that is empty or longer than [`MAX_KEY_LEN`] bytes; nothing
    /// was read or written. Fix the caller.
    InvalidKey {
        /// The refused key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The stored value under `key` is not valid JSON: the record is damaged. Reconcile it
    /// (overwrite or tombstone the key).
    CorruptValue {
        /// The key of the damaged record.
        key: String,
        /// The decoder's message.
        message: String,
        /// The decoder's error, if any.
        source: Option<ErrorSource>,
    },
    /// The backend failed (connection lost, timeout, deadlock, schema not migrated, driver
    /// error). For `set` and `compare_and_set`, the value may or may not have been stored.
    /// Retry after the storage recovers (or migrate, for [`StoreError::SchemaMissing`]).
    Storage {
        /// `keys`, `get`, `set`, `compare_and_set` or `bindings`.
        operation: &'static str,
        /// What failed, in the shape every storage port shares.
        error: StoreError,
    },
}

impl std::fmt::Display for HostStorageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidKey { key, problem } => {
                write!(f, "invalid host-storage key {key:?}: {problem}")
            }
            Self::CorruptValue { key, message, .. } => write!(
                f,
                "stored value under {key:?} is not valid JSON ({message}); reconcile the record"
            ),
            Self::Storage {
                operation,
                error: StoreError::Unavailable { message, .. },
            } => write!(
                f,
                "host storage unavailable during {operation}: {message}; retry after the storage recovers"
            ),
            Self::Storage { operation, error } => {
                write!(f, "host storage failed during {operation}: {error}")
            }
        }
    }
}

impl std::error::Error for HostStorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::InvalidKey { .. } => None,
            Self::CorruptValue { source, .. } => source
                .as_ref()
                .map(|s| s.get() as &(dyn std::error::Error + 'static)),
            Self::Storage { error, .. } => std::error::Error::source(error),
        }
    }
}

impl HostStorageError {
    /// [`HostStorageError::Storage`] during `operation` holding `error`.
    pub fn storage(operation: &'static str, error: StoreError) -> Self {
        Self::Storage { operation, error }
    }

    /// [`HostStorageError::Storage`] during `operation` with a [`StoreError::Unavailable`] of
    /// `message` and no source yet.
    pub fn unavailable(operation: &'static str, message: impl Into<String>) -> Self {
        Self::storage(operation, StoreError::unavailable(message))
    }

    /// [`HostStorageError::CorruptValue`] of `key`, with no source yet.
    pub fn corrupt_value(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self::CorruptValue {
            key: key.into(),
            message: message.into(),
            source: None,
        }
    }

    /// The same error keeping `source` (the backend's or decoder's error) as its
    /// [`source`](std::error::Error::source); an [`InvalidKey`](Self::InvalidKey) has none and
    /// is returned unchanged.
    #[must_use]
    pub fn with_source(self, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        match self {
            Self::CorruptValue { key, message, .. } => Self::CorruptValue {
                key,
                message,
                source: Some(ErrorSource::new(error)),
            },
            Self::Storage {
                operation,
                error: store,
            } => Self::Storage {
                operation,
                error: store.with_source(error),
            },
            invalid @ Self::InvalidKey { .. } => invalid,
        }
    }
}

impl DispatchFailure for HostStorageError {
    /// A refused key was never dispatched; every other failure leaves the outcome unknown.
    fn dispatch_outcome(&self) -> DispatchOutcome {
        match self {
            Self::InvalidKey { .. } => DispatchOutcome::NotDispatched,
            Self::CorruptValue { .. } | Self::Storage { .. } => DispatchOutcome::OutcomeUnknown,
        }
    }
}

/// Checks a key against the port's limits; adapters call it before touching the backend.
///
/// # Errors
/// [`HostStorageError::InvalidKey`] when `key` is empty or longer than [`MAX_KEY_LEN`] bytes.
#[inline]
pub fn validate_key(key: &str) -> Result<(), HostStorageError> {
    if !key.is_empty() && key.len() <= MAX_KEY_LEN {
        return Ok(());
    }
    invalid_key(key)
}

/// The error of [`validate_key`], out of line (every store call checks its key).
#[cold]
fn invalid_key(key: &str) -> Result<(), HostStorageError> {
    let problem = if key.is_empty() {
        "must not be empty".to_owned()
    } else if key.len() > MAX_KEY_LEN {
        format!(
            "is {} bytes long; the limit is {MAX_KEY_LEN} bytes",
            key.len()
        )
    } else {
        return Ok(());
    };
    Err(HostStorageError::InvalidKey {
        key: key.chars().take(64).collect(),
        problem,
    })
}

pub mod metrics;

#[cfg(feature = "testing")]
pub mod conformance;
#[cfg(feature = "testing")]
pub mod fake;
