//! The KnowledgeFS remote port ([`KnowledgeFs`]) and its classified failure ([`RemoteError`]).

use std::time::Duration;

use async_trait::async_trait;
use tenantry_kernel::outcome::{DispatchFailure, DispatchOutcome};
use tenantry_kernel::{ControlSpaceId, ProvisioningKey, TenantId};
use tenantry_lifecycle::{
    DeletionProgress, DeletionRequest, ErrorCode, ProvisionRequest, RemoteSpace, RevokeAck,
    RevokeRequest,
};

use crate::error::ErrorSource;

/// A failed KnowledgeFS call. The saga retries the command with `code`; a provision whose
/// outcome is unknown is resolved later by lookup of the provisioning key, never by a new key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
#[non_exhaustive]
pub struct RemoteError {
    /// How it failed: not dispatched, answered (with the HTTP status, when the remote speaks
    /// HTTP) or outcome unknown.
    pub failure: DispatchOutcome,
    /// Machine-readable code: the remote's `code` (a code Tenantry gives no rule to is
    /// [`ErrorCode::Other`], kept verbatim), or a transport code such as
    /// [`ErrorCode::RemoteUnavailable`] or [`ErrorCode::RemoteOutcomeUnknown`].
    pub code: ErrorCode,
    /// Human-readable detail.
    pub message: String,
    /// The remote's `Retry-After`, if any.
    pub retry_after: Option<Duration>,
    /// The transport's error (e.g. the HTTP client's), if any; see [`with_source`](Self::with_source).
    #[source]
    pub source: Option<ErrorSource>,
}

impl RemoteError {
    /// An error the remote answered with.
    pub fn answered(status: u16, code: impl Into<ErrorCode>, message: impl Into<String>) -> Self {
        Self {
            failure: DispatchOutcome::answered(status),
            code: code.into(),
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// A call whose outcome is unknown.
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        Self {
            failure: DispatchOutcome::OutcomeUnknown,
            code: ErrorCode::RemoteOutcomeUnknown,
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// A call that never reached the remote.
    pub fn not_dispatched(message: impl Into<String>) -> Self {
        Self {
            failure: DispatchOutcome::NotDispatched,
            code: ErrorCode::RemoteUnavailable,
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// The same error keeping `error` (the transport's) as its
    /// [`source`](std::error::Error::source).
    #[must_use]
    pub fn with_source(mut self, error: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(ErrorSource::new(error));
        self
    }

    /// The same error keeping a source that is already shared (e.g. one taken from another
    /// error).
    #[must_use]
    pub fn with_shared_source(mut self, source: Option<ErrorSource>) -> Self {
        self.source = source;
        self
    }

    /// Adds a `Retry-After`.
    #[must_use]
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }
}

impl DispatchFailure for RemoteError {
    fn dispatch_outcome(&self) -> DispatchOutcome {
        self.failure
    }
}

/// KnowledgeFS lifecycle API v1 (see docs/protocol.md).
#[cfg_attr(feature = "mocks", mockall::automock)]
#[async_trait]
pub trait KnowledgeFs: Send + Sync {
    /// Provisions a knowledge space; idempotent on the provisioning key.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn provision(&self, request: &ProvisionRequest) -> Result<RemoteSpace, RemoteError>;

    /// Authoritative lookup by provisioning key: `None` proves absence.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn find_by_provisioning_key(
        &self,
        namespace_id: &TenantId,
        provisioning_key: &ProvisioningKey,
        control_space_id: &ControlSpaceId,
    ) -> Result<Option<RemoteSpace>, RemoteError>;

    /// Requests (or polls) the deletion of a knowledge space.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn request_deletion(
        &self,
        request: &DeletionRequest,
    ) -> Result<DeletionProgress, RemoteError>;

    /// Revokes a capability grant.
    ///
    /// # Errors
    /// [`RemoteError`] classified by outcome.
    async fn revoke_grant(&self, request: &RevokeRequest) -> Result<RevokeAck, RemoteError>;
}
