//! Plain multi-row `INSERT` of projection rows (feature `bench`): the baseline the directory
//! snapshot apply is measured against. No lookups, no planning, no `ON CONFLICT`: the rows go
//! into empty tables as they are.

use sea_orm::{EntityTrait, TransactionTrait};
use tenantry_directory::ProjectionWrite;
use tenantry_ports::directory::ProjectionStoreError;

use super::convert::{from_account, from_execution, from_membership, from_workspace};
use super::entity::{account, execution, membership, workspace};
use super::{SeaOrmDirectoryStore, storage};

impl SeaOrmDirectoryStore {
    /// Inserts the account, workspace, membership and execution rows of `write` in one
    /// transaction, as many rows per statement as the bind-parameter limit allows (feature
    /// `bench`): no lookups, no planning, no `ON CONFLICT`. This is the physical floor the
    /// snapshot apply is compared with.
    ///
    /// # Errors
    /// [`ProjectionStoreError::Storage`] when a statement fails (for example the tables are
    /// not empty); nothing is written then.
    pub async fn bulk_insert_plain(
        &self,
        write: &ProjectionWrite,
    ) -> Result<(), ProjectionStoreError> {
        let store = self;
        let txn = store.conn.begin().await.map_err(storage("begin"))?;
        for chunk in write.accounts.chunks(store.rows_per_statement(6)) {
            account::Entity::insert_many(chunk.iter().map(from_account))
                .exec_without_returning(&txn)
                .await
                .map_err(storage("insert accounts"))?;
        }
        for chunk in write.workspaces.chunks(store.rows_per_statement(9)) {
            workspace::Entity::insert_many(chunk.iter().map(from_workspace))
                .exec_without_returning(&txn)
                .await
                .map_err(storage("insert workspaces"))?;
        }
        for chunk in write.memberships.chunks(store.rows_per_statement(7)) {
            membership::Entity::insert_many(chunk.iter().map(from_membership))
                .exec_without_returning(&txn)
                .await
                .map_err(storage("insert memberships"))?;
        }
        for chunk in write.executions.chunks(store.rows_per_statement(7)) {
            execution::Entity::insert_many(chunk.iter().map(from_execution))
                .exec_without_returning(&txn)
                .await
                .map_err(storage("insert executions"))?;
        }
        txn.commit().await.map_err(storage("commit"))
    }
}
