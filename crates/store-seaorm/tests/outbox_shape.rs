//! insta snapshot of the outbox and control-space rows exactly as the SeaORM store writes them
//! (column names, types, JSON text of the payload, millisecond timestamps), read back with a
//! raw `SELECT`, on SQLite (default) or PostgreSQL (`TENANTRY_TEST_PG_URL`): both backends must
//! produce the same snapshot. The `.snap` files are committed; CI compares without
//! `cargo insta` (`INSTA_UPDATE=always` rewrites them after an intended change). Also: a claimed
//! command whose control-space row is gone is still handed out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{TimeZone, Utc};
use sea_orm::{FromQueryResult, JsonValue, Statement};
use tenantry_engine::lifecycle::CommandIntake;
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_ports::clock::ManualClock;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::fresh_database;

async fn rows(db: &sea_orm::DatabaseConnection, sql: &str) -> Vec<JsonValue> {
    let backend = sea_orm::ConnectionTrait::get_database_backend(db);
    JsonValue::find_by_statement(Statement::from_string(backend, sql))
        .all(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn outbox_and_control_space_rows_have_a_stable_shape() {
    let db = fresh_database().await;
    let clock = ManualClock::new(Utc.timestamp_opt(1_900_000_000, 0).unwrap());
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock.clone()));
    let counter = Arc::new(AtomicUsize::new(0));
    let intake = CommandIntake::new(store, Arc::new(clock.clone()))
        .with_id_source(move || format!("id-{}", counter.fetch_add(1, Ordering::Relaxed)));
    let (tenant, space) = (
        TenantId::parse("acme").unwrap(),
        ControlSpaceId::parse("cs-1").unwrap(),
    );
    intake
        .create_control_space(
            &CreateControlSpace::new(
                tenant.clone(),
                space.clone(),
                IdempotencyKey::parse("create-1").unwrap(),
                "Docs",
                "docs",
            )
            .with_icon("book"),
        )
        .await
        .unwrap();
    clock.advance(std::time::Duration::from_millis(1_500));
    intake
        .request_deletion(&RequestDeletion::new(
            tenant,
            space,
            IdempotencyKey::parse("delete-1").unwrap(),
        ))
        .await
        .unwrap();
    let outbox = rows(
        &db.db.conn,
        "SELECT * FROM tenantry_lifecycle_outbox ORDER BY created_at, id",
    )
    .await;
    let spaces = rows(&db.db.conn, "SELECT * FROM tenantry_control_spaces").await;
    insta::assert_json_snapshot!("outbox_rows", outbox);
    insta::assert_json_snapshot!("control_space_rows", spaces);
}

/// A store on a manual clock with one provision command per control space of `spaces`
/// (tenant `acme`), created through intake.
async fn store_with_spaces(
    db: &tenantry_store_seaorm::testing::TestDatabase,
    spaces: &[&str],
) -> (SeaOrmLifecycleStore, ManualClock) {
    let clock = ManualClock::new(Utc.timestamp_opt(1_900_000_000, 0).unwrap());
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock.clone()));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()));
    for space in spaces {
        intake
            .create_control_space(&CreateControlSpace::new(
                TenantId::parse("acme").unwrap(),
                ControlSpaceId::parse(*space).unwrap(),
                IdempotencyKey::parse(format!("create-{space}")).unwrap(),
                "Docs",
                "docs",
            ))
            .await
            .unwrap();
    }
    (store, clock)
}

/// Claims every due command (at most 10) for owner `w1` with leases of `lease`.
async fn claim_due(
    store: &SeaOrmLifecycleStore,
    lease: std::time::Duration,
) -> Vec<tenantry_lifecycle::ClaimedCommand> {
    use tenantry_ports::lifecycle::{ClaimRequest, CommandQueue};
    store
        .claim(&ClaimRequest {
            owner: tenantry_kernel::LeaseOwner::parse("w1").unwrap(),
            lease_duration: lease,
            include_provision: true,
            limit: 10,
            call_deadline: lease,
        })
        .await
        .unwrap()
}

/// A claimed command whose control-space row is gone (removed by hand) is still handed out,
/// with "no control space found", on both backends: the claim's join of the control spaces
/// (PostgreSQL) is an outer join, so it never drops a row the update claimed.
#[tokio::test]
async fn a_command_without_its_control_space_is_claimed_with_none_found() {
    use tenantry_lifecycle::ClaimedControlSpace;

    let db = fresh_database().await;
    let (store, clock) = store_with_spaces(&db, &["cs-1", "cs-2"]).await;
    sea_orm::ConnectionTrait::execute_unprepared(
        &db.db.conn,
        "DELETE FROM tenantry_control_spaces WHERE control_space_id = 'cs-1'",
    )
    .await
    .unwrap();
    clock.advance(std::time::Duration::from_secs(1));
    let claimed = claim_due(&store, std::time::Duration::from_secs(30)).await;
    let spaces: Vec<(&str, bool)> = claimed
        .iter()
        .map(|command| {
            let found = match &command.control_space {
                ClaimedControlSpace::Read(space) => space.is_some(),
                ClaimedControlSpace::NotRead => panic!("{} was not read", command.id()),
            };
            (command.control_space_id.as_str(), found)
        })
        .collect();
    assert_eq!(spaces, [("cs-1", false), ("cs-2", true)]);
}

