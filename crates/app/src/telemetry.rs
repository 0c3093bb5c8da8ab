//! Traces: OpenTelemetry spans exported over OTLP/HTTP (protobuf), off unless configured
//! (docs/operations.md, "Tracing").
//!
//! The `tracing` spans of the process (intake, claim, dispatch, saga steps, remote calls,
//! settles, renewals, the directory projector, fenced writes) become OpenTelemetry spans
//! through `tracing-opentelemetry`, batched and posted to `<endpoint>/v1/traces`. Tracing is
//! on when `otlp_endpoint` is set, or `OTEL_EXPORTER_OTLP_ENDPOINT` /
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is; `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` turn it off again. The exporter reads the other standard
//! variables from the process environment itself (`OTEL_EXPORTER_OTLP_HEADERS`,
//! `..._COMPRESSION`, the `OTEL_BSP_*` batch settings, `OTEL_TRACES_SAMPLER`), and the
//! resource `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` (service name `tenantry`
//! unless they name one).
//!
//! The exporter's batch runs on a thread of its own; its HTTP requests are handed to the
//! process's tokio runtime (`tenantry_remote_http::otlp::OtlpHttpClient`, 10 s per export), so
//! the exporter uses the same HTTP client stack as the remotes and needs no runtime of its
//! own. [`Traces::shutdown`] flushes what is batched; `serve` calls it after the graceful
//! shutdown.

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tenantry_remote_http::otlp::OtlpHttpClient;

/// The service name spans carry unless `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES`
/// names one.
pub const DEFAULT_SERVICE_NAME: &str = "tenantry";

/// The instrumentation scope of Tenantry's spans.
pub const TRACER_NAME: &str = "tenantry";

/// Why traces could not be turned on (the service runs without them and logs this).
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// The HTTP client of the exporter could not be built (TLS provider).
    #[error("cannot build the OTLP HTTP client: {0}")]
    Client(String),
    /// The exporter refused its configuration (an `OTEL_EXPORTER_OTLP_*` value, the endpoint).
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(String),
    /// Not called inside a tokio runtime: the exporter sends its requests on it.
    #[error("traces need a tokio runtime to send on")]
    NoRuntime,
}

/// The OTLP trace pipeline of the process: the provider whose tracer the subscriber's
/// OpenTelemetry layer records into. Dropping it without [`Traces::shutdown`] loses the
/// spans still batched.
#[derive(Debug, Clone)]
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Builds the pipeline when tracing is configured (see the module docs): `otlp_endpoint`
    /// (the `otlp_endpoint` setting, a base URL; it wins over the `OTEL_*` endpoints) or the
    /// standard variables read through `env` (which decides only whether tracing is on; the
    /// exporter and the resource read their variables from the process environment).
    /// `Ok(None)` when tracing is not configured or turned off. Must run inside a tokio
    /// runtime.
    ///
    /// # Errors
    /// [`TracesError`] when the exporter cannot be built from the settings.
    pub fn from_settings(
        otlp_endpoint: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, TracesError> {
        let var = |name: &str| env(name).filter(|value| !value.trim().is_empty());
        let is = |name: &str, expected: &str| {
            var(name).is_some_and(|value| value.trim().eq_ignore_ascii_case(expected))
        };
        if is("OTEL_SDK_DISABLED", "true") || is("OTEL_TRACES_EXPORTER", "none") {
            return Ok(None);
        }
        let configured = otlp_endpoint.is_some()
            || var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        if !configured {
            return Ok(None);
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| TracesError::NoRuntime)?;
        // The platform's roots (an https:// collector), rustls with ring as for the remotes.
        let client =
            OtlpHttpClient::new(runtime).map_err(|e| TracesError::Client(e.to_string()))?;
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client);
        if let Some(base) = otlp_endpoint {
            exporter = exporter.with_endpoint(format!("{}/v1/traces", base.trim_end_matches('/')));
        }
        let exporter = exporter
            .build()
            .map_err(|e| TracesError::Exporter(e.to_string()))?;
        let names_service = var("OTEL_SERVICE_NAME").is_some()
            || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| a.contains("service.name="));
        let mut resource = Resource::builder()
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        if !names_service {
            resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        Ok(Some(Self { provider }))
    }

    /// The tracer the subscriber's OpenTelemetry layer records into.
    pub fn tracer(&self) -> SdkTracer {
        self.provider.tracer(TRACER_NAME)
    }

    /// Exports every span batched so far and waits for the answer.
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        // The flush blocks until the batch thread has exported, and the export runs on this
        // runtime: wait on a blocking thread so a current-thread runtime can still send it.
        let flushed = tokio::task::spawn_blocking(move || provider.force_flush()).await;
        if let Ok(Err(error)) = flushed {
            tracing::warn!(%error, "flushing the OTLP trace exporter failed");
        }
    }

    /// Flushes the batched spans and stops the exporter (after the graceful shutdown of
    /// `serve`); spans ended afterwards are dropped.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let stopped = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        if let Ok(Err(error)) = stopped {
            tracing::warn!(%error, "shutting the OTLP trace exporter down failed");
        }
    }
}

/// A layer recording the process's spans into `traces`: the spans of Tenantry's crates at
/// `INFO` and above, whatever `log_filter` says (that filter is the logs').
pub fn layer<S>(traces: &Traces) -> impl tracing_subscriber::Layer<S> + 'static
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    use tracing_subscriber::Layer as _;
    let targets = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::Level::WARN)
        .with_targets(
            [
                "tenantry_app",
                "tenantry_engine",
                "tenantry_operator",
                "tenantry_remote_http",
                "tenantry_store_seaorm",
            ]
            .map(|target| (target, tracing::Level::INFO)),
        );
    tracing_opentelemetry::layer()
        .with_tracer(traces.tracer())
        .with_filter(targets)
}

/// The standard `OTEL_*` variables from the process environment.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    /// Off unless an endpoint is configured; `OTEL_SDK_DISABLED` and `OTEL_TRACES_EXPORTER=none`
    /// win; the setting or either standard endpoint variable turns it on.
    #[tokio::test]
    async fn traces_are_off_unless_configured() {
        assert!(Traces::from_settings(None, |_| None).unwrap().is_none());
        assert!(
            Traces::from_settings(None, env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]))
                .unwrap()
                .is_none()
        );
        for off in [
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let env = move |name: &str| (name == off.0).then(|| off.1.to_owned());
            assert!(
                Traces::from_settings(Some("http://127.0.0.1:4318"), env)
                    .unwrap()
                    .is_none(),
                "{off:?}"
            );
        }
        assert!(
            Traces::from_settings(Some("http://127.0.0.1:4318"), |_| None)
                .unwrap()
                .is_some()
        );
        for on in [
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")][..],
            &[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4318/v1/traces",
            )][..],
        ] {
            let traces = Traces::from_settings(None, env_of(on)).unwrap();
            assert!(traces.is_some(), "{on:?}");
        }
    }

    #[test]
    fn without_a_runtime_traces_cannot_start() {
        assert!(matches!(
            Traces::from_settings(Some("http://127.0.0.1:4318"), |_| None),
            Err(TracesError::NoRuntime)
        ));
    }
}
