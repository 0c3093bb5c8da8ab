//! Conformance suite of the lifecycle storage ports (feature `testing`).
//!
//! Every adapter instantiates [`lifecycle_store_conformance!`](crate::lifecycle_store_conformance)
//! with a constructor; the same cases then run against the in-memory fake, SQLite and
//! PostgreSQL. Each case is a public async function so a failure points at one rule.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::missing_panics_doc,
    missing_docs
)]

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use tenantry_kernel::{
    CommandId, ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, LeaseEpoch, LeaseOwner,
    OperationId, TenantId,
};
use tenantry_lifecycle::intake::{
    ControlSpaceWrite, CreateControlSpace, IntakePlan, NewIds, RequestDeletion,
};
use tenantry_lifecycle::{
    ClaimedCommand, ClaimedControlSpace, CommandStatus, ControlSpaceState, ErrorRecord, Operation,
    Settlement, Supersede, SupersedeRule, Transition,
};

use crate::clock::ManualClock;

use super::{
    ClaimRequest, CommandFilter, IntakeStoreError, LifecycleStore, SettleError, Submitted,
};

mod batch;
mod errors;
mod failures;
pub use batch::*;
pub use errors::*;
pub use failures::*;

/// Runs every conformance case against the store built by `$make`, a closure that takes the
/// test's [`ManualClock`] and returns a future resolving to `(store, guard)`; `guard` is kept
/// alive for the test (e.g. a temp folder). The store must read "now" from that clock (the
/// clock stands in for the database clock).
///
/// Expands to one `#[tokio::test(flavor = "multi_thread")]` function per case, so invoke it at
/// module level of an integration test (e.g. `tests/lifecycle_store.rs`).
///
/// # What the store and the test crate need
/// - the store implements [`LifecycleStore`](crate::lifecycle::LifecycleStore) (that is
///   [`CommandQueue`](crate::lifecycle::CommandQueue),
///   [`ControlSpaceReader`](crate::lifecycle::ControlSpaceReader) and
///   [`IntakeStore`](crate::lifecycle::IntakeStore)) and
///   [`CommandAdmin`](crate::lifecycle::CommandAdmin), and is `Clone + Send + Sync + 'static`
///   (clones share the same data: one case claims from several tasks at once);
/// - dev-dependencies: `tenantry-ports` with features `lifecycle` (default) and `testing`, and
///   `tokio` with features `macros` and `rt-multi-thread`.
///
/// # Example
/// The suite against the in-memory fake (an adapter passes its own constructor):
/// ```
/// use std::sync::Arc;
///
/// use tenantry_ports::clock::ManualClock;
/// use tenantry_ports::lifecycle::fake::InMemoryLifecycleStore;
///
/// tenantry_ports::lifecycle_store_conformance!(|clock: ManualClock| async move {
///     (InMemoryLifecycleStore::with_clock(Arc::new(clock)), ())
/// });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! lifecycle_store_conformance {
    ($make:expr) => {
        $crate::lifecycle_store_conformance!(@cases $make;
            claim_uses_the_store_clock_not_the_callers,
            renew_lease_extends_a_held_lease_only,
            renew_lease_refuses_an_expired_lease,
            supersede_after_absence_waits_out_the_grace_period,
            supersede_after_absence_judges_quietness_when_the_lookup_was_sent,
            settle_that_sent_nothing_keeps_the_prior_attempt_window,
            a_takeover_extends_the_replaced_attempt_window_by_the_call_deadline,
            claim_takes_a_due_command_with_a_lease,
            claim_skips_commands_not_yet_due,
            claim_reclaims_an_expired_lease_with_a_higher_epoch,
            claim_leaves_a_live_lease_alone,
            claim_skips_provision_when_product_disabled,
            claim_respects_the_limit_in_due_order,
            claim_carries_each_commands_control_space,
            next_due_in_names_the_earliest_waiting_command,
            concurrent_claimers_never_share_a_command,
            settle_ack_completes_and_releases_the_lease,
            settle_retry_schedules_the_next_attempt,
            stale_settle_after_takeover_is_lease_lost_and_changes_nothing,
            settle_with_a_stale_control_space_writes_nothing,
            supersede_unattempted_refuses_an_attempted_command,
            supersede_after_absence_refuses_a_live_lease,
            settle_without_outcome_keeps_the_lease,
            latest_provision_finds_the_newest,
            submit_is_idempotent_on_the_key,
            submit_many_answers_each_plan_as_submit_would,
            submit_refuses_a_duplicate_control_space_and_writes_nothing,
            submit_cas_and_revoke_sequence_are_compare_and_set,
            list_commands_filters_and_pages,
            settle_many_reports_exactly_which_leases_were_lost,
            settle_many_writes_nothing_for_a_failed_compare_and_set,
            settle_many_refused_supersede_leaves_the_other_items_settled,
            settle_many_lets_one_compare_and_set_of_a_control_space_win,
            settle_many_settles_a_command_at_most_once,
            settle_many_keeps_a_lease_without_outcome,
            settle_many_of_no_items_writes_nothing,
            control_spaces_reads_many_in_the_order_asked,
            settle_fail_dead_letters_and_is_never_claimed,
            settle_moot_closes_as_superseded,
            settle_many_dead_letters_beside_acks_and_retries,
            operator_retry_keeps_the_attempt_count_and_starts_a_fresh_budget,
            a_claim_handed_back_unsent_gives_its_attempt_back,
            operator_abandon_closes_a_pending_or_failed_command,
            case_012_an_owning_delete_is_marked_deleted_not_abandoned,
            operator_actions_refuse_other_statuses_and_write_nothing,
            count_commands_groups_by_status_and_operation,
            list_commands_filters_by_error_code,
            count_matching_and_by_error_code,
            settled_since_and_live_summary,
            error_log_keeps_a_retry_then_a_fail_newest_first,
            error_log_skips_a_settle_refused_for_a_lost_lease,
            settle_many_logs_errors_only_for_its_retries_and_fails,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let clock = $crate::clock::ManualClock::new($crate::lifecycle::conformance::t(0));
                let (store, _guard) = ($make)(clock.clone()).await;
                $crate::lifecycle::conformance::$case(store, clock).await;
            }
        )*
    };
}

