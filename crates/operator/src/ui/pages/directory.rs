//! Directory: this replica's consumer cursor, the shared high-water mark, staleness against
//! the maximum, readiness (execution admission), the last refusal or storage error, the
//! projected tables' row counts (from the shared counts) and the events applied last (the
//! newest inbox receipts).

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};

use super::super::UiState;
use super::super::auth::Session;
use super::super::layout;
use super::overview::readiness;

use crate::directory::DirectoryStatus;

/// Receipts shown under "Recent events applied".
pub const RECENT: u32 = 10;

/// `GET /ui/directory`.
pub async fn page(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
) -> Response {
    let live = live(&state).await;
    if layout::is_htmx(&headers) {
        return live.into_response();
    }
    layout::page(
        "Directory",
        "/ui/directory",
        &session,
        html! {},
        Some("/ui/directory"),
        live,
    )
    .into_response()
}

async fn live(state: &UiState) -> Markup {
    let status = crate::directory::status(state.admin.directory.as_ref()).await;
    let counts = state.admin.counts.get().await;
    // Ten rows through the `received_at` index.
    let recent = match &state.admin.directory {
        Some(handle) => Some(handle.store.recent_receipts(RECENT).await),
        None => None,
    };
    let or_dash = |v: Option<i64>| v.map_or_else(|| "—".to_owned(), |v| v.to_string());
    html! {
        @match &status {
            DirectoryStatus::NotConfigured(s) => p { (readiness(&status)) ": " (layout::shown(s.message)) },
            DirectoryStatus::Configured(s) => {
                table #directory {
                    tr { th { "readiness" } td { (readiness(&status)) } }
                    @if let Some(reason) = &s.not_ready_reason { tr { th { "why not ready" } td #not-ready-reason { (layout::shown(reason)) } } }
                    tr { th { "instance" } td { (s.instance_uuid) } }
                    tr { th { "consumer cursor (this replica)" } td #cursor { (or_dash(s.cursor)) } }
                    tr { th { "high-water mark (shared)" } td #high-water { (or_dash(s.projection_cursor)) } }
                    tr { th { "last applied" } td { (layout::time_opt(s.last_applied_at.as_ref())) } }
                    tr { th { "staleness / maximum" } td #staleness { (s.staleness_seconds.map_or_else(|| "never synced".to_owned(), |a| format!("{a:.1} s"))) " / " (format!("{:.0} s", s.max_staleness_seconds)) } }
                    tr { th { "last refusal" } td { @if let Some(r) = &s.last_refusal { (r.rule.as_str()) ": " (layout::shown(&r.message)) " (×" (r.count) ")" } @else { "none" } } }
                    tr { th { "storage error" } td { (s.storage_error.as_deref().unwrap_or("none")) } }
                    tr #sync-failure { th { "last sync error" } td { @if let Some(f) = &s.sync_failure { (layout::shown(&f.message)) " (" (f.count) " failed steps in a row since " (f.since.format("%Y-%m-%d %H:%M:%S UTC")) ")" } @else { "none" } } }
                    tr { th { "active workspaces" } td { (s.resources.active_workspaces) " of at most " (s.resources.max_active_workspaces) } }
                }
            }
        }
        h2 { "Projected rows" }
        @match &counts.directory {
            None => p.muted { "No directory provider is configured." },
            Some(Err(e)) => p.error { "Could not count: " (e) },
            Some(Ok(rows)) => table #directory-counts {
                tr { th { "accounts" } th { "workspaces" } th { "memberships" } }
                tr { td { (rows.accounts) } td { (rows.workspaces) } td { (rows.memberships) } }
            },
        }
        h2 { "Recent events applied" }
        @match &recent {
            None => p.muted { "No directory provider is configured." },
            Some(Err(e)) => p.error { "Could not read the inbox: " (e) },
            Some(Ok(receipts)) if receipts.is_empty() => p.muted { "No event received yet (snapshots leave no receipt)." },
            Some(Ok(receipts)) => table #recent-applies {
                tr { th { "cursor" } th { "event" } th { "type" } th { "revision" } th { "received" } th { "applied" } }
                @for r in receipts {
                    tr {
                        td { (r.cursor) }
                        td { (r.event_uuid.as_str()) }
                        td { (r.event_type) }
                        td { (r.revision) }
                        td { (layout::time(&r.received_at)) }
                        td { (layout::time_opt(r.applied_at.as_ref())) }
                    }
                }
            },
        }
    }
}
