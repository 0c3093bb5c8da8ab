//! The page shell of the console: navigation, the logout form, and the live region that htmx
//! refreshes every [`REFRESH`] while the tab is visible (the trigger's condition reads
//! `document.visibilityState`, so a hidden tab sends nothing).

use std::borrow::Cow;

use axum::http::HeaderMap;
use maud::{DOCTYPE, Markup, PreEscaped, html};

use tenantry_kernel::text::{MAX_CODE_BYTES, MAX_MESSAGE_BYTES, bounded};

use super::assets::{CSS_ASSET, HTMX_ASSET, SCRIPT_ASSET};
use super::auth::Session;

/// The live refresh period of pages and tables.
pub const REFRESH: &str = "3s";

/// The navigation entries: (path, label).
const NAV: [(&str, &str); 4] = [
    ("/ui", "Overview"),
    ("/ui/commands", "Commands"),
    ("/ui/fences", "Fences"),
    ("/ui/directory", "Directory"),
];

/// Whether the request came from htmx (a live refresh wants the fragment only).
pub fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            title { (title) " · Tenantry" }
            link rel="stylesheet" href=(CSS_ASSET.url());
            script src=(HTMX_ASSET.url()) {}
            script src=(SCRIPT_ASSET.url()) defer {}
        }
    }
}

/// A page without navigation (login, refusals).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body { main { (body) } }
        }
    }
}

/// A short message page (a refusal or an error), with a link back to the overview.
pub fn message_page(title: &str, message: &str) -> Markup {
    bare(
        title,
        html! {
            h1 { (title) }
            p #message { (message) }
            p { a href="/ui" { "Back to the console" } }
        },
    )
}

/// A console page: navigation, then `before` (not refreshed: filter forms, action forms),
/// then `live`, refreshed from `live_url` (when given) every [`REFRESH`] while the tab is
/// visible.
pub fn page(
    title: &str,
    active: &str,
    session: &Session,
    before: Markup,
    live_url: Option<&str>,
    live: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header {
                    strong { "Tenantry" }
                    @for (path, label) in NAV {
                        a href=(path) class=[(path == active).then_some("active")] { (label) }
                    }
                    span #operator.muted title={"signed in as operator " (session.operator) " (role " (session.role) ")"} { (session.operator) " (" (session.role) ")" }
                    @if session.read_only {
                        span #read-only.badge title="a read operator, or ui_read_only = true: this console shows everything and offers no action" { "read-only" }
                    }
                    form.inline method="post" action="/ui/logout" {
                        input type="hidden" name="csrf" value=(session.csrf.as_ref());
                        button type="submit" { "Sign out" }
                    }
                }
                main {
                    h1 { (title) }
                    (before)
                    @if let Some(url) = live_url {
                        div #live
                            hx-get=(url)
                            hx-trigger={"every " (REFRESH) " [document.visibilityState === 'visible']"}
                            hx-swap="innerHTML" {
                            (live)
                        }
                    } @else {
                        (live)
                    }
                }
                // Without JavaScript the page still works; htmx only adds the refresh.
                (PreEscaped("<noscript><p class=\"muted\">Live refresh needs JavaScript; reload to update.</p></noscript>"))
            }
        }
    }
}

/// A time: `<time datetime="…Z" title="… UTC">… UTC</time>`, to the second. The console's
/// script rewrites the text to the browser's time zone; the `title` keeps UTC for hovering,
/// and without JavaScript the text stays UTC.
pub fn time(at: &chrono::DateTime<chrono::Utc>) -> Markup {
    let utc = at.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    html! {
        time datetime=(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)) title=(utc) { (utc) }
    }
}

/// An optional time (`—` when absent).
pub fn time_opt(at: Option<&chrono::DateTime<chrono::Utc>>) -> Markup {
    match at {
        Some(at) => time(at),
        None => html! { "—" },
    }
}

/// Stored text as the console shows it (case 010): control and invisible format characters
/// removed, at most [`MAX_MESSAGE_BYTES`] bytes ([`tenantry_kernel::text::bounded`]). Applied
/// to every message, reason and detail a page shows, whatever version wrote the row.
pub fn shown(text: &str) -> Cow<'_, str> {
    bounded(text, MAX_MESSAGE_BYTES)
}

/// An error code as the console shows it: like [`shown`], at most [`MAX_CODE_BYTES`] bytes.
pub fn shown_code(code: &str) -> Cow<'_, str> {
    bounded(code, MAX_CODE_BYTES)
}

/// Everything but RFC 3986's unreserved characters (`A-Z a-z 0-9 - _ . ~`).
const RESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a query or path value (everything but RFC 3986's unreserved characters,
/// UTF-8 bytes as upper-case `%XX`).
pub fn encode(value: &str) -> String {
    percent_encoding::utf8_percent_encode(value, RESERVED).to_string()
}
