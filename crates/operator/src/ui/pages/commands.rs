//! Commands: the filtered table (status, operation, tenant, control space, error code) with
//! keyset paging both ways, a command's detail (payload, attempts, last error, the errors of
//! its attempts with their times, lease, control-space state, the action log), retry /
//! abandon of one command, and the bulk action on the commands a confirmation named: the
//! confirmation lists the oldest matching commands (at most [`BULK_CONFIRM_MAX`]) and carries
//! their ids, and the action touches only those, each only if it still matches the filter.
//!
//! Filters are parsed by the operator façade's [`CommandFilterInput`] (the admin API's and the
//! CLI's parser: same rules, same messages); actions go through the engine's `OperatorActions`, as the admin
//! API's do, with actor `console` and the operator's reason, and are recorded in the action log.

use crate::CommandFilterInput;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use tenantry_engine::lifecycle::OperatorActions;
use tenantry_kernel::CommandId;
use tenantry_lifecycle::{CommandRecord, CommandStatus};
use tenantry_ports::lifecycle::{
    CommandAdmin, CommandFilter, CommandQueue, ControlSpaceReader, ErrorHistory, OperatorActionKind,
};

use super::super::UiState;
use super::super::auth::{Session, csrf_ok, csrf_refused};
use super::super::extract::{Form, Query};
use super::super::layout::{self, encode};
use super::{error_page, read_only_refused};
use crate::admin::{AdminApiError, DETAIL_ERRORS, known_cursor};

/// Rows per page of the table.
pub const PAGE: u32 = 50;

/// The actor recorded for actions taken in an open console (no operator configured); with
/// operators, the signed-in operator's name ([`Session::actor`]).
pub const ACTOR: &str = crate::identity::OPEN_CONSOLE_ACTOR;

/// The table's filter, as the filter form sends it (empty fields mean "any").
#[derive(Debug, Clone, Default, Deserialize)]
pub struct FilterQuery {
    /// Status.
    #[serde(default)]
    pub status: String,
    /// Operation.
    #[serde(default)]
    pub operation: String,
    /// Tenant.
    #[serde(default)]
    pub tenant_id: String,
    /// Control space (needs the tenant).
    #[serde(default)]
    pub control_space_id: String,
    /// Last error code.
    #[serde(default)]
    pub error_code: String,
    /// Keyset cursor: the last id of the previous page.
    #[serde(default)]
    pub after: String,
    /// Keyset cursor backwards: the first id of the next page (ignored with `after`).
    #[serde(default)]
    pub before: String,
}

fn some(value: &str) -> Option<String> {
    let value = value.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

impl FilterQuery {
    /// The operator's filter input of the form (blank fields are "any").
    fn input(&self) -> CommandFilterInput {
        CommandFilterInput {
            status: some(&self.status),
            operation: some(&self.operation),
            tenant_id: some(&self.tenant_id),
            control_space_id: some(&self.control_space_id),
            error_code: some(&self.error_code),
            limit: None,
            after: some(&self.after),
            before: some(&self.before),
        }
    }

    /// The store's filter of one page of `limit` rows (the admin API's parsing rules).
    fn filter(&self, limit: u32) -> Result<CommandFilter, AdminApiError> {
        Ok(CommandFilterInput {
            limit: Some(limit),
            ..self.input()
        }
        .page()?)
    }

    /// The query string of this filter (without the cursor).
    fn query_string(&self) -> String {
        let pairs = [
            ("status", &self.status),
            ("operation", &self.operation),
            ("tenant_id", &self.tenant_id),
            ("control_space_id", &self.control_space_id),
            ("error_code", &self.error_code),
        ];
        pairs
            .iter()
            .filter(|(_, v)| !v.trim().is_empty())
            .map(|(k, v)| format!("{k}={}", encode(v.trim())))
            .collect::<Vec<_>>()
            .join("&")
    }
}

fn filter_form(query: &FilterQuery) -> Markup {
    let statuses = [
        "pending",
        "processing",
        "failed",
        "succeeded",
        "superseded",
        "abandoned",
    ];
    html! {
        form.filters #filters method="get" action="/ui/commands" {
            label { "status"
                select name="status" {
                    option value="" { "any" }
                    @for s in statuses { option value=(s) selected[query.status == s] { (s) } }
                }
            }
            label { "operation"
                select name="operation" {
                    option value="" { "any" }
                    @for o in ["provision", "delete", "revoke"] { option value=(o) selected[query.operation == o] { (o) } }
                }
            }
            label { "tenant" input name="tenant_id" value=(query.tenant_id); }
            label { "control space" input name="control_space_id" value=(query.control_space_id); }
            label { "error code" input name="error_code" value=(query.error_code); }
            button #apply-filter type="submit" { "Filter" }
            a href="/ui/commands" { "Clear" }
        }
    }
}

