//! When things go wrong upstream or downstream: timeouts, unreachable providers, a client
//! that hangs up mid-stream (the provider is cancelled, the usage still counted).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::expect_status;

db_test!(a_silent_provider_is_a_504_and_an_absent_one_a_502, |app| {
    let provider = MockProvider::start().await;
    let proxy =
        TestProxy::start_with(&app, &provider, |config| config.first_byte_timeout_ms = 300).await;
    let (_, raw_key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "timeouts" }))
        .await;
    let started = Instant::now();
    let response = proxy.chat(&raw_key, simple_chat("mock-hang")).await;
    assert_eq!(response.status().as_u16(), 504);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], json!("upstream_timeout"));
    assert!(started.elapsed() < Duration::from_secs(5));

    // A provider nobody listens for.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = MockProvider {
        base: format!("http://{}/v1", closed.local_addr().unwrap()),
        received: Default::default(),
        abandoned: Default::default(),
    };
    drop(closed);
    let proxy = TestProxy::start(&app, &dead).await;
    let response = proxy.chat(&raw_key, simple_chat("gpt-4o-mini")).await;
    assert_eq!(response.status().as_u16(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], json!("upstream_unreachable"));
});

db_test!(
    a_client_hanging_up_cancels_the_provider_and_is_still_accounted,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "impatient" }))
            .await;
        let mut response = proxy
            .chat(
                &raw_key,
                json!({ "model": "mock-slow-stream", "stream": true,
                    "messages": [{ "role": "user", "content": "a long story please" }] }),
            )
            .await;
        assert_eq!(response.status().as_u16(), 200);
        // Read a few chunks, then hang up.
        let mut read = 0;
        while read < 3 {
            let chunk = response.chunk().await.unwrap().unwrap();
            read += chunk.windows(6).filter(|w| w == b"token ").count();
        }
        drop(response);
        eventually(Duration::from_secs(5), || async {
            (provider.abandoned.load(Ordering::SeqCst) == 1).then_some(())
        })
        .await;
        // The cut-short request is recorded with estimated tokens.
        let summary = eventually(Duration::from_secs(10), || async {
            let body = expect_status(app.get("/cost/summary", &tenant.admin_key).await, 200).await;
            (body["data"]["total_requests"] == json!(1)).then_some(body)
        })
        .await;
        assert!(summary["data"]["total_input_tokens"].as_i64().unwrap() > 0);
        assert!(summary["data"]["total_output_tokens"].as_i64().unwrap() > 0);
    }
);
