//! A fast OpenAI-compatible mock provider for load tests: answers every POST at once with
//! a fixed chat completion, or (when the body asks for `"stream": true`) a fixed stream
//! of five text chunks and a finish chunk, then a usage chunk when the body asks for it
//! (`"stream_options": {"include_usage": true}`, as the proxy does; the chunks before
//! it then carry `"usage":null`, as OpenAI's do), then `[DONE]`.
//! `POST /v1/responses` gets the Responses API's equivalents: a fixed response, or its
//! typed events (created, five text deltas, completed with usage); `POST /v1/messages`
//! Anthropic's (a message, or message_start, five text deltas, message_delta with the
//! output's usage, message_stop).
//! Hyper directly, one task per connection, no logging.
//!
//! A stream goes out whole with a `Content-Length` by default. With `--chunked` it goes
//! out as real providers send one: `Transfer-Encoding: chunked`, an HTTP chunk per
//! event (all ready at once, so they may share a packet; nothing waits between them).
//!
//! With `--pace FIRST_MS,CHUNKS,GAP_MS` a streamed chat completion is paced as a model
//! generates one: the answer starts after `FIRST_MS`, then `CHUNKS` content chunks go
//! out `GAP_MS` apart (chunked), the finish and usage chunks and `[DONE]` with the last. The stream
//! load test (`streams.sh`) runs it with `100,50,10`: about 0.6 s a stream.
//!
//! Run: `mock-provider 127.0.0.1:9100 [--chunked] [--pace 100,50,10]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

const COMPLETION: &str = r#"{"id":"chatcmpl-load","object":"chat.completion","created":0,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello from the load-test mock."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}"#;

/// A chat completion chunk of one choice with `delta` (JSON) and `finish` (JSON), as
/// OpenAI streams it: its service tier, system fingerprint and `logprobs` in every
/// chunk, and with usage asked for, `"usage":null` in every chunk before the usage
/// chunk.
fn choice_chunk(delta: &str, finish: &str, with_usage: bool) -> String {
    let usage = if with_usage { ",\"usage\":null" } else { "" };
    format!(
        "data: {{\"id\":\"chatcmpl-load\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"gpt-4o-mini\",\"service_tier\":\"default\",\"system_fingerprint\":\"fp_560af6e559\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]{usage}}}\n\n"
    )
}

/// The stream's events, each with its blank line: five words, the finish chunk (an
/// empty delta and the finish reason), the usage chunk when asked, `[DONE]`.
fn stream_events(with_usage: bool) -> Vec<String> {
    let mut events: Vec<String> = ["Hello", " from", " the", " load-test", " mock."]
        .iter()
        .map(|word| choice_chunk(&format!("{{\"content\":\"{word}\"}}"), "null", with_usage))
        .collect();
    events.push(choice_chunk("{}", "\"stop\"", with_usage));
    if with_usage {
        events.push("data: {\"id\":\"chatcmpl-load\",\"object\":\"chat.completion.chunk\",\"created\":0,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":8,\"total_tokens\":20}}\n\n".to_owned());
    }
    events.push("data: [DONE]\n\n".to_owned());
    events
}

const RESPONSE: &str = r#"{"id":"resp_load","object":"response","created_at":0,"status":"completed","model":"gpt-4o-mini","output":[{"type":"message","id":"msg_load","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello from the load-test mock.","annotations":[]}]}],"usage":{"input_tokens":12,"input_tokens_details":{"cached_tokens":0},"output_tokens":8,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":20}}"#;

const MESSAGE: &str = r#"{"id":"msg_load","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello from the load-test mock."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":8}}"#;

/// A streamed message's events, each with its blank line.
fn message_events() -> Vec<String> {
    let mut events = vec![
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_load\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n".to_owned(),
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_owned(),
    ];
    for word in ["Hello", " from", " the", " load-test", " mock."] {
        events.push(format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{word}\"}}}}\n\n"
        ));
    }
    events.push(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
            .to_owned(),
    );
    events.push("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":8}}\n\n".to_owned());
    events.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_owned());
    events
}

/// A streamed response's events, each with its blank line.
fn response_events() -> Vec<String> {
    let mut events = vec![
        "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_load\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n".to_owned(),
    ];
    for (n, word) in ["Hello", " from", " the", " load-test", " mock."]
        .iter()
        .enumerate()
    {
        events.push(format!(
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{},\"item_id\":\"msg_load\",\"output_index\":0,\"content_index\":0,\"delta\":\"{word}\"}}\n\n",
            n + 1
        ));
    }
    events.push(format!(
        "event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":6,\"response\":{RESPONSE}}}\n\n"
    ));
    events
}

