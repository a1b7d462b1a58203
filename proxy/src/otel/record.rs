//! A span as the proxy records it: ids, name, kind, times, status and attributes whose
//! keys are static and whose values are mostly static or shared, so that the request
//! path allocates little and encodes it as it is when it ends (`super::protobuf`,
//! `super::batch`). The SDK's span objects (a sampler's result, a `KeyValue` per
//! attribute, a `SpanData` of several hundred bytes queued per span) cost a traced
//! request several microseconds; this costs a fraction of one.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::trace::{SpanId, SpanKind, TraceId};

use warden_shared::keys::put_hex;
use warden_shared::snapshot::{AgentState, ProxyKeyState};

use super::content::PendingContent;
use super::fixed::Fixed;

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
    /// `Static`, `Text` or `Part`.
    pub name: Field,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<(&'static str, Field)>,
    /// The texts of the name and attributes that the request path copies (the model,
    /// the provider's address, the answer's id and model), one after another, each a
    /// [`Field::Part`]: one allocation for them all.
    pub texts: String,
    /// Tenant, key and agent, read from the key's state when the span is encoded.
    pub caller: Option<Caller>,
    /// An error status and its description; `None`: unset.
    pub error: Option<Cow<'static, str>>,
    /// What the agent sent (a prompt, a tool call's arguments), made into attributes
    /// (redacted) on the exporting thread.
    pub content: Option<Box<PendingContent>>,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Field {
    Static(&'static str),
    Text(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    Texts(Vec<String>),
    /// A text in the record's `texts`, from its `start` byte to its `end`.
    Part {
        start: u32,
        end: u32,
    },
    /// A fixed attribute's value, encoded at compile time (its key is the fixed one).
    Fixed(&'static Fixed),
}

/// An attribute's value as encoders read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FieldRef<'a> {
    Str(&'a str),
    Int(i64),
    Float(f64),
    Bool(bool),
    Strs(&'a [String]),
    /// A fixed attribute: its value, and its encoding as a span's attribute.
    Fixed(&'static Fixed),
}

impl Field {
    /// The value as encoders read it, `texts` being its record's.
    pub fn as_ref<'a>(&'a self, texts: &'a str) -> FieldRef<'a> {
        match self {
            Field::Static(s) => FieldRef::Str(s),
            Field::Text(s) => FieldRef::Str(s),
            Field::Part { start, end } => FieldRef::Str(
                texts
                    .get(*start as usize..*end as usize)
                    .unwrap_or_default(),
            ),
            Field::Int(v) => FieldRef::Int(*v),
            Field::Float(v) => FieldRef::Float(*v),
            Field::Bool(v) => FieldRef::Bool(*v),
            Field::Texts(v) => FieldRef::Strs(v),
            Field::Fixed(fixed) => FieldRef::Fixed(fixed),
        }
    }
}

/// Who made a request: its key's state and its agent's, shared with the enforcement
/// state (two reference counts, not four strings).
#[derive(Debug, Clone)]
pub struct Caller {
    pub key: Arc<ProxyKeyState>,
    pub agent: Option<Arc<AgentState>>,
}

impl Caller {
    /// `warden.tenant.id`, `warden.key.id`, `gen_ai.agent.id` and, when the registry
    /// names the agent, `gen_ai.agent.name`.
    fn for_each(&self, mut f: impl FnMut(&'static str, FieldRef<'_>)) {
        f("warden.tenant.id", FieldRef::Str(&self.key.tenant_id));
        f("warden.key.id", FieldRef::Str(&self.key.id));
        f("gen_ai.agent.id", FieldRef::Str(&self.key.agent_id));
        if let Some(agent) = self.agent.as_ref().filter(|a| !a.name.is_empty()) {
            f("gen_ai.agent.name", FieldRef::Str(&agent.name));
        }
    }
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
            name: Field::Static(""),
            kind,
            start,
            end: start,
            attributes: Vec::new(),
            texts: String::new(),
            caller: None,
            error: None,
            content: None,
        }
    }

    pub fn push(&mut self, key: &'static str, value: Field) {
        self.attributes.push((key, value));
    }

    /// A fixed attribute: its key and value, encoded once.
    pub fn push_fixed(&mut self, fixed: &'static Fixed) {
        self.attributes.push((fixed.key, Field::Fixed(fixed)));
    }

    /// `text` appended to the record's texts, as a field.
    pub fn part(&mut self, text: &str) -> Field {
        let start = self.texts.len();
        self.texts.push_str(text);
        self.part_since(start)
    }

    /// The record's texts from byte `start` to their end, as a field.
    pub fn part_since(&self, start: usize) -> Field {
        // Past 4 GiB of texts (never: a span's are a few hundred bytes) a part is empty.
        match (u32::try_from(start), u32::try_from(self.texts.len())) {
            (Ok(start), Ok(end)) => Field::Part { start, end },
            _ => Field::Static(""),
        }
    }

    /// The span's name.
    pub fn name(&self) -> &str {
        match self.name.as_ref(&self.texts) {
            FieldRef::Str(name) => name,
            _ => "",
        }
    }

    /// Makes the held content, if any, into the span's attributes (on the exporting
    /// thread: the redaction's parse is not the request's to pay).
    pub fn add_content(&mut self) {
        if let Some(content) = self.content.take() {
            content.add_to(self);
        }
    }

    /// Every attribute, the caller's last.
    pub fn for_each_attribute(&self, mut f: impl FnMut(&str, FieldRef<'_>)) {
        for (key, value) in &self.attributes {
            f(key, value.as_ref(&self.texts));
        }
        if let Some(caller) = &self.caller {
            caller.for_each(&mut f);
        }
    }
}

/// A W3C `traceparent`, its 55 bytes written into a buffer on the stack and copied
/// once: formatting the ids through `Display` cost more than the rest of starting the
/// span, and a `String` grown a digit at a time 677 instructions
/// (`instructions.sh LOAD=plain TRACED=1`, 2026-12-02).
pub fn traceparent(trace_id: TraceId, span_id: SpanId, sampled: bool) -> String {
    let mut text = *b"00-00000000000000000000000000000000-0000000000000000-00";
    put_hex(&mut text[3..35], &trace_id.to_bytes());
    put_hex(&mut text[36..52], &span_id.to_bytes());
    if sampled {
        text[54] = b'1';
    }
    // Hex digits and dashes: ASCII, which the check passes a word at a time
    // (`from_utf8_lossy`'s walk cost 444 instructions).
    String::from_utf8(text.to_vec()).unwrap_or_default()
}

/// The SDK's form of a record, which tests compare with the reference conversion.
#[cfg(test)]
mod sdk_form {
    use std::borrow::Cow;

    use opentelemetry::trace::{SpanContext, SpanId, Status, TraceFlags, TraceState};
    use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

    use super::super::fixed::FixedValue;
    use super::{FieldRef, SpanRecord};

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

        /// The SDK's form of this span, which tests compare with the reference conversion.
        pub fn to_span_data(&self, scope: &InstrumentationScope) -> SpanData {
            let mut attributes = Vec::with_capacity(self.attributes.len() + 4);
            self.for_each_attribute(|key, value| {
                let value = match value {
                    FieldRef::Str(s) => Value::from(s.to_owned()),
                    FieldRef::Int(v) => Value::I64(v),
                    FieldRef::Float(v) => Value::F64(v),
                    FieldRef::Bool(v) => Value::Bool(v),
                    FieldRef::Strs(v) => Value::Array(Array::String(
                        v.iter().cloned().map(StringValue::from).collect(),
                    )),
                    FieldRef::Fixed(fixed) => match fixed.value {
                        FixedValue::Str(text) => Value::from(text),
                        FixedValue::Bool(flag) => Value::Bool(flag),
                    },
                };
                attributes.push(KeyValue::new(key.to_owned(), value));
            });
            SpanData {
                span_context: self.context(),
                parent_span_id: self.parent.unwrap_or(SpanId::INVALID),
                parent_span_is_remote: self.parent.is_some(),
                span_kind: self.kind.clone(),
                name: Cow::Owned(self.name().to_owned()),
                start_time: self.start,
                end_time: self.end,
                attributes,
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
