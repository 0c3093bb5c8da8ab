//! The W3C trace context a command carries through the outbox (docs/operations.md,
//! "Tracing"): a `traceparent` value (`00-<trace id>-<span id>-<flags>`), an opaque string to
//! the domain and the stores, turned into OpenTelemetry span contexts only here.
//!
//! Everything here is a no-op when no OpenTelemetry layer records the spans (tracing not
//! configured): [`current`] is then `None` and [`set_parent`] changes nothing.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `traceparent` of `span`, when an OpenTelemetry layer records it; `None` otherwise.
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    let span_context = context.span().span_context().clone();
    span_context.is_valid().then(|| format(&span_context))
}

/// The `traceparent` of the current span (see [`traceparent_of`]).
pub fn current() -> Option<String> {
    traceparent_of(&tracing::Span::current())
}

/// `span_context` as a W3C `traceparent` value, version `00`.
pub fn format(span_context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        span_context.trace_id(),
        span_context.span_id(),
        span_context.trace_flags().to_u8()
    )
}

/// Parses a W3C `traceparent` value (trace context level 1: version `00` with exactly four
/// fields, a later version with at least four; lower-case hex; trace and span id not all
/// zeros). `None` when it is not one; the caller then starts a new trace.
pub fn parse(value: &str) -> Option<SpanContext> {
    let fields: Vec<&str> = value.trim().split('-').collect();
    let [version, trace_id, span_id, flags, ..] = fields[..] else {
        return None;
    };
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !hex(version, 2) || version == "ff" || (version == "00" && fields.len() != 4) {
        return None;
    }
    if !hex(trace_id, 32) || !hex(span_id, 16) || !hex(flags, 2) {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let span_context = SpanContext::new(
        TraceId::from_hex(trace_id).ok()?,
        SpanId::from_hex(span_id).ok()?,
        TraceFlags::new(flags & TraceFlags::SAMPLED.to_u8()),
        true,
        TraceState::default(),
    );
    span_context.is_valid().then_some(span_context)
}

/// `value` as a version-`00` `traceparent` when it parses ([`parse`]).
pub fn normalize(value: &str) -> Option<String> {
    parse(value).map(|span_context| format(&span_context))
}

/// Makes the remote span `traceparent` the parent of `span` (call before `span` is first
/// entered). Returns whether it did: not when the value does not parse or no OpenTelemetry
/// layer records `span`.
pub fn set_parent(span: &tracing::Span, traceparent: &str) -> bool {
    let Some(span_context) = parse(traceparent) else {
        return false;
    };
    span.set_parent(opentelemetry::Context::new().with_remote_span_context(span_context))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_round_trips() {
        assert_eq!(normalize(SAMPLE).as_deref(), Some(SAMPLE));
        assert_eq!(normalize(&format!(" {SAMPLE} ")).as_deref(), Some(SAMPLE));
        // A later version may carry more fields; it is stored as version 00.
        assert_eq!(
            normalize("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x").as_deref(),
            Some(SAMPLE)
        );
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn without_an_opentelemetry_layer_there_is_no_current_context() {
        let span = tracing::info_span!("untraced");
        assert!(!set_parent(&span, SAMPLE));
        assert_eq!(span.in_scope(current), None);
    }
}
