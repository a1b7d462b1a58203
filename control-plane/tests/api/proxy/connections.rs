//! The agents' connections as HTTP/1 sees them, spoken byte by byte: requests one after
//! another on a kept-alive connection, malformed requests refused in the error envelope,
//! idle connections closed after the keep-alive timeout, and at once when the proxy
//! stops; a stream written in many bursts framed as HTTP/1.1 chunks.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{MockProvider, TestProxy};
use crate::helpers::{Backend, TestApp};

async fn connect(proxy: &TestProxy) -> TcpStream {
    TcpStream::connect(proxy.base.trim_start_matches("http://"))
        .await
        .unwrap()
}

/// One whole response read from `stream` (framed by its content length), within 5 s.
async fn read_response(stream: &mut TcpStream) -> (String, Value) {
    let mut seen = Vec::new();
    let end = read_head(stream, &mut seen).await;
    let head = String::from_utf8_lossy(&seen[..end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().unwrap())
        })
        .expect("a content length");
    while seen.len() < end + 4 + length {
        read_more(stream, &mut seen).await;
    }
    let body = serde_json::from_slice(&seen[end + 4..end + 4 + length]).unwrap();
    (head, body)
}

/// Reads from `stream` into `seen` until it holds a response's head; where the head
/// ends (before its blank line).
async fn read_head(stream: &mut TcpStream, seen: &mut Vec<u8>) -> usize {
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            return end;
        }
        read_more(stream, seen).await;
    }
}

/// More bytes from `stream` into `seen`, within 5 s; the connection must stay open.
async fn read_more(stream: &mut TcpStream, seen: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the proxy answered within 5 s")
        .unwrap();
    assert!(
        read > 0,
        "closed mid-response: {}",
        String::from_utf8_lossy(seen)
    );
    seen.extend_from_slice(&buf[..read]);
}

/// One chunked response read from `stream` as HTTP/1.1 frames it: its head, its body
/// and the number of chunks that carried it. Every size line, chunk end and the last
/// chunk are checked; nothing may follow the last chunk.
async fn read_chunked(stream: &mut TcpStream) -> (String, Vec<u8>, usize) {
    let mut seen = Vec::new();
    let head_end = read_head(stream, &mut seen).await;
    let head = String::from_utf8_lossy(&seen[..head_end]).to_string();
    assert!(
        head.to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    let (mut at, mut body, mut chunks) = (head_end + 4, Vec::new(), 0);
    loop {
        let line_end = loop {
            if let Some(end) = seen[at..].windows(2).position(|w| w == b"\r\n") {
                break at + end;
            }
            read_more(stream, &mut seen).await;
        };
        let line = std::str::from_utf8(&seen[at..line_end]).unwrap();
        let size = usize::from_str_radix(line, 16)
            .unwrap_or_else(|_| panic!("a chunk size line, not {line:?}"));
        let data = line_end + 2;
        while seen.len() < data + size + 2 {
            read_more(stream, &mut seen).await;
        }
        assert_eq!(
            &seen[data + size..data + size + 2],
            b"\r\n",
            "a chunk's end"
        );
        if size == 0 {
            assert_eq!(seen.len(), data + 2, "bytes after the last chunk");
            return (head, body, chunks);
        }
        body.extend_from_slice(&seen[data..data + size]);
        chunks += 1;
        at = data + size + 2;
    }
}

/// Sends `GET path` on `stream` and reads its response.
async fn get(stream: &mut TcpStream, path: &str) -> (String, Value) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: proxy\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    read_response(stream).await
}

/// Waits until the proxy closes `stream` and says how long that took (5 s at most).
async fn closed_within(stream: &mut TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the proxy closed the connection within 5 s");
        match read {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
    }
}

db_test!(
    requests_follow_one_another_on_a_kept_alive_connection,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let mut stream = connect(&proxy).await;
        for path in ["/healthz", "/v1/nowhere", "/readyz"] {
            let (head, body) = get(&mut stream, path).await;
            match path {
                "/v1/nowhere" => {
                    assert!(head.starts_with("HTTP/1.1 404 "), "{head}");
                    assert_eq!(body["error"]["code"], "not_found", "{body}");
                }
                _ => assert!(head.starts_with("HTTP/1.1 200 "), "{path}: {head}"),
            }
        }
    }
);

