//! Reading a claim's answer: each outbox row the claim updated and, on PostgreSQL, the control
//! space joined to it (docs/protocol.md, "The control space comes with the claim").
//!
//! On PostgreSQL the columns are read straight from the driver's row, by name. SeaORM's generic
//! reader formats an error message for every NULL column it meets (a freshly claimed row has
//! about ten: no error, no completion, no window yet) and builds every prefixed column name
//! anew, which made reading the answer most of the claim's cost in the client, on the one
//! claimer's critical path (docs/benchmarks.md, "The claim's answer, read by the driver").
//! SQLite keeps SeaORM's reader; its claim has no joined columns. Stricter than SeaORM's reader
//! in one way no migrated schema meets: a column missing from the answer fails the claim (an
//! outbox column) or leaves the control space unread (a joined one), where SeaORM read a
//! missing optional column as NULL.

use sea_orm::{DbErr, FromQueryResult, QueryResult};
use tenantry_lifecycle::ClaimedControlSpace;

use super::convert::to_control_space;
use super::entity::{control_space, outbox};

/// One row of a claim's answer: the claimed outbox row (a row that does not decode is an
/// error: the claim fails as unavailable, as any unreadable answer does) and what is known of
/// its control space. A PostgreSQL answer carries the joined control space: `Read(None)` when
/// the outer join found none, `NotRead` when its columns do not decode or convert (the saga's
/// step then reads it itself). Another backend's answer carries none (`NotRead`: SQLite's
/// caller reads them right after).
pub(super) fn read(result: &QueryResult) -> Result<(outbox::Model, ClaimedControlSpace), DbErr> {
    #[cfg(feature = "postgres")]
    if let Some(row) = result.try_as_pg_row() {
        let command = pg::outbox_row(row)
            .map_err(|error| DbErr::Query(sea_orm::RuntimeErr::SqlxError(error.into())))?;
        return Ok((command, pg::joined_space(row)));
    }
    let command = outbox::Model::from_query_result(result, "")?;
    Ok((command, ClaimedControlSpace::NotRead))
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

    pub(super) fn space_row(
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

#[cfg(all(test, feature = "postgres", feature = "testing"))]
mod tests {
    use sea_orm::{ConnectionTrait, FromQueryResult, Statement};
    use tenantry_lifecycle::ClaimedControlSpace;

    use super::super::entity::{control_space, outbox};
    use super::super::{JOINED_CONTROL_SPACE_COLUMNS, JOINED_PREFIX};
    use super::{converted, pg};
    use crate::testing::fresh_database;

    /// On PostgreSQL the driver-row reader gives exactly what SeaORM's reader gives, column by
    /// column, for rows whose every column holds a value of its own (a swapped name shows),
    /// for rows whose optional columns are NULL, and for a command without a control space.
    /// The rows are read with the claim's shape: the outbox's columns, then the joined
    /// control space's `cs_` columns. (On SQLite there is no driver row to compare: skipped.)
    #[tokio::test]
    async fn the_driver_row_reader_agrees_with_seaorm_on_every_column() {
        let db = fresh_database().await;
        let conn = &db.db.conn;
        for sql in [
            "INSERT INTO tenantry_lifecycle_outbox (id, tenant_id, control_space_id, \
               operation_id, idempotency_key, request_fingerprint, operation, payload, status, \
               attempt_count, lease_owner, lease_expires_at, lease_epoch, next_attempt_at, \
               last_error_code, last_error_message, created_at, completed_at, \
               attempt_window_ends_at, prior_window_ends_at, attempt_budget_base, failed_at, \
               trace_context, turn_at) VALUES \
             ('c1', 't1', 's1', 'op1', 'k1', 'fp1', 'revoke', '{\"a\":1}', 'processing', 3, \
              'w1', 11, 12, 13, 'E1', 'm1', 14, 15, 16, 17, 2, 18, 'tc1', 19), \
             ('c2', 't2', 's2', 'op2', 'k2', 'fp2', 'delete', '{}', 'pending', 0, \
              NULL, NULL, 0, 31, NULL, NULL, 32, NULL, NULL, NULL, 0, NULL, NULL, 33), \
             ('c3', 't3', 's3', 'op3', 'k3', 'fp3', 'provision', '{}', 'pending', 0, \
              NULL, NULL, 0, 41, NULL, NULL, 42, NULL, NULL, NULL, 0, NULL, NULL, 43)",
            "INSERT INTO tenantry_control_spaces (tenant_id, control_space_id, state, \
               lifecycle_operation_id, resource_version, provisioning_key, knowledge_space_id, \
               knowledge_space_revision, deletion_irreversible_at, last_revoke_sequence, \
               created_at, updated_at) VALUES \
             ('t1', 's1', 'active', 'op0', 21, 'pk1', 'ks1', 22, 23, 24, 25, 26), \
             ('t2', 's2', 'provisioning', 'op2', 51, 'pk2', NULL, 0, NULL, 0, 55, 56)",
        ] {
            conn.execute_unprepared(sql).await.unwrap();
        }
        let answer = conn
            .query_all_raw(Statement::from_string(
                conn.get_database_backend(),
                format!(
                    "SELECT o.*, {spaces} FROM tenantry_lifecycle_outbox AS o \
                     LEFT JOIN tenantry_control_spaces AS c \
                       ON c.tenant_id = o.tenant_id AND c.control_space_id = o.control_space_id \
                     ORDER BY o.id",
                    spaces = *JOINED_CONTROL_SPACE_COLUMNS,
                ),
            ))
            .await
            .unwrap();
        assert_eq!(answer.len(), 3);
        let mut found = Vec::new();
        for result in &answer {
            let Some(row) = result.try_as_pg_row() else {
                return; // SQLite
            };
            let expected = outbox::Model::from_query_result(result, "").unwrap();
            assert_eq!(pg::outbox_row(row).unwrap(), expected);
            let expected_space =
                match control_space::Model::from_query_result_nullable(result, JOINED_PREFIX) {
                    Ok(model) => converted(model),
                    Err(sea_orm::TryGetError::Null(_)) => ClaimedControlSpace::Read(None),
                    Err(sea_orm::TryGetError::DbErr(error)) => panic!("{error}"),
                };
            if let Ok(model) = control_space::Model::from_query_result(result, JOINED_PREFIX) {
                let read = pg::space_row(row, model.tenant_id.clone()).unwrap();
                assert_eq!(read, model, "{}", expected.id);
            }
            let space = pg::joined_space(row);
            assert_eq!(space, expected_space, "{}", expected.id);
            found.push(match space {
                ClaimedControlSpace::Read(Some(space)) => space.updated_at.timestamp_millis(),
                ClaimedControlSpace::Read(None) => 0,
                ClaimedControlSpace::NotRead => -1,
            });
        }
        assert_eq!(found, [26, 56, 0], "read, read, none found");
    }
}
