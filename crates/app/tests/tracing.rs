//! Traces across the outbox (docs/operations.md, "Tracing"): an in-process OTLP/HTTP
//! receiver gets the service's spans, and the life of one command, from the admin POST through
//! a lost ACK and a retry on another worker to the remote call that succeeded, is one trace.
//!
//! One test per process: the subscriber (with its OpenTelemetry layer) is global.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/otlp.rs"]
mod otlp;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;
use tenantry_lifecycle::CommandStatus;
use tenantry_testkit::fault::{Fault, Route};

use common::{Harness, TOKEN};
use otlp::{Received, start_receiver};

/// The caller's trace: the admin POST carries `traceparent` with this trace and span id.
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

/// The provision's first answer is lost after KnowledgeFS applied it; the first worker settles
/// the attempt as a retry and stops; a second worker (another lease owner) retries and
/// succeeds. Every span from the admin POST to the successful remote call is in the POST's
/// trace, and KnowledgeFS received that trace in `traceparent` on both attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_the_admin_post_through_a_lost_ack_and_a_retry_on_another_worker() {
    let (endpoint, spans) = start_receiver().await;
    // The subscriber first, as `serve` installs it before the service starts.
    let mut telemetry = tenantry_app::config::Config::defaults();
    telemetry.otlp_endpoint = Some(endpoint.clone());
    telemetry.log_filter = "warn".to_owned();
    let traces = tenantry_app::logging::init_serve_logging(&telemetry)
        .expect("otlp_endpoint turns traces on, and this test installs the first subscriber");
    let mut h = Harness::start_with(Default::default(), |config| {
        config.otlp_endpoint = Some(endpoint.clone());
        config.log_filter = "warn".to_owned();
        // Time to stop the first worker before the retry is due.
        config.retry_max_delay = Duration::from_secs(2);
    })
    .await;
    h.remote.script(Route::Provision, [Some(Fault::LostAck)]);

    let response = h
        .http
        .post(h.url("/v1/tenants/t-1/control-spaces"))
        .bearer_auth(TOKEN)
        .header("Idempotency-Key", "create-traced")
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
        .json(&json!({"control_space_id": "cs-traced", "name": "N", "slug": "n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);

    // The first attempt: the remote applied the provision, its answer was lost, the attempt
    // settled as a retry. Then this worker stops.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let command = h.commands().await.pop().unwrap();
        if command.status == CommandStatus::Pending && command.attempt_count == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "first attempt not settled: {command:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(h.remote.truth().effects().spaces_created, 1);
    h.stop().await;
    // Another worker (a new service on the same database, its own lease owner) retries.
    h.restart().await;
    h.wait_state("t-1", "cs-traced", "active", Duration::from_secs(5))
        .await;
    h.stop().await;
    // Every span has ended; flush until the receiver has both attempts' dispatch spans (an
    // export may still be on its way when the first flush returns).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let spans = loop {
        traces.flush().await;
        let spans = spans.lock().unwrap().clone();
        let dispatches = spans
            .iter()
            .filter(|s| s.name == "lifecycle_dispatch")
            .count();
        if dispatches >= 2 || tokio::time::Instant::now() > deadline {
            break spans;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let names = |trace: &str| -> BTreeSet<String> {
        spans
            .iter()
            .filter(|s| s.trace_id == trace)
            .map(|s| s.name.clone())
            .collect()
    };
    // The command's whole life is in the caller's trace ...
    let in_trace = names(TRACE_ID);
    for name in [
        "admin_request",
        "intake",
        "lifecycle_dispatch",
        "saga_step",
        "remote_call",
        "knowledge_fs_request",
        "lifecycle_settle",
    ] {
        assert!(in_trace.contains(name), "{name} missing from {in_trace:?}");
    }
    // ... and nothing of it is anywhere else (claims span several commands: traces of their own).
    for span in &spans {
        if span.name != "lifecycle_claim" {
            assert_eq!(span.trace_id, TRACE_ID, "{span:?} left the trace");
        }
    }
    let admin = spans.iter().find(|s| s.name == "admin_request").unwrap();
    assert_eq!(
        admin.parent_span_id, CALLER_SPAN_ID,
        "the POST continues its caller"
    );
    // Two attempts, by two lease owners, each continuing the context stored at intake.
    let intake = spans.iter().find(|s| s.name == "intake").unwrap();
    let dispatches: Vec<&Received> = spans
        .iter()
        .filter(|s| s.name == "lifecycle_dispatch")
        .collect();
    assert_eq!(dispatches.len(), 2, "{dispatches:?}");
    for dispatch in &dispatches {
        assert_eq!(dispatch.parent_span_id, intake.span_id, "{dispatch:?}");
    }
    let owners: BTreeSet<&str> = dispatches
        .iter()
        .map(|d| d.attribute("lease_owner").unwrap())
        .collect();
    assert_eq!(
        owners.len(),
        2,
        "the retry ran on another worker: {owners:?}"
    );
    // KnowledgeFS got the trace on both provision requests: each `traceparent` names the
    // request's own span.
    let requests: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.name == "knowledge_fs_request")
        .map(|s| s.span_id.as_str())
        .collect();
    let received = h.remote.truth().traceparents();
    assert_eq!(received.len(), 2, "{received:?}");
    for traceparent in &received {
        let fields: Vec<&str> = traceparent.split('-').collect();
        assert_eq!(fields[1], TRACE_ID, "{traceparent}");
        assert!(
            requests.contains(fields[2]),
            "{traceparent} names no request span"
        );
    }
    traces.shutdown().await;
}
