//! The overview: commands by status and operation, the oldest pending command, the lease
//! owners at work, commands settled per minute (a small chart) with enqueue-to-settle p50 /
//! p99, failed commands by error code, active fences by kind, the directory's readiness,
//! staleness and row counts. Every number comes
//! from the shared counts ([`CountsCache`](crate::counts::CountsCache)), at most a second old.

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use tenantry_fence::RecordKind;
use tenantry_kernel::text::MAX_CODE_BYTES;
use tenantry_lifecycle::Operation;

use super::super::UiState;
use super::super::auth::Session;
use super::super::layout;
use crate::counts::{
    COUNTED_STATUSES, Counts, OWNERS_WINDOW, THROUGHPUT_MINUTES, THROUGHPUT_SAMPLE,
};
use crate::directory::DirectoryStatus;

const OPERATIONS: [Operation; 3] = [Operation::Provision, Operation::Delete, Operation::Revoke];

/// `GET /ui`.
pub async fn page(
    State(state): State<UiState>,
    Extension(session): Extension<Session>,
    headers: HeaderMap,
) -> Response {
    let live = live(&state).await;
    if layout::is_htmx(&headers) {
        return live.into_response();
    }
    layout::page("Overview", "/ui", &session, html! {}, Some("/ui"), live).into_response()
}

async fn live(state: &UiState) -> Markup {
    let counts = state.admin.counts.get().await;
    let directory = crate::directory::status(state.admin.directory.as_ref()).await;
    html! {
        p.muted { "Counts as of " (layout::time(&counts.at)) " (refreshed at most once a second)." }
        h2 { "Commands" }
        (commands(&counts))
        (live_commands(&counts))
        h2 { "Succeeded, last " (THROUGHPUT_MINUTES) " minutes" }
        (throughput_chart(&counts))
        h2 { "Failed commands by error code" }
        (failed_by_code(&counts))
        h2 { "Fences" }
        (fences(&counts))
        h2 { "Directory" }
        (directory_summary(&directory, &counts))
    }
}

fn commands(counts: &Counts) -> Markup {
    html! {
        @match &counts.commands {
            Err(e) => p.error { "Commands could not be counted: " (e) },
            Ok(rows) => {
                div.cards {
                    @for status in COUNTED_STATUSES {
                        div.card #{"count-" (status.as_str())} {
                            div.muted { (status.as_str()) }
                            div.n { a href={"/ui/commands?status=" (status.as_str())} { (counts.total(status)) } }
                        }
                    }
                }
                table #commands-by-operation {
                    tr { th { "operation" } @for status in COUNTED_STATUSES { th { (status.as_str()) } } }
                    @for operation in OPERATIONS {
                        tr {
                            td { (operation.as_str()) }
                            @for status in COUNTED_STATUSES {
                                td { (rows.iter().filter(|c| c.status == status && c.operation == operation).map(|c| c.count).sum::<u64>()) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A duration for people: `850 ms`, `12.3 s`, `4 min 05 s`.
fn human(d: std::time::Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} min {:02} s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

fn live_commands(counts: &Counts) -> Markup {
    html! {
        @match &counts.live {
            Err(e) => p.error { "Live commands could not be read: " (e) },
            Ok(live) => {
                p #oldest-pending {
                    "Oldest pending command: "
                    @match live.oldest_pending_created_at {
                        None => span.muted { "none pending" },
                        Some(at) => {
                            (human((counts.at - at).to_std().unwrap_or_default())) " old"
                            span.muted { " (since " (layout::time(&at)) ")" }
                        }
                    }
                }
                p #lease-owners {
                    "Lease owners at work now: "
                    @if live.lease_owners.is_empty() { span.muted { "none" } }
                    @for (i, (owner, n)) in live.lease_owners.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (owner) } " (" (n) ")"
                    }
                }
                p #recent-owners {
                    "Lease owners seen in the last " (OWNERS_WINDOW.as_secs() / 60) " minutes: "
                    @if counts.recent_owners.is_empty() { span.muted { "none" } }
                    @for (i, (owner, at)) in counts.recent_owners.iter().enumerate() {
                        @if i > 0 { ", " }
                        code { (owner) } span.muted { " (last " (layout::time(at)) ")" }
                    }
                }
            }
        }
    }
}

/// Bars of the commands settled per minute (inline SVG), with the latency percentiles.
fn throughput_chart(counts: &Counts) -> Markup {
    const BAR: u64 = 28;
    const HEIGHT: u64 = 80;
    html! {
        @match &counts.throughput {
            Err(e) => p.error { "Throughput could not be read: " (e) },
            Ok(t) => {
                @let max = t.per_minute.iter().copied().max().unwrap_or(0).max(1);
                @let width = BAR * t.per_minute.len() as u64;
                svg #throughput width=(width) height=(HEIGHT + 16) role="img" aria-label="commands succeeded per minute" {
                    @for (i, n) in t.per_minute.iter().enumerate() {
                        @let h = n * HEIGHT / max;
                        rect x=(i as u64 * BAR + 2) y=(HEIGHT - h) width=(BAR - 4) height=(h) fill="#1d5fbf" {
                            title { (n) " succeeded, " (t.per_minute.len() - 1 - i) " min ago" }
                        }
                        text x=(i as u64 * BAR + BAR / 2) y=(HEIGHT + 12) font-size="10" text-anchor="middle" { (n) }
                    }
                }
                p #latency {
                    "Enqueue to settle: p50 "
                    (t.p50.map_or_else(|| "—".to_owned(), human))
                    ", p99 "
                    (t.p99.map_or_else(|| "—".to_owned(), human))
                    " over " (t.per_minute.iter().sum::<u64>()) " commands"
                    @if t.truncated { span.muted { " (the newest " (THROUGHPUT_SAMPLE) " only)" } }
                    "."
                }
            }
        }
    }
}

