//! The console: the pages people use when something is happening (overview, approvals,
//! agents and the kill switch), served by the control plane itself under `/console`.
//!
//! Pages call the API's service functions with the [`crate::auth::Caller`] their session
//! cookie authenticates, so scopes, plan gates and tenant isolation are the API's: the
//! console has no SQL and no rules of its own. HTML comes from compiled, auto-escaping
//! askama templates (`console/templates/`); the scripts are vendored htmx
//! (`console/assets/`), embedded and served under content-hashed names. Every answer
//! carries a Content-Security-Policy without inline script, and every form post is
//! checked for its origin and CSRF token before anything is read from it.

mod agent_compliance;
mod agents;
mod anomalies;
mod approvals;
mod assets;
mod audit;
mod billing;
mod chart;
mod compliance;
mod costs;
mod docs;
mod enforcement;
mod filters;
mod form;
mod headers;
mod keys;
mod mcp;
mod notifications;
mod overview;
mod page;
mod policies;
mod session;
mod sign_in;
mod sign_up;
mod sso;

use axum::response::Redirect;
use axum::routing::{get, post};
use axum::Router;

use crate::state::AppState;

/// The console's routes. They are pages, not API operations, so they are not in the
/// OpenAPI document (which is why they may use `Router::route`).
#[allow(clippy::disallowed_methods)]
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(overview::show))
        .route("/console/sign-in", get(sign_in::form).post(sign_in::submit))
        .route("/console/sign-in/key", post(sign_in::submit_key))
        .route("/console/sign-up", get(sign_up::form).post(sign_up::submit))
        .route("/console/sign-out", post(sign_in::sign_out))
        .route("/console/sso", get(sso::start))
        .route("/console/sso/finish", get(sso::finish))
        .route("/console/approvals", get(approvals::show))
        .route("/console/approvals/queue", get(approvals::queue_fragment))
        .route("/console/approvals/events", get(approvals::events))
        .route("/console/approvals/{id}", post(approvals::decide))
        .route("/console/agents", get(agents::list))
        .route("/console/agents/{id}", get(agents::show))
        .route("/console/agents/{id}/{action}", post(agents::switch))
        .route(
            "/console/agents/{id}/compliance",
            get(agent_compliance::show),
        )
        .route(
            "/console/agents/{id}/risk-classification",
            post(agent_compliance::classify),
        )
        .route(
            "/console/agents/{id}/fria",
            post(agent_compliance::write_fria),
        )
        .route(
            "/console/agents/{id}/fria/{fria_id}/submit",
            post(agent_compliance::submit_fria),
        )
        .route(
            "/console/agents/{id}/transparency-card",
            get(agent_compliance::card),
        )
        .route("/console/compliance", get(compliance::show))
        .route("/console/incidents", post(compliance::report))
        .route(
            "/console/incidents/{id}",
            get(compliance::incident).post(compliance::update),
        )
        .route(
            "/console/incidents/{id}/evidence-pack",
            get(compliance::evidence_pack),
        )
        .route("/console/policies", get(policies::show))
        .route("/console/policies/{id}/enabled", post(policies::switch))
        .route(
            "/console/policies/from-template/{template_id}",
            post(policies::from_template),
        )
        .route("/console/anomalies", get(anomalies::show))
        .route(
            "/console/anomalies/{id}/acknowledge",
            post(anomalies::acknowledge),
        )
        .route("/console/anomalies/{id}/resolve", post(anomalies::resolve))
        .route(
            "/console/anomaly-rules/{id}/enabled",
            post(anomalies::switch_rule),
        )
        .route("/console/mcp-servers", get(mcp::list))
        .route("/console/mcp-servers/{id}", get(mcp::show))
        .route("/console/mcp-servers/{id}/approve", post(mcp::approve))
        .route("/console/notifications", get(notifications::show))
        .route(
            "/console/notifications/{id}/test",
            post(notifications::test),
        )
        .route("/console/billing", get(billing::show))
        .route("/console/billing/checkout", post(billing::checkout))
        .route("/console/costs", get(costs::show))
        .route("/console/costs/export/{table}", get(costs::export))
        .route("/console/audit", get(audit::show))
        .route("/console/audit/verification", get(audit::verification))
        .route("/console/audit/export/{format}", get(audit::export))
        .route("/console/keys", get(keys::show))
        .route("/console/keys/proxy", post(keys::create_proxy_key))
        .route("/console/keys/api", post(keys::create_api_key))
        .route("/console/keys/{kind}/{id}/revoke", post(keys::revoke))
        .route("/console/assets/{file}", get(assets::serve))
        .route("/docs", get(docs::show))
        .layer(axum::middleware::from_fn(headers::secure))
}
