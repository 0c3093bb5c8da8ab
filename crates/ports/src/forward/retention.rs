//! The method lists of the retention port, for forwarding and the handles.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::error::StoreError;
use crate::retention::{PruneBatch, RetentionKind};

forwarding!(retention::RetentionStore {
    async fn prune_batch(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
        limit: u32,
    ) -> Result<PruneBatch, StoreError>;
    async fn count_expired(
        &self,
        kind: RetentionKind,
        now: DateTime<Utc>,
        window: Duration,
    ) -> Result<u64, StoreError>;
    async fn now(&self) -> Result<DateTime<Utc>, StoreError>;
    async fn oldest(&self, kind: RetentionKind) -> Result<Option<DateTime<Utc>>, StoreError>;
});