fn failed_by_code(counts: &Counts) -> Markup {
    html! {
        @match &counts.failed_by_code {
            Err(e) => p.error { "Failed commands could not be counted: " (e) },
            Ok(rows) if rows.is_empty() => p.muted { "No failed command." },
            Ok(rows) => table #failed-by-code {
                tr { th { "error code" } th { "failed commands" } }
                @for row in rows {
                    @let code = row.code.as_ref().map_or("", |c| c.as_str());
                    tr {
                        // A code longer than any a remote may set (a row of an older version) is shown
                        // bounded, without a filter link.
                        td { @if code.len() > MAX_CODE_BYTES { (layout::shown_code(code)) } @else { a href={"/ui/commands?status=failed&error_code=" (layout::encode(code))} { @if code.is_empty() { "(none)" } @else { (layout::shown_code(code)) } } } }
                        td { (row.count) }
                    }
                }
            }
        }
    }
}

fn fences(counts: &Counts) -> Markup {
    html! {
        @match &counts.fences {
            Err(e) => p.error { "Fences could not be counted: " (e) },
            Ok(kinds) => div.cards {
                div.card #count-fences {
                    div.muted { "fences (need an operator)" }
                    div.n { a href="/ui/fences" { (kinds.get(&RecordKind::Fence).copied().unwrap_or(0)) } }
                }
                div.card #count-intents {
                    div.muted { "intents (writes in flight)" }
                    div.n { (kinds.get(&RecordKind::Intent).copied().unwrap_or(0)) }
                }
            }
        }
    }
}

/// The directory's readiness line, shared with the directory page.
pub(crate) fn readiness(status: &DirectoryStatus) -> Markup {
    html! {
        @match status {
            DirectoryStatus::NotConfigured(_) => span #readiness.muted { "not configured" },
            DirectoryStatus::Configured(s) => {
                @if s.ready { span #readiness.ok { "ready" } }
                @else { span #readiness.bad { "not ready" } }
            }
        }
    }
}

fn directory_summary(status: &DirectoryStatus, counts: &Counts) -> Markup {
    html! {
        div.cards {
            div.card { div.muted { "readiness" } div.n { (readiness(status)) } }
            @if let DirectoryStatus::Configured(s) = status {
                div.card {
                    div.muted { "staleness / max" }
                    div.n { (s.staleness_seconds.map_or_else(|| "never synced".to_owned(), |a| format!("{a:.0} s"))) " / " (format!("{:.0} s", s.max_staleness_seconds)) }
                }
            }
            @if let Some(Ok(rows)) = &counts.directory {
                div.card #count-accounts { div.muted { "accounts" } div.n { (rows.accounts) } }
                div.card #count-workspaces { div.muted { "workspaces" } div.n { (rows.workspaces) } }
                div.card #count-memberships { div.muted { "memberships" } div.n { (rows.memberships) } }
            }
        }
        @if let Some(Err(e)) = &counts.directory { p.error { "Directory rows could not be counted: " (e) } }
        p { a href="/ui/directory" { "Directory details" } }
    }
}
