//! In-memory host storage with fault injection (the fake of the host-storage port).
//!
//! [`InMemoryHostStorage`] keeps each record as a parsed JSON value shared by reference count
//! (`Arc<Value>`; or, for a damaged record planted by a test, its raw text) per
//! `(binding, key)`, and compares records structurally in `compare_and_set`, as the SQL adapter
//! does (a record with its keys in another order is equal); nothing is rendered or parsed as
//! text on a read or a compare-and-set. It answers `get_now` / `compare_and_set_now` (it never
//! waits): those keep the caller's `Arc` instead of copying the value, and compare by pointer
//! before comparing structurally. It fails `keys` / `get` / `set` on demand (a failed `set` can fail before or after
//! storing, which is exactly the ambiguity fences exist for). It stamps each write with its
//! clock (the system clock unless [`InMemoryHostStorage::with_clock`]) and is the fake of the
//! retention port for cleared fence records (`tenantry_fence::retention`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tenantry_fence::Binding;

use super::{HostStorage, HostStorageBindings, HostStorageError, PrefixedRecord, validate_key};
use crate::clock::Clock;
use crate::error::StoreError;
use crate::retention::{PruneBatch, RetentionKind, RetentionStore, cutoff};

/// When an injected `set` failure happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetFault {
    /// No fault: the call goes through (to fail a later call of a sequence).
    Pass,
    /// The write is refused before anything is stored.
    BeforeWrite,
    /// The value is stored, then the call fails anyway (a lost acknowledgement).
    AfterWrite,
}

/// One stored value: parsed JSON (shared with whoever wrote or read it), or text that is not
/// JSON (a damaged record).
#[derive(Debug, Clone, PartialEq)]
enum Stored {
    Json(Arc<Value>),
    Raw(String),
}

impl Stored {
    /// `text` parsed when it is JSON (in whatever spelling), else kept as text.
    fn from_text(text: &str) -> Self {
        serde_json::from_str(text).map_or_else(
            |_| Self::Raw(text.to_owned()),
            |value| Self::Json(Arc::new(value)),
        )
    }

    fn as_read(&self) -> Result<&Value, ()> {
        match self {
            Self::Json(value) => Ok(value),
            Self::Raw(_) => Err(()),
        }
    }
}

#[derive(Debug)]
struct Record {
    stored: Stored,
    /// When the record was last written (Unix ms), kept for tombstones (JSON `null`) only:
    /// retention is the one rule that reads a write time, and only a tombstone's
    /// (`tenantry_fence::retention::verdict`), so other writes skip the clock. `None`: another
    /// value, or a tombstone planted with [`InMemoryHostStorage::put_raw_unaged`].
    written_at: Option<i64>,
}

#[derive(Debug, Default)]
struct FakeState {
    /// Records per binding, then per key: a lookup by `(&Binding, &str)` allocates nothing.
    /// Keys are hashed, not ordered: a fence key is its prefix and 64 hex digits, so an
    /// ordered map compared that shared prefix a dozen times per lookup, inside the lock that
    /// every scope's write takes (docs/benchmarks.md, section 4). Whatever lists keys sorts; the
    /// seed is fixed, so a simulation's run depends on its own seed alone.
    data: BTreeMap<Binding, HashMap<String, Record, foldhash::fast::FixedState>>,
    fail_keys: usize,
    fail_gets: usize,
    fail_sets: Vec<SetFault>,
    fail_cas: Vec<SetFault>,
    calls: Calls,
}

/// How many times each operation was called (failed calls included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Calls {
    /// `keys` calls.
    pub keys: usize,
    /// `get` calls.
    pub get: usize,
    /// `set` calls.
    pub set: usize,
    /// `compare_and_set` calls.
    pub cas: usize,
}

/// In-memory [`HostStorage`] with fault injection. Cheap to share behind an `Arc`.
///
/// # Example
/// A write that fails after it was stored: what a lost answer from a database looks like.
/// ```
/// use serde_json::json;
/// use tenantry_fence::Binding;
/// use tenantry_ports::host_storage::HostStorage;
/// use tenantry_ports::host_storage::fake::{InMemoryHostStorage, SetFault};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let storage = InMemoryHostStorage::new();
/// let binding = Binding::parse("installation-1")?;
/// storage.fail_sets([SetFault::AfterWrite]);
/// assert!(storage.set(&binding, "k", &json!(1)).await.is_err());
/// assert_eq!(storage.peek(&binding, "k"), Some(Ok(json!(1)))); // stored all the same
/// storage.set(&binding, "k", &json!(2)).await?; // the next call goes through
/// assert_eq!(storage.get(&binding, "k").await?, Some(json!(2)));
/// assert_eq!(storage.calls().set, 2);
/// # Ok(())
/// # }
/// ```
#[derive(Default)]
pub struct InMemoryHostStorage {
    state: Mutex<FakeState>,
    clock: Option<Arc<dyn Clock>>,
}

