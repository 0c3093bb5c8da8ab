//! Certificates made at run time (rcgen) for HTTPS tests and the reference remotes' `--tls`:
//! a throwaway CA ([`TestCa`]), server and client certificates it issues ([`TestCert`]), and
//! the rustls server configuration that serves them ([`server_config`]).
//!
//! Nothing here disables verification: a client trusts a [`TestCa`] by loading its PEM
//! ([`TestCa::write_pem`]) as its CA file.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Host names of a certificate for a server on this machine: `127.0.0.1`, `::1` and
/// `localhost`.
pub const LOOPBACK_NAMES: &[&str] = &["127.0.0.1", "::1", "localhost"];

/// A certificate authority made for one run: issues server and client certificates.
#[derive(Debug)]
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate issued by a [`TestCa`] and its private key.
#[derive(Debug, Clone)]
pub struct TestCert {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key, PEM (PKCS#8).
    pub key_pem: String,
}

/// A certificate could not be made (an rcgen error, as text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot make the test certificate: {0}")]
pub struct CertError(String);

fn cert_error(e: impl std::fmt::Display) -> CertError {
    CertError(e.to_string())
}

impl TestCa {
    /// A new CA whose subject's common name is `name`.
    ///
    /// # Errors
    /// [`CertError`] when rcgen fails (not expected).
    pub fn new(name: &str) -> Result<Self, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error)?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().map_err(cert_error)?;
        let issuer = CertifiedIssuer::self_signed(params, key).map_err(cert_error)?;
        Ok(Self { issuer })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.issuer.der().clone()
    }

    /// Writes the CA certificate to `path` (PEM), the file a client names as its CA file.
    ///
    /// # Errors
    /// The write error.
    pub fn write_pem(&self, path: &Path) -> io::Result<PathBuf> {
        std::fs::write(path, self.cert_pem())?;
        Ok(path.to_path_buf())
    }

    /// A server certificate for `names` (DNS names or IP addresses), valid now.
    ///
    /// # Errors
    /// [`CertError`] when a name is not usable or rcgen fails.
    pub fn server_cert(&self, names: &[&str]) -> Result<TestCert, CertError> {
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth, false)
    }

    /// A server certificate for `names` that expired on 2001-01-01.
    ///
    /// # Errors
    /// [`CertError`] when a name is not usable or rcgen fails.
    pub fn expired_server_cert(&self, names: &[&str]) -> Result<TestCert, CertError> {
        self.issue(names, ExtendedKeyUsagePurpose::ServerAuth, true)
    }

    /// A client certificate (mutual TLS) with common name `name`.
    ///
    /// # Errors
    /// [`CertError`] when rcgen fails.
    pub fn client_cert(&self, name: &str) -> Result<TestCert, CertError> {
        self.issue(&[name], ExtendedKeyUsagePurpose::ClientAuth, false)
    }

    fn issue(
        &self,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        expired: bool,
    ) -> Result<TestCert, CertError> {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut params = CertificateParams::new(names.clone()).map_err(cert_error)?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().cloned().unwrap_or_default(),
        );
        params.distinguished_name = dn;
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        let key = KeyPair::generate().map_err(cert_error)?;
        let cert = params.signed_by(&key, &self.issuer).map_err(cert_error)?;
        Ok(TestCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl TestCert {
    /// Writes the certificate and key as `<dir>/<stem>.crt` and `<dir>/<stem>.key`; returns
    /// both paths.
    ///
    /// # Errors
    /// The write error.
    pub fn write_pem(&self, dir: &Path, stem: &str) -> io::Result<(PathBuf, PathBuf)> {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert_pem)?;
        std::fs::write(&key, &self.key_pem)?;
        Ok((cert, key))
    }
}

/// A rustls server configuration (ring provider, TLS 1.2 and 1.3, HTTP/1.1) presenting
/// `cert`; with `client_ca`, it requires a client certificate issued by that CA.
///
/// # Errors
/// [`CertError`] when the PEM does not parse or rustls refuses the key.
pub fn server_config(
    cert: &TestCert,
    client_ca: Option<&TestCa>,
) -> Result<Arc<rustls::ServerConfig>, CertError> {
    let chain = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(cert_error)?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(cert_error)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(cert_error)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.cert_der()).map_err(cert_error)?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(cert_error)?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(chain, key).map_err(cert_error)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
