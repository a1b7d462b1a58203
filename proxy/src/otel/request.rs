//! A model request's spans: the SERVER span of the agent's request and the CLIENT span
//! of its upstream attempt.

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::SpanKind;
use warden_shared::registry::Provider;

use super::answer::AnswerFacts;
use super::content::{PendingContent, Sent};
use super::record::SpanRecord;
use super::{fixed, parent_in_headers, Begun, Propagated, Tracer};
use crate::capture::Capture;
use crate::endpoint::Endpoint;
use crate::refusal::Refusal;
use crate::state::KeyView;

/// The routes a span may be named by, with the name of a `POST` to them (the agent
/// APIs' method: no name is formatted for them); any other path is named by its method
/// alone, so that scanners' paths do not become span names.
static ROUTES: [(&str, &str); 6] = [
    ("/v1/chat/completions", "POST /v1/chat/completions"),
    ("/v1/embeddings", "POST /v1/embeddings"),
    ("/v1/responses", "POST /v1/responses"),
    ("/v1/messages", "POST /v1/messages"),
    (
        "/v1/messages/count_tokens",
        "POST /v1/messages/count_tokens",
    ),
    ("/v1/models", "POST /v1/models"),
];

/// `gen_ai.operation.name` of a request to `endpoint`: the conventions' `chat` for
/// chat completions and the Responses and Messages APIs, `embeddings`; `count_tokens`
/// (Warden's name: the conventions have none) for Anthropic's token count.
pub fn operation_name(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::ChatCompletions | Endpoint::Responses | Endpoint::Messages => "chat",
        Endpoint::Embeddings => "embeddings",
        Endpoint::MessagesCountTokens => "count_tokens",
    }
}

/// One agent request's trace, from its arrival to its answer. A forwarded request is
/// one span, the CLIENT span of its upstream attempt, under the agent's span; a request
/// refused before any attempt is a SERVER span of its own, from its arrival. A request
/// neither forwarded nor refused (the model list) makes none. The span's ids are drawn
/// and its sampling decided on arrival, so that what is known of the request (its
/// caller) is written into it as soon as it is known, and only when it records.
pub struct RequestTrace<'t> {
    /// Borrowed for the request: no reference count that every core's requests share.
    tracer: &'t Tracer,
    /// The request's span (its record `None` when the trace is sampled out).
    span: Begun,
    method: Cow<'static, str>,
    path: Cow<'static, str>,
    route: Option<&'static (&'static str, &'static str)>,
    /// The approval the request waits on or was let through by.
    approval_id: Option<i64>,
    /// When the attempt started: the time to the first chunk is counted from it.
    attempt_started: Option<Instant>,
    /// Whether an upstream attempt began, sampled or not: its span is the request's.
    attempted: bool,
}

/// What the CLIENT span of an upstream attempt is named and described by.
pub struct Attempt<'a> {
    /// `gen_ai.operation.name`: `chat`, `embeddings`, `count_tokens`.
    pub operation: &'static str,
    pub provider: Provider,
    /// The model the agent asked for.
    pub model: &'a str,
    pub streaming: bool,
    pub server_address: &'a str,
    pub server_port: u16,
}

/// How an upstream attempt ended.
pub struct Settled {
    /// The provider's status, or 499 when the client hung up first.
    pub status: u16,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// `None`: no list price for the model.
    pub cost_micros: Option<i64>,
    /// True when the tokens are Warden's estimate, not the provider's report.
    pub estimated: bool,
}

