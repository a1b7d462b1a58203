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

db_test!(
    large_streamed_requests_arrive_whole_with_usage_asked_for,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (_, raw_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "streams" }))
            .await;
        for size in [65 * 1024, 10 * 1024 * 1024] {
            let mut sent: Value = serde_json::from_slice(&body_of(size)).unwrap();
            sent["stream"] = json!(true);
            let response = proxy.chat(&raw_key, sent.clone()).await;
            assert_eq!(response.status().as_u16(), 200, "{size} bytes");
            let events = response.text().await.unwrap();
            assert!(
                events.ends_with("data: [DONE]\n\n"),
                "{size} bytes: {events}"
            );
            // What arrived is what was sent, plus the usage the proxy asks for.
            let received: Value = serde_json::from_slice(&provider.last().body).unwrap();
            sent["stream_options"] = json!({ "include_usage": true });
            assert!(received == sent, "{size} bytes arrived altered");
        }
    }
);

/// Reads from `stream` until `needle` has arrived (or the peer closes), within 5 s.
async fn read_until(stream: &mut tokio::net::TcpStream, needle: &[u8]) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut seen = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !seen.windows(needle.len()).any(|w| w == needle) {
        let read = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the proxy answered within 5 s")
            .unwrap();
        if read == 0 {
            break;
        }
        seen.extend_from_slice(&buf[..read]);
    }
    seen
}

db_test!(
    a_client_waiting_for_100_continue_gets_it_before_it_sends,
    |app| {
        use tokio::io::AsyncWriteExt;
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (_, raw_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "patient" }))
            .await;
        let body = body_of(1024 * 1024);
        let address = proxy.base.trim_start_matches("http://");
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {address}\r\nauthorization: Bearer {raw_key}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\r\n",
        body.len()
    );
        stream.write_all(head.as_bytes()).await.unwrap();
        // Nothing of the body is sent until the proxy says so, as a strict client does.
        let interim = read_until(&mut stream, b"\r\n\r\n").await;
        assert!(
            interim.starts_with(b"HTTP/1.1 100 Continue\r\n"),
            "{}",
            String::from_utf8_lossy(&interim)
        );
        stream.write_all(&body).await.unwrap();
        let answer = read_until(&mut stream, b"chat.completion").await;
        assert!(
            answer.starts_with(b"HTTP/1.1 200 OK\r\n"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        assert!(provider.last().body == body, "the body arrived altered");
    }
);