/// A control-space row that cannot be read as one (a state no version writes; on PostgreSQL
/// also a column of another type) hands its command over unread, so the saga's step reads it
/// itself, never as "no control space found", on which a step would decide.
#[tokio::test]
async fn a_control_space_that_cannot_be_read_is_left_to_the_saga() {
    use tenantry_lifecycle::ClaimedControlSpace;

    let db = fresh_database().await;
    let postgres = db.backend() == tenantry_store_seaorm::Backend::Postgres;
    let (store, clock) = store_with_spaces(&db, &["cs-1"]).await;
    let mut corruptions =
        vec!["UPDATE tenantry_control_spaces SET state = 'bogus' WHERE control_space_id = 'cs-1'"];
    if postgres {
        corruptions.push(
            "ALTER TABLE tenantry_control_spaces \
             ALTER COLUMN resource_version TYPE TEXT USING resource_version::TEXT",
        );
    }
    let restore = "UPDATE tenantry_control_spaces SET state = 'provisioning'";
    for (round, corruption) in corruptions.into_iter().enumerate() {
        let conn = &db.db.conn;
        sea_orm::ConnectionTrait::execute_unprepared(conn, restore)
            .await
            .unwrap();
        sea_orm::ConnectionTrait::execute_unprepared(conn, corruption)
            .await
            .unwrap();
        // Each round claims the command again once its lease (1 s) has expired.
        clock.advance(std::time::Duration::from_secs(5));
        let claimed = claim_due(&store, std::time::Duration::from_secs(1)).await;
        assert_eq!(claimed.len(), 1, "round {round}");
        assert_eq!(
            claimed[0].control_space,
            ClaimedControlSpace::NotRead,
            "round {round}: {corruption}"
        );
    }
}

/// A claimed command carries its row's fields as a plain read of that row gives them (the claim
/// reads its answer with a reader of its own on PostgreSQL, by column name; the reader's
/// column-by-column agreement with SeaORM's is a unit test of `lifecycle::claim_rows`), with
/// the optional columns both empty and set, and the control space that comes with it (joined on
/// PostgreSQL, read right after on SQLite) equals the one read by itself.
#[tokio::test]
async fn a_claimed_command_reads_as_its_stored_row() {
    use tenantry_lifecycle::ClaimedControlSpace;
    use tenantry_ports::lifecycle::CommandAdmin;
    use tenantry_ports::lifecycle::ControlSpaceReader;

    let db = fresh_database().await;
    let (store, clock) = store_with_spaces(&db, &["cs-1", "cs-2"]).await;
    // cs-1: its command and control space with their optional columns set; cs-2 as created.
    for sql in [
        "UPDATE tenantry_lifecycle_outbox SET last_error_code = 'REMOTE_UNAVAILABLE', \
           last_error_message = 'try later', attempt_count = 2, attempt_budget_base = 1, \
           trace_context = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' \
         WHERE control_space_id = 'cs-1'",
        "UPDATE tenantry_control_spaces SET knowledge_space_id = 'ks-1', \
           knowledge_space_revision = 7, deletion_irreversible_at = 1900000123456, \
           last_revoke_sequence = 3, resource_version = 5 \
         WHERE control_space_id = 'cs-1'",
    ] {
        sea_orm::ConnectionTrait::execute_unprepared(&db.db.conn, sql)
            .await
            .unwrap();
    }
    clock.advance(std::time::Duration::from_secs(1));
    let claimed = claim_due(&store, std::time::Duration::from_secs(30)).await;
    assert_eq!(claimed.len(), 2);
    for command in &claimed {
        let stored = store.command_by_id(command.id()).await.unwrap().unwrap();
        let seen = (
            &command.tenant_id,
            &command.control_space_id,
            &command.operation_id,
            &command.idempotency_key,
            &command.operation,
            &command.payload,
            command.attempt_count,
            command.attempt_budget_base,
        );
        let seen_lease = (
            Some(&command.lease.owner),
            command.lease.epoch,
            Some(command.lease.expires_at),
            command.created_at,
            &command.trace_context,
        );
        let read = (
            &stored.tenant_id,
            &stored.control_space_id,
            &stored.operation_id,
            &stored.idempotency_key,
            &stored.operation,
            &stored.payload,
            stored.attempt_count,
            stored.attempt_budget_base,
        );
        let read_lease = (
            stored.lease_owner.as_ref(),
            stored.lease_epoch,
            stored.lease_expires_at,
            stored.created_at,
            &stored.trace_context,
        );
        assert_eq!(seen, read, "{}", command.id());
        assert_eq!(seen_lease, read_lease, "{}", command.id());
        let space = store
            .control_space(&command.tenant_id, &command.control_space_id)
            .await
            .unwrap();
        assert!(space.is_some());
        assert_eq!(command.control_space, ClaimedControlSpace::Read(space));
    }
    let first = claimed
        .iter()
        .find(|c| c.control_space_id.as_str() == "cs-1")
        .unwrap();
    assert_eq!(first.attempt_count, 3, "the claim counts one attempt more");
    assert!(first.trace_context.is_some());
}
