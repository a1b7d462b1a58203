//! A proxy stopping behind a load balancer: not ready first, while it still accepts,
//! then it stops accepting, and the requests in flight complete and are charged once.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::{expect_status, Backend, TestApp};

/// A client that opens a new connection for every request, as a load balancer's probe
/// or a new agent does.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn readiness(client: &reqwest::Client, base: &str) -> Option<(u16, Value)> {
    let response = client.get(format!("{base}/readyz")).send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.ok()?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_proxy_turns_not_ready_before_its_listener_closes() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let provider = MockProvider::start().await;
    let delay = Duration::from_millis(1_500);
    let mut proxy = TestProxy::start_with(&app, &provider, |config| {
        config.shutdown_delay_ms = delay.as_millis() as u64;
    })
    .await;
    let (tenant, raw, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "draining" }))
        .await;
    let probe = fresh_client();
    let (status, body) = readiness(&probe, &proxy.base).await.unwrap();
    assert_eq!((status, body["status"].clone()), (200, json!("ready")));

    // A stream of about 2.5 s is in flight when the signal comes.
    let mut body = simple_chat("gpt-4o-mini");
    body["stream"] = json!(true);
    body["stream_options"] = json!({ "include_usage": true });
    body["user"] = json!("mock-slow-stream");
    let streaming = proxy.chat(&raw, body).await;
    assert_eq!(streaming.status(), 200);
    let in_flight = tokio::spawn(async move { streaming.text().await });
    let signalled = Instant::now();
    proxy.signal_stop();

    // Not ready at once, while new connections are still accepted and served.
    let (status, body) = readiness(&probe, &proxy.base).await.unwrap();
    assert_eq!((status, body["status"].clone()), (503, json!("draining")));
    let (status, _) = proxy.chat_answer(&raw, "gpt-4o-mini").await;
    assert_eq!(status, 200, "a request during the delay is served");
    assert!(signalled.elapsed() < delay, "checked within the delay");

    // Then the listener closes: a new connection is refused, not before the delay.
    eventually(Duration::from_secs(5), || async {
        readiness(&probe, &proxy.base).await.is_none().then_some(())
    })
    .await;
    let closed_after = signalled.elapsed();
    assert!(
        closed_after >= delay,
        "the listener closed {closed_after:?} after the signal, before the {delay:?} delay"
    );
    println!("listener closed {closed_after:?} after the signal (delay {delay:?})");

    // The stream in flight completed, and both requests are charged once.
    let streamed = in_flight.await.unwrap().unwrap();
    assert!(streamed.trim_end().ends_with("data: [DONE]"), "{streamed}");
    proxy.stop().await;
    eventually(Duration::from_secs(5), || async {
        let summary = app.get("/cost/summary", &tenant.admin_key).await;
        let summary = expect_status(summary, 200).await;
        (summary["data"]["total_requests"] == json!(2)).then_some(())
    })
    .await;
}