/// `GET /ui/commands`.
pub async fn list(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Query(query): Query<FilterQuery>,
) -> Response {
    let live = match table(&state, &query).await {
        Ok(live) => live,
        Err(e) => return error_page(&e),
    };
    if layout::is_htmx(&headers) {
        return live.into_response();
    }
    let mut live_url = format!("/ui/commands?{}", query.query_string());
    if let Some(after) = some(&query.after) {
        live_url.push_str(&format!("&after={}", encode(&after)));
    } else if let Some(before) = some(&query.before) {
        live_url.push_str(&format!("&before={}", encode(&before)));
    }
    let before = html! {
        (filter_form(&query))
        @if !session.read_only {
            @if let Ok(CommandFilter { status: Some(status), .. }) = query.filter(1) {
                @if status.accepts_operator_action() {
                    p {
                        a #bulk-retry href={"/ui/commands/bulk?action=retry&" (query.query_string())} { "Retry the matching…" }
                        " · "
                        a #bulk-abandon href={"/ui/commands/bulk?action=abandon&" (query.query_string())} { "Abandon the matching…" }
                    }
                }
            } @else {
                p.muted { "Filter by status failed or pending to act on the matching commands." }
            }
        }
    };
    layout::page(
        "Commands",
        "/ui/commands",
        &session,
        before,
        Some(&live_url),
        live,
    )
    .into_response()
}

/// The page of rows a query asks for, and the cursors of the pages before and after it (none
/// at either end). One more row than a page is read to know whether the end is reached.
async fn page_of(
    state: &UiState,
    filter: &CommandFilter,
) -> Result<(Vec<CommandRecord>, Option<String>, Option<String>), AdminApiError> {
    let mut rows = state
        .admin
        .store
        .list_commands(&CommandFilter {
            limit: PAGE + 1,
            ..filter.clone()
        })
        .await?;
    let full = rows.len() > PAGE as usize;
    let (prev, next) = if filter.after.is_none() && filter.before.is_some() {
        // Backwards: the extra row is the first; more before it when it came.
        if full {
            rows.remove(0);
        }
        (full, !rows.is_empty())
    } else {
        rows.truncate(PAGE as usize);
        (filter.after.is_some(), full)
    };
    let prev = prev
        .then(|| rows.first().map(|r| r.id.to_string()))
        .flatten();
    let next = next
        .then(|| rows.last().map(|r| r.id.to_string()))
        .flatten();
    Ok((rows, prev, next))
}

