//! Lifecycle routes: enqueue provision / delete / revoke, read a control space (with its open
//! and failed commands), list commands.

use crate::CommandFilterInput;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tenantry_engine::lifecycle::IntakeReceipt;
use tenantry_kernel::{CommandId, ControlSpaceId, GrantId, TenantId};
use tenantry_lifecycle::intake::{
    CreateControlSpace, RequestDeletion, RequestRevocation, derived_control_space_id,
};
use tenantry_lifecycle::operator::{LeftBehind, abandoned_provision_left_behind};
use tenantry_lifecycle::{CommandRecord, CommandStatus, ControlSpace, ControlSpaceState};
use tenantry_ports::lifecycle::{CommandAdmin, CommandFilter, CommandQueue, ControlSpaceReader};
use tracing::Instrument;

use super::AdminState;
use super::error::AdminApiError;
use super::error::{
    BodyRefusals, Conflict, IdempotencyKeyReused, NotFound, Refusals, RoleRefusals,
};
use super::extract::{
    IdempotencyKeyHeader, JsonBody, PathParams, QueryParams, TraceParentHeader, parse_id,
};

pub use crate::{DEFAULT_PAGE, MAX_PAGE};

/// Body of `POST /v1/tenants/{tenant_id}/control-spaces`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = CreateControlSpace)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    /// Id of the new control space; derived from the idempotency key when absent.
    #[schema(value_type = Option<ControlSpaceId>)]
    pub control_space_id: Option<String>,
    /// Display name (1..=255 characters).
    pub name: String,
    /// Short name (1..=255 characters).
    pub slug: String,
    /// Icon reference (absent or `null` = empty).
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schema(value_type = Option<String>)]
    pub icon: String,
    /// Description (absent or `null` = empty).
    #[serde(default, deserialize_with = "null_as_empty")]
    #[schema(value_type = Option<String>)]
    pub description: String,
    /// Model intent passed through to KnowledgeFS.
    #[schema(value_type = Option<Object>)]
    pub model_intent: Option<Value>,
    /// Profile intent passed through to KnowledgeFS.
    #[schema(value_type = Option<Object>)]
    pub profile_intent: Option<Value>,
}

/// Body of a revocation.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = Revocation)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    /// Why the grant is revoked (1..=255 characters).
    pub reason_code: String,
}

/// Answer of an accepted (202) request.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Accepted {
    tenant_id: String,
    control_space_id: String,
    /// The lifecycle operation the command belongs to.
    operation_id: String,
    /// The enqueued command.
    command_id: String,
    /// `provision`, `delete` or `revoke`.
    operation: String,
    /// The request's key (generated when the request carried none).
    idempotency_key: String,
    /// True when an earlier request with the same key is answered again (nothing new was
    /// enqueued).
    replayed: bool,
}

impl Accepted {
    fn of(receipt: &IntakeReceipt, key: &IdempotencyKeyHeader) -> Self {
        Self {
            tenant_id: receipt.tenant_id.to_string(),
            control_space_id: receipt.control_space_id.to_string(),
            operation_id: receipt.operation_id.to_string(),
            command_id: receipt.command_id.to_string(),
            operation: receipt.operation.to_string(),
            idempotency_key: key.key.to_string(),
            replayed: receipt.replayed,
        }
    }
}

/// A command as listed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Command)]
pub struct CommandView {
    id: String,
    tenant_id: String,
    control_space_id: String,
    operation_id: String,
    operation: String,
    status: CommandStatus,
    idempotency_key: String,
    attempt_count: i32,
    attempt_budget_base: i32,
    lease_owner: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    lease_epoch: i64,
    next_attempt_at: DateTime<Utc>,
    last_error: Option<ErrorView>,
    created_at: DateTime<Utc>,
    completed_at: Option<DateTime<Utc>>,
    /// Only on an abandoned provision whose request may have reached KnowledgeFS: what it may
    /// have left there and the call that cleans it up.
    #[serde(skip_serializing_if = "Option::is_none")]
    left_behind: Option<LeftBehindView>,
}

/// What a given-up command may have left in KnowledgeFS, and how to clean it up.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = LeftBehind)]
pub struct LeftBehindView {
    /// Always true when present: a remote space may exist that no command will remove.
    remote_space_may_exist: bool,
    /// The provisioning key a lookup finds that space by.
    provisioning_key: String,
    /// The call that removes it: `DELETE /v1/tenants/{tenant_id}/control-spaces/{control_space_id}`
    /// (the deletion looks the space up by provisioning key and deletes it, or completes on
    /// proven absence).
    cleanup: String,
    /// The same in words.
    note: String,
}

