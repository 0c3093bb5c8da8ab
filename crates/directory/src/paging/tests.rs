//! Table tests of joining a paged snapshot: each page rule, the byte cap, the digest.

use super::*;
use crate::model::SnapshotPageLink;
use crate::testing::*;

const LIMIT: u64 = 1_000_000;

/// Page `number` of a snapshot at `cursor`: its workspaces, the previous page's digest, and a
/// next token unless it is the last.
fn page(
    cursor: i64,
    uuids: &[&str],
    previous: Option<&str>,
    next: Option<&str>,
) -> DirectorySnapshotPage {
    DirectorySnapshotPage {
        instance_uuid: instance(),
        cursor,
        generated_at: at(100),
        workspaces: uuids.iter().map(|u| workspace(u, 1, &[("a", 1)])).collect(),
        page: Some(SnapshotPageLink {
            previous_page_digest: previous.map(str::to_owned),
            next_page_token: next.map(str::to_owned),
        }),
    }
}

fn uuids(snapshot: &DirectorySnapshot) -> Vec<&str> {
    snapshot
        .workspaces
        .iter()
        .map(|w| w.uuid.as_str())
        .collect()
}

#[test]
fn pages_chained_by_digest_join_into_one_snapshot() {
    let pages = SnapshotPages::first(
        page(7, &["ws-1", "ws-2"], None, Some("t2")),
        "d1".into(),
        10,
        LIMIT,
    )
    .unwrap();
    assert_eq!(pages.next_token(), Some("t2"));
    let pages = pages
        .push(page(7, &["ws-3"], Some("d1"), Some("t3")), "d2".into(), 10)
        .unwrap();
    let pages = pages
        .push(page(7, &["ws-4"], Some("d2"), None), "d3".into(), 10)
        .unwrap();
    assert_eq!(pages.next_token(), None);
    assert_eq!(pages.pages(), 3);
    let snapshot = pages.finish().unwrap();
    assert_eq!(snapshot.cursor, 7);
    assert_eq!(uuids(&snapshot), ["ws-1", "ws-2", "ws-3", "ws-4"]);
    assert_eq!(snapshot.generated_at, at(100));
}

#[test]
fn joined_member_lists_hold_no_spare_room() {
    let mut first = page(7, &["ws-1"], None, Some("t2"));
    let mut second = page(7, &["ws-2"], Some("d1"), None);
    for workspace in first.workspaces.iter_mut().chain(&mut second.workspaces) {
        workspace.members.reserve(100);
    }
    let snapshot = SnapshotPages::first(first, "d1".into(), 1, LIMIT)
        .and_then(|pages| pages.push(second, "d2".into(), 1))
        .and_then(SnapshotPages::finish)
        .unwrap();
    for workspace in &snapshot.workspaces {
        assert_eq!(workspace.members.capacity(), workspace.members.len());
    }
}

#[test]
fn a_whole_snapshot_needs_no_order_and_no_further_page() {
    let mut whole = page(3, &["ws-2", "ws-1"], None, None);
    whole.page = None;
    let pages = SnapshotPages::first(whole, "d".into(), 10, LIMIT).unwrap();
    assert_eq!(pages.next_token(), None);
    assert_eq!(uuids(&pages.finish().unwrap()), ["ws-2", "ws-1"]);
}