async fn table(state: &UiState, query: &FilterQuery) -> Result<Markup, AdminApiError> {
    let filter = query.filter(PAGE)?;
    known_cursor(&state.admin.store, filter.after.as_ref()).await?;
    if let Some(before) = &filter.before
        && state.admin.store.command_by_id(before).await?.is_none()
    {
        return Err(AdminApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "UNKNOWN_CURSOR",
            format!(
                "before = {:?} names no command; go back to the first page",
                before.as_str()
            ),
        ));
    }
    let matching = state.admin.store.count_matching(&filter).await?;
    let (rows, prev, next) = page_of(state, &filter).await?;
    let pager = html! {
        @if prev.is_some() || next.is_some() {
            p.pager {
                @if let Some(prev) = &prev {
                    a #prev-page href={"/ui/commands?" (query.query_string()) "&before=" (encode(prev))} { "← Previous page" }
                }
                @if let Some(next) = &next {
                    a #next-page href={"/ui/commands?" (query.query_string()) "&after=" (encode(next))} { "Next page →" }
                }
            }
        }
    };
    Ok(html! {
        p #matching { (matching) " commands match." }
        table #commands {
            tr {
                th { "command" } th { "operation" } th { "tenant" } th { "control space" }
                th { "status" } th { "attempts" } th { "last error" } th { "created" } th { "next attempt" }
            }
            @for r in &rows {
                tr.command data-status=(r.status.as_str()) {
                    td { a href={"/ui/commands/" (encode(r.id.as_str()))} { (r.id.as_str()) } }
                    td { (r.operation.as_str()) }
                    td { (r.tenant_id.as_str()) }
                    td { (r.control_space_id.as_str()) }
                    td.status { (r.status.as_str()) }
                    td { (r.attempt_count) }
                    td { (layout::shown_code(r.last_error_code.as_ref().map_or("", |c| c.as_str()))) }
                    td { (layout::time(&r.created_at)) }
                    td { (layout::time(&r.next_attempt_at)) }
                }
            }
        }
        (pager)
    })
}

fn parse_command_id(value: &str) -> Result<CommandId, AdminApiError> {
    CommandId::parse(value).map_err(|e| AdminApiError::invalid("command_id", e))
}

/// `GET /ui/commands/{command_id}`.
pub async fn detail(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let id = match parse_command_id(&id) {
        Ok(id) => id,
        Err(e) => return error_page(&e),
    };
    let (live, status) = match detail_live(&state, &id).await {
        Ok(Some(read)) => read,
        Ok(None) => {
            return error_page(&AdminApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "COMMAND_NOT_FOUND",
                format!("command {id} does not exist"),
            ));
        }
        Err(e) => return error_page(&e),
    };
    if layout::is_htmx(&headers) {
        return live.into_response();
    }
    let path = format!("/ui/commands/{}", encode(id.as_str()));
    let before = html! {
        @if !status.accepts_operator_action() {
            p.muted #not-actionable { "This command is " (status.as_str()) ": only pending or failed commands can be retried or abandoned." }
        } @else if !session.read_only {
            div #actions {
                @for (kind, label, class) in [("retry", "Retry now", "primary"), ("abandon", "Abandon", "danger")] {
                    form.inline method="post" action={(path) "/" (kind)} {
                        input type="hidden" name="csrf" value=(session.csrf.as_ref());
                        input #{(kind) "-reason"} name="reason" placeholder="reason (required)" required;
                        button #{(kind) "-button"} class=(class) type="submit" { (label) }
                    }
                    " "
                }
                p.muted { "Only pending or failed commands can be retried or abandoned; each action is recorded with its reason." }
            }
        }
    };
    layout::page(
        &format!("Command {id}"),
        "/ui/commands",
        &session,
        before,
        Some(&path),
        live,
    )
    .into_response()
}

