//! Monitoring overview (spec 4.5): agent counts by derived status.

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use sqlx::Row;
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
    let rows = sqlx::query(concat!(
        "SELECT ",
        crate::effective_status!("$2"),
        " AS status, COUNT(*) AS agents FROM agents a \
         WHERE a.tenant_id = $1 AND a.deleted_at IS NULL GROUP BY 1"
    ))
    .bind(&caller.tenant_id)
    .bind(state.clock.now().as_millis())
    .fetch_all(state.db.pool())
    .await?;
    let mut overview = Overview::default();
    for row in rows {
        let agents: i64 = row.try_get("agents")?;
        overview.total_agents += agents;
        match row.try_get::<String, _>("status")?.as_str() {
            "healthy" => overview.healthy += agents,
            "degraded" => overview.degraded += agents,
            "down" => overview.down += agents,
            _ => overview.unknown += agents,
        }
    }
    Ok(envelope::ok(overview))
}
