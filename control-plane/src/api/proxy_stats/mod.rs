//! `GET /proxy/stats` (spec 4.11): today's traffic through the proxy, from the ledger's
//! per-model rollups of proxy-measured usage (`source = 'proxy'`), and the keys that can
//! be used now. "Today" is the UTC calendar day.

mod service;
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
    let stats = service::get_proxy_stats(&state, &caller).await?;
    Ok(envelope::ok(stats))
}
