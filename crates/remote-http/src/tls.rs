//! TLS of the remote clients: the rustls configuration every client of this crate uses.
//!
//! [`RemoteTls`] holds the TLS settings of one remote: an optional CA bundle (PEM) trusted in
//! addition to the platform's roots, and an optional client certificate and key (PEM) for
//! mutual TLS. [`RemoteTls::client_config`] turns them into a [`rustls::ClientConfig`]:
//! - the `ring` crypto provider, TLS 1.2 and 1.3 only (no older protocol version exists in
//!   rustls, and 1.2 is the minimum this crate accepts);
//! - server certificates verified against the platform's trust store (loaded once per process
//!   with `rustls-native-certs`) plus the CA bundle, with the host name checked. There is no
//!   setting that turns verification off: a remote with a private CA is trusted by naming its
//!   CA file.
//!
//! **Why the platform's roots (rustls-native-certs) rather than a compiled-in list
//! (webpki-roots):** the operator already manages the host's trust store (a corporate CA
//! installed there, a distrusted root removed by an OS update) and expects every service on the
//! host to follow it; a compiled-in list goes stale with the binary and cannot hold a private
//! CA. A host without any root certificate (a minimal container image) still works with a
//! `*_ca_file`.
//!
//! Every failure is a [`TlsConfigError`] that names the file and what is wrong with it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Protocol versions offered: TLS 1.3 and TLS 1.2 (the minimum).
pub const PROTOCOL_VERSIONS: &[&rustls::SupportedProtocolVersion] =
    &[&rustls::version::TLS13, &rustls::version::TLS12];

/// TLS settings of one remote. The default trusts the platform's roots only and presents no
/// client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteTls {
    /// A PEM file of CA certificates trusted in addition to the platform's roots (for a remote
    /// whose certificate a private CA issued).
    pub ca_file: Option<PathBuf>,
    /// A PEM file with the client certificate (chain, leaf first) presented when the remote
    /// asks for one (mutual TLS). Requires [`client_key_file`](Self::client_key_file).
    pub client_cert_file: Option<PathBuf>,
    /// The PEM file of the client certificate's private key (PKCS#8, PKCS#1 or SEC1).
    /// Requires [`client_cert_file`](Self::client_cert_file).
    pub client_key_file: Option<PathBuf>,
}

impl RemoteTls {
    /// The platform's roots only, no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also trusts the CA certificates of the PEM file `path`.
    #[must_use]
    pub fn with_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Presents the certificate of PEM file `cert` with the private key of PEM file `key`.
    #[must_use]
    pub fn with_client_identity(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.client_cert_file = Some(cert.into());
        self.client_key_file = Some(key.into());
        self
    }

    /// Reads every named file and builds the rustls configuration: the files are read each
    /// time (call it once per client).
    ///
    /// # Errors
    /// [`TlsConfigError`] naming the file: unreadable, not PEM, without a certificate or key,
    /// a CA certificate rustls refuses, a client key without its certificate (or the
    /// reverse), a key that does not match the certificate.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TlsConfigError> {
        let mut roots = platform_roots().clone();
        if let Some(path) = &self.ca_file {
            for cert in read_certificates(path, FileRole::CaBundle)? {
                roots.add(cert).map_err(|e| TlsConfigError::Refused {
                    role: FileRole::CaBundle,
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            }
        }
        let identity = self.client_identity()?;
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(PROTOCOL_VERSIONS)
            .map_err(|e| TlsConfigError::Backend {
                reason: e.to_string(),
            })?
            .with_root_certificates(roots);
        match identity {
            None => Ok(builder.with_no_client_auth()),
            Some((cert_path, certs, key)) => {
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| TlsConfigError::Refused {
                        role: FileRole::ClientCertificate,
                        path: cert_path,
                        reason: format!("the certificate and key cannot be used together: {e}"),
                    })
            }
        }
    }

