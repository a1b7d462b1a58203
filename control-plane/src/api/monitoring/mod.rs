//! Monitoring overview (spec 4.5): agent counts by derived status.

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::envelope::{self, Envelope};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(monitoring_overview))
}

#[derive(Debug, Default, Serialize, ToSchema)]
pub struct Overview {
    pub total_agents: i64,
    pub healthy: i64,
    pub degraded: i64,
    pub down: i64,
    pub unknown: i64,
}

/// Counts the tenant's live agents by the same derived status `/agents` shows.
#[utoipa::path(get, path = "/monitoring/overview", tag = "monitoring",
    security(("bearer" = ["monitoring:read"])),
    responses((status = 200, description = "Agents by status", body = Envelope<Overview>)))]
async fn monitoring_overview(
    caller: Authorized<require::MonitoringRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let overview = service::monitoring_overview(&state, &caller).await?;
    Ok(envelope::ok(overview))
}
