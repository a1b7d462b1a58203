//! Forwarding one OpenAI-compatible request: read and check the body, admit it, send it
//! to the provider (`upstream_request` builds what is sent), relay the answer (`relay`),
//! and queue its usage.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;
use serde_json::{json, Value};
use warden_shared::budget::{key_scope, TENANT_SCOPE};
use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing::{self, micros_to_decimal, ModelPrice};
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use crate::admission;
use crate::budget::{self, Admission, BudgetRule, BudgetWarning, RuleSource};
use crate::clock::now_ms;
use crate::endpoint::Endpoint;
use crate::metrics::{model_label, status_class};
use crate::policy_gate;
use crate::refusal::{Refusal, Refused, RouteLabels};
use crate::relay::{relay_stream, relay_whole, Relayed};
use crate::request_body::{rewrite, Peek};
use crate::service::ProxyService;
use crate::state::KeyView;
use crate::upstream_request::{credential, upstream_header, UpstreamBody};
use crate::usage::extract::{estimate_tokens, Tokens};
use crate::usage::UsageRecord;

pub async fn forward(
    service: &ProxyService,
    session: &mut Session,
    view: KeyView,
    endpoint: Endpoint,
) -> Result<(), Refused> {
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
        .ok_or_else(|| Refusal::BadRequest("`model` is required".into()))?;
    let admitted = admission::admit(&view, model)?;
    // From here on the provider and model are known: refusals are counted under them.
    let labels = RouteLabels {
        provider: admitted.route.provider,
        model: model_label(admitted.price),
    };
    let ready = Ready {
        view,
        endpoint,
        body: &body,
        peek,
        admitted,
        started,
        work,
    };
    send_admitted(service, session, ready)
        .await
        .map_err(|refusal| Refused {
            refusal,
            labels: Some(labels),
        })
}

/// An admitted request, its body read: what `send_admitted` checks and sends.
struct Ready<'a> {
    view: KeyView,
    endpoint: Endpoint,
    body: &'a Bytes,
    peek: Peek<'a>,
    admitted: admission::Admitted,
    started: Instant,
    /// When the proxy's own work on the request began (after reading the body).
    work: Instant,
}

