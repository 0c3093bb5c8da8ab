//! Contract tests: `HttpKnowledgeFs` against the reference KnowledgeFS, with and without
//! faults. Each behaviour of the lifecycle API v1 and of the client's failure classification
//! has a test named after it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tenantry_kernel::outcome::DispatchOutcome;
use tenantry_kernel::{
    ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, OperationId, ProvisioningKey,
    TenantId,
};
use tenantry_lifecycle::{
    DeletionPhase, DeletionRequest, ProvisionRequest, RemoteSpace, RevokeRequest, RevokeState,
};
use tenantry_ports::lifecycle::{KnowledgeFs, RemoteError};
use tenantry_remote_http::knowledge_fs::{
    CODE_CLIENT_SATURATED, HttpKnowledgeFs, KnowledgeFsConfig,
};
use tenantry_testkit::fault::{Fault, FaultProfile, Route};
use tenantry_testkit::knowledge_fs::{ModelConfig, ReferenceRemote, RemoteConfig};

fn tenant() -> TenantId {
    TenantId::parse("tenant-1").unwrap()
}

fn client(remote: &ReferenceRemote) -> HttpKnowledgeFs {
    client_with(remote, Duration::from_secs(10), 4)
}

fn client_with(
    remote: &ReferenceRemote,
    deadline: Duration,
    concurrency: usize,
) -> HttpKnowledgeFs {
    HttpKnowledgeFs::new(&KnowledgeFsConfig {
        deadline,
        max_concurrent_calls: concurrency,
        ..KnowledgeFsConfig::new(remote.base_url(), remote.bearer_token())
    })
    .unwrap()
}

fn provision_request(n: u32) -> ProvisionRequest {
    ProvisionRequest {
        namespace_id: tenant(),
        control_space_id: ControlSpaceId::parse(format!("cs-{n}")).unwrap(),
        operation_id: OperationId::parse(format!("op-provision-{n}")).unwrap(),
        idempotency_key: IdempotencyKey::parse(format!("idem-provision-{n}")).unwrap(),
        provisioning_key: ProvisioningKey::parse(format!("pk-{n}")).unwrap(),
        name: format!("Space {n}"),
        slug: format!("space-{n}"),
        icon: "book".into(),
        description: "contract test".into(),
        model_intent: Some(serde_json::json!({"model": "small"})),
        profile_intent: None,
    }
}

fn deletion_request(n: u32, space: &RemoteSpace) -> DeletionRequest {
    DeletionRequest {
        namespace_id: tenant(),
        control_space_id: ControlSpaceId::parse(format!("cs-{n}")).unwrap(),
        operation_id: OperationId::parse(format!("op-delete-{n}")).unwrap(),
        idempotency_key: IdempotencyKey::parse(format!("idem-delete-{n}")).unwrap(),
        knowledge_space_id: space.knowledge_space_id.clone(),
        provisioning_key: ProvisioningKey::parse(format!("pk-{n}")).unwrap(),
        expected_revision: space.revision,
    }
}

fn revoke_request(n: u32, space: &KnowledgeSpaceId, seq: i64) -> RevokeRequest {
    RevokeRequest {
        namespace_id: tenant(),
        control_space_id: ControlSpaceId::parse(format!("cs-{n}")).unwrap(),
        operation_id: OperationId::parse(format!("op-revoke-{n}-{seq}")).unwrap(),
        idempotency_key: IdempotencyKey::parse(format!("idem-revoke-{n}-{seq}")).unwrap(),
        knowledge_space_id: space.clone(),
        grant_id: GrantId::parse("grant-1").unwrap(),
        event_id: format!("event-{seq}"),
        reason_code: "member_removed".into(),
        revoke_sequence: seq,
        expected_revision: 1,
    }
}

async fn lookup(fs: &HttpKnowledgeFs, n: u32) -> Result<Option<RemoteSpace>, RemoteError> {
    fs.find_by_provisioning_key(
        &tenant(),
        &ProvisioningKey::parse(format!("pk-{n}")).unwrap(),
        &ControlSpaceId::parse(format!("cs-{n}")).unwrap(),
    )
    .await
}

#[tokio::test]
async fn provision_is_idempotent_on_provisioning_key_over_http() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let fs = client(&remote);
    let first = fs.provision(&provision_request(1)).await.unwrap();
    let again = fs.provision(&provision_request(1)).await.unwrap();
    assert_eq!(first, again);
    assert_eq!(first.namespace_id, tenant());
    assert_eq!(first.revision, 1);
    let truth = remote.truth();
    assert_eq!(truth.effects().spaces_created, 1);
    assert_eq!(truth.effects().provision_replays, 1);
    assert_eq!(truth.check_exactly_once(), Ok(()));
}

