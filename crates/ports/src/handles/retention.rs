//! `Arc<T>`, `Box<T>` and `&T` handles of the retention port.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::StoreError;
use crate::retention::{PruneBatch, RetentionKind, RetentionStore};

async_handles!(RetentionStore {
    async fn prune_batch(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
        limit: u32,
    ) -> Result<PruneBatch, StoreError> {
        (**self).prune_batch(kind, now, window, limit).await
    }
    async fn count_expired(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
    ) -> Result<u64, StoreError> {
        (**self).count_expired(kind, now, window).await
    }
    async fn now(&self) -> Result<DateTime<Utc>, StoreError> {
        (**self).now().await
    }
    async fn oldest(&self, kind: RetentionKind) -> Result<Option<DateTime<Utc>>, StoreError> {
        (**self).oldest(kind).await
    }
});
