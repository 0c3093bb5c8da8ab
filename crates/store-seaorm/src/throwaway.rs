//! Throwaway PostgreSQL databases on an existing server, for tests (feature `testing`) and
//! benchmarks (feature `bench`): one way to name, create and drop a scratch database.
//!
//! The server URL names any database the user may connect to (usually `postgres`) and a user
//! with the right to create databases; the scratch database gets the same authority and query
//! string with its own name ([`database_url`]). Nothing here is used by the product.

use sea_orm::{ConnectionTrait, DbErr};

/// A scratch database could not be created or dropped.
#[derive(Debug, thiserror::Error)]
#[error(
    "could not {action} the throwaway PostgreSQL database {database}: {source}. Check that the \
     server URL is reachable and that its user may create databases"
)]
pub struct ThrowawayError {
    /// `connect to the server for`, `drop`, `create` or `close the admin connection for`.
    pub action: &'static str,
    /// The scratch database's name.
    pub database: String,
    /// The driver's error.
    #[source]
    pub source: DbErr,
}

/// `server_url` with its database (the path) replaced by `database`; the authority
/// (user, host, port) and the query string are kept.
pub fn database_url(server_url: &str, database: &str) -> String {
    let (base, query) = match server_url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (server_url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let mut out = format!("{}/{}", &base[..authority_end], database);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Creates database `name` on the server of `server_url` (dropping it first, closing its
/// sessions, when it exists) and returns its URL ([`database_url`]). `name` must be a plain
/// SQL identifier (letters, digits, `_`); it is not quoted.
///
/// # Errors
/// [`ThrowawayError`] when the server cannot be reached or refuses a statement.
pub async fn create_postgres_database(
    server_url: &str,
    name: &str,
) -> Result<String, ThrowawayError> {
    run_admin(
        server_url,
        name,
        &[
            (
                "drop",
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            ),
            ("create", format!("CREATE DATABASE {name}")),
        ],
    )
    .await?;
    Ok(database_url(server_url, name))
}

/// Drops database `name` on the server of `server_url`, closing its sessions; a missing
/// database is not an error.
///
/// # Errors
/// [`ThrowawayError`] when the server cannot be reached or refuses the statement.
pub async fn drop_postgres_database(server_url: &str, name: &str) -> Result<(), ThrowawayError> {
    run_admin(
        server_url,
        name,
        &[(
            "drop",
            format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
        )],
    )
    .await
}

/// Runs `statements` (each with the action it performs) on an admin connection to
/// `server_url`, then closes it.
async fn run_admin(
    server_url: &str,
    name: &str,
    statements: &[(&'static str, String)],
) -> Result<(), ThrowawayError> {
    let failed = |action: &'static str| {
        move |source: DbErr| ThrowawayError {
            action,
            database: name.to_owned(),
            source,
        }
    };
    // Opened as the product opens its pool, so the URL's TLS parameters mean the same here.
    let admin = match crate::connect::open_pool(server_url, 1).await {
        Ok(db) => db.conn,
        Err(crate::connect::ConnectError::Open { source }) => {
            return Err(failed("connect to the server for")(source));
        }
        Err(other) => {
            return Err(failed("connect to the server for")(DbErr::Custom(
                other.to_string(),
            )));
        }
    };
    for (action, sql) in statements {
        admin
            .execute_unprepared(sql)
            .await
            .map_err(failed(action))?;
    }
    admin
        .close()
        .await
        .map_err(failed("close the admin connection for"))
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn database_url_keeps_authority_and_query() {
        let cases = [
            ("postgres://u@h:5/postgres", "postgres://u@h:5/x"),
            ("postgres://u@h:5", "postgres://u@h:5/x"),
            (
                "postgres://u@h:5/db?sslmode=disable",
                "postgres://u@h:5/x?sslmode=disable",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(database_url(input, "x"), expected);
        }
    }
}
