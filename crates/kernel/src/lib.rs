//! Pure value types shared by every Tenantry crate.
//!
//! Contract: this crate is fully deterministic. It does no I/O, reads no clock and draws no
//! random numbers; identifiers are parsed from strings that the caller supplies, and
//! fingerprints are plain functions of their input.
//!
//! - [`id`]: validated string identifiers (`TenantId`, `ControlSpaceId`, ...), parsed once at
//!   the edge ("parse, don't validate").
//! - [`lease`]: the lease owner and the lease epoch (fencing token) of a claimed command.
//! - [`fingerprint`]: the canonical SHA-256 fingerprint of a JSON value.
//! - `openapi` (feature `openapi`): the OpenAPI schema of the identifiers, for the crates that
//!   generate the API documents (schema values only: no I/O).
//! - [`outcome`]: the dispatch outcome of a remote call (not dispatched / answered / outcome
//!   unknown), shared by the fences, the lifecycle remote port and the HTTP clients, and the
//!   rule that maps a transport observation to it.
//! - [`text`]: the bound on text Tenantry did not write (a remote's error message): control
//!   characters removed, length capped, before it is stored or shown.

pub mod fingerprint;
pub mod id;
pub mod lease;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod outcome;
#[cfg(feature = "planted-mutations")]
pub mod planted;
pub mod text;

pub use fingerprint::{CanonicalHasher, Fingerprint, canonical_json, fingerprint_json};
pub use id::{
    CommandId, ControlSpaceId, GrantId, IdError, IdempotencyKey, KnowledgeSpaceId, OperationId,
    ProvisioningKey, TenantId,
};
pub use lease::{LeaseEpoch, LeaseOwner};
pub use outcome::{
    BodyRead, DispatchFailure, DispatchOutcome, TransportObservation, gateway_may_have_applied,
};

/// The README's examples, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// `true` while the planted mutation `$name` is active; the constant `false` in a crate built
/// without its own feature `planted-mutations` (each crate that plants one declares that
/// feature, forwarding to `tenantry-kernel/planted-mutations`).
#[macro_export]
macro_rules! planted {
    ($name:literal) => {{
        #[cfg(feature = "planted-mutations")]
        let on = $crate::planted::active($name);
        #[cfg(not(feature = "planted-mutations"))]
        let on = false;
        on
    }};
}
