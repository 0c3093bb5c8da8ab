//! Plain multi-row `INSERT` of projection rows (feature `bench`): the baseline the directory
//! snapshot apply is measured against. No lookups, no planning, no `ON CONFLICT`: the rows go
//! into empty tables as they are.

use sea_orm::TransactionTrait;
use tenantry_directory::ProjectionWrite;
use tenantry_ports::directory::ProjectionStoreError;

use super::{OnKey, SeaOrmDirectoryStore, storage};

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
        let txn = self.conn.begin().await.map_err(storage("begin"))?;
        let plain = OnKey::Fail;
        self.write_table(&txn, &write.accounts, plain).await?;
        self.write_table(&txn, &write.workspaces, plain).await?;
        self.write_table(&txn, &write.memberships, plain).await?;
        self.write_table(&txn, &write.executions, plain).await?;
        txn.commit().await.map_err(storage("commit"))
    }
}