/// Fixed base time of the suite (whole milliseconds, as stored).
pub fn t(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + seconds, 0)
        .single()
        .unwrap()
}

fn owner(name: &str) -> LeaseOwner {
    LeaseOwner::parse(name).unwrap()
}

fn tenant() -> TenantId {
    TenantId::parse("tenant-a").unwrap()
}

/// A create plan for control space `cs` with idempotency key `key`, enqueued at `at`.
pub fn create_plan(cs: &str, key: &str, at: DateTime<Utc>) -> IntakePlan {
    CreateControlSpace {
        tenant_id: tenant(),
        control_space_id: ControlSpaceId::parse(cs).unwrap(),
        idempotency_key: IdempotencyKey::parse(key).unwrap(),
        name: format!("Space {cs}"),
        slug: cs.to_owned(),
        icon: String::new(),
        description: "conformance".into(),
        model_intent: None,
        profile_intent: None,
    }
    .plan(
        NewIds {
            command_id: CommandId::parse(format!("cmd-{key}")).unwrap(),
            operation_id: OperationId::parse(format!("op-{key}")).unwrap(),
        },
        at,
    )
    .unwrap()
}

async fn enqueue<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    cs: &str,
    key: &str,
    at: DateTime<Utc>,
) -> CommandId {
    clock.set(at);
    match store.submit(&create_plan(cs, key, at)).await.unwrap() {
        Submitted::Created(record) => record.id,
        Submitted::Existing(record) => panic!("unexpected replay of {}", record.id),
    }
}

/// A claim request of `who` for `limit` commands, to be made when the store's clock reads `now`.
fn claim_at(who: &str, now: DateTime<Utc>, limit: u32) -> (ClaimRequest, DateTime<Utc>) {
    (
        ClaimRequest {
            owner: owner(who),
            lease_duration: Duration::from_secs(60),
            include_provision: true,
            limit,
            call_deadline: std::time::Duration::ZERO,
        },
        now,
    )
}

/// Sets the store's clock to the request's time and claims.
async fn claim<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    (request, now): (ClaimRequest, DateTime<Utc>),
) -> Result<Vec<ClaimedCommand>, super::StoreError> {
    clock.set(now);
    store.claim(&request).await
}

async fn claim_one<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    who: &str,
    now: DateTime<Utc>,
) -> ClaimedCommand {
    let mut claimed = claim(store, clock, claim_at(who, now, 1)).await.unwrap();
    assert_eq!(claimed.len(), 1, "expected exactly one claimable command");
    claimed.remove(0)
}

async fn record<S: LifecycleStore>(store: &S, id: &CommandId) -> tenantry_lifecycle::CommandRecord {
    store
        .list_commands(&CommandFilter {
            limit: 10_000,
            ..CommandFilter::default()
        })
        .await
        .unwrap()
        .into_iter()
        .find(|r| &r.id == id)
        .expect("command exists")
}

/// The stored status of command `id`.
async fn status_of<S: LifecycleStore>(store: &S, id: &CommandId) -> CommandStatus {
    record(store, id).await.status
}

pub async fn claim_takes_a_due_command_with_a_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    assert_eq!(claimed.id(), &id);
    assert_eq!(claimed.lease.owner, owner("w1"));
    assert_eq!(claimed.lease.epoch, LeaseEpoch(1));
    assert_eq!(claimed.lease.expires_at, t(61));
    assert_eq!(claimed.attempt_count, 1);
    assert_eq!(claimed.operation, Operation::Provision);
    assert_eq!(claimed.payload["slug"], "cs1");
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Processing);
    assert_eq!(row.lease_owner, Some(owner("w1")));
    assert_eq!(row.lease_expires_at, Some(t(61)));
    assert!(
        claim(&store, &clock, claim_at("w2", t(2), 5))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn claim_skips_commands_not_yet_due<S: LifecycleStore>(store: S, clock: ManualClock) {
    enqueue(&store, &clock, "cs1", "k1", t(10)).await;
    assert!(
        claim(&store, &clock, claim_at("w1", t(9), 5))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        claim(&store, &clock, claim_at("w1", t(10), 5))
            .await
            .unwrap()
            .len(),
        1
    );
}

pub async fn claim_reclaims_an_expired_lease_with_a_higher_epoch<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    let second = claim_one(&store, &clock, "w2", t(60)).await;
    assert_eq!(second.id(), &id);
    assert_eq!(second.lease.epoch, LeaseEpoch(2));
    assert!(second.lease.epoch > first.lease.epoch);
    assert_eq!(second.attempt_count, 2);
    assert_eq!(second.lease.owner, owner("w2"));
}