impl LeftBehindView {
    fn of(r: &CommandRecord, left: &LeftBehind) -> Self {
        let cleanup = format!(
            "DELETE /v1/tenants/{}/control-spaces/{}",
            r.tenant_id, r.control_space_id
        );
        Self {
            remote_space_may_exist: true,
            provisioning_key: left.provisioning_key.to_string(),
            note: format!(
                "the provision was abandoned after a request that may have reached KnowledgeFS; \
                 a knowledge space may exist under provisioning key {}. Unless the control space \
                 was deleted since, delete it ({cleanup}): the deletion looks the space up and \
                 removes it",
                left.provisioning_key
            ),
            cleanup,
        }
    }
}

/// The last error of a command.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = CommandError)]
struct ErrorView {
    code: String,
    message: String,
}

impl From<&CommandRecord> for CommandView {
    fn from(r: &CommandRecord) -> Self {
        Self {
            id: r.id.to_string(),
            tenant_id: r.tenant_id.to_string(),
            control_space_id: r.control_space_id.to_string(),
            operation_id: r.operation_id.to_string(),
            operation: r.operation.to_string(),
            status: r.status,
            idempotency_key: r.idempotency_key.to_string(),
            attempt_count: r.attempt_count,
            attempt_budget_base: r.attempt_budget_base,
            lease_owner: r.lease_owner.as_ref().map(|o| o.as_str().to_owned()),
            lease_expires_at: r.lease_expires_at,
            lease_epoch: r.lease_epoch.0,
            next_attempt_at: r.next_attempt_at,
            last_error: r.last_error_code.as_ref().map(|code| ErrorView {
                code: code.to_string(),
                message: r.last_error_message.clone().unwrap_or_default(),
            }),
            created_at: r.created_at,
            completed_at: r.completed_at,
            left_behind: abandoned_provision_left_behind(r, None)
                .map(|left| LeftBehindView::of(r, &left)),
        }
    }
}

/// The newest dead-lettered (`failed`) or abandoned command of a control space.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Failure)]
struct FailureView {
    command_id: String,
    operation: String,
    status: CommandStatus,
    code: Option<String>,
    message: Option<String>,
    failed_at: Option<DateTime<Utc>>,
    attempt_count: i32,
}

/// A control space with its open commands and its failures.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ControlSpace)]
pub struct ControlSpaceView {
    tenant_id: String,
    control_space_id: String,
    state: String,
    resource_version: i64,
    lifecycle_operation_id: String,
    knowledge_space_id: Option<String>,
    knowledge_space_revision: i64,
    deletion_irreversible_at: Option<DateTime<Utc>>,
    last_revoke_sequence: i64,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    /// `in_progress` (the owning operation's command is open), `settled` (it succeeded or was
    /// superseded), `failed` (it is dead-lettered or abandoned: an operator must act), or
    /// `unknown` (no command of the owning operation in the listing).
    lifecycle_status: &'static str,
    /// The newest failed or abandoned command, if any.
    failure: Option<FailureView>,
    /// True while the control space is `provisioning` and its provision was abandoned after a
    /// request that may have reached KnowledgeFS: a remote space may exist; `left_behind`
    /// says how to clean it up.
    remote_space_may_exist: bool,
    /// When `remote_space_may_exist`: the provisioning key and the cleanup call.
    #[serde(skip_serializing_if = "Option::is_none")]
    left_behind: Option<LeftBehindView>,
    open_commands: Vec<CommandView>,
    /// Every failed command (waiting for `retry` or `abandon`).
    failed_commands: Vec<CommandView>,
}

