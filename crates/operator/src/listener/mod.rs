//! The admin listener (admin API and console on `listen`): how its connections are served and
//! which requests it turns away before any handler runs.
//!
//! Bounds of a connection (docs/operations.md, "The admin listener"):
//! - the request head must arrive within `admin_header_read_timeout_seconds` of the
//!   connection's start or of its previous answer (hyper's `header_read_timeout`, which runs
//!   while a keep-alive connection waits for its next request too, so it is also the idle
//!   timeout); else hyper closes the connection;
//! - the request body must arrive entirely within `admin_request_body_timeout_seconds` of the
//!   head (`body_deadline`): past it, reading the body fails and the connection is closed
//!   after the answer. The deadline is total, not per chunk, so a body trickled a byte at a
//!   time does not hold the connection either (tower-http's body timeout restarts at every
//!   chunk; a whole-request timeout would also cut a long bulk action);
//! - body size: the admin API's [`crate::admin::MAX_BODY_BYTES`] and the console's own limit
//!   stay as they are (their extractors enforce them).
//!
//! Host check (`host_guard`): without `admin_token`, the admin API and the console are open
//! to whoever reaches `listen` (loopback only, config validation ensures it). A web page the
//! operator visits could still reach them through DNS rebinding (its host name re-resolved to
//! 127.0.0.1); such a request carries the page's host name in `Host`. So only loopback names
//! (`localhost`, a loopback IP literal such as `127.0.0.1` or `[::1]`, any port) and the
//! listen address are answered; any other `Host` gets 421 `HOST_NOT_ALLOWED` saying to set
//! `admin_token`. With a token every `Host` is served (the token guards `/v1/*` and the
//! console, and is never sent by a browser on its own).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::serve::Listener;
use hyper::body::Frame;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::watch;

use crate::admin::AdminApiError;

pub mod tls;

/// The bounds of the admin listener's connections (the app reads them from its configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerLimits {
    /// Longest wait for a complete request head, from the connection's start or its previous
    /// answer (`admin_header_read_timeout_seconds`).
    pub header_read_timeout: Duration,
    /// Longest time for a whole request body, from its head
    /// (`admin_request_body_timeout_seconds`).
    pub request_body_timeout: Duration,
}

/// `app` with the listener's request guards: the request-body deadline of `limits` and,
/// unless `has_operators` (an `admin_token` or `[[operators]]` is configured), the host check
/// for `listen`.
pub fn guard(
    app: Router,
    limits: ListenerLimits,
    has_operators: bool,
    listen: SocketAddr,
) -> Router {
    let app = app.layer(middleware::from_fn_with_state(
        limits.request_body_timeout,
        body_deadline,
    ));
    if has_operators {
        app
    } else {
        app.layer(middleware::from_fn_with_state(listen, host_guard))
    }
}

/// Logs at `warn` that no `admin_token` is set (the admin API and the console on `listen` are
/// then open to every local process and served to loopback host names only) unless
/// `has_operators`; returns whether it did.
pub fn warn_without_token(has_operators: bool, listen: SocketAddr) -> bool {
    if has_operators {
        return false;
    }
    tracing::warn!(
        listen = %listen,
        "no admin_token is set: the admin API and the console are open to every process that \
         can reach {} and answer only requests addressed to localhost or a loopback address; \
         set admin_token (TENANTRY_ADMIN_TOKEN)",
        listen
    );
    true
}

/// The HTTP/1 connection settings of the admin listener: a timer and the header-read timeout
/// of `limits` (everything else as hyper's defaults).
pub fn http1_builder(limits: ListenerLimits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true);
    builder
}

