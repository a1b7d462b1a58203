//! Relaying a provider's answer to the client: streamed (SSE, usage read on the way
//! and the injected usage chunk stripped) or whole (bounded), with the headers worth
//! passing on.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession;
use warden_shared::registry::Provider;

use crate::buffered_io::{BufferedIo, Cork};
use crate::endpoint::Endpoint;
use crate::log_throttle::{LogThrottle, LOG_INTERVAL};
use crate::otel::AnswerFacts;
use crate::refusal::Refusal;
use crate::respond::respond;
use crate::upstream::{refusal_of, Exchange};
use crate::usage::extract::{self, Tokens};
use crate::usage::sse::{EventReader, SseRelay};

/// A stream's events gathered beyond this are written without waiting for a pause.
const MAX_BURST: usize = 64 * 1024;
/// The largest non-streamed answer relayed (provider answers are far smaller).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Provider response headers passed on to the client; the rest stay behind.
const RELAYED_HEADERS: [&str; 4] = ["content-type", "retry-after", "x-request-id", "request-id"];
const RELAYED_PREFIXES: [&str; 3] = ["openai-", "x-ratelimit-", "anthropic-ratelimit-"];

/// How the answer went to the client, and the usage it carried.
pub struct Relayed {
    /// False when the client went away or the provider broke off: the connection to the
    /// provider is then not reusable.
    pub complete: bool,
    /// Usage as the provider reported it.
    pub usage: Option<Tokens>,
    /// Characters of generated text relayed (streams), for an estimate.
    pub generated_chars: usize,
}

