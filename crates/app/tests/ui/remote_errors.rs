//! Case 010: error strings of a hostile KnowledgeFS are bounded data, stored and shown
//! without control characters, with metric labels of a closed set.

use std::time::Duration;

use serde_json::json;

use crate::SETTLE;
use crate::common::console::Console;
use crate::common::{Harness, TOKEN};

/// A KnowledgeFS stand-in that answers every request `400` with the next body of `bodies`
/// (the last one again once they run out); returns its base URL.
async fn hostile_remote(bodies: Vec<String>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut next = 0;
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = bodies[next.min(bodies.len() - 1)].clone();
            next += 1;
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    seen.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&seen).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if seen.len() >= end + 4 + length {
                            break;
                        }
                    }
                    if n == 0 {
                        break;
                    }
                }
                let answer = format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                socket.write_all(answer.as_bytes()).await.ok();
                socket.shutdown().await.ok();
            });
        }
    });
    url
}

/// Case 010: a KnowledgeFS that answers a 200 KB code, then 50 distinct codes, each message
/// holding `ESC [2J` (the first one 700 KB of it): what is stored is bounded, the metric
/// labels stay a closed set, and the console shows no control character and no 200 KB word.
#[tokio::test]
async fn case_010_remote_error_strings_are_bounded_data() {
    use tenantry_kernel::text::MAX_MESSAGE_BYTES;
    let mut bodies = vec![
        json!({
            "code": "c".repeat(200 * 1024),
            "message": format!("\u{1b}[2J{}", "m".repeat(700 * 1024)),
        })
        .to_string(),
    ];
    for i in 0..50 {
        bodies.push(
            json!({"code": format!("HOSTILE_CODE_{i}"), "message": format!("\u{1b}[2Jcode {i}")})
                .to_string(),
        );
    }
    let remote = hostile_remote(bodies).await;
    let h = Harness::start_with(Default::default(), |config| {
        config.knowledge_fs_url = Some(remote);
    })
    .await;
    let mut ids = Vec::new();
    for i in 0..51 {
        let cs = format!("cs-{i}");
        let created = h.create("t-1", &cs).await;
        ids.push(created["command_id"].as_str().unwrap().to_owned());
        // One at a time, so the first command gets the first (200 KB) answer.
        h.wait_for(
            &format!("/v1/tenants/t-1/control-spaces/{cs}"),
            |b| b["lifecycle_status"] == "failed",
            SETTLE,
        )
        .await;
    }
    // Stored: the fixed code, the original quoted and bounded, no control character.
    let (status, first) = h.get(&format!("/v1/commands/{}", ids[0])).await;
    assert_eq!(status, 200);
    assert_eq!(
        first["last_error"]["code"], "REMOTE_ERROR_CODE_INVALID",
        "{first}"
    );
    let message = first["last_error"]["message"].as_str().unwrap();
    assert!(
        message.len() <= MAX_MESSAGE_BYTES,
        "{} bytes",
        message.len()
    );
    assert!(message.starts_with("remote error code \"cccc"), "{message}");
    assert!(!message.contains('\u{1b}'));
    for error in first["errors"].as_array().unwrap() {
        assert!(error["message"].as_str().unwrap().len() <= MAX_MESSAGE_BYTES);
    }
    let records = h.commands().await;
    let stored: usize = records
        .iter()
        .map(|c| {
            c.last_error_message.as_deref().map_or(0, str::len)
                + c.last_error_code.as_ref().map_or(0, |c| c.as_str().len())
        })
        .sum();
    assert!(
        stored < 51 * (MAX_MESSAGE_BYTES + 64),
        "{stored} bytes stored"
    );
    let (_, last) = h.get(&format!("/v1/commands/{}", ids[50])).await;
    assert_eq!(last["last_error"]["code"], "HOSTILE_CODE_49", "{last}");
    assert_eq!(last["last_error"]["message"], "[2Jcode 49");
    // Metrics: no remote code became a label value.
    let metrics = h.metrics().await;
    assert!(
        !metrics.contains("HOSTILE_CODE_"),
        "a remote code became a label"
    );
    assert!(
        metrics.lines().all(|l| l.len() < 1024),
        "a long label was rendered"
    );
    assert!(
        metrics.contains("code=\"REMOTE_ERROR_CODE_INVALID\"")
            && metrics.contains("code=\"OTHER\""),
        "{metrics}"
    );
    // The console: no control character, no 200 KB word, on the overview and the detail.
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    for (path, body) in pages_showing(&console, &ids[0]).await {
        assert!(!body.contains('\u{1b}'), "{path} shows an escape");
        assert!(body.len() < 256 * 1024, "{path}: {} bytes", body.len());
    }
}

/// Case 010, at display: a row written before the bounds (a 200 KB code with escape
/// sequences, a message holding `ESC [2J`) is shown bounded and without control characters.
#[tokio::test]
async fn case_010_the_console_bounds_text_of_old_rows_too() {
    use tenantry_kernel::LeaseOwner;
    use tenantry_lifecycle::{ErrorCode, ErrorRecord, Settlement};
    use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
    use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

    // Provisions are not dispatched, so this test claims the command itself.
    let h = Harness::start_with(Default::default(), |config| config.product_enabled = false).await;
    let created = h.create("t-1", "cs-old").await;
    let id = created["command_id"].as_str().unwrap().to_owned();
    let store = SeaOrmLifecycleStore::new(&h.db.db);
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("old-version").unwrap(),
            lease_duration: Duration::from_secs(60),
            include_provision: true,
            limit: 1,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    assert_eq!(claimed[0].id().as_str(), id);
    // Built field by field: what an older version stored, without today's bounds.
    let old_row = ErrorRecord {
        code: ErrorCode::from(format!("\u{1b}[2J{}", "X".repeat(200 * 1024))),
        message: format!("\u{1b}]0;pwned\u{7}{}", "m".repeat(700 * 1024)),
    };
    store
        .settle(
            &claimed[0].lease,
            &Settlement::fail(chrono::Utc::now(), old_row),
        )
        .await
        .unwrap();
    let mut console = Console::new(&h.base);
    console.login(TOKEN).await;
    for (path, body) in pages_showing(&console, &id).await {
        assert!(
            !body.chars().any(|c| c.is_control() && !c.is_whitespace()),
            "{path} shows a control character"
        );
    }
}

/// The console pages that show command `id`'s error (the overview, its detail, the failed
/// list), each checked to answer 200 without a word of 4 KiB or more; each path with its body.
async fn pages_showing(console: &Console, id: &str) -> Vec<(String, String)> {
    let mut pages = Vec::new();
    for path in [
        "/ui".to_owned(),
        format!("/ui/commands/{id}"),
        "/ui/commands?status=failed".to_owned(),
    ] {
        let page = console.get(&path).await;
        assert_eq!(page.status, 200, "{path}");
        let longest_word = page
            .body
            .split_whitespace()
            .map(str::len)
            .max()
            .unwrap_or(0);
        assert!(longest_word < 4096, "{path}: a {longest_word}-byte word");
        pages.push((path, page.body));
    }
    pages
}