impl ControlSpaceView {
    fn of(cs: &ControlSpace, commands: &[CommandRecord]) -> Self {
        let owning = commands
            .iter()
            .filter(|c| c.operation_id == cs.lifecycle_operation_id)
            .max_by_key(|c| c.created_at);
        let lifecycle_status = match owning.map(|c| c.status) {
            None => "unknown",
            Some(CommandStatus::Failed | CommandStatus::Abandoned) => "failed",
            Some(status) if status.is_terminal() => "settled",
            Some(_) => "in_progress",
        };
        let failure = commands
            .iter()
            .filter(|c| matches!(c.status, CommandStatus::Failed | CommandStatus::Abandoned))
            .max_by_key(|c| (c.completed_at, c.created_at))
            .map(|c| FailureView {
                command_id: c.id.to_string(),
                operation: c.operation.to_string(),
                status: c.status,
                code: c.last_error_code.as_ref().map(ToString::to_string),
                message: c.last_error_message.clone(),
                failed_at: c.completed_at,
                attempt_count: c.attempt_count,
            });
        let left_behind = owning
            .filter(|_| cs.state == ControlSpaceState::Provisioning)
            .and_then(|c| {
                abandoned_provision_left_behind(c, Some(&cs.provisioning_key))
                    .map(|left| LeftBehindView::of(c, &left))
            });
        Self {
            lifecycle_status,
            failure,
            remote_space_may_exist: left_behind.is_some(),
            left_behind,
            failed_commands: commands
                .iter()
                .filter(|c| c.status == CommandStatus::Failed)
                .map(CommandView::from)
                .collect(),
            tenant_id: cs.tenant_id.to_string(),
            control_space_id: cs.control_space_id.to_string(),
            state: cs.state.to_string(),
            resource_version: cs.resource_version,
            lifecycle_operation_id: cs.lifecycle_operation_id.to_string(),
            knowledge_space_id: cs.knowledge_space_id.as_ref().map(ToString::to_string),
            knowledge_space_revision: cs.knowledge_space_revision,
            deletion_irreversible_at: cs.deletion_irreversible_at,
            last_revoke_sequence: cs.last_revoke_sequence,
            created_at: cs.created_at,
            updated_at: cs.updated_at,
            open_commands: commands
                .iter()
                .filter(|c| !c.status.is_terminal())
                .map(CommandView::from)
                .collect(),
        }
    }
}

/// Reads an optional text field where JSON `null` means the same as an absent field.
fn null_as_empty<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(deserializer)?.unwrap_or_default())
}

pub(super) fn tenant(value: &str) -> Result<TenantId, AdminApiError> {
    parse_id("tenant_id", value, TenantId::parse)
}

pub(super) fn control_space(value: &str) -> Result<ControlSpaceId, AdminApiError> {
    parse_id("control_space_id", value, ControlSpaceId::parse)
}

fn accepted(receipt: &IntakeReceipt, key: &IdempotencyKeyHeader) -> (StatusCode, Json<Accepted>) {
    tracing::Span::current().record("operation_id", receipt.operation_id.as_str());
    tracing::info!(
        command_id = %receipt.command_id,
        control_space = %receipt.control_space_id,
        operation = %receipt.operation,
        replayed = receipt.replayed,
        key_supplied = key.supplied,
        "lifecycle request accepted"
    );
    (StatusCode::ACCEPTED, Json(Accepted::of(receipt, key)))
}

/// The span of a lifecycle request, a child of the caller's `traceparent` when it sent one
/// and OpenTelemetry records spans (docs/operations.md, "Tracing").
fn request_span(
    route: &'static str,
    tenant: &str,
    traceparent: &TraceParentHeader,
) -> tracing::Span {
    let span = tracing::info_span!(
        "admin_request",
        route,
        tenant,
        operation_id = tracing::field::Empty
    );
    if let Some(value) = &traceparent.0 {
        tenantry_engine::trace_context::set_parent(&span, value);
    }
    span
}

/// `POST /v1/tenants/{tenant_id}/control-spaces`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/control-spaces",
    operation_id = "createControlSpace",
    summary = "Create a control space and enqueue its provision",
    params(("tenant_id" = TenantId, Path), IdempotencyKeyHeader),
    request_body = CreateBody,
    responses(
        (status = 202, description = "Accepted: the provision command is enqueued (or, for a replayed Idempotency-Key, the original receipt with replayed = true).", body = Accepted),
        Refusals,
        RoleRefusals,
        (status = 409, response = Conflict),
        BodyRefusals,
        (status = 422, response = IdempotencyKeyReused),
    ),
    security(("bearer" = []))
)]
pub async fn create_control_space(
    State(state): State<AdminState>,
    PathParams(tenant_id): PathParams<String>,
    key: IdempotencyKeyHeader,
    traceparent: TraceParentHeader,
    JsonBody(body): JsonBody<CreateBody>,
) -> Result<(StatusCode, Json<Accepted>), AdminApiError> {
    let span = request_span("create_control_space", &tenant_id, &traceparent);
    async move {
        let tenant_id = tenant(&tenant_id)?;
        let control_space_id = match &body.control_space_id {
            Some(id) => control_space(id)?,
            None => control_space(&derived_control_space_id(&tenant_id, key.key.as_str()))?,
        };
        let request = CreateControlSpace {
            tenant_id,
            control_space_id,
            idempotency_key: key.key.clone(),
            name: body.name,
            slug: body.slug,
            icon: body.icon,
            description: body.description,
            model_intent: body.model_intent,
            profile_intent: body.profile_intent,
        };
        let receipt = state
            .intake
            .submit_traced(request, traceparent.0.as_deref())
            .await?;
        Ok(accepted(&receipt, &key))
    }
    .instrument(span)
    .await
}