pub async fn claim_leaves_a_live_lease_alone<S: LifecycleStore>(store: S, clock: ManualClock) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    claim_one(&store, &clock, "w1", t(0)).await;
    assert!(
        claim(&store, &clock, claim_at("w2", t(59), 5))
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn claim_skips_provision_when_product_disabled<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let mut request = claim_at("w1", t(1), 5);
    request.0.include_provision = false;
    assert!(
        claim(&store, &clock, request.clone())
            .await
            .unwrap()
            .is_empty()
    );
    // A delete command is still claimed while the product is disabled.
    let cs = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap();
    let plan = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: ControlSpaceId::parse("cs1").unwrap(),
        idempotency_key: IdempotencyKey::parse("kd").unwrap(),
    }
    .plan(
        cs.as_ref(),
        NewIds {
            command_id: CommandId::parse("cmd-kd").unwrap(),
            operation_id: OperationId::parse("op-kd").unwrap(),
        },
        t(1),
    )
    .unwrap();
    store.submit(&plan).await.unwrap();
    let claimed = claim(&store, &clock, request).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].operation, Operation::Delete);
}

/// `next_due_in`: nothing waiting is `None`; a due command is zero; otherwise the time to the
/// earliest `next_attempt_at` of a pending command or lease expiry of a processing one, by the
/// store's clock; provision commands count only when they may be claimed.
pub async fn next_due_in_names_the_earliest_waiting_command<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    clock.set(t(0));
    assert_eq!(store.next_due_in(true).await.unwrap(), None);
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    assert_eq!(store.next_due_in(true).await.unwrap(), Some(Duration::ZERO));
    // Claimed with a 60 s lease: claimable again when the lease expires.
    claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(10));
    assert_eq!(
        store.next_due_in(true).await.unwrap(),
        Some(Duration::from_secs(50))
    );
    // A command due at t(20) comes first.
    enqueue(&store, &clock, "cs2", "k2", t(20)).await;
    clock.set(t(10));
    assert_eq!(
        store.next_due_in(true).await.unwrap(),
        Some(Duration::from_secs(10))
    );
    // Both are provisions: none counts while provisions may not be claimed.
    assert_eq!(store.next_due_in(false).await.unwrap(), None);
    // Past its time it is due: zero.
    clock.set(t(25));
    assert_eq!(store.next_due_in(true).await.unwrap(), Some(Duration::ZERO));
}

/// A claim hands each command over with its control space as read after the claim
/// ([`ClaimedCommand::control_space`]): the row a read right after returns.
pub async fn claim_carries_each_commands_control_space<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    enqueue(&store, &clock, "cs2", "k2", t(1)).await;
    let claimed = claim(&store, &clock, claim_at("w1", t(5), 5))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 2);
    for command in &claimed {
        let read = store
            .control_space(&command.tenant_id, &command.control_space_id)
            .await
            .unwrap();
        assert!(
            read.is_some(),
            "intake created {}",
            command.control_space_id
        );
        assert_eq!(
            command.control_space,
            ClaimedControlSpace::Read(read),
            "{}",
            command.control_space_id
        );
    }
}

pub async fn claim_respects_the_limit_in_due_order<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    for i in 0..5 {
        enqueue(
            &store,
            &clock,
            &format!("cs{i}"),
            &format!("k{i}"),
            t(10 - i),
        )
        .await;
    }
    let claimed = claim(&store, &clock, claim_at("w1", t(20), 3))
        .await
        .unwrap();
    let mut slugs: Vec<String> = claimed
        .iter()
        .map(|c| c.payload["slug"].as_str().unwrap().to_owned())
        .collect();
    slugs.sort();
    assert_eq!(slugs, ["cs2", "cs3", "cs4"], "the three earliest due");
    assert_eq!(
        claim(&store, &clock, claim_at("w1", t(20), 10))
            .await
            .unwrap()
            .len(),
        2
    );
}

pub async fn concurrent_claimers_never_share_a_command<S: LifecycleStore + Clone + 'static>(
    store: S,
    clock: ManualClock,
) {
    const COMMANDS: usize = 40;
    for i in 0..COMMANDS {
        enqueue(&store, &clock, &format!("cs{i}"), &format!("k{i}"), t(0)).await;
    }
    let mut tasks = Vec::new();
    for w in 0..6 {
        let store = store.clone();
        let clock = clock.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = claim(&store, &clock, claim_at(&format!("w{w}"), t(1), 3))
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    break;
                }
                mine.extend(claimed.into_iter().map(|c| c.id().clone()));
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let total = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), total, "a command was claimed twice");
    assert_eq!(total, COMMANDS, "every command claimed once");
}

pub async fn settle_ack_completes_and_releases_the_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    store
        .settle(&claimed.lease, &Settlement::ack(t(2)))
        .await
        .unwrap();
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Succeeded);
    assert_eq!(row.completed_at, Some(t(2)));
    assert_eq!(row.lease_owner, None);
    assert!(
        claim(&store, &clock, claim_at("w2", t(1000), 5))
            .await
            .unwrap()
            .is_empty()
    );
    // A second settle with the same lease is refused.
    assert_eq!(
        store.settle(&claimed.lease, &Settlement::ack(t(3))).await,
        Err(SettleError::LeaseLost { command_id: id })
    );
}

pub async fn settle_retry_schedules_the_next_attempt<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    store
        .settle(
            &claimed.lease,
            &Settlement::retry(t(30), ErrorRecord::new("REMOTE_BUSY", "busy")),
        )
        .await
        .unwrap();
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Pending);
    assert_eq!(row.next_attempt_at, t(30));
    assert_eq!(
        row.last_error_code
            .as_ref()
            .map(tenantry_lifecycle::ErrorCode::as_str),
        Some("REMOTE_BUSY")
    );
    assert_eq!(row.last_error_message.as_deref(), Some("busy"));
    assert_eq!(row.lease_owner, None);
    assert!(
        claim(&store, &clock, claim_at("w1", t(29), 5))
            .await
            .unwrap()
            .is_empty()
    );
    let again = claim_one(&store, &clock, "w1", t(30)).await;
    assert_eq!(again.attempt_count, 2);
    assert_eq!(again.lease.epoch, LeaseEpoch(2));
}