/// A paced stream's events: `chunks` content chunks, the last one carrying the usage
/// chunk (when asked) and `[DONE]`.
fn paced_events(chunks: usize, with_usage: bool) -> Vec<Bytes> {
    let chunk = choice_chunk("{\"content\":\" token\"}", "null", with_usage);
    let mut events: Vec<String> = vec![chunk; chunks.max(1)];
    let tail = stream_events(with_usage);
    // The finish chunk, the usage chunk (when asked) and [DONE], after the five fixed
    // words.
    for event in &tail[5..] {
        events.last_mut().unwrap().push_str(event);
    }
    events.into_iter().map(Bytes::from).collect()
}

/// How a paced stream goes: its first byte after `first`, `chunks` chunks `gap` apart.
#[derive(Clone, Copy)]
struct Pace {
    first: Duration,
    chunks: usize,
    gap: Duration,
}

impl Pace {
    /// `FIRST_MS,CHUNKS,GAP_MS`.
    fn parse(text: &str) -> Option<Pace> {
        let mut parts = text.split(',').map(|part| part.trim().parse::<u64>().ok());
        let (first, chunks, gap) = (parts.next()??, parts.next()??, parts.next()??);
        Some(Pace {
            first: Duration::from_millis(first),
            chunks: usize::try_from(chunks).ok()?,
            gap: Duration::from_millis(gap),
        })
    }
}

/// A paced stream's body: an event, then `gap`, then the next.
struct Paced {
    events: VecDeque<Bytes>,
    gap: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
    waiting: bool,
}

impl Paced {
    fn new(events: Vec<Bytes>, gap: Duration) -> Paced {
        Paced {
            events: events.into(),
            gap,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            waiting: false,
        }
    }
}

#[cfg(test)]
fn stream_body(with_usage: bool) -> String {
    stream_events(with_usage).concat()
}

/// An answer's body: whole, with its length known (`Content-Length`), or in pieces of
/// unknown total (hyper frames each as an HTTP chunk).
enum Answer {
    Whole(Option<Bytes>),
    Chunks(VecDeque<Bytes>),
    Paced(Paced),
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match self.get_mut() {
            Answer::Whole(body) => body.take(),
            Answer::Chunks(chunks) => chunks.pop_front(),
            Answer::Paced(paced) => {
                if paced.waiting {
                    ready!(paced.sleep.as_mut().poll(cx));
                    paced.waiting = false;
                }
                let next = paced.events.pop_front();
                if next.is_some() && !paced.events.is_empty() {
                    let at = tokio::time::Instant::now() + paced.gap;
                    paced.sleep.as_mut().reset(at);
                    paced.waiting = true;
                }
                next
            }
        };
        Poll::Ready(next.map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Whole(body) => body.is_none(),
            Answer::Chunks(chunks) => chunks.is_empty(),
            Answer::Paced(paced) => paced.events.is_empty(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Answer::Whole(body) => {
                SizeHint::with_exact(body.as_ref().map_or(0, |b| b.len() as u64))
            }
            Answer::Chunks(_) | Answer::Paced(_) => SizeHint::default(),
        }
    }
}

/// A stream, whole and as its events, made once.
struct Stream {
    whole: Bytes,
    events: Vec<Bytes>,
}

impl Stream {
    fn new(with_usage: bool) -> Stream {
        Stream::of(stream_events(with_usage))
    }

    fn of(events: Vec<String>) -> Stream {
        Stream {
            whole: Bytes::from(events.concat()),
            events: events.into_iter().map(Bytes::from).collect(),
        }
    }

