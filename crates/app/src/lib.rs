//! The `tenantry` service: configuration, wiring of adapters into the engine, the admin HTTP
//! API, the operator CLI, metrics, and the end-to-end demo.
//!
//! Architecture invariant: this crate only reads configuration, wires adapters into the
//! engine and translates HTTP / CLI input into engine calls. Lifecycle, fence and directory
//! rules live in the domain crates and the engine; storage in `tenantry-store-seaorm`; remote
//! calls in `tenantry-remote-http`. It knows neither SeaORM nor reqwest.
//!
//! - [`config`]: TOML file plus `TENANTRY_*` environment, validated at start;
//! - [`service`]: `tenantry serve` wiring and graceful shutdown;
//! - [`admin`]: the admin API router;
//! - [`directory`]: the directory projector's wiring and status;
//! - [`fences`]: fence listing and clearing across installation bindings;
//! - [`metrics`]: the lifecycle metrics port over the `metrics` crate, Prometheus export;
//! - [`ops`]: operator commands on the database (`migrate`, `commands list`, `fences ...`);
//! - [`demo`]: `tenantry demo`, the end-to-end run against the reference remote;
//! - [`cli`]: the command line.

pub mod admin;
pub mod cli;
pub mod config;
pub mod demo;
pub mod directory;
pub mod fences;
pub mod logging;
pub mod metrics;
pub mod ops;
pub mod reference_remote;
pub mod service;