/// `DELETE /v1/tenants/{tenant_id}/control-spaces/{control_space_id}`.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant_id}/control-spaces/{control_space_id}",
    operation_id = "deleteControlSpace",
    summary = "Request deletion: the control space moves to deleting and a delete command is enqueued",
    params(
        ("tenant_id" = TenantId, Path),
        ("control_space_id" = ControlSpaceId, Path),
        IdempotencyKeyHeader,
    ),
    responses(
        (status = 202, description = "Accepted.", body = Accepted),
        Refusals,
        RoleRefusals,
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 422, response = IdempotencyKeyReused),
    ),
    security(("bearer" = []))
)]
pub async fn delete_control_space(
    State(state): State<AdminState>,
    PathParams((tenant_id, control_space_id)): PathParams<(String, String)>,
    key: IdempotencyKeyHeader,
    traceparent: TraceParentHeader,
) -> Result<(StatusCode, Json<Accepted>), AdminApiError> {
    let span = request_span("delete_control_space", &tenant_id, &traceparent);
    async move {
        let request = RequestDeletion {
            tenant_id: tenant(&tenant_id)?,
            control_space_id: control_space(&control_space_id)?,
            idempotency_key: key.key.clone(),
        };
        let receipt = state
            .intake
            .submit_traced(request, traceparent.0.as_deref())
            .await?;
        Ok(accepted(&receipt, &key))
    }
    .instrument(span)
    .await
}

/// `POST /v1/tenants/{tenant_id}/control-spaces/{control_space_id}/grants/{grant_id}/revocations`.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant_id}/control-spaces/{control_space_id}/grants/{grant_id}/revocations",
    operation_id = "revokeGrant",
    summary = "Enqueue the revocation of a capability grant (the control space must be provisioned)",
    params(
        ("tenant_id" = TenantId, Path),
        ("control_space_id" = ControlSpaceId, Path),
        ("grant_id" = GrantId, Path),
        IdempotencyKeyHeader,
    ),
    request_body = RevokeBody,
    responses(
        (status = 202, description = "Accepted.", body = Accepted),
        Refusals,
        RoleRefusals,
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        BodyRefusals,
        (status = 422, response = IdempotencyKeyReused),
    ),
    security(("bearer" = []))
)]
pub async fn revoke_grant(
    State(state): State<AdminState>,
    PathParams((tenant_id, control_space_id, grant_id)): PathParams<(String, String, String)>,
    key: IdempotencyKeyHeader,
    traceparent: TraceParentHeader,
    JsonBody(body): JsonBody<RevokeBody>,
) -> Result<(StatusCode, Json<Accepted>), AdminApiError> {
    let span = request_span("revoke_grant", &tenant_id, &traceparent);
    async move {
        let request = RequestRevocation {
            tenant_id: tenant(&tenant_id)?,
            control_space_id: control_space(&control_space_id)?,
            grant_id: parse_id("grant_id", &grant_id, GrantId::parse)?,
            reason_code: body.reason_code,
            idempotency_key: key.key.clone(),
        };
        let receipt = state
            .intake
            .submit_traced(request, traceparent.0.as_deref())
            .await?;
        Ok(accepted(&receipt, &key))
    }
    .instrument(span)
    .await
}

