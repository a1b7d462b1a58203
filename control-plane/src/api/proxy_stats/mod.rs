//! `GET /proxy/stats` (spec 4.11): today's traffic through the proxy, from the ledger's
//! per-model rollups of proxy-measured usage (`source = 'proxy'`), and the keys that can
//! be used now. "Today" is the UTC calendar day.

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::pricing::micros_to_decimal;

use crate::api::cost::range::Period;
use crate::api::envelope::{self, Envelope};
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_proxy_stats))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProxyStats {
    pub total_requests_today: i64,
    /// Input plus output tokens.
    pub total_tokens_today: i64,
    /// US dollars as an exact decimal string with six places, e.g. `"12.345678"`.
    pub total_cost_today_usd: String,
    /// Proxy keys that exist and have not expired.
    pub active_proxy_keys: i64,
}

#[utoipa::path(get, path = "/proxy/stats", tag = "proxy",
    security(("bearer" = ["cost:read"])),
    responses((status = 200, description = "Today's proxy traffic (UTC)", body = Envelope<ProxyStats>)))]
async fn get_proxy_stats(
    caller: Authorized<require::CostRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    let pool = state.db.pool();
    let today = sqlx::query(
        "SELECT CAST(COALESCE(SUM(requests), 0) AS BIGINT) AS requests, \
         CAST(COALESCE(SUM(input_tokens + output_tokens), 0) AS BIGINT) AS tokens, \
         CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) AS cost \
         FROM usage_model_hourly WHERE tenant_id = $1 AND source = 'proxy' AND hour >= $2",
    )
    .bind(&caller.tenant_id)
    .bind(Period::Day.start(now))
    .fetch_one(pool)
    .await?;
    let active_proxy_keys: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM proxy_keys p JOIN api_keys k \
         ON k.id = p.api_key_id AND k.tenant_id = p.tenant_id \
         WHERE p.tenant_id = $1 AND (k.expires_at IS NULL OR k.expires_at > $2)",
    )
    .bind(&caller.tenant_id)
    .bind(now.as_millis())
    .fetch_one(pool)
    .await?;
    Ok(envelope::ok(ProxyStats {
        total_requests_today: today.try_get("requests")?,
        total_tokens_today: today.try_get("tokens")?,
        total_cost_today_usd: micros_to_decimal(today.try_get("cost")?),
        active_proxy_keys,
    }))
}
