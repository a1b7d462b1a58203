//! A model request's spans: the SERVER span of the agent's request and the CLIENT span
//! of its upstream attempt.

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{SpanContext, SpanKind};
use warden_shared::registry::Provider;

use super::answer::AnswerFacts;
use super::content::{PendingContent, Sent};
use super::record::{Caller, Field, SpanRecord};
use super::{fixed, parent_in_headers, Propagated, Tracer};
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
/// refused before any attempt is a SERVER span of its own, made when it is answered. A
/// request neither forwarded nor refused (the model list) makes none.
pub struct RequestTrace {
    tracer: Tracer,
    /// The agent's span (none when it sent no valid `traceparent`).
    parent: Option<SpanContext>,
    /// When the request arrived: a refusal's span starts then.
    arrived: SystemTime,
    method: Field,
    path: Field,
    route: Option<&'static (&'static str, &'static str)>,
    /// Tenant, key and agent, once the key is known.
    caller: Option<Caller>,
    /// The approval the request waits on or was let through by.
    approval_id: Option<i64>,
    /// The upstream attempt's span, from its start to the answer's end (`None` too when
    /// the trace is sampled out).
    client: Option<SpanRecord>,
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

impl RequestTrace {
    /// A request to `path`, under the agent's trace when its headers carry one.
    pub fn start(
        tracer: &Tracer,
        method: &str,
        path: &str,
        headers: &http::HeaderMap,
    ) -> RequestTrace {
        let route = ROUTES.iter().find(|(route, _)| *route == path);
        RequestTrace {
            tracer: tracer.clone(),
            parent: parent_in_headers(headers),
            arrived: SystemTime::now(),
            method: match method {
                "POST" => Field::Static("POST"),
                other => Field::Text(other.to_owned()),
            },
            path: match route {
                Some((route, _)) => Field::Static(route),
                None => Field::Text(path.to_owned()),
            },
            route,
            caller: None,
            approval_id: None,
            client: None,
            attempt_started: None,
            attempted: false,
        }
    }

    /// Names the caller: tenant, key and agent.
    pub fn caller(&mut self, view: &KeyView) {
        self.caller = Some(Caller {
            key: view.key.clone(),
            agent: view.agent.clone(),
        });
    }

    /// Starts the CLIENT span of the upstream attempt; returns the context the provider
    /// is sent.
    pub fn attempt(&mut self, attempt: &Attempt<'_>) -> Propagated {
        self.attempted = true;
        let now = SystemTime::now();
        let begun = self
            .tracer
            .begin(self.parent.as_ref(), SpanKind::Client, now);
        if let Some(mut span) = begun.record {
            // Room for the answer's id and model too.
            span.texts.reserve(
                attempt.operation.len()
                    + 1
                    + 2 * attempt.model.len()
                    + attempt.server_address.len()
                    + 64,
            );
            let name_start = span.texts.len();
            span.texts.push_str(attempt.operation);
            span.texts.push(' ');
            let model = span.part(attempt.model);
            // `chat gpt-4o`: the model's text is the name's tail.
            span.name = span.part_since(name_start);
            let server_address = span.part(attempt.server_address);
            span.attributes.reserve_exact(20);
            match fixed::operation(attempt.operation) {
                Some(operation) => span.push_fixed(operation),
                None => span.push("gen_ai.operation.name", Field::Static(attempt.operation)),
            }
            match fixed::provider(attempt.provider) {
                Some(provider) => span.push_fixed(provider),
                None => span.push(
                    "gen_ai.provider.name",
                    Field::Text(attempt.provider.as_str().to_owned()),
                ),
            }
            span.push("gen_ai.request.model", model);
            span.push_fixed(fixed::stream(attempt.streaming));
            span.attributes.extend([
                ("server.address", server_address),
                ("server.port", Field::Int(i64::from(attempt.server_port))),
            ]);
            span.caller = self.caller.take();
            self.client = Some(span);
            self.attempt_started = Some(Instant::now());
        }
        begun.propagated
    }

    /// Whether the attempt's span would show the request's prompt: it records, and the
    /// operator asked for content (the tenant's capture is the caller's to check).
    pub fn wants_content(&self, endpoint: Endpoint) -> bool {
        self.client.is_some() && self.tracer.captures_content() && endpoint != Endpoint::Embeddings
    }

    /// The request's prompt, held for the attempt's span (see `wants_content`).
    pub fn content(&mut self, capture: Capture, endpoint: Endpoint) {
        if let Some(span) = self.client.as_mut() {
            span.content = Some(Box::new(PendingContent {
                capture,
                shape: Sent::Prompt(endpoint),
            }));
        }
    }

    /// Facts to gather from the provider's answer: only while the attempt's span
    /// records (a trace sampled out reads nothing of the answer).
    pub fn answer_facts(&self, endpoint: Endpoint) -> Option<AnswerFacts> {
        self.client.as_ref()?;
        let started = self.attempt_started?;
        Some(AnswerFacts::new(started, endpoint))
    }

    /// Ends the upstream attempt's span with what the answer came to.
    pub fn settled(&mut self, settled: &Settled, facts: Option<AnswerFacts>) {
        let Some(mut span) = self.client.take() else {
            return;
        };
        span.push_fixed(fixed::FORWARDED);
        span.attributes.extend([
            (
                "http.response.status_code",
                Field::Int(i64::from(settled.status)),
            ),
            (
                "gen_ai.usage.input_tokens",
                Field::Int(settled.input_tokens),
            ),
            (
                "gen_ai.usage.output_tokens",
                Field::Int(settled.output_tokens),
            ),
        ]);
        if settled.estimated {
            span.push("warden.usage.estimated", Field::Bool(true));
        }
        if let Some(micros) = settled.cost_micros {
            span.push("warden.cost_usd", Field::Float(micros as f64 / 1e6));
        }
        if let Some(approval_id) = self.approval_id {
            span.push("warden.approval.id", Field::Int(approval_id));
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
            span.push("error.type", Field::Text(kind.to_string()));
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
        if let Some(mut span) = self.client.take() {
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
        // An attempt sampled out: the request is not traced.
        if self.attempted {
            return;
        }
        let begun = self
            .tracer
            .begin(self.parent.as_ref(), SpanKind::Server, self.arrived);
        let Some(mut span) = begun.record else {
            return;
        };
        let method = match &self.method {
            Field::Static(method) => *method,
            Field::Text(method) => method.as_str(),
            _ => "",
        };
        span.name = match (self.route, method) {
            (Some((_, post)), "POST") => Field::Static(post),
            (Some((route, _)), method) => Field::Text(format!("{method} {route}")),
            (None, method) => Field::Text(method.to_owned()),
        };
        span.attributes.reserve_exact(10);
        span.attributes.extend([
            ("http.request.method", self.method),
            ("url.path", self.path),
        ]);
        if let Some((route, _)) = self.route {
            span.push("http.route", Field::Static(route));
        }
        span.caller = self.caller.take();
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
    span.attributes.extend([
        ("http.response.status_code", Field::Int(i64::from(status))),
        ("warden.decision", Field::Static(refusal.code())),
        ("error.type", Field::Static(refusal.code())),
    ]);
    if let Some(policy_id) = refusal.policy_id() {
        span.push("warden.policy.id", Field::Int(policy_id));
    }
    if let Some(approval_id) = approval_id {
        span.push("warden.approval.id", Field::Int(approval_id));
    }
    span.error = Some(Cow::Borrowed(refusal.code()));
}
