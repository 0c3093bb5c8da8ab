//! The in-memory host storage's fault injection (its conformance suites run in
//! tests/conformance.rs).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use tenantry_fence::Binding;
use tenantry_ports::host_storage::fake::{InMemoryHostStorage, SetFault};
use tenantry_ports::host_storage::{HostStorage, HostStorageError};

fn binding() -> Binding {
    Binding::parse("inst").unwrap()
}

#[tokio::test]
async fn fake_fails_listing_on_demand_then_recovers() {
    let s = InMemoryHostStorage::new();
    s.fail_keys(2);
    for _ in 0..2 {
        assert!(matches!(
            s.keys(&binding()).await,
            Err(HostStorageError::Storage {
                operation: "keys",
                error: tenantry_ports::StoreError::Unavailable { .. }
            })
        ));
    }
    assert_eq!(s.keys(&binding()).await.unwrap(), Vec::<String>::new());
    assert_eq!(s.calls().keys, 3);
}

#[tokio::test]
async fn fake_set_fault_before_or_after_write() {
    let s = InMemoryHostStorage::new();
    s.fail_sets([SetFault::BeforeWrite, SetFault::AfterWrite]);
    assert!(s.set(&binding(), "a", &json!(1)).await.is_err());
    assert_eq!(s.peek(&binding(), "a"), None);
    assert!(s.set(&binding(), "b", &json!(2)).await.is_err());
    assert_eq!(s.peek(&binding(), "b"), Some(Ok(json!(2))));
    s.set(&binding(), "c", &json!(3)).await.unwrap();
}

#[tokio::test]
async fn fake_corrupt_record_reads_as_error() {
    let s = InMemoryHostStorage::new();
    s.put_raw(&binding(), "ke.fence.v1.x", "{not json");
    assert!(matches!(
        s.get(&binding(), "ke.fence.v1.x").await,
        Err(HostStorageError::CorruptValue { .. })
    ));
    s.fail_gets(1);
    s.set(&binding(), "ok", &json!(1)).await.unwrap();
    assert!(s.get(&binding(), "ok").await.is_err());
    assert_eq!(s.get(&binding(), "ok").await.unwrap(), Some(json!(1)));
}

/// The fake compares records as JSON values, like the SQL adapter: a record planted with its
/// keys in another order and other whitespace is swapped by a compare-and-set that expects the
/// same value, one expecting another value does not swap, and a damaged record never matches.
#[tokio::test]
async fn fake_compare_and_set_matches_a_record_spelled_in_another_key_order() {
    let s = InMemoryHostStorage::new();
    let written = r#"{"scope": "kb-1",  "reason": "upload", "kind": "fence"}"#;
    s.put_raw(&binding(), "ke.fence.v1.x", written);
    let expected = json!({"kind": "fence", "reason": "upload", "scope": "kb-1"});
    let other = json!({"kind": "fence", "reason": "other", "scope": "kb-1"});
    assert!(
        !s.compare_and_set(&binding(), "ke.fence.v1.x", Some(&other), &json!(null))
            .await
            .unwrap()
    );
    assert!(
        s.compare_and_set(&binding(), "ke.fence.v1.x", Some(&expected), &json!(null))
            .await
            .unwrap()
    );
    assert_eq!(s.peek(&binding(), "ke.fence.v1.x"), Some(Ok(json!(null))));
    s.put_raw(&binding(), "ke.fence.v1.y", "{torn");
    assert!(
        !s.compare_and_set(
            &binding(),
            "ke.fence.v1.y",
            Some(&json!("{torn")),
            &json!(1)
        )
        .await
        .unwrap()
    );
    assert_eq!(
        s.peek(&binding(), "ke.fence.v1.y"),
        Some(Err("{torn".to_owned()))
    );
}

/// The fake reuses a replaced value's allocations for the next write of the same key; what it
/// stores is still exactly the value written, whatever its shape.
#[tokio::test]
async fn fake_rewrites_of_one_key_store_exactly_the_value_written() {
    let s = InMemoryHostStorage::new();
    let values = [
        json!({"kind": "intent", "owner": "a-long-owner-name", "expires_at_ms": 5}),
        json!(null),
        json!({"kind": "fence", "owner": "b", "expires_at_ms": 7}),
        json!({"kind": "fence", "reason": "other keys", "nested": {"x": [1, "two"]}}),
        json!(null),
        json!("text"),
        json!({"kind": "intent", "owner": "a", "expires_at_ms": 9}),
        json!({"kind": "intent", "owner": "a", "expires_at_ms": 9, "extra": true}),
    ];
    let mut current: Option<serde_json::Value> = None;
    for value in values {
        assert!(
            s.compare_and_set(&binding(), "k", current.as_ref(), &value)
                .await
                .unwrap()
        );
        assert_eq!(s.peek(&binding(), "k"), Some(Ok(value.clone())));
        assert_eq!(s.get(&binding(), "k").await.unwrap(), Some(value.clone()));
        current = Some(value);
    }
}

/// The fake hashes its keys; listings still come sorted (by binding, then key), whatever the
/// order of the writes, as the SQL adapters list them.
#[tokio::test]
async fn fake_lists_keys_sorted_whatever_the_write_order() {
    use tenantry_ports::host_storage::HostStorageBindings;
    let s = InMemoryHostStorage::new();
    let other = Binding::parse("another").unwrap();
    // Written in descending order, with one key outside the prefix among them: hashed, 40 keys
    // do not come back in either order by chance.
    let mut fences: Vec<String> = (0..40).map(|i| format!("ke.fence.v1.{i:02}")).collect();
    fences.reverse();
    for key in fences.iter().map(String::as_str).chain(["other"]) {
        s.set(&binding(), key, &json!(key)).await.unwrap();
        s.set(&other, key, &json!(key)).await.unwrap();
    }
    fences.sort();
    let mut all = fences.clone();
    all.push("other".to_owned());
    assert_eq!(s.keys(&binding()).await.unwrap(), all);
    let listed: Vec<(String, String)> = s
        .records_with_key_prefix("ke.fence.v1.")
        .await
        .unwrap()
        .unwrap()
        .into_iter()
        .map(|r| (r.binding.to_string(), r.key))
        .collect();
    let expected: Vec<(String, String)> = ["another", "inst"]
        .into_iter()
        .flat_map(|b| fences.iter().map(move |k| (b.to_owned(), k.clone())))
        .collect();
    assert_eq!(listed, expected);
}
