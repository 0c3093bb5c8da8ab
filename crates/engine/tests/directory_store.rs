//! The directory projector over the SeaORM store (SQLite by default, PostgreSQL with
//! `TENANTRY_TEST_PG_URL`): the same flows as the fake-based unit tests, on a real database.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tenantry_directory::maps::{MembershipStatus, WorkspaceStatus};
use tenantry_directory::testing::*;
use tenantry_directory::{DirectoryError, ProjectionLimits, ProjectorConfig};
use tenantry_engine::directory::{DirectoryProjector, ProjectorError};
use tenantry_ports::clock::ManualClock;
use tenantry_ports::directory::ProjectionStateReader;
use tenantry_ports::directory::conformance::DirectoryFixtureStore;
use tenantry_ports::directory::fake::ScriptedProvider;
use tenantry_store_seaorm::directory::SeaOrmDirectoryStore;
use tenantry_store_seaorm::testing::fresh_database;

fn config() -> ProjectorConfig {
    ProjectorConfig::new(
        INSTANCE,
        Duration::from_secs(5),
        Duration::from_secs(60),
        100,
        ProjectionLimits::default(),
    )
    .unwrap()
}

#[tokio::test]
async fn two_replicas_project_snapshot_delta_and_entitlements_into_the_database() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    let provider_a = ScriptedProvider::new();
    let provider_b = ScriptedProvider::new();
    let a = DirectoryProjector::new(config(), provider_a.clone(), store.clone())
        .with_clock(Arc::new(ManualClock::new(at(0))));
    let b = DirectoryProjector::new(config(), provider_b.clone(), store.clone())
        .with_clock(Arc::new(ManualClock::new(at(1))));

    let base = snapshot(
        10,
        vec![
            workspace("ws-1", 1, &[("a", 1), ("b", 1)]),
            workspace("ws-2", 1, &[("c", 1)]),
        ],
    );
    provider_a.push_snapshot(Ok(base.clone()));
    a.sync_once().await.unwrap();
    assert!(a.require_ready().is_ok());

    // B starts later and finds the shared projection ahead of the snapshot it is served first.
    let page = batch(
        10,
        12,
        12,
        vec![
            dir_event("e-11", 11, "ws-2", 2),
            ent_event("e-12", 12, "ws-1", 1),
        ],
    );
    provider_a.push_events(Ok(page.clone()));
    provider_a.push_delta(Ok(delta(&["ws-2"], vec![])));
    a.sync_once().await.unwrap();
    assert_eq!(a.consumer_cursor(), Some(12));

    provider_b.push_snapshot(Ok(base.clone()));
    provider_b.push_snapshot(Ok(snapshot(
        12,
        vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])],
    )));
    b.initialize().await.unwrap();
    assert_eq!(b.consumer_cursor(), Some(12));

    let tables = store.dump_tables().await.unwrap();
    assert_eq!(
        tables.workspaces[&ws_id("ws-2")].status,
        WorkspaceStatus::Archived
    );
    assert_eq!(
        tables.memberships[&m_id("m-c-ws-2")].status,
        MembershipStatus::Removed
    );
    assert!(tables.executions[&ws_id("ws-2")].write_fenced);
    assert_eq!(tables.receipts.len(), 2);

    // Both replicas confirm freshness on an empty page.
    provider_a.push_events(Ok(batch(12, 12, 12, vec![])));
    provider_b.push_events(Ok(batch(12, 12, 12, vec![])));
    a.sync_once().await.unwrap();
    b.sync_once().await.unwrap();
    let state = store.projection_state(&instance()).await.unwrap().unwrap();
    assert_eq!((state.cursor, state.last_applied_at), (12, at(1)));

    // A delta older than its event notification is refused and changes nothing.
    let before = store.dump_tables().await.unwrap();
    provider_a.push_events(Ok(batch(
        12,
        13,
        13,
        vec![dir_event("e-13", 13, "ws-1", 5)],
    )));
    provider_a.push_delta(Ok(delta(
        &["ws-1"],
        vec![workspace("ws-1", 4, &[("a", 1)])],
    )));
    assert_eq!(
        a.sync_once().await,
        Err(ProjectorError::Rejected(
            DirectoryError::DeltaOlderThanEvent {
                workspace: ws_id("ws-1"),
                revision: 4,
                required: 5
            }
        ))
    );
    assert_eq!(store.dump_tables().await.unwrap(), before);
    assert_eq!(a.consumer_cursor(), Some(12));
}

