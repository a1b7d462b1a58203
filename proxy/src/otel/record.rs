//! A span as the proxy records it: ids, kind, times and status, and its name and
//! attributes encoded into OTLP as they are given (`super::protobuf`), so that ending
//! it is a copy of bytes already written (`super::batch`). The SDK's span objects (a
//! sampler's result, a `KeyValue` per attribute, a `SpanData` of several hundred bytes
//! queued per span) cost a traced request several microseconds; this costs a fraction
//! of one.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::trace::{SpanId, SpanKind, TraceId};

use warden_shared::keys::put_hex;

use super::content::PendingContent;
use super::fixed::Fixed;
use super::protobuf::{span_attribute, span_name, span_strings, Scalar, StringList};
use crate::state::KeyView;

/// Room for a span's name and attributes from the start: a forwarded request's come to
/// about 600 bytes, so that they are written without the buffer growing.
const FIELDS_CAPACITY: usize = 768;

/// A sampled span, started or finished.
#[derive(Debug)]
pub struct SpanRecord {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The agent's span this one is a child of (always remote: Warden's spans are the
    /// first of their process).
    pub parent: Option<SpanId>,
    /// The `tracestate` the agent sent, as it sent it (parsed and written back).
    pub trace_state: Option<Box<str>>,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    /// The span's name and attributes, its OTLP fields 5 and 9, in the order they were
    /// given (protobuf's fields may come in any order). Written as they are given, a
    /// text is copied once, where a list of attributes encoded at the end copied the
    /// texts twice and freed them one by one: a traced request's instructions
    /// 84,262 -> 82,497 (`instructions.sh LOAD=plain TRACED=1`, 2026-12-06).
    fields: Vec<u8>,
    /// An error status and its description; `None`: unset.
    pub error: Option<Cow<'static, str>>,
    /// What the agent sent (a prompt, a tool call's arguments), made into attributes
    /// (redacted) on the exporting thread.
    pub content: Option<Box<PendingContent>>,
}

impl SpanRecord {
    /// A span of `kind` starting at `start`, without a name, attributes or parent yet.
    pub fn new(
        trace_id: TraceId,
        span_id: SpanId,
        kind: SpanKind,
        start: SystemTime,
    ) -> SpanRecord {
        SpanRecord {
            trace_id,
            span_id,
            parent: None,
            trace_state: None,
            kind,
            start,
            end: start,
            fields: Vec::with_capacity(FIELDS_CAPACITY),
            error: None,
            content: None,
        }
    }

    /// Names the span: `parts` one after another (`chat` ` ` `gpt-4o`). Once a span.
    pub fn name(&mut self, parts: &[&str]) {
        span_name(&mut self.fields, parts);
    }

    #[inline(always)]
    pub fn str(&mut self, key: &str, value: &str) {
        span_attribute(&mut self.fields, key, Scalar::Str(value));
    }

    #[inline(always)]
    pub fn int(&mut self, key: &str, value: i64) {
        span_attribute(&mut self.fields, key, Scalar::Int(value));
    }

    #[inline(always)]
    pub fn float(&mut self, key: &str, value: f64) {
        span_attribute(&mut self.fields, key, Scalar::Float(value));
    }

    #[inline(always)]
    pub fn flag(&mut self, key: &str, value: bool) {
        span_attribute(&mut self.fields, key, Scalar::Bool(value));
    }

    /// A list of strings.
    pub(in crate::otel) fn strs(&mut self, key: &str, values: &StringList) {
        span_strings(&mut self.fields, key, values);
    }

    /// Attributes already encoded (by `span_attribute`).
    pub fn encoded(&mut self, attributes: &[u8]) {
        self.fields.extend_from_slice(attributes);
    }

    /// A fixed attribute: its bytes, encoded at compile time.
    #[inline]
    pub fn fixed(&mut self, fixed: &'static Fixed) {
        self.fields.extend_from_slice(fixed.encoded);
    }

    /// `warden.tenant.id`, `warden.key.id`, `gen_ai.agent.id` and, when the registry
    /// names the agent, `gen_ai.agent.name`: who made the request.
    pub fn caller(&mut self, view: &KeyView) {
        self.str("warden.tenant.id", &view.key.tenant_id);
        self.str("warden.key.id", &view.key.id);
        self.str("gen_ai.agent.id", &view.key.agent_id);
        if let Some(agent) = view.agent.as_ref().filter(|a| !a.name.is_empty()) {
            self.str("gen_ai.agent.name", &agent.name);
        }
    }

