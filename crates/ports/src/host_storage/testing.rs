//! In-memory host storage with fault injection, and the conformance suite every adapter runs.
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
//!
//! [`host_storage_conformance!`](crate::host_storage_conformance) expands to one
//! `#[tokio::test]` per behaviour in [`conformance`]; every adapter invokes it with its own
//! constructor.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
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
    /// When the record was last written (Unix ms); `None`: unknown (planted with
    /// [`InMemoryHostStorage::put_raw_unaged`]).
    written_at: Option<i64>,
}

#[derive(Debug, Default)]
struct FakeState {
    /// Records per binding, then per key: a lookup by `(&Binding, &str)` allocates nothing.
    data: BTreeMap<Binding, BTreeMap<String, Record>>,
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
/// use tenantry_ports::host_storage::testing::{InMemoryHostStorage, SetFault};
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
                .map_or_else(
                    |before| -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
                    |after| i64::try_from(after.as_millis()).unwrap_or(i64::MAX),
                ),
        }
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
        let now = self.clock_ms();
        Self::put(
            &mut self.state(),
            binding,
            key,
            Stored::from_text(text),
            Some(now),
        );
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
        Ok(state
            .data
            .get(binding)
            .map(|keys| keys.keys().cloned().collect())
            .unwrap_or_default())
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
        let now = self.clock_ms();
        Self::put(
            &mut state,
            binding,
            key,
            Stored::Json(Arc::new(value.clone())),
            Some(now),
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
                let now = self.clock_ms();
                Self::put(&mut state, binding, key, Stored::Json(value()), Some(now));
                true
            }
            (Some(record), Some(expected)) => {
                let matches = match (&record.stored, shared) {
                    (Stored::Json(stored), Some(shared)) if Arc::ptr_eq(stored, shared) => true,
                    (stored, _) => stored.as_read() == Ok(expected),
                };
                if matches {
                    // Replaced in place: one lookup per swap.
                    record.stored = Stored::Json(value());
                    record.written_at = Some(self.clock_ms());
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
        Ok(Some(
            state
                .data
                .iter()
                .flat_map(|(binding, keys)| keys.iter().map(move |(key, r)| (binding, key, r)))
                .filter(|(_, k, r)| {
                    k.starts_with(key_prefix) && r.stored.as_read() != Ok(&Value::Null)
                })
                .map(|(binding, key, record)| PrefixedRecord {
                    binding: binding.clone(),
                    key: key.clone(),
                    value: record.stored.as_read().ok().cloned(),
                })
                .collect(),
        ))
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

/// The behaviours every [`HostStorage`] adapter must show. Each function is one test; the
/// [`host_storage_conformance!`](crate::host_storage_conformance) macro runs them all.
pub mod conformance {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::{Value, json};
    use tenantry_fence::Binding;

    use crate::host_storage::{HostStorage, HostStorageBindings, HostStorageError, MAX_KEY_LEN};

    fn binding(name: &str) -> Binding {
        Binding::parse(name).unwrap()
    }

    /// `now_ms` reads the store's clock: it never goes back between two readings, and (the
    /// suite's stores run on this host: a database beside the test, a fake on the system
    /// clock) it is within an hour of the system clock. Fence records are judged on it.
    pub async fn now_ms_reads_the_store_clock<S: HostStorage + ?Sized>(s: &S) {
        let first = s.now_ms().await.unwrap();
        let second = s.now_ms().await.unwrap();
        assert!(first <= second, "{first} then {second}");
        let system = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let system = i64::try_from(system).unwrap();
        assert!((second - system).abs() < 3_600_000, "{second} vs {system}");
    }

    /// An absent key reads as `None` and an empty binding lists no keys.
    pub async fn missing_key_reads_none<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-missing");
        assert_eq!(s.get(&b, "nope").await.unwrap(), None);
        assert_eq!(s.keys(&b).await.unwrap(), Vec::<String>::new());
    }

    /// Stored JSON values read back equal, whatever their shape.
    pub async fn set_then_get_round_trips_json<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-roundtrip");
        let values = [
            json!({"scope": "kb-1", "reason": "ambiguous", "fenced_at_ms": 1_700_000_000_000_i64}),
            json!({"nested": {"list": [1, 2.5, -3, true, null], "unicode": "é漢😀\u{0}"}}),
            json!("a string with 'quotes' and \"double quotes\""),
            json!([]),
            json!(9_007_199_254_740_993_i64),
            json!(false),
        ];
        for (i, value) in values.iter().enumerate() {
            let key = format!("k.{i}");
            s.set(&b, &key, value).await.unwrap();
            assert_eq!(
                s.get(&b, &key).await.unwrap().as_ref(),
                Some(value),
                "{key}"
            );
        }
    }

    /// `set` replaces an existing value (upsert).
    pub async fn set_overwrites_existing_value<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-upsert");
        s.set(&b, "k", &json!({"v": 1})).await.unwrap();
        s.set(&b, "k", &json!({"v": 2})).await.unwrap();
        assert_eq!(s.get(&b, "k").await.unwrap(), Some(json!({"v": 2})));
        assert_eq!(s.keys(&b).await.unwrap(), vec!["k".to_owned()]);
    }

    /// A JSON null is a tombstone: it reads back as `Some(Null)` and stays listed.
    pub async fn null_is_a_tombstone_and_stays_listed<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-tombstone");
        s.set(&b, "ke.fence.v1.installation", &json!({"reason": "r"}))
            .await
            .unwrap();
        s.set(&b, "ke.fence.v1.installation", &Value::Null)
            .await
            .unwrap();
        assert_eq!(
            s.get(&b, "ke.fence.v1.installation").await.unwrap(),
            Some(Value::Null)
        );
        assert_eq!(
            s.keys(&b).await.unwrap(),
            vec!["ke.fence.v1.installation".to_owned()]
        );
    }

    /// Keys are listed per binding, in ascending byte order.
    pub async fn keys_are_listed_sorted_per_binding<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-list");
        let other = binding("inst-list-other");
        for key in ["ke.fence.v1.b", "Z", "ke.config.v1.a", "ke.fence.v1.a", "a"] {
            s.set(&b, key, &json!(1)).await.unwrap();
        }
        s.set(&other, "ke.fence.v1.zzz", &json!(1)).await.unwrap();
        assert_eq!(
            s.keys(&b).await.unwrap(),
            vec!["Z", "a", "ke.config.v1.a", "ke.fence.v1.a", "ke.fence.v1.b"]
        );
        assert_eq!(s.keys(&other).await.unwrap(), vec!["ke.fence.v1.zzz"]);
    }

    /// The same key under two bindings holds two independent values.
    pub async fn bindings_are_isolated<S: HostStorage + ?Sized>(s: &S) {
        let a = binding("inst-a");
        let b = binding("inst-b");
        s.set(&a, "k", &json!("a")).await.unwrap();
        s.set(&b, "k", &json!("b")).await.unwrap();
        s.set(&b, "k", &Value::Null).await.unwrap();
        assert_eq!(s.get(&a, "k").await.unwrap(), Some(json!("a")));
        assert_eq!(s.get(&b, "k").await.unwrap(), Some(Value::Null));
    }

    /// Empty and over-long keys are refused before touching the backend.
    pub async fn invalid_keys_are_refused<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-keys");
        let long = "k".repeat(MAX_KEY_LEN + 1);
        for key in ["", long.as_str()] {
            assert!(matches!(
                s.set(&b, key, &json!(1)).await,
                Err(HostStorageError::InvalidKey { .. })
            ));
            assert!(matches!(
                s.get(&b, key).await,
                Err(HostStorageError::InvalidKey { .. })
            ));
        }
        assert!(s.keys(&b).await.unwrap().is_empty());
        let longest = "k".repeat(MAX_KEY_LEN);
        s.set(&b, &longest, &json!(1)).await.unwrap();
        assert_eq!(s.keys(&b).await.unwrap(), vec![longest]);
    }

    /// Values well above the connector's 64 KiB configuration limit are stored intact.
    pub async fn large_value_round_trips<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-large");
        let value = json!({"blob": "x".repeat(256 * 1024)});
        s.set(&b, "big", &value).await.unwrap();
        assert_eq!(s.get(&b, "big").await.unwrap(), Some(value));
    }

    /// Concurrent writers of one key leave exactly one of their values.
    pub async fn concurrent_sets_leave_one_value<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-race");
        let (r1, r2) = futures_join(s.set(&b, "k", &json!(1)), s.set(&b, "k", &json!(2))).await;
        r1.unwrap();
        r2.unwrap();
        let got = s.get(&b, "k").await.unwrap().unwrap();
        assert!(got == json!(1) || got == json!(2), "{got}");
        assert_eq!(s.keys(&b).await.unwrap(), vec!["k".to_owned()]);
    }

    /// Bindings are listed by key prefix, ascending and each once, tombstones included.
    pub async fn bindings_with_key_prefix_lists_each_holder_once<
        S: HostStorage + HostStorageBindings + ?Sized,
    >(
        s: &S,
    ) {
        let a = binding("inst-prefix-a");
        let b = binding("inst-prefix-b");
        let c = binding("inst-prefix-c");
        s.set(&b, "ke.fence.v1.x", &json!(1)).await.unwrap();
        s.set(&b, "ke.fence.v1.y", &json!(1)).await.unwrap();
        s.set(&a, "ke.fence.v1.installation", &Value::Null)
            .await
            .unwrap();
        s.set(&c, "ke.config.v1.x", &json!(1)).await.unwrap();
        s.set(&c, "KE.FENCE.V1.upper", &json!(1)).await.unwrap();
        let listed = s.bindings_with_key_prefix("ke.fence.v1.").await.unwrap();
        let ours: Vec<_> = listed
            .into_iter()
            .filter(|x| x.as_str().starts_with("inst-prefix-"))
            .collect();
        assert_eq!(ours, vec![a.clone(), b.clone()]);
        let all: Vec<_> = s
            .bindings_with_key_prefix("")
            .await
            .unwrap()
            .into_iter()
            .filter(|x| x.as_str().starts_with("inst-prefix-"))
            .collect();
        assert_eq!(all, vec![a, b, c]);
    }

    /// Live records are read across bindings by key prefix, ordered by binding then key,
    /// tombstones left out (adapters that offer the read at all).
    pub async fn records_with_key_prefix_reads_live_records_at_once<
        S: HostStorage + HostStorageBindings + ?Sized,
    >(
        s: &S,
    ) {
        let a = binding("inst-records-a");
        let b = binding("inst-records-b");
        s.set(&b, "ke.fence.v1.y", &json!({"kind": "intent"}))
            .await
            .unwrap();
        s.set(&b, "ke.fence.v1.x", &json!({"kind": "fence"}))
            .await
            .unwrap();
        s.set(&a, "ke.fence.v1.installation", &Value::Null)
            .await
            .unwrap();
        s.set(&a, "ke.fence.v1.z", &json!("fence")).await.unwrap();
        s.set(&a, "ke.config.v1.x", &json!(1)).await.unwrap();
        s.set(&a, "KE.FENCE.V1.upper", &json!(1)).await.unwrap();
        let Some(records) = s.records_with_key_prefix("ke.fence.v1.").await.unwrap() else {
            return;
        };
        let ours: Vec<_> = records
            .into_iter()
            .filter(|r| r.binding.as_str().starts_with("inst-records-"))
            .map(|r| (r.binding.as_str().to_owned(), r.key, r.value))
            .collect();
        assert_eq!(
            ours,
            vec![
                (
                    a.as_str().to_owned(),
                    "ke.fence.v1.z".to_owned(),
                    Some(json!("fence"))
                ),
                (
                    b.as_str().to_owned(),
                    "ke.fence.v1.x".to_owned(),
                    Some(json!({"kind": "fence"}))
                ),
                (
                    b.as_str().to_owned(),
                    "ke.fence.v1.y".to_owned(),
                    Some(json!({"kind": "intent"}))
                ),
            ]
        );
    }

    /// `compare_and_set` stores only over the expected value (absent, tombstone, or value),
    /// and of two racing swaps from the same value exactly one wins.
    pub async fn compare_and_set_swaps_only_the_expected_value<S: HostStorage + ?Sized>(s: &S) {
        let b = binding("inst-cas");
        let claim = json!({"kind": "intent", "owner": "a", "expires_at_ms": 5});
        assert!(
            !s.compare_and_set(&b, "k", Some(&Value::Null), &claim)
                .await
                .unwrap()
        );
        assert_eq!(
            s.get(&b, "k").await.unwrap(),
            None,
            "absent is not a tombstone"
        );
        assert!(s.compare_and_set(&b, "k", None, &claim).await.unwrap());
        assert!(!s.compare_and_set(&b, "k", None, &json!(2)).await.unwrap());
        assert!(
            !s.compare_and_set(&b, "k", Some(&json!({"kind": "intent"})), &json!(2))
                .await
                .unwrap()
        );
        assert_eq!(s.get(&b, "k").await.unwrap(), Some(claim.clone()));
        // A value read back compares equal to what was stored.
        let read = s.get(&b, "k").await.unwrap().unwrap();
        assert!(
            s.compare_and_set(&b, "k", Some(&read), &Value::Null)
                .await
                .unwrap()
        );
        assert_eq!(s.get(&b, "k").await.unwrap(), Some(Value::Null));
        let (x, y) = futures_join(
            s.compare_and_set(&b, "k", Some(&Value::Null), &json!("x")),
            s.compare_and_set(&b, "k", Some(&Value::Null), &json!("y")),
        )
        .await;
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x ^ y, "exactly one racing swap wins: {x} {y}");
        let winner = if x { json!("x") } else { json!("y") };
        assert_eq!(s.get(&b, "k").await.unwrap(), Some(winner));
        let other = binding("inst-cas-other");
        assert!(
            !s.compare_and_set(&other, "k", Some(&Value::Null), &json!(1))
                .await
                .unwrap()
        );
        assert!(matches!(
            s.compare_and_set(&b, "", None, &json!(1)).await,
            Err(HostStorageError::InvalidKey { .. })
        ));
    }

    /// `get_now` and `compare_and_set_now`, when the adapter answers them, answer (and store)
    /// exactly what `get` and `compare_and_set` would; an adapter that does not answer them
    /// (`None`, as the SQL adapter) has stored nothing.
    pub async fn answers_now_agree_with_the_async_methods<S: HostStorage + ?Sized>(s: &S) {
        use std::sync::Arc;

        let b = binding("inst-now");
        let claim = Arc::new(json!({"kind": "intent", "owner": "a", "expires_at_ms": 5}));
        let Some(absent) = s.get_now(&b, "k") else {
            assert_eq!(
                s.compare_and_set_now(&b, "k", None, &claim)
                    .map(|r| r.is_ok()),
                None
            );
            assert_eq!(s.get(&b, "k").await.unwrap(), None, "nothing stored");
            return;
        };
        assert_eq!(absent.unwrap(), None);
        let tombstone = Arc::new(Value::Null);
        let swap = |expected: Option<&Arc<Value>>, value: &Arc<Value>| {
            s.compare_and_set_now(&b, "k", expected, value)
                .expect("an adapter that answers get_now answers compare_and_set_now")
                .unwrap()
        };
        assert!(!swap(Some(&tombstone), &claim), "absent is not a tombstone");
        assert!(swap(None, &claim));
        assert!(!swap(None, &claim));
        assert_eq!(s.get(&b, "k").await.unwrap().as_ref(), Some(&*claim));
        assert_eq!(
            s.get_now(&b, "k").unwrap().unwrap().as_deref(),
            Some(&*claim)
        );
        // Another value spelled the same (keys in another order) is the same value.
        let same = Arc::new(json!({"expires_at_ms": 5, "owner": "a", "kind": "intent"}));
        assert!(!swap(Some(&tombstone), &tombstone));
        assert!(swap(Some(&same), &tombstone));
        assert_eq!(s.get(&b, "k").await.unwrap(), Some(Value::Null));
        // The async methods see what the immediate ones stored, and the other way round.
        assert!(
            s.compare_and_set(&b, "k", Some(&Value::Null), &json!(7))
                .await
                .unwrap()
        );
        assert!(!swap(Some(&tombstone), &claim));
        assert!(swap(Some(&Arc::new(json!(7))), &claim));
        assert!(
            s.compare_and_set(&b, "k", Some(&claim), &Value::Null)
                .await
                .unwrap()
        );
        assert!(matches!(
            s.get_now(&b, ""),
            Some(Err(HostStorageError::InvalidKey { .. }))
        ));
        assert!(matches!(
            s.compare_and_set_now(&b, "", None, &claim),
            Some(Err(HostStorageError::InvalidKey { .. }))
        ));
    }

    async fn futures_join<A: std::future::Future, B: std::future::Future>(
        a: A,
        b: B,
    ) -> (A::Output, B::Output) {
        tokio::join!(a, b)
    }
}

