//! Conformance cases of the attempt-error log
//! ([`CommandAdmin::command_errors`](crate::lifecycle::CommandAdmin::command_errors)):
//!
//! - a retry and then a dead letter leave two entries, newest first, with their codes,
//!   messages, attempt numbers, lease owners and the store's clock as their time; the read is
//!   bounded and states the total; an operator's abandon adds an entry with its actor;
//! - a settle refused for a lost lease (alone or in a batch) records nothing;
//! - a batch of acks, retries and fails records entries for the retries and fails only.

use tenantry_lifecycle::ErrorCode;

use super::*;
use crate::lifecycle::{
    AttemptEnd, AttemptError, CommandAdmin, ErrorHistory, OperatorAction, OperatorActionKind,
};

async fn errors_of<S: CommandAdmin>(store: &S, id: &CommandId) -> ErrorHistory {
    store.command_errors(id, 50).await.unwrap()
}

/// (end, attempt, code, message, recorded second, lease owner, actor) of each entry.
type Shape = (
    AttemptEnd,
    i32,
    String,
    String,
    DateTime<Utc>,
    Option<String>,
    Option<String>,
);

fn shape(entries: &[AttemptError]) -> Vec<Shape> {
    entries
        .iter()
        .map(|e| {
            (
                e.end,
                e.attempt,
                e.code.as_str().to_owned(),
                e.message.clone(),
                e.recorded_at,
                e.lease_owner.clone(),
                e.actor.clone(),
            )
        })
        .collect()
}

fn entry(
    end: AttemptEnd,
    attempt: i32,
    code: &str,
    message: &str,
    at: DateTime<Utc>,
    owner: Option<&str>,
    actor: Option<&str>,
) -> Shape {
    (
        end,
        attempt,
        code.to_owned(),
        message.to_owned(),
        at,
        owner.map(str::to_owned),
        actor.map(str::to_owned),
    )
}

pub async fn error_log_keeps_a_retry_then_a_fail_newest_first<S: LifecycleStore + CommandAdmin>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let first = claim_one(&store, &clock, "w1", t(1)).await;
    // The settlement's own times come from the worker's clock; the log uses the store's.
    clock.set(t(3));
    store
        .settle(
            &first.lease,
            &Settlement::retry(t(10), ErrorRecord::new("REMOTE_UNAVAILABLE", "down")),
        )
        .await
        .unwrap();
    let second = claim_one(&store, &clock, "w2", t(10)).await;
    clock.set(t(12));
    store
        .settle(
            &second.lease,
            &Settlement::fail(t(11), ErrorRecord::new("INVALID_REQUEST", "bad slug")),
        )
        .await
        .unwrap();
    let history = errors_of(&store, &id).await;
    assert_eq!(history.total, 2);
    assert_eq!(
        shape(&history.entries),
        vec![
            entry(
                AttemptEnd::Failed,
                2,
                "INVALID_REQUEST",
                "bad slug",
                t(12),
                Some("w2"),
                None
            ),
            entry(
                AttemptEnd::Retry,
                1,
                "REMOTE_UNAVAILABLE",
                "down",
                t(3),
                Some("w1"),
                None
            ),
        ]
    );
    assert!(history.entries.iter().all(|e| e.command_id == id));
    // Bounded: the newest entry, and the total.
    let newest = store.command_errors(&id, 1).await.unwrap();
    assert_eq!(newest.total, 2);
    assert_eq!(shape(&newest.entries), shape(&history.entries[..1]));
    // The operator's abandon is in the log too, with the actor and the reason.
    clock.set(t(20));
    store
        .act_on_command(&OperatorAction {
            action_id: "act-1".into(),
            command_id: id.clone(),
            kind: OperatorActionKind::Abandon,
            actor: "oncall:alice".into(),
            reason: "customer gave up".into(),
            at: t(19),
        })
        .await
        .unwrap();
    let history = errors_of(&store, &id).await;
    assert_eq!(history.total, 3);
    assert_eq!(
        shape(&history.entries[..1]),
        vec![entry(
            AttemptEnd::Abandoned,
            2,
            ErrorCode::AbandonedByOperator.as_str(),
            "customer gave up",
            t(20),
            None,
            Some("oncall:alice")
        )]
    );
    // An unknown command, and one that never failed, have none.
    let none = errors_of(&store, &CommandId::parse("no-such-command").unwrap()).await;
    assert_eq!((none.total, none.entries.len()), (0, 0));
    let acked = enqueue(&store, &clock, "cs2", "k2", t(30)).await;
    let claimed = claim_one(&store, &clock, "w1", t(30)).await;
    store
        .settle(&claimed.lease, &Settlement::ack(t(31)))
        .await
        .unwrap();
    assert_eq!(errors_of(&store, &acked).await, ErrorHistory::default());
}