/// The live part of the detail page, and the command's status when it was read.
async fn detail_live(
    state: &UiState,
    id: &CommandId,
) -> Result<Option<(Markup, CommandStatus)>, AdminApiError> {
    let Some(r) = state.admin.store.command_by_id(id).await? else {
        return Ok(None);
    };
    let space = state
        .admin
        .store
        .control_space(&r.tenant_id, &r.control_space_id)
        .await?;
    let actions = state.admin.store.command_actions(id).await?;
    let errors = state.admin.store.command_errors(id, DETAIL_ERRORS).await?;
    let payload = serde_json::to_string_pretty(&r.payload).unwrap_or_default();
    // A command that went on after a failed attempt keeps that attempt's error: say so.
    let error_label = if r.status.accepts_operator_action() {
        "last error"
    } else {
        "error of an earlier attempt"
    };
    let markup = html! {
        table #detail {
            tr { th { "status" } td #status { (r.status.as_str()) } }
            tr { th { "operation" } td { (r.operation.as_str()) " (" (r.operation_id.as_str()) ")" } }
            tr { th { "tenant / control space" } td { (r.tenant_id.as_str()) " / " (r.control_space_id.as_str()) } }
            tr { th { "control-space state" } td { (space.as_ref().map_or_else(|| "missing".to_owned(), |s| format!("{:?} (version {})", s.state, s.resource_version))) } }
            tr { th { "attempts" } td { (r.attempt_count) " (budget counted from " (r.attempt_budget_base) ")" } }
            tr { th { (error_label) } td { (layout::shown_code(r.last_error_code.as_ref().map_or("", |c| c.as_str()))) " " span.muted { (layout::shown(r.last_error_message.as_deref().unwrap_or(""))) } } }
            tr { th { "lease" } td { (r.lease_owner.as_ref().map_or("—", |o| o.as_str())) " until " (layout::time_opt(r.lease_expires_at.as_ref())) " (epoch " (r.lease_epoch.0) ")" } }
            tr { th { "created" } td { (layout::time(&r.created_at)) } }
            tr { th { "next attempt" } td { (layout::time(&r.next_attempt_at)) } }
            tr { th { "completed" } td { (layout::time_opt(r.completed_at.as_ref())) } }
            tr { th { "idempotency key" } td { (r.idempotency_key.as_str()) } }
            @if let Some(left) = tenantry_lifecycle::operator::abandoned_provision_left_behind(&r, None) {
                tr #left-behind {
                    th { "left behind" }
                    td {
                        "The provision was abandoned after a request that may have reached KnowledgeFS: a knowledge space may exist under provisioning key "
                        code { (left.provisioning_key.as_str()) }
                        ". Unless the control space was deleted since, delete it ("
                        code { "DELETE /v1/tenants/" (r.tenant_id.as_str()) "/control-spaces/" (r.control_space_id.as_str()) }
                        "): the deletion looks the space up and removes it."
                    }
                }
            }
        }
        h2 { "Errors of attempts" }
        (errors_table(&errors))
        h2 { "Payload" }
        pre { (payload) }
        h2 { "Operator actions" }
        @if actions.is_empty() { p.muted { "None." } }
        @else {
            table #actions-log {
                tr { th { "when" } th { "action" } th { "actor" } th { "reason" } th { "status before" } th { "error before" } }
                @for a in &actions {
                    tr {
                        td { (layout::time(&a.action.at)) }
                        td { (a.action.kind.as_str()) }
                        td { (a.action.actor) }
                        td { (layout::shown(&a.action.reason)) }
                        td { (a.previous_status.as_str()) }
                        td { (layout::shown_code(a.previous_error_code.as_ref().map_or("", |c| c.as_str()))) }
                    }
                }
            }
        }
    };
    Ok(Some((markup, r.status)))
}

/// The attempt-error log of a command: one row per attempt that ended in an error (or an
/// operator's abandon), newest first, with its time; says how many earlier ones are left out.
fn errors_table(history: &ErrorHistory) -> Markup {
    let hidden = history.total.saturating_sub(history.entries.len() as u64);
    html! {
        @if history.entries.is_empty() {
            p.muted #no-errors { "No attempt ended in an error." }
        } @else {
            table #errors-log {
                tr { th { "when" } th { "attempt" } th { "outcome" } th { "code" } th { "message" } th { "by" } }
                @for e in &history.entries {
                    tr.attempt-error data-outcome=(e.end.as_str()) {
                        td { (layout::time(&e.recorded_at)) }
                        td { (e.attempt) }
                        td { (e.end.as_str()) }
                        td { (layout::shown_code(e.code.as_str())) }
                        td { (layout::shown(&e.message)) }
                        td { (e.actor.as_deref().or(e.lease_owner.as_deref()).unwrap_or("—")) }
                    }
                }
            }
            @if hidden > 0 {
                p.muted #errors-hidden { (hidden) " earlier errors not shown." }
            }
        }
    }
}

/// The fields of an action on one command.
#[derive(Debug, Deserialize)]
pub struct ActForm {
    /// The session's CSRF token.
    #[serde(default)]
    pub csrf: String,
    /// Why (required).
    #[serde(default)]
    pub reason: String,
}

