//! SQL of health scores: an agent's heartbeats and spend. Every statement filters by
//! tenant.

use sqlx::{AnyPool, Row};

/// A heartbeat as the score reads it.
#[derive(Debug)]
pub struct Beat {
    pub status: String,
    pub latency_ms: Option<i64>,
    pub received_at: i64,
}

/// Whether the tenant has this agent, not deleted.
/// When the live agent was registered; `None` when the tenant has no such live agent.
pub async fn live_agent_created_at(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT created_at FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_optional(pool)
    .await
}

/// The agent's heartbeats received in `(after_ms, until_ms]`, newest first, at most
/// 20,000 (one every five seconds for a day).
pub async fn heartbeats(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    after_ms: i64,
    until_ms: i64,
) -> Result<Vec<Beat>, sqlx::Error> {
    sqlx::query(
        "SELECT status, latency_ms, received_at FROM heartbeats \
         WHERE tenant_id = $1 AND agent_id = $2 AND received_at > $3 AND received_at <= $4 \
         ORDER BY received_at DESC LIMIT 20000",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(after_ms)
    .bind(until_ms)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        Ok(Beat {
            status: row.try_get("status")?,
            latency_ms: row.try_get("latency_ms")?,
            received_at: row.try_get("received_at")?,
        })
    })
    .collect()
}

/// The agent's spend in micro-dollars over the hourly rollups of hours in
/// `[from_ms, to_ms)`.
pub async fn spend(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    from_ms: i64,
    to_ms: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage_hourly \
         WHERE tenant_id = $1 AND agent_id = $2 AND hour >= $3 AND hour < $4",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(from_ms)
    .bind(to_ms)
    .fetch_one(pool)
    .await
}
