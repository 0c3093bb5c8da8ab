//! What the pages serve: the commands table pages both ways, static files are fingerprinted
//! and cached, `/metrics` and the console share one read of the counts.

use crate::common::console::Console;
use crate::common::{Harness, TOKEN};

/// Issue 27: the commands table pages backwards as well as forwards, and shows its times as
/// `<time>` elements (UTC in the text and the title; the script localizes the text).
#[tokio::test]
async fn commands_table_pages_both_ways_and_marks_up_its_times() {
    let h = Harness::start().await;
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    let total = tenantry_app::ui::pages::commands::PAGE as usize + 3;
    for i in 0..total {
        h.create("t-1", &format!("cs-p{i:03}")).await;
    }
    let rows = |body: &str| {
        body.match_indices("<tr class=\"command\"")
            .map(|(at, _)| {
                let href = body[at..].find("href=\"/ui/commands/").unwrap() + at + 19;
                body[href..].split('"').next().unwrap().to_owned()
            })
            .collect::<Vec<_>>()
    };
    let link = |body: &str, id: &str| {
        let at = body.find(&format!("id=\"{id}\" href=\""))? + id.len() + 12;
        Some(body[at..].split('"').next().unwrap().replace("&amp;", "&"))
    };
    let first = console.get("/ui/commands").await;
    assert_eq!(first.status, 200, "{}", first.body);
    let first_rows = rows(&first.body);
    assert_eq!(first_rows.len(), total - 3);
    assert!(
        link(&first.body, "prev-page").is_none(),
        "the first page has no previous"
    );
    let second = console.get(&link(&first.body, "next-page").unwrap()).await;
    assert_eq!(rows(&second.body).len(), 3, "{}", second.body);
    assert!(link(&second.body, "next-page").is_none(), "{}", second.body);
    let back = console.get(&link(&second.body, "prev-page").unwrap()).await;
    assert_eq!(back.status, 200, "{}", back.body);
    assert_eq!(rows(&back.body), first_rows, "back to the first page");
    assert!(link(&back.body, "prev-page").is_none(), "{}", back.body);
    assert!(link(&back.body, "next-page").is_some(), "{}", back.body);
    // An unknown backwards cursor is a clear 400.
    let unknown = console.get("/ui/commands?before=no-such-command").await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);
    // Times: machine-readable UTC, with UTC on hover.
    let at = first
        .body
        .find("<time datetime=\"")
        .expect("a <time> element");
    let time = &first.body[at..first.body[at..].find("</time>").unwrap() + at];
    assert!(
        time.contains("Z\" title=\"") && time.ends_with(" UTC"),
        "{time}"
    );
    assert!(
        first.body.contains("/console.js\""),
        "the local-time script is linked"
    );
}

/// Issue 27: static files are linked by fingerprinted URLs cached as immutable for a year
/// (with an ETag); the plain URLs revalidate (`no-cache` + ETag, 304 when unchanged); pages
/// stay `no-store`.
#[tokio::test]
async fn static_assets_are_fingerprinted_and_cached_as_immutable() {
    let h = Harness::start().await;
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    let page = console.get("/ui").await;
    assert_eq!(
        page.headers.get("cache-control").unwrap().to_str().unwrap(),
        "no-store"
    );
    for name in ["console.css", "htmx.min.js", "console.js"] {
        let at = page
            .body
            .find(&format!("/{name}\""))
            .unwrap_or_else(|| panic!("{name} linked: {}", page.body));
        let start = page.body[..at].rfind('"').unwrap() + 1;
        let url = &page.body[start..at + name.len() + 1];
        assert!(url.starts_with("/ui/static/") && url.len() > 30, "{url}");
        let asset = console.get(url).await;
        assert_eq!(asset.status, 200, "{url}");
        assert_eq!(
            asset
                .headers
                .get("cache-control")
                .unwrap()
                .to_str()
                .unwrap(),
            "public, max-age=31536000, immutable",
            "{url}"
        );
        let etag = asset
            .headers
            .get("etag")
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let again = console
            .send(
                console
                    .http
                    .get(format!("{}{url}", console.base))
                    .header("if-none-match", &etag),
            )
            .await;
        assert_eq!(again.status, 304, "{url}");
        assert!(again.body.is_empty());
        let plain = console.get(&format!("/ui/static/{name}")).await;
        assert_eq!(plain.status, 200, "{name}");
        assert_eq!(
            plain
                .headers
                .get("cache-control")
                .unwrap()
                .to_str()
                .unwrap(),
            "no-cache"
        );
        assert_eq!(plain.headers.get("etag").unwrap().to_str().unwrap(), etag);
        assert_eq!(plain.body, asset.body);
    }
    let stale = console.get("/ui/static/0000000000000000/console.css").await;
    assert_eq!(stale.status, 404);
    assert_eq!(console.get("/ui/static/nothing.js").await.status, 404);
}

/// `/metrics` and the console read one shared snapshot: a burst of scrapes and page loads
/// costs at most two reads of the counts (one, plus one if the burst crosses a second).
#[tokio::test]
async fn metrics_and_console_share_one_read_of_the_counts_a_second() {
    let h = Harness::start().await;
    let counts = h.service.as_ref().unwrap().counts().clone();
    let before = counts.refreshes();
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    for _ in 0..5 {
        assert!(h.metrics().await.contains("tenantry_fences_active"));
        assert_eq!(console.get("/ui").await.status, 200);
        assert_eq!(console.get("/ui/directory").await.status, 200);
    }
    let reads = counts.refreshes() - before;
    assert!((1..=2).contains(&reads), "{reads} reads for 16 viewers");
}
