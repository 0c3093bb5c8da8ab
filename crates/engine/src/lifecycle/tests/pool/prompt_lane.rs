//! The worker pool's prompt lane (issue 33; docs/protocol.md, "The prompt lane"): a new
//! tenant's command claimed and called beside a saturated pool's backlog, the lane's places,
//! and shutdown with the lane's dispatches in flight.

use super::*;

/// A running pool of 16 slots (1 reserved for the lane) with wake-ups over a held remote,
/// after it claimed from tenant-1's `backlog` and tenant-2's `late` command was enqueued and
/// announced.
struct Late {
    remote: HeldRemote,
    ids: Vec<CommandId>,
    late: CommandId,
    stop: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<WorkerReport>,
}

async fn late_after_backlog(h: &Harness, backlog: usize) -> Late {
    let wakeups = Wakeups::new();
    let (pool, remote, ids) = held_pool(h, backlog, 16, &clock_of_test()).await;
    let pool = pool.with_wakeups(&wakeups);
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    let late = h.create_for("tenant-2", "late").await.command_id;
    wakeups.wake();
    let_tasks_run().await;
    Late {
        remote,
        ids,
        late,
        stop,
        handle,
    }
}

/// The prompt lane (issue 33): while one tenant's backlog fills every place of a saturated
/// pool (16 slots: 15 common, 1 reserved for the lane; the claimer's 30 places, two per common
/// slot, all taken by calls held at the remote or waiting for a common slot), another
/// tenant's new command is claimed by the lane on its wake-up and makes its call in the
/// reserved slot, without waiting for any of the backlog's calls. The process never has more
/// than its 16 calls open.
#[tokio::test]
async fn a_new_tenants_command_is_called_in_the_prompt_lane_of_a_saturated_pool() {
    let h = harness();
    let wakeups = Wakeups::new();
    let (pool, remote, ids) = held_pool(&h, 40, 16, &clock_of_test()).await;
    let pool = pool.with_wakeups(&wakeups);
    assert_eq!(
        (
            pool.slots(),
            pool.max_in_flight(),
            pool.refill_at(),
            pool.prompt_places()
        ),
        (16, 31, 15, 1)
    );
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(
        statuses(&h, &ids),
        (10, 30, 0),
        "every place of the claimer taken"
    );
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        15,
        "the backlog holds every common slot"
    );

    let late = h.create_for("tenant-2", "late").await.command_id;
    wakeups.wake();
    let_tasks_run().await;
    assert_eq!(h.command(&late).status, CommandStatus::Processing);
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        16,
        "15 calls of the backlog, 1 of tenant-2 in the lane's slot"
    );
    assert_eq!(
        statuses(&h, &ids),
        (10, 30, 0),
        "the lane took no backlog command"
    );

    remote.gate.add_permits(1_000);
    let_tasks_run().await;
    assert_eq!(statuses(&h, &ids), (0, 0, 40));
    assert_eq!(h.command(&late).status, CommandStatus::Succeeded);
    assert_eq!(remote.most_inside.load(Ordering::SeqCst), 16);
    stop.send(true).unwrap();
    let report = handle.await.unwrap();
    assert_eq!((report.claimed, report.completed), (41, 41));
}

/// Without wake-ups, or turned off, or on fewer than 16 slots, a pool has no prompt lane (and
/// reserves no slot); 8 workers × 16 with no lower remote call limit give it 4 places
/// (`tenantry serve`'s defaults cap the slots at `knowledge_fs_max_concurrent_calls` = 8: no
/// lane).
#[tokio::test]
async fn the_prompt_lane_has_a_place_per_16_slots_up_to_4() {
    let h = harness();
    let wakeups = Wakeups::new();
    let pool = |workers: u32, claim_batch: u32| {
        let dispatcher = Arc::new(Dispatcher::new(
            h.store.clone(),
            h.remote.clone(),
            DispatcherConfig::default(),
        ));
        WorkerPool::new(
            dispatcher,
            owner("pool"),
            workers,
            WorkerConfig {
                claim_batch,
                ..WorkerConfig::default()
            },
        )
    };
    assert_eq!(pool(8, 16).with_wakeups(&wakeups).prompt_places(), 4);
    assert_eq!(pool(2, 16).with_wakeups(&wakeups).prompt_places(), 2);
    assert_eq!(pool(1, 15).with_wakeups(&wakeups).prompt_places(), 0);
    assert_eq!(pool(8, 16).prompt_places(), 0, "no wake-ups");
    assert_eq!(
        pool(8, 16)
            .with_wakeups(&wakeups)
            .with_prompt_lane(false)
            .prompt_places(),
        0
    );
    assert_eq!(
        pool(8, 16)
            .with_wakeups(&wakeups)
            .with_remote_call_limit(20)
            .prompt_places(),
        1,
        "counted on the slots the pool really has"
    );
}

