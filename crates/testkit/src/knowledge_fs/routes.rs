//! HTTP routes of the reference KnowledgeFS lifecycle API v1 (axum handlers).
//!
//! Every `/v1` request goes through the same pipeline: bearer auth → parse path, query and
//! body → draw the route's fault → pre-commit faults (503, 429, stall before commit) → apply
//! the effect to the model under the lock (binding the `Idempotency-Key` first) →
//! post-commit faults (lost ACK, reset, stall after commit) → answer.

use std::future;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tenantry_kernel::{
    ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, ProvisioningKey, TenantId,
};

use super::Shared;
use super::state::{ApiError, DeletionBody, KnowledgeFsModel, ProvisionBody, RevocationBody};
use crate::fault::{Fault, Route};
use crate::openapi;
use crate::serve::ConnectionControl;

/// Path templates of the API, in axum syntax; the OpenAPI file documents exactly these.
pub const PATHS: [(&str, &str, Route); 4] = [
    (
        "POST",
        "/v1/namespaces/{namespace_id}/spaces",
        Route::Provision,
    ),
    ("GET", "/v1/namespaces/{namespace_id}/spaces", Route::Lookup),
    (
        "POST",
        "/v1/namespaces/{namespace_id}/spaces/{knowledge_space_id}/deletion",
        Route::Deletion,
    ),
    (
        "POST",
        "/v1/namespaces/{namespace_id}/spaces/{knowledge_space_id}/grants/{grant_id}/revocations",
        Route::Revocation,
    ),
];

/// The router of the reference KnowledgeFS.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(PATHS[0].1, post(provision).get(lookup))
        .route(PATHS[2].1, post(deletion))
        .route(PATHS[3].1, post(revocation))
        .route("/openapi.json", get(openapi_document))
        .fallback(not_found)
        .with_state(shared)
}

type Ctl = Extension<Arc<ConnectionControl>>;

async fn openapi_document() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        openapi::KNOWLEDGE_FS_V1,
    )
        .into_response()
}

async fn not_found() -> Response {
    error_response(&ApiError::new(
        404,
        "NOT_FOUND",
        "no such route in KnowledgeFS API v1",
    ))
}

