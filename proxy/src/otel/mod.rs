//! Traces in OpenTelemetry's GenAI conventions (semantic conventions v1.38.0, the GenAI
//! and MCP pages; the attributes are listed in `deploy/README.md`).
//!
//! A model request is a SERVER span (`POST /v1/chat/completions`), child of the agent's
//! `traceparent` when it sent one, with a CLIENT span per upstream attempt
//! (`chat gpt-4o`) whose context goes to the provider in `traceparent`; an MCP tool call
//! is an `execute_tool {tool}` span whose context goes to the MCP server in `_meta`.
//! Warden's own facts (tenant, key, decision, policy, cost, approval) are `warden.`
//! attributes; a refusal ends its span with an error status. Prompts and completions are
//! never exported.
//!
//! With tracing off there is no [`Tracer`]: no span, no attribute, no clock read; the
//! agent's `traceparent` and `tracestate` still pass through to the provider unchanged.

mod answer;
pub mod export;
mod request;
mod tool_call;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use warden_shared::registry::Provider;

use crate::state::KeyView;

pub use answer::AnswerFacts;
pub use export::{Plane, TraceExport, TracingConfig};
pub use request::{operation_name, Attempt, RequestTrace, Settled};
pub use tool_call::{MetaContext, ToolCall, ToolCallTrace};

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

impl Injector for Propagated {
    fn set(&mut self, key: &str, value: String) {
        match key {
            "traceparent" => self.traceparent = Some(value),
            "tracestate" => self.tracestate = Some(value).filter(|v| !v.is_empty()),
            _ => {}
        }
    }
}

fn propagated(context: &Context) -> Propagated {
    let mut out = Propagated::default();
    TraceContextPropagator::new().inject_context(context, &mut out);
    out
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
