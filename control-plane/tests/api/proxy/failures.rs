//! When things go wrong upstream or downstream: timeouts, unreachable providers, a client
//! that hangs up mid-stream (the provider is cancelled, the usage still counted).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{eventually, simple_chat, MockProvider, TestProxy};
use crate::helpers::{expect_status, TestApp};

db_test!(a_silent_provider_is_a_504_and_an_absent_one_a_502, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start_with(&app, &provider, |config| {
        config.first_byte_timeout_ms = 300;
        config.idle_timeout_ms = 300;
    })
    .await;
    let (_, raw_key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "timeouts" }))
        .await;
    let took = expect_refusal(&proxy, &raw_key, "mock-hang", 504, "upstream_timeout").await;
    assert!(took < Duration::from_secs(5));
    // An answer that falls silent after its headers is a timeout too.
    let took = expect_refusal(&proxy, &raw_key, "mock-stall", 504, "upstream_timeout").await;
    assert!(took < Duration::from_secs(5));

    // A provider nobody listens for.
    let refusing = crate::servers::RefusingPort::new();
    let dead = MockProvider::elsewhere(format!("127.0.0.1:{}", refusing.port));
    let proxy = TestProxy::start(&app, &dead).await;
    expect_refusal(&proxy, &raw_key, "gpt-4o-mini", 502, "upstream_unreachable").await;

    // A provider whose host does not complete the handshake: a listener with a backlog
    // of 0 and one connection waiting in it, so the kernel drops the next SYN.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let full = socket.listen(0).unwrap();
    let address = full.local_addr().unwrap();
    let _waiting = std::net::TcpStream::connect(address).unwrap();
    let silent = MockProvider::elsewhere(address);
    let proxy =
        TestProxy::start_with(&app, &silent, |config| config.connect_timeout_ms = 300).await;
    let took = expect_refusal(&proxy, &raw_key, "gpt-4o-mini", 504, "upstream_timeout").await;
    assert!(took < Duration::from_secs(5));
});

db_test!(
    a_stream_lives_while_the_provider_speaks_and_breaks_when_it_falls_silent,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start_with(&app, &provider, |config| {
            config.idle_timeout_ms = 300;
        })
        .await;
        let (_, raw_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "silences" }))
            .await;
        let stream = |model: &str| {
            let mut request = simple_chat(model);
            request["stream"] = json!(true);
            request
        };
        // Fifty events 50 ms apart: 2.5 s, far past the idle timeout, never silent for it.
        let response = proxy.chat(&raw_key, stream("mock-slow-stream")).await;
        assert_eq!(response.status(), 200);
        let body = response.text().await.unwrap();
        assert_eq!(body.matches("token ").count(), 49, "{body}");
        assert!(body.ends_with("data: [DONE]\n\n"), "{body}");

        // One event, then silence: the stream is broken off after the idle timeout, without
        // its end, and the event that came is still relayed.
        let started = Instant::now();
        let response = proxy.chat(&raw_key, stream("mock-stall-stream")).await;
        assert_eq!(response.status(), 200);
        let body = response.text().await.unwrap_or_default();
        let took = started.elapsed();
        assert!(body.contains("Hello"), "{body}");
        assert!(!body.contains("[DONE]"), "{body}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }
);

/// A chat request for `model` is refused with `status` and `code`; how long that took.
async fn expect_refusal(
    proxy: &TestProxy,
    key: &str,
    model: &str,
    status: u16,
    code: &str,
) -> Duration {
    let started = Instant::now();
    let response = proxy.chat(key, simple_chat(model)).await;
    assert_eq!(response.status().as_u16(), status, "{model}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], json!(code), "{model}");
    started.elapsed()
}

/// Waits until `provider` saw one answer abandoned and the ledger holds that one request;
/// the tenant's cost summary then.
async fn abandoned_and_recorded(provider: &MockProvider, app: &TestApp, admin: &str) -> Value {
    eventually(Duration::from_secs(5), || async {
        (provider.abandoned.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    eventually(Duration::from_secs(10), || async {
        let body = expect_status(app.get("/cost/summary", admin).await, 200).await;
        (body["data"]["total_requests"] == json!(1)).then_some(body)
    })
    .await
}

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
        // The cut-short request is recorded with estimated tokens.
        let summary = abandoned_and_recorded(&provider, &app, &tenant.admin_key).await;
        assert!(summary["data"]["total_input_tokens"].as_i64().unwrap() > 0);
        assert!(summary["data"]["total_output_tokens"].as_i64().unwrap() > 0);
    }
);

db_test!(
    a_client_hanging_up_before_the_answer_cancels_the_provider,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (tenant, raw_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "hasty" }))
            .await;
        // The provider would take 30 s; the client gives up after 300 ms.
        let gave_up = proxy
            .client
            .post(format!("{}/v1/chat/completions", proxy.base))
            .bearer_auth(&raw_key)
            .json(&simple_chat("mock-hang"))
            .timeout(Duration::from_millis(300))
            .send()
            .await;
        assert!(gave_up.is_err_and(|e| e.is_timeout()));
        // The proxy notices, and hangs up on the provider well before its timeout. The
        // request is not free: its input is estimated from its size, with no output.
        let summary = abandoned_and_recorded(&provider, &app, &tenant.admin_key).await;
        assert!(summary["data"]["total_input_tokens"].as_i64().unwrap() > 0);
        assert_eq!(summary["data"]["total_output_tokens"], json!(0));
        // The proxy's own connection to the provider stays usable for the next request.
        assert_eq!(
            proxy
                .chat(&raw_key, simple_chat("gpt-4o-mini"))
                .await
                .status(),
            200
        );
    }
);

