//! Contract tests: `HttpDirectoryProvider` against the reference directory, with and without
//! faults. Every answer is verified before parsing; each refusal has a test named after it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tenantry_directory::batch::{directory_event_revisions, validate_batch, validate_delta};
use tenantry_directory::testing as fixtures;
use tenantry_directory::{InstanceUuid, WorkspaceUuid};
use tenantry_ports::directory::{DirectoryProvider, ProviderError};
use tenantry_remote_http::directory::signature::TrustedKeys;
use tenantry_remote_http::directory::{DirectoryClientConfig, HttpDirectoryProvider};
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::fault::{Fault, Route};

fn instance() -> InstanceUuid {
    InstanceUuid::parse("inst-1").unwrap()
}

fn ws(uuid: &str) -> WorkspaceUuid {
    WorkspaceUuid::parse(uuid).unwrap()
}

async fn start() -> ReferenceDirectory {
    let (_, dir) = ReferenceDirectory::start(DirectoryServerConfig::new(instance()))
        .await
        .unwrap();
    dir.change(|m| {
        m.upsert_workspace(fixtures::workspace("ws-1", 1, &[("acc-1", 1)]));
        m.upsert_workspace(fixtures::workspace("ws-2", 1, &[("acc-2", 1)]));
        m.entitlement_changed(&ws("ws-1"));
        m.remove_workspace(&ws("ws-2"));
    });
    dir
}

fn trust_all(dir: &ReferenceDirectory) -> TrustedKeys {
    let mut keys = TrustedKeys::new();
    for (id, key) in dir.trusted_public_keys() {
        keys.insert(id, &key).unwrap();
    }
    keys
}

fn client(dir: &ReferenceDirectory) -> HttpDirectoryProvider {
    HttpDirectoryProvider::new(&DirectoryClientConfig::new(dir.base_url(), trust_all(dir))).unwrap()
}

fn invalid_message(err: ProviderError) -> String {
    match err {
        ProviderError::InvalidResponse { message, .. } => message,
        other => panic!("expected an invalid response, got {other:?}"),
    }
}

#[tokio::test]
async fn snapshot_events_and_delta_verify_and_parse() {
    let dir = start().await;
    let p = client(&dir);
    let snapshot = p.fetch_snapshot(&instance()).await.unwrap();
    assert_eq!(snapshot.cursor, 4);
    assert_eq!(snapshot.workspaces.len(), 1);
    let first = p.fetch_events(&instance(), 0, 2).await.unwrap();
    validate_batch(&first, &instance(), 0).unwrap();
    assert_eq!(
        (first.cursor, first.high_water_cursor, first.events.len()),
        (2, 4, 2)
    );
    let rest = p
        .fetch_events(&instance(), first.cursor, 100)
        .await
        .unwrap();
    validate_batch(&rest, &instance(), 2).unwrap();
    assert_eq!(rest.cursor, rest.high_water_cursor);
    let all = p.fetch_events(&instance(), 0, 100).await.unwrap();
    let requested: Vec<_> = directory_event_revisions(&all.events).into_keys().collect();
    let delta = p.fetch_workspaces(&instance(), &requested).await.unwrap();
    validate_delta(&delta, &all, &instance()).unwrap();
    assert_eq!(delta.requested_workspace_uuids, [ws("ws-1"), ws("ws-2")]);
    assert_eq!(delta.workspaces.len(), 1, "ws-2 was removed: a tombstone");
}

#[tokio::test]
async fn rotated_signing_key_is_accepted_only_when_trusted() {
    let dir = start().await;
    let both = client(&dir);
    let (first_id, first_key) = dir.trusted_public_keys()[0].clone();
    let mut only_first = TrustedKeys::new();
    only_first.insert(first_id.clone(), &first_key).unwrap();
    let old = HttpDirectoryProvider::new(&DirectoryClientConfig::new(dir.base_url(), only_first))
        .unwrap();
    old.fetch_snapshot(&instance()).await.unwrap();
    let rotated = dir.rotate_signing_key();
    assert_ne!(rotated, first_id);
    both.fetch_snapshot(&instance()).await.unwrap();
    let message = invalid_message(old.fetch_snapshot(&instance()).await.unwrap_err());
    assert!(message.contains("untrusted key id"), "{message}");
}

#[tokio::test]
async fn unsigned_answer_is_refused() {
    let dir = start().await;
    dir.script(Route::DirectorySnapshot, [Some(Fault::Unsigned)]);
    let p = client(&dir);
    let message = invalid_message(p.fetch_snapshot(&instance()).await.unwrap_err());
    assert!(message.contains("unsigned"), "{message}");
    p.fetch_snapshot(&instance()).await.unwrap();
}

#[tokio::test]
async fn bad_signature_is_refused() {
    let dir = start().await;
    dir.script(Route::DirectoryEvents, [Some(Fault::BadSignature)]);
    let p = client(&dir);
    let error = p.fetch_events(&instance(), 0, 10).await.unwrap_err();
    // The verifier's own error is kept as the source.
    let source = std::error::Error::source(&error).expect("the signature error is kept");
    assert!(
        source.is::<tenantry_remote_http::SignatureError>(),
        "{source:?}"
    );
    let message = invalid_message(error);
    assert!(message.contains("does not verify"), "{message}");
}

#[tokio::test]
async fn untrusted_signing_key_is_refused() {
    let dir = start().await;
    dir.script(
        Route::DirectoryWorkspaces,
        [Some(Fault::UntrustedSignature)],
    );
    let p = client(&dir);
    let message = invalid_message(
        p.fetch_workspaces(&instance(), &[ws("ws-1")])
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("untrusted key id \"untrusted\""),
        "{message}"
    );
}

