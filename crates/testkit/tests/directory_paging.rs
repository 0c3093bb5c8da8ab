//! Paged snapshots (`docs/protocol.md`, "Paged snapshots"): `HttpDirectoryProvider` fetching a
//! snapshot page by page from the reference directory. Each page is verified on its own; the
//! pages must form one snapshot (same cursor, chained digests, ascending workspaces), or
//! nothing of them is used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::borrow::Cow;

use tenantry_directory::fingerprint::snapshot_fingerprint;
use tenantry_directory::testing as fixtures;
use tenantry_directory::{DirectorySnapshot, InstanceUuid};
use tenantry_ports::directory::{DirectoryProvider, ProviderError, join_pages};
use tenantry_remote_http::directory::signature::TrustedKeys;
use tenantry_remote_http::directory::{DirectoryClientConfig, HttpDirectoryProvider};
use tenantry_testkit::directory::{DirectoryServerConfig, ReferenceDirectory};
use tenantry_testkit::fault::{Fault, Route};

fn instance() -> InstanceUuid {
    InstanceUuid::parse("inst-1").unwrap()
}

/// A directory of `workspaces` workspaces with 3 members each, inserted in descending uuid
/// order (the pages must come out ascending anyway).
async fn start(workspaces: usize) -> ReferenceDirectory {
    // A stalled answer waits 300 ms (the tests stall the first page to change the directory
    // or expire the paging while it is in flight).
    let config = DirectoryServerConfig {
        stall: std::time::Duration::from_millis(300),
        ..DirectoryServerConfig::new(instance())
    };
    let (_, dir) = ReferenceDirectory::start(config).await.unwrap();
    dir.change(|m| {
        for i in (0..workspaces).rev() {
            let uuid = format!("ws-{i:03}");
            let members: Vec<(String, i64)> =
                (0..3).map(|j| (format!("acc-{i:03}-{j}"), 1)).collect();
            let members: Vec<(&str, i64)> = members.iter().map(|(a, r)| (a.as_str(), *r)).collect();
            m.upsert_workspace(fixtures::workspace(&uuid, 1, &members));
        }
    });
    dir
}

fn config(dir: &ReferenceDirectory, page_size: Option<u32>) -> DirectoryClientConfig {
    let mut keys = TrustedKeys::new();
    for (id, key) in dir.trusted_public_keys() {
        keys.insert(id, &key).unwrap();
    }
    DirectoryClientConfig::new(dir.base_url(), keys).with_snapshot_page_size(page_size)
}

fn client(dir: &ReferenceDirectory, page_size: Option<u32>) -> HttpDirectoryProvider {
    HttpDirectoryProvider::new(&config(dir, page_size)).unwrap()
}

fn snapshot_requests(dir: &ReferenceDirectory) -> u64 {
    dir.requests()
        .get(&Route::DirectorySnapshot)
        .copied()
        .unwrap_or(0)
}

fn same_directory(a: &DirectorySnapshot, b: &DirectorySnapshot) {
    assert_eq!(a.cursor, b.cursor);
    assert_eq!(a.instance_uuid, b.instance_uuid);
    assert_eq!(snapshot_fingerprint(a), snapshot_fingerprint(b));
}

fn invalid_message(err: ProviderError) -> String {
    match err {
        ProviderError::InvalidResponse { message, .. } => message,
        other => panic!("expected an invalid response, got {other:?}"),
    }
}

#[tokio::test]
async fn a_paged_snapshot_equals_the_whole_snapshot() {
    let dir = start(10).await;
    let whole = client(&dir, None)
        .fetch_snapshot(&instance())
        .await
        .unwrap();
    assert_eq!(snapshot_requests(&dir), 1);
    // 7 memberships per page: two workspaces (6) per page, five pages.
    let paged = client(&dir, Some(7))
        .fetch_snapshot(&instance())
        .await
        .unwrap();
    assert_eq!(snapshot_requests(&dir), 1 + 5);
    same_directory(&paged, &whole);
    let uuids: Vec<&str> = paged.workspaces.iter().map(|w| w.uuid.as_str()).collect();
    let mut sorted = uuids.clone();
    sorted.sort_unstable();
    assert_eq!(uuids, sorted, "pages come in ascending uuid order");
}

#[tokio::test]
async fn a_workspace_larger_than_the_page_goes_alone() {
    let dir = start(4).await;
    let paged = client(&dir, Some(1))
        .fetch_snapshot(&instance())
        .await
        .unwrap();
    assert_eq!(snapshot_requests(&dir), 4);
    assert_eq!(paged.workspaces.len(), 4);
}

#[tokio::test]
async fn a_stale_page_breaks_the_chain_and_the_next_attempt_starts_again() {
    let dir = start(6).await;
    let p = client(&dir, Some(6));
    // The second page answered with the previous answer of the route (the first page),
    // validly signed for the second page's request.
    dir.script(Route::DirectorySnapshot, [None, Some(Fault::StalePage)]);
    let message = invalid_message(p.fetch_snapshot(&instance()).await.unwrap_err());
    assert!(message.contains("previous page digest"), "{message}");
    let again = p.fetch_snapshot(&instance()).await.unwrap();
    assert_eq!(again.workspaces.len(), 6);
}

#[tokio::test]
async fn a_replayed_page_does_not_verify_for_another_token() {
    let dir = start(6).await;
    let p = client(&dir, Some(6));
    dir.script(
        Route::DirectorySnapshot,
        [None, Some(Fault::ReplayedResponse)],
    );
    let error = p.fetch_snapshot(&instance()).await.unwrap_err();
    let message = invalid_message(error);
    assert!(message.contains("does not verify"), "{message}");
}

