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
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tenantry_kernel::{
    ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::{DeletionProgress, RemoteSpace, RevokeAck};
use utoipa::OpenApi;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{Header, Required};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Shared;
use super::state::{DeletionBody, KnowledgeFsModel, ProvisionBody, RevocationBody};
use crate::fault::{Fault, Route};
use crate::http::{
    ApiConventions, CommonResponse, ErrorJson, RemoteErrorBody, error_response, retry_after_header,
    schema_ref, with_retry_after,
};
use crate::serve::ConnectionControl;

/// Path templates of the API, in axum syntax; the OpenAPI document has exactly these.
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

/// The head of the OpenAPI document; the paths come from the handlers below.
#[derive(OpenApi)]
#[openapi(info(
    title = "KnowledgeFS lifecycle API",
    version = "1.0.0",
    description = "Lifecycle of knowledge spaces as Tenantry drives it: provision (idempotent on `provisioning_key`), authoritative lookup by provisioning key, durable deletion, and capability-grant revocation.\n\nEvery request carries `Authorization: Bearer <token>`. Every mutation (POST) carries an `Idempotency-Key`: the key is bound to the first request that used it (route, path and body). The same key with the same request applies the effect at most once and answers with the current state of that effect; the same key with a different request is refused with 422. Errors are `{code, message}` JSON; 429 and 503 carry `Retry-After` (seconds or an HTTP date) and never apply an effect.\n\nA client that got no complete answer to a provision (timeout, reset, lost response) must resolve the outcome with the lookup by provisioning key, never by sending a new provisioning key."
))]
struct KnowledgeFsDoc;

/// The routes of the API, documented.
fn api() -> OpenApiRouter<Arc<Shared>> {
    OpenApiRouter::with_openapi(KnowledgeFsDoc::openapi())
        .routes(routes!(provision, lookup))
        .routes(routes!(deletion))
        .routes(routes!(revocation))
}

/// What every operation of KnowledgeFS API v1 has in common.
const CONVENTIONS: ApiConventions = ApiConventions {
    parameters: shared_parameters,
    headers: shared_headers,
    common_responses: &[
        CommonResponse {
            status: "400",
            description: "Malformed path id, query, body, or missing `Idempotency-Key` (`INVALID_REQUEST`, `IDEMPOTENCY_KEY_REQUIRED`). Not retryable.",
            retry_after: false,
            post_only: false,
        },
        CommonResponse {
            status: "401",
            description: "Missing or wrong bearer token (`UNAUTHORIZED`).",
            retry_after: false,
            post_only: false,
        },
        CommonResponse {
            status: "429",
            description: "Rate limited (`KFS_RATE_LIMITED`); no effect was applied. Retry after `Retry-After`.",
            retry_after: true,
            post_only: false,
        },
        CommonResponse {
            status: "503",
            description: "Temporarily unavailable (`KFS_UNAVAILABLE`); no effect was applied. Retry after `Retry-After`.",
            retry_after: true,
            post_only: false,
        },
        CommonResponse {
            status: "422",
            description: "The `Idempotency-Key` was already used with a different request (`IDEMPOTENCY_KEY_REUSED`). Send a new key for a new request.",
            retry_after: false,
            post_only: true,
        },
    ],
    success_headers: &[],
    not_found: "no such route in KnowledgeFS API v1",
};

fn id_parameter(name: &str, location: ParameterIn, description: Option<&str>) -> Parameter {
    ParameterBuilder::new()
        .name(name)
        .parameter_in(location)
        .required(Required::True)
        .description(description)
        .schema(Some(schema_ref("Id")))
        .build()
}

fn shared_parameters() -> Vec<(&'static str, Parameter)> {
    vec![
        (
            "NamespaceId",
            id_parameter(
                "namespace_id",
                ParameterIn::Path,
                Some("The namespace (Tenantry tenant id)."),
            ),
        ),
        (
            "KnowledgeSpaceId",
            id_parameter("knowledge_space_id", ParameterIn::Path, None),
        ),
        ("GrantId", id_parameter("grant_id", ParameterIn::Path, None)),
        (
            "IdempotencyKey",
            id_parameter(
                "Idempotency-Key",
                ParameterIn::Header,
                Some(
                    "Stable across retries of one command; bound to the first request that used it.",
                ),
            ),
        ),
    ]
}

