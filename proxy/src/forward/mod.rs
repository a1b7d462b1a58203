//! Forwarding one OpenAI-compatible request, in steps. Here: read and check the body
//! and admit the request for its model ([`Ready`]). Then [`gate`]: the policies, the
//! key's own rate limit and the budgets, a refusal giving back what they had counted;
//! [`send`]: the provider's request written and sent while the client is watched, and
//! the answer relayed; [`settle`]: the request's usage queued, the provider's connection
//! returned to the pool, the metrics.

mod gate;
mod send;
mod settle;

use std::time::Instant;

use bytes::Bytes;
use pingora::protocols::http::ServerSession;
use warden_shared::catalog::ProviderCatalog;
use warden_shared::registry::Provider;

use crate::admission::{self, Admitted};
use crate::budget;
use crate::endpoint::Endpoint;
use crate::guardrails::GUARDRAIL_HEADER;
use crate::metrics::model_label;
use crate::otel::RequestTrace;
use crate::refusal::{Refusal, Refused, RouteLabels};
use crate::relay::BUDGET_WARNING_HEADER;
use crate::request_body::{read_body, Peek};
use crate::resources::Resources;
use crate::state::KeyView;

/// Forwards the request of `view`'s key to the provider of its model and relays the
/// answer. `Err` is the refusal to answer instead; once the request is admitted it
/// carries the provider and model, for the metrics.
pub async fn forward(
    shared: &Resources,
    session: &mut ServerSession,
    view: KeyView,
    endpoint: Endpoint,
    mut trace: Option<&mut RequestTrace<'_>>,
) -> Result<(), Refused> {
    let started = Instant::now();
    if let Some(trace) = trace.as_deref_mut() {
        trace.caller(&view);
    }
    admission::check_key(&view, shared.clock.now_ms())?;
    ensure_json(session)?;
    let body = read_body(session, shared.max_body_bytes).await?;
    // The body a `redact` guardrail leaves, sent in place of the agent's.
    let redacted_body: Bytes;
    let work = Instant::now();
    let mut ready = admit(view, endpoint, &body, &shared.catalog, started, work)?;
    // From here on the provider and model are known: refusals are counted under them.
    let labels = RouteLabels {
        provider: ready.admitted.route.provider,
        model: model_label(ready.admitted.price),
    };
    let refused = |refusal| Refused {
        refusal,
        labels: Some(labels),
    };
    let mut passed = match gate::gate(shared, &ready).await {
        Ok(passed) => passed,
        Err(stopped) => {
            if let Some(report) = stopped.approval {
                let approval_id = shared.approvals.ask(*report).await;
                if let (Some(trace), Some(approval_id)) = (trace, approval_id) {
                    trace.approval(approval_id);
                }
            }
            return Err(refused(stopped.refusal));
        }
    };
    let mut added = Vec::new();
    if let Some((value, header)) = passed.policies.redacted.take() {
        // Serializing a parsed JSON value cannot fail; the agent's body stays otherwise.
        redacted_body = Bytes::from(serde_json::to_vec(&value).unwrap_or_default());
        ready.body = &redacted_body;
        added.push((GUARDRAIL_HEADER, header));
    }
    if let Some(warning) = passed.budget_warning.clone() {
        added.push((BUDGET_WARNING_HEADER, warning));
    }
    let answer = send::send(shared, session, &ready, &added, trace.as_deref_mut())
        .await
        .map_err(refused)?;
    if let Some(exchange) = settle::settle(shared, ready, passed, answer, trace) {
        // Boxed: pingora's check of the connection is a 4.5 KiB future that would
        // otherwise be part of every request's future, which is allocated as large as
        // its largest step for the whole request, a stream's included.
        Box::pin(shared.upstreams.release(exchange)).await;
    }
    Ok(())
}

/// An admitted request, its body read: what the steps work from.
struct Ready<'a> {
    view: KeyView,
    endpoint: Endpoint,
    body: &'a Bytes,
    admitted: Admitted,
    /// A chat completion or response the client asked to have streamed.
    streaming: bool,
    /// A stream whose client did not ask for usage: the provider is asked for it
    /// (`stream_options.include_usage`) and the relay strips it from the answer.
    inject_usage: bool,
    /// What the request may cost, held in its budgets (`crate::budget::estimate_micros`).
    estimate_micros: i64,
    started: Instant,
    /// When the proxy's own work on the request began (after reading the body).
    work: Instant,
}

/// Reads the body's few fields ([`Peek`]) and admits the request for its model.
fn admit<'a>(
    view: KeyView,
    endpoint: Endpoint,
    body: &'a Bytes,
    catalog: &ProviderCatalog,
    started: Instant,
    work: Instant,
) -> Result<Ready<'a>, Refusal> {
    // Serde would read `Peek` from an array by position (`["gpt-4o"]` as its model):
    // the body must be an object before it is read at all.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Refusal::BadRequest("the body must be a JSON object".into()));
    }
    let peek: Peek = serde_json::from_slice(body).map_err(|_| unreadable(body))?;
    let model = peek
        .model
        .as_deref()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| Refusal::BadRequest("`model` is required".into()))?;
    let admitted = admission::admit(&view, model, catalog)?;
    let provider = admitted.route.provider;
    if endpoint.is_anthropic() && provider != Provider::Anthropic {
        // Only Anthropic speaks its Messages API among the providers (declared ones speak
        // OpenAI's).
        return Err(Refusal::BadRequest(format!(
            "the Messages API is served for Anthropic's models; `{model}` goes to {}",
            provider.as_str()
        )));
    }
    let streaming = endpoint.streams() && peek.stream == Some(true);
    let client_wants_usage =
        peek.stream_options.as_ref().and_then(|o| o.include_usage) == Some(true);
    let estimate_micros = budget::estimate_micros(
        admitted.price,
        body.len(),
        peek.max_completion_tokens
            .or(peek.max_output_tokens)
            .or(peek.max_tokens),
    );
    Ok(Ready {
        view,
        endpoint,
        body,
        admitted,
        streaming,
        inject_usage: streaming && endpoint.usage_on_request() && !client_wants_usage,
        estimate_micros,
        started,
        work,
    })
}

/// What is wrong with a body `Peek` could not read, named by field: read again, on this
/// error path only, tracking where it failed.
fn unreadable(body: &[u8]) -> Refusal {
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let message = match serde_path_to_error::deserialize::<_, Peek<'_>>(&mut deserializer) {
        Err(error) if error.inner().is_syntax() || error.inner().is_eof() => {
            format!("the body is not valid JSON: {}", error.inner())
        }
        Err(error) => format!("`{}`: {}", error.path(), error.inner()),
        Ok(_) => "the body must be one JSON object".to_owned(),
    };
    Refusal::BadRequest(message)
}

fn ensure_json(session: &ServerSession) -> Result<(), Refusal> {
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
