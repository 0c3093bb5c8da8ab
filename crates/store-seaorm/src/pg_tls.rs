//! PostgreSQL over TLS: the libpq parameters of a database URL (`sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey`, or the `PGSSLMODE` / `PGSSLROOTCERT` / `PGSSLCERT` / `PGSSLKEY`
//! environment variables when the URL does not set them), checked before the first connection
//! and applied to the driver's options, and the handshake failures told in words.
//!
//! The driver (sqlx with rustls and the ring provider) does the TLS. What it does per
//! `sslmode` (docs/operations.md, "TLS"):
//! - `disable` (and `allow`, which sqlx treats as `disable`): no TLS;
//! - `prefer` (the default): TLS when the server offers it, certificate not checked;
//! - `require`: TLS or no connection, certificate not checked; with `sslrootcert` set it is
//!   read as `verify-ca` here (libpq's rule; sqlx alone would not check the chain);
//! - `verify-ca`: the chain must lead to a trusted root (host name not checked);
//! - `verify-full`: the chain, and the certificate must name the URL's host.
//!
//! Trusted roots are the platform's (rustls-native-certs: the system store, or the file /
//! folder named by `SSL_CERT_FILE` / `SSL_CERT_DIR`) plus the `sslrootcert` file, which sqlx
//! adds to them (libpq would use it alone). `sslrootcert=system` (libpq 16's spelling) means
//! the platform's roots only, and requires `sslmode=verify-full` (its default then), as libpq.
//!
//! Nothing here turns verification off: the modes without a check are the driver's, chosen
//! by the URL.

use std::path::Path;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sea_orm::{DbErr, RuntimeErr};
use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// TLS settings of a PostgreSQL URL that cannot work, found before connecting (the connect
/// module turns them into its `ConnectError::PostgresTlsFile` / `PostgresTlsSettings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SettingsError {
    /// A file named by `parameter` is missing, unreadable, or holds the wrong PEM.
    File {
        parameter: &'static str,
        path: String,
        cause: String,
    },
    /// Parameters that cannot work together: what is wrong and what to do.
    Settings { problem: String },
}

/// A libpq `sslmode` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    /// The mode named `value` (case-insensitive, as sqlx reads it).
    fn parse(value: &str) -> Option<Self> {
        Some(match value.to_ascii_lowercase().as_str() {
            "disable" => Self::Disable,
            "allow" => Self::Allow,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            _ => return None,
        })
    }

    fn driver(self) -> PgSslMode {
        match self {
            Self::Disable => PgSslMode::Disable,
            Self::Allow => PgSslMode::Allow,
            Self::Prefer => PgSslMode::Prefer,
            Self::Require => PgSslMode::Require,
            Self::VerifyCa => PgSslMode::VerifyCa,
            Self::VerifyFull => PgSslMode::VerifyFull,
        }
    }
}

/// The TLS parameters of one PostgreSQL URL, as written (URL first, then environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsSettings {
    /// `sslmode`, unparsed (checked by [`TlsSettings::mode`]).
    sslmode: Option<String>,
    /// `sslrootcert`: a file, inline PEM, or `system`.
    sslrootcert: Option<String>,
    /// `sslcert`: the client certificate (file or inline PEM).
    sslcert: Option<String>,
    /// `sslkey`: the client certificate's private key (file or inline PEM).
    sslkey: Option<String>,
}

impl TlsSettings {
    /// Reads the parameters of `url` (the same names and aliases sqlx reads, the last
    /// occurrence winning), each falling back to its environment variable through `env`.
    /// A URL that does not parse yields the environment's values; the driver then refuses it.
    pub(crate) fn read(url: &str, env: impl Fn(&str) -> Option<String>) -> Self {
        let mut settings = Self {
            sslmode: env("PGSSLMODE"),
            sslrootcert: env("PGSSLROOTCERT"),
            sslcert: env("PGSSLCERT"),
            sslkey: env("PGSSLKEY"),
        };
        let Ok(parsed) = url::Url::parse(url) else {
            return settings;
        };
        for (key, value) in parsed.query_pairs() {
            let slot = match &*key {
                "sslmode" | "ssl-mode" => &mut settings.sslmode,
                "sslrootcert" | "ssl-root-cert" | "ssl-ca" => &mut settings.sslrootcert,
                "sslcert" | "ssl-cert" => &mut settings.sslcert,
                "sslkey" | "ssl-key" => &mut settings.sslkey,
                _ => continue,
            };
            *slot = Some(value.into_owned());
        }
        settings
    }

