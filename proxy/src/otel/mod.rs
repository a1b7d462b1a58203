//! Traces in OpenTelemetry's GenAI conventions (semantic conventions v1.38.0, the GenAI
//! and MCP pages; the attributes are listed in `deploy/README.md`).
//!
//! A forwarded model request is the CLIENT span of its upstream attempt (`chat gpt-4o`),
//! child of the agent's `traceparent` when it sent one, whose context goes to the
//! provider in `traceparent`; a request refused before any attempt is a SERVER span
//! (`POST /v1/chat/completions`); an MCP tool call is an `execute_tool {tool}` span whose
//! context goes to the MCP server in `_meta`. One span a request: the trace's cost is
//! paid once.
//! Warden's own facts (tenant, key, decision, policy, cost, approval) are `warden.`
//! attributes; a refusal ends its span with an error status. Completions are never
//! exported; prompts and tool calls' arguments only when the operator asks for content
//! and the tenant's payload capture is enabled, redacted by its rules (`content`).
//!
//! The request path does not use the SDK's span objects: Warden samples (the same
//! samplers, `sampler`), records a span as a compact [`record::SpanRecord`] whose name
//! and attributes are encoded into OTLP (`protobuf`) as the request path gives them,
//! frames it on the request's thread when it ends, and a thread of its own posts the
//! encoded batches (`batch`, `otlp_http`). The control
//! plane's spans go through the SDK, exported by the same encoder.
//!
//! With tracing off there is no [`Tracer`]: no span, no attribute, no clock read; the
//! agent's `traceparent` and `tracestate` still pass through to the provider unchanged.

mod answer;
mod batch;
mod buffers;
mod content;
pub mod export;
mod fixed;
mod lost;
mod otlp_http;
mod priority;
mod protobuf;
mod record;
mod request;
mod sampler;
mod tool_call;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, TraceContextExt, TraceId, TraceState};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

use batch::SpanQueue;
use record::SpanRecord;
pub use record::Traceparent;

pub use answer::AnswerFacts;
pub use export::{Plane, TraceExport, TracingConfig};
pub use lost::LostSpans;
pub use request::{operation_name, Attempt, RequestTrace, Settled};
pub use sampler::Sampling;
pub use tool_call::ToolCallTrace;

/// The proxy's tracer: present only while tracing is on. It samples, names new spans
/// and queues finished ones, encoded, for the exporting thread.
#[derive(Clone, Debug)]
pub struct Tracer {
    inner: Arc<TracerInner>,
}

#[derive(Debug)]
struct TracerInner {
    queue: SpanQueue,
    sampling: Sampling,
    ids: RandomIdGenerator,
    /// Whether sampled spans carry prompts, where tenants' payload capture allows.
    capture_content: bool,
}

/// A span just begun: its ids, whether it is sampled, the agent's `tracestate` and,
/// when sampled, its record.
struct Begun {
    trace_id: TraceId,
    span_id: SpanId,
    sampled: bool,
    state: Option<String>,
    record: Option<SpanRecord>,
}

impl Begun {
    /// The span's context as its callee is told it.
    fn propagated(&self) -> Propagated {
        Propagated {
            traceparent: Some(Traceparent::new(self.trace_id, self.span_id, self.sampled)),
            tracestate: self.state.clone(),
        }
    }
}

impl Tracer {
    pub(crate) fn new(queue: SpanQueue, sampling: Sampling, capture_content: bool) -> Tracer {
        Tracer {
            inner: Arc::new(TracerInner {
                queue,
                sampling,
                ids: RandomIdGenerator::default(),
                capture_content,
            }),
        }
    }

    /// Whether sampled spans carry prompts and tool arguments (`content`).
    pub fn captures_content(&self) -> bool {
        self.inner.capture_content
    }

    /// A new span of `kind` starting at `start`, child of the agent's `parent` (or the
    /// root of a new trace); recorded when the sampler says so, named and described by
    /// the caller then.
    fn begin(&self, parent: Option<&SpanContext>, kind: SpanKind, start: SystemTime) -> Begun {
        let inner = &self.inner;
        let trace_id = match parent {
            Some(parent) => parent.trace_id(),
            None => inner.ids.new_trace_id(),
        };
        let span_id = inner.ids.new_span_id();
        let sampled = inner.sampling.sampled(parent, trace_id);
        let state = parent
            .map(|p| p.trace_state())
            .filter(|state| **state != TraceState::NONE)
            .map(TraceState::header)
            .filter(|header| !header.is_empty());
        let record = sampled.then(|| {
            let mut record = SpanRecord::new(trace_id, span_id, kind, start);
            record.parent = parent.map(SpanContext::span_id);
            record.trace_state = state.as_deref().map(Box::from);
            record
        });
        Begun {
            trace_id,
            span_id,
            sampled,
            state,
            record,
        }
    }

    /// Ends `record` now and queues it for export.
    fn finish(&self, mut record: SpanRecord) {
        record.end = SystemTime::now();
        self.inner.queue.push(record);
    }