/// `GET /v1/tenants/{tenant_id}/control-spaces/{control_space_id}`.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant_id}/control-spaces/{control_space_id}",
    operation_id = "getControlSpace",
    summary = "Read a control space with its open commands",
    params(("tenant_id" = TenantId, Path), ("control_space_id" = ControlSpaceId, Path)),
    responses(
        (status = 200, description = "The control space.", body = ControlSpaceView),
        Refusals,
        (status = 404, response = NotFound),
    ),
    security(("bearer" = []))
)]
pub async fn get_control_space(
    State(state): State<AdminState>,
    PathParams((tenant_id, control_space_id)): PathParams<(String, String)>,
) -> Result<Json<ControlSpaceView>, AdminApiError> {
    let tenant_id = tenant(&tenant_id)?;
    let control_space_id = control_space(&control_space_id)?;
    let cs = state
        .store
        .control_space(&tenant_id, &control_space_id)
        .await?
        .ok_or_else(|| {
            AdminApiError::new(
                StatusCode::NOT_FOUND,
                "CONTROL_SPACE_NOT_FOUND",
                format!("control space {control_space_id} of tenant {tenant_id} does not exist"),
            )
        })?;
    let commands = state
        .store
        .list_commands(&CommandFilter {
            tenant_id: Some(tenant_id),
            control_space_id: Some(control_space_id),
            limit: MAX_PAGE,
            ..CommandFilter::default()
        })
        .await?;
    Ok(Json(ControlSpaceView::of(&cs, &commands)))
}

/// Query of `GET /v1/commands`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct CommandsQuery {
    /// `pending`, `processing`, `succeeded`, `superseded`, `failed` or `abandoned`.
    #[param(value_type = Option<CommandStatus>)]
    pub status: Option<String>,
    /// `provision`, `delete` or `revoke`.
    pub operation: Option<String>,
    /// Only this tenant.
    pub tenant_id: Option<String>,
    /// Only this control space (requires `tenant_id`).
    pub control_space_id: Option<String>,
    /// Only commands whose last error code is exactly this.
    pub error_code: Option<String>,
    /// Page size (1..=1000, default 100).
    #[param(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<u32>,
    /// Cursor: the `next_after` of the previous page, the id of an existing command (an id
    /// that names no command is 400 UNKNOWN_CURSOR, not an empty page).
    pub after: Option<String>,
}

/// A page of commands.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CommandPage {
    items: Vec<CommandView>,
    /// Pass as `after` for the next page; `null` on the last page.
    next_after: Option<String>,
}

impl CommandsQuery {
    /// The operator's filter input of this query (parsed by [`CommandFilterInput::page`], as
    /// the console's and the CLI's are).
    pub fn input(&self) -> CommandFilterInput {
        CommandFilterInput {
            status: self.status.clone(),
            operation: self.operation.clone(),
            tenant_id: self.tenant_id.clone(),
            control_space_id: self.control_space_id.clone(),
            error_code: self.error_code.clone(),
            limit: self.limit,
            after: self.after.clone(),
            before: None,
        }
    }
}

/// Refuses a pagination cursor that names no command with 400 `UNKNOWN_CURSOR` (the listing
/// itself would answer an empty page, indistinguishable from the end of the list).
///
/// # Errors
/// 400 `UNKNOWN_CURSOR`, or 503 when storage fails.
pub async fn known_cursor<S: CommandAdmin + ?Sized>(
    store: &S,
    after: Option<&CommandId>,
) -> Result<(), AdminApiError> {
    match after {
        Some(id) if store.command_by_id(id).await?.is_none() => Err(AdminApiError::new(
            StatusCode::BAD_REQUEST,
            "UNKNOWN_CURSOR",
            format!(
                "after = {:?} names no command; pass the next_after of the previous page, or omit after to start from the beginning",
                id.as_str()
            ),
        )),
        _ => Ok(()),
    }
}

/// `GET /v1/commands`.
#[utoipa::path(
    get,
    path = "/v1/commands",
    operation_id = "listCommands",
    summary = "List outbox commands, oldest first, keyset-paginated",
    params(CommandsQuery),
    responses(
        (status = 200, description = "A page of commands.", body = CommandPage),
        Refusals,
    ),
    security(("bearer" = []))
)]
pub async fn list_commands(
    State(state): State<AdminState>,
    QueryParams(query): QueryParams<CommandsQuery>,
) -> Result<Json<CommandPage>, AdminApiError> {
    let filter = query.input().page()?;
    known_cursor(&state.store, filter.after.as_ref()).await?;
    let limit = filter.limit;
    let items = state.store.list_commands(&filter).await?;
    let next_after = (items.len() == limit as usize)
        .then(|| items.last().map(|c| c.id.to_string()))
        .flatten();
    Ok(Json(CommandPage {
        items: items.iter().map(CommandView::from).collect(),
        next_after,
    }))
}