pub async fn stale_settle_after_takeover_is_lease_lost_and_changes_nothing<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let stale = claim_one(&store, &clock, "w1", t(0)).await;
    let current = claim_one(&store, &clock, "w2", t(61)).await;
    let cs_before = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    let cas = cs_before
        .plan(
            &[Transition::Activate {
                operation_id: cs_before.lifecycle_operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks").unwrap(),
                revision: 1,
            }],
            t(62),
        )
        .unwrap();
    let result = store
        .settle(
            &stale.lease,
            &Settlement::ack(t(62)).with_control_space(cas),
        )
        .await;
    assert_eq!(
        result,
        Err(SettleError::LeaseLost {
            command_id: id.clone()
        })
    );
    // Same owner, old epoch: still refused.
    let mut same_owner_old_epoch = current.lease.clone();
    same_owner_old_epoch.epoch = stale.lease.epoch;
    assert!(matches!(
        store
            .settle(&same_owner_old_epoch, &Settlement::ack(t(62)))
            .await,
        Err(SettleError::LeaseLost { .. })
    ));
    let row = record(&store, &id).await;
    assert_eq!(row.status, CommandStatus::Processing);
    assert_eq!(row.lease_owner, Some(owner("w2")));
    let cs_after = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cs_after, cs_before, "a refused settle writes nothing");
    store
        .settle(&current.lease, &Settlement::ack(t(63)))
        .await
        .unwrap();
}

pub async fn settle_with_a_stale_control_space_writes_nothing<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(1)).await;
    let cs = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    let mut stale = cs.clone();
    stale.resource_version -= 1;
    let cas = stale
        .plan(
            &[Transition::Activate {
                operation_id: cs.lifecycle_operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks").unwrap(),
                revision: 1,
            }],
            t(2),
        )
        .unwrap();
    assert!(matches!(
        store
            .settle(
                &claimed.lease,
                &Settlement::ack(t(2)).with_control_space(cas)
            )
            .await,
        Err(SettleError::ControlSpaceConflict { .. })
    ));
    assert_eq!(
        status_of(&store, &id).await,
        CommandStatus::Processing,
        "ack rolled back"
    );
    assert_eq!(
        store
            .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
            .await
            .unwrap()
            .unwrap(),
        cs
    );
}

async fn deletion_claim<S: LifecycleStore>(
    store: &S,
    clock: &ManualClock,
    now: DateTime<Utc>,
) -> ClaimedCommand {
    clock.set(now);
    let cs = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap();
    let plan = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: ControlSpaceId::parse("cs1").unwrap(),
        idempotency_key: IdempotencyKey::parse("kd").unwrap(),
    }
    .plan(
        cs.as_ref(),
        NewIds {
            command_id: CommandId::parse("cmd-kd").unwrap(),
            operation_id: OperationId::parse("op-kd").unwrap(),
        },
        now,
    )
    .unwrap();
    store.submit(&plan).await.unwrap();
    let mut request = claim_at("wd", now, 1);
    request.0.include_provision = false;
    claim(store, clock, request).await.unwrap().remove(0)
}

pub async fn supersede_unattempted_refuses_an_attempted_command<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let claimed = claim_one(&store, &clock, "w1", t(0)).await;
    store
        .settle(
            &claimed.lease,
            &Settlement::retry(t(5), ErrorRecord::new("X", "x")),
        )
        .await
        .unwrap();
    let delete = deletion_claim(&store, &clock, t(1)).await;
    let supersede = Supersede {
        command_id: provision.clone(),
        rule: SupersedeRule::Unattempted,
        completed_at: t(1),
        error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "x"),
    };
    assert_eq!(
        store
            .settle(
                &delete.lease,
                &Settlement::ack(t(1)).with_supersede(supersede)
            )
            .await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        })
    );
    assert_eq!(status_of(&store, &provision).await, CommandStatus::Pending);
    assert_eq!(
        status_of(&store, delete.id()).await,
        CommandStatus::Processing,
        "ack rolled back"
    );
}

pub async fn supersede_after_absence_refuses_a_live_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    claim_one(&store, &clock, "w1", t(0)).await; // live until t(60)
    let delete = deletion_claim(&store, &clock, t(1)).await;
    let supersede = |at| Supersede {
        command_id: provision.clone(),
        rule: SupersedeRule::AfterRemoteAbsence {
            grace: Duration::ZERO,
            observed_at: at,
        },
        completed_at: at,
        error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "remote absence"),
    };
    clock.set(t(30));
    assert_eq!(
        store
            .settle(
                &delete.lease,
                &Settlement::ack(t(30)).with_supersede(supersede(t(30)))
            )
            .await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        })
    );
    clock.set(t(60));
    store
        .settle(
            &delete.lease,
            &Settlement::ack(t(60)).with_supersede(supersede(t(60))),
        )
        .await
        .unwrap();
    let row = record(&store, &provision).await;
    assert_eq!(row.status, CommandStatus::Superseded);
    assert_eq!(
        row.last_error_code
            .as_ref()
            .map(tenantry_lifecycle::ErrorCode::as_str),
        Some("SUPERSEDED_BY_DELETE")
    );
    assert_eq!(row.completed_at, Some(t(60)));
}

