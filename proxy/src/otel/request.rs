//! A model request's spans: the SERVER span of the agent's request and the CLIENT span
//! of its upstream attempt.

use std::borrow::Cow;
use std::time::Instant;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_http::HeaderExtractor;
use opentelemetry_sdk::trace::SdkTracer;
use warden_shared::registry::Provider;

use super::answer::AnswerFacts;
use super::{caller_attributes, extract, propagated, provider_name, Propagated, Tracer};
use crate::endpoint::Endpoint;
use crate::refusal::Refusal;
use crate::state::KeyView;

/// The routes a span may be named by, with the name of a `POST` to them (the agent
/// APIs' method: no name is formatted for them); any other path is named by its method
/// alone, so that scanners' paths do not become span names.
const ROUTES: [(&str, &str); 6] = [
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

/// One agent request's trace, from its arrival to its answer.
pub struct RequestTrace {
    tracer: SdkTracer,
    /// The agent's context with the SERVER span in it.
    server: Context,
    /// The upstream attempt's CLIENT span, from its start to the answer's end.
    client: Option<Context>,
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
    /// The approval that let the request through, by id.
    pub approval_id: Option<i64>,
}

impl RequestTrace {
    /// Starts the SERVER span of a request to `path`, under the agent's trace when its
    /// headers carry one.
    pub fn start(
        tracer: &Tracer,
        method: &str,
        path: &str,
        headers: &http::HeaderMap,
    ) -> RequestTrace {
        let parent = extract(&HeaderExtractor(headers));
        let route = ROUTES.iter().find(|(route, _)| *route == path);
        let name: Cow<'static, str> = match route {
            Some((_, post)) if method == "POST" => Cow::Borrowed(post),
            Some((route, _)) => Cow::Owned(format!("{method} {route}")),
            None => Cow::Owned(method.to_owned()),
        };
        let method: Value = match method {
            "POST" => Value::from("POST"),
            other => Value::from(other.to_owned()),
        };
        let mut attributes = vec![KeyValue::new("http.request.method", method)];
        match route {
            Some((route, _)) => {
                attributes.push(KeyValue::new("url.path", *route));
                attributes.push(KeyValue::new("http.route", *route));
            }
            None => attributes.push(KeyValue::new("url.path", path.to_owned())),
        }
        let span = tracer
            .inner
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&tracer.inner, &parent);
        RequestTrace {
            tracer: tracer.inner.clone(),
            server: parent.with_span(span),
            client: None,
            attempt_started: None,
        }
    }

    /// Names the caller on the request's span: tenant, key and agent.
    pub fn caller(&self, view: &KeyView) {
        self.server.span().set_attributes(caller_attributes(view));
    }

    /// Starts the CLIENT span of the upstream attempt; returns the context the provider
    /// is sent.
    pub fn attempt(&mut self, attempt: &Attempt<'_>, view: &KeyView) -> Propagated {
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", attempt.operation),
            KeyValue::new("gen_ai.provider.name", provider_value(attempt.provider)),
            KeyValue::new("gen_ai.request.model", attempt.model.to_owned()),
            KeyValue::new("gen_ai.request.stream", attempt.streaming),
            KeyValue::new("server.address", attempt.server_address.to_owned()),
            KeyValue::new("server.port", i64::from(attempt.server_port)),
        ];
        attributes.extend(caller_attributes(view));
        let span = self
            .tracer
            .span_builder(format!("{} {}", attempt.operation, attempt.model))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.server);
        let client = self.server.with_span(span);
        let out = propagated(&client);
        self.client = Some(client);
        self.attempt_started = Some(Instant::now());
        out
    }

    /// Facts to gather from the provider's answer: only while the attempt's span
    /// records (a trace sampled out reads nothing of the answer).
    pub fn answer_facts(&self) -> Option<AnswerFacts> {
        let client = self.client.as_ref()?;
        let started = self.attempt_started?;
        client
            .span()
            .is_recording()
            .then(|| AnswerFacts::new(started))
    }

    /// Ends the upstream attempt's span with what the answer came to.
    pub fn settled(&mut self, settled: &Settled, facts: Option<AnswerFacts>) {
        let Some(client) = self.client.take() else {
            return;
        };
        let span = client.span();
        let mut attributes = vec![
            KeyValue::new("http.response.status_code", i64::from(settled.status)),
            KeyValue::new("gen_ai.usage.input_tokens", settled.input_tokens),
            KeyValue::new("gen_ai.usage.output_tokens", settled.output_tokens),
        ];
        if settled.estimated {
            attributes.push(KeyValue::new("warden.usage.estimated", true));
        }
        if let Some(micros) = settled.cost_micros {
            attributes.push(KeyValue::new("warden.cost_usd", micros as f64 / 1e6));
        }
        if let Some(facts) = facts {
            attributes.extend(facts.attributes());
        }
        span.set_attributes(attributes);
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
        let server = self.server.span();
        server.set_attribute(KeyValue::new("warden.decision", "forwarded"));
        if let Some(approval_id) = settled.approval_id {
            self.approval(approval_id);
        }
        if let Some(micros) = settled.cost_micros {
            server.set_attribute(KeyValue::new("warden.cost_usd", micros as f64 / 1e6));
        }
    }

    /// Names the approval a held request waits on, or that let it through.
    pub fn approval(&self, approval_id: i64) {
        let span = self.server.span();
        span.set_attribute(KeyValue::new("warden.approval.id", approval_id));
    }

    /// Ends the request's span: `status` answered, `refused` when Warden refused it
    /// (its code is the decision, its policy named), with an error status then.
    pub fn end(mut self, status: u16, refused: Option<&Refusal>) {
        if let Some(client) = self.client.take() {
            // An attempt that ended in a refusal (no connection, no answer in time).
            let span = client.span();
            if let Some(refusal) = refused {
                span.set_attribute(KeyValue::new("error.type", refusal.code()));
                span.set_status(Status::error(refusal.code()));
            }
            span.end();
        }
        let span = self.server.span();
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if let Some(refusal) = refused {
            let mut attributes = vec![
                KeyValue::new("warden.decision", refusal.code()),
                KeyValue::new("error.type", refusal.code()),
            ];
            if let Some(policy_id) = refusal.policy_id() {
                attributes.push(KeyValue::new("warden.policy.id", policy_id));
            }
            span.set_attributes(attributes);
            span.set_status(Status::error(refusal.code()));
        }
        span.end();
    }
}

fn provider_value(provider: Provider) -> Value {
    match provider_name(provider) {
        Some(name) => Value::from(name),
        None => Value::from(provider.as_str().to_owned()),
    }
}
