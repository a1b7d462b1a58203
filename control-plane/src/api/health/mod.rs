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

use std::collections::HashMap;
use std::sync::Mutex;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::ids::{is_valid_id, IdKind};
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiPath;
use crate::auth::{require, Authorized};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(agent_health))
}

const DAY_MS: i64 = 86_400_000;
const SLOT_MS: i64 = 300_000;
/// How long a computed score is served from the cache (spec 8).
pub const CACHE_MS: i64 = 300_000;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthScore {
    pub agent_id: String,
    pub score: i64,
    pub color: &'static str,
    pub breakdown: Breakdown,
    #[schema(value_type = String, format = DateTime)]
    pub computed_at: Timestamp,
    pub cached: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Breakdown {
    pub reliability: Component<Reliability>,
    pub cost_efficiency: Component<CostEfficiency>,
    pub performance: Component<Performance>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Component<T> {
    pub score: f64,
    pub weight: f64,
    pub details: T,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Reliability {
    pub error_rate: f64,
    pub uptime_pct: f64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CostEfficiency {
    pub daily_cost_trend: f64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Performance {
    pub avg_latency_ms: Option<f64>,
    pub p95_latency_ms: Option<f64>,
}

/// Scores by (tenant, agent), with the time they were computed.
#[derive(Debug, Default)]
pub struct HealthCache(Mutex<HashMap<(String, String), HealthScore>>);

#[utoipa::path(get, path = "/agents/{agent_id}/health", tag = "agents",
    params(("agent_id" = String, Path)), security(("bearer" = ["monitoring:read"])),
    responses((status = 200, description = "The health score", body = Envelope<HealthScore>),
        (status = 404, description = "No such agent in the tenant")))]
async fn agent_health(
    caller: Authorized<require::MonitoringRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let now = state.clock.now();
    // Checked before the cache too: an agent deleted within the cache's five minutes is
    // a 404 at once.
    ensure_agent_exists(&state, &caller.tenant_id, &agent_id).await?;
    let key = (caller.tenant_id.clone(), agent_id.clone());
    if let Some(mut hit) = cached(&state.health_cache, &key, now) {
        hit.cached = true;
        return Ok(envelope::ok(hit));
    }
    let score = compute(&state, &caller.tenant_id, &agent_id, now).await?;
    if let Ok(mut cache) = state.health_cache.0.lock() {
        cache.retain(|_, entry| now.as_millis() - entry.computed_at.as_millis() < CACHE_MS);
        cache.insert(key, score.clone());
    }
    Ok(envelope::ok(score))
}

fn cached(cache: &HealthCache, key: &(String, String), now: Timestamp) -> Option<HealthScore> {
    let cache = cache.0.lock().ok()?;
    cache
        .get(key)
        .filter(|entry| now.as_millis() - entry.computed_at.as_millis() < CACHE_MS)
        .cloned()
}

/// 404 unless `agent_id` is a live agent of the tenant.
async fn ensure_agent_exists(state: &AppState, tenant_id: &str, agent_id: &str) -> ApiResult<()> {
    if !is_valid_id(IdKind::Agent, agent_id) {
        return Err(ApiError::not_found("agent"));
    }
    let exists: Option<String> = sqlx::query_scalar(
        "SELECT id FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_optional(state.db.pool())
    .await?;
    match exists {
        Some(_) => Ok(()),
        None => Err(ApiError::not_found("agent")),
    }
}

async fn compute(
    state: &AppState,
    tenant_id: &str,
    agent_id: &str,
    now: Timestamp,
) -> ApiResult<HealthScore> {
    let pool = state.db.pool();
    let since = now.as_millis() - DAY_MS;
    let beats = sqlx::query(
        "SELECT status, latency_ms, received_at FROM heartbeats \
         WHERE tenant_id = $1 AND agent_id = $2 AND received_at > $3 AND received_at <= $4 \
         ORDER BY received_at DESC LIMIT 20000",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(since)
    .bind(now.as_millis())
    .fetch_all(pool)
    .await?;
    let mut slots = std::collections::HashSet::new();
    let mut unhealthy = 0usize;
    let mut latencies = Vec::new();
    for beat in &beats {
        let at: i64 = beat.try_get("received_at")?;
        slots.insert((now.as_millis() - at) / SLOT_MS);
        if beat.try_get::<String, _>("status")? != "healthy" {
            unhealthy += 1;
        }
        if let Some(latency) = beat.try_get::<Option<i64>, _>("latency_ms")? {
            latencies.push(latency as f64);
        }
    }
    let uptime_pct = (slots.len().min(288) as f64 / 288.0) * 100.0;
    let error_rate = if beats.is_empty() {
        0.0
    } else {
        unhealthy as f64 / beats.len() as f64
    };
    let reliability = uptime_pct * (1.0 - error_rate);

    let spend = |from: i64, to: i64| {
        sqlx::query_scalar::<_, i64>(
            "SELECT CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) FROM usage_hourly \
             WHERE tenant_id = $1 AND agent_id = $2 AND hour >= $3 AND hour < $4",
        )
        .bind(tenant_id)
        .bind(agent_id)
        .bind(from)
        .bind(to)
        .fetch_one(pool)
    };
    let last_day = spend(since, now.as_millis() + 1).await?;
    let previous_week = spend(since - 7 * DAY_MS, since).await?;
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
