//! The send step: the request the provider receives (the agent's body, rewritten when
//! the model name changes or usage must be asked for; the credential; the head), sent
//! while the client is watched, and the answer relayed to the client, streamed or
//! whole.

use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use pingora::protocols::http::ServerSession;

use super::Ready;
use crate::otel::{operation_name, AnswerFacts, Attempt, RequestTrace};
use crate::refusal::Refusal;
use crate::relay::{relay_stream, relay_whole, Relayed};
use crate::request_body::rewrite;
use crate::resources::Resources;
use crate::upstream::Exchange;
use crate::upstream_request::{
    credential, upstream_header, ClientHeaders, ParentHeader, UpstreamBody,
};

/// The status recorded (metrics only: nothing is sent) for a request whose client hung
/// up before the provider answered; nginx's convention.
const CLIENT_CLOSED: u16 = 499;

/// How the provider's answer went.
pub(super) struct Answer {
    /// The provider's status, or [`CLIENT_CLOSED`].
    pub(super) status: u16,
    pub(super) relayed: Relayed,
    /// The provider's connection; `None` when the client hung up before the answer,
    /// which dropped the request to the provider.
    pub(super) exchange: Option<Exchange>,
    /// The proxy's own time on the request up to sending it.
    pub(super) overhead: Duration,
    /// What the answer said of itself, read for a sampled trace.
    pub(super) facts: Option<AnswerFacts>,
}

impl Answer {
    /// The client hung up before the provider answered.
    fn client_closed(overhead: Duration) -> Answer {
        let relayed = Relayed {
            complete: false,
            usage: None,
            generated_chars: 0,
        };
        let (status, exchange) = (CLIENT_CLOSED, None);
        Answer {
            status,
            relayed,
            exchange,
            overhead,
            facts: None,
        }
    }
}

/// Sends `ready` to its provider and relays the answer (with the headers Warden `added`:
/// the gate's budget warning and guardrail notice). `Err` is a refusal before any
/// answer: no credential, no connection, no answer in time.
pub(super) async fn send(
    shared: &Resources,
    session: &mut ServerSession,
    ready: &Ready<'_>,
    added: &[(&'static str, String)],
    trace: Option<&mut RequestTrace<'_>>,
) -> Result<Answer, Refusal> {
    let provider = ready.admitted.route.provider;
    let body = upstream_body(ready)?;
    let credential = credential(
        &shared.state,
        &shared.managed_keys,
        &shared.providers,
        &ready.view,
        provider,
    )
    .await?;
    let mut client = ClientHeaders::of(&session.req_header().headers, provider);
    let mut facts = None;
    if let Some(trace) = trace {
        facts = attempt(shared, ready, trace, &mut client);
    }
    let body_facts = UpstreamBody {
        length: body.len(),
        streaming: ready.streaming,
    };
    let build_header = || {
        upstream_header(
            &shared.upstreams,
            &client,
            provider,
            ready.endpoint,
            &body_facts,
            credential.expose(),
        )
    };
    let overhead = ready.work.elapsed();

    // The provider's answer, unless the client hangs up first: then the request to the
    // provider is dropped with its connection, which cancels it there.
    let sent = tokio::select! {
        biased;
        sent = shared.upstreams.send(provider, &build_header, body) => Some(sent?),
        () = client_gone(session) => None,
    };
    let Some(mut exchange) = sent else {
        session.set_keepalive(None);
        return Ok(Answer::client_closed(overhead));
    };
    let (status, relayed) = relay(session, &mut exchange, ready, added, facts.as_mut()).await;
    Ok(Answer {
        status,
        relayed,
        exchange: Some(exchange),
        overhead,
        facts,
    })
}

/// Starts the trace's upstream attempt: its context replaces the agent's in the
/// provider's `traceparent`. Returns the answer's facts to gather, when it records.
fn attempt(
    shared: &Resources,
    ready: &Ready<'_>,
    trace: &mut RequestTrace<'_>,
    client: &mut ClientHeaders,
) -> Option<AnswerFacts> {
    let provider = ready.admitted.route.provider;
    let (host, port) = shared
        .upstreams
        .target(provider)
        .map_or(("", 0), |target| (target.host.as_str(), target.port));
    let attempt = Attempt {
        operation: operation_name(ready.endpoint),
        provider,
        model: &ready.admitted.requested_model,
        streaming: ready.streaming,
        server_address: host,
        server_port: port,
    };
    let propagated = trace.attempt(&attempt);
    client.traceparent = propagated.traceparent.map(ParentHeader::Span);
    // The agent's state, parsed and written back; its own buffer becomes the header's.
    client.tracestate = propagated
        .tracestate
        .and_then(|state| HeaderValue::try_from(state).ok());
    trace.answer_facts(ready.endpoint)
}

/// The body the provider receives: the agent's as it is, or with the provider's model
/// name and, for a stream whose client did not ask for usage, `include_usage`.
fn upstream_body(ready: &Ready<'_>) -> Result<Bytes, Refusal> {
    let route = &ready.admitted.route;
    if ready.inject_usage || route.upstream_model != ready.admitted.requested_model {
        rewrite(ready.body, &route.upstream_model, ready.inject_usage)
    } else {
        Ok(ready.body.clone())
    }
}

/// Relays the provider's answer: as a stream when the client asked for one and the
/// provider answers with one, whole otherwise (errors included). Returns the provider's
/// status.
async fn relay(
    session: &mut ServerSession,
    exchange: &mut Exchange,
    ready: &Ready<'_>,
    added: &[(&'static str, String)],
    facts: Option<&mut AnswerFacts>,
) -> (u16, Relayed) {
    let status = exchange
        .response_header()
        .map_or(502, |h| h.status.as_u16());
    let is_event_stream = exchange
        .response_header()
        .and_then(|h| h.headers.get(http::header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let relayed = if ready.streaming && is_event_stream && (200..300).contains(&status) {
        relay_stream(
            session,
            exchange,
            ready.endpoint,
            ready.inject_usage,
            added,
            facts,
        )
        .await
    } else {
        let provider = ready.admitted.route.provider;
        relay_whole(session, exchange, status, provider, added, facts).await
    };
    (status, relayed)
}

/// Completes when the client closes its connection (or sends bytes where none may come)
/// after its request body; pending while it waits. pingora's own proxy watches the same
/// way (`read_body_or_idle`) while it waits on an upstream. The watch costs no system
/// call while the client is quiet: the read finds the socket not ready (its last read
/// drained it) and only registers for a wake-up (strace under load: 2.00 `recvfrom` a
/// request with and without it). Starting it after a delay instead cost a timer, whose
/// registration woke the event loop's driver through an eventfd `write` on 5 to 14 %
/// of requests.
async fn client_gone(session: &mut ServerSession) {
    if let Err(error) = session.read_body_or_idle(true).await {
        tracing::debug!(%error, "client went away while its provider was answering");
    }
}
