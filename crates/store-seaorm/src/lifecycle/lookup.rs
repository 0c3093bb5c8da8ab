//! Point lookups of the outbox that the ports do not need but the operator surfaces do.

use sea_orm::EntityTrait;
use tenantry_kernel::CommandId;
use tenantry_ports::lifecycle::StoreError;

use super::entity::outbox;
use super::{SeaOrmLifecycleStore, unavailable};

impl SeaOrmLifecycleStore {
    /// Whether a command with `id` exists (any status). The admin API and the CLI use it to
    /// refuse a pagination cursor that names no command, which the listing itself would
    /// answer with an empty page.
    ///
    /// # Errors
    /// [`StoreError`] when the database fails.
    pub async fn command_exists(&self, id: &CommandId) -> Result<bool, StoreError> {
        Ok(outbox::Entity::find_by_id(id.as_str().to_owned())
            .one(&self.conn)
            .await
            .map_err(unavailable)?
            .is_some())
    }
}