    /// The client certificate chain and key, when both are set.
    #[allow(clippy::type_complexity)]
    fn client_identity(
        &self,
    ) -> Result<
        Option<(
            PathBuf,
            Vec<CertificateDer<'static>>,
            PrivateKeyDer<'static>,
        )>,
        TlsConfigError,
    > {
        match (&self.client_cert_file, &self.client_key_file) {
            (None, None) => Ok(None),
            (Some(cert), None) => Err(TlsConfigError::CertificateWithoutKey { path: cert.clone() }),
            (None, Some(key)) => Err(TlsConfigError::KeyWithoutCertificate { path: key.clone() }),
            (Some(cert_path), Some(key_path)) => {
                let certs = read_certificates(cert_path, FileRole::ClientCertificate)?;
                let bytes = read(key_path, FileRole::ClientKey)?;
                let key =
                    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsConfigError::NotPem {
                        role: FileRole::ClientKey,
                        path: key_path.clone(),
                        reason: match e {
                            rustls_pki_types::pem::Error::NoItemsFound => {
                                "no PEM private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC \
                                 PRIVATE KEY) found"
                                    .to_owned()
                            }
                            other => other.to_string(),
                        },
                    })?;
                Ok(Some((cert_path.clone(), certs, key)))
            }
        }
    }
}

/// Which file of a [`RemoteTls`] an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FileRole {
    /// [`RemoteTls::ca_file`].
    CaBundle,
    /// [`RemoteTls::client_cert_file`].
    ClientCertificate,
    /// [`RemoteTls::client_key_file`].
    ClientKey,
}

impl std::fmt::Display for FileRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::CaBundle => "CA file",
            Self::ClientCertificate => "client certificate file",
            Self::ClientKey => "client key file",
        })
    }
}

/// TLS settings that cannot work; each names the file and the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// The file is missing or cannot be read.
    #[error("cannot read the {role} {path:?}: {reason}")]
    Unreadable {
        /// Which file.
        role: FileRole,
        /// The path as configured.
        path: PathBuf,
        /// The operating system's error.
        reason: String,
    },
    /// The file holds no PEM item of the expected kind, or its PEM is broken.
    #[error("the {role} {path:?} is not usable PEM: {reason}")]
    NotPem {
        /// Which file.
        role: FileRole,
        /// The path as configured.
        path: PathBuf,
        /// What the PEM reader found wrong.
        reason: String,
    },
    /// rustls refused a certificate or key of the file.
    #[error("the {role} {path:?} is refused: {reason}")]
    Refused {
        /// Which file.
        role: FileRole,
        /// The path as configured.
        path: PathBuf,
        /// rustls' reason.
        reason: String,
    },
    /// A client certificate is configured without its private key.
    #[error(
        "the client certificate file {path:?} is set without a client key file; set both or neither"
    )]
    CertificateWithoutKey {
        /// The certificate file.
        path: PathBuf,
    },
    /// A client key is configured without its certificate.
    #[error(
        "the client key file {path:?} is set without a client certificate file; set both or neither"
    )]
    KeyWithoutCertificate {
        /// The key file.
        path: PathBuf,
    },
    /// rustls refused the protocol versions (not expected with the ring provider).
    #[error("the TLS backend cannot be configured: {reason}")]
    Backend {
        /// rustls' reason.
        reason: String,
    },
}

impl TlsConfigError {
    /// The file the error is about, if it is about one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::Unreadable { path, .. }
            | Self::NotPem { path, .. }
            | Self::Refused { path, .. }
            | Self::CertificateWithoutKey { path }
            | Self::KeyWithoutCertificate { path } => Some(path),
            Self::Backend { .. } => None,
        }
    }
}

/// The crypto provider of every TLS configuration of this crate: `ring`.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The platform's root certificates (`rustls-native-certs`: on Linux the OpenSSL locations,
/// `SSL_CERT_FILE` / `SSL_CERT_DIR` when set), loaded once per process. Certificates rustls
/// cannot parse are skipped, as are unreadable store files: a host without any root
/// certificate yields an empty store (then only a configured CA file is trusted).
pub fn platform_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        roots
    })
}

