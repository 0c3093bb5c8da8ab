//! Bulk inserts of control spaces and commands for benchmark fixtures (feature `bench`).

use sea_orm::{EntityTrait, TransactionTrait};
use tenantry_lifecycle::ControlSpace;
use tenantry_lifecycle::intake::NewCommand;
use tenantry_lifecycle::turn::{Queue, next_turn};
use tenantry_ports::lifecycle::StoreError;

use super::convert::{control_space_row, new_command_row};
use super::entity::{control_space, outbox};
use super::turns::{latest_turns, queue};
use super::{SeaOrmLifecycleStore, unavailable};

impl SeaOrmLifecycleStore {
    /// Inserts `spaces` and pending `commands` as given, `rows_per_statement` rows per
    /// multi-row `INSERT` (at least 1), all in one transaction (feature `bench`). No rule is
    /// checked: plan the rows with the intake functions of `tenantry_lifecycle` first. Each
    /// command takes its turn as intake gives it (after its tenant's live commands, in the
    /// order given).
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
        // Turns as intake gives them (the tenants' latest live turns read first): each
        // tenant's commands take consecutive turns after its live ones.
        let tenants: Vec<&str> = commands.iter().map(|c| c.tenant_id.as_str()).collect();
        let mut latest = latest_turns(&txn, self.backend, &tenants).await?;
        let head = queue(self, &txn).await?.head;
        let rows: Vec<_> = commands
            .iter()
            .map(|c| {
                let on = Queue {
                    now: c.created_at,
                    head,
                };
                let turn = next_turn(on, latest.get(c.tenant_id.as_str()).copied());
                latest.insert(c.tenant_id.as_str().to_owned(), turn);
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
