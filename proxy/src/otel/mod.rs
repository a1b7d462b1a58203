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
//! attributes; a refusal ends its span with an error status. Prompts and completions are
//! never exported.
//!
//! With tracing off there is no [`Tracer`]: no span, no attribute, no clock read; the
//! agent's `traceparent` and `tracestate` still pass through to the provider unchanged.

mod answer;
pub mod export;
mod otlp_http;
mod protobuf;
mod request;
mod tool_call;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceFlags, TracerProvider as _};
use opentelemetry::KeyValue;
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use warden_shared::keys::push_hex;
use warden_shared::registry::Provider;

use crate::state::KeyView;

pub use answer::AnswerFacts;
pub use export::{Plane, TraceExport, TracingConfig};
pub use request::{operation_name, Attempt, RequestTrace, Settled};
pub use tool_call::ToolCallTrace;

/// The proxy's tracer: present only while tracing is on.
#[derive(Clone, Debug)]
pub struct Tracer {
    inner: SdkTracer,
}

impl Tracer {
    pub fn new(provider: &SdkTracerProvider) -> Tracer {
        let scope = InstrumentationScope::builder("warden-proxy")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        Tracer {
            inner: provider.tracer_with_scope(scope),
        }
    }
}

/// The trace context a carrier (headers, an MCP `_meta`) holds, or an empty one.
fn extract(carrier: &dyn Extractor) -> Context {
    TraceContextPropagator::new().extract(carrier)
}

/// `traceparent` and `tracestate` of `context`'s span, as a callee is told them.
#[derive(Debug, Default)]
pub struct Propagated {
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

/// The W3C trace context naming `span` as the parent, as `TraceContextPropagator`
/// writes it.
fn propagated(span: &SpanContext) -> Propagated {
    let sampled = span.trace_flags() & TraceFlags::SAMPLED;
    let state = span.trace_state().header();
    // Written byte by byte: formatting the ids through `Display` cost more than the rest
    // of starting the span.
    let mut traceparent = String::with_capacity(55);
    traceparent.push_str("00-");
    push_hex(&mut traceparent, &span.trace_id().to_bytes());
    traceparent.push('-');
    push_hex(&mut traceparent, &span.span_id().to_bytes());
    traceparent.push('-');
    push_hex(&mut traceparent, &[sampled.to_u8()]);
    Propagated {
        traceparent: Some(traceparent),
        tracestate: Some(state).filter(|s| !s.is_empty()),
    }
}

/// `gen_ai.provider.name` of a built-in provider, the conventions' name where they
/// have one; `None` for the others, named as Warden names them.
fn provider_name(provider: Provider) -> Option<&'static str> {
    Some(match provider {
        Provider::Openai => "openai",
        Provider::Anthropic => "anthropic",
        Provider::Google => "gcp.gemini",
        Provider::Bedrock => "aws.bedrock",
        Provider::Nvidia => "nvidia",
        _ => return None,
    })
}

/// The caller on a span: tenant, key and agent (`gen_ai.agent.*` from the registry).
fn caller_attributes(view: &KeyView) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("warden.tenant.id", view.key.tenant_id.clone()),
        KeyValue::new("warden.key.id", view.key.id.clone()),
        KeyValue::new("gen_ai.agent.id", view.key.agent_id.clone()),
    ];
    if let Some(agent) = view.agent.as_ref().filter(|a| !a.name.is_empty()) {
        attributes.push(KeyValue::new("gen_ai.agent.name", agent.name.clone()));
    }
    attributes
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::{
        SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry::Context;
    use opentelemetry_sdk::propagation::TraceContextPropagator;

    use super::propagated;

    #[test]
    fn the_context_passed_on_is_what_the_reference_propagator_writes() {
        for (flags, state) in [
            (TraceFlags::SAMPLED, "vendor=a,other=b"),
            (TraceFlags::default(), ""),
        ] {
            let span = SpanContext::new(
                TraceId::from(0x0af7_6519_16cd_43dd_8448_eb21_1c80_319c),
                SpanId::from(0x00f0_67aa_0ba9_02b7),
                flags,
                false,
                state.parse::<TraceState>().unwrap(),
            );
            let mut reference = HashMap::new();
            TraceContextPropagator::new().inject_context(
                &Context::new().with_remote_span_context(span.clone()),
                &mut reference,
            );
            let ours = propagated(&span);
            assert_eq!(ours.traceparent.as_ref(), reference.get("traceparent"));
            assert_eq!(
                ours.tracestate.as_ref(),
                reference.get("tracestate").filter(|s| !s.is_empty())
            );
        }
    }
}
