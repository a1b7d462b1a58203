//! The agents' connections as HTTP/1 sees them, spoken byte by byte: requests one after
//! another on a kept-alive connection, malformed requests refused in the error envelope,
//! idle connections closed after the keep-alive timeout, and at once when the proxy
//! stops.

use std::time::{Duration, Instant};

use serde_json::Value;
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
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&seen[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().unwrap())
                })
                .expect("a content length");
            if seen.len() >= end + 4 + length {
                let body = serde_json::from_slice(&seen[end + 4..end + 4 + length]).unwrap();
                return (head, body);
            }
        }
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
            .await
            .expect("the proxy answered within 5 s")
            .unwrap();
        assert!(
            read > 0,
            "closed mid-response: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..read]);
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
