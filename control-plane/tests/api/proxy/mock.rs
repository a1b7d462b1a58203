//! A local OpenAI-compatible provider that records what it receives.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

/// One request as the provider received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

#[derive(Clone)]
pub struct MockProvider {
    /// The base URL the proxy is configured with (`.../v1`).
    pub base: String,
    pub received: Arc<Mutex<Vec<Received>>>,
    /// Slow streams (`mock-slow-stream`) and hanging answers (`mock-hang`) abandoned
    /// before their end: the proxy hung up on the provider.
    pub abandoned: Arc<AtomicUsize>,
}

#[derive(Clone)]
struct MockState {
    received: Arc<Mutex<Vec<Received>>>,
    abandoned: Arc<AtomicUsize>,
}

/// Tokens the mock reports for every chat completion.
pub const PROMPT_TOKENS: i64 = 11;
pub const COMPLETION_TOKENS: i64 = 7;

impl MockProvider {
    /// Plain HTTP on a free port.
    pub async fn start() -> MockProvider {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (router, state) = router();
        tokio::spawn(async move { axum::serve(listener, router).await });
        MockProvider {
            base: format!("http://{addr}/v1"),
            received: state.received,
            abandoned: state.abandoned,
        }
    }

    /// HTTPS for `localhost` with a certificate of `ca`.
    pub async fn start_tls(ca: &super::tls::TestCa) -> MockProvider {
        let listener = super::tls::TlsListener::bind(ca).await;
        let port = listener.port();
        let (router, state) = router();
        tokio::spawn(async move { axum::serve(listener, router).await });
        MockProvider {
            base: format!("https://localhost:{port}/v1"),
            received: state.received,
            abandoned: state.abandoned,
        }
    }

    /// A provider at `address` that this mock does not serve (nobody, or a test's own
    /// server): nothing is recorded.
    pub fn elsewhere(address: impl std::fmt::Display) -> MockProvider {
        MockProvider {
            base: format!("http://{address}/v1"),
            received: Arc::default(),
            abandoned: Arc::default(),
        }
    }

    pub fn requests(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    pub fn last(&self) -> Received {
        self.requests()
            .pop()
            .expect("the provider received a request")
    }
}

fn router() -> (Router, MockState) {
    let state = MockState {
        received: Arc::default(),
        abandoned: Arc::default(),
    };
    #[allow(clippy::disallowed_methods)]
    let router = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state.clone());
    (router, state)
}

fn note(state: &Mutex<Vec<Received>>, path: &str, headers: HeaderMap, body: &Bytes) {
    state.lock().unwrap().push(Received {
        path: path.to_owned(),
        headers,
        body: body.clone(),
    });
}

async fn chat(State(state): State<MockState>, headers: HeaderMap, body: Bytes) -> Response {
    note(&state.received, "/v1/chat/completions", headers, &body);
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let model = request["model"].as_str().unwrap_or("unknown").to_owned();
    // A behaviour named in `user` keeps a priced model name (the exit-path tests price
    // what failed requests were charged); otherwise the model names it.
    let behaviour = request["user"]
        .as_str()
        .filter(|user| user.starts_with("mock-"))
        .unwrap_or(&model)
        .to_owned();
    if let Some(status) = behaviour.strip_prefix("mock-status-") {
        // A provider's error answer, as JSON whether or not a stream was asked for.
        let status = StatusCode::from_u16(status.parse().unwrap_or(500)).unwrap();
        let error = json!({ "error": { "message": "the mock refused", "type": "mock_error", "code": null } });
        return (status, axum::Json(error)).into_response();
    }
    if behaviour == "mock-cut-stream" {
        return cut_stream(&model);
    }
    let model = model.as_str();
    let behaviour = behaviour.as_str();
    if behaviour == "mock-error" {
        let error = json!({ "error": { "message": "the mock failed", "type": "server_error", "code": null } });
        return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error)).into_response();
    }
    if behaviour == "mock-hang" {
        let mut guard = Abandoned(false, state.abandoned.clone());
        tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        guard.0 = true;
    }
    if behaviour == "mock-stall" {
        // Headers and the start of a body, then silence.
        let start = futures_util::stream::once(async { Ok::<_, std::convert::Infallible>("{") });
        let silence = futures_util::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Ok("}")
        });
        return (
            [("content-type", "application/json")],
            axum::body::Body::from_stream(futures_util::StreamExt::chain(start, silence)),
        )
            .into_response();
    }
    if behaviour == "mock-stall-stream" {
        // A stream's first event, then silence.
        let chunk = json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0,
            "delta": { "content": "Hello" } }], "usage": null });
        let start = futures_util::stream::once(async move {
            Ok::<_, std::convert::Infallible>(format!("data: {chunk}\n\n"))
        });
        let silence = futures_util::stream::once(async {
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
            Ok("data: [DONE]\n\n".to_owned())
        });
        return (
            [("content-type", "text/event-stream")],
            axum::body::Body::from_stream(futures_util::StreamExt::chain(start, silence)),
        )
            .into_response();
    }
    if behaviour == "mock-slow-stream" {
        let usage = request["stream_options"]["include_usage"] == json!(true);
        return slow_stream(state.abandoned.clone(), usage);
    }
    if request["stream"] == json!(true) {
        let mut events = String::new();
        for word in ["Hello", " from", " the mock"] {
            let chunk = json!({ "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": [{ "index": 0, "delta": { "content": word }, "finish_reason": null }],
                "usage": null });
            events.push_str(&format!("data: {chunk}\n\n"));
        }
        if request["stream_options"]["include_usage"] == json!(true) {
            let usage = json!({ "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": [],
                "usage": { "prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                           "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS } });
            events.push_str(&format!("data: {usage}\n\n"));
        }
        events.push_str("data: [DONE]\n\n");
        return ([("content-type", "text/event-stream")], events).into_response();
    }
    let answer = json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": "Hello from the mock" },
                      "finish_reason": "stop" }],
        "usage": { "prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                   "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS },
    });
    ([("x-request-id", "req-mock-1")], axum::Json(answer)).into_response()
}