async fn act_one(
    state: &UiState,
    session: &Session,
    id: &str,
    kind: OperatorActionKind,
    form: &ActForm,
) -> Response {
    if !csrf_ok(session, &form.csrf) {
        return csrf_refused();
    }
    if session.read_only {
        return read_only_refused();
    }
    let id = match parse_command_id(id) {
        Ok(id) => id,
        Err(e) => return error_page(&e),
    };
    let actions = OperatorActions::new(state.admin.store.clone(), state.admin.clock.clone());
    match actions.act(&id, kind, session.actor(), &form.reason).await {
        Ok(_) => {
            tracing::info!(command_id = %id, action = kind.as_str(), actor = session.actor(), reason = ?form.reason.trim(), "operator action on a command (console)");
            Redirect::to(&format!("/ui/commands/{}", encode(id.as_str()))).into_response()
        }
        Err(e) => error_page(&AdminApiError::from(e)),
    }
}

/// `POST /ui/commands/{command_id}/retry`.
pub async fn retry(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActForm>,
) -> Response {
    act_one(&state, &session, &id, OperatorActionKind::Retry, &form).await
}

/// `POST /ui/commands/{command_id}/abandon`.
pub async fn abandon(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    Path(id): Path<String>,
    Form(form): Form<ActForm>,
) -> Response {
    act_one(&state, &session, &id, OperatorActionKind::Abandon, &form).await
}

/// Most commands one console confirmation names (the oldest matching ones); the rest of a
/// larger match is acted on by confirming again.
pub const BULK_CONFIRM_MAX: u32 = 1000;

/// The query of the bulk confirmation and the fields of the bulk action.
#[derive(Debug, Deserialize)]
pub struct BulkForm {
    /// `retry` or `abandon`.
    #[serde(default)]
    pub action: String,
    /// The filter.
    #[serde(flatten)]
    pub filter: FilterQuery,
    /// The session's CSRF token (the action only).
    #[serde(default)]
    pub csrf: String,
    /// Why (the action only; required).
    #[serde(default)]
    pub reason: String,
    /// The confirmation only: how many of the oldest matching commands to name (1 to
    /// [`BULK_CONFIRM_MAX`], the default).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The action only (required): the ids the confirmation named, separated by spaces (ids
    /// contain none). Only these are acted on, each only if it still matches the filter.
    #[serde(default)]
    pub command_ids: String,
}

fn bulk_kind(action: &str) -> Result<OperatorActionKind, AdminApiError> {
    OperatorActionKind::parse(action)
        .ok_or_else(|| AdminApiError::invalid("action", "must be retry or abandon"))
}

fn bulk_filter(filter: &FilterQuery) -> Result<CommandFilter, AdminApiError> {
    let parsed = filter.input().selection()?;
    if !parsed
        .status
        .is_some_and(CommandStatus::accepts_operator_action)
    {
        return Err(AdminApiError::invalid(
            "status",
            "a bulk action needs the filter status failed or pending",
        ));
    }
    Ok(parsed)
}

/// `GET /ui/commands/bulk`: the confirmation, naming the oldest matching commands (at most
/// `limit`, by default [`BULK_CONFIRM_MAX`]) and how many match in all.
pub async fn confirm_bulk(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    Query(form): Query<BulkForm>,
) -> Response {
    if session.read_only {
        return read_only_refused();
    }
    let (kind, filter) =
        match bulk_kind(&form.action).and_then(|k| Ok((k, bulk_filter(&form.filter)?))) {
            Ok(parsed) => parsed,
            Err(e) => return error_page(&e),
        };
    let limit = match form.limit {
        None => BULK_CONFIRM_MAX,
        Some(n @ 1..=BULK_CONFIRM_MAX) => n,
        Some(n) => {
            return error_page(&AdminApiError::invalid(
                "limit",
                format!("{n}; name 1 to {BULK_CONFIRM_MAX} commands per confirmation"),
            ));
        }
    };
    confirmation(&state, &session, &form, kind, &filter, limit).await
}