/// The grace period of [`SupersedeRule::AfterRemoteAbsence`] counts from the end of the
/// provision's last attempt window (here its settle at t(10)) on the store's clock.
pub async fn supersede_after_absence_waits_out_the_grace_period<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let attempt = claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(10));
    store
        .settle(
            &attempt.lease,
            &Settlement::retry(t(500), ErrorRecord::new("KFS_HTTP_504", "gateway timeout")),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &provision).await.attempt_window_ends_at,
        Some(t(10)),
        "the settle ends the attempt window"
    );
    let delete = deletion_claim(&store, &clock, t(11)).await;
    let settlement = |at| {
        Settlement::ack(at).with_supersede(Supersede {
            command_id: provision.clone(),
            rule: SupersedeRule::AfterRemoteAbsence {
                grace: Duration::from_secs(30),
                observed_at: at,
            },
            completed_at: at,
            error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "remote absence"),
        })
    };
    clock.set(t(39));
    assert_eq!(
        store.settle(&delete.lease, &settlement(t(39))).await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        }),
        "a request sent until t(10) may still land until t(40)"
    );
    clock.set(t(40));
    store
        .settle(&delete.lease, &settlement(t(40)))
        .await
        .unwrap();
    assert_eq!(
        status_of(&store, &provision).await,
        CommandStatus::Superseded
    );
}

/// [`SupersedeRule::AfterRemoteAbsence`] judges quietness when the lookup was sent
/// (`observed_at`), not when the supersede is written: a provision whose attempt window plus
/// grace passes between the lookup's send (t(39)) and its answer (t(45)) may have landed after
/// the lookup looked, and is not superseded (docs/protocol.md, "Absence is judged when the
/// lookup was sent").
pub async fn supersede_after_absence_judges_quietness_when_the_lookup_was_sent<
    S: LifecycleStore,
>(
    store: S,
    clock: ManualClock,
) {
    let provision = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let attempt = claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(10));
    store
        .settle(
            &attempt.lease,
            &Settlement::retry(t(500), ErrorRecord::new("KFS_HTTP_504", "gateway timeout")),
        )
        .await
        .unwrap();
    let delete = deletion_claim(&store, &clock, t(11)).await;
    let settlement = |observed_at| {
        Settlement::ack(t(45)).with_supersede(Supersede {
            command_id: provision.clone(),
            rule: SupersedeRule::AfterRemoteAbsence {
                grace: Duration::from_secs(30),
                observed_at,
            },
            completed_at: t(45),
            error: ErrorRecord::new("SUPERSEDED_BY_DELETE", "remote absence"),
        })
    };
    clock.set(t(45));
    assert_eq!(
        store.settle(&delete.lease, &settlement(t(39))).await,
        Err(SettleError::SupersedeRefused {
            command_id: provision.clone()
        }),
        "quiet from t(40) by the store's clock, but the lookup looked at t(39)"
    );
    let row = record(&store, &provision).await;
    assert_eq!(row.status, CommandStatus::Pending, "not superseded");
    assert_eq!(
        record(&store, delete.id()).await.status,
        CommandStatus::Processing,
        "ack rolled back"
    );
    store
        .settle(&delete.lease, &settlement(t(40)))
        .await
        .unwrap();
    assert_eq!(
        record(&store, &provision).await.status,
        CommandStatus::Superseded
    );
}

/// The attempt window: a claim opens it to the lease expiry; a settle that may have sent ends it
/// at the settle time; a settle that provably sent nothing restores the window of before the
/// claim (here: none, then t(10)).
pub async fn settle_that_sent_nothing_keeps_the_prior_attempt_window<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(60))
    );
    clock.set(t(1));
    store
        .settle(
            &first.lease,
            &Settlement::retry(t(2), ErrorRecord::new("X", "x")).nothing_sent(),
        )
        .await
        .unwrap();
    assert_eq!(record(&store, &id).await.attempt_window_ends_at, None);
    let second = claim_one(&store, &clock, "w1", t(5)).await;
    clock.set(t(10));
    store
        .settle(
            &second.lease,
            &Settlement::retry(t(20), ErrorRecord::new("X", "x")),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(10))
    );
    let third = claim_one(&store, &clock, "w1", t(20)).await;
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(80))
    );
    clock.set(t(21));
    store
        .settle(&third.lease, &Settlement::ack(t(21)).nothing_sent())
        .await
        .unwrap();
    assert_eq!(
        record(&store, &id).await.attempt_window_ends_at,
        Some(t(10)),
        "the window of the attempt that sent is kept"
    );
}

/// A claim that takes over an expired lease extends the replaced attempt's window by the call
/// deadline (a request it sent just before its lease expired may land that much later; issue
/// 29): the window covers `old end + deadline` whether the new attempt sends nothing, sends and
/// settles early (single and batch settle), renews, or dies; a claim of a pending command
/// extends nothing.
pub async fn a_takeover_extends_the_replaced_attempt_window_by_the_call_deadline<
    S: LifecycleStore,
