//! Operator routes on commands: read one command with its attempt-error log, retry or abandon
//! one command, the confirmed commands that still match a filter, or every command matching
//! it, and read a command's action log. Every action is recorded with who (`actor`: the
//! authenticated operator's name, [`Caller::actor`]), when and why (`reason`); a command that is not `pending` or `failed` is refused with 409
//! `COMMAND_NOT_ACTIONABLE` and left unchanged.

use crate::CommandFilterInput;
use axum::extract::State;
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tenantry_engine::lifecycle::OperatorActions;
use tenantry_kernel::CommandId;
use tenantry_lifecycle::CommandStatus;
use tenantry_ports::lifecycle::{
    AttemptError, CommandAdmin, OperatorActionError, OperatorActionKind,
};

use super::AdminState;
use super::error::{AdminApiError, BodyRefusals, Conflict, NotFound, Refusals, RoleRefusals};
use super::extract::{JsonBody, PathParams, parse_id};
use super::lifecycle::CommandView;
use crate::identity::Caller;
use crate::ports::Store;

/// Body of `POST /v1/commands/{command_id}/retry` and `.../abandon`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = OperatorAction)]
#[serde(deny_unknown_fields)]
pub struct ActBody {
    /// Who acts. With operator tokens configured the authenticated operator's name is recorded:
    /// omit it, or send that name (another name is 403 ACTOR_MISMATCH). Required (1..=255
    /// characters, e.g. `oncall:alice`) only when no operator token is configured.
    pub actor: Option<String>,
    /// Why (1..=1024 characters).
    pub reason: String,
}

/// Body of `POST /v1/commands/retry` and `/v1/commands/abandon`: the filter (status `failed`
/// or `pending` required), who / why, and optionally the confirmed `command_ids`.
///
/// With `command_ids` (the form to use after showing an operator what will be touched), only
/// those commands are acted on, each only if it still matches the filter; without it, every
/// command matching the filter when the request arrives (the original, filter-only form).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[schema(as = BulkOperatorAction)]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    /// Who acts: as in `OperatorAction` (the authenticated operator's name is recorded).
    pub actor: Option<String>,
    /// Why.
    pub reason: String,
    /// `failed` or `pending` (required).
    #[schema(value_type = Option<CommandStatus>)]
    pub status: Option<String>,
    /// `provision`, `delete` or `revoke`.
    pub operation: Option<String>,
    /// Only this tenant.
    pub tenant_id: Option<String>,
    /// Only this control space (requires `tenant_id`).
    pub control_space_id: Option<String>,
    /// Only commands whose last error code is exactly this.
    pub error_code: Option<String>,
    /// The confirmed commands (1 to 10,000 ids; duplicates count once), e.g. the ids of the
    /// first page of `GET /v1/commands` with the same filter. Only these are acted on: one
    /// that started matching later is not touched, one that no longer matches the filter (or
    /// no longer exists) is left unchanged and listed in `skipped`. Without it every command
    /// matching the filter is acted on.
    #[schema(value_type = Option<Vec<CommandId>>)]
    pub command_ids: Option<Vec<String>>,
}

/// A command that matched a bulk action but was refused.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Refused)]
pub struct RefusedView {
    command_id: String,
    code: &'static str,
    message: String,
}

/// Answer of a bulk action.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = BulkOutcome)]
pub struct BulkView {
    acted: Vec<CommandView>,
    refused: Vec<RefusedView>,
    /// Confirmed commands (`command_ids`) left unchanged because they no longer match the
    /// filter or no longer exist, each with code `COMMAND_NO_LONGER_MATCHES`; always empty
    /// for a filter-only request.
    skipped: Vec<RefusedView>,
    /// True when the 10,000-command bound stopped the action; run it again for the rest.
    truncated: bool,
}

/// One recorded action.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = ActionRecord)]
pub struct ActionView {
    id: String,
    /// `retry`, `abandon` or `mark_deleted`.
    action: &'static str,
    actor: String,
    reason: String,
    at: DateTime<Utc>,
    previous_status: CommandStatus,
    previous_error_code: Option<String>,
    attempt_count: i32,
}