pub async fn error_log_skips_a_settle_refused_for_a_lost_lease<S: LifecycleStore + CommandAdmin>(
    store: S,
    clock: ManualClock,
) {
    let id = enqueue(&store, &clock, "cs1", "k1", t(0)).await;
    let stale = claim_one(&store, &clock, "w1", t(0)).await;
    let current = claim_one(&store, &clock, "w2", t(61)).await;
    let retry = Settlement::retry(t(100), ErrorRecord::new("REMOTE_UNAVAILABLE", "late"));
    assert!(matches!(
        store.settle(&stale.lease, &retry).await,
        Err(SettleError::LeaseLost { .. })
    ));
    let fail = Settlement::fail(t(62), ErrorRecord::new("INVALID_REQUEST", "late"));
    let results = store
        .settle_many(&[(stale.lease.clone(), retry), (stale.lease.clone(), fail)])
        .await
        .unwrap();
    assert!(
        results
            .iter()
            .all(|r| matches!(r, Err(SettleError::LeaseLost { .. })))
    );
    assert_eq!(errors_of(&store, &id).await, ErrorHistory::default());
    store
        .settle(&current.lease, &Settlement::ack(t(63)))
        .await
        .unwrap();
    assert_eq!(errors_of(&store, &id).await, ErrorHistory::default());
}

pub async fn settle_many_logs_errors_only_for_its_retries_and_fails<
    S: LifecycleStore + CommandAdmin,
>(
    store: S,
    clock: ManualClock,
) {
    let mut ids = Vec::new();
    for n in 0..5 {
        ids.push(enqueue(&store, &clock, &format!("cs{n}"), &format!("k{n}"), t(0)).await);
    }
    let mut claimed = claim(&store, &clock, claim_at("w1", t(1), 5))
        .await
        .unwrap();
    claimed.sort_by(|a, b| a.id().cmp(b.id()));
    assert_eq!(claimed.len(), 5);
    // The first one (in turn order: the smallest id) is taken over: its item is refused.
    let taken = claim_one(&store, &clock, "w2", t(62)).await;
    assert_eq!(taken.id(), claimed[0].id());
    clock.set(t(63));
    let items = vec![
        (
            claimed[0].lease.clone(),
            Settlement::retry(t(90), ErrorRecord::new("REMOTE_UNAVAILABLE", "a late")),
        ),
        (claimed[1].lease.clone(), Settlement::ack(t(63))),
        (
            claimed[2].lease.clone(),
            Settlement::retry(t(90), ErrorRecord::new("REMOTE_UNAVAILABLE", "c down")),
        ),
        (
            claimed[3].lease.clone(),
            Settlement::fail(t(63), ErrorRecord::new("INVALID_REQUEST", "d bad")),
        ),
        (claimed[4].lease.clone(), Settlement::ack(t(63))),
    ];
    let results = store.settle_many(&items).await.unwrap();
    assert!(matches!(results[0], Err(SettleError::LeaseLost { .. })));
    assert!(results[1..].iter().all(Result::is_ok), "{results:?}");
    let by_id = |n: usize| claimed[n].id().clone();
    for n in [0, 1, 4] {
        assert_eq!(errors_of(&store, &by_id(n)).await, ErrorHistory::default());
    }
    let c = errors_of(&store, &by_id(2)).await;
    assert_eq!(
        (c.total, shape(&c.entries)),
        (
            1,
            vec![entry(
                AttemptEnd::Retry,
                1,
                "REMOTE_UNAVAILABLE",
                "c down",
                t(63),
                Some("w1"),
                None
            )]
        )
    );
    let d = errors_of(&store, &by_id(3)).await;
    assert_eq!(
        (d.total, shape(&d.entries)),
        (
            1,
            vec![entry(
                AttemptEnd::Failed,
                1,
                "INVALID_REQUEST",
                "d bad",
                t(63),
                Some("w1"),
                None
            )]
        )
    );
    assert!(ids.contains(&by_id(2)));
}
