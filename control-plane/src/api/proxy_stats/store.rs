//! SQL of the proxy's stats. Every statement filters by tenant.

use sqlx::{AnyPool, Row};

/// Sums of proxy-measured usage.
#[derive(Debug, Clone, Copy)]
pub struct ProxyTotals {
    pub requests: i64,
    /// Input plus output tokens.
    pub tokens: i64,
    pub cost_micros: i64,
}

/// The tenant's proxy-measured usage in the per-model rollups from hour `from_ms` on.
pub async fn proxy_totals_since(
    pool: &AnyPool,
    tenant_id: &str,
    from_ms: i64,
) -> Result<ProxyTotals, sqlx::Error> {
    let row = sqlx::query(
        "SELECT CAST(COALESCE(SUM(requests), 0) AS BIGINT) AS requests, \
         CAST(COALESCE(SUM(input_tokens + output_tokens), 0) AS BIGINT) AS tokens, \
         CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) AS cost \
         FROM usage_model_hourly WHERE tenant_id = $1 AND source = 'proxy' AND hour >= $2",
    )
    .bind(tenant_id)
    .bind(from_ms)
    .fetch_one(pool)
    .await?;
    Ok(ProxyTotals {
        requests: row.try_get("requests")?,
        tokens: row.try_get("tokens")?,
        cost_micros: row.try_get("cost")?,
    })
}

/// The tenant's proxy keys whose API key has no expiry or expires after `now_ms`.
pub async fn unexpired_proxy_keys(
    pool: &AnyPool,
    tenant_id: &str,
    now_ms: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM proxy_keys p JOIN api_keys k \
         ON k.id = p.api_key_id AND k.tenant_id = p.tenant_id \
         WHERE p.tenant_id = $1 AND (k.expires_at IS NULL OR k.expires_at > $2)",
    )
    .bind(tenant_id)
    .bind(now_ms)
    .fetch_one(pool)
    .await
}