#[tokio::test]
async fn every_page_of_one_paging_comes_from_the_same_snapshot() {
    let dir = start(6).await;
    let before = client(&dir, None)
        .fetch_snapshot(&instance())
        .await
        .unwrap();
    // The directory changes after the first page is rendered: the later pages still come from
    // the snapshot the first page started (not from the changed directory, whose cursor would
    // not match), so the result is that snapshot, whole.
    dir.script(
        Route::DirectorySnapshot,
        [Some(Fault::Stall { commit: true })],
    );
    let p = client(&dir, Some(6));
    let asked = snapshot_requests(&dir);
    let fetch = tokio::spawn(async move { p.fetch_snapshot(&instance()).await });
    // The first page is rendered (its paging kept) and held back 300 ms.
    while snapshot_requests(&dir) == asked {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    dir.change(|m| m.upsert_workspace(fixtures::workspace("ws-100", 1, &[("acc-x", 1)])));
    let paged = fetch.await.unwrap().unwrap();
    same_directory(&paged, &before);
}

#[tokio::test]
async fn an_expired_page_token_is_refused_with_410() {
    let dir = start(6).await;
    let p = client(&dir, Some(6));
    dir.script(
        Route::DirectorySnapshot,
        [Some(Fault::Stall { commit: true })],
    );
    let fetch = {
        let p = p.clone();
        tokio::spawn(async move { p.fetch_snapshot(&instance()).await })
    };
    // The first page is rendered (its paging kept) and held back 300 ms.
    while snapshot_requests(&dir) < 1 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    dir.expire_snapshot_pages();
    let error = fetch.await.unwrap().unwrap_err();
    match &error {
        ProviderError::Refused {
            status: 410,
            message,
        } => {
            assert!(
                message.contains("starts again from the first page"),
                "{message}"
            );
        }
        other => panic!("expected 410, got {other:?}"),
    }
    assert_eq!(
        p.fetch_snapshot(&instance())
            .await
            .unwrap()
            .workspaces
            .len(),
        6
    );
}

#[tokio::test]
async fn the_body_cap_counts_every_page_together() {
    let dir = start(6).await;
    let whole = client(&dir, None)
        .fetch_snapshot(&instance())
        .await
        .unwrap();
    let size = serde_json::to_vec(&whole).unwrap().len() as u64;
    // Every page is well under the cap, all pages together are not.
    let config = config(&dir, Some(3)).with_max_response_bytes(size * 2 / 3);
    let error = HttpDirectoryProvider::new(&config)
        .unwrap()
        .fetch_snapshot(&instance())
        .await
        .unwrap_err();
    // A capacity refusal like one body over the cap (the projector backs off longer and the
    // message names the setting), stopped while reading the page that passes it.
    let limit = size * 2 / 3;
    match &error {
        ProviderError::TooLarge {
            size: read,
            limit: cap,
        } => {
            assert_eq!(*cap, limit);
            assert!(*read > limit, "{error}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(
        error.to_string().contains("directory_max_response_bytes"),
        "{error}"
    );
}

#[tokio::test]
async fn a_zero_page_size_is_refused_when_the_client_is_built() {
    let dir = start(1).await;
    let config = config(&dir, Some(0));
    let error = HttpDirectoryProvider::new(&config).unwrap_err();
    assert!(error.to_string().contains("page size"), "{error}");
}

/// The source the projector applies (`fetch_snapshot_source`): a paged snapshot is spooled to a
/// temporary file and read back one page at a time, any number of times; its pages join into
/// the whole snapshot.
#[tokio::test]
async fn a_paged_snapshot_source_is_spooled_and_read_back_page_by_page() {
    let dir = start(10).await;
    let whole = client(&dir, None)
        .fetch_snapshot(&instance())
        .await
        .unwrap();
    let source = client(&dir, Some(7))
        .fetch_snapshot_source(&instance())
        .await
        .unwrap();
    assert_eq!(source.page_count(), 5);
    assert_eq!(source.cursor(), whole.cursor);
    let first = source.read_page(0).unwrap().into_owned();
    assert_eq!(first.len(), 2);
    assert!(
        matches!(source.read_page(0), Ok(Cow::Owned(_))),
        "read back, not held"
    );
    assert_eq!(source.read_page(0).unwrap().into_owned(), first);
    let joined = join_pages(source.as_ref(), whole.generated_at).unwrap();
    same_directory(&joined, &whole);
    // A provider that answers in one body: one page, held.
    let source = client(&dir, None)
        .fetch_snapshot_source(&instance())
        .await
        .unwrap();
    assert_eq!(source.page_count(), 1);
    assert!(matches!(source.read_page(0), Ok(Cow::Borrowed(_))));
}

#[tokio::test]
async fn a_broken_page_refuses_the_spooled_source_and_the_next_attempt_starts_again() {
    let dir = start(6).await;
    let p = client(&dir, Some(6));
    dir.script(Route::DirectorySnapshot, [None, Some(Fault::StalePage)]);
    let Err(error) = p.fetch_snapshot_source(&instance()).await else {
        panic!("a stale page was spooled");
    };
    let message = invalid_message(error);
    assert!(message.contains("previous page digest"), "{message}");
    let again = p.fetch_snapshot_source(&instance()).await.unwrap();
    assert_eq!(again.page_count(), 3);
}
