//! The detector's reads: a handful of grouped queries per tenant over the ledger's
//! hourly rollup, the heartbeats of the last day and the policy decisions of the last
//! week, so that a pass costs a few statements per tenant, not per agent.

use std::collections::HashMap;

use sqlx::{AnyPool, Row};

use super::detect::{Heartbeats, ModelUse, Signals};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The tenant's live agents (id and name).
pub async fn agents(pool: &AnyPool, tenant_id: &str) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT id, name FROM agents WHERE tenant_id = $1 AND deleted_at IS NULL")
        .bind(tenant_id)
        .fetch_all(pool)
        .await
}

/// Every agent's signals as of `now`, by agent id. `cost_days` rolling days of spend are
/// read besides the last 24 hours.
pub async fn read(
    pool: &AnyPool,
    tenant_id: &str,
    now: i64,
    cost_days: i64,
) -> Result<HashMap<String, Signals>, sqlx::Error> {
    let mut by_agent: HashMap<String, Signals> = HashMap::new();
    // Rolling days end with the current hour, so the hour in progress counts.
    let end = now - now.rem_euclid(HOUR_MS) + HOUR_MS;
    let days = usize::try_from(cost_days + 1).unwrap_or(15);
    let rows = sqlx::query(
        "SELECT agent_id, ($2 - 1 - hour) / 86400000 AS day, \
         CAST(SUM(cost_micros) AS BIGINT) AS cost FROM usage_hourly \
         WHERE tenant_id = $1 AND hour >= $3 AND hour < $2 \
         GROUP BY 1, 2",
    )
    .bind(tenant_id)
    .bind(end)
    .bind(end - (cost_days + 1) * DAY_MS)
    .fetch_all(pool)
    .await?;
    for row in &rows {
        let agent: String = row.try_get("agent_id")?;
        let day = usize::try_from(row.try_get::<i64, _>("day")?).unwrap_or(usize::MAX);
        let signals = by_agent.entry(agent).or_default();
        if signals.daily_cost.len() < days {
            signals.daily_cost.resize(days, None);
        }
        if let Some(slot) = signals.daily_cost.get_mut(day) {
            *slot = Some(row.try_get("cost")?);
        }
    }
    // A day without spend after the agent's first spend is a day of zero.
    for signals in by_agent.values_mut() {
        if let Some(oldest) = signals.daily_cost.iter().rposition(Option::is_some) {
            for slot in &mut signals.daily_cost[..=oldest] {
                slot.get_or_insert(0);
            }
        }
    }

    let rows = sqlx::query(
        "SELECT agent_id, model_name, \
         CAST(SUM(CASE WHEN hour >= $2 THEN requests ELSE 0 END) AS BIGINT) AS recent_requests, \
         CAST(SUM(CASE WHEN hour >= $2 THEN input_tokens + output_tokens ELSE 0 END) AS BIGINT) AS recent_tokens, \
         CAST(SUM(CASE WHEN hour < $2 THEN requests ELSE 0 END) AS BIGINT) AS base_requests, \
         CAST(SUM(CASE WHEN hour < $2 THEN input_tokens + output_tokens ELSE 0 END) AS BIGINT) AS base_tokens \
         FROM usage_hourly WHERE tenant_id = $1 AND hour >= $3 AND hour < $4 \
         GROUP BY agent_id, model_name",
    )
    .bind(tenant_id)
    .bind(end - DAY_MS)
    .bind(end - 8 * DAY_MS)
    .bind(end)
    .fetch_all(pool)
    .await?;
    for row in &rows {
        let agent: String = row.try_get("agent_id")?;
        by_agent.entry(agent).or_default().models.push(ModelUse {
            model: row.try_get("model_name")?,
            recent_requests: row.try_get("recent_requests")?,
            recent_tokens: row.try_get("recent_tokens")?,
            base_requests: row.try_get("base_requests")?,
            base_tokens: row.try_get("base_tokens")?,
        });
    }

    let rows = sqlx::query(
        "SELECT agent_id, COUNT(*) AS beats, \
         CAST(SUM(CASE WHEN received_at >= $2 THEN 1 ELSE 0 END) AS BIGINT) AS recent, \
         CAST(SUM(CASE WHEN received_at >= $2 AND status <> 'healthy' THEN 1 ELSE 0 END) AS BIGINT) AS recent_bad, \
         CAST(SUM(CASE WHEN received_at < $2 AND status <> 'healthy' THEN 1 ELSE 0 END) AS BIGINT) AS before_bad, \
         MIN(received_at) AS first_at, MAX(received_at) AS last_at \
         FROM heartbeats WHERE tenant_id = $1 AND received_at >= $3 AND received_at <= $4 \
         GROUP BY agent_id",
    )
    .bind(tenant_id)
    .bind(now - HOUR_MS)
    .bind(now - DAY_MS)
    .bind(now)
    .fetch_all(pool)
    .await?;
    for row in &rows {
        let agent: String = row.try_get("agent_id")?;
        by_agent.entry(agent).or_default().heartbeats = Some(Heartbeats {
            count: row.try_get("beats")?,
            recent: row.try_get("recent")?,
            recent_unhealthy: row.try_get("recent_bad")?,
            before_unhealthy: row.try_get("before_bad")?,
            first_at: row.try_get("first_at")?,
            last_at: row.try_get("last_at")?,
        });
    }

    let rows = sqlx::query(
        "SELECT agent_id, \
         CAST(SUM(CASE WHEN evaluated_at >= $2 THEN 1 ELSE 0 END) AS BIGINT) AS recent, \
         CAST(SUM(CASE WHEN evaluated_at < $2 THEN 1 ELSE 0 END) AS BIGINT) AS before \
         FROM policy_decisions WHERE tenant_id = $1 AND evaluated_at >= $3 AND evaluated_at <= $4 \
         GROUP BY agent_id",
    )
    .bind(tenant_id)
    .bind(now - HOUR_MS)
    .bind(now - HOUR_MS - 7 * DAY_MS)
    .bind(now)
    .fetch_all(pool)
    .await?;
    for row in &rows {
        let agent: String = row.try_get("agent_id")?;
        let signals = by_agent.entry(agent).or_default();
        signals.refusals_recent = row.try_get("recent")?;
        signals.refusals_before = row.try_get("before")?;
    }
    Ok(by_agent)
}
