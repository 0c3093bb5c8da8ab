//! A small HTTP/1.1 server loop that lets a handler end its own connection.
//!
//! `axum::serve` hides the connection from handlers, so a handler could not "commit, then drop
//! the response". Here each accepted connection gets a [`ConnectionControl`] in the request
//! extensions; a handler calls [`ConnectionControl::close`] or [`ConnectionControl::reset`]
//! and then never finishes, and the connection task drops the connection: a close sends FIN
//! without a response, a reset sets `SO_LINGER` to zero first so the kernel sends RST.
//!
//! With a rustls server configuration ([`Server::start_tls_on`]) each connection is a TLS
//! session over that TCP stream (a close or reset still ends the TCP connection); a failed
//! handshake just ends the connection.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::{JoinHandle, JoinSet};
use tower::Service;

/// Per-connection switch a handler uses to end the connection it is served on.
#[derive(Debug, Default)]
pub struct ConnectionControl {
    abort: Notify,
    reset: AtomicBool,
}

impl ConnectionControl {
    /// Closes the connection (FIN) without sending the pending response.
    pub fn close(&self) {
        self.abort.notify_one();
    }

    /// Resets the connection (RST) without sending the pending response.
    pub fn reset(&self) {
        self.reset.store(true, Ordering::SeqCst);
        self.abort.notify_one();
    }
}

/// A running server: its address and the switch that stops it.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Server {
    /// Binds `addr` and serves `router` until [`Server::shutdown`] (or drop), over TLS with
    /// `tls` (plain HTTP when `None`).
    ///
    /// # Errors
    /// The bind error, when `addr` cannot be bound.
    pub async fn start_tls_on(
        addr: SocketAddr,
        router: Router,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = watch::channel(false);
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let task = tokio::spawn(accept_loop(listener, router, acceptor, stopped));
        Ok(Self {
            addr,
            stop,
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, drops every open connection (in-flight requests get no answer) and
    /// waits for the server task to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stopped: watch::Receiver<bool>,
) {
    let mut connections = JoinSet::new();
    let mut stop = stopped.clone();
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                connections.spawn(serve_connection(
                    stream,
                    router.clone(),
                    tls.clone(),
                    stopped.clone(),
                ));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    connections.shutdown().await;
}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stopped: watch::Receiver<bool>,
) {
    let control = Arc::new(ConnectionControl::default());
    let stream = ControlledStream {
        inner: stream,
        control: Arc::clone(&control),
    };
    match tls {
        None => serve_io(TokioIo::new(stream), router, control, stopped).await,
        Some(acceptor) => {
            let mut stop = stopped.clone();
            let accepted = tokio::select! {
                accepted = acceptor.accept(stream) => accepted,
                _ = stop.wait_for(|s| *s) => return,
            };
            // A failed handshake (the client distrusts the certificate, or presents none
            // when one is required) ends the connection; the client reports why.
            if let Ok(tls_stream) = accepted {
                serve_io(TokioIo::new(tls_stream), router, control, stopped).await;
            }
        }
    }
}

async fn serve_io<I>(
    io: TokioIo<I>,
    router: Router,
    control: Arc<ConnectionControl>,
    mut stopped: watch::Receiver<bool>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let per_connection = Arc::clone(&control);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request.extensions_mut().insert(Arc::clone(&per_connection));
        let mut router = router.clone();
        router.call(request)
    });
    let connection = hyper::server::conn::http1::Builder::new().serve_connection(io, service);
    tokio::select! {
        _ = connection => {}
        () = control.abort.notified() => {}
        _ = stopped.wait_for(|s| *s) => {}
    }
}

/// The TCP stream of one connection; resets instead of closing when its control says so.
struct ControlledStream {
    inner: TcpStream,
    control: Arc<ConnectionControl>,
}

impl Drop for ControlledStream {
    fn drop(&mut self) {
        if self.control.reset.load(Ordering::SeqCst) {
            // Zero linger makes close() send RST at once; it does not block with zero.
            let _ = self.inner.set_zero_linger();
        }
    }
}

impl AsyncRead for ControlledStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ControlledStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
