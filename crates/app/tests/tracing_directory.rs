//! Traces of the directory projector (docs/operations.md, "Tracing"): with `otlp_endpoint`
//! set, each sync is a `directory_sync` span with its `directory_request` and
//! `directory_apply` spans, and the provider receives each request's `traceparent`.
//!
//! One test per process: the subscriber (with its OpenTelemetry layer) is global.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/otlp.rs"]
mod otlp;

use std::collections::BTreeSet;
use std::time::Duration;

use common::Harness;
use common::directory::{settings, workspace};
use tenantry_directory::InstanceUuid;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_syncs_are_traced_and_send_traceparent() {
    let (endpoint, spans) = otlp::start_receiver().await;
    // The subscriber first: a sync that started before it would have no traced parent.
    let mut telemetry = tenantry_app::config::Config::defaults();
    telemetry.otlp_endpoint = Some(endpoint.clone());
    telemetry.log_filter = "warn".to_owned();
    let traces = tenantry_app::logging::init_serve_logging(&telemetry)
        .expect("otlp_endpoint turns traces on, and this test installs the first subscriber");
    let (url, directory) = ReferenceDirectory::start(DirectoryServerConfig::new(
        InstanceUuid::parse("inst-1").unwrap(),
    ))
    .await
    .unwrap();
    directory.change(|m| m.upsert_workspace(workspace("ws-1")));
    let keys = directory.trusted_public_keys();
    let mut h = Harness::start_with(Default::default(), |c| {
        c.otlp_endpoint = Some(endpoint.clone());
        c.log_filter = "warn".to_owned();
        c.directory = Some(settings(url, keys));
    })
    .await;
    // A snapshot first, then event pages.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while directory.traceparents().len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no traced syncs");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.stop().await;
    // Every span has ended; flush until the receiver has them all (an export may still be
    // on its way when the first flush returns).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let spans = loop {
        traces.flush().await;
        let spans = spans.lock().unwrap().clone();
        let syncs: BTreeSet<&str> = spans
            .iter()
            .filter(|s| s.name == "directory_sync")
            .map(|s| s.span_id.as_str())
            .collect();
        let orphans = spans
            .iter()
            .filter(|s| s.name == "directory_request")
            .filter(|s| !syncs.contains(s.parent_span_id.as_str()))
            .count();
        if orphans == 0 || tokio::time::Instant::now() > deadline {
            break spans;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for name in ["directory_sync", "directory_request", "directory_apply"] {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    // Each request's span is a child of a sync, and what the provider received names it.
    let syncs: BTreeSet<&str> = spans
        .iter()
        .filter(|s| s.name == "directory_sync")
        .map(|s| s.span_id.as_str())
        .collect();
    let requests: Vec<&otlp::Received> = spans
        .iter()
        .filter(|s| s.name == "directory_request")
        .collect();
    for request in &requests {
        let parent = spans.iter().find(|s| s.span_id == request.parent_span_id);
        assert!(
            syncs.contains(request.parent_span_id.as_str()),
            "{request:?} has parent {parent:?}"
        );
    }
    for traceparent in directory.traceparents() {
        let fields: Vec<&str> = traceparent.split('-').collect();
        assert!(
            requests
                .iter()
                .any(|r| r.trace_id == fields[1] && r.span_id == fields[2]),
            "{traceparent} names no exported request span (a request after the flush?)"
        );
    }
    traces.shutdown().await;
}