    /// Whether `sslrootcert` is libpq's `system` (the platform's roots only).
    fn system_roots(&self) -> bool {
        self.sslrootcert.as_deref() == Some("system")
    }

    /// The mode the driver is given: the URL's, `prefer` when unset (`verify-full` with
    /// `sslrootcert=system`), and `verify-ca` for `require` with a `sslrootcert` (libpq's rule).
    ///
    /// # Errors
    /// [`SettingsError::Settings`] for an unknown mode, or `sslrootcert=system` with
    /// a mode weaker than `verify-full`.
    pub(crate) fn mode(&self) -> Result<SslMode, SettingsError> {
        let mode = match self.sslmode.as_deref() {
            None if self.system_roots() => SslMode::VerifyFull,
            None => SslMode::Prefer,
            Some(value) => SslMode::parse(value).ok_or_else(|| SettingsError::Settings {
                problem: format!(
                    "sslmode={value:?} is not a libpq mode; use disable, prefer, require, verify-ca or verify-full"
                ),
            })?,
        };
        if self.system_roots() && mode != SslMode::VerifyFull {
            return Err(SettingsError::Settings {
                problem: "sslrootcert=system checks the server against the platform's roots and needs sslmode=verify-full (or no sslmode); a weaker mode would not use them".to_owned(),
            });
        }
        Ok(match mode {
            SslMode::Require if self.sslrootcert.is_some() => SslMode::VerifyCa,
            other => other,
        })
    }

    /// Checks what can be checked before connecting: the mode ([`TlsSettings::mode`]), the
    /// client certificate and key given together, and each named file readable and holding
    /// PEM of the right kind.
    ///
    /// # Errors
    /// [`SettingsError::Settings`], or [`SettingsError::File`] naming the
    /// parameter, the file and the cause.
    pub(crate) fn check(&self) -> Result<SslMode, SettingsError> {
        let mode = self.mode()?;
        match (&self.sslcert, &self.sslkey) {
            (Some(_), None) | (None, Some(_)) => {
                let (given, missing) = if self.sslcert.is_some() {
                    ("sslcert", "sslkey")
                } else {
                    ("sslkey", "sslcert")
                };
                return Err(SettingsError::Settings {
                    problem: format!(
                        "{given} is set without {missing}: a client certificate (sslcert) and its private key (sslkey) go together; set both, or neither"
                    ),
                });
            }
            _ => {}
        }
        if let Some(value) = &self.sslrootcert
            && !self.system_roots()
        {
            check_pem("sslrootcert", value, Pem::Certificates)?;
        }
        if let Some(value) = &self.sslcert {
            check_pem("sslcert", value, Pem::Certificates)?;
        }
        if let Some(value) = &self.sslkey {
            check_pem("sslkey", value, Pem::PrivateKey)?;
        }
        Ok(mode)
    }

    /// `options` (the driver's parse of the same URL) with `mode` and, for
    /// `sslrootcert=system`, no extra root (sqlx would read a file named `system`).
    pub(crate) fn apply(&self, mode: SslMode, options: PgConnectOptions) -> PgConnectOptions {
        let options = options.ssl_mode(mode.driver());
        if self.system_roots() {
            options.ssl_root_cert_from_pem(Vec::new())
        } else {
            options
        }
    }
}

/// What a PEM file must hold.
#[derive(Debug, Clone, Copy)]
enum Pem {
    Certificates,
    PrivateKey,
}

/// Whether `value` is PEM text rather than a path (sqlx's own rule).
fn is_inline_pem(value: &str) -> bool {
    let trimmed = value.trim();
    trimmed.starts_with("-----BEGIN") && trimmed.ends_with("-----")
}