    /// The name and attributes, encoded.
    pub fn fields(&self) -> &[u8] {
        &self.fields
    }

    /// Makes the held content, if any, into the span's attributes (on the exporting
    /// thread: the redaction's parse is not the request's to pay).
    pub fn add_content(&mut self) {
        if let Some(content) = self.content.take() {
            content.add_to(self);
        }
    }
}

/// A W3C `traceparent` of one of Warden's spans: its 55 bytes, written on the stack and
/// sent as they are. Formatting the ids through `Display` cost more than the rest of
/// starting the span, and a `String` grown a digit at a time 677 instructions
/// (`instructions.sh LOAD=plain TRACED=1`, 2026-12-02); a `String` copied into a
/// checked `HeaderValue` still cost about 450 (2026-12-06).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Traceparent([u8; 55]);

impl Traceparent {
    pub fn new(trace_id: TraceId, span_id: SpanId, sampled: bool) -> Traceparent {
        let mut text = *b"00-00000000000000000000000000000000-0000000000000000-00";
        put_hex(&mut text[3..35], &trace_id.to_bytes());
        put_hex(&mut text[36..52], &span_id.to_bytes());
        if sampled {
            text[54] = b'1';
        }
        Traceparent(text)
    }

    /// Hex digits and dashes: visible ASCII, a valid header value as it is.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The SDK's form of a record, which tests compare with the reference conversion.
#[cfg(test)]
mod sdk_form {
    use std::borrow::Cow;

    use opentelemetry::trace::{SpanContext, SpanId, Status, TraceFlags, TraceState};
    use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
    use prost::Message;

    use super::SpanRecord;

    impl SpanRecord {
        /// The span's own context, in the SDK's form.
        fn context(&self) -> SpanContext {
            let state = self
                .trace_state
                .as_deref()
                .and_then(|s| s.parse::<TraceState>().ok())
                .unwrap_or_default();
            SpanContext::new(
                self.trace_id,
                self.span_id,
                TraceFlags::SAMPLED,
                false,
                state,
            )
        }

        /// The name and attributes written, read back by the reference decoder.
        fn decoded(&self) -> Span {
            Span::decode(self.fields()).expect("a span's fields decode")
        }

        /// The span's name, read back.
        pub fn decoded_name(&self) -> String {
            self.decoded().name
        }

        /// The span's attributes, read back in the SDK's form.
        pub fn attributes(&self) -> Vec<KeyValue> {
            let value = |value: Option<Any>| match value.expect("a value") {
                Any::StringValue(s) => Value::from(s),
                Any::BoolValue(v) => Value::Bool(v),
                Any::IntValue(v) => Value::I64(v),
                Any::DoubleValue(v) => Value::F64(v),
                Any::ArrayValue(array) => Value::Array(Array::String(
                    array
                        .values
                        .into_iter()
                        .map(|v| match v.value {
                            Some(Any::StringValue(s)) => StringValue::from(s),
                            other => panic!("a list of strings only: {other:?}"),
                        })
                        .collect(),
                )),
                other => panic!("not written by the proxy: {other:?}"),
            };
            self.decoded()
                .attributes
                .into_iter()
                .map(|kv| KeyValue::new(kv.key, value(kv.value.and_then(|v| v.value))))
                .collect()
        }

        /// The value of the attribute `key`, read back.
        pub fn attribute(&self, key: &str) -> Option<Value> {
            self.attributes()
                .into_iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value)
        }

        /// The SDK's form of this span, which tests compare with the reference conversion.
        pub fn to_span_data(&self, scope: &InstrumentationScope) -> SpanData {
            SpanData {
                span_context: self.context(),
                parent_span_id: self.parent.unwrap_or(SpanId::INVALID),
                parent_span_is_remote: self.parent.is_some(),
                span_kind: self.kind.clone(),
                name: Cow::Owned(self.decoded_name()),
                start_time: self.start,
                end_time: self.end,
                attributes: self.attributes(),
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status: match &self.error {
                    Some(description) => Status::error(description.clone()),
                    None => Status::Unset,
                },
                instrumentation_scope: scope.clone(),
            }
        }
    }
}
