//! An in-process OTLP/HTTP trace receiver for the trace tests (`POST /v1/traces`, protobuf
//! decoded with `opentelemetry-proto`): it keeps every span it is sent.
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;

/// A span as the receiver decoded it.
#[derive(Debug, Clone)]
pub struct Received {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    pub attributes: Vec<(String, String)>,
}

impl Received {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

pub type Spans = Arc<Mutex<Vec<Received>>>;

/// `POST /v1/traces`: decodes the protobuf export and keeps every span.
async fn receive(State(spans): State<Spans>, body: Bytes) -> impl axum::response::IntoResponse {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut kept = spans.lock().unwrap();
    for resource in request.resource_spans {
        for scope in resource.scope_spans {
            for span in scope.spans {
                let attributes = span
                    .attributes
                    .iter()
                    .map(|kv| {
                        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                            Some(AnyValue::StringValue(s)) => s.clone(),
                            Some(AnyValue::IntValue(i)) => i.to_string(),
                            Some(AnyValue::BoolValue(b)) => b.to_string(),
                            other => format!("{other:?}"),
                        };
                        (kv.key.clone(), value)
                    })
                    .collect();
                kept.push(Received {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    attributes,
                });
            }
        }
    }
    (
        [("content-type", "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Starts the receiver on a loopback port; returns its base URL and what it received.
pub async fn start_receiver() -> (String, Spans) {
    let spans: Spans = Arc::default();
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (format!("http://{addr}"), spans)
}
