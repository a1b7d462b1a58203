//! A fast OpenAI-compatible mock provider for load tests: answers every POST at once with
//! a fixed chat completion, or (when the body asks for `"stream": true`) a fixed stream
//! of five chunks plus usage. Hyper directly, one task per connection, no logging.
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

fn stream_body() -> String {
    let mut events = String::new();
    for word in ["Hello", " from", " the", " load-test", " mock."] {
        events.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-load\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    events.push_str("data: {\"id\":\"chatcmpl-load\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":8,\"total_tokens\":20}}\n\ndata: [DONE]\n\n");
    events
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9100".to_owned())
        .parse()
        .expect("an address such as 127.0.0.1:9100");
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let stream = Bytes::from(stream_body());
    println!(
        "mock provider on http://{}/v1",
        listener.local_addr().unwrap()
    );
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let stream = stream.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<Incoming>| {
                let stream = stream.clone();
                async move {
                    let body = request
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let streaming = body.windows(14).any(|w| w == b"\"stream\":true")
                        || body.windows(15).any(|w| w == b"\"stream\": true");
                    let (content_type, payload) = if streaming {
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