db_test!(
    a_malformed_request_gets_the_error_envelope_and_its_connection_closes,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        for (request, status, code) in [
            (
                &b"GET /healthz HTTP/1.1\r\nhost proxy\r\n\r\n"[..],
                400,
                "invalid_request",
            ),
            (
                &b"\x00\x01 not HTTP at all\r\n\r\n"[..],
                400,
                "invalid_request",
            ),
            (
                &b"CONNECT provider.example:443 HTTP/1.1\r\nhost: provider.example:443\r\n\r\n"[..],
                405,
                "method_not_allowed",
            ),
        ] {
            let mut stream = connect(&proxy).await;
            stream.write_all(request).await.unwrap();
            let (head, body) = read_response(&mut stream).await;
            let shown = String::from_utf8_lossy(request);
            assert!(
                head.starts_with(&format!("HTTP/1.1 {status} ")),
                "{shown}: {head}"
            );
            assert!(
                head.to_ascii_lowercase()
                    .contains("content-type: application/json"),
                "{head}"
            );
            assert_eq!(body["error"]["code"], code, "{shown}: {body}");
            closed_within(&mut stream).await;
        }
        // The proxy serves on.
        let mut stream = connect(&proxy).await;
        let (head, _) = get(&mut stream, "/healthz").await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    }
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_proxy_closes_its_idle_connections_at_once() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let provider = MockProvider::start().await;
    let mut proxy = TestProxy::start_with(&app, &provider, |config| {
        config.shutdown_delay_ms = 0;
    })
    .await;
    let mut idle = connect(&proxy).await;
    let (head, _) = get(&mut idle, "/healthz").await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");

    // Kept alive, waiting for a request that never comes: closed when the proxy stops
    // (within `closed_within`'s 5 s), not held until the drain's deadline (10 s).
    proxy.signal_stop();
    let waited = closed_within(&mut idle).await;
    println!("the idle connection closed {waited:?} after the signal");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_without_a_request_closes_after_the_keepalive_timeout() {
    let app = TestApp::spawn_with(Backend::Sqlite, |_| {}).await;
    let provider = MockProvider::start().await;
    let proxy = TestProxy::start_with(&app, &provider, |config| {
        config.keepalive_timeout_secs = 1;
    })
    .await;
    // Between two requests, and before the first (the default, 75 s, would outlast
    // `closed_within`'s 5 s).
    let mut kept = connect(&proxy).await;
    let (head, _) = get(&mut kept, "/healthz").await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let mut silent = connect(&proxy).await;
    let waited = closed_within(&mut kept).await;
    println!("the kept-alive connection closed after {waited:?}");
    closed_within(&mut silent).await;
}

db_test!(
    a_stream_written_in_many_bursts_is_framed_as_chunks_and_its_connection_serves_on,
    |app| {
        let provider = MockProvider::start().await;
        let proxy = TestProxy::start(&app, &provider).await;
        let (_, key, _) = proxy
            .tenant_with_key(&app, json!({ "developer_label": "framed" }))
            .await;
        let mut stream = connect(&proxy).await;
        // 49 events 50 ms apart, then [DONE]: the relay writes the header with the first
        // event and each later event as a chunk of its own framing.
        let body = json!({ "model": "gpt-4o-mini", "stream": true, "user": "mock-slow-stream",
            "messages": [{ "role": "user", "content": "Say hello" }] })
        .to_string();
        let request = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: proxy\r\nauthorization: Bearer {key}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let (head, body, chunks) = read_chunked(&mut stream).await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        let text = String::from_utf8(body).unwrap();
        assert_eq!(text.matches("\"token \"").count(), 49, "{text}");
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(
            !text.contains("prompt_tokens"),
            "the usage the proxy asked for: {text}"
        );
        assert!(
            chunks > 10,
            "{chunks} chunks: the events came in bursts of their own"
        );

        // The same connection then serves the next request.
        let (head, _) = get(&mut stream, "/healthz").await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    }
);
