//! The settle step, once the answer is relayed or the client is gone: the request's
//! tokens (as the provider reported them, else estimated, so a cancelled request is
//! never free) go to the rate windows that counted it; its usage record, carrying its
//! budgets' settled cost and its policy decision, is queued; the provider's connection
//! goes back to the pool when the answer was read to its end; the metrics count it.

use std::time::{Duration, Instant};

use warden_shared::ids::{new_id, IdKind};
use warden_shared::pricing::ModelPrice;
use warden_shared::registry::Provider;
use warden_shared::timestamp::Timestamp;

use super::gate::Passed;
use super::send::Answer;
use super::Ready;
use crate::metrics::{model_label, status_class, ProxyMetrics};
use crate::otel::{RequestTrace, Settled};
use crate::relay::Relayed;
use crate::resources::Resources;
use crate::upstream::Exchange;
use crate::usage::extract::{estimate_tokens, Tokens};
use crate::usage::UsageRecord;

/// Records what the request came to; returns the provider's connection when the answer
/// was read to its end, for the pool. Not async: what this holds (the answer, the
/// gate's counts, the record) would otherwise stay in the request's future, which lives
/// as long as its connection.
pub(super) fn settle(
    shared: &Resources,
    ready: Ready<'_>,
    passed: Passed,
    answer: Answer,
    trace: Option<&mut RequestTrace<'_>>,
) -> Option<Exchange> {
    let work = Instant::now();
    let Answer {
        status,
        relayed,
        exchange,
        overhead,
        facts,
    } = answer;
    let Passed {
        mut policies,
        admission,
        ..
    } = passed;
    let tokens = tokens_of(&ready, &relayed, status, exchange.is_none());
    let admitted = ready.admitted;
    let cost_micros = admitted.cost_micros(tokens.input, tokens.output);
    policies.add_tokens(tokens.input + tokens.output);
    let (provider, price) = (admitted.route.provider, admitted.price);
    let capture = shared
        .state
        .payload_capture(&ready.view.key.tenant_id)
        .map(|tenant| shared.captures.capture(tenant, ready.body));
    if let Some(trace) = trace {
        // The span shows the prompt the usage record captures: the same body, held once.
        if let Some(capture) = capture
            .as_ref()
            .filter(|_| trace.wants_content(ready.endpoint))
        {
            trace.content(capture.clone(), ready.endpoint);
        }
        let settled = Settled {
            status,
            input_tokens: tokens.input,
            output_tokens: tokens.output,
            cost_micros: price.map(|_| cost_micros),
            estimated: relayed.usage.is_none() && tokens != Tokens::default(),
        };
        if let Some(approval_id) = policies.released_by {
            trace.approval(approval_id);
        }
        trace.settled(&settled, facts);
    }
    // The record carries the policies' decision too: one row and one post fewer.
    let recorded_at = shared.clock.now_ms();
    shared.usage.record(UsageRecord {
        record_id: new_id(IdKind::Usage, recorded_at),
        key: ready.view.key.clone(),
        model_provider: provider,
        model_name: admitted.route.upstream_model,
        request_type: ready.endpoint.request_type(),
        input_tokens: tokens.input,
        output_tokens: tokens.output,
        recorded_at: Timestamp::from_millis(recorded_at),
        budget: admission.reservation.settle(cost_micros),
        evaluation: policies.decision_for_usage(),
        capture,
        tool_call: None,
    });
    let outcome = Outcome {
        status,
        tokens,
        cost_micros,
    };
    let overhead = overhead + work.elapsed();
    // One line per request (at `info`; the load test runs at `error`, where this costs a
    // level check): never the key or the prompt.
    tracing::info!(
        endpoint = ready.endpoint.request_type(),
        status,
        duration_ms = ready.started.elapsed().as_millis() as u64,
        tenant_id = %ready.view.key.tenant_id,
        agent_id = %ready.view.key.agent_id,
        provider = provider.as_str(),
        model = %admitted.requested_model,
        input_tokens = tokens.input,
        output_tokens = tokens.output,
        decision = "forwarded",
        "proxied"
    );
    observe(
        &shared.metrics,
        provider,
        price,
        outcome,
        ready.started.elapsed(),
        overhead,
    );
    exchange.filter(|_| relayed.complete)
}

/// Usage the provider reported. Without it: an error answer (4xx, 5xx) counts as a
/// request with no tokens, streamed or not (providers do not bill them, and a storm of
/// streamed 429s must not drain budgets); a successful stream cut short, a provider that
/// never reports, or a request whose client hung up before the answer (`cancelled`: the
/// provider had it and may have worked on it) is estimated from the request size and the
/// text relayed. A plain answer without usage counts no tokens.
fn tokens_of(ready: &Ready<'_>, relayed: &Relayed, status: u16, cancelled: bool) -> Tokens {
    if let Some(usage) = relayed.usage {
        return usage;
    }
    let provider_error = !cancelled && status >= 400;
    if provider_error || !(ready.streaming || cancelled) {
        return Tokens::default();
    }
    Tokens {
        input: estimate_tokens(ready.body.len()),
        output: estimate_tokens(relayed.generated_chars),
    }
}

/// What a forwarded request came to, for the metrics.
struct Outcome {
    status: u16,
    tokens: Tokens,
    cost_micros: i64,
}

fn observe(
    metrics: &ProxyMetrics,
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
    metrics
        .requests
        .with_label_values(&[
            provider.as_str(),
            model_label(price),
            status_class(status),
            "forwarded",
        ])
        .inc();
    metrics.overhead.observe(overhead.as_secs_f64());
    let Some(per_provider) = metrics.provider(provider) else {
        return;
    };
    per_provider.duration.observe(total.as_secs_f64());
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    per_provider.input_tokens.inc_by(count(tokens.input));
    per_provider.output_tokens.inc_by(count(tokens.output));
    if price.is_some() {
        per_provider.cost_micros.inc_by(count(cost_micros));
    }
}
