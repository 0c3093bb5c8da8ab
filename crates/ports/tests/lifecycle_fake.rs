//! The lifecycle fakes beyond the conformance suites (tests/conformance.rs): the fake
//! KnowledgeFS's answers where they must match the reference server
//! (`tenantry_testkit::knowledge_fs`).
#![cfg(feature = "testing")]

use tenantry_kernel::{
    ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, OperationId, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::{DeletionPhase, DeletionRequest, ErrorCode};
use tenantry_ports::lifecycle::KnowledgeFs;
use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, RemoteCall, RemoteFault};

/// A deletion re-delivered after its `completed` answer was lost is answered `completed`
/// again (the reference KnowledgeFS keeps the deleted space), not 404: a 404 is retryable and
/// would keep the delete command retrying until its attempt budget is spent.
#[tokio::test]
async fn fake_remote_answers_a_replayed_deletion_completed_again() {
    let deletion = |space: &str| DeletionRequest {
        namespace_id: TenantId::parse("t1").unwrap(),
        control_space_id: ControlSpaceId::parse("cs1").unwrap(),
        operation_id: OperationId::parse("op-d").unwrap(),
        idempotency_key: IdempotencyKey::parse("idem-d").unwrap(),
        knowledge_space_id: KnowledgeSpaceId::parse(space).unwrap(),
        provisioning_key: ProvisioningKey::parse("k1").unwrap(),
        expected_revision: 3,
    };
    let remote = FakeKnowledgeFs::new();
    remote.insert_space(
        TenantId::parse("t1").unwrap(),
        ProvisioningKey::parse("k1").unwrap(),
        KnowledgeSpaceId::parse("ks1").unwrap(),
        3,
    );
    remote.push_fault(RemoteCall::Deletion, RemoteFault::LoseAck);
    let lost = remote.request_deletion(&deletion("ks1")).await.unwrap_err();
    assert_eq!(lost.code, ErrorCode::RemoteOutcomeUnknown);
    assert!(!remote.has_space(&ProvisioningKey::parse("k1").unwrap()));

    let replay = remote.request_deletion(&deletion("ks1")).await.unwrap();
    assert_eq!(replay.phase, DeletionPhase::Completed);
    assert_eq!(replay.revision, 4, "the revision of the completed deletion");
    let again = remote.request_deletion(&deletion("ks1")).await.unwrap();
    assert_eq!(again, replay, "every replay answers the same");

    let unknown = remote.request_deletion(&deletion("ks2")).await.unwrap_err();
    assert_eq!(
        unknown.code.as_str(),
        "KNOWLEDGE_FS_SPACE_NOT_FOUND",
        "a space that never existed stays 404"
    );
}