/// `shared/cases/001-workspace-status-change.md` on a real database: suspending, archiving or
/// deleting a workspace whose members keep their own revisions is applied by a delta and by a
/// full snapshot, and the projection stays ready.
#[tokio::test]
async fn case_001_workspace_status_change_keeps_the_projection_moving() {
    for status in [
        WorkspaceStatus::Suspended,
        WorkspaceStatus::Archived,
        WorkspaceStatus::Deleted,
    ] {
        let db = fresh_database().await;
        let store = SeaOrmDirectoryStore::new(&db.db);
        let provider = ScriptedProvider::new();
        let p = DirectoryProjector::new(config(), provider.clone(), store.clone())
            .with_clock(Arc::new(ManualClock::new(at(0))));
        let mut ws = workspace("ws-a", 40, &[("acct-x", 40), ("acct-y", 40)]);
        ws.members[0].membership_uuid = m_id("mem-1");
        ws.members[1].membership_uuid = m_id("mem-2");
        provider.push_snapshot(Ok(snapshot(40, vec![ws.clone()])));
        p.sync_once().await.unwrap();

        let mut changed = ws.clone();
        changed.status = status;
        changed.projection_revision = 41;
        provider.push_events(Ok(batch(
            40,
            41,
            41,
            vec![dir_event("e-41", 41, "ws-a", 41)],
        )));
        provider.push_delta(Ok(delta(&["ws-a"], vec![changed.clone()])));
        p.sync_once()
            .await
            .unwrap_or_else(|e| panic!("{status:?}: {e}"));
        assert_eq!(p.consumer_cursor(), Some(41));
        assert!(p.require_ready().is_ok());
        let tables = store.dump_tables().await.unwrap();
        let expected = if status == WorkspaceStatus::Suspended {
            MembershipStatus::Disabled
        } else {
            MembershipStatus::Removed
        };
        assert_eq!(tables.workspaces[&ws_id("ws-a")].status, status);
        for m in ["mem-1", "mem-2"] {
            let row = &tables.memberships[&m_id(m)];
            assert_eq!((row.status, row.projection_revision), (expected, 40), "{m}");
        }
        assert!(tables.executions[&ws_id("ws-a")].write_fenced);

        // The same change through a full snapshot, on a fresh replica of another database.
        let db = fresh_database().await;
        let store = SeaOrmDirectoryStore::new(&db.db);
        let provider = ScriptedProvider::new();
        let p = DirectoryProjector::new(config(), provider.clone(), store.clone())
            .with_clock(Arc::new(ManualClock::new(at(0))));
        provider.push_snapshot(Ok(snapshot(40, vec![ws.clone()])));
        p.initialize().await.unwrap();
        p.apply_snapshot(&snapshot(41, vec![changed]))
            .await
            .unwrap_or_else(|e| panic!("{status:?} by snapshot: {e}"));
        let tables = store.dump_tables().await.unwrap();
        assert_eq!(tables.memberships[&m_id("mem-2")].status, expected);
    }
}

/// A restarted process over a database that holds the projection at cursor 12 resumes there:
/// it asks the provider for the events after 12, not for a snapshot, and the state row it
/// finds keeps its snapshot fingerprint.
#[tokio::test]
async fn a_restarted_process_resumes_from_the_projection_in_the_database() {
    let db = fresh_database().await;
    let store = SeaOrmDirectoryStore::new(&db.db);
    let clock = Arc::new(ManualClock::new(at(0)));
    let first = ScriptedProvider::new();
    let before =
        DirectoryProjector::new(config(), first.clone(), store.clone()).with_clock(clock.clone());
    first.push_snapshot(Ok(snapshot(
        12,
        vec![workspace("ws-1", 1, &[("a", 1), ("b", 1)])],
    )));
    before.sync_once().await.unwrap();
    let stored = store.projection_state(&instance()).await.unwrap().unwrap();
    drop(before);

    let provider = ScriptedProvider::new();
    let after =
        DirectoryProjector::new(config(), provider.clone(), store.clone()).with_clock(clock);
    provider.push_events(Ok(batch(12, 12, 12, vec![])));
    after.sync_once().await.unwrap();
    assert_eq!(
        provider.calls(),
        vec![tenantry_ports::directory::fake::ProviderCall::Events {
            after: 12,
            limit: 100
        }]
    );
    assert!(after.require_ready().is_ok());
    let state = store.projection_state(&instance()).await.unwrap().unwrap();
    assert_eq!(state.cursor, 12);
    assert_eq!(state.snapshot_fingerprint, stored.snapshot_fingerprint);
}
