//! The proxy's own spans (`SpanRecord`) into OTLP: each span as a `ScopeSpans`' field
//! on the thread that ended it, and a batch of them framed into a request on the
//! exporting thread.

use opentelemetry::trace::TraceFlags;
use opentelemetry::InstrumentationScope;

use super::wire::{
    bytes, delimited_len, fixed32, fixed64, key, string, string_len, uint, varint, LEN,
};
use super::{flags, instrumentation_scope, nanos, span_kind, EncodedResource};
#[cfg(test)]
use super::{span_attribute, Scalar};
use crate::otel::record::SpanRecord;

/// A proxy's span as it goes into a request: field 2 (`spans`) of a `ScopeSpans`. Its
/// ids, times and status are written into `scratch` and its length counted, so that
/// its name and attributes, encoded as they were given, are copied once, behind them.
pub fn encode_span_field(out: &mut Vec<u8>, scratch: &mut Vec<u8>, record: &SpanRecord) {
    scratch.clear();
    span_head(scratch, record);
    let head = scratch.len();
    span_tail(scratch, record);
    let fields = record.fields();
    let len = scratch.len() + fields.len();
    out.reserve(1 + 10 + len);
    key(out, 2, LEN);
    varint(out, len as u64);
    out.extend_from_slice(&scratch[..head]);
    out.extend_from_slice(fields);
    out.extend_from_slice(&scratch[head..]);
}

/// A span's name (field 5), `parts` one after another, appended to its fields.
pub(in crate::otel) fn span_name(b: &mut Vec<u8>, parts: &[&str]) {
    key(b, 5, LEN);
    varint(b, parts.iter().map(|part| part.len()).sum::<usize>() as u64);
    for part in parts {
        b.extend_from_slice(part.as_bytes());
    }
}

/// An `ExportTraceServiceRequest` of spans already encoded by [`encode_span_field`]
/// (the `parts`, each spans one after another), all of `scope`, under `resource`, into
/// `out` (cleared). The lengths are counted first, so that each part is copied once and
/// nothing is moved after it is written.
pub fn frame_spans(
    out: &mut Vec<u8>,
    resource: &EncodedResource,
    scope: &InstrumentationScope,
    parts: &[&[u8]],
) {
    out.clear();
    let spans_len: usize = parts.iter().map(|part| part.len()).sum();
    if spans_len == 0 {
        return;
    }
    let mut scope_message = Vec::new();
    instrumentation_scope(&mut scope_message, scope);
    let scope_schema = scope.schema_url().unwrap_or_default();
    let scope_spans = delimited_len(scope_message.len()) + spans_len + string_len(scope_schema);
    let resource_spans = delimited_len(resource.resource.len())
        + delimited_len(scope_spans)
        + string_len(&resource.schema_url);
    out.reserve(delimited_len(resource_spans));
    // ResourceSpans { resource, scope_spans: [ScopeSpans { scope, spans, schema_url }],
    // schema_url }
    key(out, 1, LEN);
    varint(out, resource_spans as u64);
    bytes(out, 1, &resource.resource);
    key(out, 2, LEN);
    varint(out, scope_spans as u64);
    bytes(out, 1, &scope_message);
    for part in parts {
        out.extend_from_slice(part);
    }
    string(out, 3, scope_schema);
    string(out, 3, &resource.schema_url);
}

/// An `ExportTraceServiceRequest` of the proxy's `records`, all of `scope`, into `out`
/// (cleared): what the span queue sends, in one call.
#[cfg(test)]
pub fn encode_records(
    out: &mut Vec<u8>,
    resource: &EncodedResource,
    scope: &InstrumentationScope,
    records: &[SpanRecord],
) {
    let (mut spans, mut scratch) = (Vec::new(), Vec::new());
    for record in records {
        encode_span_field(&mut spans, &mut scratch, record);
    }
    frame_spans(out, resource, scope, &[&spans]);
}

/// One attribute as a span's field 9 (the fixed attributes' tests compare with it).
#[cfg(test)]
pub fn encode_attribute(name: &str, value: Scalar<'_>) -> Vec<u8> {
    let mut b = Vec::new();
    span_attribute(&mut b, name, value);
    b
}

/// A span's fields before its name and attributes: ids, trace state, parent.
fn span_head(b: &mut Vec<u8>, record: &SpanRecord) {
    bytes(b, 1, &record.trace_id.to_bytes());
    bytes(b, 2, &record.span_id.to_bytes());
    string(b, 3, record.trace_state.as_deref().unwrap_or_default());
    if let Some(parent) = record.parent {
        bytes(b, 4, &parent.to_bytes());
    }
}

/// A span's fields after its name and attributes: kind, times, status, flags.
fn span_tail(b: &mut Vec<u8>, record: &SpanRecord) {
    uint(b, 6, span_kind(&record.kind));
    fixed64(b, 7, nanos(record.start));
    fixed64(b, 8, nanos(record.end));
    // Status: always present, as the reference writes it; an error's code is 2 (a
    // varint field of one byte).
    key(b, 15, LEN);
    match &record.error {
        None => varint(b, 0),
        Some(description) => {
            varint(b, (string_len(description) + 2) as u64);
            string(b, 2, description);
            uint(b, 3, 2);
        }
    }
    // A record is sampled, and its parent, when it has one, is the agent's span.
    fixed32(b, 16, flags(TraceFlags::SAMPLED, record.parent.is_some()));
}
