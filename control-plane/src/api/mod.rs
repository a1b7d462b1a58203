//! The management API: every resource's router merged in one place.
//!
//! Routes are added only through utoipa-axum's `routes!`, which takes the method and path
//! from each handler's `#[utoipa::path]`, so the router and the OpenAPI document cannot
//! drift apart (clippy's `disallowed-methods` forbids `Router::route` in this crate).

pub mod envelope;
pub mod extract;
pub mod money;
pub mod read_your_writes;

mod admin;
pub(crate) mod agents;
pub(crate) mod anomalies;
pub(crate) mod anomaly_rules;
pub mod approvals;
pub(crate) mod audit_trail;
pub(crate) mod auth;
pub mod billing;
pub(crate) mod budget;
pub(crate) mod compliance;
pub mod cost;
pub(crate) mod fria;
pub mod health;
pub mod http_metrics;
pub(crate) mod incidents;
pub mod internal;
mod managed_keys;
pub(crate) mod mcp_servers;
pub(crate) mod monitoring;
pub(crate) mod notification_channels;
mod openapi_bodies;
mod openapi_enums;
mod openapi_errors;
mod ops;
mod oversight;
pub(crate) mod owners;
pub mod payload_capture;
pub mod policies;
mod posture;
mod provider_names;
pub(crate) mod proxy_keys;
mod proxy_stats;
pub mod range;
mod relationships;
pub(crate) mod risk;
pub mod risk_level;
pub(crate) mod sso;
mod teams;
pub mod telemetry;
pub(crate) mod tool_calls;

use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::{Modify, PartialSchema, ToSchema};
use utoipa_axum::router::OpenApiRouter;

use crate::error::{ApiError, ErrorCode};
use crate::state::AppState;

/// The prefix of the versioned management API (spec 9).
pub const API_PREFIX: &str = "/api/v1";

/// The whole surface: `/api/v1/...`, the operational endpoints, and the OpenAPI
/// document describing both.
pub fn router() -> (Router<AppState>, OpenApi) {
    let v1 = OpenApiRouter::new()
        .merge(auth::router())
        .merge(agents::router())
        .merge(teams::router())
        .merge(telemetry::router())
        .merge(monitoring::router())
        .merge(cost::router())
        .merge(health::router())
        .merge(proxy_keys::router())
        .merge(managed_keys::router())
        .merge(proxy_stats::router())
        .merge(policies::router())
        .merge(approvals::router())
        .merge(budget::router())
        .merge(audit_trail::router())
        .merge(risk::router())
        .merge(oversight::router())
        .merge(owners::router())
        .merge(posture::router())
        .merge(relationships::router())
        .merge(notification_channels::router())
        .merge(fria::router())
        .merge(incidents::router())
        .merge(compliance::router())
        .merge(anomalies::router())
        .merge(anomaly_rules::router())
        .merge(billing::router())
        .merge(payload_capture::router())
        .merge(sso::router())
        .merge(mcp_servers::router())
        .merge(tool_calls::router())
        .merge(admin::router());
    let (router, mut openapi) = OpenApiRouter::with_openapi(base_document())
        .nest(API_PREFIX, v1)
        .merge(internal::router())
        .merge(ops::router())
        .split_for_parts();
    SecurityAddon.modify(&mut openapi);
    openapi_errors::ErrorResponses.modify(&mut openapi);
    openapi_bodies::OptionalBodies.modify(&mut openapi);
    openapi_bodies::AtLeastOneField(&["UpdateIncidentInput"]).modify(&mut openapi);
    let router = router
        .merge(ops::openapi_router(openapi.clone()))
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed);
    (router, openapi)
}

fn base_document() -> OpenApi {
    let mut doc = OpenApi::default();
    doc.info.title = "Warden management API".to_owned();
    doc.info.version = env!("CARGO_PKG_VERSION").to_owned();
    doc.info.description = Some(format!(
        "{}\n**Error codes.**\n\n{}",
        include_str!("openapi_intro.md"),
        ErrorCode::markdown_table()
    ));
    // Enums that only query parameters name: the router collects the schemas of bodies
    // and responses, not those of parameters, which would refer to nothing.
    let schemas = &mut doc.components.get_or_insert_with(Default::default).schemas;
    for (name, schema) in [
        (
            anomalies::AnomalyStatus::name(),
            anomalies::AnomalyStatus::schema(),
        ),
        (anomalies::Severity::name(), anomalies::Severity::schema()),
        (
            approvals::ApprovalStatus::name(),
            approvals::ApprovalStatus::schema(),
        ),
        (
            audit_trail::ExportFormat::name(),
            audit_trail::ExportFormat::schema(),
        ),
        (crate::plans::Plan::name(), crate::plans::Plan::schema()),
        // The tool-call list's `outcome` filter.
        (
            crate::validate::Text::<1, 32>::name(),
            crate::validate::Text::<1, 32>::schema(),
        ),
    ] {
        schemas.insert(name.into_owned(), schema);
    }
    doc
}

struct SecurityAddon;

impl Modify for SecurityAddon {
    fn modify(&self, openapi: &mut OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "service_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("the control plane's service token (internal endpoints)")
                    .build(),
            ),
        );
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("wdn_ API key or login session token")
                    .build(),
            ),
        );
    }
}

async fn route_not_found() -> ApiError {
    ApiError::new(ErrorCode::RouteNotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not accept that method",
    )
}
