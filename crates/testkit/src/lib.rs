//! Test kit of Tenantry: reference remotes with fault injection, for contract tests of the
//! HTTP adapters and end-to-end runs of the engine, in this repository and in the tests of
//! platforms built on Tenantry.
//!
//! - [`knowledge_fs`]: the reference KnowledgeFS lifecycle API v1 (axum, in memory):
//!   provisioning idempotent on the provisioning key, draining deletions, revoke watermarks,
//!   bearer auth, `{code, message}` errors, and ground-truth effect counters that prove
//!   exactly-once delivery;
//! - [`directory`]: the reference Directory API v1 provider (axum, in memory): snapshot,
//!   event pages and deltas of one instance that a test mutates, every answer signed with
//!   Ed25519 (two trusted rotation keys, one untrusted);
//! - [`fault`]: per-route fault plans (script, or seeded probability) and fault profiles:
//!   503 / 429 with `Retry-After`, lost ACK, connection reset, stall, watermark lag, stale
//!   directory page, untrusted / bad / missing signature, skewed timestamp;
//! - [`openapi`]: the OpenAPI documents the reference servers serve at `/openapi.json`;
//! - [`tls`]: a CA made at run time (rcgen) and the certificates it issues, for serving the
//!   reference remotes over HTTPS (`start_tls_on`) and for TLS tests.
//!
//! Start one remote per test with [`knowledge_fs::ReferenceRemote::start`]; it binds
//! `127.0.0.1:0`, so tests run in parallel.

pub mod directory;
pub mod fault;
mod http;
pub mod knowledge_fs;
pub mod openapi;
mod serve;
pub mod tls;
