//! The console's static files, embedded in the binary: htmx (vendored from the npm package
//! `htmx.org` 2.x, `dist/htmx.min.js`, license beside it in `crates/operator/assets/`), the
//! stylesheet and a small script that shows times in the browser's time zone. Nothing is
//! fetched from the network.
//!
//! Caching: pages link each file by a fingerprinted URL, `/ui/static/<fingerprint>/<name>`,
//! where the fingerprint is a hash of the file's bytes (it changes whenever the file does).
//! Those answers are `Cache-Control: public, max-age=31536000, immutable`: a browser keeps
//! them for a year and never asks again, and a new binary with a changed file links a new URL.
//! A request for an old fingerprint is 404 (pages are never cached, so none links it). The
//! plain URLs `/ui/static/<name>` stay for anyone who linked them: `Cache-Control: no-cache`
//! with an `ETag` (the fingerprint), answered 304 when unchanged.

use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// `crates/operator/assets/htmx.min.js`.
pub const HTMX: &str = include_str!("../../assets/htmx.min.js");

/// The console's stylesheet.
///
/// Tables are their own horizontal scroll box (`display: block; overflow-x: auto`, the rows
/// laid out by the implicit `tbody` as a full-width table), so a wide table scrolls inside
/// its box on a phone while the page itself never scrolls sideways; the header wraps; the
/// main column uses the whole window.
pub const CSS: &str = r#"
:root { font-family: system-ui, sans-serif; color: #1d232a; background: #f6f7f9; }
body { margin: 0; overflow-wrap: anywhere; }
header { background: #1d2b3a; color: #fff; padding: .6rem 1.2rem; display: flex; flex-wrap: wrap; gap: .4rem 1.2rem; align-items: center; }
header a { color: #cfe3ff; text-decoration: none; }
header a.active { color: #fff; font-weight: 600; }
header form { margin-left: auto; }
.badge { background: #f0c040; color: #1d232a; border-radius: 4px; padding: .1rem .45rem; font-size: .8rem; font-weight: 600; }
main { padding: 1rem 1.2rem; }
h1 { font-size: 1.3rem; }
h2 { font-size: 1.05rem; margin-top: 1.4rem; }
table { display: block; max-width: 100%; overflow-x: auto; background: #fff; font-size: .9rem; border-top: 1px solid #dde1e6; border-left: 1px solid #dde1e6; box-sizing: border-box; }
table > tbody, table > thead { display: table; width: 100%; border-collapse: separate; border-spacing: 0; }
th, td { border-right: 1px solid #dde1e6; border-bottom: 1px solid #dde1e6; padding: .3rem .5rem; text-align: left; vertical-align: top; overflow-wrap: normal; }
th { background: #eef1f4; }
time { white-space: nowrap; }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; }
.card { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: .6rem .9rem; min-width: 9rem; }
.card .n { font-size: 1.5rem; font-weight: 600; }
.ok { color: #17692f; font-weight: 600; }
.bad, .error { color: #a4161a; font-weight: 600; }
.muted { color: #68707a; }
.pager { display: flex; gap: 1.2rem; }
form.inline { display: inline; }
form.filters { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; margin-bottom: .8rem; }
form.filters label { display: flex; flex-direction: column; font-size: .8rem; }
input, select, button { font: inherit; padding: .25rem .4rem; max-width: 100%; box-sizing: border-box; }
button.danger { background: #a4161a; color: #fff; border: 0; border-radius: 4px; }
button.primary { background: #1d5fbf; color: #fff; border: 0; border-radius: 4px; }
pre { background: #fff; border: 1px solid #dde1e6; padding: .5rem; overflow: auto; }
"#;

/// The console's script: rewrites each `<time datetime>` to the browser's time zone (the
/// server renders UTC, and the `title` keeps it for hovering), on load and after every live
/// refresh. Without JavaScript the times stay in UTC.
pub const SCRIPT: &str = r#"(function () {
  "use strict";
  function pad(n) { return String(n).padStart(2, "0"); }
  function zone(d) {
    try {
      var parts = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d);
      for (var i = 0; i < parts.length; i++) { if (parts[i].type === "timeZoneName") { return parts[i].value; } }
    } catch (e) { /* fall back to the offset */ }
    var m = -d.getTimezoneOffset();
    return "UTC" + (m < 0 ? "-" : "+") + pad(Math.floor(Math.abs(m) / 60)) + ":" + pad(Math.abs(m) % 60);
  }
  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) { return; }
      t.textContent = d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
        pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) + " " + zone(d);
      t.setAttribute("data-local", "");
    });
  }
  document.addEventListener("DOMContentLoaded", function () { localize(document); });
  document.addEventListener("htmx:afterSwap", function () { localize(document); });
})();
"#;

/// One embedded file.
#[derive(Debug, Clone, Copy)]
pub struct Asset {
    /// The file name in the URL.
    pub name: &'static str,
    content_type: &'static str,
    body: &'static str,
    fingerprint: u64,
}

/// FNV-1a (64 bits) of `bytes`: a cache-busting fingerprint, not a security measure.
const fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    hash
}

const fn asset(name: &'static str, content_type: &'static str, body: &'static str) -> Asset {
    Asset {
        name,
        content_type,
        body,
        fingerprint: fnv1a(body.as_bytes()),
    }
}

/// htmx.
pub const HTMX_ASSET: Asset = asset("htmx.min.js", "text/javascript; charset=utf-8", HTMX);
/// The stylesheet.
pub const CSS_ASSET: Asset = asset("console.css", "text/css; charset=utf-8", CSS);
/// The time-zone script.
pub const SCRIPT_ASSET: Asset = asset("console.js", "text/javascript; charset=utf-8", SCRIPT);

const ALL: [Asset; 3] = [HTMX_ASSET, CSS_ASSET, SCRIPT_ASSET];

impl Asset {
    /// The fingerprint as 16 hex digits (also the `ETag`, quoted).
    pub fn fingerprint(&self) -> String {
        format!("{:016x}", self.fingerprint)
    }

    /// The fingerprinted URL pages link.
    pub fn url(&self) -> String {
        format!("/ui/static/{}/{}", self.fingerprint(), self.name)
    }

    fn etag(&self) -> String {
        format!("\"{}\"", self.fingerprint())
    }

    /// The answer: the body (or 304 when `If-None-Match` names the current `ETag`) with
    /// `cache_control`.
    fn answer(&self, headers: &HeaderMap, cache_control: &'static str) -> Response {
        let etag = self.etag();
        let common = [
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static(cache_control),
            ),
            (
                header::ETAG,
                HeaderValue::from_str(&etag).unwrap_or(HeaderValue::from_static("\"\"")),
            ),
        ];
        let matches = headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|tag| {
                let tag = tag.trim();
                tag == "*" || tag.trim_start_matches("W/") == etag
            });
        if matches {
            return (StatusCode::NOT_MODIFIED, common).into_response();
        }
        (
            common,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(self.content_type),
            )],
            self.body,
        )
            .into_response()
    }
}

fn by_name(name: &str) -> Option<Asset> {
    ALL.into_iter().find(|a| a.name == name)
}

/// `GET /ui/static/{fingerprint}/{name}`: the file, cached for a year as immutable; 404 for
/// an unknown name or a fingerprint that is not the current one.
pub async fn fingerprinted(
    Path((fingerprint, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    match by_name(&name) {
        Some(asset) if asset.fingerprint() == fingerprint => {
            asset.answer(&headers, "public, max-age=31536000, immutable")
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `GET /ui/static/{name}`: the file under its plain URL, revalidated on every use
/// (`no-cache` with the `ETag`; 304 when unchanged).
pub async fn plain(Path(name): Path<String>, headers: HeaderMap) -> Response {
    match by_name(&name) {
        Some(asset) => asset.answer(&headers, "no-cache"),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_differ_per_file_and_follow_the_bytes() {
        assert_ne!(CSS_ASSET.fingerprint(), SCRIPT_ASSET.fingerprint());
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(fnv1a(b"a"), fnv1a(b"b"));
        assert_eq!(CSS_ASSET.url().len(), "/ui/static/".len() + 16 + 1 + 11);
    }
}
