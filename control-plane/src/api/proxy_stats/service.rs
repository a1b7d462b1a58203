//! The rules of the proxy's stats: what "today" is and which keys count as active.

use warden_shared::pricing::micros_to_decimal;

use super::store;
use super::ProxyStats;
use crate::api::range::Period;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::state::AppState;

/// Today's (UTC) proxy traffic and the proxy keys not expired as of now.
pub async fn get_proxy_stats(state: &AppState, caller: &Caller) -> ApiResult<ProxyStats> {
    let now = state.clock.now();
    let pool = state.db.pool();
    let today = store::proxy_totals_since(pool, &caller.tenant_id, Period::Day.start(now)).await?;
    let active_proxy_keys =
        store::unexpired_proxy_keys(pool, &caller.tenant_id, now.as_millis()).await?;
    Ok(ProxyStats {
        total_requests_today: today.requests,
        total_tokens_today: today.tokens,
        total_cost_today_usd: micros_to_decimal(today.cost_micros),
        active_proxy_keys,
    })
}