/// The action log of a command.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ActionList {
    items: Vec<ActionView>,
}

/// Most entries of the attempt-error log a command's detail shows (the newest); the total says
/// how many more there are.
pub const DETAIL_ERRORS: u32 = 50;

/// One entry of a command's attempt-error log: an attempt that ended in an error, or an
/// operator's abandon.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = AttemptError)]
pub struct AttemptErrorView {
    /// The command's attempt count when recorded (1 for the first attempt).
    attempt: i32,
    /// `retry` (the command was scheduled again), `failed` (dead-lettered) or `abandoned` (by
    /// an operator; `actor` says who).
    outcome: &'static str,
    code: String,
    message: String,
    /// When it was recorded (the database clock).
    at: DateTime<Utc>,
    /// The worker that settled the attempt (none for an abandon).
    lease_owner: Option<String>,
    /// The operator who abandoned the command (none for a settled attempt).
    actor: Option<String>,
}

impl From<AttemptError> for AttemptErrorView {
    fn from(e: AttemptError) -> Self {
        Self {
            attempt: e.attempt,
            outcome: e.end.as_str(),
            code: e.code.to_string(),
            message: e.message,
            at: e.recorded_at,
            lease_owner: e.lease_owner,
            actor: e.actor,
        }
    }
}

/// A command with the errors of its attempts.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = CommandDetail)]
pub struct CommandDetail {
    #[serde(flatten)]
    command: CommandView,
    /// The newest entries of the attempt-error log (at most 50), newest first.
    errors: Vec<AttemptErrorView>,
    /// How many entries the log has in all (more than `errors` holds when it was bounded).
    errors_total: u64,
}

fn operator(state: &AdminState) -> OperatorActions<Store> {
    OperatorActions::new(state.store.clone(), state.clock.clone())
}

fn command_id(value: &str) -> Result<CommandId, AdminApiError> {
    parse_id("command_id", value, CommandId::parse)
}

async fn act_one(
    state: &AdminState,
    caller: &Caller,
    id: &str,
    kind: OperatorActionKind,
    body: ActBody,
) -> Result<Json<CommandView>, AdminApiError> {
    let id = command_id(id)?;
    let actor = caller.actor(body.actor.as_deref(), None)?;
    let after = operator(state).act(&id, kind, &actor, &body.reason).await?;
    tracing::info!(
        command_id = %id,
        action = kind.as_str(),
        actor = ?actor,
        reason = ?body.reason.trim(),
        "operator action on a command"
    );
    Ok(Json(CommandView::from(&after)))
}

/// `POST /v1/commands/{command_id}/retry`.
#[utoipa::path(
    post,
    path = "/v1/commands/{command_id}/retry",
    operation_id = "retryCommand",
    summary = "Retry a failed or pending command now with a fresh attempt budget (attempt_count is kept); recorded with actor and reason",
    params(("command_id" = CommandId, Path)),
    request_body = ActBody,
    responses(
        (status = 200, description = "The command after the retry (status pending).", body = CommandView),
        Refusals,
        RoleRefusals,
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        BodyRefusals,
    ),
    security(("bearer" = []))
)]
pub async fn retry_command(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<ActBody>,
) -> Result<Json<CommandView>, AdminApiError> {
    act_one(&state, &caller, &id, OperatorActionKind::Retry, body).await
}

/// `POST /v1/commands/{command_id}/abandon`.
#[utoipa::path(
    post,
    path = "/v1/commands/{command_id}/abandon",
    operation_id = "abandonCommand",
    summary = "Abandon a failed or pending command for good; recorded with actor and reason",
    params(("command_id" = CommandId, Path)),
    request_body = ActBody,
    responses(
        (status = 200, description = "The command after the action (status abandoned).", body = CommandView),
        Refusals,
        RoleRefusals,
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        BodyRefusals,
    ),
    security(("bearer" = []))
)]
pub async fn abandon_command(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<ActBody>,
) -> Result<Json<CommandView>, AdminApiError> {
    act_one(&state, &caller, &id, OperatorActionKind::Abandon, body).await
}