impl std::fmt::Debug for InMemoryHostStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InMemoryHostStorage")
            .field("state", &self.state)
            .field(
                "clock",
                &self.clock.as_ref().map_or("system", |_| "override"),
            )
            .finish()
    }
}

impl InMemoryHostStorage {
    /// An empty store without faults, stamping writes with the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same store stamping each write with `clock` (what a database's clock does for the
    /// SQL adapter), so retention of cleared fence records can be tested on manual time.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    fn clock_ms(&self) -> i64 {
        match &self.clock {
            Some(clock) => clock.now().timestamp_millis(),
            // The system clock's milliseconds without building a calendar date (every write is
            // stamped: this is on the fence runtime's hot path).
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or_else(|before| -unix_ms(before.duration()), unix_ms),
        }
    }

    /// The write time kept for `value`: now for a tombstone, else none (see
    /// `Record::written_at`).
    fn stamp(&self, value: &Value) -> Option<i64> {
        value.is_null().then(|| self.clock_ms())
    }

    /// Stores `stored` under `key` stamped with `written_at`, allocating the key only when it
    /// is new.
    fn put(
        state: &mut FakeState,
        binding: &Binding,
        key: &str,
        stored: Stored,
        written_at: Option<i64>,
    ) {
        let keys = match state.data.get_mut(binding) {
            Some(keys) => keys,
            None => state.data.entry(binding.clone()).or_default(),
        };
        match keys.get_mut(key) {
            Some(record) => {
                record.stored = stored;
                record.written_at = written_at;
            }
            None => {
                keys.insert(key.to_owned(), Record { stored, written_at });
            }
        }
    }

    fn record<'s>(state: &'s FakeState, binding: &Binding, key: &str) -> Option<&'s Record> {
        state.data.get(binding).and_then(|keys| keys.get(key))
    }

    /// Plants `text` under `key` with no time stamp: a record written before the store kept
    /// write times (retention never ages it).
    pub fn put_raw_unaged(&self, binding: &Binding, key: &str, text: &str) {
        Self::put(
            &mut self.state(),
            binding,
            key,
            Stored::from_text(text),
            None,
        );
    }

    /// The tombstones at fence keys expired at `cutoff_ms`, oldest first, with their time.
    fn expired_fences(state: &FakeState, cutoff_ms: i64) -> Vec<(i64, (Binding, String))> {
        let mut expired: Vec<(i64, (Binding, String))> = state
            .data
            .iter()
            .flat_map(|(binding, keys)| {
                keys.iter().map(move |(key, record)| (binding, key, record))
            })
            .filter_map(|(binding, key, record)| {
                let at = record.written_at;
                tenantry_fence::retention::prunable(
                    key,
                    Some(record.stored.as_read()),
                    at,
                    cutoff_ms,
                )
                .then(|| (at.unwrap_or(i64::MIN), (binding.clone(), key.clone())))
            })
            .collect();
        expired.sort();
        expired
    }

    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        // A panicking test thread may poison the lock; the data is still usable.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next `times` calls to `keys` fail with [`HostStorageError::Storage`].
    pub fn fail_keys(&self, times: usize) {
        self.state().fail_keys = times;
    }

    /// The next `times` calls to `get` fail with [`HostStorageError::Storage`].
    pub fn fail_gets(&self, times: usize) {
        self.state().fail_gets = times;
    }

    /// The next `set` calls fail as listed, in order (one entry per call).
    pub fn fail_sets(&self, faults: impl IntoIterator<Item = SetFault>) {
        self.state().fail_sets = faults.into_iter().collect();
    }

    /// The next `compare_and_set` calls fail as listed, in order (one entry per call);
    /// [`SetFault::AfterWrite`] fails after a successful swap.
    pub fn fail_cas(&self, faults: impl IntoIterator<Item = SetFault>) {
        self.state().fail_cas = faults.into_iter().collect();
    }

    /// Stores raw `text` (not necessarily JSON) under `key`, to plant a damaged record or a
    /// record spelled otherwise (text that is JSON is kept as its value: compared and read
    /// back structurally, like the SQL adapter does).
    pub fn put_raw(&self, binding: &Binding, key: &str, text: &str) {
        let stored = Stored::from_text(text);
        let written_at = match &stored {
            Stored::Json(value) => self.stamp(value),
            Stored::Raw(_) => None,
        };
        Self::put(&mut self.state(), binding, key, stored, written_at);
    }

    /// The stored value under `key`, bypassing faults: `None` when absent, `Some(Err(text))`
    /// when the stored text is not JSON.
    pub fn peek(&self, binding: &Binding, key: &str) -> Option<Result<Value, String>> {
        Self::record(&self.state(), binding, key).map(|record| match &record.stored {
            Stored::Json(value) => Ok(Value::clone(value)),
            Stored::Raw(text) => Err(text.clone()),
        })
    }

    /// How many times each operation was called.
    pub fn calls(&self) -> Calls {
        self.state().calls
    }
}

