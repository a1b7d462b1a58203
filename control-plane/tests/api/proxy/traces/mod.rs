//! Traces in OpenTelemetry's GenAI conventions, exported over OTLP to a receiver
//! (`crate::otlp`): the exact span of each kind of request (a forwarded one is the CLIENT
//! span of its upstream attempt, a refused one a SERVER span), the agent's trace
//! continued through the proxy to the provider, refusals and held requests visible, and
//! the trace context passed through untouched when tracing is off.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use warden_proxy::otel::Tracer;

use super::mock::{COMPLETION_TOKENS, MESSAGE_TOKENS, PROMPT_TOKENS, RESPONSE_TOKENS};
use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::{create_policy, expect_status, Backend, TestApp, TestTenant};
use crate::otlp::{flush, Attr, Collector, ReceivedSpan};

mod content;

/// The agent's own span, the parent it sends in `traceparent`.
const AGENT_SPAN: &str = "00f067aa0ba902b7";

/// A proxy exporting to a receiver, and a tenant's key acting for the agent `support-bot`.
struct Traced {
    app: TestApp,
    mock: MockProvider,
    proxy: TestProxy,
    collector: Collector,
    tracer: Tracer,
    tenant: TestTenant,
    key: String,
    agent_id: String,
    key_id: String,
}

impl Traced {
    async fn start() -> Traced {
        Traced::start_with(Collector::tracer).await
    }

    /// As `start`, with the proxy's tracer made by `tracer` from the receiver.
    async fn start_with(tracer: impl FnOnce(&Collector) -> Tracer) -> Traced {
        let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
        let mock = MockProvider::start().await;
        let collector = Collector::start().await;
        let tracer = tracer(&collector);
        let proxy = TestProxy::start_traced(&app, &mock, tracer.clone()).await;
        let tenant = app.new_tenant("enterprise").await;
        let agent = app
            .register_agent(&tenant.admin_key, json!({ "name": "support-bot" }))
            .await;
        let agent_id = agent["id"].as_str().unwrap().to_owned();
        let (key, created) = proxy
            .new_key(
                &app,
                &tenant.admin_key,
                json!({ "agent_id": agent_id, "developer_label": "traced" }),
            )
            .await;
        let key_id = created["api_key_id"].as_str().unwrap().to_owned();
        Traced {
            app,
            mock,
            proxy,
            collector,
            tracer,
            tenant,
            key,
            agent_id,
            key_id,
        }
    }

