//! Answers one request of an agent's connection (`crate::connection` reads it): the
//! proxy's own endpoints, its refusals, and forwarded requests through
//! [`crate::forward`].

use std::sync::atomic::Ordering;

use bytes::Bytes;
use pingora::protocols::http::ServerSession;
use serde_json::json;
use warden_shared::keys::hash_credential;

use crate::admission;
use crate::endpoint::Endpoint;
use crate::forward;
use crate::mcp::Caller;
use crate::metrics::status_class;
use crate::otel::RequestTrace;
use crate::refusal::{Refusal, Refused};
use crate::resources::Resources;
use crate::respond::{respond, respond_refusal};
use crate::state::KeyView;
use warden_shared::clock::system_now_ms;

/// What every request of an event loop shares, answering each request.
pub struct ProxyService {
    resources: Resources,
}

impl ProxyService {
    pub fn new(resources: Resources) -> ProxyService {
        ProxyService { resources }
    }

    /// Answers the request whose header `session` has read, completely.
    pub async fn answer(&self, session: &mut ServerSession) {
        // Anthropic's SDKs read refusals in Anthropic's error shape.
        let anthropic = session.req_header().uri.path().starts_with("/v1/messages");
        let mut trace = self.trace(session);
        let routed = self.route(session, trace.as_mut()).await;
        let refused = routed.err();
        if let Some(Refused { refusal, labels }) = &refused {
            let (provider, model) = labels.as_ref().map_or(("none", "none"), |labels| {
                (labels.provider.as_str(), labels.model)
            });
            self.resources
                .metrics
                .requests
                .with_label_values(&[
                    provider,
                    model,
                    status_class(refusal.status()),
                    refusal.code(),
                ])
                .inc();
            tracing::info!(
                method = %session.req_header().method,
                path = %session.req_header().uri.path(),
                status = refusal.status(),
                provider,
                model,
                decision = refusal.code(),
                "refused"
            );
            let body = Bytes::from(if anthropic {
                refusal.anthropic_body()
            } else {
                refusal.body()
            });
            respond_refusal(session, refusal.status(), body, refusal.retry_after_secs()).await;
        }
        if let Some(trace) = trace {
            let status = session
                .response_written()
                .map_or(0, |header| header.status.as_u16());
            trace.end(status, refused.as_ref().map(|r| &r.refusal));
        }
    }