#[async_trait]
impl HostStorage for InMemoryHostStorage {
    /// The store's own clock (the one that stamps its writes): the database clock it mirrors.
    async fn now_ms(&self) -> Result<i64, HostStorageError> {
        Ok(self.clock_ms())
    }

    async fn keys(&self, binding: &Binding) -> Result<Vec<String>, HostStorageError> {
        let mut state = self.state();
        state.calls.keys += 1;
        if state.fail_keys > 0 {
            state.fail_keys -= 1;
            return Err(unavailable("keys"));
        }
        let mut keys: Vec<String> = state
            .data
            .get(binding)
            .map(|keys| keys.keys().cloned().collect())
            .unwrap_or_default();
        // Ascending byte order, as `HostStorage::keys` promises (the map is hashed).
        keys.sort_unstable();
        Ok(keys)
    }

    async fn get(&self, binding: &Binding, key: &str) -> Result<Option<Value>, HostStorageError> {
        self.read(binding, key)
            .map(|value| value.map(Arc::unwrap_or_clone))
    }

    async fn set(
        &self,
        binding: &Binding,
        key: &str,
        value: &Value,
    ) -> Result<(), HostStorageError> {
        validate_key(key)?;
        let mut state = self.state();
        state.calls.set += 1;
        let fault = (!state.fail_sets.is_empty()).then(|| state.fail_sets.remove(0));
        if fault == Some(SetFault::BeforeWrite) {
            return Err(unavailable("set"));
        }
        let written_at = self.stamp(value);
        Self::put(
            &mut state,
            binding,
            key,
            Stored::Json(Arc::new(value.clone())),
            written_at,
        );
        if fault == Some(SetFault::AfterWrite) {
            return Err(unavailable("set"));
        }
        Ok(())
    }

    async fn compare_and_set(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        value: &Value,
    ) -> Result<bool, HostStorageError> {
        self.swap(binding, key, expected, None, || Arc::new(value.clone()))
    }

    fn get_now(
        &self,
        binding: &Binding,
        key: &str,
    ) -> Option<Result<Option<Arc<Value>>, HostStorageError>> {
        Some(self.read(binding, key))
    }

    fn compare_and_set_now(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Arc<Value>>,
        value: &Arc<Value>,
    ) -> Option<Result<bool, HostStorageError>> {
        Some(
            self.swap(binding, key, expected.map(|e| &**e), expected, || {
                Arc::clone(value)
            }),
        )
    }
}

impl InMemoryHostStorage {
    /// `get`, the value shared with the store.
    fn read(&self, binding: &Binding, key: &str) -> Result<Option<Arc<Value>>, HostStorageError> {
        validate_key(key)?;
        let mut state = self.state();
        state.calls.get += 1;
        if state.fail_gets > 0 {
            state.fail_gets -= 1;
            return Err(unavailable("get"));
        }
        Self::record(&state, binding, key)
            .map(|record| match &record.stored {
                Stored::Json(value) => Ok(Arc::clone(value)),
                Stored::Raw(text) => Err(serde_json::from_str::<Value>(text).map_or_else(
                    |e| HostStorageError::corrupt_value(key, e.to_string()).with_source(e),
                    |_| HostStorageError::corrupt_value(key, "not JSON"),
                )),
            })
            .transpose()
    }

