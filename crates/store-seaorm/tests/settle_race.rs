//! A settle batch that waits for a row lock while another transaction changes the row
//! (PostgreSQL, `TENANTRY_TEST_PG_URL`; SQLite serializes its writers, so these races cannot
//! happen there and the tests return at once).
//!
//! The batch's statement reads the rows as of its start (READ COMMITTED) and re-checks its
//! conditions on the newest version of a row it had to wait for: a compare-and-set whose
//! control space, or whose command's lease, changed while the statement waited is refused,
//! and the refused item writes nothing (src/lifecycle/batch.rs; docs/protocol.md, "Lock
//! order").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use sea_orm::{ConnectionTrait, TransactionTrait};
use tenantry_engine::lifecycle::CommandIntake;
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, LeaseOwner, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_lifecycle::{
    ClaimedCommand, CommandStatus, ControlSpaceState, Settlement, Transition,
};
use tenantry_ports::clock::{Clock, ManualClock};
use tenantry_ports::lifecycle::{
    ClaimRequest, CommandAdmin, CommandQueue, ControlSpaceReader, SettleError,
};
use tenantry_store_seaorm::Backend;
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;
use tenantry_store_seaorm::testing::{TestDatabase, fresh_database};

/// A store with one claimed provision of control space `cs-1`, and the settlement that
/// activates it (an ack with its compare-and-set, planned from a current read).
async fn claimed_with_activation(
    db: &TestDatabase,
) -> (SeaOrmLifecycleStore, ClaimedCommand, Settlement) {
    let clock = ManualClock::new(Utc.timestamp_opt(1_900_000_000, 0).unwrap());
    let store = SeaOrmLifecycleStore::new(&db.db).with_clock(Arc::new(clock.clone()));
    let intake = CommandIntake::new(store.clone(), Arc::new(clock.clone()));
    let (tenant, space) = (
        TenantId::parse("acme").unwrap(),
        ControlSpaceId::parse("cs-1").unwrap(),
    );
    intake
        .create_control_space(&CreateControlSpace::new(
            tenant.clone(),
            space.clone(),
            IdempotencyKey::parse("create-cs-1").unwrap(),
            "Docs",
            "docs",
        ))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(1));
    let mut claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w1").unwrap(),
            lease_duration: Duration::from_secs(60),
            include_provision: true,
            limit: 1,
            call_deadline: Duration::from_secs(60),
        })
        .await
        .unwrap();
    let command = claimed.pop().expect("the provision is due");
    let read = store.control_space(&tenant, &space).await.unwrap().unwrap();
    let cas = read
        .plan(
            &[Transition::Activate {
                operation_id: read.lifecycle_operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks-1").unwrap(),
                revision: 1,
            }],
            clock.now(),
        )
        .unwrap();
    let settlement = Settlement::ack(clock.now()).with_control_space(cas);
    (store, command, settlement)
}

/// Control space `cs-1` as stored now.
async fn space_of(store: &SeaOrmLifecycleStore) -> tenantry_lifecycle::ControlSpace {
    store
        .control_space(
            &TenantId::parse("acme").unwrap(),
            &ControlSpaceId::parse("cs-1").unwrap(),
        )
        .await
        .unwrap()
        .expect("cs-1 exists")
}

/// Runs `settle_many` of the one item while a transaction of its own holds the row that
/// `lock` selects `FOR UPDATE`; once the batch waits for that lock, the transaction runs
/// `change` and commits. Returns the batch's answer.
async fn settle_while_changed(
    db: &TestDatabase,
    store: &SeaOrmLifecycleStore,
    item: (tenantry_lifecycle::LeaseToken, Settlement),
    lock: &str,
    change: &str,
) -> Result<(), SettleError> {
    let holder = db.db.conn.begin().await.unwrap();
    holder.execute_unprepared(lock).await.unwrap();
    let batch = {
        let store = store.clone();
        tokio::spawn(async move { store.settle_many(&[item]).await })
    };
    wait_for_a_lock_wait(db).await;
    holder.execute_unprepared(change).await.unwrap();
    holder.commit().await.unwrap();
    let mut answers = batch.await.unwrap().unwrap();
    assert_eq!(answers.len(), 1);
    answers.pop().unwrap()
}

