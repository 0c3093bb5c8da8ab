//! reqwest adapters of Tenantry.
//!
//! Architecture invariant: only this crate knows reqwest. Every transport failure is mapped to
//! one of the three dispatch outcomes of [`tenantry_kernel::outcome`] (not dispatched,
//! answered, outcome unknown) before it leaves the crate; no `reqwest::Error` crosses a port.
//!
//! - [`outcome`]: classifying a reqwest error or response into a dispatch outcome, and
//!   reading a mutation's answer completely;
//! - [`client`]: the builder of mutation clients (no redirects, no retries, one deadline).
//! - [`tls`]: the rustls configuration of every client ([`RemoteTls`]: platform roots, a CA
//!   file, a client certificate for mutual TLS; TLS 1.2 minimum, never unverified).
//! - [`knowledge_fs`]: `HttpKnowledgeFs`, the KnowledgeFS lifecycle API v1 client.
//! - [`directory`]: `HttpDirectoryProvider`, the signed Directory API v1 client.
//! - [`otlp`]: the HTTP client of the app's OTLP trace exporter.
//!
//! Both clients send the W3C `traceparent` of their request span ([`TRACEPARENT_HEADER`]) when
//! OpenTelemetry records it (docs/operations.md, "Tracing").
//!
//! Both clients build request paths the same way (module `path`): every identifier is one
//! path segment with every byte but `A-Z a-z 0-9 - . _ ~` percent-encoded, so the remote
//! receives it byte for byte (docs/protocol.md, section 0).
//!
//! # Features
//! `lifecycle` ([`knowledge_fs`]) and `directory` ([`directory`]) are default features;
//! [`outcome`] and [`client`] are always built (feature `fences` names them), so a fences-only
//! build compiles neither `tenantry-lifecycle` nor `tenantry-directory`.
#![cfg_attr(docsrs, feature(doc_cfg))]
// A build with only some mechanisms documents links to modules it does not compile; the
// default and all-features builds check every link (`cargo xtask ci`, step "doc").
#![cfg_attr(
    not(all(feature = "lifecycle", feature = "directory", feature = "fences")),
    allow(rustdoc::broken_intra_doc_links)
)]

pub mod client;
#[cfg(feature = "directory")]
pub mod directory;
#[cfg(feature = "lifecycle")]
pub mod knowledge_fs;
pub mod otlp;
pub mod outcome;
#[cfg(any(feature = "lifecycle", feature = "directory"))]
mod path;
pub mod tls;
#[cfg(any(feature = "lifecycle", feature = "directory"))]
use tenantry_ports::trace_context;

/// The W3C trace context header every KnowledgeFS and directory request carries when
/// OpenTelemetry records the caller's span (docs/protocol.md, "Trace context").
pub const TRACEPARENT_HEADER: &str = "traceparent";

pub use client::{ClientBuildError, mutation_client};
#[cfg(feature = "directory")]
pub use directory::signature::{SignatureError, TrustedKeys};
#[cfg(feature = "directory")]
pub use directory::{DirectoryClientConfig, DirectoryConfigError, HttpDirectoryProvider};
#[cfg(feature = "lifecycle")]
pub use knowledge_fs::{HttpKnowledgeFs, KnowledgeFsConfig, KnowledgeFsConfigError};
pub use outcome::{Answer, TransportError, classify, classify_error, read_answer};
pub use tls::{RemoteTls, TlsConfigError};
