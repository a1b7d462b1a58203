//! Forwarding one OpenAI-compatible request: read and check the body, admit it, send it
//! to the provider, relay the answer (streamed or whole), and queue its usage.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::proxy::Session;
use serde::Deserialize;
use serde_json::{json, Value};
use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing;
use warden_shared::registry::Provider;
use warden_shared::secret::Secret;
use warden_shared::timestamp::Timestamp;

use crate::admission::{self, Admitted};
use crate::budget::{self, Reservation};

use crate::metrics::{model_label, status_class};
use crate::refusal::Refusal;
use crate::service::{respond, ProxyService};
use crate::state::KeyView;
use crate::upstream::Exchange;
use crate::usage::extract::{self, estimate_tokens, Tokens};
use crate::usage::sink::now_ms;
use crate::usage::sse::SseRelay;
use crate::usage::{BudgetHold, UsageRecord};

/// The largest non-streamed answer relayed (provider answers are far smaller).
const MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Provider response headers passed on to the client; the rest stay behind.
const RELAYED_HEADERS: [&str; 4] = ["content-type", "retry-after", "x-request-id", "request-id"];
const RELAYED_PREFIXES: [&str; 3] = ["openai-", "x-ratelimit-", "anthropic-ratelimit-"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions,
    Embeddings,
}

impl Endpoint {
    fn path(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/chat/completions",
            Endpoint::Embeddings => "/embeddings",
        }
    }

    fn request_type(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "chat.completions",
            Endpoint::Embeddings => "embeddings",
        }
    }
}

/// The fields the proxy reads from a request body; the rest is skipped unparsed.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    max_tokens: Option<i64>,
    #[serde(default)]
    max_completion_tokens: Option<i64>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

pub async fn forward(
    service: &ProxyService,
    session: &mut Session,
    view: KeyView,
    endpoint: Endpoint,
) -> Result<(), Refusal> {
    let started = Instant::now();
    admission::check_key(&view, now_ms())?;
    ensure_json(session)?;
    let body = read_body(session, service.max_body_bytes).await?;

    let work = Instant::now();
    let peek: Peek = serde_json::from_slice(&body)
        .map_err(|_| Refusal::BadRequest("the body must be a JSON object with a `model`".into()))?;
    let model = peek
        .model
        .as_deref()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| Refusal::BadRequest("`model` is required".into()))?
        .to_owned();
    let admitted = admission::admit(&view, &model)?;
    let provider = admitted.route.provider;
    let reservation = reserve_budget(
        service,
        &view,
        &admitted,
        body.len(),
        peek.max_completion_tokens.or(peek.max_tokens),
    )?;
    let streaming = endpoint == Endpoint::ChatCompletions && peek.stream == Some(true);
    let client_wants_usage =
        peek.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true);
    let inject_usage = streaming && !client_wants_usage;
    let upstream_body = if inject_usage || admitted.route.upstream_model != model {
        rewrite(&body, &admitted.route.upstream_model, inject_usage)?
    } else {
        body.clone()
    };
    drop(peek);
    let credential = credential(service, &view, provider).await?;
    let header = upstream_header(
        service,
        session,
        &admitted,
        endpoint,
        UpstreamBody {
            length: upstream_body.len(),
            streaming,
        },
        credential.expose(),
    )?;
    let mut overhead = work.elapsed();

    let mut exchange = service
        .upstreams
        .send(provider, header, upstream_body)
        .await?;
    let status = exchange
        .session
        .response_header()
        .map_or(502, |h| h.status.as_u16());
    let is_event_stream = exchange
        .session
        .response_header()
        .and_then(|h| h.headers.get(http::header::CONTENT_TYPE))
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let relayed = if streaming && is_event_stream && (200..300).contains(&status) {
        relay_stream(session, &mut exchange, inject_usage).await
    } else {
        relay_whole(session, &mut exchange, status, provider).await
    };

    let work = Instant::now();
    // Usage the provider reported; otherwise, for a stream cut short (or a provider that
    // never reports), an estimate from the request size and the text relayed, so a
    // cancelled request is never free. An error answer without usage counts as a request
    // with no tokens.
    let tokens = relayed.usage.unwrap_or(if streaming {
        Tokens {
            input: estimate_tokens(body.len()),
            output: estimate_tokens(relayed.generated_chars),
        }
    } else {
        Tokens::default()
    });
    let cost_micros = admitted.cost_micros(tokens.input, tokens.output);
    record_usage(
        service,
        &view,
        &admitted,
        endpoint,
        tokens,
        reservation.map(|reservation| reservation.settle(cost_micros)),
    );
    if relayed.complete {
        service.upstreams.release(exchange).await;
    }
    overhead += work.elapsed();
    observe(
        service,
        &admitted,
        Outcome {
            status,
            tokens,
            cost_micros,
        },
        started.elapsed(),
        overhead,
    );
    Ok(())
}

