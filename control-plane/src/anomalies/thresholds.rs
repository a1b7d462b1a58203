//! Each anomaly type's thresholds: the keys a rule's `threshold_config` may set, their
//! ranges and their defaults (used when a tenant has no rule for the type).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{ApiError, ApiResult};

pub const TYPES: [&str; 4] = [
    "cost_spike",
    "reliability_decay",
    "behavioral_drift",
    "security_threat",
];

/// `cost_spike`: the last 24 hours' spend against the agent's own daily baseline.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostSpike {
    /// Spend in 24 hours below this never counts as a spike (default 1.0 USD); set by the
    /// tenant, spend at or above it is a spike whatever the history.
    pub daily_cost_usd: Option<f64>,
    /// How far above the baseline median, in percent, at least (default 200).
    pub min_deviation_percent: Option<f64>,
    /// How many robust standard deviations (1.4826 × MAD) above the median, at least
    /// (default 5).
    pub mad_multiplier: Option<f64>,
    /// Days of baseline, 7 to 30 (default 14); at least 7 days of history are needed.
    pub baseline_days: Option<i64>,
}

/// `reliability_decay`: heartbeats that stop, or that report failure.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReliabilityDecay {
    /// Silence, in minutes, after regular heartbeats (at least 12 in the day before)
    /// that counts as lost, and at least 5 typical intervals (default 15).
    pub heartbeat_silence_minutes: Option<i64>,
    /// Share of the last hour's heartbeats not `healthy`, at least (default 0.5), and
    /// three times the day's share before.
    pub error_rate: Option<f64>,
}

/// `behavioral_drift`: what the agent asks of models changes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BehavioralDrift {
    /// Total variation distance between the last day's and the week before's share of
    /// requests per model, 0 to 1 (default 0.5).
    pub model_mix_shift: Option<f64>,
    /// Tokens per request changing by this factor or more, either way (default 3).
    pub token_ratio: Option<f64>,
    /// Requests needed in each window to judge (default 20).
    pub min_requests: Option<i64>,
}

/// `security_threat`: bursts of requests the proxies refused or held under policies.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecurityThreat {
    /// Refusals in the last hour, at least (default 20).
    pub refusals_per_hour: Option<i64>,
    /// Times the week's hourly average, at least (default 5).
    pub burst_multiplier: Option<f64>,
}

/// One tenant's thresholds for every type, and which types are on.
#[derive(Debug, Clone)]
pub struct Thresholds {
    pub cost_spike: Option<CostSpike>,
    pub reliability_decay: Option<ReliabilityDecay>,
    pub behavioral_drift: Option<BehavioralDrift>,
    pub security_threat: Option<SecurityThreat>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            cost_spike: Some(CostSpike::default()),
            reliability_decay: Some(ReliabilityDecay::default()),
            behavioral_drift: Some(BehavioralDrift::default()),
            security_threat: Some(SecurityThreat::default()),
        }
    }
}

impl Thresholds {
    /// Applies a tenant's rule for `anomaly_type`: off when disabled, else its config.
    pub fn apply(&mut self, anomaly_type: &str, enabled: bool, config: &Value) {
        fn read<T: serde::de::DeserializeOwned + Default>(
            enabled: bool,
            config: &Value,
        ) -> Option<T> {
            enabled.then(|| serde_json::from_value(config.clone()).unwrap_or_default())
        }
        match anomaly_type {
            "cost_spike" => self.cost_spike = read(enabled, config),
            "reliability_decay" => self.reliability_decay = read(enabled, config),
            "behavioral_drift" => self.behavioral_drift = read(enabled, config),
            "security_threat" => self.security_threat = read(enabled, config),
            _ => {}
        }
    }
}

/// Checks a rule's `threshold_config` for its type: known keys, values in range.
pub fn check(anomaly_type: &str, config: &Value) -> ApiResult<()> {
    if !config.is_object() {
        return Err(ApiError::validation(
            "threshold_config",
            "threshold_config: must be an object",
        ));
    }
    let parse_error = |error: serde_json::Error| {
        ApiError::validation("threshold_config", format!("threshold_config: {error}"))
    };
    let range = |key: &str, value: Option<f64>, low: f64, high: f64| -> ApiResult<()> {
        match value {
            Some(v) if !(low..=high).contains(&v) || !v.is_finite() => Err(ApiError::validation(
                format!("threshold_config.{key}"),
                format!("threshold_config.{key}: {low} to {high}"),
            )),
            _ => Ok(()),
        }
    };
    #[allow(clippy::cast_precision_loss)] // small integers
    let int = |v: Option<i64>| v.map(|v| v as f64);
    match anomaly_type {
        "cost_spike" => {
            let t: CostSpike = serde_json::from_value(config.clone()).map_err(parse_error)?;
            range("daily_cost_usd", t.daily_cost_usd, 0.0, 999_999.0)?;
            range(
                "min_deviation_percent",
                t.min_deviation_percent,
                1.0,
                100_000.0,
            )?;
            range("mad_multiplier", t.mad_multiplier, 1.0, 100.0)?;
            range("baseline_days", int(t.baseline_days), 7.0, 30.0)
        }
        "reliability_decay" => {
            let t: ReliabilityDecay =
                serde_json::from_value(config.clone()).map_err(parse_error)?;
            range(
                "heartbeat_silence_minutes",
                int(t.heartbeat_silence_minutes),
                1.0,
                1_440.0,
            )?;
            range("error_rate", t.error_rate, 0.01, 1.0)
        }
        "behavioral_drift" => {
            let t: BehavioralDrift = serde_json::from_value(config.clone()).map_err(parse_error)?;
            range("model_mix_shift", t.model_mix_shift, 0.05, 1.0)?;
            range("token_ratio", t.token_ratio, 1.1, 1_000.0)?;
            range("min_requests", int(t.min_requests), 1.0, 1_000_000.0)
        }
        "security_threat" => {
            let t: SecurityThreat = serde_json::from_value(config.clone()).map_err(parse_error)?;
            range(
                "refusals_per_hour",
                int(t.refusals_per_hour),
                1.0,
                1_000_000.0,
            )?;
            range("burst_multiplier", t.burst_multiplier, 1.0, 1_000.0)
        }
        _ => Err(ApiError::validation(
            "anomaly_type",
            "anomaly_type: unknown",
        )),
    }
}
