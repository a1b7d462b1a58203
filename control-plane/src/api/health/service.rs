//! The rules of health scores: the formula of the module doc over the last day's
//! heartbeats and spend, and the five-minute cache in front of it.

use std::collections::HashSet;

use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::timestamp::Timestamp;

use super::store;
use super::{
    Breakdown, Component, CostEfficiency, HealthCache, HealthScore, Performance, Reliability,
};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

const DAY_MS: i64 = 86_400_000;
const SLOT_MS: i64 = 300_000;
/// How long a computed score is served from the cache (spec 8).
pub const CACHE_MS: i64 = 300_000;

/// The agent's score: from the cache while it is younger than [`CACHE_MS`] (`cached`
/// set), computed and cached otherwise.
pub async fn agent_health(
    state: &AppState,
    caller: &Caller,
    agent_id: &str,
) -> ApiResult<HealthScore> {
    let now = state.clock.now();
    // Checked before the cache too: an agent deleted within the cache's five minutes is
    // a 404 at once.
    let created_at = live_agent_created_at(state, &caller.tenant_id, agent_id).await?;
    let key = (caller.tenant_id.clone(), agent_id.to_owned());
    if let Some(mut hit) = cached(&state.health_cache, &key, now) {
        hit.cached = true;
        return Ok(hit);
    }
    let score = compute(state, &caller.tenant_id, agent_id, created_at, now).await?;
    if let Ok(mut cache) = state.health_cache.0.lock() {
        cache.retain(|_, entry| now.as_millis() - entry.computed_at.as_millis() < CACHE_MS);
        cache.insert(key, score.clone());
    }
    Ok(score)
}

fn cached(cache: &HealthCache, key: &(String, String), now: Timestamp) -> Option<HealthScore> {
    let cache = cache.0.lock().ok()?;
    cache
        .get(key)
        .filter(|entry| now.as_millis() - entry.computed_at.as_millis() < CACHE_MS)
        .cloned()
}

/// When the live agent `agent_id` of the tenant was registered; 404 when there is none.
async fn live_agent_created_at(
    state: &AppState,
    tenant_id: &str,
    agent_id: &str,
) -> ApiResult<i64> {
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    store::live_agent_created_at(state.db.pool(), tenant_id, agent_id)
        .await?
        .ok_or_else(|| ApiError::not_found("agent"))
}

async fn compute(
    state: &AppState,
    tenant_id: &str,
    agent_id: &str,
    created_at: i64,
    now: Timestamp,
) -> ApiResult<HealthScore> {
    let pool = state.db.pool();
    let since = now.as_millis() - DAY_MS;
    let beats = store::heartbeats(pool, tenant_id, agent_id, since, now.as_millis()).await?;
    let mut slots = HashSet::new();
    let mut unhealthy = 0usize;
    let mut latencies = Vec::new();
    for beat in &beats {
        slots.insert((now.as_millis() - beat.received_at) / SLOT_MS);
        if beat.status != "healthy" {
            unhealthy += 1;
        }
        if let Some(latency) = beat.latency_ms {
            latencies.push(latency as f64);
        }
    }
    // Uptime is over the last day, or over the agent's life when it is younger: the
    // five-minute slots it has existed in, not a day's 288.
    let lived_from = created_at.max(since);
    let window = ((now.as_millis() - lived_from) / SLOT_MS + 1).clamp(1, 288) as usize;
    let uptime_pct = (slots.len().min(window) as f64 / window as f64) * 100.0;
    let error_rate = if beats.is_empty() {
        0.0
    } else {
        unhealthy as f64 / beats.len() as f64
    };
    let reliability = uptime_pct * (1.0 - error_rate);

    let last_day = store::spend(pool, tenant_id, agent_id, since, now.as_millis() + 1).await?;
    let previous_week = store::spend(pool, tenant_id, agent_id, since - 7 * DAY_MS, since).await?;
    let baseline = previous_week as f64 / 7.0;
    let daily_cost_trend = if baseline > 0.0 {
        (last_day as f64 - baseline) / baseline
    } else {
        0.0
    };
    let cost_score = (100.0 * (1.0 - daily_cost_trend.max(0.0))).clamp(0.0, 100.0);

    latencies.sort_by(f64::total_cmp);
    let avg =
        (!latencies.is_empty()).then(|| latencies.iter().sum::<f64>() / latencies.len() as f64);
    let p95 = (!latencies.is_empty())
        .then(|| latencies[((latencies.len() as f64 * 0.95).ceil() as usize).saturating_sub(1)]);
    let performance = p95.map_or(100.0, |p95| {
        (100.0 * (10_000.0 - p95) / 9_000.0).clamp(0.0, 100.0)
    });

    let score = (0.4 * reliability + 0.3 * cost_score + 0.3 * performance).round() as i64;
    let color = match score {
        80.. => "green",
        50.. => "yellow",
        _ => "red",
    };
    Ok(HealthScore {
        agent_id: agent_id.to_owned(),
        score,
        color,
        breakdown: Breakdown {
            reliability: Component {
                score: round2(reliability),
                weight: 0.4,
                details: Reliability {
                    error_rate: round2(error_rate),
                    uptime_pct: round2(uptime_pct),
                },
            },
            cost_efficiency: Component {
                score: round2(cost_score),
                weight: 0.3,
                details: CostEfficiency {
                    daily_cost_trend: round2(daily_cost_trend),
                },
            },
            performance: Component {
                score: round2(performance),
                weight: 0.3,
                details: Performance {
                    avg_latency_ms: avg.map(round2),
                    p95_latency_ms: p95,
                },
            },
        },
        computed_at: now,
        cached: false,
    })
}

fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}
