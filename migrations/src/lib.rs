//! Schema migrations for Tenantry, built on sea-orm-migration.
//!
//! Architecture invariant: migrations declare their own identifier enums and never import the
//! store adapter's entities or any domain type, so later entity changes cannot rewrite history.
//! Timestamps are stored as `BIGINT` Unix milliseconds (UTC) on both backends.
//!
//! One migration per mechanism:
//! - [`m0001_lifecycle`]: `control_spaces` and `lifecycle_outbox`;
//! - [`m0002_host_storage`]: `host_storage` (fences and connector state);
//! - [`m0003_directory`]: the directory projection tables;
//! - [`m0004_lifecycle_claim_index`]: the claim index of the outbox (live commands in due order);
//! - [`m0005_lifecycle_failures`]: the attempt budget column, the status index of the commands
//!   gauge, and the operator action log.
//! - [`m0006_lifecycle_attempt_window`]: when the last attempt of a command could still send.

// `MigrationTrait` is declared through async-trait with an elided lifetime; implementations match it.
#![allow(elided_lifetimes_in_paths)]

pub use sea_orm_migration::prelude::*;

pub mod m0001_lifecycle;
pub mod m0002_host_storage;
pub mod m0003_directory;
pub mod m0004_lifecycle_claim_index;
pub mod m0005_lifecycle_failures;
pub mod m0006_lifecycle_attempt_window;

/// Applies every Tenantry migration in order.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m0001_lifecycle::Migration),
            Box::new(m0002_host_storage::Migration),
            Box::new(m0003_directory::Migration),
            Box::new(m0004_lifecycle_claim_index::Migration),
            Box::new(m0005_lifecycle_failures::Migration),
            Box::new(m0006_lifecycle_attempt_window::Migration),
        ]
    }
}