#[test]
fn each_broken_page_rule_refuses_the_snapshot() {
    let first = || {
        SnapshotPages::first(page(7, &["ws-2"], None, Some("t2")), "d1".into(), 10, LIMIT).unwrap()
    };
    type Case = (&'static str, DirectorySnapshotPage, fn(&PageError) -> bool);
    let cases: Vec<Case> = vec![
        (
            "not a page",
            {
                let mut p = page(7, &["ws-3"], Some("d1"), None);
                p.page = None;
                p
            },
            |e| matches!(e, PageError::NotAPage { number: 2 }),
        ),
        (
            "another instance",
            {
                let mut p = page(7, &["ws-3"], Some("d1"), None);
                p.instance_uuid = InstanceUuid::parse("other").unwrap();
                p
            },
            |e| matches!(e, PageError::InstanceChanged { number: 2, .. }),
        ),
        (
            "another cursor",
            page(8, &["ws-3"], Some("d1"), None),
            |e| {
                matches!(
                    e,
                    PageError::CursorChanged {
                        number: 2,
                        expected: 7,
                        actual: 8
                    }
                )
            },
        ),
        (
            "stale page (wrong digest)",
            page(7, &["ws-3"], Some("d0"), None),
            |e| matches!(e, PageError::BrokenChain { number: 2, .. }),
        ),
        ("no digest", page(7, &["ws-3"], None, None), |e| {
            matches!(e, PageError::BrokenChain { named: None, .. })
        }),
        (
            "repeats the previous page's workspace",
            page(7, &["ws-2"], Some("d1"), None),
            |e| matches!(e, PageError::OutOfOrder { number: 2, .. }),
        ),
        (
            "empty but names a next page",
            page(7, &[], Some("d1"), Some("t3")),
            |e| matches!(e, PageError::EmptyPage { number: 2 }),
        ),
        ("goes back", page(7, &["ws-1"], Some("d1"), None), |e| {
            matches!(e, PageError::OutOfOrder { number: 2, .. })
        }),
        (
            "unsorted within the page",
            page(7, &["ws-4", "ws-3"], Some("d1"), None),
            |e| matches!(e, PageError::OutOfOrder { number: 2, .. }),
        ),
    ];
    for (name, next, expected) in cases {
        let error = first().push(next, "d2".into(), 10).unwrap_err();
        assert!(expected(&error), "{name}: {error}");
    }
}

#[test]
fn the_first_page_must_start_the_chain_in_order() {
    let error = SnapshotPages::first(
        page(7, &["ws-1"], Some("d0"), Some("t")),
        "d".into(),
        1,
        LIMIT,
    )
    .unwrap_err();
    assert!(
        matches!(error, PageError::FirstPageHasPrevious { .. }),
        "{error}"
    );
    let error = SnapshotPages::first(page(7, &["ws-2", "ws-1"], None, None), "d".into(), 1, LIMIT)
        .unwrap_err();
    assert!(
        matches!(error, PageError::OutOfOrder { number: 1, .. }),
        "{error}"
    );
    let error =
        SnapshotPages::first(page(7, &[], None, Some("t")), "d".into(), 1, LIMIT).unwrap_err();
    assert_eq!(error, PageError::EmptyPage { number: 1 });
    // An empty last page (an empty directory) is a snapshot.
    let empty = SnapshotPages::first(page(7, &[], None, None), "d".into(), 1, LIMIT).unwrap();
    assert!(empty.finish().unwrap().workspaces.is_empty());
}

#[test]
fn the_cap_counts_every_page_together() {
    let pages =
        SnapshotPages::first(page(7, &["ws-1"], None, Some("t")), "d1".into(), 60, 100).unwrap();
    let error = pages
        .push(page(7, &["ws-2"], Some("d1"), None), "d2".into(), 60)
        .unwrap_err();
    assert_eq!(
        error,
        PageError::TooLarge {
            size: 120,
            limit: 100
        }
    );
    let error =
        SnapshotPages::first(page(7, &["ws-1"], None, None), "d".into(), 101, 100).unwrap_err();
    assert!(matches!(error, PageError::TooLarge { .. }));
}

#[test]
fn finishing_before_the_last_page_is_refused() {
    let pages =
        SnapshotPages::first(page(7, &["ws-1"], None, Some("t2")), "d1".into(), 1, LIMIT).unwrap();
    assert_eq!(
        pages.finish().unwrap_err(),
        PageError::Unfinished { token: "t2".into() }
    );
}

#[test]
fn the_page_digest_is_the_bodys_sha256_in_hex() {
    assert_eq!(
        page_digest(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn workspaces_taken_out_still_order_the_next_page() {
    let mut pages = SnapshotPages::first(
        page(7, &["ws-1", "ws-3"], None, Some("t2")),
        "d1".into(),
        10,
        LIMIT,
    )
    .unwrap();
    let taken = pages.take_workspaces();
    assert_eq!(taken.len(), 2);
    // A page below what was taken out is still out of order.
    let stale = pages
        .clone()
        .push(page(7, &["ws-2"], Some("d1"), None), "d2".into(), 10)
        .unwrap_err();
    assert!(matches!(stale, PageError::OutOfOrder { .. }), "{stale:?}");
    let mut pages = pages
        .push(page(7, &["ws-4"], Some("d1"), None), "d2".into(), 10)
        .unwrap();
    assert_eq!(pages.take_workspaces().len(), 1);
    let rest = pages.finish().unwrap();
    assert!(rest.workspaces.is_empty());
    assert_eq!(rest.cursor, 7);
}
