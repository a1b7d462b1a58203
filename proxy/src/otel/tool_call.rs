//! An MCP tool call's span: `execute_tool {tool}`, child of the agent's trace (from the
//! request's `_meta`, as MCP carries it, or the HTTP request's headers), its context
//! passed on to the MCP server in the call's `_meta`.

use opentelemetry::propagation::Extractor;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::HeaderExtractor;

use super::{caller_attributes, extract, propagated, Propagated, Tracer};
use crate::refusal::Refusal;
use crate::state::KeyView;

/// The trace context fields of an MCP request's `_meta`.
pub struct MetaContext<'a> {
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
}

impl Extractor for MetaContext<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// What names and places a tool call.
pub struct ToolCall<'a> {
    /// The tool as the agent called it (`github__create_issue`).
    pub tool: &'a str,
    pub jsonrpc_id: String,
    pub session_id: Option<&'a str>,
}

pub struct ToolCallTrace {
    context: Context,
}

impl ToolCallTrace {
    /// Starts the span of `call`, under the agent's trace in `meta` or else in `headers`.
    pub fn start(
        tracer: &Tracer,
        call: &ToolCall<'_>,
        meta: &MetaContext<'_>,
        headers: Option<&http::HeaderMap>,
        view: &KeyView,
    ) -> ToolCallTrace {
        let parent = match (meta.traceparent, headers) {
            (None, Some(headers)) => extract(&HeaderExtractor(headers)),
            _ => extract(meta),
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", call.tool.to_owned()),
            KeyValue::new("mcp.method.name", "tools/call"),
            KeyValue::new("jsonrpc.request.id", call.jsonrpc_id.clone()),
        ];
        if let Some(session) = call.session_id {
            attributes.push(KeyValue::new("mcp.session.id", session.to_owned()));
        }
        attributes.extend(caller_attributes(view));
        let span = tracer
            .inner
            .span_builder(format!("execute_tool {}", call.tool))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&tracer.inner, &parent);
        ToolCallTrace {
            context: parent.with_span(span),
        }
    }

    /// The context the MCP server is sent.
    pub fn propagated(&self) -> Propagated {
        propagated(self.context.span().span_context())
    }

    /// Names the approval a held call waits on, or that let it through.
    pub fn approval(&self, approval_id: i64) {
        let span = self.context.span();
        span.set_attribute(KeyValue::new("warden.approval.id", approval_id));
    }

    /// Ends the span: `outcome` is the tool-call record's (`ok`, `tool_error`,
    /// `upstream_error`, `refused`), `refusal` Warden's when it refused.
    pub fn end(self, outcome: &'static str, server: Option<&str>, refusal: Option<&Refusal>) {
        let span = self.context.span();
        if let Some(server) = server {
            span.set_attribute(KeyValue::new("warden.mcp.server", server.to_owned()));
        }
        let decision = refusal.map_or("allowed", Refusal::code);
        span.set_attribute(KeyValue::new("warden.decision", decision));
        if let Some(policy_id) = refusal.and_then(Refusal::policy_id) {
            span.set_attribute(KeyValue::new("warden.policy.id", policy_id));
        }
        if outcome != "ok" {
            let kind = refusal.map_or(outcome, Refusal::code);
            span.set_attribute(KeyValue::new("error.type", kind));
            span.set_status(Status::error(kind));
        }
        span.end();
    }
}
