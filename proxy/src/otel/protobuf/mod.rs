//! OTLP's protobuf encoding of finished spans (`ExportTraceServiceRequest`,
//! opentelemetry-proto v1), written straight from the proxy's records (`SpanRecord`) and
//! the SDK's `SpanData` (the control plane's spans) into one buffer.
//!
//! The reference exporter first converts every span into the generated message types (a
//! `String` for each attribute's key and value, a `Vec` for each id) and then encodes
//! those: at a proxy's rate that conversion and its frees were most of the exporting
//! thread's time, a core's twelfth. Here each field is written once, borrowed. An
//! attribute's length is counted before it is written; a span is written apart and
//! copied behind its length; the few other nested messages are written in place and
//! their length put in front of them afterwards (a move of the message's own bytes).
//!
//! The output decodes to exactly what the reference conversion builds (a test compares
//! the two on spans of every shape). Here the resource and the SDK's spans in
//! requests; the proxy's records in `records`; attributes in `attributes`; the wire
//! format's fields in `wire`.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::SpanData;
use opentelemetry_sdk::Resource;

mod attributes;
mod records;
mod wire;

use attributes::{attribute_field, key_value};
pub(super) use attributes::{span_attribute, span_strings, Scalar, StringList};
pub(super) use records::span_name;
#[cfg(test)]
pub use records::{encode_attribute, encode_records};
pub use records::{encode_span_field, frame_spans};
use wire::{bytes, fixed32, fixed64, message, string, uint};

/// `SpanFlags`: the span says whether its parent is remote, and whether it is.
const CONTEXT_HAS_IS_REMOTE: u32 = 0x100;
const CONTEXT_IS_REMOTE: u32 = 0x200;

/// A resource's part of every request, encoded once: its attributes and schema URL.
#[derive(Debug, Clone, Default)]
pub struct EncodedResource {
    /// The `Resource` message's body.
    resource: Vec<u8>,
    schema_url: String,
}

impl EncodedResource {
    pub fn new(resource: &Resource) -> EncodedResource {
        let mut body = Vec::new();
        for (key, value) in resource.iter() {
            message(&mut body, 1, |b| key_value(b, key.as_str(), value));
        }
        EncodedResource {
            resource: body,
            schema_url: resource.schema_url().unwrap_or_default().to_owned(),
        }
    }
}

/// An `ExportTraceServiceRequest` of `spans` under `resource`, its spans grouped by
/// instrumentation scope in the order the scopes first appear, into `out` (cleared).
pub fn encode_request(out: &mut Vec<u8>, resource: &EncodedResource, spans: &[SpanData]) {
    out.clear();
    if spans.is_empty() {
        return;
    }
    let mut scopes: Vec<&InstrumentationScope> = Vec::new();
    for span in spans {
        if !scopes.contains(&&span.instrumentation_scope) {
            scopes.push(&span.instrumentation_scope);
        }
    }
    let mut one = Vec::with_capacity(1024);
    // ResourceSpans
    message(out, 1, |b| {
        message(b, 1, |b| b.extend_from_slice(&resource.resource));
        for scope in &scopes {
            // ScopeSpans
            message(b, 2, |b| {
                message(b, 1, |b| instrumentation_scope(b, scope));
                for span in spans.iter().filter(|s| &&s.instrumentation_scope == scope) {
                    // Written apart and copied behind its length: one copy of its
                    // bytes, where a move into place would shift the rest of the batch.
                    one.clear();
                    encode_span(&mut one, span);
                    bytes(b, 2, &one);
                }
                string(b, 3, scope.schema_url().unwrap_or_default());
            });
        }
        string(b, 3, &resource.schema_url);
    });
}

fn instrumentation_scope(b: &mut Vec<u8>, scope: &InstrumentationScope) {
    string(b, 1, scope.name());
    string(b, 2, scope.version().unwrap_or_default());
    for attribute in scope.attributes() {
        attribute_field(b, 3, attribute);
    }
}