/// How the answer went to the client, and the usage it carried.
struct Relayed {
    /// False when the client went away or the provider broke off: the connection to the
    /// provider is then not reusable.
    complete: bool,
    /// Usage as the provider reported it.
    usage: Option<Tokens>,
    /// Characters of generated text relayed (streams), for an estimate.
    generated_chars: usize,
}

async fn relay_stream(
    session: &mut Session,
    exchange: &mut Exchange,
    strip_usage: bool,
) -> Relayed {
    let mut relay = SseRelay::new(strip_usage);
    let outcome = |relay: &SseRelay, complete: bool| Relayed {
        complete,
        usage: relay.usage,
        generated_chars: relay.content_chars,
    };
    let Some(header) = downstream_header(exchange, None) else {
        return outcome(&relay, false);
    };
    if session
        .write_response_header(Box::new(header), false)
        .await
        .is_err()
    {
        return outcome(&relay, false);
    }
    loop {
        match exchange.session.read_response_body().await {
            Ok(Some(chunk)) => {
                let out = relay.push(&chunk);
                if !out.is_empty() && session.write_response_body(Some(out), false).await.is_err() {
                    // The client hung up: dropping the upstream connection (not returning
                    // it to the pool) cancels the provider's generation.
                    return outcome(&relay, false);
                }
            }
            Ok(None) => {
                let rest = relay.finish();
                let written = session.write_response_body(Some(rest), true).await.is_ok();
                return outcome(&relay, written);
            }
            Err(error) => {
                tracing::warn!(%error, "provider stream broke off");
                let _ = session
                    .write_response_body(Some(relay.finish()), true)
                    .await;
                return outcome(&relay, false);
            }
        }
    }
}

async fn relay_whole(
    session: &mut Session,
    exchange: &mut Exchange,
    status: u16,
    provider: Provider,
) -> Relayed {
    let mut body = BytesMut::new();
    let mut complete = true;
    loop {
        match exchange.session.read_response_body().await {
            Ok(Some(chunk)) if body.len() + chunk.len() <= MAX_RESPONSE_BYTES => {
                body.extend_from_slice(&chunk);
            }
            Ok(Some(_)) | Err(_) => {
                complete = false;
                break;
            }
            Ok(None) => break,
        }
    }
    if !complete {
        let refusal = Refusal::UpstreamFailed(provider);
        respond(
            session,
            502,
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
    let usage = if (200..300).contains(&status) {
        extract::from_json(&body)
    } else {
        None
    };
    let body = body.freeze();
    let Some(header) = downstream_header(exchange, Some(body.len())) else {
        return Relayed {
            complete: false,
            usage,
            generated_chars: 0,
        };
    };
    let written = session
        .write_response_header(Box::new(header), body.is_empty())
        .await
        .is_ok()
        && (body.is_empty() || session.write_response_body(Some(body), true).await.is_ok());
    Relayed {
        complete: written,
        usage,
        generated_chars: 0,
    }
}

/// The client's response header: the provider's status and relayed headers, framed by
/// length (whole answers) or chunked (streams).
fn downstream_header(exchange: &Exchange, length: Option<usize>) -> Option<ResponseHeader> {
    let upstream = exchange.session.response_header();
    let status = upstream.map_or(502, |h| h.status.as_u16());
    let mut header = ResponseHeader::build(status, Some(8)).ok()?;
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

fn ensure_json(session: &Session) -> Result<(), Refusal> {
    let is_json = session
        .req_header()
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("application/json")
        });
    if is_json {
        Ok(())
    } else {
        Err(Refusal::UnsupportedMediaType)
    }
}

/// Reads the whole body (answering `Expect: 100-continue` first), refusing more than `max`.
async fn read_body(session: &mut Session, max: usize) -> Result<Bytes, Refusal> {
    let headers = &session.req_header().headers;
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let expects_continue = headers
        .get(http::header::EXPECT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    if declared.is_some_and(|length| length > max) {
        // The body stays unread: the connection cannot be reused.
        session.set_keepalive(None);
        return Err(Refusal::BodyTooLarge(max));
    }
    if expects_continue && session.write_continue_response().await.is_err() {
        return Err(Refusal::BadRequest(
            "cannot answer Expect: 100-continue".into(),
        ));
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0).min(max));
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > max {
                    session.set_keepalive(None);
                    return Err(Refusal::BodyTooLarge(max));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(_) => return Err(Refusal::BadRequest("cannot read the request body".into())),
        }
    }
}

