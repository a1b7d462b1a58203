//! An MCP tool call's span: `execute_tool {tool}`, child of the agent's trace (from the
//! request's `_meta`, as MCP carries it, or the HTTP request's headers), its context
//! passed on to the MCP server in the call's `_meta`.

use std::borrow::Cow;
use std::time::SystemTime;

use opentelemetry::propagation::Extractor;
use opentelemetry::trace::SpanKind;
use rmcp::model::{CallToolRequestParams, MetaObject};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use super::content::{PendingContent, Sent};
use super::record::SpanRecord;
use super::{parent_in_headers, parent_span, Propagated, Tracer};
use crate::capture::Capture;
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

/// An MCP tool call's span; `span` is `None` when the trace is sampled out.
pub struct ToolCallTrace {
    tracer: Tracer,
    span: Option<SpanRecord>,
    propagated: Propagated,
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
            Some(parts) if meta.get_traceparent().is_none() => parent_in_headers(&parts.headers),
            _ => parent_span(&MetaContext(meta)),
        };
        let begun = tracer.begin(parent.as_ref(), SpanKind::Internal, SystemTime::now());
        let propagated = begun.propagated();
        let span = begun.record.map(|mut span| {
            span.name(&["execute_tool ", &request.name]);
            span.str("gen_ai.operation.name", "execute_tool");
            span.str("gen_ai.tool.name", &request.name);
            span.str("mcp.method.name", "tools/call");
            span.str("jsonrpc.request.id", &context.id.to_string());
            let session = parts
                .and_then(|p| p.headers.get("mcp-session-id"))
                .and_then(|v| v.to_str().ok());
            if let Some(session) = session {
                span.str("mcp.session.id", session);
            }
            span.caller(view);
            span
        });
        ToolCallTrace {
            tracer: tracer.clone(),
            span,
            propagated,
        }
    }

    /// Puts the span's context in `params`' `_meta`, from which the MCP server continues
    /// the trace.
    pub fn pass_on(&self, params: &mut CallToolRequestParams) {
        let meta = params.meta.get_or_insert_with(Default::default);
        if let Some(parent) = &self.propagated.traceparent {
            meta.set_traceparent(parent.as_str().to_owned());
        }
        if let Some(state) = &self.propagated.tracestate {
            meta.set_tracestate(state.clone());
        }
    }

    /// Whether the span would show the call's arguments: it records, and the operator
    /// asked for content (the tenant's capture is the caller's to check).
    pub fn wants_content(&self) -> bool {
        self.span.is_some() && self.tracer.captures_content()
    }

    /// The call's arguments, held as `{"arguments": ...}` for the span (see
    /// `wants_content`).
    pub fn arguments(&mut self, capture: Capture) {
        if let Some(span) = &mut self.span {
            span.content = Some(Box::new(PendingContent {
                capture,
                shape: Sent::ToolArguments,
            }));
        }
    }

    /// Names the approval a held call waits on, or that let it through.
    pub fn approval(&mut self, approval_id: i64) {
        if let Some(span) = &mut self.span {
            span.int("warden.approval.id", approval_id);
        }
    }

    /// Ends the span: `outcome` is the tool-call record's (`ok`, `tool_error`,
    /// `upstream_error`, `refused`), `refusal` Warden's when it refused.
    pub fn end(self, outcome: &'static str, server: Option<&str>, refusal: Option<&Refusal>) {
        let Some(mut span) = self.span else {
            return;
        };
        if let Some(server) = server {
            span.str("warden.mcp.server", server);
        }
        let decision = refusal.map_or("allowed", Refusal::code);
        span.str("warden.decision", decision);
        if let Some(policy_id) = refusal.and_then(Refusal::policy_id) {
            span.int("warden.policy.id", policy_id);
        }
        if outcome != "ok" {
            let kind = refusal.map_or(outcome, Refusal::code);
            span.str("error.type", kind);
            span.error = Some(Cow::Borrowed(kind));
        }
        self.tracer.finish(span);
    }
}
