//! The `traceparent` of the current span (docs/operations.md, "Tracing"): a W3C trace context
//! value, `None` when no OpenTelemetry layer records the spans (tracing not configured). The
//! engine's `tenantry_engine::trace_context` has the parsing side.

use opentelemetry::trace::TraceContextExt;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The current span's W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), if it has one.
pub(crate) fn current() -> Option<String> {
    let context = tracing::Span::current().context();
    let span = context.span();
    let span_context = span.span_context();
    span_context.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            span_context.trace_id(),
            span_context.span_id(),
            span_context.trace_flags().to_u8()
        )
    })
}