>(
    store: S,
    clock: ManualClock,
) {
    let with_deadline = |now, lease: u64, deadline: u64| {
        (
            ClaimRequest {
                owner: owner("w2"),
                lease_duration: Duration::from_secs(lease),
                include_provision: true,
                limit: 10,
                call_deadline: Duration::from_secs(deadline),
            },
            now,
        )
    };
    let a = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let b = enqueue(&store, &clock, "cs2", "k2", t(0)).await;
    let c = enqueue(&store, &clock, "cs3", "k3", t(0)).await;
    // Claimed at t(0) with a lease of 60 s: windows end at t(60); the claim of a pending
    // command extends nothing, whatever the deadline.
    let first = claim(&store, &clock, with_deadline(t(0), 60, 150))
        .await
        .unwrap();
    assert_eq!(first.len(), 3);
    for id in [&a, &b, &c] {
        assert_eq!(record(&store, id).await.attempt_window_ends_at, Some(t(60)));
    }
    // The leases expire; another worker takes all three over at t(100) (lease 30 s, call
    // deadline 150 s): the replaced windows end at t(60) + 150 s = t(210).
    let taken = claim(&store, &clock, with_deadline(t(100), 30, 150))
        .await
        .unwrap();
    assert_eq!(taken.len(), 3);
    let lease_of = |id: &CommandId| {
        taken
            .iter()
            .find(|claimed| claimed.id() == id)
            .unwrap()
            .lease
            .clone()
    };
    for id in [&a, &b, &c] {
        assert_eq!(
            record(&store, id).await.attempt_window_ends_at,
            Some(t(210)),
            "the new window covers the replaced attempt's extended window"
        );
    }
    // A renewal at t(110) moves the lease, not the window back.
    clock.set(t(110));
    store
        .renew_lease(&lease_of(&c), Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        record(&store, &c).await.attempt_window_ends_at,
        Some(t(210))
    );
    // a: settles at t(120) having sent nothing: the replaced (extended) window stays.
    clock.set(t(120));
    store
        .settle(
            &lease_of(&a),
            &Settlement::retry(t(130), ErrorRecord::new("X", "x")).nothing_sent(),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &a).await.attempt_window_ends_at,
        Some(t(210))
    );
    // b and c: settle at t(120) having sent (a batch): the window does not end before t(210).
    let results = store
        .settle_many(&[
            (
                lease_of(&b),
                Settlement::retry(t(130), ErrorRecord::new("X", "x")),
            ),
            (
                lease_of(&c),
                Settlement::retry(t(130), ErrorRecord::new("X", "x")),
            ),
        ])
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    for id in [&b, &c] {
        assert_eq!(
            record(&store, id).await.attempt_window_ends_at,
            Some(t(210))
        );
    }
    // Past t(210), a later attempt that sent ends the window at its settle as before.
    let again = claim(&store, &clock, with_deadline(t(300), 30, 150))
        .await
        .unwrap();
    let lease = again.iter().find(|x| x.id() == &b).unwrap().lease.clone();
    clock.set(t(310));
    store
        .settle(
            &lease,
            &Settlement::retry(t(320), ErrorRecord::new("X", "x")),
        )
        .await
        .unwrap();
    assert_eq!(
        record(&store, &b).await.attempt_window_ends_at,
        Some(t(310))
    );
}

/// Claims decide "due" and "lease expired" by the store's clock; the lease expiry and the
/// claim time come from it too.
pub async fn claim_uses_the_store_clock_not_the_callers<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(100)).await;
    clock.set(t(99));
    assert!(
        store
            .claim(&claim_at("w1", t(99), 5).0)
            .await
            .unwrap()
            .is_empty(),
        "not due before the store's clock reaches next_attempt_at"
    );
    clock.set(t(100));
    let claimed = store.claim(&claim_at("w1", t(0), 5).0).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].claimed_at, t(100));
    assert_eq!(claimed[0].lease.expires_at, t(160));
    clock.set(t(159));
    assert!(
        store
            .claim(&claim_at("w2", t(0), 5).0)
            .await
            .unwrap()
            .is_empty(),
        "a live lease is never reclaimed"
    );
}

/// Renewal is a compare-and-set on owner and epoch that moves the expiry to the store's now
/// plus the lease length; a lost lease is never renewed.
pub async fn renew_lease_extends_a_held_lease_only<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    clock.set(t(40));
    let renewed = store
        .renew_lease(&first.lease, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(renewed.expires_at, t(100));
    assert_eq!(renewed.epoch, first.lease.epoch);
    let row = record(&store, &id).await;
    assert_eq!(row.lease_expires_at, Some(t(100)));
    assert_eq!(row.attempt_window_ends_at, Some(t(100)));
    assert!(
        claim(&store, &clock, claim_at("w2", t(99), 5))
            .await
            .unwrap()
            .is_empty(),
        "the renewed lease is live until t(100)"
    );
    let second = claim_one(&store, &clock, "w2", t(100)).await;
    assert_eq!(
        store
            .renew_lease(&first.lease, Duration::from_secs(60))
            .await,
        Err(SettleError::LeaseLost {
            command_id: id.clone()
        }),
        "the old owner cannot renew after a takeover"
    );
    assert_eq!(
        record(&store, &id).await.lease_owner,
        Some(owner("w2")),
        "a refused renewal writes nothing"
    );
    store
        .settle(&second.lease, &Settlement::ack(t(101)))
        .await
        .unwrap();
    assert!(matches!(
        store
            .renew_lease(&second.lease, Duration::from_secs(60))
            .await,
        Err(SettleError::LeaseLost { .. })
    ));
}