/// Serves `app` on `listener` with the connection bounds of `limits` until `shutdown`
/// resolves (each request carries its connection's peer address as `ConnectInfo`); then stops accepting, lets every open connection finish its current request
/// (idle ones close at once) and returns once all are closed.
pub async fn serve<L>(
    mut listener: L,
    app: Router,
    limits: ListenerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    L: Listener,
    L::Addr: Clone + Send + Sync + 'static,
{
    let builder = http1_builder(limits);
    // Connections watch `stop` and hold a clone of `open` until they end.
    let (stop_tx, stop_rx) = watch::channel(false);
    let (open_tx, open_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let (io, peer) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        // The peer address, for the console's sign-in throttle (`ConnectInfo`).
        let service = app
            .clone()
            .layer(axum::Extension(axum::extract::ConnectInfo(peer)))
            .into_service::<hyper::body::Incoming>();
        let connection =
            builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
        let mut stop = stop_rx.clone();
        let open = open_rx.clone();
        tokio::spawn(async move {
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "admin listener connection ended with an error");
                    }
                }
                _ = stop.changed() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
            drop(open);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    drop(open_rx);
    open_tx.closed().await;
}

/// Replaces the request body with one that fails once `timeout` has passed since the head.
async fn body_deadline(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = Body::new(DeadlineBody {
        inner: body,
        deadline: Box::pin(tokio::time::sleep(timeout)),
        timeout,
    });
    next.run(Request::from_parts(parts, body)).await
}

/// A request body that must end before `deadline`.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

/// The error of a body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error(
    "the request body did not arrive within {0:?} (admin_request_body_timeout_seconds); send the whole body at once"
)]
struct BodyTimedOut(Duration);

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(self.timeout))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// Answers 421 `HOST_NOT_ALLOWED` to a request whose `Host` is not a loopback name or the
/// listen address ([`host_allowed`]); installed only without `admin_token`.
async fn host_guard(State(listen): State<SocketAddr>, request: Request, next: Next) -> Response {
    let host = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_owned())
        .or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        });
    match host {
        Some(host) if host_allowed(&host, listen) => next.run(request).await,
        _ => AdminApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "HOST_NOT_ALLOWED",
            format!(
                "this request is addressed to a host name other than localhost, a loopback \
                 address or {listen}; without admin_token the admin API and the console answer \
                 only those (protection against DNS rebinding). Use http://127.0.0.1:{port}/ or \
                 http://localhost:{port}/, or set admin_token (TENANTRY_ADMIN_TOKEN) to serve \
                 other host names",
                port = listen.port()
            ),
        )
        .into_response(),
    }
}

/// Whether a `Host` value (`name[:port]`, `IPv4[:port]` or `[IPv6][:port]`) names this
/// machine's loopback: `localhost` (any case, with or without the final dot), a loopback IP
/// literal, or the IP of `listen`; any port. Anything else, including a malformed value or a
/// name that merely resolves to 127.0.0.1, is not.
pub fn host_allowed(host: &str, listen: SocketAddr) -> bool {
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return false,
            },
        };
        match inside.parse::<std::net::Ipv6Addr>() {
            Ok(ip) => return port_ok(port) && ip_allowed(IpAddr::V6(ip), listen),
            Err(_) => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if !port_ok(port) {
        return false;
    }
    if name.eq_ignore_ascii_case("localhost") || name.eq_ignore_ascii_case("localhost.") {
        return true;
    }
    name.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip_allowed(IpAddr::V4(ip), listen))
}

fn port_ok(port: Option<&str>) -> bool {
    port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

fn ip_allowed(ip: IpAddr, listen: SocketAddr) -> bool {
    ip.is_loopback() || ip == listen.ip()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_the_listen_address_are_allowed() {
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let other_listen: SocketAddr = "127.0.0.5:9000".parse().unwrap();
        let cases = [
            ("localhost", listen, true),
            ("localhost:8080", listen, true),
            ("LocalHost:1", listen, true),
            ("localhost.:8080", listen, true),
            ("127.0.0.1", listen, true),
            ("127.0.0.1:8080", listen, true),
            ("127.0.0.1:65535", listen, true),
            ("127.1.2.3:80", listen, true),
            ("[::1]", listen, true),
            ("[::1]:8080", listen, true),
            ("127.0.0.5:9000", other_listen, true),
            // DNS rebinding: a name that resolves to 127.0.0.1 is still another site.
            ("evil.example", listen, false),
            ("evil.example:8080", listen, false),
            ("localhost.evil.example", listen, false),
            ("127.0.0.1.nip.io:8080", listen, false),
            ("10.0.0.1:8080", listen, false),
            ("[::2]:8080", listen, false),
            ("[::1]x", listen, false),
            ("[::1", listen, false),
            ("localhost:", listen, false),
            ("localhost:80a", listen, false),
            ("", listen, false),
        ];
        for (host, listen, expected) in cases {
            assert_eq!(
                host_allowed(host, listen),
                expected,
                "{host:?} for {listen}"
            );
        }
    }

    #[test]
    fn a_warning_says_no_admin_token_is_set() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let listen: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let warned = tracing::subscriber::with_default(subscriber, || {
            (
                warn_without_token(false, listen),
                warn_without_token(true, listen),
            )
        });
        assert_eq!(warned, (true, false));
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(text.contains("WARN"), "{text}");
        assert!(text.contains("no admin_token is set"), "{text}");
    }
}
