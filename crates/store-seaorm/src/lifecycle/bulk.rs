//! Bulk inserts of control spaces and commands for benchmark fixtures (feature `bench`).

use sea_orm::{EntityTrait, TransactionTrait};
use tenantry_lifecycle::ControlSpace;
use tenantry_lifecycle::intake::NewCommand;
use tenantry_lifecycle::turn::next_turn;
use tenantry_ports::lifecycle::StoreError;

use super::convert::{control_space_row, new_command_row};
use super::entity::{control_space, outbox};
use super::{SeaOrmLifecycleStore, unavailable};

impl SeaOrmLifecycleStore {
    /// Inserts `spaces` and pending `commands` as given, `rows_per_statement` rows per
    /// multi-row `INSERT` (at least 1), all in one transaction (feature `bench`). No rule is
    /// checked: plan the rows with the intake functions of `tenantry_lifecycle` first. Each
    /// tenant's commands take consecutive turns from their enqueue times, as one intake batch
    /// on an outbox without live commands of theirs.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when a statement fails (for example a duplicate key);
    /// nothing is written then.
    pub async fn bulk_insert(
        &self,
        spaces: &[ControlSpace],
        commands: &[NewCommand],
        rows_per_statement: usize,
    ) -> Result<(), StoreError> {
        let rows_per_statement = rows_per_statement.max(1);
        let txn = self.conn.begin().await.map_err(unavailable)?;
        for chunk in spaces.chunks(rows_per_statement) {
            control_space::Entity::insert_many(chunk.iter().map(control_space_row))
                .exec(&txn)
                .await
                .map_err(unavailable)?;
        }
        // Turns as intake gives them to a batch on an outbox without live commands: each
        // tenant's commands take consecutive turns from their enqueue times.
        let mut latest = std::collections::HashMap::new();
        let rows: Vec<_> = commands
            .iter()
            .map(|c| {
                let turn = next_turn(c.created_at, latest.get(&c.tenant_id).copied());
                latest.insert(c.tenant_id.clone(), turn);
                new_command_row(c, c.created_at, turn)
            })
            .collect();
        for chunk in rows.chunks(rows_per_statement) {
            outbox::Entity::insert_many(chunk.iter().cloned())
                .exec(&txn)
                .await
                .map_err(unavailable)?;
        }
        txn.commit().await.map_err(unavailable)
    }
}
