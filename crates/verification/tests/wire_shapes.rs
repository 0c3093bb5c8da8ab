//! insta snapshots of wire and storage shapes: the JSON payload of each lifecycle command kind
//! as intake plans it (what the outbox's `payload` column holds and workers parse), and the
//! fence records (`FenceMarker`) as host storage holds them. A change of shape shows up as a
//! snapshot diff; the `.snap` files are committed, so CI needs no `cargo insta`
//! (`INSTA_UPDATE=always cargo test -p tenantry-verification --test wire_shapes` rewrites them
//! after an intended change).
#![allow(clippy::unwrap_used)]

use chrono::{TimeZone, Utc};
use serde_json::json;
use tenantry_fence::{FailureRecord, FenceMarker, ScopeIdentity};
use tenantry_kernel::{
    CommandId, ControlSpaceId, GrantId, IdempotencyKey, KnowledgeSpaceId, OperationId, TenantId,
};
use tenantry_lifecycle::intake::{
    ControlSpaceWrite, CreateControlSpace, NewIds, RequestDeletion, RequestRevocation,
};
use tenantry_lifecycle::{ControlSpace, Transition};

fn ids(n: u32) -> NewIds {
    NewIds {
        command_id: CommandId::parse(format!("cmd-{n}")).unwrap(),
        operation_id: OperationId::parse(format!("op-{n}")).unwrap(),
    }
}

fn created() -> (ControlSpace, serde_json::Value) {
    let now = Utc.timestamp_opt(1_900_000_000, 0).unwrap();
    let request = CreateControlSpace::new(
        TenantId::parse("tenant-1").unwrap(),
        ControlSpaceId::parse("cs-1").unwrap(),
        IdempotencyKey::parse("create-1").unwrap(),
        "Docs",
        "docs",
    )
    .with_icon("book")
    .with_description("Product docs")
    .with_profile_intent(json!({"tier": "pro"}));
    let plan = request.plan(ids(1), now).unwrap();
    let ControlSpaceWrite::Insert(cs) = plan.control_space else {
        panic!("a create inserts its control space");
    };
    (cs, plan.command.payload)
}

#[test]
fn provision_command_payload() {
    insta::assert_json_snapshot!("provision_payload", created().1);
}

#[test]
fn delete_command_payload() {
    let (cs, _) = created();
    let request = RequestDeletion::new(
        cs.tenant_id.clone(),
        cs.control_space_id.clone(),
        IdempotencyKey::parse("delete-1").unwrap(),
    );
    let plan = request.plan(Some(&cs), ids(2), cs.created_at).unwrap();
    insta::assert_json_snapshot!("delete_payload", plan.command.payload);
}

#[test]
fn revoke_command_payload() {
    let (cs, _) = created();
    let active = cs
        .apply(
            &Transition::Activate {
                operation_id: cs.lifecycle_operation_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse("ks-1").unwrap(),
                revision: 3,
            },
            cs.created_at,
        )
        .unwrap();
    let request = RequestRevocation::new(
        cs.tenant_id.clone(),
        cs.control_space_id.clone(),
        GrantId::parse("grant-1").unwrap(),
        "user_removed",
        IdempotencyKey::parse("revoke-1").unwrap(),
    );
    let plan = request.plan(Some(&active), ids(3), cs.created_at).unwrap();
    insta::assert_json_snapshot!("revoke_payload", plan.command.payload);
}

#[test]
fn fence_markers() {
    let scope = ScopeIdentity::object("kb-1");
    let markers = json!({
        "intent": FenceMarker::intent(&scope, "upload document", "host-a-1234", 1_000, 181_000).to_value(),
        "fence_after_unknown_outcome": FenceMarker::fence(
            &scope,
            "upload document",
            FailureRecord { kind: "outcome_unknown".into(), detail: "connection reset after send".into() },
            2_000,
        ).to_value(),
        "operator_hold_on_installation": FenceMarker::new(&ScopeIdentity::Installation, "maintenance", 3_000).to_value(),
    });
    insta::assert_json_snapshot!("fence_markers", markers);
}
