//! Configuration of `tenantry serve`: a TOML file plus `TENANTRY_*` environment variables.
//!
//! Every setting has one name, used as the TOML key and (upper-cased, prefixed with
//! `TENANTRY_`) as the environment variable; the environment wins over the file. The merged
//! settings are validated once at start into a [`Config`]; each [`ConfigError`] names the
//! setting (and the variable or file it came from) and says what to do.
//!
//! The file is `--config PATH`, else `$TENANTRY_CONFIG`, else `tenantry.toml` in the working
//! folder when it exists. Without any setting the service uses a SQLite file
//! `tenantry.db` in the working folder and listens on `127.0.0.1:8080` without a token.
//!
//! Parts: the validated types ([`Config`], [`DirectorySettings`], [`RetentionSettings`],
//! [`LogFormat`]), the raw file shape ([`RawConfig`], its `[retention]` table [`RawRetention`]), the environment overlay and unknown-variable check
//! ([`unknown_variables`]), validation, and [`ConfigError`].

mod env;
mod error;
mod model;
mod raw;
mod secrets;
mod validate;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use env::{
    CONNECTIONS_BESIDES_WORKERS, OPERATOR_ENV, OTHER_VARIABLES, SETTINGS, UnknownVariable,
    merge_env_and_validate, parse_operators_env, unknown_variables,
};
pub use error::ConfigError;
pub use model::{
    Config, DirectoryCapacity, DirectorySettings, LogFormat, RetentionSettings,
    is_plain_http_off_loopback, redact_url,
};
pub use raw::{RawConfig, RawOperator, RawRetention};
pub use tenantry_operator::listener::tls::AdminTls;
pub use validate::{DELETION_ABSENCE_GRACE_MARGIN, smallest_deletion_absence_grace};

/// Largest accepted `directory_max_snapshot_workspaces` and `directory_max_active_workspaces`:
/// 1,000,000.
pub const MAX_DIRECTORY_WORKSPACES: u64 = 1_000_000;

/// Largest accepted `directory_max_snapshot_memberships`: 10,000,000 (a snapshot of that size
/// is about 3.6 GB of JSON and would take some 40 GB of memory to apply; docs/operations.md,
/// "Directory capacity").
pub const MAX_DIRECTORY_MEMBERSHIPS: u64 = 10_000_000;

/// Smallest accepted `directory_max_response_bytes`: 1 MiB.
pub const MIN_DIRECTORY_RESPONSE_BYTES: u64 = 1024 * 1024;

/// Largest accepted `directory_max_response_bytes`: 4 GiB (about 3 times that in memory
/// while a snapshot of that size is applied; docs/operations.md, "Directory capacity").
pub const MAX_DIRECTORY_RESPONSE_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// Prefix of every environment variable read as a setting.
pub const ENV_PREFIX: &str = "TENANTRY_";

/// Environment variable naming the configuration file.
pub const CONFIG_ENV: &str = "TENANTRY_CONFIG";

/// File read when neither `--config` nor `TENANTRY_CONFIG` names one (if it exists).
pub const DEFAULT_CONFIG_FILE: &str = "tenantry.toml";

/// Default database: a SQLite file in the working folder, created when missing.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://tenantry.db?mode=rwc";

/// Default admin API address (loopback only, so no token is required).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Loads the configuration: the file (explicit `path`, else `TENANTRY_CONFIG`, else
/// `tenantry.toml` if present), then `TENANTRY_*` variables from `env`, then validation.
///
/// # Errors
/// [`ConfigError`] naming the first bad setting.
pub fn load(
    path: Option<&Path>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let file: Option<PathBuf> = match path {
        Some(p) => Some(p.to_path_buf()),
        None => match env(CONFIG_ENV) {
            Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.exists()),
        },
    };
    let (raw, file_label) = match &file {
        Some(path) => {
            let label = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Unreadable {
                path: label.clone(),
                reason: e.to_string(),
            })?;
            (RawConfig::from_toml(&text, &label)?, label)
        }
        None => (RawConfig::default(), "defaults".to_owned()),
    };
    merge_env_and_validate(raw, &file_label, env)
}