/// A provider that answers the first request on each connection and keeps it alive, but
/// drops the connection, unanswered, when a second request arrives on it: what a proxy
/// sees when a provider closes an idle pooled connection just as it is reused.
async fn provider_dropping_reused_connections() -> (MockProvider, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let counted = counted.clone();
            tokio::spawn(async move {
                for answered in 0.. {
                    // Read one request: its header, then `content-length` bytes.
                    let mut buffer = Vec::new();
                    let header_end = loop {
                        let mut chunk = [0u8; 4096];
                        let n = socket.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buffer.extend_from_slice(&chunk[..n]);
                        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            break at + 4;
                        }
                    };
                    let head = String::from_utf8_lossy(&buffer[..header_end]).to_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|line| line.strip_prefix("content-length:"))
                        .and_then(|value| value.trim().parse().ok())
                        .unwrap_or(0);
                    while buffer.len() < header_end + length {
                        let mut chunk = [0u8; 4096];
                        let n = socket.read(&mut chunk).await.unwrap_or(0);
                        if n == 0 {
                            return;
                        }
                        buffer.extend_from_slice(&chunk[..n]);
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    if answered == 1 {
                        return; // dropped, unanswered
                    }
                    let body = r#"{"id":"c","object":"chat.completion","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    socket.write_all(response.as_bytes()).await.unwrap();
                }
            });
        }
    });
    (MockProvider::elsewhere(address), requests)
}

db_test!(
    a_pooled_connection_the_provider_drops_is_retried_once_on_a_new_one,
    |app| {
        let (provider, requests) = provider_dropping_reused_connections().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (_, raw_key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "pooled" }))
            .await;
        const ANSWERED: usize = 4;
        for answered in 1..=ANSWERED {
            let response = proxy.chat(&raw_key, simple_chat("gpt-4o-mini")).await;
            assert_eq!(response.status().as_u16(), 200);
            response.bytes().await.unwrap();
            // The proxy returns the connection to its pool after answering, then counts
            // the request: once counted, the next request usually finds the connection
            // pooled (on a loaded machine it may still open a new one, hence several).
            eventually(Duration::from_secs(10), || async {
                (forwarded(&proxy).await == answered as u64).then_some(())
            })
            .await;
        }
        // Every request was answered, and a request that met a pooled connection the
        // provider dropped reached it twice: on that connection, then on a new one. Each
        // is retried at most once (a second drop would have been an error answer).
        let reached = requests.load(Ordering::SeqCst);
        assert!(
            (ANSWERED + 1..=2 * ANSWERED - 1).contains(&reached),
            "{reached} requests reached the provider for {ANSWERED} answers"
        );
    }
);

// A provider pointed at a local server (vLLM, llama.cpp, Ollama) with no key is
// forwarded to without one; a provider at its own default endpoint still needs its key.
db_test!(
    a_local_provider_without_a_key_is_forwarded_to_without_one,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start_configured(
            &app,
            &provider,
            |_| {},
            |providers| {
                providers.openai.api_key = None;
                providers.anthropic = warden_proxy::config::ProvidersConfig::default().anthropic;
            },
        )
        .await;
        let (_, key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "local" }))
            .await;
        let served = proxy.chat(&key, simple_chat("gpt-4o-mini")).await;
        assert_eq!(served.status(), 200);
        let received = provider.last();
        assert!(
            received.headers.get("authorization").is_none(),
            "{:?}",
            received.headers
        );
        let refused = proxy.chat(&key, simple_chat("claude-haiku-4-5")).await;
        assert_eq!(refused.status(), 503);
        let body: serde_json::Value = refused.json().await.unwrap();
        assert_eq!(body["error"]["code"], "provider_not_configured");
    }
);

db_test!(an_unreadable_body_is_refused_naming_what_is_wrong, |app| {
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start(&app, &provider).await;
    let (_, key, _) = proxy
        .tenant_with_key(&app, json!({ "developer_label": "sloppy" }))
        .await;
    let cases = [
        (json!({ "model": 5, "messages": [] }), "`model`"),
        (
            json!({ "model": "gpt-4o-mini", "max_tokens": 1e30, "messages": [] }),
            "`max_tokens`",
        ),
        (
            json!({ "model": "gpt-4o-mini", "stream": "yes", "messages": [] }),
            "`stream`",
        ),
    ];
    for (body, field) in cases {
        let response = proxy.chat(&key, body.clone()).await;
        assert_eq!(response.status(), 400, "{body}");
        let answer: Value = response.json().await.unwrap();
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{body}: {message}");
    }
    assert!(provider.requests().is_empty());
});

/// The requests `proxy` forwarded, by its metrics.
async fn forwarded(proxy: &TestProxy) -> u64 {
    proxy
        .metrics()
        .await
        .lines()
        .filter(|line| line.starts_with("warden_proxy_requests_total{"))
        .filter(|line| line.contains("decision=\"forwarded\""))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}