/// Counts an answer dropped before it finished (`.0` still false): the proxy hung up.
struct Abandoned(bool, Arc<AtomicUsize>);

impl Drop for Abandoned {
    fn drop(&mut self) {
        if !self.0 {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Fifty chunks, 50 ms apart (then the usage chunk when `usage`, and `[DONE]`); notes
/// when the reader goes away before the end.
fn slow_stream(abandoned: Arc<AtomicUsize>, usage: bool) -> Response {
    let guard = Abandoned(false, abandoned);
    let chunks = futures_util::stream::unfold((0, guard), move |(n, mut guard)| async move {
        if n == 50 {
            guard.0 = true;
            drop(guard);
            return None;
        }
        if n == 49 {
            let last = if usage {
                let usage = json!({ "object": "chat.completion.chunk", "choices": [],
                    "usage": { "prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                               "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS } });
                format!("data: {usage}\n\ndata: [DONE]\n\n")
            } else {
                "data: [DONE]\n\n".to_owned()
            };
            return Some((Ok(last), (n + 1, guard)));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let chunk = json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0,
            "delta": { "content": "token " } }], "usage": null });
        Some((
            Ok::<_, std::convert::Infallible>(format!("data: {chunk}\n\n")),
            (n + 1, guard),
        ))
    });
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(chunks),
    )
        .into_response()
}

