//! Conformance suites of the retention port (feature `testing`), one per mechanism whose
//! history it removes:
//! - [`lifecycle`] (feature `lifecycle`): finished commands, operator actions and idempotency
//!   keys, run by [`retention_store_conformance!`](crate::retention_store_conformance);
//! - [`fences`] (feature `fences`): cleared fence records, run by
//!   [`fence_retention_conformance!`](macro@crate::fence_retention_conformance).

#[cfg(feature = "fences")]
pub mod fences;
#[cfg(feature = "lifecycle")]
pub mod lifecycle;