    /// Sends `body` to `path` as the agent, in the agent's trace `trace_id`.
    async fn send(&self, path: &str, trace_id: &str, body: Value) -> reqwest::Response {
        self.proxy
            .client
            .post(format!("{}{path}", self.proxy.base))
            .bearer_auth(&self.key)
            .header("traceparent", format!("00-{trace_id}-{AGENT_SPAN}-01"))
            .header("tracestate", "agent=1")
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// Sends `body` to `path` in trace `trace_id`, expects a 200, and returns the
    /// request's span, checked as [`Traced::forwarded`] checks one named `name`.
    async fn call(&self, path: &str, trace_id: &str, body: Value, name: &str) -> ReceivedSpan {
        let answer = self.send(path, trace_id, body).await;
        assert_eq!(answer.status(), 200, "{path}");
        let spans = self.spans(trace_id, 1).await;
        self.forwarded(&spans, path, name)
    }

    /// Exports what the proxy has ended and returns trace `trace_id`'s `count` spans.
    async fn spans(&self, trace_id: &str, count: usize) -> Vec<ReceivedSpan> {
        self.collector.flushed(&self.tracer, trace_id, count).await
    }

    /// The `traceparent` the provider received with the latest request to `path`.
    fn sent_upstream(&self, path: &str) -> (String, String) {
        let received = self.mock.received.lock().unwrap();
        let last = received.iter().rev().find(|r| r.path == path).unwrap();
        let header = |name: &str| {
            last.headers
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        (header("traceparent"), header("tracestate"))
    }

    /// Checks the one span of a forwarded request, the CLIENT span of its upstream
    /// attempt under the agent's span, and that the provider was sent its context;
    /// returns it.
    fn forwarded(&self, spans: &[ReceivedSpan], path: &str, name: &str) -> ReceivedSpan {
        assert_eq!(spans.len(), 1, "one span a forwarded request: {spans:#?}");
        let client = only(spans, "CLIENT");
        assert_eq!(client.name, name);
        assert_eq!(
            client.parent_span_id, AGENT_SPAN,
            "the agent's trace goes on"
        );
        assert_eq!(client.service, "warden-proxy");
        assert_eq!(client.scope, "warden-proxy");
        assert_eq!(client.status, "UNSET");
        assert_eq!(client.int("http.response.status_code"), 200);
        assert_eq!(client.str("warden.decision"), "forwarded");
        assert_eq!(client.str("server.address"), "127.0.0.1");
        self.caller(&client);
        let (traceparent, tracestate) = self.sent_upstream(path);
        assert_eq!(
            traceparent,
            format!("00-{}-{}-01", client.trace_id, client.span_id),
            "the provider continues the trace from the upstream attempt"
        );
        assert_eq!(tracestate, "agent=1");
        client
    }

    fn caller(&self, span: &ReceivedSpan) {
        assert_eq!(span.str("warden.tenant.id"), self.tenant.id);
        assert_eq!(span.str("warden.key.id"), self.key_id);
        assert_eq!(span.str("gen_ai.agent.id"), self.agent_id);
        assert_eq!(span.str("gen_ai.agent.name"), "support-bot");
    }
}

fn only(spans: &[ReceivedSpan], kind: &str) -> ReceivedSpan {
    let found: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.kind == kind).collect();
    assert_eq!(found.len(), 1, "one {kind} span in {spans:#?}");
    found[0].clone()
}

fn strs(list: &[&str]) -> Option<Attr> {
    Some(Attr::Strs(list.iter().map(|s| (*s).to_owned()).collect()))
}

/// A fresh trace id for each request of a test.
fn trace_id(n: u8) -> String {
    format!("4bf92f3577b34da6a3ce929d0e0e47{n:02x}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_api_call_is_a_genai_client_span_under_the_agents_span() {
    let traced = Traced::start().await;

    // Chat completion.
    let client = traced
        .call(
            "/v1/chat/completions",
            &trace_id(1),
            simple_chat("gpt-4o-mini"),
            "chat gpt-4o-mini",
        )
        .await;
    assert_eq!(client.str("gen_ai.operation.name"), "chat");
    assert_eq!(client.str("gen_ai.provider.name"), "openai");
    assert_eq!(client.str("gen_ai.request.model"), "gpt-4o-mini");
    assert_eq!(client.str("gen_ai.response.model"), "gpt-4o-mini");
    assert_eq!(client.str("gen_ai.response.id"), "chatcmpl-mock");
    assert_eq!(
        client.attr("gen_ai.response.finish_reasons").cloned(),
        strs(&["stop"])
    );
    assert_eq!(
        client.attr("gen_ai.request.stream"),
        Some(&Attr::Bool(false))
    );
    assert_eq!(client.int("gen_ai.usage.input_tokens"), PROMPT_TOKENS);
    assert_eq!(client.int("gen_ai.usage.output_tokens"), COMPLETION_TOKENS);
    assert!(client.float("warden.cost_usd") > 0.0, "{client:?}");
    assert!(client.attr("gen_ai.response.time_to_first_chunk").is_none());

    // Responses API.
    let body = json!({ "model": "gpt-4o", "input": "Say hello" });
    let client = traced
        .call("/v1/responses", &trace_id(2), body, "chat gpt-4o")
        .await;
    let (input, cached, output, reasoning) = RESPONSE_TOKENS;
    assert_eq!(client.str("gen_ai.response.id"), "resp_mock");
    assert_eq!(
        client.attr("gen_ai.response.finish_reasons").cloned(),
        strs(&["completed"])
    );
    assert_eq!(client.int("gen_ai.usage.input_tokens"), input);
    assert_eq!(client.int("gen_ai.usage.output_tokens"), output);
    assert_eq!(client.int("gen_ai.usage.cache_read.input_tokens"), cached);
    assert_eq!(
        client.int("gen_ai.usage.reasoning.output_tokens"),
        reasoning
    );

    // Anthropic's Messages API.
    let body = json!({ "model": "claude-sonnet-4-5", "max_tokens": 64,
                       "messages": [{ "role": "user", "content": "Say hello" }] });
    let client = traced
        .call("/v1/messages", &trace_id(3), body, "chat claude-sonnet-4-5")
        .await;
    let (input, written, read, output) = MESSAGE_TOKENS;
    assert_eq!(client.str("gen_ai.provider.name"), "anthropic");
    assert_eq!(client.str("gen_ai.response.id"), "msg_mock");
    assert_eq!(
        client.attr("gen_ai.response.finish_reasons").cloned(),
        strs(&["end_turn"])
    );
    assert_eq!(
        client.int("gen_ai.usage.input_tokens"),
        input + written + read
    );
    assert_eq!(client.int("gen_ai.usage.output_tokens"), output);
    assert_eq!(client.int("gen_ai.usage.cache_read.input_tokens"), read);
    assert_eq!(
        client.int("gen_ai.usage.cache_creation.input_tokens"),
        written
    );

    // Embeddings.
    let body = json!({ "model": "text-embedding-3-small", "input": "hello" });
    let client = traced
        .call(
            "/v1/embeddings",
            &trace_id(4),
            body,
            "embeddings text-embedding-3-small",
        )
        .await;
    assert_eq!(client.str("gen_ai.operation.name"), "embeddings");
    assert_eq!(client.int("gen_ai.usage.input_tokens"), 5);

    // A request without a trace of its own starts one at the proxy.
    let answer = traced
        .proxy
        .chat(&traced.key, simple_chat("gpt-4o-mini"))
        .await;
    assert_eq!(answer.status(), 200);
    let (traceparent, _) = traced.sent_upstream("/v1/chat/completions");
    let started_here = traceparent.split('-').nth(1).unwrap().to_owned();
    let spans = traced.spans(&started_here, 1).await;
    assert_eq!(only(&spans, "CLIENT").parent_span_id, "", "a root span");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streams_span_ends_after_its_last_chunk_with_its_tokens() {
    let traced = Traced::start().await;
    // Fifty chunks 50 ms apart: the span must cover them all.
    let body = json!({ "model": "gpt-4o-mini", "stream": true, "user": "mock-slow-stream",
                       "messages": [{ "role": "user", "content": "Count" }] });
    let sent = Instant::now();
    let answer = traced
        .send("/v1/chat/completions", &trace_id(9), body)
        .await;
    assert_eq!(answer.status(), 200);
    let text = answer.text().await.unwrap();
    let streamed = sent.elapsed();
    let read_at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let spans = traced.spans(&trace_id(9), 1).await;
    let client = traced.forwarded(&spans, "/v1/chat/completions", "chat gpt-4o-mini");
    assert_eq!(
        client.attr("gen_ai.request.stream"),
        Some(&Attr::Bool(true))
    );
    assert_eq!(client.int("gen_ai.usage.input_tokens"), PROMPT_TOKENS);
    assert_eq!(client.int("gen_ai.usage.output_tokens"), COMPLETION_TOKENS);
    let first_chunk = client.float("gen_ai.response.time_to_first_chunk");
    assert!(first_chunk > 0.0 && first_chunk < 1.0, "{first_chunk}");
    // It covers the whole stream and ends as the last chunk is relayed: the client may
    // finish reading a moment before the proxy ends it, hence the margin after.
    let margin = Duration::from_secs(1);
    let lasted = Duration::from_nanos(client.end_ns - client.start_ns);
    assert!(
        lasted >= Duration::from_millis(2_400) && lasted <= streamed + margin,
        "the span lasted {lasted:?}, the stream {streamed:?}"
    );
    assert!(u128::from(client.end_ns) <= (read_at + margin).as_nanos());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_end_their_span_with_an_error_and_the_decision() {
    let traced = Traced::start().await;
    let admin = traced.tenant.admin_key.clone();

    // A blocked agent: refused at once, never sent upstream.
    expect_status(
        traced
            .app
            .post(
                &format!("/agents/{}/block", traced.agent_id),
                &admin,
                json!({ "reason": "runaway" }),
            )
            .await,
        204,
    )
    .await;
    // The block is in force at the proxies when its call answers (read-your-writes).
    let upstream_before = traced.mock.received.lock().unwrap().len();
    let answer = traced
        .send("/v1/chat/completions", &trace_id(20), simple_chat("gpt-4o"))
        .await;
    assert_eq!(answer.status(), 403);
    let spans = traced.spans(&trace_id(20), 1).await;
    let server = only(&spans, "SERVER");
    assert_eq!(server.name, "POST /v1/chat/completions");
    assert_eq!(server.status, "ERROR");
    assert_eq!(server.status_message, "agent_blocked");
    assert_eq!(server.str("warden.decision"), "agent_blocked");
    assert_eq!(server.str("error.type"), "agent_blocked");
    assert_eq!(server.int("http.response.status_code"), 403);
    traced.caller(&server);
    assert_eq!(traced.mock.received.lock().unwrap().len(), upstream_before);
    expect_status(
        traced
            .app
            .post(
                &format!("/agents/{}/unblock", traced.agent_id),
                &admin,
                json!({}),
            )
            .await,
        204,
    )
    .await;

    // Held for a person's approval: the span names the policy; the retry once approved
    // is forwarded like any request.
    let policy = create_policy(
        &traced.app,
        &admin,
        json!({ "name": "approve gpt-4o", "policy_type": "require_approval",
                "config": { "models": ["gpt-4o"] } }),
    )
    .await;
    let policy_id = policy["id"].as_i64().unwrap();
    let held = traced
        .send("/v1/chat/completions", &trace_id(21), simple_chat("gpt-4o"))
        .await;
    assert_eq!(held.status(), 403);
    let held = held.json::<Value>().await.unwrap();
    assert_eq!(held["error"], json!("approval_required"), "{held}");
    let spans = traced.spans(&trace_id(21), 1).await;
    let held_span = only(&spans, "SERVER");
    assert_eq!(held_span.str("warden.decision"), "approval_required");
    assert_eq!(held_span.status, "ERROR");
    assert_eq!(held_span.int("warden.policy.id"), policy_id);
    let approval = eventually(Duration::from_secs(5), || async {
        let page = expect_status(
            traced.app.get("/approvals?status=pending", &admin).await,
            200,
        )
        .await;
        page["data"][0]["id"].as_i64()
    })
    .await;
    assert_eq!(
        held_span.int("warden.approval.id"),
        approval,
        "the held request names its approval"
    );
    expect_status(
        traced
            .app
            .post(
                &format!("/approvals/{approval}/decide"),
                &admin,
                json!({ "reviewer_id": "oncall-ana", "decision": "approved" }),
            )
            .await,
        204,
    )
    .await;
    // The approval is in force when its decision answers; the retry goes through.
    let released = traced
        .call(
            "/v1/chat/completions",
            &trace_id(22),
            simple_chat("gpt-4o"),
            "chat gpt-4o",
        )
        .await;
    assert_eq!(
        released.int("warden.approval.id"),
        approval,
        "and so does the retry it released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tracing_off_the_agents_trace_context_passes_through_untouched() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let mock = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &mock).await;
    let (_tenant, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "untraced" }))
        .await;
    let traceparent = format!("00-{}-{AGENT_SPAN}-01", trace_id(30));
    let answer = proxy
        .client
        .post(format!("{}/v1/chat/completions", proxy.base))
        .bearer_auth(&key)
        .header("traceparent", &traceparent)
        .header("tracestate", "agent=1")
        .json(&simple_chat("gpt-4o-mini"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let received = mock.received.lock().unwrap();
    let headers = &received.last().unwrap().headers;
    assert_eq!(headers["traceparent"], traceparent.as_str());
    assert_eq!(headers["tracestate"], "agent=1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_the_collector_refuses_are_counted_lost_in_the_metrics() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let mock = MockProvider::start().await;
    let collector = Collector::start().await;
    let tracer = collector.tracer_with_key("not-the-collectors-key");
    let proxy = TestProxy::start_traced(&app, &mock, tracer.clone()).await;
    let (_, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "lost" }))
        .await;
    for _ in 0..3 {
        let answer = proxy.chat(&key, simple_chat("gpt-4o-mini")).await;
        assert_eq!(
            answer.status(),
            200,
            "a collector refusing loses spans, never requests"
        );
    }
    // A request's span ends in the proxy's logging phase, after its answer has reached the
    // client: the last one may still be on its way to the queue, so flush until it counts.
    let by_reason = eventually(Duration::from_secs(10), || async {
        flush(&tracer).await;
        let by_reason = lost_spans_by_reason(&proxy.metrics().await);
        (by_reason["export_failed"] >= 3.0).then_some(by_reason)
    })
    .await;
    assert_eq!(by_reason["queue_full"], 0.0, "{by_reason:?}");
}

/// `warden_proxy_trace_spans_lost_total` by its `reason` label, read with a parser of
/// Prometheus's text format.
fn lost_spans_by_reason(text: &str) -> std::collections::HashMap<String, f64> {
    let exposition = openmetrics_parser::prometheus::parse_prometheus(text).unwrap();
    let lost = &exposition.families["warden_proxy_trace_spans_lost_total"];
    let mut by_reason = std::collections::HashMap::new();
    for sample in lost.iter_samples() {
        let reason = sample
            .get_labelset()
            .unwrap()
            .iter()
            .find(|(name, _)| name.as_str() == "reason")
            .map(|(_, value)| value.clone())
            .unwrap();
        if let openmetrics_parser::PrometheusValue::Counter(counter) = &sample.value {
            let value = match counter.value {
                openmetrics_parser::MetricNumber::Float(v) => v,
                openmetrics_parser::MetricNumber::Int(v) => v as f64,
            };
            by_reason.insert(reason, value);
        }
    }
    by_reason
}