    /// Sends the spans still queued, waiting at most `timeout` (blocking: at exit).
    pub fn flush(&self, timeout: Duration) -> bool {
        self.inner.queue.flush(timeout)
    }

    /// Spans dropped for a full queue, and spans whose export failed.
    pub fn lost(&self) -> (u64, u64) {
        self.inner.queue.lost()
    }
}

/// The W3C trace context's headers, as names made once: looking a `&str` up parses it
/// into a name each time (starting a request's trace 517 -> 302 instructions,
/// `instructions.sh LOAD=plain TRACED=1`, 2026-12-06).
pub static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
pub static TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// The agent's span a request's headers name, when they name a valid one. Whether
/// there is a `traceparent` is seen by comparing the names of the request's few headers:
/// a map's lookup hashes the name (SipHash), about 170 instructions a request.
fn parent_in_headers(headers: &http::HeaderMap) -> Option<SpanContext> {
    headers
        .keys()
        .any(|name| *name == TRACEPARENT)
        .then(|| parent_span(&HeaderExtractor(headers)))
        .flatten()
}

/// The agent's span a carrier (headers, an MCP `_meta`) names, when it names a valid
/// one. Most requests carry none: nothing is parsed for them.
fn parent_span(carrier: &dyn Extractor) -> Option<SpanContext> {
    carrier.get("traceparent")?;
    let context = TraceContextPropagator::new().extract(carrier);
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// `traceparent` and `tracestate` of a span, as a callee is told them.
#[derive(Debug, Default)]
pub struct Propagated {
    pub traceparent: Option<Traceparent>,
    pub tracestate: Option<String>,
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId};
    use opentelemetry::Context;
    use opentelemetry_sdk::propagation::TraceContextPropagator;

    use super::*;

    #[test]
    fn the_context_passed_on_is_what_the_reference_propagator_writes() {
        for sampled in [true, false] {
            let trace_id = TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c);
            let span_id = SpanId::from(0x00f0_67aa_0ba9_02b7);
            let flags = if sampled {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            };
            let span = SpanContext::new(trace_id, span_id, flags, false, TraceState::NONE);
            let mut reference = HashMap::new();
            TraceContextPropagator::new().inject_context(
                &Context::new().with_remote_span_context(span),
                &mut reference,
            );
            assert_eq!(
                Some(Traceparent::new(trace_id, span_id, sampled).as_str()),
                reference.get("traceparent").map(String::as_str)
            );
        }
    }

    #[test]
    fn a_child_continues_the_agents_trace_and_state() {
        let queue = test_queue();
        let tracer = Tracer::new(queue, Sampling::default(), false);
        let headers: HashMap<String, String> = [
            (
                "traceparent".to_owned(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_owned(),
            ),
            ("tracestate".to_owned(), "vendor=a,other=b".to_owned()),
        ]
        .into();
        let parent = parent_span(&headers).expect("a valid parent");
        let begun = tracer.begin(Some(&parent), SpanKind::Client, SystemTime::now());
        let propagated = begun.propagated();
        let record = begun.record.expect("the agent sampled it");
        assert_eq!(record.trace_id, parent.trace_id());
        assert_eq!(record.parent, Some(parent.span_id()));
        assert_eq!(record.trace_state.as_deref(), Some("vendor=a,other=b"));
        let traceparent = propagated.traceparent.unwrap();
        let traceparent = traceparent.as_str();
        assert!(traceparent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"));
        assert!(
            !traceparent.contains("b7ad6b7169203331"),
            "a span of its own"
        );
        assert_eq!(propagated.tracestate.as_deref(), Some("vendor=a,other=b"));
        let unsampled: HashMap<String, String> = [(
            "traceparent".to_owned(),
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00".to_owned(),
        )]
        .into();
        let parent = parent_span(&unsampled).unwrap();
        let begun = tracer.begin(Some(&parent), SpanKind::Client, SystemTime::now());
        assert!(begun.record.is_none(), "the agent's decision is followed");
        assert!(begun
            .propagated()
            .traceparent
            .unwrap()
            .as_str()
            .ends_with("-00"));
        let invalid: HashMap<String, String> =
            [("traceparent".to_owned(), "00-zz-yy-01".to_owned())].into();
        assert!(parent_span(&invalid).is_none());
        assert!(parent_span(&HashMap::<String, String>::new()).is_none());
    }

    /// A queue whose spans go nowhere.
    fn test_queue() -> SpanQueue {
        struct Nowhere;
        impl batch::Sink for Nowhere {
            fn export(&mut self, _: &[&[u8]], _: usize) -> Result<(), String> {
                Ok(())
            }
        }
        let settings = batch::BatchSettings {
            max_queue_size: 16,
            scheduled_delay: Duration::from_secs(60),
            max_export_batch_size: 16,
        };
        SpanQueue::start(settings, Nowhere, "test-spans").unwrap()
    }
}
