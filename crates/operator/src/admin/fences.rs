//! Fence routes: list fences across installation bindings, clear one after reconciliation.
//!
//! Bindings and scopes must be valid ids (the kernel's id rules: 1..=255 bytes, no whitespace,
//! control or invisible format characters, no `/`); anything else is 400 before storage is
//! touched. `POST /v1/fences/clear` is idempotent under `Idempotency-Key` like the other
//! writes: the same key with the same body replays the first answer (`Idempotent-Replayed:
//! true`), the same key with another body is 422 `IDEMPOTENCY_KEY_REUSED`.

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use tenantry_fence::{Binding, FenceKey, ScopeIdentity};

use super::AdminState;
use super::error::{
    AdminApiError, Body, BodyRefusals, IdempotencyKeyReused, Refusals, RoleRefusals,
};
use super::extract::{IdempotencyKeyHeader, JsonBody, QueryParams};
use crate::identity::Caller;
use tenantry_engine::scoped_writes::admin::{ClearOutcome, ClearTarget, FenceView};

/// The actor logged for a fence clear through an open admin API (no operator configured).
pub const OPEN_API_ACTOR: &str = "anonymous";

/// Longest accepted clearing reason, in characters.
pub const MAX_REASON_CHARS: usize = 1000;

/// Query of `GET /v1/fences`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FencesQuery {
    /// Only this installation binding.
    pub binding: Option<String>,
}

/// Answer of `GET /v1/fences`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FenceList {
    /// Fences ordered by binding, then key.
    items: Vec<FenceView>,
}

/// Body of `POST /v1/fences/clear`: exactly one of `scope` and `key`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = ClearFence)]
#[serde(deny_unknown_fields)]
pub struct ClearBody {
    /// Installation binding.
    pub binding: String,
    /// Scope identity (object id) whose fence to clear.
    pub scope: Option<String>,
    /// Fence key as listed, for the installation fence or a marker without a scope.
    pub key: Option<String>,
    /// Why the fence may go (what was reconciled); logged. 1..=1000 characters.
    pub reason: String,
}

/// A binding from the API: a valid id (kernel rules), then a valid binding.
pub(crate) fn binding(value: &str) -> Result<Binding, AdminApiError> {
    tenantry_kernel::id::validate("binding", value)
        .map_err(|e| AdminApiError::invalid("binding", e))?;
    Binding::parse(value).map_err(|e| AdminApiError::invalid("binding", e))
}

/// A scope identity from the API: a valid id (kernel rules).
fn scope(value: &str) -> Result<ScopeIdentity, AdminApiError> {
    tenantry_kernel::id::validate("scope", value)
        .map_err(|e| AdminApiError::invalid("scope", e))?;
    Ok(ScopeIdentity::object(value))
}

/// `GET /v1/fences`.
#[utoipa::path(
    get,
    path = "/v1/fences",
    operation_id = "listFences",
    summary = "List reconciliation fences across installation bindings",
    params(FencesQuery),
    responses(
        (status = 200, description = "Fences ordered by binding, then key.", body = FenceList),
        Refusals,
    ),
    security(("bearer" = []))
)]
pub async fn list_fences(
    State(state): State<AdminState>,
    QueryParams(query): QueryParams<FencesQuery>,
) -> Result<Json<FenceList>, AdminApiError> {
    let only = query.binding.as_deref().map(binding).transpose()?;
    let items = state.fences.fence_views(only.as_ref()).await?;
    Ok(Json(FenceList { items }))
}

/// `POST /v1/fences/clear`.
#[utoipa::path(
    post,
    path = "/v1/fences/clear",
    operation_id = "clearFence",
    summary = "Clear one fence (or an intent past its expiry) after reconciling its scope; writes a tombstone and logs the reason and the operator; idempotent under Idempotency-Key",
    params(IdempotencyKeyHeader),
    request_body = ClearBody,
    responses(
        (status = 200, description = "Cleared, or nothing was fenced there (cleared = false, nothing written). A replay of the same Idempotency-Key and body answers the first result with header Idempotent-Replayed: true.", body = ClearOutcome,
            headers(("Idempotent-Replayed" = String, description = "`true` when the answer replays an earlier request with the same key."))),
        Refusals,
        RoleRefusals,
        (status = 409, description = "FENCE_INTENT_IN_FLIGHT: the record is a write-ahead intent whose own expiry is still ahead on the database's clock (its dispatch may be in flight; the message says when it can be cleared); FENCE_REQUEST_MAY_LAND: the record is a fence over a request that may still land at the remote until its expiry (the message says when; reconcile after it); FENCE_CHANGED: another process rewrote the record meanwhile. Nothing was cleared.", body = Body<'static>),
        BodyRefusals,
        (status = 422, response = IdempotencyKeyReused),
    ),
    security(("bearer" = []))
)]
pub async fn clear_fence(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    key: IdempotencyKeyHeader,
    JsonBody(body): JsonBody<ClearBody>,
) -> Result<(HeaderMap, Json<ClearOutcome>), AdminApiError> {
    let binding = binding(&body.binding)?;
    let target = match (body.scope.as_deref(), body.key.as_deref()) {
        (Some(value), None) => ClearTarget::Scope(scope(value)?),
        (None, Some(key)) => {
            ClearTarget::Key(FenceKey::from_storage_key(key).ok_or_else(|| {
                AdminApiError::invalid("key", format!("{key:?} is not a fence key (ke.fence.v1.…)"))
            })?)
        }
        _ => {
            return Err(AdminApiError::invalid(
                "scope",
                "give exactly one of scope (a non-empty scope identity) and key (a fence key from GET /v1/fences)",
            ));
        }
    };
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return Err(AdminApiError::invalid(
            "reason",
            format!("must say what was reconciled, in 1..={MAX_REASON_CHARS} characters"),
        ));
    }
    tracing::info!(
        %binding,
        idempotency_key = %key.key,
        actor = caller.name().unwrap_or(OPEN_API_ACTOR),
        reason,
        "fence clear requested through the admin API"
    );
    let receipt = state
        .fences
        .clear_idempotent(&binding, &target, reason, key.key.as_str())
        .await?;
    let mut headers = HeaderMap::new();
    if receipt.replayed {
        headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok((headers, Json(receipt.outcome)))
}