fn shared_headers() -> Vec<(&'static str, &'static str, Header)> {
    vec![("RetryAfter", "Retry-After", retry_after_header())]
}

/// The OpenAPI document of KnowledgeFS API v1 as JSON (`docs/openapi/knowledgefs-v1.json`).
pub(crate) fn document_json() -> String {
    CONVENTIONS.document_json(api())
}

/// The router of the reference KnowledgeFS.
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    CONVENTIONS.router(api()).with_state(shared)
}

type Ctl = Extension<Arc<ConnectionControl>>;

/// The answer of a lookup.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct SpaceList {
    /// Matching spaces whose deletion has not completed (zero or one).
    items: Vec<RemoteSpace>,
}

/// Provision a knowledge space (idempotent on provisioning_key)
///
/// Creates the knowledge space of `provisioning_key` in the namespace, or answers with the existing one. A provisioning key belongs to one control space for ever: a second control space using it gets 409 `PROVISIONING_KEY_CONFLICT`; provisioning a key whose space is being or was deleted gets 409 `KNOWLEDGE_FS_SPACE_DELETED`.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{namespace_id}/spaces",
    operation_id = "provisionSpace",
    params(
        ("namespace_id" = TenantId, Path),
        ("Idempotency-Key" = IdempotencyKey, Header),
    ),
    request_body = ProvisionBody,
    responses(
        (status = 200, description = "The space of this provisioning key existed already.", body = RemoteSpace),
        (status = 201, description = "The space was created by this request.", body = RemoteSpace),
        (status = 409, description = "The provisioning key belongs to another control space (`PROVISIONING_KEY_CONFLICT`) or its space is deleted (`KNOWLEDGE_FS_SPACE_DELETED`).", body = ErrorJson),
    )
)]
async fn provision(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path(namespace): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = parse_mutation(&shared, &headers, &body, || {
        parse_id(TenantId::parse(namespace))
    });
    let (ns, key, body): (_, _, ProvisionBody) = match parsed {
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

/// Authoritative lookup by provisioning key
///
/// Spaces of the namespace with this provisioning key (and control space, if given) whose deletion has not completed. An empty `items` proves absence. Read-only: no `Idempotency-Key`.
#[utoipa::path(
    get,
    path = "/v1/namespaces/{namespace_id}/spaces",
    operation_id = "lookupSpaces",
    params(
        ("namespace_id" = TenantId, Path),
        ("provisioning_key" = ProvisioningKey, Query),
        ("control_space_id" = Option<ControlSpaceId>, Query),
    ),
    responses(
        (status = 200, description = "Matching spaces (zero or one).", body = SpaceList),
    )
)]
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
        Ok::<_, RemoteErrorBody>((ns, key, cs))
    })();
    let (ns, key, cs) = match parsed {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    run(&shared, &ctl, Route::Lookup, move |model, _, _| {
        let items = model.lookup(&ns, &key, cs.as_ref());
        Ok((StatusCode::OK, to_json(&SpaceList { items })))
    })
    .await
}

