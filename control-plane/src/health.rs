//! Agent health scores as data: the score and its breakdown (computed by
//! `api::health`), and the five-minute cache of them that the shared state holds.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;
use utoipa::ToSchema;
use warden_shared::timestamp::Timestamp;

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
pub struct HealthCache(pub Mutex<HashMap<(String, String), HealthScore>>);