pub async fn relay_stream(
    session: &mut ServerSession,
    exchange: &mut Exchange,
    endpoint: Endpoint,
    strip_usage: bool,
    added: &[(&'static str, String)],
    facts: Option<&mut AnswerFacts>,
) -> Relayed {
    let mut relay = SseRelay::new(endpoint, strip_usage);
    let outcome = |relay: &SseRelay, complete: bool| Relayed {
        complete,
        usage: relay.usage(),
        generated_chars: relay.content_chars,
    };
    let Some(header) = downstream_header(exchange, None, added) else {
        return outcome(&relay, false);
    };
    // pingora flushes a chunked response's header at once, each chunk after it is
    // written, and the end on its own. The relay instead gathers what the provider has
    // sent and writes it when the next read would wait, or with the end: the header
    // leaves with the first data, and every burst of events (a whole stream in hand, or
    // what one packet of a chunked stream held) is one write to the client. Nothing in
    // hand is held across a wait for the provider, so tokens still arrive as they come.
    // Past the header the relay frames the chunks itself (`write_in_hand`) only where
    // pingora frames this body as chunked: a status without a body (204, 304) or a HEAD
    // request gets no body from pingora, so none from the relay either.
    let own_framing = !matches!(header.status.as_u16(), 204 | 304)
        && session.req_header().method != http::Method::HEAD;
    let cork = client_cork(session);
    cork.set(true);
    if session
        .write_response_header(Box::new(header))
        .await
        .is_err()
    {
        cork.set(false);
        return outcome(&relay, false);
    }
    let mut in_hand = BytesMut::new();
    let mut facts = facts;
    let client = ClientBody {
        cork: &cork,
        own_framing,
    };
    let events = relay_events(
        session,
        exchange,
        &mut relay,
        &mut in_hand,
        &client,
        facts.as_deref_mut(),
    );
    let Some(complete) = events.await else {
        return outcome(&relay, false);
    };
    // The rest and the end, in one write: corked while the rest goes in.
    in_hand.extend_from_slice(&relay.finish(facts.map(|f| f as &mut dyn EventReader)));
    let rest = in_hand.is_empty() || write_body(session, &in_hand).await;
    cork.set(false);
    let ended = session
        .write_response_body(Bytes::new(), true)
        .await
        .is_ok();
    outcome(&relay, complete && rest && ended)
}

/// Relays the provider's events as they come: gathered in `in_hand` and written when the
/// next read would wait (or past [`MAX_BURST`]). Returns at the stream's end whether it
/// ended complete (false: the provider broke it off), or `None` when the client hung up.
async fn relay_events(
    session: &mut ServerSession,
    exchange: &mut Exchange,
    relay: &mut SseRelay,
    in_hand: &mut BytesMut,
    client: &ClientBody<'_>,
    mut facts: Option<&mut AnswerFacts>,
) -> Option<bool> {
    loop {
        let mut read = pin!(exchange.read_body());
        let next = match poll_once(&mut read).await {
            Poll::Ready(next) => next,
            Poll::Pending => {
                // The read waits with this task's waker registered (the provider's
                // socket, the silence timer). A write that goes out without waiting
                // leaves those registrations in place: the task sleeps until one wakes
                // it, without a second pass through the read's layers that would only
                // register them again (one such pass for every event of a stream).
                let mut write = pin!(write_in_hand(session, in_hand, client));
                match poll_once(&mut write).await {
                    Poll::Ready(true) => WokenFirst::new(read).await,
                    Poll::Ready(false) => return None,
                    Poll::Pending => {
                        if !write.await {
                            return None;
                        }
                        read.await
                    }
                }
            }
        };
        match next {
            Ok(Some(chunk)) => {
                if let Some(facts) = facts.as_deref_mut() {
                    facts.received(chunk);
                }
                let reader = facts.as_deref_mut().map(|f| f as &mut dyn EventReader);
                relay.push(chunk, reader, in_hand);
                // A provider that sends faster than the client reads still goes out as
                // it comes, under the client's backpressure, not gathered whole.
                if in_hand.len() >= MAX_BURST && !write_in_hand(session, in_hand, client).await {
                    return None;
                }
            }
            Ok(None) => return Some(true),
            Err(error) => {
                // A provider in trouble breaks every stream at once: a line per 10 s.
                static BROKEN: LogThrottle = LogThrottle::new(LOG_INTERVAL);
                if let Some(times) = BROKEN.hit() {
                    tracing::warn!(%error, times, "provider stream broke off");
                }
                return Some(false);
            }
        }
    }
}

/// `future` polled once in this task: its output, or `Pending` with its wake-ups
/// registered.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
}

/// A future just polled to `Pending` in this task, awaited again: its first poll here
/// waits for the wake that future registered instead of polling it at once; later polls
/// poll it. Sound only where the task has not been polled with another waker since
/// (a spurious or early wake merely polls it sooner).
struct WokenFirst<F> {
    inner: F,
    woken: bool,
}

impl<F> WokenFirst<F> {
    fn new(inner: F) -> WokenFirst<F> {
        WokenFirst {
            inner,
            woken: false,
        }
    }
}

impl<F: Future + Unpin> Future for WokenFirst<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        if !self.woken {
            self.woken = true;
            return Poll::Pending;
        }
        Pin::new(&mut self.inner).poll(cx)
    }
}

/// Writes the events gathered so far to the client as one chunk, now (with the header
/// if it is still waiting); false when the client hung up, in which case dropping the
/// upstream connection (not returning it to the pool) cancels the provider's
/// generation. `in_hand` keeps its room for the next events.
///
/// Once the header has gone out the chunk is written straight to the client's socket
/// ([`BufferedIo::write_chunk`]); pingora's session still writes the header, the first
/// chunk behind it and the end, and knows nothing of the chunks between (it counts
/// nothing from them that Warden reads).
async fn write_in_hand(
    session: &mut ServerSession,
    in_hand: &mut BytesMut,
    client: &ClientBody<'_>,
) -> bool {
    if in_hand.is_empty() {
        return true;
    }
    let through = client_io(session).filter(|io| client.own_framing && io.drained());
    let written = match through {
        Some(io) => io.write_chunk(in_hand).await.is_ok(),
        None => {
            client.cork.set(false);
            let written = write_body(session, in_hand).await;
            client.cork.set(true);
            written
        }
    };
    in_hand.clear();
    written
}

/// How a stream's body goes to the client.
struct ClientBody<'a> {
    /// Held while the relay's writes are not to leave on their own.
    cork: &'a Cork,
    /// Whether the relay may frame chunks itself (see `relay_stream`).
    own_framing: bool,
}

/// Writes `data` to the client through pingora's session, without a copy into `Bytes`
/// where the session takes a slice (HTTP/1).
async fn write_body(session: &mut ServerSession, data: &[u8]) -> bool {
    match session {
        ServerSession::H1(h1) => h1.write_body(data).await.is_ok(),
        other => other
            .write_response_body(Bytes::copy_from_slice(data), false)
            .await
            .is_ok(),
    }
}