fn read(path: &Path, role: FileRole) -> Result<Vec<u8>, TlsConfigError> {
    std::fs::read(path).map_err(|e| TlsConfigError::Unreadable {
        role,
        path: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// Every PEM certificate of the file; at least one.
fn read_certificates(
    path: &Path,
    role: FileRole,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let bytes = read(path, role)?;
    let not_pem = |reason: String| TlsConfigError::NotPem {
        role,
        path: path.to_path_buf(),
        reason,
    };
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| not_pem(e.to_string()))?;
    if certs.is_empty() {
        return Err(not_pem(
            "no PEM certificate (-----BEGIN CERTIFICATE-----) found".to_owned(),
        ));
    }
    Ok(certs)
}

/// Checks the files of `tls` without building a client: what [`RemoteTls::client_config`]
/// refuses, this refuses too.
///
/// # Errors
/// The [`TlsConfigError`] of [`RemoteTls::client_config`].
pub fn check(tls: &RemoteTls) -> Result<(), TlsConfigError> {
    tls.client_config().map(drop)
}

/// The rustls error in the source chain of `error`, if any: what a failed handshake reports
/// (an unknown issuer, an expired certificate, another host name, a refused client
/// certificate).
pub fn rustls_error<'e>(error: &'e (dyn std::error::Error + 'static)) -> Option<&'e rustls::Error> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        // tokio-rustls reports the rustls error inside an io::Error, which the connector may
        // wrap in another io::Error; `io::Error::source` skips the wrapped error itself.
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            let inner: &(dyn std::error::Error + 'static) = inner;
            current = Some(inner);
            continue;
        }
        current = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A self-signed certificate and its key, PEM.
    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn default_settings_build_with_the_platform_roots() {
        let config = RemoteTls::default().client_config().unwrap();
        assert_eq!(config.alpn_protocols, Vec::<Vec<u8>>::new());
    }

    #[test]
    fn a_ca_file_and_a_client_identity_build() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, _) = self_signed("ca.example");
        let (cert, key) = self_signed("client.example");
        let tls = RemoteTls::new()
            .with_ca_file(write(dir.path(), "ca.pem", &ca))
            .with_client_identity(
                write(dir.path(), "c.pem", &cert),
                write(dir.path(), "k.pem", &key),
            );
        tls.client_config().unwrap();
        check(&tls).unwrap();
    }

    #[test]
    fn missing_ca_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nowhere.pem");
        let error = RemoteTls::new()
            .with_ca_file(&path)
            .client_config()
            .unwrap_err();
        assert!(
            matches!(
                &error,
                TlsConfigError::Unreadable {
                    role: FileRole::CaBundle,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.path(), Some(path.as_path()));
        assert!(error.to_string().contains("nowhere.pem"), "{error}");
        assert!(error.to_string().contains("CA file"), "{error}");
    }

    #[test]
    fn ca_file_without_pem_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "ca.pem", "not a certificate\n");
        let error = RemoteTls::new()
            .with_ca_file(&path)
            .client_config()
            .unwrap_err();
        assert!(
            matches!(
                &error,
                TlsConfigError::NotPem {
                    role: FileRole::CaBundle,
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("BEGIN CERTIFICATE"), "{error}");
    }

    #[test]
    fn client_key_without_certificate_and_the_reverse_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = self_signed("client.example");
        let cert = write(dir.path(), "c.pem", &cert);
        let key = write(dir.path(), "k.pem", &key);
        let key_only = RemoteTls {
            client_key_file: Some(key.clone()),
            ..RemoteTls::default()
        };
        assert_eq!(
            key_only.client_config().unwrap_err(),
            TlsConfigError::KeyWithoutCertificate { path: key }
        );
        let cert_only = RemoteTls {
            client_cert_file: Some(cert.clone()),
            ..RemoteTls::default()
        };
        assert_eq!(
            cert_only.client_config().unwrap_err(),
            TlsConfigError::CertificateWithoutKey { path: cert }
        );
    }

    #[test]
    fn client_key_that_is_not_a_key_or_does_not_match_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = self_signed("client.example");
        let (_, other_key) = self_signed("other.example");
        let cert = write(dir.path(), "c.pem", &cert);
        let not_a_key = write(dir.path(), "k.pem", "-----BEGIN NOTHING-----\n");
        let error = RemoteTls::new()
            .with_client_identity(&cert, &not_a_key)
            .client_config()
            .unwrap_err();
        assert!(
            matches!(
                &error,
                TlsConfigError::NotPem {
                    role: FileRole::ClientKey,
                    ..
                }
            ),
            "{error:?}"
        );
        let other = write(dir.path(), "other.pem", &other_key);
        let error = RemoteTls::new()
            .with_client_identity(&cert, &other)
            .client_config()
            .unwrap_err();
        assert!(
            matches!(
                &error,
                TlsConfigError::Refused {
                    role: FileRole::ClientCertificate,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn only_tls_1_2_and_1_3_are_offered() {
        let versions: Vec<_> = PROTOCOL_VERSIONS.iter().map(|v| v.version).collect();
        assert_eq!(
            versions,
            [
                rustls::ProtocolVersion::TLSv1_3,
                rustls::ProtocolVersion::TLSv1_2
            ]
        );
    }
}
