//! Tests of the KnowledgeFS client: error and `Retry-After` mapping, decoding, endpoints,
//! configuration, exact path segments (case 009), body caps and bounded remote data (case 010).

use tenantry_kernel::outcome::DispatchOutcome;

use super::*;
use chrono::DateTime;
use reqwest::StatusCode;
use tenantry_kernel::{KnowledgeSpaceId, OperationId};

fn answer(status: u16, retry_after: Option<&str>, body: &str) -> Answer {
    Answer {
        status: StatusCode::from_u16(status).unwrap(),
        retry_after: retry_after.map(str::to_owned),
        body: body.as_bytes().to_vec(),
    }
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

#[test]
fn remote_error_code_and_retry_after_are_mapped() {
    let err = decode::<RemoteSpace>(
        &answer(
            503,
            Some("7"),
            r#"{"code":"KFS_UNAVAILABLE","message":"busy"}"#,
        ),
        now(),
    )
    .unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(503));
    assert_eq!(err.code, "KFS_UNAVAILABLE");
    assert_eq!(err.message, "busy");
    assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
}

#[test]
fn error_without_code_body_gets_a_status_code() {
    let err =
        decode::<RemoteSpace>(&answer(502, None, "<html>bad gateway</html>"), now()).unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(502));
    assert_eq!(err.code, "KFS_HTTP_502");
    assert!(err.message.contains("bad gateway"));
}

#[test]
fn redirect_is_an_answer_not_followed() {
    let err = decode::<RemoteSpace>(&answer(307, None, ""), now()).unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(307));
}