    fn answer(&self, chunked: bool) -> Answer {
        if chunked {
            Answer::Chunks(self.events.iter().cloned().collect())
        } else {
            Answer::Whole(Some(self.whole.clone()))
        }
    }
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let chunked = args.iter().any(|arg| arg == "--chunked");
    let addr: SocketAddr = args
        .iter()
        .find(|arg| !arg.starts_with("--"))
        .map_or("127.0.0.1:9100", String::as_str)
        .parse()
        .expect("an address such as 127.0.0.1:9100");
    let pace = args
        .iter()
        .position(|arg| arg == "--pace")
        .map(|at| Pace::parse(args.get(at + 1).map_or("", String::as_str)))
        .map(|pace| pace.expect("--pace FIRST_MS,CHUNKS,GAP_MS"));
    // A backlog as large as the proxies' in front of it: a burst of their new upstream
    // connections must not overflow the mock's queue and be counted against them.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_reuseaddr(true).unwrap();
    socket.bind(addr).unwrap();
    let listener = socket.listen(4096).unwrap();
    // Without and with the usage chunk; a streamed response.
    let streams = std::sync::Arc::new([
        Stream::new(false),
        Stream::new(true),
        Stream::of(response_events()),
        Stream::of(message_events()),
    ]);
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
                let path = request.uri().path();
                let (responses_api, messages_api) =
                    (path.ends_with("/responses"), path.ends_with("/messages"));
                async move {
                    let body = request
                        .into_body()
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    let (content_type, payload) = if let (Some(pace), true, false, false) =
                        (pace, flag(&body, STREAM), responses_api, messages_api)
                    {
                        tokio::time::sleep(pace.first).await;
                        let events = paced_events(pace.chunks, flag(&body, INCLUDE_USAGE));
                        (
                            "text/event-stream",
                            Answer::Paced(Paced::new(events, pace.gap)),
                        )
                    } else if flag(&body, STREAM) {
                        let stream = if responses_api {
                            &streams[2]
                        } else if messages_api {
                            &streams[3]
                        } else {
                            &streams[usize::from(flag(&body, INCLUDE_USAGE))]
                        };
                        ("text/event-stream", stream.answer(chunked))
                    } else {
                        let whole = if responses_api {
                            RESPONSE
                        } else if messages_api {
                            MESSAGE
                        } else {
                            COMPLETION
                        };
                        (
                            "application/json",
                            Answer::Whole(Some(Bytes::from_static(whole.as_bytes()))),
                        )
                    };
                    Ok::<_, Infallible>(
                        Response::builder()
                            .header("content-type", content_type)
                            .body(payload)
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
    use http_body_util::BodyExt;
    use hyper::body::Body;

    use super::{
        flag, message_events, paced_events, response_events, stream_body, Answer, Pace, Paced,
        Stream, INCLUDE_USAGE, MESSAGE, RESPONSE, STREAM,
    };

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
        // As OpenAI's: with usage asked for, every chunk before the usage chunk says
        // `"usage":null`; the last choice chunk carries the finish reason.
        let with_usage = stream_body(true);
        let chunks: Vec<&str> = with_usage
            .split("\n\n")
            .filter(|c| c.contains('{'))
            .collect();
        assert_eq!(chunks.len(), 7);
        assert!(chunks[..6].iter().all(|c| c.ends_with(",\"usage\":null}")));
        assert!(chunks[5].contains("\"finish_reason\":\"stop\""));
    }

    #[test]
    fn responses_are_valid_json_with_usage_at_the_end() {
        let plain: serde_json::Value = serde_json::from_str(RESPONSE).unwrap();
        assert_eq!(plain["usage"]["input_tokens"], 12);
        let events = response_events();
        for event in &events {
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            let _: serde_json::Value = serde_json::from_str(data).unwrap();
        }
        assert!(events
            .last()
            .unwrap()
            .starts_with("event: response.completed\n"));
        let message: serde_json::Value = serde_json::from_str(MESSAGE).unwrap();
        assert_eq!(message["usage"]["output_tokens"], 8);
        for event in message_events() {
            let data = event
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap();
            let _: serde_json::Value = serde_json::from_str(data).unwrap();
        }
    }

    #[tokio::test]
    async fn a_chunked_stream_has_no_length_and_its_events_arrive_one_by_one() {
        let stream = Stream::new(true);
        let whole = stream.answer(false);
        assert_eq!(whole.size_hint().exact(), Some(stream.whole.len() as u64));
        let mut chunked = stream.answer(true);
        assert_eq!(
            chunked.size_hint().exact(),
            None,
            "no Content-Length: chunked"
        );
        let mut frames = Vec::new();
        while let Some(frame) = chunked.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(frames.len(), 8, "five words, the finish, usage, [DONE]");
        assert_eq!(frames.concat(), stream.whole.to_vec());
    }

    #[tokio::test(start_paused = true)]
    async fn a_paced_stream_sends_its_chunks_a_gap_apart_and_ends_with_done() {
        let pace = Pace::parse("100,50,10").unwrap();
        assert_eq!((pace.chunks, pace.gap.as_millis()), (50, 10));
        assert!(Pace::parse("100,50").is_none());
        let start = tokio::time::Instant::now();
        let mut body = Answer::Paced(Paced::new(paced_events(pace.chunks, true), pace.gap));
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert_eq!(frames.len(), 50);
        assert_eq!(start.elapsed().as_millis(), 490, "49 gaps of 10 ms");
        let text = String::from_utf8(frames.concat()).unwrap();
        assert!(text.contains("\"usage\"") && text.ends_with("data: [DONE]\n\n"));
    }
}
