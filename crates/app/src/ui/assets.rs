//! The console's static files, embedded in the binary: htmx (vendored from the npm package
//! `htmx.org` 2.x, `dist/htmx.min.js`, license beside it in `crates/app/assets/`) and the
//! stylesheet. Served with a long cache lifetime; nothing is fetched from the network.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

/// `crates/app/assets/htmx.min.js`.
pub const HTMX: &str = include_str!("../../assets/htmx.min.js");

/// The console's stylesheet.
pub const CSS: &str = r#"
:root { font-family: system-ui, sans-serif; color: #1d232a; background: #f6f7f9; }
body { margin: 0; }
header { background: #1d2b3a; color: #fff; padding: .6rem 1.2rem; display: flex; gap: 1.2rem; align-items: center; }
header a { color: #cfe3ff; text-decoration: none; }
header a.active { color: #fff; font-weight: 600; }
header form { margin-left: auto; }
main { padding: 1rem 1.2rem; max-width: 1200px; }
h1 { font-size: 1.3rem; }
h2 { font-size: 1.05rem; margin-top: 1.4rem; }
table { border-collapse: collapse; background: #fff; width: 100%; font-size: .9rem; }
th, td { border: 1px solid #dde1e6; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #eef1f4; }
.cards { display: flex; flex-wrap: wrap; gap: .8rem; }
.card { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: .6rem .9rem; min-width: 9rem; }
.card .n { font-size: 1.5rem; font-weight: 600; }
.ok { color: #17692f; font-weight: 600; }
.bad, .error { color: #a4161a; font-weight: 600; }
.muted { color: #68707a; }
form.inline { display: inline; }
form.filters { display: flex; flex-wrap: wrap; gap: .5rem; align-items: end; margin-bottom: .8rem; }
form.filters label { display: flex; flex-direction: column; font-size: .8rem; }
input, select, button { font: inherit; padding: .25rem .4rem; }
button.danger { background: #a4161a; color: #fff; border: 0; border-radius: 4px; }
button.primary { background: #1d5fbf; color: #fff; border: 0; border-radius: 4px; }
pre { background: #fff; border: 1px solid #dde1e6; padding: .5rem; overflow: auto; }
"#;

/// `GET /ui/static/htmx.min.js`.
pub async fn htmx() -> Response {
    asset("text/javascript; charset=utf-8", HTMX)
}

/// `GET /ui/static/console.css`.
pub async fn css() -> Response {
    asset("text/css; charset=utf-8", CSS)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=3600"),
            ),
        ],
        body,
    )
        .into_response()
}
