//! [`ConfigError`]: why the configuration was refused.

/// Why the configuration was refused. Each variant names the setting and its source.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read configuration file {path}: {reason}")]
    Unreadable {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The configuration file is not valid TOML or has an unknown or mistyped key.
    #[error("configuration file {path} is invalid: {reason}")]
    InvalidFile {
        /// The file.
        path: String,
        /// The parser's message (names the key and line).
        reason: String,
    },
    /// A setting has a value that does not parse or breaks its rule.
    #[error("setting {setting} (from {origin}) is invalid: {reason}")]
    Invalid {
        /// The setting's name.
        setting: &'static str,
        /// Where the value came from: `TENANTRY_X`, the file path, or `defaults`.
        origin: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A required setting is missing.
    #[error("setting {setting} is required: {hint}")]
    Missing {
        /// The setting's name.
        setting: &'static str,
        /// How to provide it.
        hint: &'static str,
    },
}
