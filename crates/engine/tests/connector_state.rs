//! Connector state (knowledge-base configuration, document mappings) over host storage,
//! written through the scoped writes runtime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Map, Value, json};
use tenantry_engine::scoped_writes::connector::{ConnectorError, ConnectorState};
use tenantry_engine::scoped_writes::{FenceMode, ScopedWriteError, ScopedWrites};
use tenantry_fence::connector::{config_key, document_key, new_mapping};
use tenantry_fence::{Binding, ConnectorStateError, DocumentMapping, KbConfigState, ScopeIdentity};
use tenantry_ports::host_storage::fake::{InMemoryHostStorage, SetFault};

type Storage = InMemoryHostStorage;

fn binding() -> Binding {
    Binding::parse("inst-1").unwrap()
}

fn setup() -> (Arc<Storage>, ScopedWrites<Storage>, ConnectorState<Storage>) {
    let storage = Arc::new(InMemoryHostStorage::new());
    (
        storage.clone(),
        ScopedWrites::new(storage.clone()),
        ConnectorState::new(storage),
    )
}

fn obj(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => unreachable!(),
    }
}

async fn save_config(
    writes: &ScopedWrites<Storage>,
    state: &ConnectorState<Storage>,
    kb_id: &str,
    config: Map<String, Value>,
) -> Result<(), ScopedWriteError<ConnectorError>> {
    let state = state.clone();
    let kb = kb_id.to_owned();
    writes
        .run(
            &binding(),
            &ScopeIdentity::object(kb_id),
            FenceMode::Enforce,
            |ctx| async move {
                state
                    .save_config(&ctx, &kb, &config)
                    .await
                    .map_err(ScopedWriteError::Operation)
            },
        )
        .await
}

async fn save_mapping(
    writes: &ScopedWrites<Storage>,
    state: &ConnectorState<Storage>,
    mapping: DocumentMapping,
) {
    let state = state.clone();
    let scope = ScopeIdentity::object(mapping.kb_id.clone());
    let r: Result<(), ScopedWriteError<ConnectorError>> = writes
        .run(&binding(), &scope, FenceMode::Enforce, |ctx| async move {
            state
                .save_document(&ctx, &mapping)
                .await
                .map_err(ScopedWriteError::Operation)
        })
        .await;
    r.unwrap();
}

#[tokio::test]
async fn kb_config_round_trip_tombstone_and_absence() {
    let (storage, writes, state) = setup();
    let config = obj(json!({"endpoint": "https://kb.example", "top_k": 5}));
    save_config(&writes, &state, "kb-1", config.clone())
        .await
        .unwrap();
    assert!(
        storage.peek(&binding(), &config_key("kb-1")).is_some(),
        "stored under the hashed key"
    );
    assert_eq!(
        state.load_config(&binding(), "kb-1").await.unwrap(),
        KbConfigState::Present(config)
    );
    assert_eq!(
        state.load_config(&binding(), "kb-2").await.unwrap(),
        KbConfigState::Absent
    );
    let st = state.clone();
    let r: Result<(), ScopedWriteError<ConnectorError>> = writes
        .run(
            &binding(),
            &ScopeIdentity::object("kb-1"),
            FenceMode::AllowFenced,
            |ctx| async move {
                st.delete_config(&ctx, "kb-1")
                    .await
                    .map_err(ScopedWriteError::Operation)?;
                ctx.clear_fence().await;
                Ok(())
            },
        )
        .await;
    r.unwrap();
    assert_eq!(
        state.load_config(&binding(), "kb-1").await.unwrap(),
        KbConfigState::Deleted
    );
}

#[tokio::test]
async fn kb_config_refused_above_64_kib_writes_nothing_and_does_not_fence() {
    let (storage, writes, state) = setup();
    let big = obj(json!({"k": "a".repeat(64 * 1024)}));
    let err = save_config(&writes, &state, "kb-1", big).await.unwrap_err();
    assert!(matches!(
        err,
        ScopedWriteError::Operation(ConnectorError::State(
            ConnectorStateError::ConfigTooLarge { .. }
        ))
    ));
    assert_eq!(storage.peek(&binding(), &config_key("kb-1")), None);
    assert!(!writes.is_fenced_in_process(&binding(), &ScopeIdentity::object("kb-1")));
}