pub async fn relay_whole(
    session: &mut ServerSession,
    exchange: &mut Exchange,
    status: u16,
    provider: Provider,
    added: &[(&'static str, String)],
    facts: Option<&mut AnswerFacts>,
) -> Relayed {
    let body = match read_whole(exchange, provider).await {
        Ok(body) => body,
        Err(refusal) => {
            respond(
                session,
                refusal.status(),
                "application/json",
                Bytes::from(refusal.body()),
            )
            .await;
            return Relayed {
                complete: false,
                usage: None,
                generated_chars: 0,
            };
        }
    };
    // A traced answer is parsed once, for its facts and its usage.
    let read = facts.and_then(|facts| facts.whole(&body).ok());
    let usage = if (200..300).contains(&status) {
        read.unwrap_or_else(|| extract::from_json(&body))
    } else {
        None
    };
    let body = body.freeze();
    let Some(header) = downstream_header(exchange, Some(body.len()), added) else {
        return Relayed {
            complete: false,
            usage,
            generated_chars: 0,
        };
    };
    let written = session
        .write_response_header(Box::new(header))
        .await
        .is_ok()
        && (body.is_empty() || session.write_response_body(body, true).await.is_ok());
    Relayed {
        complete: written,
        usage,
        generated_chars: 0,
    }
}

/// The provider's whole answer, at most [`MAX_RESPONSE_BYTES`]; the refusal to answer
/// instead when it is larger, breaks off or goes silent.
async fn read_whole(exchange: &mut Exchange, provider: Provider) -> Result<BytesMut, Refusal> {
    let mut body = BytesMut::new();
    loop {
        match exchange.read_body().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_RESPONSE_BYTES => {
                body.extend_from_slice(chunk);
            }
            Ok(Some(_)) => return Err(Refusal::UpstreamFailed(provider)),
            // A body that went silent past the idle timeout is a 504, like a late header.
            Err(error) => return Err(refusal_of(provider, &error)),
            Ok(None) => return Ok(body),
        }
    }
}

/// The client's connection: every connection the proxy's accept loop takes is a
/// [`BufferedIo`].
fn client_io(session: &ServerSession) -> Option<&BufferedIo> {
    session
        .stream()
        .and_then(|stream| stream.as_any().downcast_ref::<BufferedIo>())
}

/// The cork of the client's connection. Any connection but a [`BufferedIo`] gets a cork
/// of its own that holds nothing back.
fn client_cork(session: &ServerSession) -> Cork {
    client_io(session).map_or_else(Cork::default, BufferedIo::cork)
}

/// The header that tells the client which budgets passed their warn threshold.
pub const BUDGET_WARNING_HEADER: &str = "x-warden-budget-warning";

/// The client's response header: the provider's status and relayed headers, framed by
/// length (whole answers) or chunked (streams), and the headers Warden `added` (its
/// budget warning, its guardrail notice).
fn downstream_header(
    exchange: &Exchange,
    length: Option<usize>,
    added: &[(&'static str, String)],
) -> Option<ResponseHeader> {
    let upstream = exchange.response_header();
    let status = upstream.map_or(502, |h| h.status.as_u16());
    let mut header = ResponseHeader::build_no_case(status, Some(8)).ok()?;
    if let Some(upstream) = upstream {
        for (name, value) in &upstream.headers {
            let name = name.as_str();
            if RELAYED_HEADERS.contains(&name)
                || RELAYED_PREFIXES.iter().any(|p| name.starts_with(p))
            {
                let _ = header.append_header(name.to_owned(), value.clone());
            }
        }
    }
    for (name, value) in added {
        let _ = header.insert_header(*name, value.clone());
    }
    match length {
        Some(length) => {
            let _ = header.insert_header(http::header::CONTENT_LENGTH, length.to_string());
        }
        None => {
            let _ = header.insert_header(http::header::TRANSFER_ENCODING, "chunked");
            let _ = header.insert_header(http::header::CACHE_CONTROL, "no-cache");
        }
    }
    Some(header)
}
