//! Conformance cases of `list_commands`: filters and pages.

use super::*;

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
