//! Health, readiness, metrics, the OpenAPI document, directory status and fallbacks.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use tenantry_lifecycle::Operation;
use tenantry_ports::lifecycle::{CommandFilter, CommandQueue};

use super::error::{AdminApiError, Unauthorized, Unavailable};
use super::{AdminState, OPENAPI};
use crate::directory::DirectoryStatus;
use crate::metrics;

/// The answer of `GET /healthz`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Health)]
pub struct HealthAnswer {
    /// Always `ok`.
    status: &'static str,
}

/// The answer of `GET /readyz` when ready. Fields in alphabetical order, as sent.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Readiness)]
pub struct ReadyAnswer {
    /// Always `ok`.
    database: &'static str,
    /// `ready`, or `not_configured` when no directory provider is configured.
    directory: &'static str,
    /// Always `ready`.
    status: &'static str,
}

/// `GET /healthz`: the process is alive.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    summary = "The process is alive",
    responses((status = 200, description = "Alive.", body = HealthAnswer))
)]
pub async fn healthz() -> Json<HealthAnswer> {
    Json(HealthAnswer { status: "ok" })
}

/// How long `/readyz` waits for the database before it answers 503: 2 seconds. A host that
/// stopped answering (a primary's machine gone, a network partition) would otherwise hold the
/// probe for the pool's 10-second acquire timeout, longer than a load balancer's own probe
/// timeout.
pub const READINESS_DATABASE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /readyz`: the database answers within [`READINESS_DATABASE_TIMEOUT`] and the service
/// is not shutting down.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    summary = "The database answers (and the directory is ready, when configured) and the service is not shutting down",
    responses(
        (status = 200, description = "Ready.", body = ReadyAnswer),
        (status = 503, response = Unavailable),
    )
)]
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
    match tokio::time::timeout(
        READINESS_DATABASE_TIMEOUT,
        state.store.list_commands(&probe),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            return AdminApiError::internal(
                StatusCode::SERVICE_UNAVAILABLE,
                "DATABASE_UNREACHABLE",
                "database does not answer",
                e,
            )
            .into_response();
        }
        Err(_) => {
            return AdminApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "DATABASE_UNREACHABLE",
                format!(
                    "database did not answer within {} s (no writable server reachable?)",
                    READINESS_DATABASE_TIMEOUT.as_secs()
                ),
            )
            .into_response();
        }
    }
    let ready = |directory| {
        Json(ReadyAnswer {
            database: "ok",
            directory,
            status: "ready",
        })
        .into_response()
    };
    match &state.directory {
        None => ready("not_configured"),
        Some(directory) => match directory.projector.require_ready() {
            Ok(()) => ready("ready"),
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
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    summary = "Prometheus text exposition",
    responses((status = 200, description = "Metrics.", body = String, content_type = "text/plain; version=0.0.4"))
)]
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
    // The shared counts (at most one read a second, whoever asks): every (status, operation)
    // pair is set, 0 when absent.
    let counts = state.counts.get().await;
    match &counts.commands {
        Ok(rows) => {
            for status in crate::counts::COUNTED_STATUSES {
                for operation in [Operation::Provision, Operation::Delete, Operation::Revoke] {
                    let n = rows
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
    match &counts.fences {
        Ok(kinds) => {
            for (kind, n) in kinds {
                metrics::set_fences_active(kind.as_str(), *n);
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
#[utoipa::path(
    get,
    path = "/v1/directory/status",
    operation_id = "directoryStatus",
    summary = "Directory projection status: cursor, staleness, readiness, resource gauges",
    responses(
        (status = 200, description = "Status.", body = DirectoryStatus),
        (status = 401, response = Unauthorized),
    ),
    security(("bearer" = []))
)]
pub async fn directory_status(State(state): State<AdminState>) -> Json<DirectoryStatus> {
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