/// The body with the provider's model name and, for streams, usage reporting requested.
fn rewrite(body: &[u8], upstream_model: &str, inject_usage: bool) -> Result<Bytes, Refusal> {
    let mut value: Value = serde_json::from_slice(body)
        .map_err(|_| Refusal::BadRequest("the body must be a JSON object".into()))?;
    let object = value
        .as_object_mut()
        .ok_or_else(|| Refusal::BadRequest("the body must be a JSON object".into()))?;
    object.insert("model".into(), Value::String(upstream_model.to_owned()));
    if inject_usage {
        let options = object.entry("stream_options").or_insert_with(|| json!({}));
        if let Some(options) = options.as_object_mut() {
            options.insert("include_usage".into(), Value::Bool(true));
        }
    }
    serde_json::to_vec(&value)
        .map(Bytes::from)
        .map_err(|_| Refusal::BadRequest("the body cannot be re-encoded".into()))
}

/// What the upstream header says of the body.
struct UpstreamBody {
    length: usize,
    streaming: bool,
}

fn upstream_header(
    service: &ProxyService,
    session: &Session,
    admitted: &Admitted,
    endpoint: Endpoint,
    UpstreamBody { length, streaming }: UpstreamBody,
    credential: &str,
) -> Result<RequestHeader, Refusal> {
    let provider = admitted.route.provider;
    let target = service
        .upstreams
        .target(provider)
        .ok_or(Refusal::ProviderNotConfigured(provider))?;
    let path = format!("{}{}", target.path_prefix, endpoint.path());
    let build = |header: &mut RequestHeader| -> pingora::Result<()> {
        header.insert_header(http::header::HOST, target.authority())?;
        header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
        header.insert_header(http::header::CONTENT_LENGTH, length.to_string())?;
        header.insert_header(
            http::header::ACCEPT,
            if streaming {
                "text/event-stream"
            } else {
                "application/json"
            },
        )?;
        if let Some(agent) = session.req_header().headers.get(http::header::USER_AGENT) {
            header.insert_header(http::header::USER_AGENT, agent.clone())?;
        }
        match provider {
            Provider::Anthropic => {
                header.insert_header("x-api-key", credential)?;
                header.insert_header("anthropic-version", "2023-06-01")?;
            }
            _ => {
                header.insert_header(http::header::AUTHORIZATION, format!("Bearer {credential}"))?
            }
        }
        Ok(())
    };
    let mut header = RequestHeader::build("POST", path.as_bytes(), Some(8))
        .map_err(|_| Refusal::BadRequest("cannot build the upstream request".into()))?;
    build(&mut header)
        .map_err(|_| Refusal::BadRequest("cannot build the upstream request".into()))?;
    Ok(header)
}

/// The provider credential: the tenant's managed key (from Secrets Manager, cached), or
/// the proxy's own from its configuration.
async fn credential<'s>(
    service: &'s ProxyService,
    view: &KeyView,
    provider: Provider,
) -> Result<Credential<'s>, Refusal> {
    if view.key.use_managed_key {
        let managed = service
            .state
            .managed_key(&view.key.tenant_id, provider)
            .ok_or(Refusal::ManagedKeyMissing(provider))?;
        return service
            .managed_keys
            .resolve(&managed.secret_ref)
            .await
            .map(Credential::Managed)
            .map_err(|_| Refusal::ManagedKeyUnavailable(provider));
    }
    service
        .providers
        .endpoint(provider)
        .api_key
        .as_ref()
        .map(Credential::Configured)
        .ok_or(Refusal::ProviderNotConfigured(provider))
}