#[tokio::test]
async fn lookup_by_provisioning_key_is_authoritative() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let fs = client(&remote);
    assert_eq!(
        lookup(&fs, 1).await.unwrap(),
        None,
        "empty items prove absence"
    );
    let space = fs.provision(&provision_request(1)).await.unwrap();
    assert_eq!(lookup(&fs, 1).await.unwrap(), Some(space));
    assert_eq!(lookup(&fs, 2).await.unwrap(), None);
}

#[tokio::test]
async fn deletion_drains_then_becomes_irreversible_then_completed_over_http() {
    let config = RemoteConfig {
        model: ModelConfig {
            deletion_drain_polls: 3,
            deletion_irreversible_polls: 1,
            revoke_watermark_lag_polls: 0,
        },
        ..RemoteConfig::default()
    };
    let (_, remote) = ReferenceRemote::start(config).await.unwrap();
    let fs = client(&remote);
    let space = fs.provision(&provision_request(1)).await.unwrap();
    let mut phases = Vec::new();
    let mut last = None;
    for _ in 0..6 {
        let progress = fs
            .request_deletion(&deletion_request(1, &space))
            .await
            .unwrap();
        assert_eq!(
            progress.retry_after,
            Some(std::time::Duration::from_secs(1)),
            "the client reads the poll interval (Retry-After) of a deletion answer"
        );
        phases.push(progress.phase);
        last = Some(progress);
    }
    use DeletionPhase::*;
    assert_eq!(
        phases,
        [
            Accepted,
            Draining,
            Draining,
            Irreversible,
            Completed,
            Completed
        ]
    );
    let last = last.unwrap();
    assert!(last.irreversible_at.is_some());
    assert!(last.revision > space.revision);
    assert_eq!(
        lookup(&fs, 1).await.unwrap(),
        None,
        "a completed deletion is absent"
    );
    let effects = remote.truth().effects();
    assert_eq!(
        (effects.deletions_started, effects.deletions_completed),
        (1, 1)
    );
}

#[tokio::test]
async fn deletion_of_unknown_space_is_answered_not_found() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let fs = client(&remote);
    let ghost = RemoteSpace {
        namespace_id: tenant(),
        knowledge_space_id: KnowledgeSpaceId::parse("ks-ghost").unwrap(),
        revision: 1,
    };
    let err = fs
        .request_deletion(&deletion_request(1, &ghost))
        .await
        .unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(404));
    assert_eq!(err.code, "KNOWLEDGE_FS_SPACE_NOT_FOUND");
}

#[tokio::test]
async fn revoke_watermark_lag_answers_pending_then_revoked() {
    let config = RemoteConfig {
        model: ModelConfig {
            revoke_watermark_lag_polls: 1,
            ..ModelConfig::default()
        },
        ..RemoteConfig::default()
    };
    let (_, remote) = ReferenceRemote::start(config).await.unwrap();
    remote.script(Route::Revocation, [None, Some(Fault::LagWatermark)]);
    let fs = client(&remote);
    let space = fs.provision(&provision_request(1)).await.unwrap();
    let ks = space.knowledge_space_id;
    let states: Vec<_> = {
        let mut v = Vec::new();
        for _ in 0..3 {
            v.push(fs.revoke_grant(&revoke_request(1, &ks, 4)).await.unwrap());
        }
        v
    };
    assert_eq!(states[0].state, RevokeState::Pending, "configured lag");
    assert_eq!(states[1].state, RevokeState::Pending, "injected lag");
    assert_eq!(states[2].state, RevokeState::Revoked);
    assert_eq!(states[2].highest_revoke_sequence, 4);
    assert!(states[..2].iter().all(|a| a.highest_revoke_sequence == 0));
    let older = fs.revoke_grant(&revoke_request(1, &ks, 2)).await.unwrap();
    assert_eq!(
        (older.state, older.highest_revoke_sequence),
        (RevokeState::Revoked, 4)
    );
    assert_eq!(
        remote
            .truth()
            .watermark(&ks, &GrantId::parse("grant-1").unwrap()),
        4
    );
    assert_eq!(remote.truth().effects().revocations_applied, 1);
}