/// Checks an admitted request against the policies, its key's rate limit and the
/// budgets, sends it, relays the answer and records its usage.
async fn send_admitted(
    service: &ProxyService,
    session: &mut Session,
    ready: Ready<'_>,
) -> Result<(), Refusal> {
    let Ready {
        view,
        endpoint,
        body,
        peek,
        admitted,
        started,
        work,
    } = ready;
    let provider = admitted.route.provider;
    let estimate = budget::estimate_micros(
        admitted.price,
        body.len(),
        peek.max_completion_tokens.or(peek.max_tokens),
    );
    let now = now_ms();
    let mut policies = policy_gate::check(
        service,
        &view,
        &admitted,
        endpoint.request_type(),
        estimate,
        now,
    )?;
    if let Some(counted) = service
        .rates
        .count_key_request(&view.key, now)
        .inspect_err(|_| policies.give_back())?
    {
        policies.counted_also(counted);
    }
    let budget_rules = std::mem::take(&mut policies.budget_rules);
    let admission = reserve_budget(service, &view, budget_rules, estimate, now)
        .inspect_err(|_| policies.give_back())?;
    let warning = budget_warning_header(&admission.warnings);
    let streaming = endpoint == Endpoint::ChatCompletions && peek.stream == Some(true);
    let client_wants_usage =
        peek.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true);
    let inject_usage = streaming && !client_wants_usage;
    let upstream_body = if inject_usage || admitted.route.upstream_model != admitted.requested_model
    {
        rewrite(body, &admitted.route.upstream_model, inject_usage)?
    } else {
        body.clone()
    };
    drop(peek);
    let credential = credential(service, &view, provider).await?;
    let user_agent = session
        .req_header()
        .headers
        .get(http::header::USER_AGENT)
        .cloned();
    let body_facts = UpstreamBody {
        length: upstream_body.len(),
        streaming,
    };
    let build_header = || {
        upstream_header(
            service,
            user_agent.as_ref(),
            &admitted,
            endpoint,
            &body_facts,
            credential.expose(),
        )
    };
    let mut overhead = work.elapsed();

    // The provider's answer, unless the client hangs up first: then the request to the
    // provider is dropped with its connection, which cancels it there.
    let sent = tokio::select! {
        biased;
        sent = service.upstreams.send(provider, &build_header, upstream_body) => Some(sent?),
        () = client_gone(session) => None,
    };
    let (status, relayed, exchange) = match sent {
        Some(mut exchange) => {
            let status = exchange
                .response_header()
                .map_or(502, |h| h.status.as_u16());
            let is_event_stream = exchange
                .response_header()
                .and_then(|h| h.headers.get(http::header::CONTENT_TYPE))
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            let relayed = if streaming && is_event_stream && (200..300).contains(&status) {
                relay_stream(session, &mut exchange, inject_usage, warning.as_deref()).await
            } else {
                relay_whole(session, &mut exchange, status, provider, warning.as_deref()).await
            };
            (status, relayed, Some(exchange))
        }
        None => {
            session.set_keepalive(None);
            let relayed = Relayed {
                complete: false,
                usage: None,
                generated_chars: 0,
            };
            (CLIENT_CLOSED, relayed, None)
        }
    };
    let cancelled = exchange.is_none();

    let work = Instant::now();
    // Usage the provider reported; otherwise, for a stream cut short, a request whose
    // client hung up before the answer (or a provider that never reports), an estimate
    // from the request size and the text relayed, so a cancelled request is never free.
    // An error answer without usage counts as a request with no tokens.
    let tokens = relayed.usage.unwrap_or(if streaming || cancelled {
        Tokens {
            input: estimate_tokens(body.len()),
            output: estimate_tokens(relayed.generated_chars),
        }
    } else {
        Tokens::default()
    });
    let cost_micros = admitted.cost_micros(tokens.input, tokens.output);
    policies.add_tokens(tokens.input + tokens.output);
    let price = admitted.price;
    // The record carries the policies' decision too: one row and one post fewer.
    let recorded_at = now_ms();
    service.usage.record(UsageRecord {
        record_id: new_id(IdKind::Usage, recorded_at),
        key: view.key.clone(),
        model_provider: admitted.route.provider,
        model_name: admitted.route.upstream_model,
        request_type: endpoint.request_type(),
        input_tokens: tokens.input,
        output_tokens: tokens.output,
        recorded_at: Timestamp::from_millis(recorded_at),
        budget: admission.reservation.settle(cost_micros),
        evaluation: policies.decision_for_usage(),
    });
    if let Some(exchange) = exchange.filter(|_| relayed.complete) {
        service.upstreams.release(exchange).await;
    }
    overhead += work.elapsed();
    observe(
        service,
        provider,
        price,
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

/// The status recorded (metrics only: nothing is sent) for a request whose client hung
/// up before the provider answered; nginx's convention.
const CLIENT_CLOSED: u16 = 499;

/// Completes when the client closes its connection (or sends bytes where none may come)
/// after its request body; pending while it waits. pingora's own proxy watches the same
/// way (`read_body_or_idle`) while it waits on an upstream. The watch costs no system
/// call while the client is quiet: the read finds the socket not ready (its last read
/// drained it) and only registers for a wake-up (strace under load: 2.00 `recvfrom` a
/// request with and without it). Starting it after a delay instead cost a timer, whose
/// registration woke the event loop's driver through an eventfd `write` on 5 to 14 %
/// of requests.
async fn client_gone(session: &mut Session) {
    if let Err(error) = session.read_body_or_idle(true).await {
        tracing::debug!(%error, "client went away while its provider was answering");
    }
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

/// Holds the request's estimated cost in every budget that covers it: the key's own,
/// the tenant's budget limits on the tenant, the agent's team and the agent, and the
/// `budget_limit` policies it passed (`rules`; see `crate::budget`).
fn reserve_budget(
    service: &ProxyService,
    view: &KeyView,
    mut rules: Vec<BudgetRule>,
    estimate_micros: i64,
    now_ms: i64,
) -> Result<Admission, Refusal> {
    let key = &view.key;
    if let Some(limit_micros) = key.budget_limit_micros {
        rules.push(BudgetRule {
            scope: key_scope(&key.id),
            limit_micros,
            // A key's own budget blocks at its limit; its warning comes at 80 %.
            warn_pct: 80,
            block_pct: 100,
            source: RuleSource::Key,
        });
    }
    if let Some(limits) = service.state.budget_limits(&key.tenant_id) {
        let agent = view.agent.as_deref();
        let covers = |scope: &str| {
            scope == TENANT_SCOPE
                || scope.strip_prefix("agent:") == Some(key.agent_id.as_str())
                || scope
                    .strip_prefix("team:")
                    .is_some_and(|team| agent.and_then(|a| a.team_id.as_deref()) == Some(team))
        };
        rules.extend(
            limits
                .iter()
                .filter(|l| covers(&l.scope))
                .map(|limit| BudgetRule {
                    scope: limit.scope.clone(),
                    limit_micros: limit.monthly_limit_micros,
                    warn_pct: limit.warn_threshold_pct,
                    block_pct: limit.block_threshold_pct,
                    source: RuleSource::Limit(limit.id.clone()),
                }),
        );
    }
    let month = Timestamp::from_millis(now_ms).month_start();
    service
        .state
        .budgets
        .reserve(&key.tenant_id, &rules, estimate_micros, month)
        .map_err(|over| match over.source {
            RuleSource::Policy(policy_id) => Refusal::PolicyBudgetExceeded {
                policy_id,
                reason: format!(
                    "spend this month has reached the budget's block threshold, or the \
                     request's estimated cost does not fit below it (${} of ${})",
                    micros_to_decimal(over.spent_micros),
                    micros_to_decimal(over.block_micros)
                ),
            },
            _ => Refusal::BudgetExceeded(over),
        })
}

/// The value of `x-warden-budget-warning` for budgets past their warn threshold:
/// `<scope>=<percent of the monthly limit>%`, comma-separated.
fn budget_warning_header(warnings: &[BudgetWarning]) -> Option<String> {
    if warnings.is_empty() {
        return None;
    }
    let parts: Vec<String> = warnings
        .iter()
        .map(|w| format!("{}={:.2}%", w.scope, w.percentage))
        .collect();
    Some(parts.join(", "))
}

/// What a forwarded request came to, for the metrics.
struct Outcome {
    status: u16,
    tokens: Tokens,
    cost_micros: i64,
}

fn observe(
    service: &ProxyService,
    provider: Provider,
    price: Option<&'static ModelPrice>,
    Outcome {
        status,
        tokens,
        cost_micros,
    }: Outcome,
    total: Duration,
    overhead: Duration,
) {
    let metrics = &service.metrics;
    metrics
        .requests
        .with_label_values(&[
            provider.as_str(),
            model_label(price),
            status_class(status),
            "forwarded",
        ])
        .inc();
    let per_provider = metrics.provider(provider);
    per_provider.duration.observe(total.as_secs_f64());
    metrics.overhead.observe(overhead.as_secs_f64());
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    per_provider.input_tokens.inc_by(count(tokens.input));
    per_provider.output_tokens.inc_by(count(tokens.output));
    if price.is_some() {
        per_provider.cost_micros.inc_by(count(cost_micros));
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
