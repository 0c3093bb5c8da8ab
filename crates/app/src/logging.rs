//! Structured logs via `tracing`: human-readable lines by default, JSON on request.
//!
//! Spans carry `operation_id` and `tenant` (the lifecycle dispatcher's span and the admin
//! API's request span), so every line inside them is attributable.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::LogFormat;

/// Installs the global subscriber writing to standard error. `filter` is used unless
/// `RUST_LOG` is set. A second call (tests) leaves the first subscriber in place.
pub fn init(format: LogFormat, filter: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_span_events(FmtSpan::NONE);
    // A subscriber may already be installed (several services in one test process).
    let _ = match format {
        LogFormat::Human => builder.with_target(false).try_init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}