#[tokio::test]
async fn kb_config_absence_needs_an_authoritative_listing() {
    let (storage, _writes, state) = setup();
    storage.fail_keys(1);
    assert!(matches!(
        state.load_config(&binding(), "kb-1").await,
        Err(ConnectorError::Storage(_))
    ));
    assert_eq!(
        state.load_config(&binding(), "kb-1").await.unwrap(),
        KbConfigState::Absent
    );
}

#[tokio::test]
async fn invalid_persisted_kb_config_is_an_error_not_a_default() {
    let (storage, _writes, state) = setup();
    storage.put_raw(&binding(), &config_key("kb-1"), "[1, 2]");
    storage.put_raw(&binding(), &config_key("kb-2"), "{torn");
    assert!(matches!(
        state.load_config(&binding(), "kb-1").await,
        Err(ConnectorError::State(
            ConnectorStateError::InvalidConfig { .. }
        ))
    ));
    assert!(matches!(
        state.load_config(&binding(), "kb-2").await,
        Err(ConnectorError::Storage(_))
    ));
}

#[tokio::test]
async fn failed_config_write_fences_the_kb_only() {
    let (storage, writes, state) = setup();
    storage.fail_sets([SetFault::AfterWrite]);
    let err = save_config(&writes, &state, "kb-1", obj(json!({"a": 1})))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ScopedWriteError::Operation(ConnectorError::Write(ScopedWriteError::HostWrite(_)))
    ));
    assert!(matches!(
        save_config(&writes, &state, "kb-1", obj(json!({"a": 2}))).await,
        Err(ScopedWriteError::Fenced { .. })
    ));
    save_config(&writes, &state, "kb-2", obj(json!({"a": 3})))
        .await
        .unwrap();
}

#[tokio::test]
async fn document_mapping_resolves_by_host_or_upstream_id() {
    let (storage, writes, state) = setup();
    let mapping = new_mapping("kb-1", "host-1", "up-1", obj(json!({"title": "t"})));
    save_mapping(&writes, &state, mapping.clone()).await;
    assert!(
        storage
            .peek(&binding(), &document_key("kb-1", "host-1"))
            .is_some()
    );
    assert_eq!(
        state
            .load_document(&binding(), "kb-1", "host-1")
            .await
            .unwrap(),
        Some(mapping.clone())
    );
    assert_eq!(
        state
            .load_document(&binding(), "kb-1", "up-1")
            .await
            .unwrap(),
        Some(mapping)
    );
    assert_eq!(
        state
            .load_document(&binding(), "kb-2", "up-1")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        state
            .load_document(&binding(), "kb-1", "unknown")
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn two_mappings_with_one_upstream_id_are_ambiguous() {
    let (_storage, writes, state) = setup();
    save_mapping(
        &writes,
        &state,
        new_mapping("kb-1", "host-1", "up-x", Map::new()),
    )
    .await;
    save_mapping(
        &writes,
        &state,
        new_mapping("kb-1", "host-2", "up-x", Map::new()),
    )
    .await;
    assert!(matches!(
        state.load_document(&binding(), "kb-1", "up-x").await,
        Err(ConnectorError::State(
            ConnectorStateError::AmbiguousUpstreamDocument { matches: 2, .. }
        ))
    ));
}

#[tokio::test]
async fn invalid_document_mapping_says_to_reconcile() {
    let (storage, _writes, state) = setup();
    storage.put_raw(
        &binding(),
        &document_key("kb-1", "host-1"),
        "{\"kb_id\":\"kb-1\"}",
    );
    let err = state
        .load_document(&binding(), "kb-1", "host-1")
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        ConnectorError::State(ConnectorStateError::InvalidDocumentMapping { .. })
    ));
    assert!(err.to_string().contains("reconcile"));
}
