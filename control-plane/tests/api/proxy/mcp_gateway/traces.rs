//! An MCP tool call in a trace: an `execute_tool` span under the agent's trace (its
//! request's `traceparent`), its context passed on to the MCP server in the call's
//! `_meta`; a refused call ends its span with an error and the decision.

use serde_json::{json, Value};
use warden_proxy::otel::Tracer;

use super::{register, Upstream, MCP_SDK};
use crate::helpers::{create_policy, Backend, TestApp, TestTenant};
use crate::otlp::{Collector, ReceivedSpan};
use crate::proxy::capture::capture_redacting_mail;
use crate::proxy::{MockProvider, TestProxy};

const AGENT_SPAN: &str = "00f067aa0ba902b7";

/// A traced proxy whose gateway fronts the MCP server `docs`, and a tenant's agent.
struct TracedGateway {
    app: TestApp,
    upstream: Upstream,
    _mock: MockProvider,
    _proxy: TestProxy,
    collector: Collector,
    tracer: Tracer,
    gateway: String,
    tenant: TestTenant,
    key: String,
    /// The agent's key as created (`agent_id`).
    created: Value,
}

impl TracedGateway {
    async fn start(tracer: impl Fn(&Collector) -> Tracer) -> TracedGateway {
        let app = TestApp::spawn_with(Backend::Sqlite, |config| {
            config.outbound.allow_private = vec!["127.0.0.1/32".to_owned()];
        })
        .await;
        let upstream = Upstream::start().await;
        let mock = MockProvider::start().await;
        let collector = Collector::start().await;
        let tracer = tracer(&collector);
        let proxy = TestProxy::start_traced(&app, &mock, tracer.clone()).await;
        let (tenant, key, created) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "toolbot" }))
            .await;
        register(&app, &tenant.admin_key, &upstream).await;
        TracedGateway {
            gateway: format!("{}/mcp", proxy.base),
            app,
            upstream,
            _mock: mock,
            _proxy: proxy,
            collector,
            tracer,
            tenant,
            key,
            created,
        }
    }

    /// Exports what the proxy has ended and returns trace `trace`'s one span.
    async fn span(&self, trace: &str) -> ReceivedSpan {
        let mut spans = self.collector.flushed(&self.tracer, trace, 1).await;
        spans.remove(0)
    }

    /// The MCP SDK's agent calls `tool` with `arguments` in trace `trace`.
    async fn call(&self, tool: &str, arguments: Value, trace: &str) -> Value {
        let traceparent = format!("00-{trace}-{AGENT_SPAN}-01");
        let arguments = arguments.to_string();
        let args = [
            self.gateway.as_str(),
            self.key.as_str(),
            "call",
            tool,
            &arguments,
            &traceparent,
        ];
        crate::proxy::sdk::run("mcp-sdk", MCP_SDK, "mcp_agent.py", &args).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_an_execute_tool_span_whose_context_reaches_the_server() {
    let traced = TracedGateway::start(Collector::tracer).await;
    let TracedGateway {
        app,
        upstream,
        tenant,
        created,
        ..
    } = &traced;
    create_policy(
        app,
        &tenant.admin_key,
        json!({ "name": "no deletes", "policy_type": "tool_allowlist",
                "config": { "allowed_tools": ["docs__add", "docs__search"] } }),
    )
    .await;
    let call = |tool, arguments, trace| traced.call(tool, arguments, trace);

    let trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let answer = call("docs__add", json!({ "a": 2, "b": 3 }), trace).await;
    assert_eq!(answer["text"], json!("5"), "{answer}");
    let span = &traced.span(trace).await;
    assert_eq!(span.name, "execute_tool docs__add");
    assert_eq!(span.kind, "INTERNAL");
    assert_eq!(span.parent_span_id, AGENT_SPAN, "the agent's trace goes on");
    assert_eq!(span.status, "UNSET");
    assert_eq!(span.str("gen_ai.operation.name"), "execute_tool");
    assert_eq!(span.str("gen_ai.tool.name"), "docs__add");
    assert_eq!(span.str("mcp.method.name"), "tools/call");
    // The SDK speaks the current protocol, which has no sessions (`mcp.session.id` is
    // set for legacy clients' sessions only).
    assert!(span.attr("mcp.session.id").is_none());
    assert!(!span.str("jsonrpc.request.id").is_empty());
    assert_eq!(span.str("warden.mcp.server"), "docs");
    assert_eq!(span.str("warden.decision"), "allowed");
    assert_eq!(span.str("warden.tenant.id"), tenant.id);
    assert_eq!(
        span.str("gen_ai.agent.id"),
        created["agent_id"].as_str().unwrap()
    );
    assert_eq!(
        upstream.traceparents(),
        [format!("00-{trace}-{}-01", span.span_id)],
        "the server continues the trace from the tool call's span"
    );

    // Refused by a policy: an error, the decision and the policy; nothing sent on.
    let trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    let answer = call("docs__delete_repo", json!({ "name": "main" }), trace).await;
    assert_eq!(
        answer["error"]["data"]["code"],
        json!("policy_violation"),
        "{answer}"
    );
    let span = &traced.span(trace).await;
    assert_eq!(span.name, "execute_tool docs__delete_repo");
    assert_eq!(span.status, "ERROR");
    assert_eq!(span.str("warden.decision"), "policy_violation");
    assert_eq!(span.str("error.type"), "policy_violation");
    assert!(span.int("warden.policy.id") > 0);
    assert_eq!(upstream.traceparents().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_arguments_are_on_its_span_only_when_asked_for_and_captured_and_redacted() {
    let traced = TracedGateway::start(Collector::tracer_with_content).await;
    let TracedGateway { app, tenant, .. } = &traced;
    let arguments = json!({ "query": "mail alice.secret@example.com" });
    let search = |trace| traced.call("docs__search", arguments.clone(), trace);

    // The operator asked for content; the tenant captures no payloads: no arguments.
    let trace = "7bf92f3577b34da6a3ce929d0e0e4736";
    let answer = search(trace).await;
    assert!(answer["error"].is_null(), "{answer}");
    let span = traced.span(trace).await;
    assert_eq!(span.name, "execute_tool docs__search");
    assert!(
        span.attr("gen_ai.tool.call.arguments").is_none(),
        "{span:?}"
    );

    // With capture on, the arguments are there, redacted by the rules for `arguments`.
    capture_redacting_mail(app, &tenant.admin_key, "arguments.query").await;
    let trace = "8bf92f3577b34da6a3ce929d0e0e4736";
    let answer = search(trace).await;
    assert!(answer["error"].is_null(), "{answer}");
    let span = traced.span(trace).await;
    let arguments: Value = serde_json::from_str(span.str("gen_ai.tool.call.arguments")).unwrap();
    assert_eq!(arguments, json!({ "query": "mail [REDACTED:email]" }));
    assert_eq!(span.int("warden.content.redactions"), 1);
    // What the tool answered is not the agent's payload: never on the span.
    assert!(span.attr("gen_ai.tool.call.result").is_none());
    assert!(!format!("{span:?}").contains("alice.secret"));
}
