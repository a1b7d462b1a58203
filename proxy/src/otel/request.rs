//! A model request's spans: the SERVER span of the agent's request and the CLIENT span
//! of its upstream attempt.

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::trace::{SdkTracer, Span};
use warden_shared::registry::Provider;

use super::answer::AnswerFacts;
use super::{caller_attributes, extract, propagated, provider_name, Propagated, Tracer};
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
    tracer: SdkTracer,
    /// The agent's trace context (empty when it sent none).
    parent: Context,
    /// When the request arrived: a refusal's span starts then.
    arrived: SystemTime,
    method: Value,
    path: Value,
    route: Option<&'static (&'static str, &'static str)>,
    /// Tenant, key and agent, once the key is known.
    caller: Vec<KeyValue>,
    /// The approval the request waits on or was let through by.
    approval_id: Option<i64>,
    /// The upstream attempt's span, from its start to the answer's end.
    client: Option<Span>,
    /// When the attempt started: the time to the first chunk is counted from it.
    attempt_started: Option<Instant>,
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
            tracer: tracer.inner.clone(),
            parent: extract(&HeaderExtractor(headers)),
            arrived: SystemTime::now(),
            method: match method {
                "POST" => Value::from("POST"),
                other => Value::from(other.to_owned()),
            },
            path: match route {
                Some((route, _)) => Value::from(*route),
                None => Value::from(path.to_owned()),
            },
            route,
            caller: Vec::new(),
            approval_id: None,
            client: None,
            attempt_started: None,
        }
    }

    /// Names the caller: tenant, key and agent.
    pub fn caller(&mut self, view: &KeyView) {
        self.caller = caller_attributes(view);
    }

    /// Starts the CLIENT span of the upstream attempt; returns the context the provider
    /// is sent.
    pub fn attempt(&mut self, attempt: &Attempt<'_>) -> Propagated {
        let mut attributes = Vec::with_capacity(24);
        attributes.extend([
            KeyValue::new("gen_ai.operation.name", attempt.operation),
            KeyValue::new("gen_ai.provider.name", provider_value(attempt.provider)),
            KeyValue::new("gen_ai.request.model", attempt.model.to_owned()),
            KeyValue::new("gen_ai.request.stream", attempt.streaming),
            KeyValue::new("server.address", attempt.server_address.to_owned()),
            KeyValue::new("server.port", i64::from(attempt.server_port)),
        ]);
        attributes.append(&mut self.caller);
        let span = self
            .tracer
            .span_builder(format!("{} {}", attempt.operation, attempt.model))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.parent);
        let out = propagated(span.span_context());
        self.client = Some(span);
        self.attempt_started = Some(Instant::now());
        out
    }

    /// Facts to gather from the provider's answer: only while the attempt's span
    /// records (a trace sampled out reads nothing of the answer).
    pub fn answer_facts(&self) -> Option<AnswerFacts> {
        let client = self.client.as_ref()?;
        let started = self.attempt_started?;
        client.is_recording().then(|| AnswerFacts::new(started))
    }

    /// Ends the upstream attempt's span with what the answer came to.
    pub fn settled(&mut self, settled: &Settled, facts: Option<AnswerFacts>) {
        let Some(mut span) = self.client.take() else {
            return;
        };
        if !span.is_recording() {
            return;
        }
        span.set_attributes([
            KeyValue::new("warden.decision", "forwarded"),
            KeyValue::new("http.response.status_code", i64::from(settled.status)),
            KeyValue::new("gen_ai.usage.input_tokens", settled.input_tokens),
            KeyValue::new("gen_ai.usage.output_tokens", settled.output_tokens),
        ]);
        if settled.estimated {
            span.set_attribute(KeyValue::new("warden.usage.estimated", true));
        }
        if let Some(micros) = settled.cost_micros {
            span.set_attribute(KeyValue::new("warden.cost_usd", micros as f64 / 1e6));
        }
        if let Some(approval_id) = self.approval_id {
            span.set_attribute(KeyValue::new("warden.approval.id", approval_id));
        }
        if let Some(facts) = facts {
            span.set_attributes(facts.attributes());
        }
        if settled.status >= 400 {
            let kind = if settled.status == 499 {
                "client_closed".to_owned()
            } else {
                settled.status.to_string()
            };
            span.set_attribute(KeyValue::new("error.type", kind.clone()));
            span.set_status(Status::error(kind));
        }
        span.end();
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
                span.set_attributes(refusal_attributes(refusal, status, self.approval_id));
                span.set_status(Status::error(refusal.code()));
            }
            span.end();
            return;
        }
        let Some(refusal) = refused else {
            return;
        };
        let name: Cow<'static, str> = match (self.route, self.method.as_str().as_ref()) {
            (Some((_, post)), "POST") => Cow::Borrowed(post),
            (Some((route, _)), method) => Cow::Owned(format!("{method} {route}")),
            (None, method) => Cow::Owned(method.to_owned()),
        };
        let mut attributes = Vec::with_capacity(16);
        attributes.extend([
            KeyValue::new("http.request.method", self.method.clone()),
            KeyValue::new("url.path", self.path.clone()),
        ]);
        if let Some((route, _)) = self.route {
            attributes.push(KeyValue::new("http.route", *route));
        }
        attributes.append(&mut self.caller);
        attributes.extend(refusal_attributes(refusal, status, self.approval_id));
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_start_time(self.arrived)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.parent);
        span.set_status(Status::error(refusal.code()));
        span.end();
    }
}

/// What a refusal says on its span: the answer's status, the decision and what made it.
fn refusal_attributes(refusal: &Refusal, status: u16, approval_id: Option<i64>) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("http.response.status_code", i64::from(status)),
        KeyValue::new("warden.decision", refusal.code()),
        KeyValue::new("error.type", refusal.code()),
    ];
    if let Some(policy_id) = refusal.policy_id() {
        attributes.push(KeyValue::new("warden.policy.id", policy_id));
    }
    if let Some(approval_id) = approval_id {
        attributes.push(KeyValue::new("warden.approval.id", approval_id));
    }
    attributes
}

fn provider_value(provider: Provider) -> Value {
    match provider_name(provider) {
        Some(name) => Value::from(name),
        None => Value::from(provider.as_str().to_owned()),
    }
}