/// The bulk confirmation page: how many commands match, and the ids of the oldest `limit` of
/// them, listed and carried in the form.
async fn confirmation(
    state: &UiState,
    session: &Session,
    form: &BulkForm,
    kind: OperatorActionKind,
    filter: &CommandFilter,
    limit: u32,
) -> Response {
    let read = async {
        let matching = state.admin.store.count_matching(filter).await?;
        let rows = state
            .admin
            .store
            .list_commands(&CommandFilter {
                limit,
                ..filter.clone()
            })
            .await?;
        Ok::<_, tenantry_ports::lifecycle::StoreError>((matching, rows))
    };
    let (matching, rows) = match read.await {
        Ok(read) => read,
        Err(e) => return error_page(&AdminApiError::from(e)),
    };
    let verb = kind.as_str();
    let named = rows.len();
    let ids = rows
        .iter()
        .map(|r| r.id.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let body = html! {
        p #confirm-count {
            "This will " strong { (verb) } " "
            @if (named as u64) < matching { "the " strong #bulk-count { (named) } " oldest of " (matching) }
            @else { strong #bulk-count { (named) } }
            " commands matching " code { (form.filter.query_string()) } ", listed below."
        }
        p.muted { "Only the commands listed are touched: one that starts matching after this page was shown is left alone, and one that no longer matches when you confirm (retried, settled or changed meanwhile) is skipped and listed afterwards. Confirm again for the commands beyond this list." }
        @if named > 0 {
            form.inline #bulk-limit method="get" action="/ui/commands/bulk" {
                input type="hidden" name="action" value=(verb);
                @for (name, value) in filter_fields(&form.filter) {
                    input type="hidden" name=(name) value=(value);
                }
                label { "Name only the oldest " input name="limit" type="number" min="1" max=(BULK_CONFIRM_MAX) value=(named) size="5"; }
                " " button type="submit" { "Update the list" }
            }
        }
        form method="post" action="/ui/commands/bulk" {
            input type="hidden" name="csrf" value=(session.csrf.as_ref());
            input type="hidden" name="action" value=(verb);
            input type="hidden" name="command_ids" value=(ids);
            @for (name, value) in filter_fields(&form.filter) {
                input type="hidden" name=(name) value=(value);
            }
            @if named == 0 {
                p.muted #bulk-nothing { "No command matches: there is nothing to " (verb) "." }
            } @else {
                p {
                    input #bulk-reason name="reason" placeholder="reason (required)" required;
                    " "
                    button #bulk-confirm.danger type="submit" { "Yes, " (verb) " these " (named) " commands" }
                }
            }
            p { a href={"/ui/commands?" (form.filter.query_string())} { "Cancel" } }
        }
        @if named > 0 {
            table #bulk-ids {
                tr { th { "command" } th { "operation" } th { "tenant" } th { "control space" } th { "status" } th { "last error" } th { "created" } }
                @for r in &rows {
                    tr.bulk-id data-id=(r.id.as_str()) {
                        td { (r.id.as_str()) }
                        td { (r.operation.as_str()) }
                        td { (r.tenant_id.as_str()) }
                        td { (r.control_space_id.as_str()) }
                        td { (r.status.as_str()) }
                        td { (r.last_error_code.as_ref().map_or("", |c| c.as_str())) }
                        td { (layout::time(&r.created_at)) }
                    }
                }
            }
        }
    };
    layout::page(
        &format!("Confirm: {verb} matching commands"),
        "/ui/commands",
        session,
        body,
        None,
        html! {},
    )
    .into_response()
}