    /// The request's trace when tracing is on, for the agent APIs (`/v1/...`); the
    /// probes and metrics are not traced, and MCP traces its tool calls itself.
    fn trace(&self, session: &ServerSession) -> Option<RequestTrace<'_>> {
        let tracer = self.resources.tracer.as_ref()?;
        let header = session.req_header();
        let path = header.uri.path();
        path.starts_with("/v1/")
            .then(|| RequestTrace::start(tracer, header.method.as_str(), path, &header.headers))
    }

    async fn route(
        &self,
        session: &mut ServerSession,
        trace: Option<&mut RequestTrace<'_>>,
    ) -> Result<(), Refused> {
        let shared = &self.resources;
        let method = session.req_header().method.as_str().to_owned();
        let path = session.req_header().uri.path().to_owned();
        match (method.as_str(), path.as_str()) {
            ("GET", "/healthz") => {
                let body = json!({
                    "status": if shared.state.is_loaded() { "ok" } else { "starting" },
                    "snapshot_version": shared.state.version(),
                });
                respond(
                    session,
                    200,
                    "application/json",
                    Bytes::from(body.to_string()),
                )
                .await;
                Ok(())
            }
            ("GET", "/readyz") => {
                // Ready once the first state is loaded, until the shutdown signal.
                let status = if shared.draining.load(Ordering::Relaxed) {
                    "draining"
                } else if shared.state.is_loaded() {
                    "ready"
                } else {
                    "starting"
                };
                let body = json!({
                    "status": status,
                    "snapshot_version": shared.state.version(),
                });
                respond(
                    session,
                    if status == "ready" { 200 } else { 503 },
                    "application/json",
                    Bytes::from(body.to_string()),
                )
                .await;
                Ok(())
            }
            ("GET", "/metrics") => {
                let age = (system_now_ms() - shared.state.synced_at_ms()).max(0) / 1000;
                shared
                    .metrics
                    .snapshot_age_seconds
                    .set(if shared.state.is_loaded() { age } else { -1 });
                let held = shared.state.budgets.held();
                shared
                    .metrics
                    .budget_reserved_micros
                    .set(held.reserved_micros);
                shared
                    .metrics
                    .budget_pending_micros
                    .set(held.pending_micros);
                shared
                    .metrics
                    .budget_granted_micros
                    .set(held.granted_micros);
                let text = shared.metrics.render();
                respond(session, 200, "text/plain; version=0.0.4", Bytes::from(text)).await;
                Ok(())
            }
            ("GET", "/v1/models") => {
                let view = self.authenticate(session)?;
                admission::check_key(&view, shared.clock.now_ms())?;
                let body = admission::model_list(&view, &shared.catalog);
                respond(session, 200, "application/json", Bytes::from(body)).await;
                Ok(())
            }
            ("POST", "/v1/chat/completions") => {
                let view = self.authenticate(session)?;
                forward::forward(shared, session, view, Endpoint::ChatCompletions, trace).await
            }
            ("POST", "/v1/embeddings") => {
                let view = self.authenticate(session)?;
                forward::forward(shared, session, view, Endpoint::Embeddings, trace).await
            }
            ("POST", "/v1/responses") => {
                let view = self.authenticate(session)?;
                forward::forward(shared, session, view, Endpoint::Responses, trace).await
            }
            ("POST", "/v1/messages") => {
                let view = self.authenticate(session)?;
                forward::forward(shared, session, view, Endpoint::Messages, trace).await
            }
            ("POST", "/v1/messages/count_tokens") => {
                let view = self.authenticate(session)?;
                forward::forward(shared, session, view, Endpoint::MessagesCountTokens, trace).await
            }
            ("POST" | "GET" | "DELETE", "/mcp") => {
                let view = self.authenticate(session)?;
                let caller = Caller { view, server: None };
                shared
                    .mcp
                    .serve(session, caller, shared.max_body_bytes)
                    .await
                    .map_err(Into::into)
            }
            ("POST" | "GET" | "DELETE", path) if path.starts_with("/mcp/") => {
                let server = &path["/mcp/".len()..];
                if !warden_shared::mcp::is_server_name(server) {
                    return Err(Refusal::NotFound.into());
                }
                let view = self.authenticate(session)?;
                let caller = Caller {
                    view,
                    server: Some(server.to_owned()),
                };
                shared
                    .mcp
                    .serve(session, caller, shared.max_body_bytes)
                    .await
                    .map_err(Into::into)
            }
            (
                _,
                "/v1/chat/completions"
                | "/v1/embeddings"
                | "/v1/responses"
                | "/v1/messages"
                | "/v1/messages/count_tokens"
                | "/v1/models"
                | "/healthz"
                | "/readyz"
                | "/metrics"
                | "/mcp",
            ) => Err(Refusal::MethodNotAllowed.into()),
            _ => Err(Refusal::NotFound.into()),
        }
    }

    /// The key behind `Authorization: Bearer ...` (or `x-api-key`, as Anthropic's SDKs
    /// send it), from memory.
    fn authenticate(&self, session: &ServerSession) -> Result<KeyView, Refusal> {
        let state = &self.resources.state;
        if !state.is_loaded() {
            return Err(Refusal::NotReady);
        }
        let headers = &session.req_header().headers;
        let bearer = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token);
        let token = bearer
            .or_else(|| headers.get("x-api-key")?.to_str().ok())
            .map(str::trim)
            .filter(|token| !token.is_empty())
            .ok_or(Refusal::MissingKey)?;
        // Looked up by its SHA-256, like the control plane stores it: the map holds no
        // secrets, and equality of hashes reveals nothing about a near miss.
        state
            .lookup(&hash_credential(token))
            .ok_or(Refusal::InvalidKey)
    }
}
