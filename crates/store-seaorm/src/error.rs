//! One mapping from a database error to the storage ports' shared [`StoreError`], used by the
//! lifecycle, host-storage and directory stores alike.
//!
//! A deadlock or serialization failure (PostgreSQL `40P01` / `40001`) is
//! [`StoreError::Contention`] (retryable), a missing table (PostgreSQL `42P01`, SQLite "no such
//! table") is [`StoreError::SchemaMissing`] naming the mechanism to migrate, anything else is
//! [`StoreError::Unavailable`]; each keeps the `DbErr` as its source and its text in the
//! message. A write refused because the server is read-only (PostgreSQL `25006`: a standby,
//! as the old primary is after a failover) is [`StoreError::Unavailable`] too, retried like
//! any outage and never a command failure; its message says so.

use sea_orm::DbErr;
use tenantry_ports::StoreError;

use crate::Mechanism;

/// The port error for `error`, raised by a store of `mechanism` (see the module documentation).
pub(crate) fn store_error(mechanism: Mechanism, error: DbErr) -> StoreError {
    let message = error.to_string();
    let mapped = if is_contention(&error) {
        StoreError::contention(message)
    } else if is_missing_table(&error) {
        StoreError::schema_missing(mechanism.as_str(), message)
    } else if sql_state(&error).as_deref() == Some("25006") {
        StoreError::unavailable(format!(
            "{message} (the server accepts only reads: a standby, as after a failover; retried until a primary answers)"
        ))
    } else {
        StoreError::unavailable(message)
    };
    mapped.with_source(error)
}

/// The SQLSTATE (empty when none) and message of a database's refusal, if `error` is one.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn refusal(error: &DbErr) -> Option<(String, String)> {
    let (DbErr::Exec(sea_orm::RuntimeErr::SqlxError(sqlx_error))
    | DbErr::Query(sea_orm::RuntimeErr::SqlxError(sqlx_error))
    | DbErr::Conn(sea_orm::RuntimeErr::SqlxError(sqlx_error))) = error
    else {
        return None;
    };
    match sqlx_error.as_ref() {
        sea_orm::sqlx::Error::Database(db) => Some((
            db.code().map(|code| code.into_owned()).unwrap_or_default(),
            db.message().to_owned(),
        )),
        _ => None,
    }
}

/// Without a driver no statement runs, so nothing is refused.
#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
fn refusal(_error: &DbErr) -> Option<(String, String)> {
    None
}

/// The SQLSTATE of a database's refusal, if `error` is one.
fn sql_state(error: &DbErr) -> Option<String> {
    refusal(error).map(|(code, _)| code)
}

/// Whether `error` is PostgreSQL's deadlock (`40P01`) or serialization failure (`40001`).
fn is_contention(error: &DbErr) -> bool {
    matches!(sql_state(error).as_deref(), Some("40P01" | "40001"))
}

/// Whether `error` says a table does not exist: PostgreSQL's `42P01` (undefined table), or
/// SQLite's "no such table".
fn is_missing_table(error: &DbErr) -> bool {
    refusal(error)
        .is_some_and(|(code, message)| code == "42P01" || message.starts_with("no such table"))
}