/// Expands to one `#[tokio::test]` per behaviour of
/// [`host_storage::testing::conformance`](crate::host_storage::testing::conformance).
///
/// The argument is an expression evaluated inside each async test that yields
/// `(guard, storage)`: `guard` lives until the test ends (a temporary database, or `()`),
/// `storage` implements [`HostStorage`](crate::host_storage::HostStorage). It may use
/// `.await` and names visible in the invoking module.
///
/// Expands to one `#[tokio::test]` function per behaviour, so invoke it at module level of an
/// integration test (e.g. `tests/host_storage.rs`).
///
/// # What the test crate needs
/// - the storage implements [`HostStorage`](crate::host_storage::HostStorage) (`Send + Sync`);
/// - dev-dependencies: `tenantry-ports` with features `fences` (default) and `testing`,
///   `tokio` with features `macros` and `rt`.
///
/// # Example
/// The suite against the in-memory fake; an adapter returns its own storage and keeps its
/// database alive in the guard, e.g. `{ let db = fresh_database().await; let s =
/// SeaOrmHostStorage::new(&db.db); (db, s) }` with `tenantry-store-seaorm`'s
/// `testing` feature.
/// ```
/// use tenantry_ports::host_storage::testing::InMemoryHostStorage;
///
/// tenantry_ports::host_storage_conformance!(((), InMemoryHostStorage::new()));
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! host_storage_conformance {
    ($ctor:expr) => {
        $crate::host_storage_conformance!(@tests $ctor;
            missing_key_reads_none,
            set_then_get_round_trips_json,
            set_overwrites_existing_value,
            null_is_a_tombstone_and_stays_listed,
            keys_are_listed_sorted_per_binding,
            bindings_are_isolated,
            invalid_keys_are_refused,
            large_value_round_trips,
            concurrent_sets_leave_one_value,
            compare_and_set_swaps_only_the_expected_value,
            answers_now_agree_with_the_async_methods,
            bindings_with_key_prefix_lists_each_holder_once,
            records_with_key_prefix_reads_live_records_at_once,
            now_ms_reads_the_store_clock,
        );
    };
    (@tests $ctor:expr; $($name:ident),* $(,)?) => {
        $(
            #[::tokio::test]
            async fn $name() {
                let (_guard, storage) = $ctor;
                $crate::host_storage::testing::conformance::$name(&storage).await;
            }
        )*
    };
}
