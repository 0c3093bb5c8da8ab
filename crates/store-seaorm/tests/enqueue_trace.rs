//! A host that enqueues in its own transaction inside a traced span: the command stores the
//! W3C context of `enqueue`'s `intake` span, a child of the host's span, so every dispatch of
//! it continues the host's trace (docs/operations.md, "Tracing"). Outside any span of the host,
//! the `intake` span starts a trace of the command's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use sea_orm::{SqliteTransactionMode, TransactionOptions, TransactionTrait};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

fn create(cs: &str, key: &str) -> CreateControlSpace {
    CreateControlSpace::new(
        TenantId::parse("acme").unwrap(),
        ControlSpaceId::parse(cs).unwrap(),
        IdempotencyKey::parse(key).unwrap(),
        "Docs",
        "docs",
    )
}

#[tokio::test]
async fn enqueue_in_a_traced_span_stores_that_trace_on_the_command() {
    // Spans get OpenTelemetry contexts (always sampled; nothing is exported).
    let provider = SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let _default = tracing::subscriber::set_default(subscriber);

    let db = fresh_database().await;
    let conn = &db.db.conn;
    let store = SeaOrmLifecycleStore::new(&db.db);
    let host = tracing::info_span!("host_request");
    let host_context = host.context().span().span_context().clone();
    assert!(host_context.is_valid());
    let options = TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..TransactionOptions::default()
    };
    let txn = conn.begin_with_options(options).await.unwrap();
    let traced = store
        .enqueue(&txn, create("cs-traced", "k-traced"))
        .instrument(host.clone())
        .await
        .unwrap();
    txn.commit().await.unwrap();
    let txn = conn.begin_with_options(options).await.unwrap();
    let unparented = store
        .enqueue(&txn, create("cs-plain", "k-plain"))
        .await
        .unwrap();
    txn.commit().await.unwrap();

    let commands = store
        .list_commands(&CommandFilter {
            limit: 100,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    let stored = |id| {
        commands
            .iter()
            .find(|c| &c.id == id)
            .unwrap()
            .trace_context
            .clone()
    };
    let traceparent = stored(&traced.command_id).expect("the host's trace is stored");
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(fields.len(), 4, "{traceparent}");
    assert_eq!(fields[0], "00");
    assert_eq!(
        fields[1],
        host_context.trace_id().to_string(),
        "the host's trace"
    );
    assert_ne!(
        fields[2],
        host_context.span_id().to_string(),
        "the enqueue's own `intake` span, a child of the host's"
    );
    // Outside any span of the host, the `intake` span starts the command's own trace.
    let own = stored(&unparented.command_id).expect("the intake span's trace");
    assert_ne!(own.split('-').nth(1), Some(fields[1]), "{own}");
}