fn encode_span(b: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    bytes(b, 1, &context.trace_id().to_bytes());
    bytes(b, 2, &context.span_id().to_bytes());
    trace_state(b, 3, context);
    if span.parent_span_id != SpanId::INVALID {
        bytes(b, 4, &span.parent_span_id.to_bytes());
    }
    string(b, 5, &span.name);
    uint(b, 6, span_kind(&span.span_kind));
    fixed64(b, 7, nanos(span.start_time));
    fixed64(b, 8, nanos(span.end_time));
    for attribute in &span.attributes {
        attribute_field(b, 9, attribute);
    }
    uint(b, 10, span.dropped_attributes_count.into());
    for event in span.events.iter() {
        message(b, 11, |b| {
            fixed64(b, 1, nanos(event.timestamp));
            string(b, 2, &event.name);
            for attribute in &event.attributes {
                attribute_field(b, 3, attribute);
            }
            uint(b, 4, event.dropped_attributes_count.into());
        });
    }
    uint(b, 12, span.events.dropped_count.into());
    for link in span.links.iter() {
        message(b, 13, |b| {
            let context = &link.span_context;
            bytes(b, 1, &context.trace_id().to_bytes());
            bytes(b, 2, &context.span_id().to_bytes());
            trace_state(b, 3, context);
            for attribute in &link.attributes {
                attribute_field(b, 4, attribute);
            }
            uint(b, 5, link.dropped_attributes_count.into());
            fixed32(b, 6, flags(context.trace_flags(), context.is_remote()));
        });
    }
    uint(b, 14, span.links.dropped_count.into());
    // Status: always present, as the reference writes it.
    message(b, 15, |b| {
        if let Status::Error { description } = &span.status {
            string(b, 2, description);
        }
        uint(
            b,
            3,
            match span.status {
                Status::Unset => 0,
                Status::Ok => 1,
                Status::Error { .. } => 2,
            },
        );
    });
    fixed32(
        b,
        16,
        flags(context.trace_flags(), span.parent_span_is_remote),
    );
}

/// A span's or a link's `flags` field: its W3C trace flags, and whether the span (or its
/// parent) is remote.
fn flags(trace_flags: TraceFlags, remote: bool) -> u32 {
    let mut flags = u32::from(trace_flags.to_u8()) | CONTEXT_HAS_IS_REMOTE;
    if remote {
        flags |= CONTEXT_IS_REMOTE;
    }
    flags
}

fn trace_state(b: &mut Vec<u8>, field: u32, context: &SpanContext) {
    let state = context.trace_state();
    if *state != TraceState::NONE {
        string(b, field, &state.header());
    }
}