impl<'t> RequestTrace<'t> {
    /// A request to `path`, under the agent's trace when its headers carry one.
    pub fn start(
        tracer: &'t Tracer,
        method: &str,
        path: &str,
        headers: &http::HeaderMap,
    ) -> RequestTrace<'t> {
        let route = ROUTES.iter().find(|(route, _)| *route == path);
        let parent = parent_in_headers(headers);
        RequestTrace {
            tracer,
            span: tracer.begin(parent.as_ref(), SpanKind::Server, SystemTime::now()),
            method: match method {
                "POST" => Cow::Borrowed("POST"),
                other => Cow::Owned(other.to_owned()),
            },
            path: match route {
                Some((route, _)) => Cow::Borrowed(route),
                None => Cow::Owned(path.to_owned()),
            },
            route,
            approval_id: None,
            attempt_started: None,
            attempted: false,
        }
    }

    /// Names the caller: tenant, key and agent.
    pub fn caller(&mut self, view: &KeyView) {
        if let Some(span) = &mut self.span.record {
            span.caller(view);
        }
    }

    /// Starts the CLIENT span of the upstream attempt; returns the context the provider
    /// is sent.
    pub fn attempt(&mut self, attempt: &Attempt<'_>) -> Propagated {
        self.attempted = true;
        if let Some(span) = &mut self.span.record {
            span.kind = SpanKind::Client;
            span.start = SystemTime::now();
            // `chat gpt-4o`
            span.name(&[attempt.operation, " ", attempt.model]);
            match fixed::operation(attempt.operation) {
                Some(operation) => span.fixed(operation),
                None => span.str("gen_ai.operation.name", attempt.operation),
            }
            match fixed::provider(attempt.provider) {
                Some(provider) => span.fixed(provider),
                None => span.str("gen_ai.provider.name", attempt.provider.as_str()),
            }
            span.str("gen_ai.request.model", attempt.model);
            span.fixed(fixed::stream(attempt.streaming));
            span.str("server.address", attempt.server_address);
            span.int("server.port", i64::from(attempt.server_port));
            self.attempt_started = Some(Instant::now());
        }
        self.span.propagated()
    }

    /// The attempt's span, while it records.
    fn attempt_span(&mut self) -> Option<&mut SpanRecord> {
        self.span.record.as_mut().filter(|_| self.attempted)
    }

    /// Whether the attempt's span would show the request's prompt: it records, and the
    /// operator asked for content (the tenant's capture is the caller's to check).
    pub fn wants_content(&self, endpoint: Endpoint) -> bool {
        self.attempted
            && self.span.record.is_some()
            && self.tracer.captures_content()
            && endpoint != Endpoint::Embeddings
    }

    /// The request's prompt, held for the attempt's span (see `wants_content`).
    pub fn content(&mut self, capture: Capture, endpoint: Endpoint) {
        if let Some(span) = self.attempt_span() {
            span.content = Some(Box::new(PendingContent {
                capture,
                shape: Sent::Prompt(endpoint),
            }));
        }
    }

    /// Facts to gather from the provider's answer: only while the attempt's span
    /// records (a trace sampled out reads nothing of the answer).
    pub fn answer_facts(&self, endpoint: Endpoint) -> Option<AnswerFacts> {
        self.span.record.as_ref()?;
        let started = self.attempt_started?;
        Some(AnswerFacts::new(started, endpoint))
    }

    /// Ends the upstream attempt's span with what the answer came to.
    pub fn settled(&mut self, settled: &Settled, facts: Option<AnswerFacts>) {
        if !self.attempted {
            return;
        }
        let Some(mut span) = self.span.record.take() else {
            return;
        };
        span.fixed(fixed::FORWARDED);
        span.int("http.response.status_code", i64::from(settled.status));
        span.int("gen_ai.usage.input_tokens", settled.input_tokens);
        span.int("gen_ai.usage.output_tokens", settled.output_tokens);
        if settled.estimated {
            span.flag("warden.usage.estimated", true);
        }
        if let Some(micros) = settled.cost_micros {
            span.float("warden.cost_usd", micros as f64 / 1e6);
        }
        if let Some(approval_id) = self.approval_id {
            span.int("warden.approval.id", approval_id);
        }
        if let Some(facts) = facts {
            facts.add_to(&mut span);
        }
        if settled.status >= 400 {
            let kind: Cow<'static, str> = if settled.status == 499 {
                Cow::Borrowed("client_closed")
            } else {
                Cow::Owned(settled.status.to_string())
            };
            span.str("error.type", &kind);
            span.error = Some(kind);
        }
        self.tracer.finish(span);
    }

    /// Names the approval a held request waits on, or that let it through.
    pub fn approval(&mut self, approval_id: i64) {
        self.approval_id = Some(approval_id);
    }

    /// Ends the request: `status` answered, `refused` when Warden refused it (its code
    /// is the decision, its policy named), with an error status then.
    pub fn end(mut self, status: u16, refused: Option<&Refusal>) {
        let Some(mut span) = self.span.record.take() else {
            // Sampled out, or the attempt's span already settled.
            return;
        };
        if self.attempted {
            // An attempt that ended in a refusal (no connection, no answer in time).
            if let Some(refusal) = refused {
                refusal_attributes(&mut span, refusal, status, self.approval_id);
            }
            self.tracer.finish(span);
            return;
        }
        let Some(refusal) = refused else {
            return;
        };
        match (self.route, self.method.as_ref()) {
            (Some((_, post)), "POST") => span.name(&[post]),
            (Some((route, _)), method) => span.name(&[method, " ", route]),
            (None, method) => span.name(&[method]),
        }
        span.str("http.request.method", &self.method);
        span.str("url.path", &self.path);
        if let Some((route, _)) = self.route {
            span.str("http.route", route);
        }
        refusal_attributes(&mut span, refusal, status, self.approval_id);
        self.tracer.finish(span);
    }
}

/// What a refusal says on its span (the answer's status, the decision and what made
/// it), and its error status.
fn refusal_attributes(
    span: &mut SpanRecord,
    refusal: &Refusal,
    status: u16,
    approval_id: Option<i64>,
) {
    span.int("http.response.status_code", i64::from(status));
    span.str("warden.decision", refusal.code());
    span.str("error.type", refusal.code());
    if let Some(policy_id) = refusal.policy_id() {
        span.int("warden.policy.id", policy_id);
    }
    if let Some(approval_id) = approval_id {
        span.int("warden.approval.id", approval_id);
    }
    span.error = Some(Cow::Borrowed(refusal.code()));
}
