//! An MCP tool call's span: `execute_tool {tool}`, child of the agent's trace (from the
//! request's `_meta`, as MCP carries it, or the HTTP request's headers), its context
//! passed on to the MCP server in the call's `_meta`.

use opentelemetry::propagation::Extractor;
use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::KeyValue;
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::trace::Span;
use rmcp::model::{CallToolRequestParams, MetaObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use super::{caller_attributes, extract, propagated, Tracer};
use crate::refusal::Refusal;
use crate::state::KeyView;

/// The trace context fields of an MCP request's `_meta`.
struct MetaContext<'a>(&'a MetaObject);

impl Extractor for MetaContext<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.0.get_traceparent(),
            "tracestate" => self.0.get_tracestate(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

pub struct ToolCallTrace {
    span: Span,
}

impl ToolCallTrace {
    /// Starts the span of the tool call `request` of `view`'s key, under the agent's
    /// trace in the call's `_meta` or else in its HTTP request's headers.
    pub fn start(
        tracer: &Tracer,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
        view: &KeyView,
    ) -> ToolCallTrace {
        let parts = context.extensions.get::<http::request::Parts>();
        let meta = request.meta.as_deref().unwrap_or(&context.meta.0);
        let parent = match parts {
            Some(parts) if meta.get_traceparent().is_none() => {
                extract(&HeaderExtractor(&parts.headers))
            }
            _ => extract(&MetaContext(meta)),
        };
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", request.name.to_string()),
            KeyValue::new("mcp.method.name", "tools/call"),
            KeyValue::new("jsonrpc.request.id", context.id.to_string()),
        ];
        let session = parts
            .and_then(|p| p.headers.get("mcp-session-id"))
            .and_then(|v| v.to_str().ok());
        if let Some(session) = session {
            attributes.push(KeyValue::new("mcp.session.id", session.to_owned()));
        }
        attributes.extend(caller_attributes(view));
        let span = tracer
            .inner
            .span_builder(format!("execute_tool {}", request.name))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&tracer.inner, &parent);
        ToolCallTrace { span }
    }

    /// Puts the span's context in `params`' `_meta`, from which the MCP server continues
    /// the trace.
    pub fn pass_on(&self, params: &mut CallToolRequestParams) {
        let propagated = propagated(self.span.span_context());
        let meta = params.meta.get_or_insert_with(Default::default);
        if let Some(parent) = propagated.traceparent {
            meta.set_traceparent(parent);
        }
        if let Some(state) = propagated.tracestate {
            meta.set_tracestate(state);
        }
    }

    /// Names the approval a held call waits on, or that let it through.
    pub fn approval(&mut self, approval_id: i64) {
        self.span
            .set_attribute(KeyValue::new("warden.approval.id", approval_id));
    }

    /// Ends the span: `outcome` is the tool-call record's (`ok`, `tool_error`,
    /// `upstream_error`, `refused`), `refusal` Warden's when it refused.
    pub fn end(mut self, outcome: &'static str, server: Option<&str>, refusal: Option<&Refusal>) {
        let span = &mut self.span;
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