async fn provision(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path(namespace): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = (|| {
        shared.authorize(&headers)?;
        let ns = parse_id(TenantId::parse(namespace))?;
        let key = idempotency_key(&headers)?;
        let body: ProvisionBody = parse_body(&body)?;
        Ok::<_, ApiError>((ns, key, body))
    })();
    let (ns, key, body) = match parsed {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let fingerprint = fingerprint("provision", &[ns.as_str()], &body);
    run(&shared, &ctl, Route::Provision, move |model, _, _| {
        model.check_idempotency(&ns, &key, fingerprint)?;
        let provisioned = model.provision(&ns, &body)?;
        let status = if provisioned.created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        Ok((status, to_json(&provisioned.space)))
    })
    .await
}

#[derive(Debug, Deserialize)]
struct LookupQuery {
    provisioning_key: Option<String>,
    control_space_id: Option<String>,
}

async fn lookup(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path(namespace): Path<String>,
    query: Result<Query<LookupQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let parsed = (|| {
        shared.authorize(&headers)?;
        let ns = parse_id(TenantId::parse(namespace))?;
        let Query(query) = query.map_err(|e| invalid(format!("malformed query string: {e}")))?;
        let key = query
            .provisioning_key
            .ok_or_else(|| invalid("query parameter provisioning_key is required"))?;
        let key = parse_id(ProvisioningKey::parse(key))?;
        let cs = query
            .control_space_id
            .map(|c| parse_id(ControlSpaceId::parse(c)))
            .transpose()?;
        Ok::<_, ApiError>((ns, key, cs))
    })();
    let (ns, key, cs) = match parsed {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    run(&shared, &ctl, Route::Lookup, move |model, _, _| {
        let items = model.lookup(&ns, &key, cs.as_ref());
        Ok((StatusCode::OK, serde_json::json!({ "items": items })))
    })
    .await
}

async fn deletion(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path((namespace, space)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = (|| {
        shared.authorize(&headers)?;
        let ns = parse_id(TenantId::parse(namespace))?;
        let space = parse_id(KnowledgeSpaceId::parse(space))?;
        let key = idempotency_key(&headers)?;
        let body: DeletionBody = parse_body(&body)?;
        Ok::<_, ApiError>((ns, space, key, body))
    })();
    let (ns, space, key, body) = match parsed {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let fingerprint = fingerprint("deletion", &[ns.as_str(), space.as_str()], &body);
    let mut response = run(&shared, &ctl, Route::Deletion, move |model, now, _| {
        model.check_idempotency(&ns, &key, fingerprint)?;
        let progress = model.delete(&ns, &space, &body, now)?;
        Ok((StatusCode::OK, to_json(&progress)))
    })
    .await;
    if response.status() == StatusCode::OK {
        // The interval at which a client should poll a deletion that is not completed yet.
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

async fn revocation(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path((namespace, space, grant)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = (|| {
        shared.authorize(&headers)?;
        let ns = parse_id(TenantId::parse(namespace))?;
        let space = parse_id(KnowledgeSpaceId::parse(space))?;
        let grant = parse_id(GrantId::parse(grant))?;
        let key = idempotency_key(&headers)?;
        let body: RevocationBody = parse_body(&body)?;
        Ok::<_, ApiError>((ns, space, grant, key, body))
    })();
    let (ns, space, grant, key, body) = match parsed {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let fingerprint = fingerprint(
        "revocation",
        &[ns.as_str(), space.as_str(), grant.as_str()],
        &body,
    );
    run(&shared, &ctl, Route::Revocation, move |model, _, lag| {
        model.check_idempotency(&ns, &key, fingerprint)?;
        let ack = model.revoke(&ns, &space, &grant, &body, lag)?;
        Ok((StatusCode::OK, to_json(&ack)))
    })
    .await
}

/// Runs one request through faults and the model; `effect` is applied under the lock with the
/// current time and whether a watermark-lag fault hit.
async fn run(
    shared: &Shared,
    ctl: &ConnectionControl,
    route: Route,
    effect: impl FnOnce(
        &mut KnowledgeFsModel,
        chrono::DateTime<chrono::Utc>,
        bool,
    ) -> Result<(StatusCode, serde_json::Value), ApiError>
    + Send
    + 'static,
) -> Response {
    let fault = shared.next_fault(route);
    match fault {
        Some(Fault::Unavailable { retry_after_secs }) => {
            let e = ApiError::new(
                503,
                "KFS_UNAVAILABLE",
                "KnowledgeFS is temporarily unavailable",
            );
            return with_retry_after(error_response(&e), retry_after_secs);
        }
        Some(Fault::RateLimited { retry_after_secs }) => {
            let e = ApiError::new(429, "KFS_RATE_LIMITED", "too many requests; retry later");
            return with_retry_after(error_response(&e), retry_after_secs);
        }
        Some(Fault::InvalidRequest) => {
            return error_response(&invalid(
                "the request was refused (injected permanent fault)",
            ));
        }
        Some(Fault::Stall { commit: false }) => tokio::time::sleep(shared.stall).await,
        _ => {}
    }
    let lag = fault == Some(Fault::LagWatermark);
    let result = shared.apply(|model| effect(model, chrono::Utc::now(), lag));
    match fault {
        Some(Fault::LostAck) => {
            ctl.close();
            return future::pending().await;
        }
        Some(Fault::ResetAfterCommit) => {
            ctl.reset();
            return future::pending().await;
        }
        Some(Fault::Stall { commit: true }) => tokio::time::sleep(shared.stall).await,
        _ => {}
    }
    match result {
        Ok((status, json)) => (status, axum::Json(json)).into_response(),
        Err(e) => error_response(&e),
    }
}

/// `{code, message}` with the error's status.
pub(crate) fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        axum::Json(serde_json::json!({ "code": error.code, "message": error.message })),
    )
        .into_response()
}

fn with_retry_after(mut response: Response, secs: u32) -> Response {
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    response
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "INVALID_REQUEST", message)
}

fn parse_id<T>(parsed: Result<T, tenantry_kernel::IdError>) -> Result<T, ApiError> {
    parsed.map_err(|e| invalid(e.to_string()))
}

fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| invalid(format!("malformed JSON body: {e}")))
}

fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, ApiError> {
    let value = headers
        .get("idempotency-key")
        .ok_or_else(|| {
            ApiError::new(
                400,
                "IDEMPOTENCY_KEY_REQUIRED",
                "every mutation needs an Idempotency-Key header",
            )
        })?
        .to_str()
        .map_err(|_| invalid("Idempotency-Key is not visible ASCII"))?;
    parse_id(IdempotencyKey::parse(value))
}

fn fingerprint(route: &str, path: &[&str], body: &impl serde::Serialize) -> String {
    let body = serde_json::to_string(body).unwrap_or_default();
    format!("{route}|{}|{body}", path.join("/"))
}

fn to_json(value: &impl serde::Serialize) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}