/// A provider credential, borrowed from the configuration or shared with the cache.
enum Credential<'s> {
    Configured(&'s Secret),
    Managed(Arc<Secret>),
}

impl Credential<'_> {
    fn expose(&self) -> &str {
        match self {
            Credential::Configured(secret) => secret.expose(),
            Credential::Managed(secret) => secret.expose(),
        }
    }
}

/// Holds the request's estimated cost against its key's budget, if the key has one.
fn reserve_budget(
    service: &ProxyService,
    view: &KeyView,
    admitted: &Admitted,
    body_bytes: usize,
    max_output_tokens: Option<i64>,
) -> Result<Option<Reservation>, Refusal> {
    let Some(limit_micros) = view.key.budget_limit_micros else {
        return Ok(None);
    };
    let estimate = budget::estimate_micros(admitted.price, body_bytes, max_output_tokens);
    let month = Timestamp::from_millis(now_ms()).month_start();
    service
        .state
        .budgets
        .reserve(&view.key.id, limit_micros, estimate, month)
        .map(Some)
        .map_err(|over| Refusal::BudgetExceeded {
            spent_micros: over.spent_micros,
            limit_micros: over.limit_micros,
        })
}

/// Queues the request's usage; `budget` is its settled hold on the key's budget.
fn record_usage(
    service: &ProxyService,
    view: &KeyView,
    admitted: &Admitted,
    endpoint: Endpoint,
    tokens: Tokens,
    budget: Option<BudgetHold>,
) {
    let now = now_ms();
    service.usage.record(UsageRecord {
        record_id: new_id(IdKind::Usage, now),
        tenant_id: view.key.tenant_id.clone(),
        agent_id: view.key.agent_id.clone(),
        model_provider: admitted.route.provider,
        model_name: admitted.route.upstream_model.clone(),
        request_type: endpoint.request_type(),
        input_tokens: tokens.input,
        output_tokens: tokens.output,
        recorded_at: Timestamp::from_millis(now).to_string(),
        api_key_id: view.key.id.clone(),
        budget,
    });
}

/// What a forwarded request came to, for the metrics.
struct Outcome {
    status: u16,
    tokens: Tokens,
    cost_micros: i64,
}

fn observe(
    service: &ProxyService,
    admitted: &Admitted,
    Outcome {
        status,
        tokens,
        cost_micros,
    }: Outcome,
    total: Duration,
    overhead: Duration,
) {
    let provider = admitted.route.provider;
    let metrics = &service.metrics;
    metrics
        .requests
        .with_label_values(&[
            provider.as_str(),
            model_label(admitted.price),
            status_class(status),
            "forwarded",
        ])
        .inc();
    metrics
        .duration
        .with_label_values(&[provider.as_str()])
        .observe(total.as_secs_f64());
    metrics.overhead.observe(overhead.as_secs_f64());
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    metrics
        .tokens
        .with_label_values(&[provider.as_str(), "input"])
        .inc_by(count(tokens.input));
    metrics
        .tokens
        .with_label_values(&[provider.as_str(), "output"])
        .inc_by(count(tokens.output));
    if admitted.price.is_some() {
        metrics
            .cost_micros
            .with_label_values(&[provider.as_str()])
            .inc_by(count(cost_micros));
    }
}

/// `GET /v1/models`: the models this key may use, in OpenAI's list shape.
pub fn model_list(view: &KeyView) -> String {
    let providers = admission::allowed_providers(view);
    let models: Vec<(String, &str)> = if view.key.allowed_models.is_empty() {
        pricing::PRICES
            .iter()
            .filter(|price| providers.contains(&price.provider))
            .map(|price| (price.model.to_owned(), price.provider.as_str()))
            .collect()
    } else {
        view.key
            .allowed_models
            .iter()
            .map(|model| {
                let owner = crate::routing::route(model, &providers)
                    .map_or("unknown", |route| route.provider.as_str());
                (model.clone(), owner)
            })
            .collect()
    };
    let data: Vec<Value> = models
        .into_iter()
        .map(|(id, owner)| json!({ "id": id, "object": "model", "created": 0, "owned_by": owner }))
        .collect();
    json!({ "object": "list", "data": data }).to_string()
}