/// `POST /v1/commands/{command_id}/mark-deleted`.
#[utoipa::path(
    post,
    path = "/v1/commands/{command_id}/mark-deleted",
    operation_id = "markControlSpaceDeleted",
    summary = "Give up a failed or pending delete that owns its deleting control space, and record the control space deleted; recorded with actor and reason",
    description = "The way out of a deletion that cannot complete (abandoning it alone is refused with 409 DELETE_OWNS_CONTROL_SPACE, since the control space would stay deleting for good). In one transaction the command becomes abandoned and its control space deleted. KnowledgeFS is not called: a remote space the deletion did not remove (the control space's knowledge_space_id, or a space under its provisioning key) stays there; remove it in KnowledgeFS yourself. 409 NOT_AN_OWNING_DELETE for any other command.",
    params(("command_id" = CommandId, Path)),
    request_body = ActBody,
    responses(
        (status = 200, description = "The command after the action (status abandoned); its control space is deleted.", body = CommandView),
        Refusals,
        RoleRefusals,
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        BodyRefusals,
    ),
    security(("bearer" = []))
)]
pub async fn mark_deleted(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    PathParams(id): PathParams<String>,
    JsonBody(body): JsonBody<ActBody>,
) -> Result<Json<CommandView>, AdminApiError> {
    act_one(&state, &caller, &id, OperatorActionKind::MarkDeleted, body).await
}

/// The code of a confirmed command that a bulk action skipped.
pub const NO_LONGER_MATCHES: &str = "COMMAND_NO_LONGER_MATCHES";

async fn act_bulk(
    state: &AdminState,
    caller: &Caller,
    kind: OperatorActionKind,
    body: BulkBody,
) -> Result<Json<BulkView>, AdminApiError> {
    let actor = caller.actor(body.actor.as_deref(), None)?;
    let filter = CommandFilterInput {
        status: body.status.clone(),
        operation: body.operation.clone(),
        tenant_id: body.tenant_id.clone(),
        control_space_id: body.control_space_id.clone(),
        error_code: body.error_code.clone(),
        ..CommandFilterInput::default()
    }
    .selection()?;
    let report = match &body.command_ids {
        Some(ids) => {
            let ids = ids
                .iter()
                .map(|id| parse_id("command_ids", id, CommandId::parse))
                .collect::<Result<Vec<_>, _>>()?;
            operator(state)
                .act_on_confirmed(&filter, &ids, kind, &actor, &body.reason)
                .await?
        }
        None => {
            operator(state)
                .act_on_matching(&filter, kind, &actor, &body.reason)
                .await?
        }
    };
    tracing::info!(
        action = kind.as_str(),
        actor = ?actor,
        reason = ?body.reason.trim(),
        confirmed = body.command_ids.is_some(),
        acted = report.acted.len(),
        refused = report.refused.len(),
        skipped = report.skipped.len(),
        "operator bulk action on commands"
    );
    Ok(Json(BulkView {
        acted: report.acted.iter().map(CommandView::from).collect(),
        refused: report
            .refused
            .into_iter()
            .map(|(id, why)| {
                let error = AdminApiError::from(why);
                RefusedView {
                    command_id: id.to_string(),
                    code: error.code,
                    message: error.message,
                }
            })
            .collect(),
        skipped: report
            .skipped
            .into_iter()
            .map(|id| RefusedView {
                message: format!(
                    "command {id} no longer matches the filter (or no longer exists); left unchanged"
                ),
                command_id: id.into_string(),
                code: NO_LONGER_MATCHES,
            })
            .collect(),
        truncated: report.truncated,
    }))
}