/// Request or poll the deletion of a knowledge space
///
/// Starts the deletion on the first request and reports its progress on every later one (resend the same request with the same `Idempotency-Key` to poll). Phases only move forward: `accepted` → `draining` → `irreversible` → `completed`; `irreversible_at` is set from the `irreversible` phase on. `revision` grows with each phase change.
#[utoipa::path(
    post,
    path = "/v1/namespaces/{namespace_id}/spaces/{knowledge_space_id}/deletion",
    operation_id = "requestDeletion",
    params(
        ("namespace_id" = TenantId, Path),
        ("knowledge_space_id" = KnowledgeSpaceId, Path),
        ("Idempotency-Key" = IdempotencyKey, Header),
    ),
    request_body = DeletionBody,
    responses(
        (status = 200, description = "Deletion progress.", body = DeletionProgress),
        (status = 404, description = "No such knowledge space in this namespace (`KNOWLEDGE_FS_SPACE_NOT_FOUND`).", body = ErrorJson),
        (status = 409, description = "The space belongs to another control space or provisioning key (`KNOWLEDGE_FS_SCOPE_MISMATCH`), or `expected_revision` is above the space's revision (`REVISION_AHEAD`).", body = ErrorJson),
    )
)]
async fn deletion(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path((namespace, space)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = parse_mutation(&shared, &headers, &body, || {
        Ok((
            parse_id(TenantId::parse(namespace))?,
            parse_id(KnowledgeSpaceId::parse(space))?,
        ))
    });
    let ((ns, space), key, body): (_, _, DeletionBody) = match parsed {
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

/// Revoke a capability grant up to a sequence
///
/// Raises the grant's revoke watermark to `revoke_sequence`. The answer is `revoked` once `highest_revoke_sequence >= revoke_sequence`, `pending` while the watermark lags (resend to poll).
#[utoipa::path(
    post,
    path = "/v1/namespaces/{namespace_id}/spaces/{knowledge_space_id}/grants/{grant_id}/revocations",
    operation_id = "revokeGrant",
    params(
        ("namespace_id" = TenantId, Path),
        ("knowledge_space_id" = KnowledgeSpaceId, Path),
        ("grant_id" = GrantId, Path),
        ("Idempotency-Key" = IdempotencyKey, Header),
    ),
    request_body = RevocationBody,
    responses(
        (status = 200, description = "Revocation state and the grant's watermark.", body = RevokeAck),
        (status = 404, description = "No such knowledge space in this namespace (`KNOWLEDGE_FS_SPACE_NOT_FOUND`).", body = ErrorJson),
        (status = 409, description = "The space belongs to another control space (`KNOWLEDGE_FS_SCOPE_MISMATCH`).", body = ErrorJson),
    )
)]
async fn revocation(
    State(shared): State<Arc<Shared>>,
    Extension(ctl): Ctl,
    Path((namespace, space, grant)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = parse_mutation(&shared, &headers, &body, || {
        Ok((
            parse_id(TenantId::parse(namespace))?,
            parse_id(KnowledgeSpaceId::parse(space))?,
            parse_id(GrantId::parse(grant))?,
        ))
    });
    let ((ns, space, grant), key, body): (_, _, RevocationBody) = match parsed {
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
    ) -> Result<(StatusCode, serde_json::Value), RemoteErrorBody>
    + Send
    + 'static,
) -> Response {
    let fault = shared.next_fault(route);
    match fault {
        Some(Fault::Unavailable { retry_after_secs }) => {
            let e = RemoteErrorBody::new(
                503,
                "KFS_UNAVAILABLE",
                "KnowledgeFS is temporarily unavailable",
            );
            return with_retry_after(error_response(&e), retry_after_secs);
        }
        Some(Fault::RateLimited { retry_after_secs }) => {
            let e = RemoteErrorBody::new(429, "KFS_RATE_LIMITED", "too many requests; retry later");
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

fn invalid(message: impl Into<String>) -> RemoteErrorBody {
    RemoteErrorBody::new(400, "INVALID_REQUEST", message)
}

fn parse_id<T>(parsed: Result<T, tenantry_kernel::IdError>) -> Result<T, RemoteErrorBody> {
    parsed.map_err(|e| invalid(e.to_string()))
}

/// The parts of a mutation, checked in this order (the first failure is the answer): bearer
/// token, the path ids (`ids`), the `Idempotency-Key`, the JSON body.
fn parse_mutation<I, B: DeserializeOwned>(
    shared: &Shared,
    headers: &HeaderMap,
    body: &[u8],
    ids: impl FnOnce() -> Result<I, RemoteErrorBody>,
) -> Result<(I, IdempotencyKey, B), RemoteErrorBody> {
    shared.authorize(headers)?;
    let ids = ids()?;
    let key = idempotency_key(headers)?;
    let body = parse_body(body)?;
    Ok((ids, key, body))
}

fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, RemoteErrorBody> {
    serde_json::from_slice(body).map_err(|e| invalid(format!("malformed JSON body: {e}")))
}

fn idempotency_key(headers: &HeaderMap) -> Result<IdempotencyKey, RemoteErrorBody> {
    let value = headers
        .get("idempotency-key")
        .ok_or_else(|| {
            RemoteErrorBody::new(
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