    /// `compare_and_set` of `expected` (also given as its `Arc` when the caller shares it:
    /// the same pointer is the same value, nothing to compare) to the value `value` makes.
    fn swap(
        &self,
        binding: &Binding,
        key: &str,
        expected: Option<&Value>,
        shared: Option<&Arc<Value>>,
        value: impl FnOnce() -> Arc<Value>,
    ) -> Result<bool, HostStorageError> {
        validate_key(key)?;
        let mut state = self.state();
        state.calls.cas += 1;
        let fault = (!state.fail_cas.is_empty()).then(|| state.fail_cas.remove(0));
        if fault == Some(SetFault::BeforeWrite) {
            return Err(unavailable("compare_and_set"));
        }
        // Compared as JSON values, like the SQL adapter (which also matches a record spelled
        // with its keys in another order); a damaged record never matches.
        let record = state
            .data
            .get_mut(binding)
            .and_then(|keys| keys.get_mut(key));
        let matches = match (record, expected) {
            (None, None) => {
                let value = value();
                let written_at = self.stamp(&value);
                Self::put(&mut state, binding, key, Stored::Json(value), written_at);
                true
            }
            (Some(record), Some(expected)) => {
                let matches = match (&record.stored, shared) {
                    (Stored::Json(stored), Some(shared)) if Arc::ptr_eq(stored, shared) => true,
                    (stored, _) => stored.as_read() == Ok(expected),
                };
                if matches {
                    // Replaced in place: one lookup per swap.
                    let value = value();
                    record.written_at = self.stamp(&value);
                    record.stored = Stored::Json(value);
                }
                matches
            }
            _ => false,
        };
        if fault == Some(SetFault::AfterWrite) {
            return Err(unavailable("compare_and_set"));
        }
        Ok(matches)
    }
}

#[async_trait]
impl HostStorageBindings for InMemoryHostStorage {
    async fn bindings_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Vec<Binding>, HostStorageError> {
        let mut state = self.state();
        state.calls.keys += 1;
        if state.fail_keys > 0 {
            state.fail_keys -= 1;
            return Err(unavailable("keys"));
        }
        Ok(state
            .data
            .iter()
            .filter(|(_, keys)| keys.keys().any(|k| k.starts_with(key_prefix)))
            .map(|(b, _)| b.clone())
            .collect())
    }

    async fn records_with_key_prefix(
        &self,
        key_prefix: &str,
    ) -> Result<Option<Vec<PrefixedRecord>>, HostStorageError> {
        let mut state = self.state();
        state.calls.keys += 1;
        if state.fail_keys > 0 {
            state.fail_keys -= 1;
            return Err(unavailable("keys"));
        }
        let mut records: Vec<PrefixedRecord> = state
            .data
            .iter()
            .flat_map(|(binding, keys)| keys.iter().map(move |(key, r)| (binding, key, r)))
            .filter(|(_, k, r)| k.starts_with(key_prefix) && r.stored.as_read() != Ok(&Value::Null))
            .map(|(binding, key, record)| PrefixedRecord {
                binding: binding.clone(),
                key: key.clone(),
                value: record.stored.as_read().ok().cloned(),
            })
            .collect();
        // By binding, then key, as the SQL adapter lists them (the map is hashed).
        records.sort_by(|a, b| (&a.binding, &a.key).cmp(&(&b.binding, &b.key)));
        Ok(Some(records))
    }
}

/// Cleared fence records by the pure rule `tenantry_fence::retention::prunable`; the fake
/// holds no other kind (none removed, no oldest). Never busy: one process.
#[async_trait]
impl RetentionStore for InMemoryHostStorage {
    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        Ok(DateTime::from_timestamp_millis(self.clock_ms()).unwrap_or(DateTime::<Utc>::MIN_UTC))
    }

    async fn prune_batch(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: std::time::Duration,
        limit: u32,
    ) -> Result<PruneBatch, StoreError> {
        if kind != RetentionKind::ClearedFences {
            return Ok(PruneBatch::Removed(0));
        }
        let mut state = self.state();
        let mut expired = Self::expired_fences(&state, cutoff(now, window).timestamp_millis());
        expired.truncate(usize::try_from(limit.max(1)).unwrap_or(usize::MAX));
        for (_, (binding, key)) in &expired {
            if let Some(keys) = state.data.get_mut(binding) {
                keys.remove(key);
                if keys.is_empty() {
                    state.data.remove(binding);
                }
            }
        }
        Ok(PruneBatch::Removed(expired.len() as u64))
    }

    async fn count_expired(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: std::time::Duration,
    ) -> Result<u64, StoreError> {
        if kind != RetentionKind::ClearedFences {
            return Ok(0);
        }
        let state = self.state();
        Ok(Self::expired_fences(&state, cutoff(now, window).timestamp_millis()).len() as u64)
    }

    async fn oldest(&self, kind: RetentionKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        if kind != RetentionKind::ClearedFences {
            return Ok(None);
        }
        let state = self.state();
        // Every aged tombstone at a fence key is governed: expired at the latest cutoff.
        Ok(Self::expired_fences(&state, i64::MAX)
            .first()
            .and_then(|(at, _)| DateTime::from_timestamp_millis(*at)))
    }
}

fn unavailable(operation: &'static str) -> HostStorageError {
    HostStorageError::unavailable(operation, "injected fault")
}

/// Whole milliseconds of `d` (saturating), without the 128-bit arithmetic of
/// `Duration::as_millis`.
fn unix_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_secs())
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000)
        .saturating_add(i64::from(d.subsec_millis()))
}