#[tokio::test]
async fn lost_ack_provision_then_lookup_finds_exactly_one_space() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    remote.script(Route::Provision, [Some(Fault::LostAck)]);
    let fs = client(&remote);
    let err = fs.provision(&provision_request(1)).await.unwrap_err();
    eprintln!("lost ACK observed as: {err}");
    assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown, "{err}");
    assert_eq!(err.code, "REMOTE_OUTCOME_UNKNOWN");
    // The saga resolves the unknown outcome by lookup, not by a new provisioning key.
    let found = lookup(&fs, 1)
        .await
        .unwrap()
        .expect("the committed space is found");
    let truth = remote.truth();
    let spaces =
        truth.spaces_by_provisioning_key(&tenant(), &ProvisioningKey::parse("pk-1").unwrap());
    assert_eq!(spaces.len(), 1);
    assert_eq!(spaces[0].knowledge_space_id, found.knowledge_space_id);
    // A re-send with the same keys is answered with the same space.
    assert_eq!(fs.provision(&provision_request(1)).await.unwrap(), found);
    assert_eq!(truth.effects().spaces_created, 1);
    assert_eq!(truth.check_exactly_once(), Ok(()));
}

#[tokio::test]
async fn reset_after_commit_is_outcome_unknown() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let fs = client(&remote);
    let space = fs.provision(&provision_request(1)).await.unwrap();
    remote.script(Route::Deletion, [Some(Fault::ResetAfterCommit)]);
    let err = fs
        .request_deletion(&deletion_request(1, &space))
        .await
        .unwrap_err();
    eprintln!("reset observed as: {err}");
    assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown, "{err}");
    assert_eq!(
        remote.truth().effects().deletions_started,
        1,
        "the effect was committed"
    );
    let progress = fs
        .request_deletion(&deletion_request(1, &space))
        .await
        .unwrap();
    assert_eq!(
        progress.phase,
        DeletionPhase::Draining,
        "the retry polls the same deletion"
    );
}

#[tokio::test]
async fn stall_past_the_deadline_is_outcome_unknown() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    remote.script(Route::Provision, [Some(Fault::Stall { commit: true })]);
    let fs = client_with(&remote, Duration::from_millis(300), 4);
    let err = fs.provision(&provision_request(1)).await.unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::OutcomeUnknown, "{err}");
    assert_eq!(lookup(&fs, 1).await.unwrap().map(|s| s.revision), Some(1));
}

#[tokio::test]
async fn unavailable_is_answered_with_code_and_retry_after() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    remote.script(
        Route::Provision,
        [
            Some(Fault::Unavailable {
                retry_after_secs: 7,
            }),
            Some(Fault::RateLimited {
                retry_after_secs: 2,
            }),
        ],
    );
    let fs = client(&remote);
    let err = fs.provision(&provision_request(1)).await.unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(503));
    assert_eq!(err.code, "KFS_UNAVAILABLE");
    assert_eq!(err.retry_after, Some(Duration::from_secs(7)));
    let err = fs.provision(&provision_request(1)).await.unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(429));
    assert_eq!(err.code, "KFS_RATE_LIMITED");
    assert_eq!(err.retry_after, Some(Duration::from_secs(2)));
    assert!(
        remote.truth().spaces().is_empty(),
        "503 and 429 apply no effect"
    );
    fs.provision(&provision_request(1)).await.unwrap();
}

#[tokio::test]
async fn connection_refused_is_not_dispatched() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let fs = client(&remote);
    remote.shutdown().await;
    let err = fs.provision(&provision_request(1)).await.unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::NotDispatched, "{err}");
    assert_eq!(err.code, "REMOTE_UNAVAILABLE");
}

#[tokio::test]
async fn wrong_bearer_token_is_answered_unauthorized() {
    let (url, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let fs = HttpKnowledgeFs::new(&KnowledgeFsConfig::new(url, "not-the-token")).unwrap();
    let err = fs.provision(&provision_request(1)).await.unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(401));
    assert_eq!(err.code, "UNAUTHORIZED");
    assert!(remote.truth().spaces().is_empty());
}

#[tokio::test]
async fn same_idempotency_key_with_different_body_is_refused_422() {
    let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
        .await
        .unwrap();
    let fs = client(&remote);
    fs.provision(&provision_request(1)).await.unwrap();
    let mut changed = provision_request(1);
    changed.name = "Another name".into();
    let err = fs.provision(&changed).await.unwrap_err();
    assert_eq!(err.failure, DispatchOutcome::answered(422));
    assert_eq!(err.code, "IDEMPOTENCY_KEY_REUSED");
    assert_eq!(remote.truth().effects().idempotency_conflicts, 1);
}