fn span_kind(kind: &SpanKind) -> u64 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::Duration;

    use opentelemetry::trace::{
        Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
    use opentelemetry_sdk::Resource;
    use prost::Message;

    use super::super::fixed::{stream, FORWARDED};
    use super::super::record::SpanRecord;
    use super::{encode_records, encode_request, EncodedResource};

    fn context(trace: u128, span: u64, remote: bool, state: &str) -> SpanContext {
        SpanContext::new(
            TraceId::from(trace),
            SpanId::from(span),
            TraceFlags::SAMPLED,
            remote,
            state.parse::<TraceState>().unwrap(),
        )
    }

    fn span(scope: &InstrumentationScope, n: u64) -> SpanData {
        let start = std::time::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789 + n);
        SpanData {
            span_context: context(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c, n, false, ""),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Owned(format!("chat gpt-4o {n}")),
            start_time: start,
            end_time: start + Duration::from_millis(250),
            attributes: vec![
                KeyValue::new("gen_ai.operation.name", "chat"),
                KeyValue::new("gen_ai.request.model", "gpt-4o".to_owned()),
                KeyValue::new("gen_ai.request.stream", true),
                KeyValue::new("gen_ai.usage.input_tokens", 1_234_567_i64),
                KeyValue::new("warden.budget.delta", -42_i64),
                KeyValue::new("warden.cost_usd", 0.000_125),
                KeyValue::new("warden.empty", ""),
                KeyValue::new(
                    "gen_ai.response.finish_reasons",
                    Value::Array(Array::String(vec![
                        StringValue::from("stop"),
                        StringValue::from(""),
                    ])),
                ),
                KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
                KeyValue::new("ints", Value::Array(Array::I64(vec![0, -1, i64::MAX]))),
                KeyValue::new("floats", Value::Array(Array::F64(vec![0.0, -1.5]))),
                KeyValue::new("zero", 0_i64),
                KeyValue::new("false", false),
            ],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: scope.clone(),
        }
    }

    /// What the reference conversion builds, and what Warden's bytes decode to.
    fn both(
        resource: &Resource,
        spans: Vec<SpanData>,
    ) -> (ExportTraceServiceRequest, ExportTraceServiceRequest) {
        let mut bytes = Vec::new();
        encode_request(&mut bytes, &EncodedResource::new(resource), &spans);
        let ours = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("decodes");
        let reference = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(resource),
            ),
        };
        (ours, reference)
    }

    #[test]
    fn spans_of_every_shape_decode_as_the_reference_converts_them() {
        let resource = Resource::builder()
            .with_service_name("warden-proxy")
            .with_attribute(KeyValue::new("service.version", "1.2.3"))
            .with_schema_url([], "https://opentelemetry.io/schemas/1.38.0")
            .build();
        let proxy = InstrumentationScope::builder("warden-proxy")
            .with_version("1.2.3")
            .build();
        let other = InstrumentationScope::builder("warden-control-plane")
            .with_schema_url("https://example.com/scope")
            .with_attributes([KeyValue::new("scope.attribute", 7_i64)])
            .build();
        let plain = span(&proxy, 1);
        let mut refused = span(&other, 2);
        refused.span_kind = SpanKind::Server;
        refused.status = Status::error("blocked_agent");
        refused.parent_span_id = SpanId::from(0xb7ad_6b71_6920_3331);
        refused.parent_span_is_remote = true;
        refused.span_context = context(7, 2, false, "vendor=value,other=x");
        refused.dropped_attributes_count = 3;
        let mut eventful = span(&proxy, 3);
        eventful.status = Status::Ok;
        eventful.span_kind = SpanKind::Internal;
        eventful.events = SpanEvents::default();
        eventful.events.events.push(Event::new(
            "retry",
            std::time::UNIX_EPOCH + Duration::from_secs(1),
            vec![KeyValue::new("attempt", 2_i64)],
            1,
        ));
        eventful.events.dropped_count = 4;
        eventful.links.links.push(Link::new(
            context(9, 9, true, "k=v"),
            vec![KeyValue::new("link.kind", "approval")],
            2,
        ));
        eventful.links.dropped_count = 5;
        let mut long_name = span(&proxy, 4);
        long_name
            .attributes
            .push(KeyValue::new("a.long.value", "v".repeat(300)));
        long_name
            .attributes
            .push(KeyValue::new("k".repeat(200), i64::MIN));
        // Lengths past one varint byte, and 0 for the timestamps.
        long_name.name = Cow::Owned("n".repeat(70_000));
        long_name.start_time = std::time::UNIX_EPOCH;
        long_name.span_kind = SpanKind::Producer;
        let mut consumer = span(&other, 5);
        consumer.span_kind = SpanKind::Consumer;
        let (ours, reference) = both(
            &resource,
            vec![plain, refused, eventful, long_name, consumer],
        );
        assert_eq!(
            ours.resource_spans[0].scope_spans.len(),
            2,
            "one group per scope"
        );
        assert_eq!(ours, reference);
    }

    /// `value` written into `record` as the request path writes an attribute of its
    /// kind.
    fn write(record: &mut SpanRecord, attribute: &KeyValue) {
        let key = attribute.key.as_str();
        match &attribute.value {
            Value::String(s) => record.str(key, s.as_str()),
            Value::I64(v) => record.int(key, *v),
            Value::F64(v) => record.float(key, *v),
            Value::Bool(v) => record.flag(key, *v),
            Value::Array(Array::String(values)) => {
                let mut list = super::StringList::default();
                values.iter().for_each(|v| list.push(v.as_str()));
                record.strs(key, &list)
            }
            other => panic!("the proxy writes no {other:?}"),
        }
    }

    /// A record of each shape the proxy makes (a forwarded attempt under an agent's span
    /// with its state, a refusal at the root, a tool call without attributes), each
    /// with the name and attributes it was given, in the SDK's form.
    fn records() -> Vec<(SpanRecord, String, Vec<KeyValue>)> {
        let start = std::time::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        let mut forwarded = SpanRecord::new(
            TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c),
            SpanId::from(0x1234),
            SpanKind::Client,
            start,
        );
        forwarded.parent = Some(SpanId::from(0x00f0_67aa_0ba9_02b7));
        forwarded.trace_state = Some("agent=1,vendor=x".into());
        forwarded.end = start + Duration::from_millis(250);
        forwarded.name(&["chat", " ", "gpt-4o"]);
        // Encoded at compile time.
        forwarded.fixed(FORWARDED);
        forwarded.fixed(stream(false));
        let mut attributes = vec![
            KeyValue::new("warden.decision", "forwarded"),
            KeyValue::new("gen_ai.request.stream", false),
        ];
        let given = [
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.request.model", "gpt-4o"),
            KeyValue::new("server.address", "api.openai.com"),
            KeyValue::new("gen_ai.request.stream", true),
            KeyValue::new("server.port", 443_i64),
            KeyValue::new("warden.budget.delta", -42_i64),
            KeyValue::new("warden.cost_usd", 0.000_125),
            KeyValue::new("warden.empty", ""),
            KeyValue::new(
                "gen_ai.response.finish_reasons",
                Value::Array(Array::String(vec![
                    StringValue::from("stop"),
                    StringValue::from(""),
                ])),
            ),
            KeyValue::new("a.long.value", "v".repeat(300)),
            // A `KeyValue` of 127 bytes (every length one byte) and of 128.
            KeyValue::new("a.edge", "e".repeat(115)),
            KeyValue::new("a.edge", "e".repeat(116)),
            KeyValue::new("k".repeat(200), i64::MIN),
            KeyValue::new("gen_ai.agent.name", "support-bot"),
        ];
        for attribute in &given {
            write(&mut forwarded, attribute);
        }
        attributes.extend(given);
        let mut refused = SpanRecord::new(
            TraceId::from(7),
            SpanId::from(8),
            SpanKind::Server,
            std::time::UNIX_EPOCH,
        );
        refused.end = start;
        // The name given after attributes: fields may come in any order.
        let refusal = vec![
            KeyValue::new("warden.decision", "blocked_agent"),
            KeyValue::new("warden.policy.id", 0_i64),
        ];
        for attribute in &refusal {
            write(&mut refused, attribute);
        }
        refused.name(&["POST /v1/chat/completions"]);
        refused.error = Some(Cow::Borrowed("blocked_agent"));
        let mut tool_call = SpanRecord::new(
            TraceId::from(9),
            SpanId::from(10),
            SpanKind::Internal,
            start,
        );
        tool_call.parent = Some(SpanId::from(11));
        let long_name = "n".repeat(70_000);
        tool_call.name(&["execute_tool ", &long_name]);
        tool_call.error = Some(Cow::Borrowed(""));
        vec![
            (forwarded, "chat gpt-4o".to_owned(), attributes),
            (refused, "POST /v1/chat/completions".to_owned(), refusal),
            (tool_call, format!("execute_tool {long_name}"), Vec::new()),
        ]
    }

    #[test]
    fn records_decode_as_the_reference_converts_their_sdk_form() {
        let resource = Resource::builder()
            .with_service_name("warden-proxy")
            .with_schema_url([], "https://opentelemetry.io/schemas/1.38.0")
            .build();
        let scope = InstrumentationScope::builder("warden-proxy")
            .with_version("1.2.3")
            .build();
        let (records, given): (Vec<SpanRecord>, Vec<(String, Vec<KeyValue>)>) = records()
            .into_iter()
            .map(|(record, name, attributes)| (record, (name, attributes)))
            .unzip();
        let mut bytes = Vec::new();
        encode_records(
            &mut bytes,
            &EncodedResource::new(&resource),
            &scope,
            &records,
        );
        let ours = ExportTraceServiceRequest::decode(bytes.as_slice()).expect("decodes");
        // The reference's form of what each record was given (not read back from it).
        let spans = records
            .iter()
            .zip(given)
            .map(|(record, (name, attributes))| SpanData {
                name: Cow::Owned(name),
                attributes,
                ..record.to_span_data(&scope)
            })
            .collect();
        let reference = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(&resource),
            ),
        };
        assert_eq!(ours, reference);
        encode_records(&mut bytes, &EncodedResource::new(&resource), &scope, &[]);
        assert!(bytes.is_empty(), "an empty request");
    }

    #[test]
    fn a_resource_without_attributes_and_no_spans() {
        let resource = Resource::builder_empty().build();
        let scope = InstrumentationScope::builder("s").build();
        let (ours, reference) = both(&resource, vec![span(&scope, 1)]);
        assert_eq!(ours, reference);
        let mut bytes = vec![1, 2, 3];
        encode_request(&mut bytes, &EncodedResource::new(&resource), &[]);
        assert!(bytes.is_empty(), "an empty request");
    }
}
