//! Pure reconciliation-fence rules: scope identity, fence keys, fence cache state,
//! what a dispatch outcome means for a fenced write, and connector-state rules.
//!
//! Contract: this crate is fully deterministic. It does no I/O, reads no clock and draws no
//! random numbers. The async runtime (`tenantry_engine::scoped_writes`) feeds in what it read
//! from host storage or observed on the wire, and these rules say what that means: which key
//! fences which scope, whether a stored record is a fence, whether a failed dispatch must fence,
//! whether a persisted connector record is valid.
//!
//! - [`scope`]: the installation binding, the scope identity and the fence key derived from it;
//! - [`cache`]: the in-process fence cache (per binding: loaded flag and fenced keys) and the
//!   fence marker record persisted in host storage;
//! - [`record`]: the stored record as a cross-process claim (free, held by another process,
//!   own leftover, fenced) and when an operator may clear it;
//! - [`retention`]: which stored fence records retention may remove (only tombstones past
//!   the window; never a fence or an intent);
//! - [`outcome`]: what the three dispatch outcomes (the kernel's
//!   [`tenantry_kernel::DispatchOutcome`], re-exported) mean for a fenced
//!   write: only [`outcome::DispatchOutcome::OutcomeUnknown`] fences;
//! - [`connector`]: knowledge-base configuration and document-mapping records kept in host
//!   storage (hashed keys, 64 KiB limit, null tombstones, upstream-id resolution).
//!
//! The runtime that applies these rules is `tenantry_engine::scoped_writes`; the protocol, and
//! where it deviates from the reference behaviour Tenantry was specified from, is in the
//! repository's `docs/architecture.md` ("Reconciliation fences") and `docs/protocol.md`
//! ("Deviations of the fence runtime from the reference").

pub mod cache;
pub mod connector;
pub mod outcome;
pub mod record;
pub mod retention;
pub mod scope;

pub use cache::{
    FailureRecord, FenceCache, FenceMarker, Reconciled, RecordKind, RecordRead, record_is_fence,
};
pub use connector::{ConnectorStateError, DocumentMapping, KbConfigState, MAX_CONFIG_BYTES};
pub use outcome::{DispatchFailure, DispatchOutcome, IntentAction, fences};
pub use record::{ClearRefused, Holder, IntentTemplate, classify, clear_refusal, kind_at};
pub use scope::{
    Binding, BindingError, CLEAR_RECEIPT_PREFIX, FENCE_KEY_PREFIX, FenceKey,
    INSTALLATION_FENCE_KEY, ScopeIdentity, clear_receipt_key,
};