/// `POST /v1/commands/retry`.
#[utoipa::path(
    post,
    path = "/v1/commands/retry",
    operation_id = "retryMatchingCommands",
    summary = "Retry the confirmed commands (command_ids) that still match the filter, or without command_ids every command matching it (status failed or pending required), at most 10,000",
    request_body = BulkBody,
    responses(
        (status = 200, description = "What was acted on, what was refused and which confirmed commands were skipped (each with code and message).", body = BulkView),
        Refusals,
        RoleRefusals,
        BodyRefusals,
    ),
    security(("bearer" = []))
)]
pub async fn retry_matching(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    JsonBody(body): JsonBody<BulkBody>,
) -> Result<Json<BulkView>, AdminApiError> {
    act_bulk(&state, &caller, OperatorActionKind::Retry, body).await
}

/// `POST /v1/commands/abandon`.
#[utoipa::path(
    post,
    path = "/v1/commands/abandon",
    operation_id = "abandonMatchingCommands",
    summary = "Abandon the confirmed commands (command_ids) that still match the filter, or without command_ids every command matching it (status failed or pending required), at most 10,000",
    request_body = BulkBody,
    responses(
        (status = 200, description = "What was acted on, what was refused and which confirmed commands were skipped (each with code and message).", body = BulkView),
        Refusals,
        RoleRefusals,
        BodyRefusals,
    ),
    security(("bearer" = []))
)]
pub async fn abandon_matching(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    JsonBody(body): JsonBody<BulkBody>,
) -> Result<Json<BulkView>, AdminApiError> {
    act_bulk(&state, &caller, OperatorActionKind::Abandon, body).await
}

/// `GET /v1/commands/{command_id}`: one command with its attempt-error log.
#[utoipa::path(
    get,
    path = "/v1/commands/{command_id}",
    operation_id = "getCommand",
    summary = "One command, with the errors of its failed attempts (newest first, at most 50) and their times",
    params(("command_id" = CommandId, Path)),
    responses(
        (status = 200, description = "The command and its attempt-error log.", body = CommandDetail),
        Refusals,
        (status = 404, response = NotFound),
    ),
    security(("bearer" = []))
)]
pub async fn get_command(
    State(state): State<AdminState>,
    PathParams(id): PathParams<String>,
) -> Result<Json<CommandDetail>, AdminApiError> {
    let id = command_id(&id)?;
    let Some(command) = state.store.command_by_id(&id).await? else {
        return Err(OperatorActionError::UnknownCommand { command_id: id }.into());
    };
    let history = state.store.command_errors(&id, DETAIL_ERRORS).await?;
    Ok(Json(CommandDetail {
        command: CommandView::from(&command),
        errors: history.entries.into_iter().map(Into::into).collect(),
        errors_total: history.total,
    }))
}

/// `GET /v1/commands/{command_id}/actions`: the command's action log, oldest first.
#[utoipa::path(
    get,
    path = "/v1/commands/{command_id}/actions",
    operation_id = "listCommandActions",
    summary = "The operator actions recorded on a command, oldest first",
    params(("command_id" = CommandId, Path)),
    responses(
        (status = 200, description = "The action log.", body = ActionList),
        Refusals,
        (status = 404, response = NotFound),
    ),
    security(("bearer" = []))
)]
pub async fn list_actions(
    State(state): State<AdminState>,
    PathParams(id): PathParams<String>,
) -> Result<Json<ActionList>, AdminApiError> {
    let id = command_id(&id)?;
    if state.store.command_by_id(&id).await?.is_none() {
        return Err(OperatorActionError::UnknownCommand { command_id: id }.into());
    }
    let items = state
        .store
        .command_actions(&id)
        .await?
        .into_iter()
        .map(|r| ActionView {
            id: r.action.action_id,
            action: r.action.kind.as_str(),
            actor: r.action.actor,
            reason: r.action.reason,
            at: r.action.at,
            previous_status: r.previous_status,
            previous_error_code: r.previous_error_code.map(String::from),
            attempt_count: r.attempt_count,
        })
        .collect();
    Ok(Json(ActionList { items }))
}
