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
mod claim;
mod errors;
mod failures;
mod intake;
mod lease;
mod list;
pub mod retention;
mod sequences;
mod settle;
mod turns;
pub use batch::*;
pub use claim::*;
pub use errors::*;
pub use failures::*;
pub use intake::*;
pub use lease::*;
pub use list::*;
pub use sequences::*;
pub use settle::*;
pub use turns::*;

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
            claim_respects_the_limit_in_turn_order,
            claim_hands_out_its_batch_in_turn_order,
            a_tenants_backlog_takes_consecutive_turns_and_does_not_hold_back_another_tenant,
            a_drained_tenant_owes_no_turns,
            a_retry_keeps_its_turn,
            claim_carries_each_commands_control_space,
            next_due_in_names_the_earliest_waiting_command,
            concurrent_claimers_never_share_a_command,
            settle_ack_completes_and_releases_the_lease,
            settle_retry_schedules_the_next_attempt,
            stale_settle_after_takeover_is_lease_lost_and_changes_nothing,
            settle_with_a_stale_control_space_writes_nothing,
            a_refused_settle_holds_no_lock_after_it_answers,
            supersede_unattempted_refuses_an_attempted_command,
            supersede_after_absence_refuses_a_live_lease,
            settle_without_outcome_keeps_the_lease,
            latest_provision_finds_the_newest,
            submit_is_idempotent_on_the_key,
            submit_many_answers_each_plan_as_submit_would,
            the_trace_context_round_trips,
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
            random_sequences_agree_with_the_in_memory_model,
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

/// The stored control space `cs` of the test tenant (it must exist).
async fn space<S: LifecycleStore>(store: &S, cs: &str) -> tenantry_lifecycle::ControlSpace {
    store
        .control_space(&tenant(), &ControlSpaceId::parse(cs).unwrap())
        .await
        .unwrap()
        .unwrap()
}

/// The compare-and-set a completed provision of `cs` would write at `at`.
async fn activate<S: LifecycleStore>(
    store: &S,
    cs: &str,
    at: DateTime<Utc>,
) -> tenantry_lifecycle::CasUpdate {
    activate_from(space(store, cs).await, cs, at)
}

/// [`activate`] planned from a stale read of `cs`: the control space as it was one resource
/// version earlier, so the update expects that version (and writes the stored one); the store
/// must refuse it with `ControlSpaceConflict`.
async fn stale_activate<S: LifecycleStore>(
    store: &S,
    cs: &str,
    at: DateTime<Utc>,
) -> tenantry_lifecycle::CasUpdate {
    let mut stale = space(store, cs).await;
    stale.resource_version -= 1;
    activate_from(stale, cs, at)
}

/// The `Activate` compare-and-set planned from `read`, a read of control space `cs`.
fn activate_from(
    read: tenantry_lifecycle::ControlSpace,
    cs: &str,
    at: DateTime<Utc>,
) -> tenantry_lifecycle::CasUpdate {
    read.plan(
        &[Transition::Activate {
            operation_id: read.lifecycle_operation_id.clone(),
            knowledge_space_id: KnowledgeSpaceId::parse(format!("ks-{cs}")).unwrap(),
            revision: 1,
        }],
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