/// Renewal refuses a lease that has expired on the store's clock (`lease_expires_at > now`
/// is part of the compare-and-set), even while no other worker has claimed the command yet:
/// a paused dispatch that resumes after its expiry cannot revive its lease, and writes nothing.
pub async fn renew_lease_refuses_an_expired_lease<S: LifecycleStore>(store: S, clock: ManualClock) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(0)).await;
    assert_eq!(first.lease.expires_at, t(60));
    clock.set(t(60));
    assert_eq!(
        store
            .renew_lease(&first.lease, Duration::from_secs(60))
            .await,
        Err(SettleError::LeaseLost {
            command_id: id.clone()
        }),
        "a lease whose expiry is not after the store's now is not renewed"
    );
    let row = record(&store, &id).await;
    assert_eq!(
        row.lease_owner,
        Some(owner("w1")),
        "nobody took it over yet"
    );
    assert_eq!(
        row.lease_expires_at,
        Some(t(60)),
        "a refused renewal writes nothing"
    );
    let second = claim_one(&store, &clock, "w2", t(61)).await;
    assert_eq!(second.lease.epoch.0, first.lease.epoch.0 + 1);
}

pub async fn settle_without_outcome_keeps_the_lease<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let delete = deletion_claim(&store, &clock, t(1)).await;
    let cs = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    let cas = cs
        .plan(
            &[Transition::RegisterRecoveredIdentity {
                operation_id: delete.operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks-r").unwrap(),
                revision: 4,
            }],
            t(2),
        )
        .unwrap();
    store
        .settle(
            &delete.lease,
            &Settlement {
                outcome: None,
                control_space: Some(cas),
                supersede: None,
                may_have_sent: true,
                spends_attempt: true,
            },
        )
        .await
        .unwrap();
    let after = store
        .control_space(&tenant(), &ControlSpaceId::parse("cs1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.knowledge_space_id,
        Some(KnowledgeSpaceId::parse("ks-r").unwrap())
    );
    assert_eq!(after.knowledge_space_revision, 4);
    assert_eq!(after.resource_version, cs.resource_version + 1);
    assert_eq!(
        status_of(&store, delete.id()).await,
        CommandStatus::Processing
    );
    store
        .settle(&delete.lease, &Settlement::ack(t(3)))
        .await
        .unwrap();
}

pub async fn latest_provision_finds_the_newest<S: LifecycleStore>(store: S, clock: ManualClock) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    enqueue(&store, &clock, "cs2", "k2", t(5)).await;
    let cs1 = ControlSpaceId::parse("cs1").unwrap();
    let latest = store
        .latest_provision(&tenant(), &cs1)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.id, id);
    assert_eq!(latest.status, CommandStatus::Pending);
    assert_eq!(latest.attempt_count, 0);
    assert!(
        store
            .latest_provision(&tenant(), &ControlSpaceId::parse("none").unwrap())
            .await
            .unwrap()
            .is_none()
    );
}

pub async fn submit_many_answers_each_plan_as_submit_would<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    assert!(store.submit_many(&[]).await.is_empty());
    // A batch of new control spaces: every one created, claimable, stamped with the store's now.
    let first: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| create_plan(&format!("cs-{n}"), &format!("k-{n}"), t(0)))
        .collect();
    clock.set(t(5));
    let answers = store.submit_many(&first).await;
    assert_eq!(answers.len(), 3);
    for (plan, answer) in first.iter().zip(&answers) {
        match answer {
            Ok(Submitted::Created(record)) => {
                assert_eq!(record.id, plan.command.id);
                assert_eq!(record.created_at, t(5));
            }
            other => panic!("expected created, got {other:?}"),
        }
    }
    // A mixed batch: a replayed key, a new space, and a new key for an existing space.
    let mixed = vec![
        create_plan("cs-a", "k-a", t(6)),
        create_plan("cs-d", "k-d", t(6)),
        create_plan("cs-b", "k-other", t(6)),
    ];
    let answers = store.submit_many(&mixed).await;
    assert!(
        matches!(&answers[0], Ok(Submitted::Existing(r)) if r.id == first[0].command.id),
        "{:?}",
        answers[0]
    );
    assert!(matches!(&answers[1], Ok(Submitted::Created(r)) if r.id == mixed[1].command.id));
    assert_eq!(answers[2], Err(IntakeStoreError::ControlSpaceExists));
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("k-other").unwrap())
            .await
            .unwrap()
            .is_none(),
        "a refused plan writes nothing"
    );
    let claimed = store
        .claim(&ClaimRequest {
            owner: LeaseOwner::parse("w").unwrap(),
            lease_duration: Duration::from_secs(60),
            include_provision: true,
            limit: 10,
            call_deadline: std::time::Duration::ZERO,
        })
        .await
        .unwrap();
    assert_eq!(claimed.len(), 4, "a, b, c and d are due");
}

pub async fn submit_is_idempotent_on_the_key<S: LifecycleStore>(store: S, _clock: ManualClock) {
    let plan = create_plan("cs1", "k1", t(0));
    let Submitted::Created(created) = store.submit(&plan).await.unwrap() else {
        panic!("expected created")
    };
    // Same key again, even with another control space id: nothing written, original returned.
    let replay = create_plan("cs-other", "k1", t(1));
    let Submitted::Existing(existing) = store.submit(&replay).await.unwrap() else {
        panic!("expected existing")
    };
    assert_eq!(existing.id, created.id);
    assert_eq!(
        existing.request_fingerprint,
        plan.command.request_fingerprint
    );
    assert!(
        store
            .control_space(&tenant(), &ControlSpaceId::parse("cs-other").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let by_key = store
        .command_by_idempotency_key(&IdempotencyKey::parse("k1").unwrap())
        .await
        .unwrap();
    assert_eq!(by_key.map(|r| r.id), Some(created.id));
}

pub async fn submit_refuses_a_duplicate_control_space_and_writes_nothing<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    assert_eq!(
        store.submit(&create_plan("cs1", "k2", t(1))).await,
        Err(IntakeStoreError::ControlSpaceExists)
    );
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("k2").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .list_commands(&CommandFilter {
                limit: 100,
                ..CommandFilter::default()
            })
            .await
            .unwrap()
            .len(),
        1
    );
}