/// Reads the file (or inline PEM) `value` of `parameter` and checks that it holds `kind`.
fn check_pem(parameter: &'static str, value: &str, kind: Pem) -> Result<(), SettingsError> {
    let failed = |cause: String| SettingsError::File {
        parameter,
        path: if is_inline_pem(value) {
            "(inline PEM)".to_owned()
        } else {
            value.to_owned()
        },
        cause,
    };
    let data = if is_inline_pem(value) {
        value.as_bytes().to_vec()
    } else {
        std::fs::read(Path::new(value)).map_err(|e| failed(format!("cannot read it ({e})")))?
    };
    match kind {
        Pem::Certificates => {
            let certificates = CertificateDer::pem_slice_iter(&data)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| failed(format!("not a PEM certificate file ({e})")))?;
            if certificates.is_empty() {
                return Err(failed(
                    "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
                ));
            }
        }
        Pem::PrivateKey => {
            PrivateKeyDer::from_pem_slice(&data)
                .map_err(|e| failed(format!("it holds no PEM private key ({e})")))?;
        }
    }
    Ok(())
}

/// A connection failure that TLS explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TlsFailure {
    /// The server's `pg_hba.conf` has no entry for a connection without encryption: the
    /// server's own message.
    ServerRequiresTls(String),
    /// The handshake failed or the certificate was refused: the cause and what to do.
    Handshake {
        /// What failed (the TLS library's words).
        cause: String,
        /// What to do about it.
        hint: &'static str,
    },
}

impl TlsFailure {
    /// The failure in words, with what to do.
    pub(crate) fn describe(&self) -> String {
        match self {
            Self::ServerRequiresTls(detail) => format!(
                "the server requires TLS ({detail}): set sslmode=verify-full in the database URL"
            ),
            Self::Handshake { cause, hint } => format!("TLS failed: {cause}; {hint}"),
        }
    }
}

/// The TLS explanation of `error`, a failure to open a connection, if it has one.
pub(crate) fn classify(error: &DbErr) -> Option<TlsFailure> {
    let DbErr::Conn(RuntimeErr::SqlxError(error)) = error else {
        return None;
    };
    classify_sqlx(error)
}

/// [`classify`] of a driver error (a connection sqlx opened directly).
pub(crate) fn classify_sqlx(error: &sqlx::Error) -> Option<TlsFailure> {
    match error {
        sqlx::Error::Database(db) => {
            let message = db.message();
            let plain = message.contains("no encryption") || message.contains("SSL off");
            (db.code().as_deref() == Some("28000") && plain)
                .then(|| TlsFailure::ServerRequiresTls(message.to_owned()))
        }
        sqlx::Error::Tls(inner) => {
            if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
                return Some(handshake(tls));
            }
            let cause = inner.to_string();
            let hint = if cause.contains("does not support TLS") {
                "the server does not offer TLS: turn `ssl = on` in its postgresql.conf, or use a server that does"
            } else {
                "check the sslmode, sslrootcert, sslcert and sslkey parameters of the database URL"
            };
            Some(TlsFailure::Handshake { cause, hint })
        }
        sqlx::Error::Io(io) => io
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .map(handshake),
        _ => None,
    }
}

