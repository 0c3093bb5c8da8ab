//! Unit-testing your own code against Tenantry's in-memory fakes (feature `testing` of
//! `tenantry-ports`, as a dev-dependency): no database, no server, deterministic.
//!
//! Your code is generic over the port traits (`LifecycleStore`, `KnowledgeFs`, `HostStorage`);
//! production wires the SeaORM store and your HTTP client, tests wire the fakes.
//!
//! Run: `cargo test -p tenantry-examples --example testing_with_fakes`

use std::sync::Arc;

use tenantry_engine::lifecycle::{CommandIntake, IntakeFailure, SystemClock};
use tenantry_kernel::{ControlSpaceId, IdempotencyKey, TenantId};
use tenantry_lifecycle::intake::CreateControlSpace;
use tenantry_ports::lifecycle::LifecycleStore;

/// Your platform's service: opening a project gives it a knowledge space.
pub struct Projects<S> {
    intake: CommandIntake<S>,
}

impl<S: LifecycleStore> Projects<S> {
    /// Projects over any lifecycle store.
    pub fn new(store: S) -> Self {
        Self {
            intake: CommandIntake::new(store, Arc::new(SystemClock)),
        }
    }

    /// Opens project `id` of `tenant`; calling it again is harmless (same idempotency key).
    pub async fn open(&self, tenant: &str, id: &str) -> Result<bool, Box<dyn std::error::Error>> {
        let request = CreateControlSpace::new(
            TenantId::parse(tenant)?,
            ControlSpaceId::parse(id)?,
            IdempotencyKey::parse(format!("open-project-{tenant}-{id}"))?,
            format!("Project {id}"),
            id.to_owned(),
        );
        match self.intake.create_control_space(&request).await {
            Ok(receipt) => Ok(!receipt.replayed),
            Err(IntakeFailure::Store(error)) => Err(format!("try again later: {error}").into()),
            Err(other) => Err(other.into()),
        }
    }
}

fn main() {
    println!("run the tests: cargo test -p tenantry-examples --example testing_with_fakes");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use tenantry_engine::lifecycle::{Dispatcher, DispatcherConfig};
    use tenantry_kernel::{ControlSpaceId, LeaseOwner, TenantId};
    use tenantry_lifecycle::ControlSpaceState;
    use tenantry_ports::lifecycle::fake::{FakeKnowledgeFs, InMemoryLifecycleStore};
    use tenantry_ports::lifecycle::{ControlSpaceReader, StoreError};

    use super::Projects;

    #[tokio::test]
    async fn opening_a_project_twice_enqueues_one_provision() {
        let store = InMemoryLifecycleStore::new();
        let projects = Projects::new(store.clone());
        assert!(projects.open("acme", "apollo").await.unwrap());
        assert!(!projects.open("acme", "apollo").await.unwrap());
        assert_eq!(store.commands().len(), 1);
    }

    #[tokio::test]
    async fn the_opened_project_gets_its_knowledge_space() {
        let store = InMemoryLifecycleStore::new();
        let remote = FakeKnowledgeFs::new();
        Projects::new(store.clone())
            .open("acme", "apollo")
            .await
            .unwrap();
        let dispatcher =
            Dispatcher::new(store.clone(), remote.clone(), DispatcherConfig::default());
        dispatcher
            .dispatch_one(&LeaseOwner::parse("test").unwrap(), true)
            .await
            .unwrap();
        let space = store
            .control_space(
                &TenantId::parse("acme").unwrap(),
                &ControlSpaceId::parse("apollo").unwrap(),
            )
            .await
            .unwrap()
            .unwrap();
        assert_eq!(space.state, ControlSpaceState::Active);
        assert_eq!(remote.counters().spaces_created, 1);
    }

    #[tokio::test]
    async fn a_storage_outage_is_reported_as_retryable() {
        let store = InMemoryLifecycleStore::new();
        store.fail_next_call(StoreError::unavailable("database restarting"));
        let error = Projects::new(store)
            .open("acme", "apollo")
            .await
            .unwrap_err();
        assert!(error.to_string().starts_with("try again later"), "{error}");
    }

    /// Every port is implemented for `Arc<T>` (and `&T`): share one fake between your code
    /// and the test's assertions.
    #[tokio::test]
    async fn a_shared_fake_sees_what_your_code_wrote() {
        let store = std::sync::Arc::new(InMemoryLifecycleStore::new());
        Projects::new(store.clone())
            .open("acme", "apollo")
            .await
            .unwrap();
        assert_eq!(store.commands().len(), 1);
    }
}
