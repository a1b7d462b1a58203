//! Request bodies of every realistic size reach the provider byte for byte, with and
//! without `Expect: 100-continue`; bodies over the limit are a 413.

use serde_json::{json, Value};

use super::{simple_chat, MockProvider, TestProxy};

/// A chat request of exactly `size` bytes (the padding sits in a message).
fn body_of(size: usize) -> Vec<u8> {
    let frame = json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": "" }] })
        .to_string();
    let padding = "x".repeat(size - frame.len());
    let body =
        json!({ "model": "gpt-4o-mini", "messages": [{ "role": "user", "content": padding }] })
            .to_string()
            .into_bytes();
    assert_eq!(body.len(), size);
    body
}

db_test!(bodies_of_every_size_arrive_intact, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (_, raw_key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "bodies" }))
        .await;
    for size in [1024, 63 * 1024, 65 * 1024, 1024 * 1024, 10 * 1024 * 1024] {
        for expect_continue in [false, true] {
            let body = body_of(size);
            let mut request = proxy
                .client
                .post(format!("{}/v1/chat/completions", proxy.base))
                .bearer_auth(&raw_key)
                .header("content-type", "application/json")
                .body(body.clone());
            if expect_continue {
                request = request.header("expect", "100-continue");
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let answer: Value = response.json().await.unwrap();
            assert_eq!(status, 200, "{size} bytes: {answer}");
            let received = provider.last();
            assert_eq!(
                received.body.len(),
                size,
                "{size} bytes arrived as {}",
                received.body.len()
            );
            assert!(received.body == body, "{size} bytes arrived altered");
        }
    }
});

db_test!(bodies_over_the_limit_are_refused, |app| {
    let provider = MockProvider::start().await;
    let proxy =
        TestProxy::start_with(&app, &provider, |config| config.max_body_bytes = 64 * 1024).await;
    let (_, raw_key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "limits" }))
        .await;
    let response = proxy
        .client
        .post(format!("{}/v1/chat/completions", proxy.base))
        .bearer_auth(&raw_key)
        .header("content-type", "application/json")
        .body(body_of(65 * 1024))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["code"], json!("payload_too_large"));
    assert!(provider.requests().is_empty());
    // The proxy still serves the next request.
    let response = proxy.chat(&raw_key, simple_chat("gpt-4o-mini")).await;
    assert_eq!(response.status().as_u16(), 200);
});
