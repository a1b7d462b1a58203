//! A fast OpenAI-compatible mock provider for load tests: answers every POST at once with
//! a fixed chat completion, or (when the body asks for `"stream": true`) a fixed stream
//! of five chunks, then a usage chunk when the body asks for it
//! (`"stream_options": {"include_usage": true}`, as the proxy does), then `[DONE]`.
//! Hyper directly, one task per connection, no logging.
//!
//! Run: `mock-provider 127.0.0.1:9100`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

const COMPLETION: &str = r#"{"id":"chatcmpl-load","object":"chat.completion","created":0,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the load-test mock."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}"#;

fn stream_body(with_usage: bool) -> String {
    let mut events = String::new();
    for word in ["Hello", " from", " the", " load-test", " mock."] {
        events.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-load\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    if with_usage {
        events.push_str("data: {\"id\":\"chatcmpl-load\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":8,\"total_tokens\":20}}\n\n");
    }
    events.push_str("data: [DONE]\n\n");
    events
}

/// A request's `"stream": true` and `"include_usage": true`, with or without a space
/// after the colon.
const STREAM: [&[u8]; 2] = [b"\"stream\":true", b"\"stream\": true"];
const INCLUDE_USAGE: [&[u8]; 2] = [b"\"include_usage\":true", b"\"include_usage\": true"];

/// Whether the JSON text `body` holds one of `needles`. The mock does not parse its
/// requests: it has to stay far cheaper than what it measures.
fn flag(body: &[u8], needles: [&[u8]; 2]) -> bool {
    needles
        .iter()
        .any(|needle| body.windows(needle.len()).any(|w| w == *needle))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9100".to_owned())
        .parse()
        .expect("an address such as 127.0.0.1:9100");
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let streams = (
        Bytes::from(stream_body(false)),
        Bytes::from(stream_body(true)),
    );
    println!(
        "mock provider on http://{}/v1",
        listener.local_addr().unwrap()
    );
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let streams = streams.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let streams = streams.clone();
                async move {
                    let body = request
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let (content_type, payload) = if flag(&body, STREAM) {
                        let with_usage = flag(&body, INCLUDE_USAGE);
                        let stream = if with_usage { streams.1 } else { streams.0 };
                        ("text/event-stream", stream)
                    } else {
                        (
                            "application/json",
                            Bytes::from_static(COMPLETION.as_bytes()),
                        )
                    };
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", content_type)
                            .body(Full::new(payload))
                            .unwrap(),
                    )
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{flag, stream_body, INCLUDE_USAGE, STREAM};

    #[test]
    fn streams_when_asked_and_sends_usage_only_when_asked() {
        let plain = br#"{"model":"gpt-4o-mini","messages":[]}"#;
        let sdk = br#"{"messages": [], "model": "gpt-4o-mini", "stream": true}"#;
        let proxied = br#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#;
        assert!(!flag(plain, STREAM));
        assert!(flag(sdk, STREAM) && !flag(sdk, INCLUDE_USAGE));
        assert!(flag(proxied, STREAM) && flag(proxied, INCLUDE_USAGE));
        assert!(!flag(br#"{"stream":false}"#, STREAM));
        assert!(!stream_body(false).contains("usage"));
        assert!(stream_body(true).contains("\"usage\""));
        assert!(stream_body(false).ends_with("data: [DONE]\n\n"));
    }
}