/// The failure for a rustls error, with what to do about it.
fn handshake(error: &rustls::Error) -> TlsFailure {
    use rustls::{AlertDescription as Alert, CertificateError as Cert, Error as E};
    let hint = match error {
        E::InvalidCertificate(Cert::UnknownIssuer | Cert::BadSignature) => {
            "the server's certificate is not signed by a CA this client trusts: set sslrootcert=PATH to the CA file of the server (managed PostgreSQL services publish theirs), or add that CA to the platform's trust store"
        }
        E::InvalidCertificate(Cert::NotValidForName | Cert::NotValidForNameContext { .. }) => {
            "the server's certificate does not name the host of the database URL: connect by a name the certificate holds, or use sslmode=verify-ca to check the chain only"
        }
        E::InvalidCertificate(
            Cert::Expired
            | Cert::ExpiredContext { .. }
            | Cert::NotValidYet
            | Cert::NotValidYetContext { .. },
        ) => {
            "the server's certificate is outside its validity period: renew it on the server, or check this machine's clock"
        }
        E::InvalidCertificate(_) => {
            "the server's certificate was refused: check it against sslrootcert and the host name of the database URL"
        }
        E::AlertReceived(
            Alert::CertificateRequired
            | Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateUnknown
            | Alert::AccessDenied,
        ) => {
            "the server refused this client's certificate: set sslcert and sslkey to a certificate the server's CA signed"
        }
        _ => {
            "check the server's TLS setup and the sslmode, sslrootcert, sslcert and sslkey parameters of the database URL"
        }
    };
    TlsFailure::Handshake {
        cause: error.to_string(),
        hint,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read(url: &str) -> TlsSettings {
        TlsSettings::read(url, |_| None)
    }

    /// The error in words (the connect module words it for users).
    fn text(error: SettingsError) -> String {
        match error {
            SettingsError::File {
                parameter,
                path,
                cause,
            } => format!("{parameter} file {path}: {cause}"),
            SettingsError::Settings { problem } => problem,
        }
    }

    /// The libpq table: what each URL asks for and the mode the driver is given.
    #[test]
    fn sslmode_is_read_as_libpq_reads_it() {
        for (url, expected) in [
            ("postgres://u@h/db", SslMode::Prefer),
            ("postgres://u@h/db?sslmode=disable", SslMode::Disable),
            ("postgres://u@h/db?sslmode=allow", SslMode::Allow),
            ("postgres://u@h/db?sslmode=prefer", SslMode::Prefer),
            ("postgres://u@h/db?sslmode=require", SslMode::Require),
            ("postgres://u@h/db?sslmode=verify-ca", SslMode::VerifyCa),
            ("postgres://u@h/db?sslmode=VERIFY-FULL", SslMode::VerifyFull),
            (
                "postgres://u@h/db?ssl-mode=verify-full",
                SslMode::VerifyFull,
            ),
            // libpq: require with a root certificate verifies the chain.
            (
                "postgres://u@h/db?sslmode=require&sslrootcert=/ca.pem",
                SslMode::VerifyCa,
            ),
            (
                "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem",
                SslMode::VerifyFull,
            ),
            // libpq 16: the platform's roots, verify-full by default.
            ("postgres://u@h/db?sslrootcert=system", SslMode::VerifyFull),
            // The last occurrence wins, as in sqlx.
            (
                "postgres://u@h/db?sslmode=disable&sslmode=verify-ca",
                SslMode::VerifyCa,
            ),
        ] {
            assert_eq!(read(url).mode().unwrap(), expected, "{url}");
        }
    }

    #[test]
    fn the_environment_fills_what_the_url_leaves_out() {
        let env = |name: &str| match name {
            "PGSSLMODE" => Some("verify-full".to_owned()),
            "PGSSLROOTCERT" => Some("/etc/ca.pem".to_owned()),
            _ => None,
        };
        let from_env = TlsSettings::read("postgres://u@h/db", env);
        assert_eq!(from_env.mode().unwrap(), SslMode::VerifyFull);
        assert_eq!(from_env.sslrootcert.as_deref(), Some("/etc/ca.pem"));
        let url_wins = TlsSettings::read("postgres://u@h/db?sslmode=require", env);
        assert_eq!(url_wins.mode().unwrap(), SslMode::VerifyCa);
    }

    #[test]
    fn modes_that_cannot_work_are_refused_with_the_reason() {
        let message = read("postgres://u@h/db?sslmode=strict")
            .mode()
            .map_err(text)
            .unwrap_err();
        assert!(message.contains("\"strict\""), "{message}");
        assert!(message.contains("verify-full"), "{message}");
        let message = read("postgres://u@h/db?sslmode=require&sslrootcert=system")
            .mode()
            .map_err(text)
            .unwrap_err();
        assert!(message.contains("sslrootcert=system"), "{message}");
        assert!(message.contains("sslmode=verify-full"), "{message}");
    }

    /// A missing or unreadable file is named with its parameter and the cause.
    #[test]
    fn a_missing_or_unreadable_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing-ca.pem");
        let url = format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={}",
            missing.display()
        );
        let error = read(&url).check().unwrap_err();
        assert!(
            matches!(
                error,
                SettingsError::File {
                    parameter: "sslrootcert",
                    ..
                }
            ),
            "{error:?}"
        );
        let message = text(error);
        assert!(
            message.contains(&missing.display().to_string()),
            "{message}"
        );
        assert!(message.contains("cannot read it"), "{message}");

        // A folder cannot be read as a file (even by root, unlike a mode-000 file).
        let url = format!(
            "postgres://u@h/db?sslcert={0}&sslkey={0}",
            dir.path().display()
        );
        let message = read(&url).check().map_err(text).unwrap_err();
        assert!(message.contains("sslcert file"), "{message}");

        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not PEM at all\n").unwrap();
        let url = format!("postgres://u@h/db?sslrootcert={}", empty.display());
        let message = read(&url).check().map_err(text).unwrap_err();
        assert!(message.contains("no PEM certificate"), "{message}");
    }

    #[test]
    fn a_client_key_needs_its_certificate_and_the_reverse() {
        let message = read("postgres://u@h/db?sslkey=/k.pem")
            .check()
            .map_err(text)
            .unwrap_err();
        assert!(
            message.contains("sslkey is set without sslcert"),
            "{message}"
        );
        let message = read("postgres://u@h/db?sslcert=/c.pem")
            .check()
            .map_err(text)
            .unwrap_err();
        assert!(
            message.contains("sslcert is set without sslkey"),
            "{message}"
        );
    }

    #[test]
    fn readable_pem_files_pass_and_inline_pem_is_not_a_path() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cert_file = dir.path().join("c.pem");
        let key_file = dir.path().join("k.pem");
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let url = format!(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert={0}&sslcert={0}&sslkey={1}",
            cert_file.display(),
            key_file.display()
        );
        assert_eq!(read(&url).check().unwrap(), SslMode::VerifyFull);
        // A certificate where the key belongs is refused.
        let url = format!(
            "postgres://u@h/db?sslcert={0}&sslkey={0}",
            cert_file.display()
        );
        let message = read(&url).check().map_err(text).unwrap_err();
        assert!(message.contains("no PEM private key"), "{message}");
        let inline = TlsSettings {
            sslrootcert: Some(cert.pem()),
            ..TlsSettings::default()
        };
        assert_eq!(inline.check().unwrap(), SslMode::Prefer);
    }

    /// Each certificate problem gets a hint that names it.
    #[test]
    fn certificate_errors_are_explained() {
        use rustls::CertificateError as Cert;
        for (error, expected) in [
            (Cert::UnknownIssuer, "not signed by a CA this client trusts"),
            (Cert::NotValidForName, "does not name the host"),
            (Cert::Expired, "validity period"),
        ] {
            let io = std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                rustls::Error::InvalidCertificate(error),
            );
            let Some(TlsFailure::Handshake { cause, hint }) = classify(&DbErr::Conn(
                RuntimeErr::SqlxError(sqlx::Error::Io(io).into()),
            )) else {
                panic!("not classified");
            };
            assert!(cause.contains("invalid peer certificate"), "{cause}");
            assert!(hint.contains(expected), "{hint}");
        }
        let plain = sqlx::Error::Tls("server does not support TLS".into());
        let Some(TlsFailure::Handshake { hint, .. }) =
            classify(&DbErr::Conn(RuntimeErr::SqlxError(plain.into())))
        else {
            panic!("not classified");
        };
        assert!(hint.contains("ssl = on"), "{hint}");
        let other = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            classify(&DbErr::Conn(RuntimeErr::SqlxError(
                sqlx::Error::Io(other).into()
            ))),
            None
        );
    }
}
