//! The operator façade: what the three operator front doors (the admin HTTP API, the console
//! and the `tenantry` CLI) share, written once and rendered by each in its own form, and the
//! HTTP front ends themselves. The `tenantry` app wires the stores and hands them in; this
//! crate reads and writes through the ports and the engine's use cases.
//!
//! - [`filter`]: the command filter. One typed input ([`CommandFilterInput`]), one parser,
//!   one refusal ([`FilterError`] naming the [`FilterField`]), which the API reports as 400
//!   `INVALID_ARGUMENT` with its parameter name, the console on its error page, and the CLI
//!   with the option's name (exit code 2);
//! - [`admin`]: the admin API router (`/v1/*`, probes, `/metrics`, `/openapi.json`);
//! - [`ui`]: the operator console at `/ui`, beside the admin API;
//! - [`counts`]: the counts `/metrics` and the console share, refreshed at most once a second;
//! - [`metrics`]: the lifecycle metrics port over the `metrics` crate, Prometheus export;
//! - [`directory`]: the directory projection's status as the operator sees it;
//! - [`ports`]: the store ports the front ends are handed (trait objects, no storage types);
//! - [`listener`]: how the admin listener serves its connections (bounds, host check, graceful
//!   shutdown) and its TLS ([`listener::tls`]: `tls_cert_file`, `tls_key_file`);
//! - [`identity`]: named operators with roles, the secrets they hold, and the actor rule;
//! - [`refusal`]: the one refusal type, mapped once to an HTTP status, a console page and a
//!   CLI exit code.

pub mod admin;
pub mod counts;
pub mod directory;
pub mod fence_metrics;
pub mod filter;
pub mod identity;
pub mod listener;
pub mod metrics;
pub mod ports;
pub mod refusal;
pub mod ui;

pub use filter::{CommandFilterInput, DEFAULT_PAGE, FilterError, FilterField, MAX_PAGE};
pub use refusal::OperatorRefusal;