/// Three chunks of text ("Hello from the mock", 19 characters), then the connection
/// breaks: a stream cut short before its usage.
fn cut_stream(model: &str) -> Response {
    let chunks: Vec<Result<String, std::io::Error>> = ["Hello", " from", " the mock"]
        .iter()
        .map(|word| {
            let chunk = json!({ "id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                "model": model, "choices": [{ "index": 0, "delta": { "content": word }, "finish_reason": null }] });
            Ok(format!("data: {chunk}\n\n"))
        })
        .collect();
    // The break comes once the text has left, as a provider's dropped connection would.
    let broken = futures_util::stream::once(async {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        Err(std::io::Error::other("the mock breaks the stream"))
    });
    let body = futures_util::StreamExt::chain(futures_util::stream::iter(chunks), broken);
    (
        [("content-type", "text/event-stream")],
        axum::body::Body::from_stream(body),
    )
        .into_response()
}

async fn embeddings(State(state): State<MockState>, headers: HeaderMap, body: Bytes) -> Response {
    note(&state.received, "/v1/embeddings", headers, &body);
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    axum::Json(json!({
        "object": "list",
        "data": [{ "object": "embedding", "index": 0, "embedding": [0.25, -0.5, 0.125] }],
        "model": request["model"],
        "usage": { "prompt_tokens": 5, "total_tokens": 5 },
    }))
    .into_response()
}

/// Tokens the mock reports for every response of the Responses API (input, cached
/// input, output, reasoning).
pub const RESPONSE_TOKENS: (i64, i64, i64, i64) = (23, 5, 13, 4);

/// OpenAI's Responses API: a whole response, or its typed events when streamed (usage in
/// `response.completed`, as OpenAI always sends it).
async fn responses(State(state): State<MockState>, headers: HeaderMap, body: Bytes) -> Response {
    note(&state.received, "/v1/responses", headers, &body);
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let (input, cached, output, reasoning) = RESPONSE_TOKENS;
    let message = |status: &str, text: &str| {
        json!({ "type": "message", "id": "msg_mock", "status": status, "role": "assistant",
                "content": [{ "type": "output_text", "text": text, "annotations": [] }] })
    };
    let response = |status: &str, output_items: Value, usage: Value| {
        json!({ "id": "resp_mock", "object": "response", "created_at": 0, "status": status,
                "model": request["model"], "output": output_items, "parallel_tool_calls": true,
                "tool_choice": "auto", "tools": [], "usage": usage,
                "previous_response_id": request["previous_response_id"] })
    };
    let usage = json!({ "input_tokens": input, "input_tokens_details": { "cached_tokens": cached },
        "output_tokens": output, "output_tokens_details": { "reasoning_tokens": reasoning },
        "total_tokens": input + output });
    if request["stream"] != json!(true) {
        let answer = response(
            "completed",
            json!([message("completed", "Hello from the mock")]),
            usage,
        );
        return axum::Json(answer).into_response();
    }
    let mut events = Vec::new();
    events.push(json!({ "type": "response.created", "sequence_number": 0,
        "response": response("in_progress", json!([]), Value::Null) }));
    for word in ["Hello", " from", " the mock"] {
        events.push(
            json!({ "type": "response.output_text.delta", "sequence_number": events.len(),
            "item_id": "msg_mock", "output_index": 0, "content_index": 0, "delta": word }),
        );
    }
    events.push(json!({ "type": "response.completed", "sequence_number": events.len(),
        "response": response("completed", json!([message("completed", "Hello from the mock")]), usage) }));
    let text: String = events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap()
            )
        })
        .collect();
    ([("content-type", "text/event-stream")], text).into_response()
}

/// Tokens the mock reports for every Anthropic message (input, cache writes, cache
/// reads, output).
pub const MESSAGE_TOKENS: (i64, i64, i64, i64) = (17, 3, 8, 9);

/// Anthropic's Messages API: a whole message, or its events when streamed (the input's
/// usage in `message_start`, the output's in `message_delta`).
async fn messages(State(state): State<MockState>, headers: HeaderMap, body: Bytes) -> Response {
    note(&state.received, "/v1/messages", headers, &body);
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let (input, written, read, output) = MESSAGE_TOKENS;
    let message = |content: Value, usage: Value| {
        json!({ "id": "msg_mock", "type": "message", "role": "assistant", "model": request["model"],
                "content": content, "stop_reason": "end_turn", "stop_sequence": null, "usage": usage })
    };
    if request["stream"] != json!(true) {
        let usage = json!({ "input_tokens": input, "cache_creation_input_tokens": written,
                            "cache_read_input_tokens": read, "output_tokens": output });
        let content = json!([{ "type": "text", "text": "Hello from the mock" }]);
        return axum::Json(message(content, usage)).into_response();
    }
    let mut events = vec![
        (
            "message_start",
            json!({ "type": "message_start", "message": message(json!([]), json!({
            "input_tokens": input, "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read, "output_tokens": 1 })) }),
        ),
        (
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0,
            "content_block": { "type": "text", "text": "" } }),
        ),
    ];
    for word in ["Hello", " from", " the mock"] {
        events.push((
            "content_block_delta",
            json!({ "type": "content_block_delta", "index": 0,
            "delta": { "type": "text_delta", "text": word } }),
        ));
    }
    events.push((
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": 0 }),
    ));
    events.push((
        "message_delta",
        json!({ "type": "message_delta",
        "delta": { "stop_reason": "end_turn", "stop_sequence": null },
        "usage": { "output_tokens": output } }),
    ));
    events.push(("message_stop", json!({ "type": "message_stop" })));
    let text: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    ([("content-type", "text/event-stream")], text).into_response()
}

async fn count_tokens(State(state): State<MockState>, headers: HeaderMap, body: Bytes) -> Response {
    note(&state.received, "/v1/messages/count_tokens", headers, &body);
    axum::Json(json!({ "input_tokens": 42 })).into_response()
}
