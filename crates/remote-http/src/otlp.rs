//! The HTTP client of the app's OTLP trace exporter (docs/operations.md, "Tracing"): the
//! exporter posts protobuf batches to `<collector>/v1/traces` through reqwest, with the same
//! rustls configuration as the remotes (the platform's roots).
//!
//! The exporter's batch processor runs on a thread of its own and polls each export with a
//! plain executor, which cannot drive reqwest's I/O; [`OtlpHttpClient`] therefore runs every
//! request on the tokio runtime it was given and awaits the result from there.

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

use crate::client::{ClientBuildError, mutation_client};
use crate::tls::RemoteTls;

/// How long one export may take, connection and answer included (10 s, the default of
/// `OTEL_EXPORTER_OTLP_TIMEOUT`).
pub const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// An [`HttpClient`] for `opentelemetry-otlp` that sends on a tokio runtime.
#[derive(Debug, Clone)]
pub struct OtlpHttpClient {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl OtlpHttpClient {
    /// A client trusting the platform's roots, sending on `runtime`; each export must be
    /// answered within [`EXPORT_TIMEOUT`] (the OTLP default).
    ///
    /// # Errors
    /// [`ClientBuildError`] when the TLS configuration or the client cannot be built.
    pub fn new(runtime: tokio::runtime::Handle) -> Result<Self, ClientBuildError> {
        let client = mutation_client(EXPORT_TIMEOUT, &RemoteTls::default())?;
        Ok(Self { client, runtime })
    }
}

#[async_trait::async_trait]
impl HttpClient for OtlpHttpClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await })
            .await;
        match sent {
            Ok(answer) => answer,
            Err(joined) => Err(Box::new(joined)),
        }
    }
}
