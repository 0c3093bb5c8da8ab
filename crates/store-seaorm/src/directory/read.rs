//! The read port of the projected tables ([`ProjectionTablesReader`]): every row at once,
//! for whole-projection checks (the demo's ground-truth check, the conformance suite).

use std::collections::BTreeMap;

use async_trait::async_trait;
use sea_orm::{EntityTrait, PaginatorTrait, QueryOrder, QuerySelect};
use tenantry_directory::{
    AccountRow, ExecutionRow, InboxReceipt, MembershipRow, ProjectionState, ProjectionTables,
    WorkspaceRow,
};
use tenantry_ports::directory::{ProjectionCounts, ProjectionStoreError, ProjectionTablesReader};

use super::entity::{account, inbox, membership, workspace};
use super::{SeaOrmDirectoryStore, TableRow, corrupt, storage};

impl SeaOrmDirectoryStore {
    /// Every row of one table, by `key`.
    async fn dump_table<R: TableRow, K: Ord>(
        &self,
        key: fn(&R) -> K,
    ) -> Result<BTreeMap<K, R>, ProjectionStoreError> {
        let mut rows = BTreeMap::new();
        let models = R::Entity::find()
            .all(&self.conn)
            .await
            .map_err(storage("dump"))?;
        for model in models {
            let row = R::from_model(model).map_err(corrupt)?;
            rows.insert(key(&row), row);
        }
        Ok(rows)
    }
}

#[async_trait]
impl ProjectionTablesReader for SeaOrmDirectoryStore {
    async fn read_tables(&self) -> Result<ProjectionTables, ProjectionStoreError> {
        Ok(ProjectionTables {
            accounts: self.dump_table(|r: &AccountRow| r.uuid.clone()).await?,
            workspaces: self.dump_table(|r: &WorkspaceRow| r.uuid.clone()).await?,
            memberships: self.dump_table(|r: &MembershipRow| r.uuid.clone()).await?,
            executions: self
                .dump_table(|r: &ExecutionRow| r.workspace_uuid.clone())
                .await?,
            states: self
                .dump_table(|r: &ProjectionState| r.instance_uuid.clone())
                .await?,
            receipts: self
                .dump_table(|r: &InboxReceipt| (r.instance_uuid.clone(), r.event_uuid.clone()))
                .await?,
        })
    }

    async fn count_rows(&self) -> Result<ProjectionCounts, ProjectionStoreError> {
        // One `COUNT(*)` per table; no row is read.
        Ok(ProjectionCounts {
            accounts: account::Entity::find()
                .count(&self.conn)
                .await
                .map_err(storage("count accounts"))?,
            workspaces: workspace::Entity::find()
                .count(&self.conn)
                .await
                .map_err(storage("count workspaces"))?,
            memberships: membership::Entity::find()
                .count(&self.conn)
                .await
                .map_err(storage("count memberships"))?,
        })
    }

    async fn recent_receipts(&self, limit: u32) -> Result<Vec<InboxReceipt>, ProjectionStoreError> {
        // The `received_at` index of m0011 serves the order; `limit` rows are read.
        inbox::Entity::find()
            .order_by_desc(inbox::Column::ReceivedAt)
            .order_by_desc(inbox::Column::EventUuid)
            .limit(u64::from(limit))
            .all(&self.conn)
            .await
            .map_err(storage("read recent receipts"))?
            .into_iter()
            .map(|m| InboxReceipt::from_model(m).map_err(corrupt))
            .collect()
    }
}
