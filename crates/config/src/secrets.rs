//! Secrets of the configuration (docs/operations.md, "Operators and roles"): values given
//! directly or read from `*_file` settings (the convention of container secrets), the named
//! operators of `[[operators]]` / `TENANTRY_OPERATORS`, and the database password put into the
//! URL.

use tenantry_operator::identity::{ADMIN_OPERATOR, Operator, Role, Secret, check_name};

use super::ConfigError;
use super::raw::RawOperator;

/// A non-empty, trimmed setting value.
pub(super) fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// Largest secret file read, bytes (64 KiB: a token, a key or a URL fits many times over).
pub(super) const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Reads the secret in the file `path` of the setting `file_setting`: the file's text without
/// surrounding whitespace (a final newline is usual). A missing, unreadable, empty, non-UTF-8
/// or larger than [`MAX_SECRET_FILE_BYTES`] file is refused naming the setting and the path.
pub(super) fn read_secret_file(
    file_setting: &'static str,
    path: &str,
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Secret, ConfigError> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| {
        invalid(
            file_setting,
            format!("cannot read the secret file {path}: {e}"),
        )
    };
    // Read at most one byte past the cap: a device or a huge file (`/dev/zero`) is refused
    // instead of filling memory.
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_SECRET_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(invalid(
            file_setting,
            format!(
                "the secret file {path} is larger than {MAX_SECRET_FILE_BYTES} bytes; a secret file holds one token or key"
            ),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        invalid(
            file_setting,
            format!("the secret file {path} is not UTF-8 text"),
        )
    })?;
    let value = text.trim();
    if value.is_empty() {
        return Err(invalid(
            file_setting,
            format!("the secret file {path} is empty"),
        ));
    }
    Ok(Secret::new(value))
}

/// The secret of `setting`, given directly or through `file_setting` (a file holding it), not
/// both.
pub(super) fn secret(
    value: &Option<Secret>,
    file: &Option<String>,
    setting: &'static str,
    file_setting: &'static str,
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Option<Secret>, ConfigError> {
    match (
        value.as_ref().filter(|v| !v.expose().is_empty()),
        given(file),
    ) {
        (Some(_), Some(_)) => Err(invalid(
            file_setting,
            format!("is set together with {setting}; set one of them"),
        )),
        (Some(value), None) => Ok(Some(value.clone())),
        (None, Some(path)) => read_secret_file(file_setting, path, invalid).map(Some),
        (None, None) => Ok(None),
    }
}

/// An operator token's rule (the admin token's too): at least 16 characters, no whitespace or
/// control character.
pub(super) fn token_is_strong(token: &str) -> bool {
    token.len() >= 16 && !token.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// The named operators of `[[operators]]` / `TENANTRY_OPERATORS`: valid distinct names (not
/// `admin` while `admin_token` is set), a role, exactly one of `token` and `token_file`, strong
/// and distinct tokens.
pub(super) fn validate_operators(
    raw: &[RawOperator],
    admin_token: Option<&Secret>,
    invalid: &dyn Fn(&'static str, String) -> ConfigError,
) -> Result<Vec<Operator>, ConfigError> {
    let mut operators: Vec<Operator> = Vec::new();
    for entry in raw {
        let name = entry.name.trim();
        check_name(name).map_err(|e| invalid("operators", e))?;
        if operators.iter().any(|o| o.name == name) {
            return Err(invalid(
                "operators",
                format!("operator {name:?} is configured twice; names must be distinct"),
            ));
        }
        if name == ADMIN_OPERATOR && admin_token.is_some() {
            return Err(invalid(
                "operators",
                format!(
                    "operator {name:?} is the name of admin_token's operator; rename it or drop admin_token"
                ),
            ));
        }
        let role: Role = entry
            .role
            .parse()
            .map_err(|e| invalid("operators", format!("operator {name:?}: {e}")))?;
        let token = match (
            entry.token.as_ref().filter(|t| !t.expose().is_empty()),
            given(&entry.token_file),
        ) {
            (Some(token), None) => token.clone(),
            (None, Some(path)) => {
                read_secret_file("operators", path, invalid).map_err(|e| match e {
                    ConfigError::Invalid {
                        setting,
                        origin,
                        reason,
                    } => ConfigError::Invalid {
                        setting,
                        origin,
                        reason: format!("operator {name:?} token_file: {reason}"),
                    },
                    other => other,
                })?
            }
            _ => {
                return Err(invalid(
                    "operators",
                    format!("operator {name:?} needs exactly one of token_file and token"),
                ));
            }
        };
        if !token_is_strong(token.expose()) {
            return Err(invalid(
                "operators",
                format!(
                    "operator {name:?}: the token must be at least 16 characters without whitespace; generate one with `openssl rand -hex 32`"
                ),
            ));
        }
        if operators.iter().any(|o| o.token == token) || admin_token == Some(&token) {
            return Err(invalid(
                "operators",
                format!(
                    "operator {name:?} has the token of another operator; each operator needs its own token"
                ),
            ));
        }
        operators.push(Operator {
            name: name.to_owned(),
            role,
            token,
        });
    }
    Ok(operators)
}

/// `url` with `password` put into its user info (percent-encoded): `postgres://USER@HOST/DB`
/// becomes `postgres://USER:PASSWORD@HOST/DB`.
///
/// # Errors
/// Why the URL cannot take a password: not PostgreSQL, no user, or a password already.
pub fn with_password(url: &str, password: &str) -> Result<String, String> {
    if !url.starts_with("postgres") {
        return Err(
            "database_url is not a postgres:// URL; only PostgreSQL takes a password".into(),
        );
    }
    let scheme_end = url
        .find("://")
        .map(|i| i + 3)
        .ok_or("database_url has no scheme")?;
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return Err(
            "database_url names no user (postgres://USER@HOST/DB); the password needs one".into(),
        );
    };
    let user = &rest[..at];
    if user.contains(':') {
        return Err("database_url already holds a password; drop it from the URL or drop database_password_file".into());
    }
    if user.is_empty() {
        return Err(
            "database_url names no user (postgres://USER@HOST/DB); the password needs one".into(),
        );
    }
    let encoded =
        percent_encoding::utf8_percent_encode(password, percent_encoding::NON_ALPHANUMERIC);
    Ok(format!(
        "{}{user}:{encoded}{}",
        &url[..scheme_end],
        &rest[at..]
    ))
}
