//! reqwest adapters of Tenantry.
//!
//! Architecture invariant: only this crate knows reqwest. Every transport failure is mapped to
//! one of the three dispatch outcomes of `tenantry_fence::outcome` (not dispatched, answered,
//! outcome unknown) before it leaves the crate; no `reqwest::Error` crosses a port.
//!
//! - [`outcome`]: classifying a reqwest error or response into a dispatch outcome, and
//!   reading a mutation's answer completely;
//! - [`client`]: the builder of mutation clients (no redirects, no retries, one deadline).
//! - [`knowledge_fs`]: `HttpKnowledgeFs`, the KnowledgeFS lifecycle API v1 client.
//! - [`directory`]: `HttpDirectoryProvider`, the signed Directory API v1 client.

pub mod client;
pub mod directory;
pub mod knowledge_fs;
pub mod outcome;

pub use client::{ClientBuildError, mutation_client};
pub use directory::signature::{SignatureError, TrustedKeys};
pub use directory::{DirectoryClientConfig, DirectoryConfigError, HttpDirectoryProvider};
pub use knowledge_fs::{HttpKnowledgeFs, KnowledgeFsConfig, KnowledgeFsConfigError};
pub use outcome::{Answer, DispatchError, classify, classify_error, read_answer};
