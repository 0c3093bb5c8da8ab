//! The operator console in a real browser: headless Chromium driven over WebDriver
//! (chromedriver, through fantoccini) against a running service with real data. One journey:
//! log in, filter the commands, retry a failed command and see it settle, clear a fence with
//! a reason, and watch the directory page turn not-ready by itself (the live refresh) when the
//! provider stops answering. A second journey on a phone-sized window (390 px): the page never
//! scrolls sideways, wide tables scroll inside their box, the header wraps, times show in the
//! browser's zone, and a bulk abandon touches exactly the commands its confirmation named;
//! then the same page at 1400 px uses the width. Screenshots of each step go to `target/ui/`.
//!
//! Browser: `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`; `.ci/run` installs them), or `TENANTRY_CHROMIUM` /
//! `TENANTRY_CHROMEDRIVER`. Without one the test is skipped with a message, except when `CI`
//! or `TENANTRY_REQUIRE_BROWSER` is set: then it fails. The journey is `#[ignore]`d in the
//! workspace test runs; `cargo xtask ci` runs it once, in its own step "test (browser)"
//! (`cargo test -p tenantry-app --test ui_browser -- --ignored`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Harness, TOKEN};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tenantry_app::config::DirectorySettings;
use tenantry_directory::maps::{
    DirectoryAccountStatus, DirectoryMembershipStatus, DirectoryRole, WorkspaceStatus,
};
use tenantry_directory::{
    AccountUuid, DirectoryMember, DirectoryWorkspace, InstanceUuid, MembershipUuid, WorkspaceUuid,
};
use tenantry_fence::ScopeIdentity;
use tenantry_ports::host_storage::HostStorage;
use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::fault::{Fault, Route};

const SETTLE: Duration = Duration::from_secs(30);

/// The browser's binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Browser {
    chromium: PathBuf,
    chromedriver: PathBuf,
}

/// Finds the browser: `Ok(None)` to skip (missing, and neither `CI` nor
/// `TENANTRY_REQUIRE_BROWSER` set), `Err` when it is missing but required.
fn locate(
    env: impl Fn(&str) -> Option<String>,
    exists: impl Fn(&Path) -> bool,
) -> Result<Option<Browser>, String> {
    let path =
        |var: &str, default: &str| PathBuf::from(env(var).unwrap_or_else(|| default.to_owned()));
    let browser = Browser {
        chromium: path("TENANTRY_CHROMIUM", "/usr/bin/chromium"),
        chromedriver: path("TENANTRY_CHROMEDRIVER", "/usr/bin/chromedriver"),
    };
    let missing: Vec<String> = [&browser.chromium, &browser.chromedriver]
        .into_iter()
        .filter(|p| !exists(p))
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        return Ok(Some(browser));
    }
    let required = ["CI", "TENANTRY_REQUIRE_BROWSER"]
        .iter()
        .any(|v| env(v).is_some_and(|x| !x.is_empty() && x != "0" && x != "false"));
    let message = format!(
        "browser tests need {} (Debian: apt-get install chromium chromium-driver; or set TENANTRY_CHROMIUM / TENANTRY_CHROMEDRIVER)",
        missing.join(" and ")
    );
    if required {
        Err(message)
    } else {
        eprintln!("skipped: {message}");
        Ok(None)
    }
}

#[test]
fn a_missing_browser_fails_in_ci_and_is_skipped_elsewhere() {
    let none = |_: &Path| false;
    let all = |_: &Path| true;
    let env_with = |pairs: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    };
    assert_eq!(locate(env_with(&[]), none), Ok(None));
    assert!(locate(env_with(&[("CI", "true")]), none).is_err());
    let err = locate(env_with(&[("TENANTRY_REQUIRE_BROWSER", "1")]), none).unwrap_err();
    assert!(err.contains("chromium-driver"), "{err}");
    let found = locate(
        env_with(&[("CI", "true"), ("TENANTRY_CHROMIUM", "/opt/c")]),
        all,
    )
    .unwrap()
    .unwrap();
    assert_eq!(found.chromium, PathBuf::from("/opt/c"));
}

