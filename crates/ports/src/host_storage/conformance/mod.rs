//! The behaviours every [`HostStorage`] adapter must show. Each function is one test; the
//! [`host_storage_conformance!`](crate::host_storage_conformance) macro runs them all.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod retention;

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

/// Expands to one `#[tokio::test]` per behaviour of
/// [`host_storage::conformance`](crate::host_storage::conformance).
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
/// use tenantry_ports::host_storage::fake::InMemoryHostStorage;
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
                $crate::host_storage::conformance::$name(&storage).await;
            }
        )*
    };
}
