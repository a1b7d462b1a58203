//! The control plane's traces, from the binary as an operator runs it: the standard
//! `OTEL_` variables turn export on, an API request is a SERVER span named by its route
//! (under the caller's `traceparent`) with its database queries as CLIENT children, each
//! background round is a span, and the SDK's own switch turns it all off.

use std::time::Duration;

use crate::helpers::{Backend, TestApp, TestTenant};
use crate::otlp::Collector;
use crate::replica_process::ControlPlaneProcess;

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

async fn list_agents(process: &ControlPlaneProcess, key: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("http://{}/api/v1/agents", process.addr))
        .bearer_auth(key)
        .header("traceparent", format!("00-{TRACE}-{CALLER_SPAN}-01"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A `warden control-plane` process on PostgreSQL exporting to a receiver, with the
/// `OTEL_` variable `more` besides the endpoint (and the test app whose database it
/// shares); it has listed a tenant's agents in the trace [`TRACE`] when this returns.
async fn exporting(more: (&str, &str)) -> (TestApp, TestTenant, Collector, ControlPlaneProcess) {
    let app = TestApp::spawn_with(Backend::Postgres, |_| {}).await;
    let tenant = app.new_tenant("starter").await;
    let collector = Collector::start().await;
    let process = ControlPlaneProcess::start(
        &app.database_url(),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_HEADERS", &collector.headers_variable()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            more,
        ],
    );
    process.wait_ready().await;
    assert_eq!(list_agents(&process, &tenant.admin_key).await, 200);
    (app, tenant, collector, process)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_and_rounds_are_spans_with_their_queries_as_children() {
    let (_app, tenant, collector, _process) =
        exporting(("OTEL_SERVICE_NAME", "governance-api")).await;

    let server = collector
        .span("the request's span", |s| {
            s.trace_id == TRACE && s.kind == "SERVER"
        })
        .await;
    assert_eq!(server.name, "GET /api/v1/agents");
    assert_eq!(
        server.parent_span_id, CALLER_SPAN,
        "the caller's trace goes on"
    );
    assert_eq!(server.service, "governance-api");
    assert_eq!(server.scope, "warden-control-plane");
    assert_eq!(server.str("http.route"), "/api/v1/agents");
    assert_eq!(server.int("http.response.status_code"), 200);
    assert_eq!(server.str("tenant_id"), tenant.id);
    let queries = collector
        .span("a query of the request", |s| {
            s.trace_id == TRACE && s.kind == "CLIENT" && s.parent_span_id == server.span_id
        })
        .await;
    assert_eq!(queries.str("db.system.name"), "postgresql");
    let texts: Vec<String> = collector
        .trace(TRACE)
        .iter()
        .filter(|s| s.kind == "CLIENT")
        .map(|s| s.str("db.query.text").to_owned())
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("FROM agents")),
        "the request's queries: {texts:#?}"
    );
    assert!(
        texts.iter().all(|t| !t.contains(&tenant.admin_key)),
        "statements carry placeholders, never values"
    );
    for span in collector.trace(TRACE) {
        assert!(
            span.start_ns >= server.start_ns && span.end_ns <= server.end_ns,
            "{span:?}"
        );
    }

    // A background round: the first close of days runs at start.
    let round = collector
        .span("a round's span", |s| s.name == "round close_days")
        .await;
    assert_eq!(round.service, "governance-api");
    assert_eq!(round.parent_span_id, "", "a round starts its own trace");
    assert!(
        collector
            .content_types()
            .iter()
            .all(|t| t == "application/x-protobuf"),
        "{:?}",
        collector.content_types()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_exported_when_the_sdk_is_switched_off() {
    let (_app, _tenant, collector, _process) = exporting(("OTEL_TRACES_EXPORTER", "none")).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(collector.spans().is_empty(), "{:#?}", collector.spans());
    assert!(collector.content_types().is_empty());
}
