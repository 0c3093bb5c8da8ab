//! The admin listener's bounds and guards, over real TCP (issue 27): slow connections are
//! closed within the configured timeouts while normal requests go on, a token-less service
//! answers loopback host names only, `/metrics` describes every series from the start, and an
//! expired intent is listed as a fence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::documented_series::documented_series;
use common::{Harness, TOKEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Header-read and body timeout of the slow-connection test.
const TIMEOUT: Duration = Duration::from_secs(1);
/// How long the test waits for the server to close a slow connection: many times the timeout,
/// so a loaded machine does not make it flaky; without the bounds the connection stays open
/// for good and the wait runs out.
const BOUND: Duration = Duration::from_secs(20);

/// Reads until the server closes `stream` (read returns 0 or fails) or `BOUND` passes; returns
/// what was read, or `None` when the connection was still open at the bound.
async fn read_until_closed(stream: &mut TcpStream) -> Option<String> {
    let mut received = Vec::new();
    let closed = tokio::time::timeout(BOUND, async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    closed
        .is_ok()
        .then(|| String::from_utf8_lossy(&received).into_owned())
}

/// Sends one raw HTTP/1.1 request (`Connection: close`) and returns the status and body.
async fn raw_get(addr: std::net::SocketAddr, path: &str, host: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut stream)
        .await
        .expect("answered and closed");
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_connections_are_closed_within_the_header_and_body_timeouts() {
    let h = Harness::start_with(Default::default(), |c| {
        c.admin_header_read_timeout = TIMEOUT;
        c.admin_request_body_timeout = TIMEOUT;
    })
    .await;
    let addr = h.service.as_ref().unwrap().addr();
    let mut silent = Vec::new();
    let mut half_head = Vec::new();
    let mut no_body = Vec::new();
    for _ in 0..3 {
        // Opens a connection and sends nothing.
        silent.push(TcpStream::connect(addr).await.unwrap());
        // Sends half a request head and stops.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            .await
            .unwrap();
        half_head.push(stream);
        // Sends a whole head announcing a body that never comes.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "POST /v1/fences/clear HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"bind"
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        no_body.push(stream);
    }
    let started = Instant::now();

    // Meanwhile a normal request is served.
    let (status, _) = h.get("/healthz").await;
    assert_eq!(status, 200);

    for (kind, streams) in [
        ("silent", &mut silent),
        ("half head", &mut half_head),
        ("no body", &mut no_body),
    ] {
        for stream in streams.iter_mut() {
            let received = read_until_closed(stream).await.unwrap_or_else(|| {
                panic!("{kind} connection still open {BOUND:?} after a {TIMEOUT:?} timeout")
            });
            if kind == "no body" {
                assert!(received.starts_with("HTTP/1.1 400"), "{received}");
                assert!(
                    received.contains("admin_request_body_timeout_seconds"),
                    "{received}"
                );
            }
        }
    }
    assert!(started.elapsed() < BOUND, "{:?}", started.elapsed());
    // And the listener still serves afterwards, on a new connection: the client's pooled one
    // idled past the header-read timeout, so the server may have closed it (by design).
    let (status, body) = raw_get(addr, "/healthz", "127.0.0.1").await;
    assert_eq!(status, 200, "{body}");
}

/// Without `admin_token`, a request addressed to another host name (a DNS-rebinding page) is
/// refused with 421 naming `admin_token`, on the API, the console and the probes alike; loopback
/// names and the listen address are served. With a token any host name is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_only_loopback_host_names_are_answered() {
    let h = Harness::start_with(Default::default(), |c| c.admin_token = None).await;
    let addr = h.service.as_ref().unwrap().addr();
    let port = addr.port();
    for path in ["/v1/commands", "/ui", "/ui/login", "/metrics", "/healthz"] {
        for host in ["rebind.example", &format!("rebind.example:{port}")] {
            let (status, body) = raw_get(addr, path, host).await;
            assert_eq!(status, 421, "{path} Host {host}: {body}");
            assert!(body.contains("HOST_NOT_ALLOWED"), "{body}");
            assert!(body.contains("admin_token"), "{body}");
        }
    }
    for host in [
        format!("localhost:{port}"),
        "localhost".to_owned(),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        addr.to_string(),
    ] {
        let (status, body) = raw_get(addr, "/v1/commands", &host).await;
        assert_eq!(status, 200, "Host {host}: {body}");
    }

    let h = Harness::start().await;
    let addr = h.service.as_ref().unwrap().addr();
    let (status, body) = raw_get(addr, "/healthz", "tenantry.internal").await;
    assert_eq!(status, 200, "{body}");
}

/// A fresh service's `/metrics` has `# HELP` and `# TYPE` for every series in it, and every
/// counter of the documented table is there (at 0) before anything happened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_describe_every_series_and_documented_counters_start_at_zero() {
    let h = Harness::start().await;
    let text = h.metrics().await;
    let mut names = std::collections::BTreeSet::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let name = line.split(['{', ' ']).next().unwrap();
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|b| text.contains(&format!("# TYPE {b} histogram")))
            })
            .unwrap_or(name);
        names.insert(base.to_owned());
    }
    assert!(!names.is_empty(), "{text}");
    for name in &names {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{text}"
        );
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "no TYPE for {name}:\n{text}"
        );
    }
    let documented = documented_series();
    assert!(documented.len() >= 15, "{documented:?}");
    for (name, kind) in documented.iter().filter(|(_, kind)| kind == "counter") {
        assert!(
            text.contains(&format!("# TYPE {name} {kind}")),
            "documented counter {name} missing from a fresh /metrics:\n{text}"
        );
        assert!(
            text.lines().any(|l| l.starts_with(name.as_str())
                && l[name.len()..].starts_with(['{', ' '])
                && l.ends_with(" 0")),
            "documented counter {name} has no series at 0:\n{text}"
        );
    }
}

/// An intent whose holder is gone past its expiry is a fence in `GET /v1/fences` (kind
/// `fence`, failure `intent_expired`); a live one stays an intent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_intent_is_listed_as_a_fence() {
    use tenantry_fence::{Binding, FenceMarker, ScopeIdentity};
    use tenantry_ports::host_storage::HostStorage;
    use tenantry_store_seaorm::host_storage::SeaOrmHostStorage;

    let h = Harness::start().await;
    let storage = SeaOrmHostStorage::new(h.service.as_ref().unwrap().database());
    let binding = Binding::parse("inst-1").unwrap();
    let now_ms = chrono::Utc::now().timestamp_millis();
    let day_ms = 86_400_000;
    for (scope, expires_at_ms) in [("kb-gone", now_ms - day_ms), ("kb-live", now_ms + day_ms)] {
        let scope = ScopeIdentity::object(scope);
        let intent = FenceMarker::intent(
            &scope,
            "upload",
            "vanished",
            now_ms - 2 * day_ms,
            expires_at_ms,
        );
        storage
            .set(&binding, scope.fence_key().as_str(), &intent.to_value())
            .await
            .unwrap();
    }
    let (status, list) = h.get("/v1/fences").await;
    assert_eq!(status, 200, "{list}");
    let items = list["items"].as_array().unwrap();
    let of = |scope: &str| {
        items
            .iter()
            .find(|i| i["scope"] == scope)
            .unwrap_or_else(|| panic!("{scope} not listed: {list}"))
    };
    assert_eq!(of("kb-gone")["kind"], "fence", "{list}");
    assert_eq!(of("kb-gone")["failure_kind"], "intent_expired", "{list}");
    assert_eq!(of("kb-live")["kind"], "intent", "{list}");
}