#[test]
fn undecodable_success_body_is_outcome_unknown() {
    let err =
        decode::<RemoteSpace>(&answer(201, None, r#"{"unexpected":true}"#), now()).unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown);
    assert_eq!(err.code, "REMOTE_OUTCOME_UNKNOWN");
}

#[test]
fn success_body_decodes() {
    let space: RemoteSpace = decode(
        &answer(
            200,
            None,
            r#"{"namespace_id":"t1","knowledge_space_id":"ks-1","revision":3}"#,
        ),
        now(),
    )
    .unwrap();
    assert_eq!(space.revision, 3);
}

#[test]
fn retry_after_parses_seconds_and_http_dates() {
    assert_eq!(
        parse_retry_after("120", now()),
        Some(Duration::from_secs(120))
    );
    assert_eq!(
        parse_retry_after("Thu, 01 Jan 2026 00:00:30 GMT", now()),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        parse_retry_after("Wed, 31 Dec 2025 23:00:00 GMT", now()),
        Some(Duration::ZERO)
    );
    assert_eq!(parse_retry_after("soon", now()), None);
    // Far-future values parse; the retry policy caps what it honours
    // (`RetryPolicy::max_retry_after`, 1 hour).
    assert_eq!(
        parse_retry_after("18446744073709551615", now()),
        Some(Duration::from_secs(u64::MAX))
    );
    assert!(
        parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", now()).unwrap()
            > Duration::from_secs(86_400 * 365 * 7000)
    );
}

#[test]
fn endpoint_encodes_segments_and_keeps_a_path_prefix() {
    let fs = HttpKnowledgeFs::new(&KnowledgeFsConfig::new("http://h:1/kfs/", "t")).unwrap();
    let ns = TenantId::parse("a%b?c").unwrap();
    let url = fs.endpoint(&ns, &["spaces", "ks#1/x", "deletion"]).unwrap();
    assert_eq!(
        url.as_str(),
        "http://h:1/kfs/v1/namespaces/a%25b%3Fc/spaces/ks%231%2Fx/deletion"
    );
}

#[test]
fn invalid_configuration_is_refused() {
    let ok = KnowledgeFsConfig::new("http://127.0.0.1:1", "token");
    assert!(HttpKnowledgeFs::new(&ok).is_ok());
    let bad_url = KnowledgeFsConfig::new("ftp://x", "t");
    assert!(matches!(
        HttpKnowledgeFs::new(&bad_url),
        Err(KnowledgeFsConfigError::InvalidBaseUrl { .. })
    ));
    let no_token = KnowledgeFsConfig::new("http://x", "");
    assert_eq!(
        HttpKnowledgeFs::new(&no_token).unwrap_err(),
        KnowledgeFsConfigError::InvalidToken
    );
    let zero = KnowledgeFsConfig {
        max_concurrent_calls: 0,
        ..ok.clone()
    };
    assert_eq!(
        HttpKnowledgeFs::new(&zero).unwrap_err(),
        KnowledgeFsConfigError::ZeroConcurrency
    );
    let zero = KnowledgeFsConfig {
        max_body_bytes: 0,
        ..ok.clone()
    };
    assert_eq!(
        HttpKnowledgeFs::new(&zero).unwrap_err(),
        KnowledgeFsConfigError::ZeroBodyCap
    );
    let zero = KnowledgeFsConfig {
        deadline: Duration::ZERO,
        ..ok
    };
    assert_eq!(
        HttpKnowledgeFs::new(&zero).unwrap_err(),
        KnowledgeFsConfigError::ZeroDeadline
    );
}

/// A server that answers every request with `raw` (read the request headers and body
/// first) and closes the connection.
async fn answering(raw: String) -> String {
    recording(raw).await.0
}

/// [`answering`], also keeping the raw request target of every request.
async fn recording(raw: String) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    crate::path::testing::recording(raw).await
}

#[tokio::test]
async fn case_009_the_remote_receives_every_accepted_id_as_one_exact_segment() {
    let body = r#"{"code":"NOPE","message":"no"}"#;
    let (url, targets) = recording(format!(
        "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let fs = capped_client(&url);
    let shapes = crate::path::testing::accepted_id_shapes();
    assert!(shapes.len() > 250, "{}", shapes.len());
    for id in &shapes {
        let tenant = TenantId::parse(id.as_str()).unwrap();
        let space = KnowledgeSpaceId::parse(id.as_str()).unwrap();
        let deletion = DeletionRequest {
            namespace_id: tenant.clone(),
            control_space_id: ControlSpaceId::parse(id.as_str()).unwrap(),
            operation_id: OperationId::parse("op-1").unwrap(),
            idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
            knowledge_space_id: space.clone(),
            provisioning_key: ProvisioningKey::parse("pk-1").unwrap(),
            expected_revision: 1,
        };
        fs.request_deletion(&deletion).await.unwrap_err();
        let revoke = RevokeRequest {
            namespace_id: tenant.clone(),
            control_space_id: ControlSpaceId::parse(id.as_str()).unwrap(),
            operation_id: OperationId::parse("op-1").unwrap(),
            idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
            knowledge_space_id: space,
            grant_id: tenantry_kernel::GrantId::parse(id.as_str()).unwrap(),
            event_id: "e".into(),
            reason_code: "r".into(),
            revoke_sequence: 1,
            expected_revision: 1,
        };
        fs.revoke_grant(&revoke).await.unwrap_err();
        fs.find_by_provisioning_key(
            &tenant,
            &ProvisioningKey::parse(id.as_str()).unwrap(),
            &ControlSpaceId::parse(id.as_str()).unwrap(),
        )
        .await
        .unwrap_err();
        let sent: Vec<String> = std::mem::take(&mut *targets.lock().unwrap());
        assert_eq!(sent.len(), 3, "{id:?}: {sent:?}");
        let bytes = id.as_bytes().to_vec();
        let deletion = crate::path::testing::id_segments(
            &sent[0],
            &["v1", "namespaces", "*", "spaces", "*", "deletion"],
        );
        assert_eq!(deletion, [bytes.clone(), bytes.clone()], "{id:?}");
        let revocation = crate::path::testing::id_segments(
            &sent[1],
            &[
                "v1",
                "namespaces",
                "*",
                "spaces",
                "*",
                "grants",
                "*",
                "revocations",
            ],
        );
        assert_eq!(
            revocation,
            [bytes.clone(), bytes.clone(), bytes.clone()],
            "{id:?}"
        );
        let lookup =
            crate::path::testing::id_segments(&sent[2], &["v1", "namespaces", "*", "spaces"]);
        assert_eq!(lookup, [bytes], "{id:?}");
        let query = Url::parse(&format!("http://h{}", sent[2])).unwrap();
        let pairs: Vec<(String, String)> = query.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("provisioning_key".to_owned(), id.clone()),
                ("control_space_id".to_owned(), id.clone())
            ],
            "{}",
            sent[2]
        );
    }
    // A few exact targets, spelled out.
    for (id, target) in [
        ("%2e", "/v1/namespaces/%252e/spaces/%252e/deletion"),
        ("...", "/v1/namespaces/.../spaces/.../deletion"),
        ("a;b", "/v1/namespaces/a%3Bb/spaces/a%3Bb/deletion"),
        ("a\\b", "/v1/namespaces/a%5Cb/spaces/a%5Cb/deletion"),
        (
            "caf\u{e9}",
            "/v1/namespaces/caf%C3%A9/spaces/caf%C3%A9/deletion",
        ),
    ] {
        let deletion = DeletionRequest {
            namespace_id: TenantId::parse(id).unwrap(),
            control_space_id: ControlSpaceId::parse("cs").unwrap(),
            operation_id: OperationId::parse("op-1").unwrap(),
            idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
            knowledge_space_id: KnowledgeSpaceId::parse(id).unwrap(),
            provisioning_key: ProvisioningKey::parse("pk-1").unwrap(),
            expected_revision: 1,
        };
        fs.request_deletion(&deletion).await.unwrap_err();
        let sent = std::mem::take(&mut *targets.lock().unwrap());
        assert_eq!(sent, [target.to_owned()], "{id:?}");
    }
}

fn capped_client(url: &str) -> HttpKnowledgeFs {
    HttpKnowledgeFs::new(&KnowledgeFsConfig {
        max_body_bytes: 1024,
        deadline: Duration::from_secs(10),
        ..KnowledgeFsConfig::new(url, "t")
    })
    .unwrap()
}

/// A valid `RemoteSpace` body padded with whitespace to `len` bytes.
fn padded_space(len: usize) -> String {
    let json = r#"{"namespace_id":"t1","knowledge_space_id":"ks-1","revision":1}"#;
    format!("{json}{}", " ".repeat(len.saturating_sub(json.len())))
}

fn provision_request() -> ProvisionRequest {
    ProvisionRequest {
        namespace_id: TenantId::parse("t1").unwrap(),
        control_space_id: ControlSpaceId::parse("cs-1").unwrap(),
        operation_id: OperationId::parse("op-1").unwrap(),
        idempotency_key: IdempotencyKey::parse("idem-1").unwrap(),
        provisioning_key: ProvisioningKey::parse("pk-1").unwrap(),
        name: "N".into(),
        slug: "n".into(),
        icon: String::new(),
        description: String::new(),
        model_intent: None,
        profile_intent: None,
    }
}

#[tokio::test]
async fn over_cap_success_body_of_a_mutation_is_outcome_unknown() {
    // Announced length over the cap.
    let body = padded_space(4096);
    let url = answering(format!(
        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let err = capped_client(&url)
        .provision(&provision_request())
        .await
        .unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown, "{err:?}");
    assert!(err.message.contains("1024-byte limit"), "{}", err.message);

    // No length announced (chunked): the cap applies to the bytes read.
    let chunk = format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len());
    let url = answering(format!(
        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n{chunk}"
    ))
    .await;
    let err = capped_client(&url)
        .provision(&provision_request())
        .await
        .unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown, "{err:?}");

    // Under the cap the same answer is a success.
    let small = padded_space(512);
    let url = answering(format!(
        "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{small}",
        small.len()
    ))
    .await;
    let space = capped_client(&url)
        .provision(&provision_request())
        .await
        .unwrap();
    assert_eq!(space.revision, 1);
}