#[tokio::test]
async fn concurrency_is_bounded_and_queueing_counts_against_the_deadline() {
    // Timing-dependent: the queued call must still be waiting for the only permit when its own
    // deadline passes. On a loaded machine it can start late enough to get the permit once the
    // stalled call gives up; such a run proves nothing either way, so try again (at most 5).
    for attempt in 1..=5 {
        let (_, remote) = ReferenceRemote::start(RemoteConfig::default())
            .await
            .unwrap();
        remote.script(Route::Lookup, [Some(Fault::Stall { commit: false })]);
        let fs = client_with(&remote, Duration::from_millis(400), 1);
        let (stalled, queued) = tokio::join!(lookup(&fs, 1), async {
            // Let the first call take the only permit.
            tokio::task::yield_now().await;
            lookup(&fs, 2).await
        });
        match (stalled, queued) {
            (Err(stalled), Err(queued)) if stalled.failure == DispatchOutcome::OutcomeUnknown => {
                assert_eq!(queued.failure, DispatchOutcome::NotDispatched, "{queued}");
                assert_eq!(queued.code, CODE_CLIENT_SATURATED);
                assert_eq!(remote.truth().requests().get(&Route::Lookup), Some(&1));
                return;
            }
            other => eprintln!("attempt {attempt}: calls interleaved otherwise ({other:?}); again"),
        }
    }
    panic!("the queued call never timed out while waiting for the permit");
}

/// A minimal saga driver for the soak tests: provision until acknowledged, resolving unknown
/// outcomes by lookup; then delete until completed; then revoke until covered.
async fn drive(fs: &HttpKnowledgeFs, n: u32) -> RemoteSpace {
    let mut space = None;
    for _ in 0..200 {
        match fs.provision(&provision_request(n)).await {
            Ok(s) => {
                space = Some(s);
                break;
            }
            Err(e) if e.failure == DispatchOutcome::OutcomeUnknown => {
                if let Ok(Some(s)) = lookup(fs, n).await {
                    space = Some(s);
                    break;
                }
            }
            Err(_) => {}
        }
    }
    let space = space.expect("provisioned within 200 attempts");
    for seq in [1, 2] {
        for _ in 0..200 {
            if let Ok(ack) = fs
                .revoke_grant(&revoke_request(n, &space.knowledge_space_id, seq))
                .await
                && ack.state == RevokeState::Revoked
            {
                break;
            }
        }
    }
    for _ in 0..200 {
        if let Ok(p) = fs.request_deletion(&deletion_request(n, &space)).await
            && p.phase == DeletionPhase::Completed
        {
            break;
        }
    }
    space
}

async fn soak(profile: FaultProfile, seed: u64, spaces: u32, deadline: Duration) {
    let config = RemoteConfig {
        profile,
        seed,
        stall: Duration::from_secs(60),
        ..RemoteConfig::default()
    };
    let (_, remote) = ReferenceRemote::start(config).await.unwrap();
    let fs = client_with(&remote, deadline, 4);
    let runs = (1..=spaces).map(|n| {
        let fs = fs.clone();
        async move { drive(&fs, n).await }
    });
    let provisioned = futures_join_all(runs).await;
    let truth = remote.truth();
    eprintln!(
        "{profile:?} seed {seed}: requests {:?}, faults {:?}, effects {:?}",
        truth.requests(),
        truth.faults_injected(),
        truth.effects()
    );
    assert_eq!(truth.check_exactly_once(), Ok(()));
    let effects = truth.effects();
    assert_eq!(effects.spaces_created, u64::from(spaces));
    assert_eq!(effects.deletions_completed, u64::from(spaces));
    assert_eq!(effects.revocations_applied, 2 * u64::from(spaces));
    for (n, space) in (1..=spaces).zip(&provisioned) {
        let by_key = truth.spaces_by_provisioning_key(
            &tenant(),
            &ProvisioningKey::parse(format!("pk-{n}")).unwrap(),
        );
        assert_eq!(by_key.len(), 1);
        assert_eq!(by_key[0].knowledge_space_id, space.knowledge_space_id);
    }
    if profile != FaultProfile::None {
        assert!(
            !truth.faults_injected().is_empty(),
            "the profile injected no fault"
        );
    }
}

async fn futures_join_all<F: std::future::Future<Output = RemoteSpace> + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<RemoteSpace> {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_without_faults() {
    soak(FaultProfile::None, 1, 20, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_under_default_faults() {
    soak(FaultProfile::Default, 2, 40, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_under_heavy_faults_with_stalls() {
    soak(FaultProfile::Heavy, 3, 12, Duration::from_millis(250)).await;
}
