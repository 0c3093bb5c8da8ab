//! The lifecycle saga with a KnowledgeFS client of your own.
//!
//! Implement `KnowledgeFs` for your client (here an in-memory toy), accept requests with
//! `CommandIntake`, and run a `Worker`: it claims each command under a lease, calls your client
//! with no database transaction open, and settles the result. Your client's job is to classify
//! failures (`RemoteError::answered` / `not_dispatched` / `outcome_unknown`); the saga retries,
//! resolves unknown outcomes by lookup of the provisioning key, and never provisions twice.
//!
//! Run: `cargo run -p tenantry-examples --example saga_with_your_knowledge_fs`

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tenantry_engine::lifecycle::{
    CommandIntake, Dispatcher, DispatcherConfig, SystemClock, Worker, WorkerConfig,
};
use tenantry_kernel::{
    ControlSpaceId, IdempotencyKey, KnowledgeSpaceId, LeaseOwner, ProvisioningKey, TenantId,
};
use tenantry_lifecycle::intake::{CreateControlSpace, RequestDeletion};
use tenantry_lifecycle::{
    ControlSpaceState, DeletionPhase, DeletionProgress, DeletionRequest, ProvisionRequest,
    RemoteSpace, RevokeAck, RevokeRequest, RevokeState,
};
use tenantry_ports::lifecycle::{ControlSpaceReader, KnowledgeFs, RemoteError};
use tenantry_store_seaorm::lifecycle::SeaOrmLifecycleStore;

/// Your KnowledgeFS client. A real one sends HTTP requests and maps transport failures to
/// `RemoteError::not_dispatched` (nothing sent) or `RemoteError::outcome_unknown` (sent, no
/// complete answer), and error answers to `RemoteError::answered`.
#[derive(Default)]
struct MyKnowledgeFs {
    spaces: Mutex<HashMap<ProvisioningKey, RemoteSpace>>,
}

impl MyKnowledgeFs {
    fn spaces(&self) -> std::sync::MutexGuard<'_, HashMap<ProvisioningKey, RemoteSpace>> {
        self.spaces.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait]
impl KnowledgeFs for MyKnowledgeFs {
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError> {
        let mut spaces = self.spaces();
        // Idempotent on the provisioning key: a re-delivery returns the same space.
        let space = spaces
            .entry(request.provisioning_key.clone())
            .or_insert_with(|| RemoteSpace {
                namespace_id: request.namespace_id.clone(),
                knowledge_space_id: KnowledgeSpaceId::parse(format!(
                    "ks-{}",
                    request.control_space_id
                ))
                .unwrap_or_else(|_| unreachable!("a control space id makes a valid space id")),
                revision: 1,
            });
        println!("  remote: provisioned {}", space.knowledge_space_id);
        Ok(space.clone())
    }

    async fn find_by_provisioning_key(
        &self,
        _namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        _control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError> {
        Ok(self.spaces().get(provisioning_key).cloned())
    }

    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError> {
        self.spaces().remove(&request.provisioning_key);
        println!("  remote: deleted {}", request.knowledge_space_id);
        Ok(DeletionProgress {
            phase: DeletionPhase::Completed,
            irreversible_at: None,
            revision: request.expected_revision + 1,
            retry_after: None,
        })
    }

    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError> {
        Ok(RevokeAck {
            state: RevokeState::Revoked,
            highest_revoke_sequence: request.revoke_sequence,
        })
    }
}

/// Polls the control space until it reaches `state` (the worker runs in the background).
async fn wait_for(
    store: &SeaOrmLifecycleStore,
    tenant: &TenantId,
    space: &ControlSpaceId,
    state: ControlSpaceState,
) -> Result<(), Box<dyn std::error::Error>> {
    for _ in 0..200 {
        if let Some(current) = store.control_space(tenant, space).await?
            && current.state == state
        {
            println!("  control space {space} is {state}");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!("control space {space} did not become {state}").into())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

/// The example; also run by `cargo test` (see the test at the end).
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("saga.db").display());
    let db = tenantry_store_seaorm::connect(&url, 4).await?;
    let store = SeaOrmLifecycleStore::new(&db);

    // The worker: claims due commands, calls your client, settles.
    let dispatcher = Arc::new(Dispatcher::new(
        store.clone(),
        MyKnowledgeFs::default(),
        DispatcherConfig::default(),
    ));
    let config = WorkerConfig {
        idle_poll: Duration::from_millis(50),
        ..WorkerConfig::default()
    };
    let worker = Worker::new(dispatcher, LeaseOwner::parse("example-worker")?, config);
    let (stop, shutdown) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(worker.run(shutdown));

    let intake = CommandIntake::new(store.clone(), Arc::new(SystemClock));
    let tenant = TenantId::parse("acme")?;
    let space = ControlSpaceId::parse("handbook")?;

    println!("1. create a control space: its provision is enqueued in the same transaction");
    let receipt = intake
        .create_control_space(
            &CreateControlSpace::new(
                tenant.clone(),
                space.clone(),
                IdempotencyKey::parse("create-handbook")?,
                "Handbook",
                "handbook",
            )
            .with_description("Company handbook"),
        )
        .await?;
    println!("  command {} ({})", receipt.command_id, receipt.operation);
    wait_for(&store, &tenant, &space, ControlSpaceState::Active).await?;

    println!("2. delete it");
    intake
        .request_deletion(&RequestDeletion::new(
            tenant.clone(),
            space.clone(),
            IdempotencyKey::parse("delete-handbook")?,
        ))
        .await?;
    wait_for(&store, &tenant, &space, ControlSpaceState::Deleted).await?;

    stop.send(true)?;
    let report = running.await?;
    println!(
        "worker stopped: {} claimed, {} completed",
        report.claimed, report.completed
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread")]
    async fn the_example_runs() {
        if let Err(error) = super::run().await {
            panic!("the example failed: {error}");
        }
    }
}
