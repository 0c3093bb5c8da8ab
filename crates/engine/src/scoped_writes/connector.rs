//! Connector state over host storage: knowledge-base configuration and document mappings.
//!
//! Reads go straight to host storage; writes go through a [`ScopeContext`], so they are
//! serialized with the rest of the scope's mutations and a failed write fences the scope. The
//! record rules (keys, 64 KiB limit, tombstones, upstream-id resolution) are pure functions in
//! `tenantry_fence::connector`.
//!
//! Use the knowledge base's own scope (`ScopeIdentity::object(kb_id)`) for its writes.

use std::convert::Infallible;
use std::sync::Arc;

use serde_json::{Map, Value};
use tenantry_fence::Binding;
use tenantry_fence::connector::{
    self, ConnectorStateError, DOCUMENT_KEY_PREFIX, DocumentMapping, KbConfigState,
};
use tenantry_ports::host_storage::{HostStorage, HostStorageError};

use super::{ScopeContext, ScopedWriteError};

/// Why a connector-state operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectorError {
    /// A record rule refused the data (too large, invalid, ambiguous); see the inner error for
    /// what to do.
    #[error(transparent)]
    State(#[from] ConnectorStateError),
    /// Host storage could not be read; absence was not established. Retry later.
    #[error("host storage read failed: {0}")]
    Storage(#[from] HostStorageError),
    /// The write failed or was refused by the scope's fence.
    #[error(transparent)]
    Write(#[from] ScopedWriteError<Infallible>),
}

/// Knowledge-base configuration and document mappings of the installations in one host
/// storage.
#[derive(Debug)]
pub struct ConnectorState<S: ?Sized> {
    storage: Arc<S>,
}

impl<S: ?Sized> Clone for ConnectorState<S> {
    fn clone(&self) -> Self {
        Self {
            storage: self.storage.clone(),
        }
    }
}

impl<S: HostStorage + ?Sized + 'static> ConnectorState<S> {
    /// Connector state over `storage` (the same storage the scoped writes runtime uses).
    pub fn new(storage: Arc<S>) -> Self {
        Self { storage }
    }

    /// The configuration of `kb_id`. Absence is established only by a successful key listing;
    /// a tombstone means the knowledge base was deleted.
    ///
    /// # Errors
    /// [`ConnectorError::Storage`] when listing or reading fails (never read as "absent");
    /// [`ConnectorError::State`] when the stored value is invalid.
    pub async fn load_config(
        &self,
        binding: &Binding,
        kb_id: &str,
    ) -> Result<KbConfigState, ConnectorError> {
        let key = connector::config_key(kb_id);
        let listed = self.storage.keys(binding).await?.contains(&key);
        let stored = if listed {
            self.storage.get(binding, &key).await?
        } else {
            None
        };
        Ok(connector::decode_config(&key, listed, stored)?)
    }

    /// Stores the configuration of `kb_id` through `ctx` (the knowledge base's scope).
    ///
    /// # Errors
    /// [`ConnectorStateError::ConfigTooLarge`] above 64 KiB (nothing written);
    /// [`ConnectorError::Write`] when the write failed (the scope is then fenced).
    pub async fn save_config(
        &self,
        ctx: &ScopeContext<S>,
        kb_id: &str,
        config: &Map<String, Value>,
    ) -> Result<(), ConnectorError> {
        let value = connector::encode_config(config)?;
        ctx.write(&connector::config_key(kb_id), value).await?;
        Ok(())
    }

    /// Marks `kb_id` deleted with a JSON null tombstone, through `ctx`.
    ///
    /// # Errors
    /// [`ConnectorError::Write`] when the write failed (the scope is then fenced).
    pub async fn delete_config(
        &self,
        ctx: &ScopeContext<S>,
        kb_id: &str,
    ) -> Result<(), ConnectorError> {
        ctx.write(&connector::config_key(kb_id), Value::Null)
            .await?;
        Ok(())
    }

    /// The mapping of `document_id` in `kb_id`: the record stored for it as a host document
    /// id or, when there is none, the single mapping of `kb_id` whose upstream id it is.
    ///
    /// # Errors
    /// [`ConnectorError::Storage`] when listing or reading fails;
    /// [`ConnectorStateError::AmbiguousUpstreamDocument`] for several upstream matches;
    /// [`ConnectorStateError::InvalidDocumentMapping`] for a malformed record.
    pub async fn load_document(
        &self,
        binding: &Binding,
        kb_id: &str,
        document_id: &str,
    ) -> Result<Option<DocumentMapping>, ConnectorError> {
        let key = connector::document_key(kb_id, document_id);
        let keys = self.storage.keys(binding).await?;
        if keys.contains(&key) {
            let stored = self.storage.get(binding, &key).await?;
            return Ok(connector::decode_document(&key, stored)?);
        }
        let mut candidates = Vec::new();
        for candidate in keys
            .into_iter()
            .filter(|k| k.starts_with(DOCUMENT_KEY_PREFIX))
        {
            if let Some(value) = self.storage.get(binding, &candidate).await? {
                candidates.push((candidate, value));
            }
        }
        Ok(connector::resolve_by_upstream(
            kb_id,
            document_id,
            candidates,
        )?)
    }

    /// Stores `mapping` under its `(kb_id, host_document_id)` key, through `ctx`.
    ///
    /// # Errors
    /// [`ConnectorError::Write`] when the write failed (the scope is then fenced).
    pub async fn save_document(
        &self,
        ctx: &ScopeContext<S>,
        mapping: &DocumentMapping,
    ) -> Result<(), ConnectorError> {
        let key = connector::document_key(&mapping.kb_id, &mapping.host_document_id);
        ctx.write(&key, mapping.to_value()).await?;
        Ok(())
    }
}
