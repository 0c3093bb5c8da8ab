//! Bulk inserts of control spaces and commands for benchmark fixtures (feature `bench`).

use sea_orm::{ConnectionTrait, EntityTrait};
use tenantry_lifecycle::ControlSpace;
use tenantry_lifecycle::intake::NewCommand;
use tenantry_ports::lifecycle::StoreError;

use super::convert::{control_space_row, new_command_row};
use super::entity::{control_space, outbox};
use super::unavailable;
use crate::bench::BULK_ROWS_PER_STATEMENT;

/// Inserts the rows with multi-row `INSERT` statements on `conn` (a transaction).
pub async fn insert<C: ConnectionTrait>(
    conn: &C,
    spaces: &[ControlSpace],
    commands: &[NewCommand],
) -> Result<(), StoreError> {
    for chunk in spaces.chunks(BULK_ROWS_PER_STATEMENT) {
        control_space::Entity::insert_many(chunk.iter().map(control_space_row))
            .exec(conn)
            .await
            .map_err(unavailable)?;
    }
    for chunk in commands.chunks(BULK_ROWS_PER_STATEMENT) {
        outbox::Entity::insert_many(chunk.iter().map(|c| new_command_row(c, c.created_at)))
            .exec(conn)
            .await
            .map_err(unavailable)?;
    }
    Ok(())
}
