//! TLS of the admin listener (`tls_cert_file`, `tls_key_file`).
//!
//! [`server_config`] reads the certificate chain and key (PEM) into a rustls server
//! configuration (ring provider, TLS 1.2 and 1.3, HTTP/1.1). [`AdminListener`] is what the
//! admin API is served from: the bound TCP listener, plain or with a TLS acceptor in front. It
//! implements [`axum::serve::Listener`], so the serving code is the same for both; TLS
//! handshakes run in their own tasks (bounded by [`HANDSHAKE_TIMEOUT`]), so a client that
//! connects and never finishes its handshake does not hold up the next connection.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// TLS of the admin listener: the certificate chain and private key it presents (both PEM,
/// read and checked at validation and again when `serve` binds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminTls {
    /// `tls_cert_file`: the certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// `tls_key_file`: the private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// Longest time a client gets to complete its TLS handshake with the admin listener.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS connections whose handshake finished but that the server has not taken yet.
const ACCEPTED_BACKLOG: usize = 64;

/// The admin listener's certificate or key cannot be used; names the setting and file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} {path:?}: {reason}")]
pub struct AdminTlsError {
    setting: &'static str,
    path: PathBuf,
    reason: String,
}

impl AdminTlsError {
    /// The setting whose file cannot be used (`tls_cert_file` or `tls_key_file`).
    pub fn setting(&self) -> &'static str {
        self.setting
    }
}

/// The rustls server configuration of the admin listener, from its certificate and key files.
///
/// # Errors
/// [`AdminTlsError`] when a file is missing or unreadable, holds no PEM certificate (or key),
/// or the key does not match the certificate.
pub fn server_config(tls: &AdminTls) -> Result<Arc<rustls::ServerConfig>, AdminTlsError> {
    let refused = |setting: &'static str, path: &Path, reason: String| AdminTlsError {
        setting,
        path: path.to_path_buf(),
        reason,
    };
    let read = |setting: &'static str, path: &Path| {
        std::fs::read(path).map_err(|e| refused(setting, path, format!("cannot be read: {e}")))
    };
    let cert_bytes = read("tls_cert_file", &tls.cert_file)?;
    let chain = CertificateDer::pem_slice_iter(&cert_bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| refused("tls_cert_file", &tls.cert_file, format!("is not PEM: {e}")))?;
    if chain.is_empty() {
        return Err(refused(
            "tls_cert_file",
            &tls.cert_file,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    let key_bytes = read("tls_key_file", &tls.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_bytes).map_err(|e| {
        refused(
            "tls_key_file",
            &tls.key_file,
            format!("holds no usable PEM private key: {e}"),
        )
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(|e| refused("tls_cert_file", &tls.cert_file, e.to_string()))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| {
        refused(
            "tls_key_file",
            &tls.key_file,
            format!("cannot be used with tls_cert_file: {e}"),
        )
    })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The admin API's listener: plain TCP, or TLS in front of it.
#[derive(Debug)]
pub enum AdminListener {
    /// Plain HTTP.
    Plain(TcpListener),
    /// HTTPS: connections whose handshake finished, from a task that accepts and shakes hands.
    Tls {
        /// The bound address.
        addr: SocketAddr,
        /// Connections ready to serve.
        ready: mpsc::Receiver<(tokio_rustls::server::TlsStream<TcpStream>, SocketAddr)>,
        /// The accepting task (aborted on drop).
        task: AbortOnDrop,
    },
}

/// A task aborted when this handle is dropped.
#[derive(Debug)]
pub struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl AdminListener {
    /// `listener` as is (`tls` none) or with TLS from `tls`.
    pub fn new(listener: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> io::Result<Self> {
        let Some(tls) = tls else {
            return Ok(Self::Plain(listener));
        };
        let addr = listener.local_addr()?;
        let (sender, ready) = mpsc::channel(ACCEPTED_BACKLOG);
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let task = tokio::spawn(async move {
            loop {
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // As axum's own listener does: out of file descriptors and the like
                        // pass; wait a little instead of spinning.
                        tracing::warn!(error = %e, "admin listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                if sender.is_closed() {
                    break;
                }
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls_stream)) => {
                            let _ = sender.send((tls_stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "admin listener: TLS handshake failed");
                        }
                        Err(_elapsed) => {
                            tracing::debug!(%peer, "admin listener: TLS handshake timed out");
                        }
                    }
                });
            }
        });
        Ok(Self::Tls {
            addr,
            ready,
            task: AbortOnDrop(task),
        })
    }

    /// Whether connections are served over TLS.
    pub fn is_tls(&self) -> bool {
        matches!(self, Self::Tls { .. })
    }
}

impl axum::serve::Listener for AdminListener {
    type Io = AdminStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self {
            Self::Plain(listener) => {
                let (stream, addr) = axum::serve::Listener::accept(listener).await;
                (AdminStream::Plain(stream), addr)
            }
            Self::Tls { ready, .. } => match ready.recv().await {
                Some((stream, addr)) => (AdminStream::Tls(Box::new(stream)), addr),
                // The accepting task ended (it never does while the listener lives).
                None => std::future::pending().await,
            },
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        match self {
            Self::Plain(listener) => listener.local_addr(),
            Self::Tls { addr, .. } => Ok(*addr),
        }
    }
}

/// One admin connection: plain TCP or a TLS session over it.
#[derive(Debug)]
pub enum AdminStream {
    /// Plain HTTP.
    Plain(TcpStream),
    /// HTTPS.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for AdminStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for AdminStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
