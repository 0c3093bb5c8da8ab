//! Fences: every record across installation bindings, told apart as a **fence** (a mutation's
//! outcome is unknown: reconcile, then clear) or an **intent** (a write holds the scope and its
//! dispatch may be in flight; it goes away by itself). Clearing asks for the reason first and
//! runs the fence administration of the process's scoped-writes runtime (the admin API's
//! path: same scope lock, same refusal of a young intent), which logs the reason.

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use tenantry_engine::scoped_writes::admin::ClearTarget;
use tenantry_fence::{FenceKey, RecordKind};

use super::super::UiState;
use super::super::auth::{Session, csrf_ok, csrf_refused};
use super::super::extract::{Form, Query};
use super::super::layout::{self, encode};
use super::{error_page, read_only_refused};
use crate::admin::AdminApiError;
use crate::admin::fences::{MAX_REASON_CHARS, binding};

/// `GET /ui/fences`.
pub async fn list(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
) -> Response {
    let live = match table(&state, session.read_only).await {
        Ok(live) => live,
        Err(e) => return error_page(&e),
    };
    if layout::is_htmx(&headers) {
        return live.into_response();
    }
    let before = html! {
        p.muted { "A fence blocks its scope (or, for the installation fence, every scope of the binding) until an operator reconciles the remote and clears it. An intent is a write in flight and needs nothing." }
    };
    layout::page(
        "Fences",
        "/ui/fences",
        &session,
        before,
        Some("/ui/fences"),
        live,
    )
    .into_response()
}

async fn table(state: &UiState, read_only: bool) -> Result<Markup, AdminApiError> {
    let views = state.admin.fences.fence_views(None).await?;
    Ok(html! {
        @if views.is_empty() { p #no-fences.muted { "No fence and no write in flight." } }
        @else {
            table #fences {
                tr {
                    th { "binding" } th { "scope" } th { "kind" } th { "reason" } th { "failure" }
                    th { "owner" } th { "since" } th { "expires" } @if !read_only { th {} }
                }
                @for v in &views {
                    tr.fence data-kind=(match v.kind { RecordKind::Fence => "fence", RecordKind::Intent => "intent" }) {
                        td { (v.binding) }
                        td { @if v.installation { em { "installation (all scopes)" } } @else { (v.scope.as_deref().unwrap_or("?")) } }
                        td { @match v.kind {
                            RecordKind::Fence => span.bad { "fence" },
                            RecordKind::Intent => span.muted { "intent (in flight)" },
                        } @if !v.persisted { " " span.bad { "(this process only)" } } }
                        td { (layout::shown(v.reason.as_deref().unwrap_or(""))) }
                        td { (layout::shown(v.failure_kind.as_deref().unwrap_or(""))) " " span.muted { (layout::shown(v.failure_detail.as_deref().unwrap_or(""))) } }
                        td { (v.owner.as_deref().unwrap_or("")) }
                        td { (layout::time_opt(v.fenced_at.as_ref())) }
                        td { (layout::time_opt(v.expires_at.as_ref())) }
                        @if !read_only {
                            td { a.clear href={"/ui/fences/clear?binding=" (encode(&v.binding)) "&key=" (encode(&v.key))} { "Clear…" } }
                        }
                    }
                }
            }
        }
    })
}

/// The record to clear, and (the action only) the CSRF token and the reason.
#[derive(Debug, Deserialize)]
pub struct ClearForm {
    /// Installation binding.
    pub binding: String,
    /// Fence key as listed.
    pub key: String,
    /// The session's CSRF token.
    #[serde(default)]
    pub csrf: String,
    /// What was reconciled (required).
    #[serde(default)]
    pub reason: String,
}

fn target(form: &ClearForm) -> Result<(tenantry_fence::Binding, FenceKey), AdminApiError> {
    let binding = binding(&form.binding)?;
    let key = FenceKey::from_storage_key(&form.key).ok_or_else(|| {
        AdminApiError::invalid(
            "key",
            format!("{:?} is not a fence key (ke.fence.v1.…)", form.key),
        )
    })?;
    Ok((binding, key))
}

/// `GET /ui/fences/clear`: the form asking for the reason.
pub async fn confirm_clear(
    Extension(session): Extension<Session>,
    Query(form): Query<ClearForm>,
) -> Response {
    if session.read_only {
        return read_only_refused();
    }
    if let Err(e) = target(&form) {
        return error_page(&e);
    }
    let body = html! {
        p { "Clear the record " code { (form.key) } " of binding " code { (form.binding) } "?" }
        p.muted { "Only after you reconciled the remote with this scope's local state. The reason is logged." }
        form method="post" action="/ui/fences/clear" {
            input type="hidden" name="csrf" value=(session.csrf.as_ref());
            input type="hidden" name="binding" value=(form.binding);
            input type="hidden" name="key" value=(form.key);
            input #clear-reason name="reason" placeholder="what was reconciled (required)" required maxlength=(MAX_REASON_CHARS);
            button #clear-confirm.danger type="submit" { "Clear" }
            " "
            a href="/ui/fences" { "Cancel" }
        }
    };
    layout::page(
        "Clear a fence",
        "/ui/fences",
        &session,
        body,
        None,
        html! {},
    )
    .into_response()
}

/// `POST /ui/fences/clear`.
pub async fn clear(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    Form(form): Form<ClearForm>,
) -> Response {
    if !csrf_ok(&session, &form.csrf) {
        return csrf_refused();
    }
    if session.read_only {
        return read_only_refused();
    }
    let (binding, key) = match target(&form) {
        Ok(target) => target,
        Err(e) => return error_page(&e),
    };
    let reason = form.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return error_page(&AdminApiError::invalid(
            "reason",
            format!("must say what was reconciled, in 1..={MAX_REASON_CHARS} characters"),
        ));
    }
    tracing::info!(%binding, key = %key, actor = session.actor(), reason, "fence clear requested through the console");
    match state
        .admin
        .fences
        .clear(&binding, &ClearTarget::Key(key), reason)
        .await
    {
        Ok(_) => Redirect::to("/ui/fences").into_response(),
        Err(e) => error_page(&AdminApiError::from(e)),
    }
}