#[tokio::test]
async fn skewed_timestamp_is_refused() {
    let dir = start().await;
    dir.script(Route::DirectorySnapshot, [Some(Fault::SkewedTimestamp)]);
    let p = client(&dir);
    let message = invalid_message(p.fetch_snapshot(&instance()).await.unwrap_err());
    assert!(message.contains("at most 300s"), "{message}");
}

#[tokio::test]
async fn stale_page_is_served_with_a_valid_signature() {
    let dir = start().await;
    let p = client(&dir);
    let before = p.fetch_snapshot(&instance()).await.unwrap();
    dir.change(|m| m.upsert_workspace(fixtures::workspace("ws-3", 1, &[("acc-3", 1)])));
    dir.script(Route::DirectorySnapshot, [Some(Fault::StalePage)]);
    let stale = p.fetch_snapshot(&instance()).await.unwrap();
    assert_eq!(
        stale.cursor, before.cursor,
        "the projector must refuse this rollback"
    );
    let fresh = p.fetch_snapshot(&instance()).await.unwrap();
    assert_eq!(fresh.cursor, before.cursor + 1);
}

#[tokio::test]
async fn replayed_answer_for_another_request_is_refused() {
    let dir = start().await;
    let p = client(&dir);
    // The caught-up empty page after cursor 4, signed for `after=4`.
    let empty = p.fetch_events(&instance(), 4, 100).await.unwrap();
    assert_eq!(
        (empty.after_cursor, empty.cursor, empty.events.len()),
        (4, 4, 0)
    );
    // Replayed as the answer to `after=2` (to hide the events after 2): the signature binds
    // the query, so it does not verify.
    dir.script(Route::DirectoryEvents, [Some(Fault::ReplayedResponse)]);
    let message = invalid_message(p.fetch_events(&instance(), 2, 100).await.unwrap_err());
    assert!(
        message.contains("does not verify over the request sent"),
        "{message}"
    );
    // The same request replayed within the skew window still verifies: the projector's
    // cursor rules and the empty-page rule judge it.
    let fresh = p.fetch_events(&instance(), 2, 100).await.unwrap();
    dir.script(Route::DirectoryEvents, [Some(Fault::ReplayedResponse)]);
    assert_eq!(p.fetch_events(&instance(), 2, 100).await.unwrap(), fresh);
}

#[tokio::test]
async fn oversized_response_is_refused() {
    let dir = start().await;
    let config = DirectoryClientConfig {
        max_response_bytes: 64,
        ..DirectoryClientConfig::new(dir.base_url(), trust_all(&dir))
    };
    let p = HttpDirectoryProvider::new(&config).unwrap();
    let error = p.fetch_snapshot(&instance()).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::TooLarge { limit: 64, size } if size > 64),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("exceeds the 64-byte limit"), "{message}");
    assert!(
        message.contains("directory_max_response_bytes"),
        "the refusal names the setting: {message}"
    );
}

#[tokio::test]
async fn unavailable_and_rate_limited_are_refusals_with_status() {
    let dir = start().await;
    dir.script(
        Route::DirectorySnapshot,
        [
            Some(Fault::Unavailable {
                retry_after_secs: 3,
            }),
            Some(Fault::RateLimited {
                retry_after_secs: 3,
            }),
        ],
    );
    let p = client(&dir);
    for status in [503, 429] {
        match p.fetch_snapshot(&instance()).await.unwrap_err() {
            ProviderError::Refused { status: s, .. } => assert_eq!(s, status),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn lost_or_reset_answer_is_unavailable() {
    let dir = start().await;
    dir.script(
        Route::DirectoryEvents,
        [Some(Fault::LostAck), Some(Fault::ResetAfterCommit)],
    );
    let p = client(&dir);
    for _ in 0..2 {
        assert!(matches!(
            p.fetch_events(&instance(), 0, 10).await.unwrap_err(),
            ProviderError::Unavailable { .. }
        ));
    }
    p.fetch_events(&instance(), 0, 10).await.unwrap();
}

#[tokio::test]
async fn unknown_instance_is_refused_not_found() {
    let dir = start().await;
    let p = client(&dir);
    let other = InstanceUuid::parse("inst-2").unwrap();
    assert!(matches!(
        p.fetch_snapshot(&other).await.unwrap_err(),
        ProviderError::Refused { status: 404, .. }
    ));
}

#[tokio::test]
async fn bearer_token_is_required_when_configured() {
    let config = DirectoryServerConfig {
        bearer_token: Some("dir-token".into()),
        ..DirectoryServerConfig::new(instance())
    };
    let (url, dir) = ReferenceDirectory::start(config).await.unwrap();
    let anonymous = client(&dir);
    assert!(matches!(
        anonymous.fetch_snapshot(&instance()).await.unwrap_err(),
        ProviderError::Refused { status: 401, .. }
    ));
    let authed = HttpDirectoryProvider::new(&DirectoryClientConfig {
        bearer_token: Some("dir-token".into()),
        ..DirectoryClientConfig::new(url, trust_all(&dir))
    })
    .unwrap();
    authed.fetch_snapshot(&instance()).await.unwrap();
}

#[tokio::test]
async fn connection_refused_is_unavailable() {
    let dir = start().await;
    let p = client(&dir);
    dir.shutdown().await;
    assert!(matches!(
        p.fetch_snapshot(&instance()).await.unwrap_err(),
        ProviderError::Unavailable { .. }
    ));
}
