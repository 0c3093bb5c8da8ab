//! The `tenantry` service: configuration, wiring of adapters into the engine and into the
//! operator front ends (the admin HTTP API, the console, the counts and the metrics, all in
//! `tenantry-operator`), the operator CLI and `serve`. The end-to-end demo and the reference remotes are the
//! separate `tenantry-demo` binary (crates/demo), which starts this library's service; the
//! `tenantry` binary links neither the demo nor the test kit.
//!
//! Architecture invariant: this crate only reads configuration, wires adapters into the
//! engine and translates HTTP / CLI input into engine calls. Lifecycle, fence and directory
//! rules live in the domain crates and the engine; storage in `tenantry-store-seaorm`; remote
//! calls in `tenantry-remote-http`. It knows neither SeaORM nor reqwest.
//!
//! - [`config`]: TOML file plus `TENANTRY_*` environment, validated at start (the
//!   `tenantry-config` crate, re-exported);
//! - [`service`]: `tenantry serve` wiring and graceful shutdown;
//! - [`stores`]: the one module that names the storage adapter: it opens the database and
//!   builds the stores, handed on as ports;
//! - [`admin`], [`ui`], [`counts`], [`metrics`]: the operator front ends, re-exported from
//!   `tenantry-operator`;
//! - [`directory`]: the directory projector's wiring and status;
//! - [`ops`]: operator commands on the database (`migrate`, `commands list`, `fences ...`);
//! - [`listener`], [`tls`]: the admin listener and its TLS (`tls_cert_file`, `tls_key_file`),
//!   re-exported from `tenantry-operator`;
//! - [`cli`]: the command line.

pub mod cli;
pub mod directory;
pub mod logging;
pub mod ops;
pub mod service;
pub mod stores;
pub mod telemetry;

pub use tenantry_config as config;
pub use tenantry_operator::listener::{self, tls};
pub use tenantry_operator::{admin, counts, metrics, ui};
