//! Agent health scores (spec 2.20): reliability, cost efficiency and performance over the
//! last 24 hours, weighted 0.4 / 0.3 / 0.3, cached for five minutes.
//!
//! - Reliability: `uptime_pct` is the share of the day's 288 five-minute slots with at
//!   least one heartbeat; `error_rate` the share of heartbeats reporting anything but
//!   `healthy`. Score = uptime × (1 − error rate).
//! - Cost efficiency: `daily_cost_trend` is the last 24 hours' spend relative to the
//!   average day of the 7 before (0.5 = 50 % more). Score 100 at or below the average,
//!   falling linearly to 0 at double; 100 without a baseline.
//! - Performance: mean and 95th percentile of reported heartbeat latency. Score 100 at a
//!   p95 up to 1 s, falling linearly to 0 at 10 s; 100 without latency reports.
//!
//! Color: `green` from 80, `yellow` from 50, `red` below.

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiPath;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
pub use crate::health::{
    Breakdown, Component, CostEfficiency, HealthCache, HealthScore, Performance, Reliability,
};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(agent_health))
}

#[utoipa::path(get, path = "/agents/{agent_id}/health", tag = "agents",
    params(("agent_id" = String, Path)), security(("bearer" = ["monitoring:read"])),
    responses((status = 200, description = "The health score", body = Envelope<HealthScore>),
        (status = 404, description = "No such agent in the tenant")))]
async fn agent_health(
    caller: Authorized<require::MonitoringRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let score = service::agent_health(&state, &caller, &agent_id).await?;
    Ok(envelope::ok(score))
}
