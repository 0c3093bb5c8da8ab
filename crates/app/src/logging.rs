//! Structured logs via `tracing`: human-readable lines by default, JSON on request; and, when
//! configured, the same spans exported as OpenTelemetry traces ([`crate::telemetry`]).
//!
//! Spans carry `operation_id` and `tenant` (the lifecycle dispatcher's span and the admin
//! API's request span), so every line inside them is attributable.

use std::io::IsTerminal;

use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer, Registry};

use crate::config::LogFormat;
use crate::telemetry::Traces;

/// Installs the global subscriber writing to standard error. `filter` is used unless
/// `RUST_LOG` is set. A second call (tests) leaves the first subscriber in place.
pub fn init(format: LogFormat, filter: &str) {
    init_with_traces(format, filter, None);
}

/// [`init`], and with `traces` the spans also go to its OTLP exporter (the spans of
/// Tenantry's crates at `INFO` and above, whatever `filter` says: the filter is the logs').
/// Returns whether this call installed the subscriber: `false` when one was installed before
/// (several services in one test process), which then stays.
pub fn init_with_traces(format: LogFormat, filter: &str, traces: Option<&Traces>) -> bool {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_span_events(FmtSpan::NONE);
    let lines: Box<dyn Layer<Registry> + Send + Sync> = match format {
        LogFormat::Human => lines.with_target(false).with_filter(filter).boxed(),
        LogFormat::Json => lines
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_filter(filter)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(lines)
        .with(traces.map(crate::telemetry::layer))
        .try_init()
        .is_ok()
}

/// The logging and tracing of `serve`: builds [`Traces`] from `config.otlp_endpoint` and the
/// process's `OTEL_*` variables and installs the subscriber with them (logs as
/// `log_format` / `log_filter` say). A pipeline that cannot be built is reported on standard
/// error and left off. Returns the pipeline to [`Traces::shutdown`] after the service stopped
/// (`None` when tracing is off, or a subscriber was installed before: then the spans cannot
/// reach it).
pub fn init_serve_logging(config: &crate::config::Config) -> Option<Traces> {
    let traces = match crate::telemetry::Traces::from_settings(
        config.otlp_endpoint.as_deref(),
        crate::telemetry::process_env,
    ) {
        Ok(traces) => traces,
        Err(e) => {
            eprintln!("tenantry: warning: traces are off: {e}");
            None
        }
    };
    let installed = init_with_traces(config.log_format, &config.log_filter, traces.as_ref());
    traces.filter(|_| installed)
}