/// Returns once a session of the database waits for a row lock (at most 10 s).
async fn wait_for_a_lock_wait(db: &TestDatabase) {
    for _ in 0..1_000 {
        let waiting = db
            .db
            .conn
            .query_one_raw(sea_orm::Statement::from_string(
                sea_orm::DbBackend::Postgres,
                "SELECT count(*) AS n FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            ))
            .await
            .unwrap()
            .unwrap()
            .try_get::<i64>("", "n")
            .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the settle batch never waited for the held lock");
}

#[tokio::test]
async fn a_compare_and_set_whose_control_space_changed_during_its_lock_wait_is_refused() {
    let db = fresh_database().await;
    if db.backend() != Backend::Postgres {
        return;
    }
    let (store, command, settlement) = claimed_with_activation(&db).await;
    let answer = settle_while_changed(
        &db,
        &store,
        (command.lease.clone(), settlement),
        "SELECT 1 FROM tenantry_control_spaces WHERE control_space_id = 'cs-1' FOR UPDATE",
        "UPDATE tenantry_control_spaces SET resource_version = resource_version + 1 \
         WHERE control_space_id = 'cs-1'",
    )
    .await;
    assert_eq!(
        answer,
        Err(SettleError::ControlSpaceConflict {
            control_space_id: ControlSpaceId::parse("cs-1").unwrap()
        })
    );
    let record = store.command_by_id(command.id()).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        CommandStatus::Processing,
        "no ack without its CAS"
    );
    assert_eq!(record.lease_owner, Some(LeaseOwner::parse("w1").unwrap()));
    let space = space_of(&store).await;
    assert_eq!(space.state, ControlSpaceState::Provisioning);
    assert_eq!(space.knowledge_space_id, None);
}

#[tokio::test]
async fn a_compare_and_set_whose_lease_was_taken_during_its_lock_wait_is_refused() {
    let db = fresh_database().await;
    if db.backend() != Backend::Postgres {
        return;
    }
    let (store, command, settlement) = claimed_with_activation(&db).await;
    let lock = format!(
        "SELECT 1 FROM tenantry_lifecycle_outbox WHERE id = '{}' FOR UPDATE",
        command.id()
    );
    let change = format!(
        "UPDATE tenantry_lifecycle_outbox SET lease_owner = 'w2', lease_epoch = lease_epoch + 1 \
         WHERE id = '{}'",
        command.id()
    );
    let answer = settle_while_changed(
        &db,
        &store,
        (command.lease.clone(), settlement),
        &lock,
        &change,
    )
    .await;
    assert_eq!(
        answer,
        Err(SettleError::LeaseLost {
            command_id: command.id().clone()
        })
    );
    let record = store.command_by_id(command.id()).await.unwrap().unwrap();
    assert_eq!(record.status, CommandStatus::Processing);
    assert_eq!(record.lease_owner, Some(LeaseOwner::parse("w2").unwrap()));
    let space = space_of(&store).await;
    assert_eq!(
        space.state,
        ControlSpaceState::Provisioning,
        "no CAS without its lease"
    );
}

/// The rows change while the batch waits, but not what its compare-and-set checks: the
/// command's lease is renewed (same owner and epoch) and the control space's revoke sequence
/// moves (its resource version does not). The compare-and-set applies and the ack is written
/// on the newest row versions, which the batch's one statement reaches past its snapshot.
#[tokio::test]
async fn a_batch_whose_rows_changed_but_still_match_during_its_lock_wait_settles() {
    let db = fresh_database().await;
    if db.backend() != Backend::Postgres {
        return;
    }
    for (lock, change) in [
        (
            "SELECT 1 FROM tenantry_lifecycle_outbox FOR UPDATE",
            "UPDATE tenantry_lifecycle_outbox SET lease_expires_at = lease_expires_at + 1000",
        ),
        (
            "SELECT 1 FROM tenantry_control_spaces FOR UPDATE",
            "UPDATE tenantry_control_spaces SET last_revoke_sequence = last_revoke_sequence + 1",
        ),
    ] {
        sea_orm::ConnectionTrait::execute_unprepared(
            &db.db.conn,
            "DELETE FROM tenantry_lifecycle_outbox; DELETE FROM tenantry_control_spaces",
        )
        .await
        .unwrap();
        let (store, command, settlement) = claimed_with_activation(&db).await;
        let answer = settle_while_changed(
            &db,
            &store,
            (command.lease.clone(), settlement),
            lock,
            change,
        )
        .await;
        assert_eq!(answer, Ok(()), "{change}");
        let record = store.command_by_id(command.id()).await.unwrap().unwrap();
        assert_eq!(record.status, CommandStatus::Succeeded, "{change}");
        assert_eq!(record.lease_owner, None, "{change}");
        assert_eq!(
            space_of(&store).await.state,
            ControlSpaceState::Active,
            "{change}"
        );
    }
}
