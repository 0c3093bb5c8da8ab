//! Dispatch-outcome classification against a real local TCP server that misbehaves on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tenantry_kernel::DispatchOutcome;
use tenantry_remote_http::client::mutation_client;
use tenantry_remote_http::outcome::{classify, classify_error, read_answer};
use tenantry_remote_http::tls::RemoteTls;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

/// Deadline for requests the server stalls; a bound on waiting, not a sleep.
const STALL_DEADLINE: Duration = Duration::from_millis(300);
/// Deadline for requests the server answers promptly.
const PROMPT_DEADLINE: Duration = Duration::from_secs(10);

/// What the test server does with each request it accepts.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Reads the request, then keeps the socket open without answering.
    NeverAnswer,
    /// Reads the request, sends headers and part of the body, then stalls.
    StallBody,
    /// Reads the request and answers with this raw response.
    Answer(&'static str),
    /// Reads the request (commits), then closes the socket without answering.
    CloseAfterCommit,
}

struct Server {
    url: String,
    requests: Arc<AtomicUsize>,
    _stop: oneshot::Sender<()>,
}

async fn serve(behaviour: Behaviour) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/mutate", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let (stop, mut stopped) = oneshot::channel::<()>();
    let counter = requests.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            tokio::select! {
                _ = &mut stopped => break,
                accepted = listener.accept() => {
                    let (mut socket, _) = accepted.unwrap();
                    read_request(&mut socket).await;
                    counter.fetch_add(1, Ordering::SeqCst);
                    match behaviour {
                        Behaviour::NeverAnswer => held.push(socket),
                        Behaviour::StallBody => {
                            socket
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"partial\":")
                                .await
                                .unwrap();
                            held.push(socket);
                        }
                        Behaviour::Answer(raw) => {
                            socket.write_all(raw.as_bytes()).await.unwrap();
                            socket.shutdown().await.ok();
                        }
                        Behaviour::CloseAfterCommit => drop(socket),
                    }
                }
            }
        }
    });
    Server {
        url,
        requests,
        _stop: stop,
    }
}

/// Reads one HTTP/1.1 request: headers, then `content-length` bytes of body.
async fn read_request(socket: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        let n = socket.read(&mut chunk).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + length {
                let n = socket.read(&mut chunk).await.unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&chunk[..n]);
            }
            return;
        }
    }
}

async fn post(url: &str, deadline: Duration) -> Result<reqwest::Response, reqwest::Error> {
    mutation_client(deadline, &RemoteTls::default())
        .unwrap()
        .post(url)
        .header("idempotency-key", "op-1")
        .json(&serde_json::json!({"provisioning_key": "pk"}))
        .send()
        .await
}

#[tokio::test]
async fn refused_connection_is_not_dispatched() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/mutate", listener.local_addr().unwrap());
    drop(listener);
    let error = post(&url, PROMPT_DEADLINE).await.unwrap_err();
    assert_eq!(classify_error(&error), DispatchOutcome::NotDispatched);
    let failure = read_answer(Err(error)).await.unwrap_err();
    assert_eq!(failure.outcome, DispatchOutcome::NotDispatched);
}

/// A port that refuses connections (bound, then closed).
async fn refusing_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

#[tokio::test]
async fn transport_failures_keep_the_reqwest_error_as_source() {
    use std::error::Error as _;

    let url = format!("{}/v1/mutate", refusing_url().await);
    let failure = read_answer(post(&url, PROMPT_DEADLINE).await)
        .await
        .unwrap_err();
    let source = failure.source().expect("the reqwest error is kept");
    assert!(source.is::<reqwest::Error>(), "{source:?}");

    #[cfg(feature = "lifecycle")]
    {
        let fs = tenantry_remote_http::knowledge_fs::HttpKnowledgeFs::new(
            &tenantry_remote_http::knowledge_fs::KnowledgeFsConfig::new(refusing_url().await, "t"),
        )
        .unwrap();
        let error = tenantry_ports::lifecycle::KnowledgeFs::find_by_provisioning_key(
            &fs,
            &tenantry_kernel::TenantId::parse("t1").unwrap(),
            &tenantry_kernel::ProvisioningKey::parse("pk").unwrap(),
            &tenantry_kernel::ControlSpaceId::parse("cs").unwrap(),
        )
        .await
        .unwrap_err();
        assert_eq!(error.failure, DispatchOutcome::NotDispatched);
        let source = error.source().expect("the reqwest error is kept");
        let reqwest_error = source.downcast_ref::<reqwest::Error>().unwrap();
        assert!(reqwest_error.is_connect(), "{reqwest_error:?}");
        assert!(
            error.message.contains(&reqwest_error.to_string()),
            "{error}"
        );
    }
}

#[tokio::test]
async fn request_never_answered_is_outcome_unknown() {
    let server = serve(Behaviour::NeverAnswer).await;
    let (outcome, answer) = classify(post(&server.url, STALL_DEADLINE).await).await;
    assert_eq!(outcome, DispatchOutcome::OutcomeUnknown);
    assert!(answer.is_none());
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "no retry");
}