#[tokio::test]
async fn over_cap_error_body_or_lookup_body_is_an_answered_error() {
    let body = "x".repeat(4096);
    let url = answering(format!(
        "HTTP/1.1 503 Service Unavailable\r\nretry-after: 9\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let err = capped_client(&url)
        .provision(&provision_request())
        .await
        .unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(503));
    assert_eq!(err.code, CODE_RESPONSE_TOO_LARGE);
    assert_eq!(err.retry_after, Some(Duration::from_secs(9)));

    let list = format!(r#"{{"items":[]}}{}"#, " ".repeat(4096));
    let url = answering(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{list}",
        list.len()
    ))
    .await;
    let err = capped_client(&url)
        .find_by_provisioning_key(
            &TenantId::parse("t1").unwrap(),
            &ProvisioningKey::parse("pk-1").unwrap(),
            &ControlSpaceId::parse("cs-1").unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(200));
    assert_eq!(err.code, CODE_RESPONSE_TOO_LARGE);
}

#[tokio::test]
async fn case_010_what_a_remote_says_is_bounded_data() {
    use tenantry_kernel::text::MAX_MESSAGE_BYTES;
    let client = |url: &str| {
        HttpKnowledgeFs::new(&KnowledgeFsConfig {
            deadline: Duration::from_secs(10),
            ..KnowledgeFsConfig::new(url, "t")
        })
        .unwrap()
    };
    let body = serde_json::json!({
        "code": "C".repeat(200 * 1024).to_lowercase(),
        "message": format!("\u{1b}[2J{}", "m".repeat(700 * 1024)),
    })
    .to_string();
    let url = answering(format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await;
    let err = client(&url)
        .provision(&provision_request())
        .await
        .unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(400));
    assert_eq!(err.code, ErrorCode::RemoteErrorCodeInvalid);
    assert!(
        err.message.len() <= MAX_MESSAGE_BYTES,
        "{}",
        err.message.len()
    );
    assert!(
        err.message.starts_with("remote error code \"cccc"),
        "{}",
        err.message
    );
    assert!(!err.message.contains('\u{1b}'));

    // A body that is not `{code, message}`: its first bytes, without controls.
    let raw = "\u{1b}[2J\u{1b}]0;pwned\u{7}<html>";
    let url = answering(format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{raw}",
        raw.len()
    ))
    .await;
    let err = client(&url)
        .provision(&provision_request())
        .await
        .unwrap_err();
    assert_eq!(err.code, "KFS_HTTP_502");
    assert!(
        err.message.ends_with("[2J]0;pwned<html>"),
        "{}",
        err.message
    );
}

#[test]
fn config_debug_redacts_the_token() {
    let cfg = KnowledgeFsConfig::new("http://x", "s3cret");
    assert!(!format!("{cfg:?}").contains("s3cret"));
    let fs = HttpKnowledgeFs::new(&cfg).unwrap();
    assert!(!format!("{fs:?}").contains("s3cret"));
}