/// The filter's fields as the forms carry them.
fn filter_fields(filter: &FilterQuery) -> [(&'static str, &String); 5] {
    [
        ("status", &filter.status),
        ("operation", &filter.operation),
        ("tenant_id", &filter.tenant_id),
        ("control_space_id", &filter.control_space_id),
        ("error_code", &filter.error_code),
    ]
}

/// `POST /ui/commands/bulk`: acts on the commands the confirmation named that still match
/// the filter (the engine's confirmed bulk action: each recorded), and lists what it did,
/// what was refused and what was skipped.
pub async fn bulk(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    Form(form): Form<BulkForm>,
) -> Response {
    if !csrf_ok(&session, &form.csrf) {
        return csrf_refused();
    }
    if session.read_only {
        return read_only_refused();
    }
    let (kind, filter) =
        match bulk_kind(&form.action).and_then(|k| Ok((k, bulk_filter(&form.filter)?))) {
            Ok(parsed) => parsed,
            Err(e) => return error_page(&e),
        };
    let ids = match form
        .command_ids
        .split_whitespace()
        .map(|id| CommandId::parse(id).map_err(|e| AdminApiError::invalid("command_ids", e)))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(ids) if !ids.is_empty() => ids,
        Ok(_) => {
            return error_page(&AdminApiError::invalid(
                "command_ids",
                "a bulk action acts on the commands its confirmation named, and none was named; open the confirmation again",
            ));
        }
        Err(e) => return error_page(&e),
    };
    let actions = OperatorActions::new(state.admin.store.clone(), state.admin.clock.clone());
    let report = match actions
        .act_on_confirmed(&filter, &ids, kind, session.actor(), &form.reason)
        .await
    {
        Ok(report) => report,
        Err(e) => return error_page(&AdminApiError::from(e)),
    };
    tracing::info!(action = kind.as_str(), actor = session.actor(), reason = ?form.reason.trim(), acted = report.acted.len(), refused = report.refused.len(), skipped = report.skipped.len(), "operator bulk action on commands (console)");
    let body = html! {
        p #bulk-result { (kind.as_str()) ": " strong { (report.acted.len()) } " commands acted on, " (report.refused.len()) " refused, " (report.skipped.len()) " skipped." }
        @if !report.refused.is_empty() {
            h2 { "Refused" }
            table #bulk-refused {
                tr { th { "command" } th { "why" } }
                @for (id, why) in &report.refused { tr { td { (id.as_str()) } td { (why.to_string()) } } }
            }
        }
        @if !report.skipped.is_empty() {
            h2 { "Skipped: no longer matching" }
            table #bulk-skipped {
                tr { th { "command" } th { "why" } }
                @for id in &report.skipped {
                    tr { td { a href={"/ui/commands/" (encode(id.as_str()))} { (id.as_str()) } } td { "no longer matches the filter (or no longer exists); left unchanged" } }
                }
            }
        }
        p { a href={"/ui/commands?" (form.filter.query_string())} { "Back to the commands" } }
    };
    layout::page(
        "Bulk action done",
        "/ui/commands",
        &session,
        body,
        None,
        html! {},
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use chrono::{TimeZone, Utc};
    use tenantry_kernel::CommandId;
    use tenantry_lifecycle::ErrorCode;
    use tenantry_ports::lifecycle::{AttemptEnd, AttemptError, ErrorHistory};

    use super::errors_table;

    fn entry(attempt: i32, end: AttemptEnd, code: &str, second: u32) -> AttemptError {
        AttemptError {
            command_id: CommandId::parse("cmd-1").unwrap(),
            attempt,
            end,
            code: ErrorCode::from(code),
            message: format!("message {attempt}"),
            recorded_at: Utc.with_ymd_and_hms(2026, 12, 1, 11, 0, second).unwrap(),
            lease_owner: Some("worker-a".into()),
            actor: None,
        }
    }

    /// Two errors with their times, newest first, and the count of those left out.
    #[test]
    fn detail_lists_each_attempts_error_with_its_time() {
        let history = ErrorHistory {
            entries: vec![
                entry(2, AttemptEnd::Failed, "INVALID_REQUEST", 42),
                entry(1, AttemptEnd::Retry, "KFS_UNAVAILABLE", 7),
            ],
            total: 5,
        };
        let html = errors_table(&history).into_string();
        let newest = html.find("2026-12-01 11:00:42 UTC").unwrap();
        let older = html.find("2026-12-01 11:00:07 UTC").unwrap();
        assert!(newest < older, "newest first: {html}");
        for text in [
            "INVALID_REQUEST",
            "KFS_UNAVAILABLE",
            "message 1",
            "message 2",
            "data-outcome=\"failed\"",
            "data-outcome=\"retry\"",
            "worker-a",
        ] {
            assert!(html.contains(text), "{text}: {html}");
        }
        assert!(html.contains("3 earlier errors not shown."), "{html}");
        let all = ErrorHistory {
            total: 2,
            ..history
        };
        assert!(!errors_table(&all).into_string().contains("not shown"));
        let none = errors_table(&ErrorHistory::default()).into_string();
        assert!(none.contains("No attempt ended in an error."), "{none}");
    }
}