#[tokio::test]
async fn stalled_body_is_outcome_unknown() {
    let server = serve(Behaviour::StallBody).await;
    let response = post(&server.url, STALL_DEADLINE)
        .await
        .expect("headers arrive");
    assert_eq!(response.status(), 200);
    let failure = read_answer(Ok(response)).await.unwrap_err();
    assert_eq!(failure.outcome, DispatchOutcome::OutcomeUnknown);
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn conflict_answer_is_answered() {
    let server = serve(Behaviour::Answer(
        "HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: 43\r\nconnection: close\r\n\r\n{\"code\":\"conflict\",\"message\":\"state moved\"}",
    ))
    .await;
    let (outcome, answer) = classify(post(&server.url, PROMPT_DEADLINE).await).await;
    assert_eq!(outcome, DispatchOutcome::answered(409));
    let answer = answer.unwrap();
    assert_eq!(answer.status, 409);
    let body: serde_json::Value = answer.json().unwrap();
    assert_eq!(body["code"], "conflict");
}

#[tokio::test]
async fn commit_then_close_without_answer_is_outcome_unknown() {
    let server = serve(Behaviour::CloseAfterCommit).await;
    let error = post(&server.url, PROMPT_DEADLINE).await.unwrap_err();
    assert_eq!(
        classify_error(&error),
        DispatchOutcome::OutcomeUnknown,
        "{error:?}"
    );
    assert_eq!(server.requests.load(Ordering::SeqCst), 1, "no retry");
}

#[tokio::test]
async fn mutation_client_follows_no_redirect() {
    let server = serve(Behaviour::Answer(
        "HTTP/1.1 307 Temporary Redirect\r\nlocation: /elsewhere\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    ))
    .await;
    let (outcome, answer) = classify(post(&server.url, PROMPT_DEADLINE).await).await;
    assert_eq!(outcome, DispatchOutcome::answered(307));
    assert_eq!(answer.unwrap().status, 307);
    assert_eq!(server.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn retry_after_is_kept_with_the_answer() {
    let server = serve(Behaviour::Answer(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 7\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
    ))
    .await;
    let (outcome, answer) = classify(post(&server.url, PROMPT_DEADLINE).await).await;
    // Nobody read the body as the remote's own error: a gateway may have answered.
    assert_eq!(outcome, DispatchOutcome::OutcomeUnknown);
    let answer = answer.unwrap();
    assert_eq!(answer.retry_after.as_deref(), Some("7"));
    assert_eq!(answer.outcome_given(true), DispatchOutcome::answered(503));
}

/// Issue 29: a gateway's 502/503/504 (its own page, not the remote's error) may have left the
/// request applied behind it: for a fenced write the outcome is unknown, and the scope fences.
#[tokio::test]
async fn a_gateway_5xx_page_is_outcome_unknown_unless_the_body_is_the_remotes_error() {
    for (status, reason) in [
        (502, "Bad Gateway"),
        (503, "Service Unavailable"),
        (504, "Gateway Timeout"),
    ] {
        let body = "<html>upstream timed out</html>";
        let raw: &'static str = Box::leak(
            format!(
                "HTTP/1.1 {status} {reason}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_boxed_str(),
        );
        let server = serve(Behaviour::Answer(raw)).await;
        let (outcome, answer) = classify(post(&server.url, PROMPT_DEADLINE).await).await;
        assert_eq!(outcome, DispatchOutcome::OutcomeUnknown, "{status}");
        let answer = answer.unwrap();
        assert_eq!(answer.status, status);
        assert_eq!(answer.outcome(), DispatchOutcome::OutcomeUnknown);
        assert_eq!(
            answer.outcome_given(true),
            DispatchOutcome::answered(status),
            "the remote's own error is its answer"
        );
    }
}

#[tokio::test]
async fn undecodable_success_body_is_outcome_unknown() {
    let server = serve(Behaviour::Answer(
        "HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nnot json",
    ))
    .await;
    let (outcome, answer) = classify(post(&server.url, PROMPT_DEADLINE).await).await;
    assert_eq!(
        outcome,
        DispatchOutcome::answered(200),
        "the body was read completely"
    );
    let failure = answer.unwrap().json::<serde_json::Value>().unwrap_err();
    assert_eq!(failure.outcome, DispatchOutcome::OutcomeUnknown);
}

#[tokio::test]
async fn body_cut_short_is_outcome_unknown() {
    let server = serve(Behaviour::Answer(
        "HTTP/1.1 200 OK\r\ncontent-length: 100\r\nconnection: close\r\n\r\n{\"revision\":",
    ))
    .await;
    let (outcome, answer) = classify(post(&server.url, PROMPT_DEADLINE).await).await;
    assert_eq!(outcome, DispatchOutcome::OutcomeUnknown);
    assert!(answer.is_none());
}
