//! Health, readiness, metrics, the OpenAPI document, directory status and fallbacks.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tenantry_lifecycle::{CommandStatus, Operation};
use tenantry_ports::lifecycle::{CommandAdmin, CommandFilter, CommandQueue};

use super::error::AdminApiError;
use super::{AdminState, OPENAPI};
use crate::metrics;

/// Statuses reported by the `tenantry_commands` gauge.
const GAUGE_STATUSES: [CommandStatus; 3] = [
    CommandStatus::Pending,
    CommandStatus::Processing,
    CommandStatus::Failed,
];

/// `GET /healthz`: the process is alive.
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /readyz`: the database answers and the service is not shutting down.
pub async fn readyz(State(state): State<AdminState>) -> Response {
    if !state.accepting.load(Ordering::SeqCst) {
        return AdminApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "SHUTTING_DOWN",
            "the service is shutting down",
        )
        .into_response();
    }
    let probe = CommandFilter {
        limit: 1,
        ..CommandFilter::default()
    };
    if let Err(e) = state.store.list_commands(&probe).await {
        return AdminApiError::internal(
            StatusCode::SERVICE_UNAVAILABLE,
            "DATABASE_UNREACHABLE",
            "database does not answer",
            e,
        )
        .into_response();
    }
    match &state.directory {
        None => Json(json!({"status": "ready", "database": "ok", "directory": "not_configured"}))
            .into_response(),
        Some(directory) => match directory.projector.require_ready() {
            Ok(()) => Json(json!({"status": "ready", "database": "ok", "directory": "ready"}))
                .into_response(),
            Err(e) => AdminApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "DIRECTORY_NOT_READY",
                format!("{e}; execution admission fails closed until the projection catches up"),
            )
            .into_response(),
        },
    }
}

/// `GET /metrics`: Prometheus text. Refreshes the gauges of commands and fences first.
pub async fn metrics(State(state): State<AdminState>) -> Response {
    refresh_gauges(&state).await;
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        metrics::render(),
    )
        .into_response()
}

async fn refresh_gauges(state: &AdminState) {
    // One aggregate query; every (status, operation) pair is set, 0 when absent.
    match state.store.count_commands(&GAUGE_STATUSES).await {
        Ok(counts) => {
            for status in GAUGE_STATUSES {
                for operation in [Operation::Provision, Operation::Delete, Operation::Revoke] {
                    let n = counts
                        .iter()
                        .filter(|c| c.status == status && c.operation == operation)
                        .map(|c| c.count)
                        .sum();
                    metrics::set_open_commands(status.as_str(), operation.as_str(), n);
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "commands gauge not refreshed"),
    }
    match state.fences.count_fences().await {
        Ok(counts) => {
            for (kind, n) in counts {
                metrics::set_fences_active(kind.as_str(), n);
            }
        }
        Err(e) => tracing::warn!(error = %e, "fences gauge not refreshed"),
    }
    if state.directory.is_some() {
        // Sets the staleness gauge as a side effect.
        let _ = crate::directory::status(state.directory.as_ref()).await;
    }
}

/// `GET /openapi.json`: `docs/openapi/admin-v1.json`.
pub async fn openapi() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        OPENAPI,
    )
        .into_response()
}

/// `GET /v1/directory/status`: cursor, staleness, readiness and resource gauges.
pub async fn directory_status(State(state): State<AdminState>) -> Json<serde_json::Value> {
    Json(crate::directory::status(state.directory.as_ref()).await)
}

/// Unknown route: 404 `NOT_FOUND`.
pub async fn not_found() -> AdminApiError {
    AdminApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "no such route; see GET /openapi.json",
    )
}

/// Known route, wrong method: 405 `METHOD_NOT_ALLOWED`.
pub async fn method_not_allowed() -> AdminApiError {
    AdminApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "this route does not take that method; see GET /openapi.json",
    )
}
