//! Reading a claim's answer: each outbox row the claim updated and, on PostgreSQL, the control
//! space joined to it (docs/protocol.md, "The control space comes with the claim").
//!
//! On PostgreSQL the columns are read straight from the driver's row, by name. SeaORM's generic
//! reader formats an error message for every NULL column it meets (a freshly claimed row has
//! about ten: no error, no completion, no window yet) and builds every prefixed column name
//! anew, which made reading the answer most of the claim's cost in the client, on the one
//! claimer's critical path (docs/benchmarks.md, "The claim's answer, read by the driver").
//! SQLite keeps SeaORM's reader; its claim has no joined columns.

use sea_orm::{DbErr, FromQueryResult, QueryResult};
use tenantry_lifecycle::ClaimedControlSpace;

use super::JOINED_PREFIX;
use super::convert::to_control_space;
use super::entity::{control_space, outbox};

/// One row of a claim's answer: the claimed outbox row (a row that does not decode is an
/// error: the claim fails as unavailable, as any unreadable answer does) and what is known of
/// its control space: `Read(None)` when the outer join found none, `NotRead` when the joined
/// columns do not decode or convert (the saga's step then reads it itself), and `NotRead` when
/// the claim joined none (`joined` false: SQLite, whose caller reads them after).
pub(super) fn read(
    result: &QueryResult,
    joined: bool,
) -> Result<(outbox::Model, ClaimedControlSpace), DbErr> {
    #[cfg(feature = "postgres")]
    if let (true, Some(row)) = (joined, result.try_as_pg_row()) {
        let command = pg::outbox_row(row)
            .map_err(|error| DbErr::Query(sea_orm::RuntimeErr::SqlxError(error.into())))?;
        return Ok((command, pg::joined_space(row)));
    }
    let command = outbox::Model::from_query_result(result, "")?;
    let space = if joined {
        match control_space::Model::from_query_result_nullable(result, JOINED_PREFIX) {
            Ok(model) => converted(model),
            Err(sea_orm::TryGetError::Null(_)) => ClaimedControlSpace::Read(None),
            Err(sea_orm::TryGetError::DbErr(_)) => ClaimedControlSpace::NotRead,
        }
    } else {
        ClaimedControlSpace::NotRead
    };
    Ok((command, space))
}

/// A joined control space that decoded: `Read(Some)` when it converts to the domain's type,
/// else `NotRead` (never "none found", on which a step would decide).
fn converted(model: control_space::Model) -> ClaimedControlSpace {
    to_control_space(model).map_or(ClaimedControlSpace::NotRead, |space| {
        ClaimedControlSpace::Read(Some(space))
    })
}

#[cfg(feature = "postgres")]
mod pg {
    use sea_orm::sqlx::Row as _;
    use sea_orm::sqlx::postgres::PgRow;
    use tenantry_lifecycle::ClaimedControlSpace;

    use super::super::entity::{control_space, outbox};

    /// The outbox columns of a claim's answer (every column of the table: `RETURNING *`).
    pub(super) fn outbox_row(row: &PgRow) -> Result<outbox::Model, sea_orm::sqlx::Error> {
        Ok(outbox::Model {
            id: row.try_get("id")?,
            tenant_id: row.try_get("tenant_id")?,
            control_space_id: row.try_get("control_space_id")?,
            operation_id: row.try_get("operation_id")?,
            idempotency_key: row.try_get("idempotency_key")?,
            request_fingerprint: row.try_get("request_fingerprint")?,
            operation: row.try_get("operation")?,
            payload: row.try_get("payload")?,
            status: row.try_get("status")?,
            attempt_count: row.try_get("attempt_count")?,
            lease_owner: row.try_get("lease_owner")?,
            lease_expires_at: row.try_get("lease_expires_at")?,
            lease_epoch: row.try_get("lease_epoch")?,
            next_attempt_at: row.try_get("next_attempt_at")?,
            last_error_code: row.try_get("last_error_code")?,
            last_error_message: row.try_get("last_error_message")?,
            created_at: row.try_get("created_at")?,
            completed_at: row.try_get("completed_at")?,
            attempt_window_ends_at: row.try_get("attempt_window_ends_at")?,
            prior_window_ends_at: row.try_get("prior_window_ends_at")?,
            attempt_budget_base: row.try_get("attempt_budget_base")?,
            failed_at: row.try_get("failed_at")?,
            trace_context: row.try_get("trace_context")?,
            turn_at: row.try_get("turn_at")?,
        })
    }

    /// The control space joined to a claimed row (`cs_<column>`, see
    /// `JOINED_CONTROL_SPACE_COLUMNS`): its key is NULL when the outer join found none.
    pub(super) fn joined_space(row: &PgRow) -> ClaimedControlSpace {
        match row.try_get::<Option<String>, _>("cs_tenant_id") {
            Ok(None) => ClaimedControlSpace::Read(None),
            Ok(Some(tenant_id)) => {
                space_row(row, tenant_id).map_or(ClaimedControlSpace::NotRead, super::converted)
            }
            Err(_) => ClaimedControlSpace::NotRead,
        }
    }

    fn space_row(
        row: &PgRow,
        tenant_id: String,
    ) -> Result<control_space::Model, sea_orm::sqlx::Error> {
        Ok(control_space::Model {
            tenant_id,
            control_space_id: row.try_get("cs_control_space_id")?,
            state: row.try_get("cs_state")?,
            lifecycle_operation_id: row.try_get("cs_lifecycle_operation_id")?,
            resource_version: row.try_get("cs_resource_version")?,
            provisioning_key: row.try_get("cs_provisioning_key")?,
            knowledge_space_id: row.try_get("cs_knowledge_space_id")?,
            knowledge_space_revision: row.try_get("cs_knowledge_space_revision")?,
            deletion_irreversible_at: row.try_get("cs_deletion_irreversible_at")?,
            last_revoke_sequence: row.try_get("cs_last_revoke_sequence")?,
            created_at: row.try_get("cs_created_at")?,
            updated_at: row.try_get("cs_updated_at")?,
        })
    }
}