/// A saturated claim's lone command of a tenant goes to the prompt lane too: tenant-2's
/// command, enqueued behind tenant-1's backlog but at the head of the queue by its turn, is in
/// the claimer's first claim (30 of 41, every place) and calls in the lane's reserved slot
/// beside the backlog's 15 calls instead of taking one of their common slots.
#[tokio::test]
async fn a_saturated_claims_lone_command_is_dispatched_in_the_prompt_lane() {
    let h = harness();
    let wakeups = Wakeups::new();
    let (pool, remote, ids) = held_pool(&h, 40, 16, &clock_of_test()).await;
    let late = h.create_for("tenant-2", "late").await.command_id;
    let pool = pool.with_wakeups(&wakeups);
    let (stop, stopped) = watch::channel(false);
    let handle = tokio::spawn(pool.run(stopped));
    let_tasks_run().await;
    assert_eq!(h.command(&late).status, CommandStatus::Processing);
    assert_eq!(
        statuses(&h, &ids),
        (11, 29, 0),
        "29 of the backlog and tenant-2's"
    );
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        16,
        "15 common slots for the backlog, the reserved one for tenant-2"
    );
    remote.gate.add_permits(1_000);
    let_tasks_run().await;
    assert_eq!(h.command(&late).status, CommandStatus::Succeeded);
    stop.send(true).unwrap();
    assert_eq!(handle.await.unwrap().completed, 41);
}

/// The lane also acts while the claimer waits for places after a claim that found fewer
/// commands than it asked for: 20 of tenant-1 fill 20 of the claimer's 30 places (10 free,
/// fewer than the 15 it claims at), so the claimer cannot claim tenant-2's new command until
/// 5 dispatches end; the lane claims it on its wake-up.
#[tokio::test]
async fn the_prompt_lane_acts_while_the_claimer_waits_for_places() {
    let h = harness();
    let Late {
        remote,
        ids,
        late,
        stop,
        handle,
    } = late_after_backlog(&h, 20).await;
    assert_eq!(statuses(&h, &ids), (0, 20, 0));
    assert_eq!(h.command(&late).status, CommandStatus::Processing);
    assert_eq!(remote.inside.load(Ordering::SeqCst), 16);
    remote.gate.add_permits(1_000);
    let_tasks_run().await;
    stop.send(true).unwrap();
    assert_eq!(handle.await.unwrap().completed, 21);
}

/// Shutdown with a dispatch of the prompt lane in its call: the backlog's dispatches waiting
/// for a common slot hand their commands back at once, and the pool returns only once every
/// call made has settled, the lane's included (its report counts them).
#[tokio::test]
async fn shutdown_waits_for_the_prompt_lanes_call_and_hands_back_the_waiting() {
    let h = harness();
    let Late {
        remote,
        ids,
        late,
        stop,
        handle,
    } = late_after_backlog(&h, 40).await;
    assert_eq!(
        remote.inside.load(Ordering::SeqCst),
        16,
        "15 + the lane's call"
    );

    stop.send(true).unwrap();
    let_tasks_run().await;
    assert!(!handle.is_finished(), "16 calls are still open");
    assert_eq!(
        statuses(&h, &ids),
        (25, 15, 0),
        "the 15 waiting for a common slot were handed back"
    );
    assert_eq!(h.command(&late).status, CommandStatus::Processing);

    remote.gate.add_permits(1_000);
    let report = handle.await.unwrap();
    assert_eq!(statuses(&h, &ids), (25, 0, 15));
    assert_eq!(h.command(&late).status, CommandStatus::Succeeded);
    assert_eq!((report.claimed, report.completed), (31, 16));
}