pub async fn submit_cas_and_revoke_sequence_are_compare_and_set<S: LifecycleStore>(
    store: S,
    clock: ManualClock,
) {
    enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let cs1 = ControlSpaceId::parse("cs1").unwrap();
    let cs = store.control_space(&tenant(), &cs1).await.unwrap().unwrap();
    let mut stale = cs.clone();
    stale.resource_version += 7;
    let ids = |k: &str| NewIds {
        command_id: CommandId::parse(format!("cmd-{k}")).unwrap(),
        operation_id: OperationId::parse(format!("op-{k}")).unwrap(),
    };
    let delete = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: cs1.clone(),
        idempotency_key: IdempotencyKey::parse("kd").unwrap(),
    };
    let stale_plan = delete.plan(Some(&stale), ids("kd"), t(1)).unwrap();
    assert_eq!(
        store.submit(&stale_plan).await,
        Err(IntakeStoreError::ControlSpaceConflict {
            control_space_id: cs1.clone()
        })
    );
    assert!(
        store
            .command_by_idempotency_key(&IdempotencyKey::parse("kd").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    let bump = |expected| IntakePlan {
        control_space: ControlSpaceWrite::BumpRevokeSequence {
            tenant_id: tenant(),
            control_space_id: cs1.clone(),
            expected,
        },
        command: create_plan("unused", &format!("kr{expected}"), t(2)).command,
    };
    assert_eq!(
        store.submit(&bump(5)).await,
        Err(IntakeStoreError::ControlSpaceConflict {
            control_space_id: cs1.clone()
        })
    );
    assert!(matches!(
        store.submit(&bump(0)).await,
        Ok(Submitted::Created(_))
    ));
    let after = store.control_space(&tenant(), &cs1).await.unwrap().unwrap();
    assert_eq!(after.last_revoke_sequence, 1);
    assert_eq!(
        after.resource_version, cs.resource_version,
        "revoke sequence does not bump the version"
    );
    let fresh = delete.plan(Some(&after), ids("kd"), t(3)).unwrap();
    assert!(matches!(
        store.submit(&fresh).await,
        Ok(Submitted::Created(_))
    ));
    let deleting = store.control_space(&tenant(), &cs1).await.unwrap().unwrap();
    assert_eq!(deleting.state, ControlSpaceState::Deleting);
    assert_eq!(deleting.resource_version, cs.resource_version + 1);
    let unknown = RequestDeletion {
        tenant_id: tenant(),
        control_space_id: ControlSpaceId::parse("nope").unwrap(),
        idempotency_key: IdempotencyKey::parse("kx").unwrap(),
    };
    let mut ghost = after.clone();
    ghost.control_space_id = ControlSpaceId::parse("nope").unwrap();
    let ghost_plan = unknown.plan(Some(&ghost), ids("kx"), t(4)).unwrap();
    assert_eq!(
        store.submit(&ghost_plan).await,
        Err(IntakeStoreError::UnknownControlSpace)
    );
}

pub async fn list_commands_filters_and_pages<S: LifecycleStore>(store: S, clock: ManualClock) {
    for i in 0..5 {
        enqueue(&store, &clock, &format!("cs{i}"), &format!("k{i}"), t(i)).await;
    }
    let claimed = claim_one(&store, &clock, "w1", t(0)).await;
    let all = store
        .list_commands(&CommandFilter {
            limit: 100,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 5);
    assert!(
        all.windows(2)
            .all(|w| (w[0].created_at, &w[0].id) <= (w[1].created_at, &w[1].id))
    );
    let processing = store
        .list_commands(&CommandFilter {
            status: Some(CommandStatus::Processing),
            limit: 100,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(
        processing.iter().map(|r| &r.id).collect::<Vec<_>>(),
        vec![claimed.id()]
    );
    let page1 = store
        .list_commands(&CommandFilter {
            limit: 2,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    let page2 = store
        .list_commands(&CommandFilter {
            limit: 2,
            after: Some(page1[1].id.clone()),
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(page1.len(), 2);
    assert_eq!(page2.len(), 2);
    assert_eq!(page2[0].id, all[2].id);
    // Backwards: the page before the one starting at `all[3]` is `all[1..3]`, ascending; at
    // the start it is shorter; an unknown cursor gives nothing.
    let back = |before: &CommandId, limit: u32| CommandFilter {
        limit,
        before: Some(before.clone()),
        ..CommandFilter::default()
    };
    let ids = |rows: Vec<tenantry_lifecycle::CommandRecord>| {
        rows.into_iter().map(|r| r.id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(store.list_commands(&back(&all[3].id, 2)).await.unwrap()),
        vec![all[1].id.clone(), all[2].id.clone()]
    );
    assert_eq!(
        ids(store.list_commands(&back(&all[1].id, 2)).await.unwrap()),
        vec![all[0].id.clone()]
    );
    assert!(
        store
            .list_commands(&back(&CommandId::parse("no-such").unwrap(), 2))
            .await
            .unwrap()
            .is_empty()
    );
    let by_cs = store
        .list_commands(&CommandFilter {
            tenant_id: Some(tenant()),
            control_space_id: Some(ControlSpaceId::parse("cs3").unwrap()),
            operation: Some(Operation::Provision),
            limit: 100,
            ..CommandFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(by_cs.len(), 1);
    assert_eq!(by_cs[0].control_space_id.as_str(), "cs3");
}