/// chromedriver on a free loopback port, killed on drop.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// chromedriver (and the Chromium it starts) in the time zone `tz` (`TZ`), e.g. `Asia/Tokyo`.
async fn start_driver(browser: &Browser, tz: &str) -> Driver {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&browser.chromedriver)
        .arg(format!("--port={port}"))
        .env("TZ", tz)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver starts");
    let url = format!("http://127.0.0.1:{port}");
    let driver = Driver { child, url };
    let http =
        tenantry_remote_http::client::client_builder(&tenantry_remote_http::RemoteTls::default())
            .unwrap()
            .build()
            .unwrap();
    for _ in 0..200 {
        if http
            .get(format!("{}/status", driver.url))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return driver;
        }
        // Real time: chromedriver is another process starting up.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("chromedriver did not answer on {}", driver.url);
}

/// A headless Chromium session whose window is `size` (`"width,height"` in CSS pixels); with
/// `phone` (width, height), a phone's viewport through Chromium's mobile emulation (a
/// headless window is at least 500 px wide).
async fn start_browser(
    browser: &Browser,
    driver: &Driver,
    profile: &Path,
    size: &str,
    phone: Option<(u32, u32)>,
) -> Client {
    let mut caps = serde_json::Map::new();
    let mut options = json!({
            "binary": browser.chromium,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", format!("--window-size={size}"),
                format!("--user-data-dir={}", profile.display()),
            ],
    });
    if let Some((width, height)) = phone {
        options["mobileEmulation"] = json!({
            "deviceMetrics": {"width": width, "height": height, "pixelRatio": 3.0, "touch": true},
        });
    }
    caps.insert("goog:chromeOptions".to_owned(), options);
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Saves a screenshot as `target/ui/<name>.png`.
async fn shot(client: &Client, name: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ui");
    std::fs::create_dir_all(&dir).unwrap();
    let png = client.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Waits until the text of the element at `css` contains `text` (the page refreshes itself,
/// or `reload` reloads it between looks).
async fn wait_text(client: &Client, css: &str, text: &str, reload: bool) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await
            && element.text().await.is_ok_and(|t| t.contains(text))
        {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{css} never showed {text:?}: {}",
            client.source().await.unwrap_or_default()
        );
        if reload {
            client.refresh().await.unwrap();
        }
        // Real time: the service and the browser run on their own.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn directory_settings(url: String, keys: Vec<(String, [u8; 32])>) -> DirectorySettings {
    DirectorySettings {
        sync_interval: Duration::from_millis(100),
        max_staleness: Duration::from_secs(3),
        ..common::directory::settings(url, keys)
    }
}

/// A workspace of the reference directory with `members` members.
fn workspace(uuid: &str, members: usize) -> DirectoryWorkspace {
    let owner = AccountUuid::parse(format!("acc-{uuid}-0")).unwrap();
    DirectoryWorkspace {
        uuid: WorkspaceUuid::parse(uuid).unwrap(),
        name: format!("Workspace {uuid}"),
        slug: uuid.into(),
        workspace_type: "team".into(),
        status: WorkspaceStatus::Active,
        created_by_account_uuid: owner,
        projection_revision: 1,
        execution_generation: 1,
        members: (0..members)
            .map(|i| DirectoryMember {
                membership_uuid: MembershipUuid::parse(format!("m-{uuid}-{i}")).unwrap(),
                account_uuid: AccountUuid::parse(format!("acc-{uuid}-{i}")).unwrap(),
                normalized_email: format!("user{i}@{uuid}.example.com"),
                display_name: format!("User {i}"),
                account_status: DirectoryAccountStatus::Active,
                role: if i == 0 {
                    DirectoryRole::Owner
                } else {
                    DirectoryRole::Member
                },
                membership_status: DirectoryMembershipStatus::Active,
                joined_at: None,
                projection_revision: 1,
            })
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "drives Chromium: runs once in the `test (browser)` step of `cargo xtask ci` (cargo test -p tenantry-app --test ui_browser -- --ignored)"]
async fn console_in_a_real_browser() {
    let Some(browser) = locate(|v| std::env::var(v).ok(), Path::exists).unwrap() else {
        return;
    };
    // Real data: a provider, a service with a failed command, a fence.
    let (directory_url, directory) = ReferenceDirectory::start(DirectoryServerConfig::new(
        InstanceUuid::parse("inst-1").unwrap(),
    ))
    .await
    .unwrap();
    for (uuid, members) in [("ws-a", 3), ("ws-b", 2)] {
        directory.change(|m| m.upsert_workspace(workspace(uuid, members)));
    }
    let keys = directory.trusted_public_keys();
    let h = Harness::start_with(Default::default(), |c| {
        c.directory = Some(directory_settings(directory_url, keys));
    })
    .await;
    h.remote
        .script(Route::Provision, [Some(Fault::InvalidRequest)]);
    let created = h.create("t-1", "cs-bad").await;
    let failed_id = created["command_id"].as_str().unwrap().to_owned();
    // cs-bad must meet the scripted refusal before cs-good is created: two queued provisions are
    // claimed together and either may reach the remote first.
    h.wait_for(
        "/v1/tenants/t-1/control-spaces/cs-bad",
        |b| b["lifecycle_status"] == "failed",
        SETTLE,
    )
    .await;
    h.create("t-1", "cs-good").await;
    h.wait_state("t-1", "cs-good", "active", SETTLE).await;
    let binding = tenantry_fence::Binding::parse("inst-1").unwrap();
    let scope = ScopeIdentity::object("kb-1");
    let storage = SeaOrmHostStorage::new(&h.db.db);
    storage
        .set(
            &binding,
            scope.fence_key().as_str(),
            &json!({"scope": "kb-1", "reason": "upload document", "fenced_at_ms": 1_700_000_000_000i64, "kind": "fence",
                    "failure": {"kind": "outcome_unknown", "detail": "connection reset after send"}}),
        )
        .await
        .unwrap();

    let driver = start_driver(&browser, "UTC").await;
    let profile = tempfile::tempdir().unwrap();
    let client = start_browser(&browser, &driver, profile.path(), "1280,900", None).await;

    // Log in.
    client.goto(&h.url("/ui")).await.unwrap();
    client
        .wait()
        .at_most(SETTLE)
        .for_element(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    shot(&client, "01-login").await;
    client
        .find(Locator::Css("#login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "#count-failed", "1", false).await;
    wait_text(&client, "#readiness.ok", "ready", false).await;
    wait_text(&client, "#count-memberships", "5", false).await;
    wait_text(&client, "#latency", "over 1 commands", false).await;
    shot(&client, "02-overview").await;

    // Filter the commands: failed only.
    client.goto(&h.url("/ui/commands")).await.unwrap();
    client
        .find(Locator::Css("select[name=status]"))
        .await
        .unwrap()
        .select_by_value("failed")
        .await
        .unwrap();
    client
        .find(Locator::Css("#apply-filter"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "#matching", "1 commands match", false).await;
    let rows = client.find_all(Locator::Css("tr.command")).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(rows[0].text().await.unwrap().contains(&failed_id));
    shot(&client, "03-commands-filtered").await;

    // Retry the failed command and see it settle.
    client
        .find(Locator::LinkText(&failed_id))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "#status", "failed", false).await;
    client
        .find(Locator::Css("#retry-reason"))
        .await
        .unwrap()
        .send_keys("remote fixed")
        .await
        .unwrap();
    client
        .find(Locator::Css("#retry-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "#status", "succeeded", false).await;
    wait_text(&client, "#actions-log", "remote fixed", false).await;
    shot(&client, "04-command-retried").await;

    // Clear the fence with a reason.
    client.goto(&h.url("/ui/fences")).await.unwrap();
    wait_text(&client, "#fences", "kb-1", false).await;
    shot(&client, "05-fences").await;
    client
        .find(Locator::Css("a.clear"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    client
        .wait()
        .at_most(SETTLE)
        .for_element(Locator::Css("#clear-reason"))
        .await
        .unwrap()
        .send_keys("reconciled kb-1 with the remote")
        .await
        .unwrap();
    client
        .find(Locator::Css("#clear-confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "#no-fences", "No fence", false).await;
    assert_eq!(
        storage
            .get(&binding, scope.fence_key().as_str())
            .await
            .unwrap(),
        Some(serde_json::Value::Null)
    );
    shot(&client, "06-fence-cleared").await;

    // The directory page turns not ready by itself once the provider stops answering.
    client.goto(&h.url("/ui/directory")).await.unwrap();
    wait_text(&client, "#readiness.ok", "ready", false).await;
    shot(&client, "07-directory-ready").await;
    directory.shutdown().await;
    wait_text(&client, "#readiness.bad", "not ready", false).await;
    // The failed synchronization shows too, not only the staleness it causes.
    wait_text(&client, "#sync-failure", "failed steps in a row", false).await;
    shot(&client, "08-directory-not-ready").await;

    client.close().await.unwrap();
}

/// Runs `script` (a function body returning a value) in the page.
async fn eval(client: &Client, script: &str) -> serde_json::Value {
    client.execute(script, vec![]).await.unwrap()
}

/// Logs in on the current page (the login form).
async fn log_in(client: &Client, h: &Harness) {
    client.goto(&h.url("/ui")).await.unwrap();
    client
        .wait()
        .at_most(SETTLE)
        .for_element(Locator::Css("#token"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    client
        .find(Locator::Css("#login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(client, "h1", "Overview", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "drives Chromium: runs once in the `test (browser)` step of `cargo xtask ci` (cargo test -p tenantry-app --test ui_browser -- --ignored)"]
async fn console_on_a_phone_and_bulk_by_identity() {
    let Some(browser) = locate(|v| std::env::var(v).ok(), Path::exists).unwrap() else {
        return;
    };
    let h = Harness::start().await;
    let fail_one = |cs: &'static str| {
        let h = &h;
        async move {
            h.remote
                .script(Route::Provision, [Some(Fault::InvalidRequest)]);
            let created = h.create("t-1", cs).await;
            h.wait_for(
                &format!("/v1/tenants/t-1/control-spaces/{cs}"),
                |b| b["lifecycle_status"] == "failed",
                SETTLE,
            )
            .await;
            created["command_id"].as_str().unwrap().to_owned()
        }
    };
    let first = fail_one("cs-phone-with-a-rather-long-control-space-id-1").await;
    let second = fail_one("cs-phone-with-a-rather-long-control-space-id-2").await;

    let driver = start_driver(&browser, "Asia/Tokyo").await;
    let profile = tempfile::tempdir().unwrap();
    let client = start_browser(
        &browser,
        &driver,
        profile.path(),
        "500,844",
        Some((390, 844)),
    )
    .await;
    log_in(&client, &h).await;
    client
        .goto(&h.url("/ui/commands?status=failed"))
        .await
        .unwrap();
    wait_text(&client, "#matching", "2 commands match", false).await;
    // The page never scrolls sideways; the table scrolls inside its own box; the header
    // wraps instead of overflowing.
    let layout = eval(
        &client,
        "const t = document.querySelector('#commands'); const hd = document.querySelector('header');
         return { page: document.documentElement.scrollWidth, body: document.body.scrollWidth,
                  view: screen.width, inner: window.innerWidth, tableScroll: t.scrollWidth, tableBox: t.clientWidth,
                  overflow: getComputedStyle(t).overflowX, header: hd.scrollWidth,
                  headerBox: hd.clientWidth, headerHeight: hd.getBoundingClientRect().height,
                  link: document.querySelector('header a').getBoundingClientRect().height };",
    )
    .await;
    let n = |k: &str| layout[k].as_f64().unwrap();
    assert!(n("view") <= 400.0, "a phone-sized window: {layout}");
    assert!(
        n("page") <= n("view") && n("body") <= n("view") && n("inner") <= n("view"),
        "no sideways scroll: {layout}"
    );
    assert_eq!(layout["overflow"], "auto", "{layout}");
    assert!(
        n("tableScroll") > n("tableBox"),
        "the table scrolls inside its box: {layout}"
    );
    assert!(n("header") <= n("headerBox"), "the header fits: {layout}");
    assert!(
        n("headerHeight") > 2.0 * n("link"),
        "the header wraps: {layout}"
    );
    // Times are shown in the browser's zone (Tokyo), UTC on hover.
    let time = eval(
        &client,
        "const t = document.querySelector('#commands time'); return { text: t.textContent, title: t.title, local: t.hasAttribute('data-local') };",
    )
    .await;
    assert_eq!(time["local"], true, "{time}");
    let title = time["title"].as_str().unwrap();
    assert!(title.ends_with(" UTC"), "{time}");
    assert_ne!(time["text"].as_str().unwrap(), title, "{time}");
    shot(&client, "09-phone-commands").await;

    // Bulk abandon by identity: the confirmation names both; meanwhile a third fails and the
    // second is retried elsewhere; the action abandons the first only and lists the second.
    client
        .find(Locator::Css("#bulk-abandon"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(&client, "#confirm-count", "2", false).await;
    for id in [&first, &second] {
        client
            .find(Locator::Css(&format!("tr.bulk-id[data-id='{id}']")))
            .await
            .unwrap();
    }
    let third = fail_one("cs-phone-with-a-rather-long-control-space-id-3").await;
    let (status, body) = h
        .post(
            &format!("/v1/commands/{second}/retry"),
            &json!({"reason": "meanwhile"}),
            None,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let page = eval(
        &client,
        "return document.documentElement.scrollWidth <= window.innerWidth;",
    )
    .await;
    assert_eq!(
        page, true,
        "the confirmation does not scroll sideways either"
    );
    shot(&client, "10-phone-bulk-confirm").await;
    client
        .find(Locator::Css("#bulk-reason"))
        .await
        .unwrap()
        .send_keys("tenant gone")
        .await
        .unwrap();
    client
        .find(Locator::Css("#bulk-confirm"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_text(
        &client,
        "#bulk-result",
        "1 commands acted on, 0 refused, 1 skipped",
        false,
    )
    .await;
    wait_text(&client, "#bulk-skipped", &second, false).await;
    shot(&client, "11-phone-bulk-done").await;
    let status_of = |id: String| {
        let h = &h;
        async move { h.get(&format!("/v1/commands/{id}")).await.1["status"].clone() }
    };
    assert_eq!(status_of(first.clone()).await, "abandoned");
    assert_ne!(status_of(second.clone()).await, "abandoned");
    assert_eq!(
        status_of(third.clone()).await,
        "failed",
        "not named, not touched"
    );

    client.close().await.unwrap();

    // At 1400 px the table uses the width it has.
    let wide_profile = tempfile::tempdir().unwrap();
    let client = start_browser(&browser, &driver, wide_profile.path(), "1400,900", None).await;
    log_in(&client, &h).await;
    client.goto(&h.url("/ui/commands")).await.unwrap();
    wait_text(&client, "#matching", "commands match", false).await;
    let wide = eval(
        &client,
        "const t = document.querySelector('#commands');
         return { table: t.getBoundingClientRect().width, view: window.innerWidth,
                  rows: t.firstElementChild.getBoundingClientRect().width,
                  scrollbar: t.offsetHeight - t.clientHeight - parseFloat(getComputedStyle(t).borderTopWidth) };",
    )
    .await;
    let n = |k: &str| wide[k].as_f64().unwrap();
    assert!(
        n("view") > 1300.0 && n("table") > n("view") - 80.0,
        "{wide}"
    );
    // The rows fit the box (sub-pixel widths aside): no scrollbar at 1400 px.
    assert!(n("rows") <= n("table") + 0.5, "{wide}");
    assert_eq!(
        n("scrollbar"),
        0.0,
        "no sideways scrollbar at 1400 px: {wide}"
    );
    shot(&client, "12-wide-commands").await;
    client.close().await.unwrap();
}
