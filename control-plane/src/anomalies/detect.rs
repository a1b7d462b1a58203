//! The detection rules, pure: an agent's signals and the tenant's thresholds in, the
//! findings out, each with the numbers a person can check it by.

use serde_json::{json, Value};

use super::thresholds::{BehavioralDrift, CostSpike, ReliabilityDecay, SecurityThreat};

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;

/// One agent's signals, read from the ledger's rollups, heartbeats and policy decisions.
#[derive(Debug, Clone, Default)]
pub struct Signals {
    /// Spend in micro-dollars per rolling day, `[0]` the last 24 hours, `[k]` the 24
    /// hours ending k days before; days before the agent's first spend are `None`.
    pub daily_cost: Vec<Option<i64>>,
    /// Requests and tokens per model: (model, last day, the 7 days before).
    pub models: Vec<ModelUse>,
    pub heartbeats: Option<Heartbeats>,
    /// Policy refusals: the last hour, and the 7 days before it.
    pub refusals_recent: i64,
    pub refusals_before: i64,
}

#[derive(Debug, Clone, Default)]
pub struct ModelUse {
    pub model: String,
    pub recent_requests: i64,
    pub recent_tokens: i64,
    pub base_requests: i64,
    pub base_tokens: i64,
}

/// Heartbeats of the last 24 hours.
#[derive(Debug, Clone, Default)]
pub struct Heartbeats {
    pub count: i64,
    pub recent: i64,
    pub recent_unhealthy: i64,
    pub before_unhealthy: i64,
    pub first_at: i64,
    pub last_at: i64,
}

/// An anomaly found on one pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub anomaly_type: &'static str,
    /// What exactly is anomalous; one unresolved anomaly per agent, type and cause.
    pub cause: &'static str,
    pub severity: &'static str,
    pub description: String,
    pub details: Value,
}

fn severity_of(ratio: f64) -> &'static str {
    match ratio {
        r if r >= 10.0 => "critical",
        r if r >= 5.0 => "high",
        r if r >= 3.0 => "medium",
        _ => "low",
    }
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

fn usd(micros: i64) -> f64 {
    #[allow(clippy::cast_precision_loss)] // money far below 2^52 micro-dollars
    let micros = micros as f64;
    (micros / 1e6 * 1e6).round() / 1e6
}

/// The last day's spend far above the agent's median day, by a robust measure (median
/// and median absolute deviation), and above the absolute floor; or, history or not,
/// at or above a `daily_cost_usd` the tenant set itself (a new agent stuck in a loop on
/// its first day is the commonest runaway, and has no baseline). The baseline-relative
/// finding, when there is one, says more and is the one reported.
pub fn cost_spike(signals: &Signals, t: &CostSpike, now: i64) -> Option<Finding> {
    baseline_spike(signals, t, now).or_else(|| over_daily_limit(signals, t, now))
}

/// The last day's spend at or above the tenant's own `daily_cost_usd`.
fn over_daily_limit(signals: &Signals, t: &CostSpike, now: i64) -> Option<Finding> {
    let limit = t.daily_cost_usd?;
    let observed_usd = usd(signals.daily_cost.first().copied().flatten()?);
    if observed_usd < limit || limit <= 0.0 {
        return None;
    }
    Some(Finding {
        anomaly_type: "cost_spike",
        cause: "daily_cost",
        severity: severity_of(observed_usd / limit),
        description: format!(
            "Spent ${observed_usd:.2} in the last 24 hours, at or above the rule's daily_cost_usd of ${limit:.2}"
        ),
        details: json!({
            "current_cost_usd": observed_usd,
            "threshold_usd": limit,
            "baseline_cost_usd": Value::Null,
            "window": { "from_ms": now - DAY_MS, "to_ms": now },
            "explanation": format!("Alert at ${limit} or more in 24 hours (the rule's daily_cost_usd), whatever the history"),
        }),
    })
}

fn baseline_spike(signals: &Signals, t: &CostSpike, now: i64) -> Option<Finding> {
    let days = usize::try_from(t.baseline_days.unwrap_or(14)).unwrap_or(14);
    let observed = signals.daily_cost.first().copied().flatten()?;
    let history: Vec<f64> = signals
        .daily_cost
        .iter()
        .skip(1)
        .take(days)
        .map_while(|day| day.map(usd))
        .collect();
    if history.len() < 7 {
        return None;
    }
    let mut sorted = history.clone();
    sorted.sort_by(f64::total_cmp);
    let baseline = median(&sorted);
    let mut deviations: Vec<f64> = sorted.iter().map(|x| (x - baseline).abs()).collect();
    deviations.sort_by(f64::total_cmp);
    let mad = median(&deviations);
    let observed_usd = usd(observed);
    let floor = t.daily_cost_usd.unwrap_or(1.0);
    let by_mad = baseline + t.mad_multiplier.unwrap_or(5.0) * 1.4826 * mad;
    let by_percent = baseline * (1.0 + t.min_deviation_percent.unwrap_or(200.0) / 100.0);
    let threshold = by_mad.max(by_percent).max(floor);
    if observed_usd < threshold {
        return None;
    }
    let deviation_percent = if baseline > 0.0 {
        ((observed_usd - baseline) / baseline * 100.0).round()
    } else {
        f64::INFINITY
    };
    let ratio = if baseline > 0.0 {
        observed_usd / baseline
    } else {
        f64::INFINITY
    };
    Some(Finding {
        anomaly_type: "cost_spike",
        cause: "daily_cost",
        severity: severity_of(ratio),
        description: format!(
            "Spent ${observed_usd:.2} in the last 24 hours against a median day of ${baseline:.2} over the {} days before",
            history.len()
        ),
        details: json!({
            "current_cost_usd": observed_usd,
            "baseline_cost_usd": baseline,
            "deviation_percent": if deviation_percent.is_finite() { json!(deviation_percent) } else { Value::Null },
            "mad_usd": mad,
            "threshold_usd": threshold,
            "baseline_days": history.len(),
            "window": { "from_ms": now - DAY_MS, "to_ms": now },
            "explanation": format!(
                "Alert above max(median + {} × 1.4826 × MAD, median × {}%, ${floor}) = ${threshold:.2}",
                t.mad_multiplier.unwrap_or(5.0),
                100.0 + t.min_deviation_percent.unwrap_or(200.0)
            ),
        }),
    })
}

/// Heartbeats that stopped after a day of regular beats, or that report failure.
pub fn reliability_decay(signals: &Signals, t: &ReliabilityDecay, now: i64) -> Vec<Finding> {
    let mut findings = Vec::new();
    let Some(beats) = &signals.heartbeats else {
        return findings;
    };
    if beats.count >= 12 {
        // The typical interval between the day's heartbeats.
        let interval = (beats.last_at - beats.first_at) / (beats.count - 1).max(1);
        let silence = now - beats.last_at;
        let limit = (t.heartbeat_silence_minutes.unwrap_or(15) * MINUTE_MS).max(5 * interval);
        if silence > limit {
            #[allow(clippy::cast_precision_loss)]
            let ratio = silence as f64 / interval.max(1) as f64;
            findings.push(Finding {
                anomaly_type: "reliability_decay",
                cause: "heartbeat_loss",
                severity: severity_of(ratio / 2.0),
                description: format!(
                    "No heartbeat for {} minutes after {} heartbeats in the day before (one every {} s)",
                    silence / MINUTE_MS,
                    beats.count,
                    interval / 1000
                ),
                details: json!({
                    "silence_minutes": silence / MINUTE_MS,
                    "typical_interval_seconds": interval / 1000,
                    "threshold_minutes": limit / MINUTE_MS,
                    "last_heartbeat_ms": beats.last_at,
                    "explanation": "Alert when silence exceeds max(heartbeat_silence_minutes, 5 typical intervals)",
                }),
            });
        }
    }
    if beats.recent >= 5 {
        #[allow(clippy::cast_precision_loss)]
        let share = beats.recent_unhealthy as f64 / beats.recent as f64;
        let before = beats.count - beats.recent;
        #[allow(clippy::cast_precision_loss)]
        let before_share = if before > 0 {
            beats.before_unhealthy as f64 / before as f64
        } else {
            0.0
        };
        let floor = t.error_rate.unwrap_or(0.5);
        if share >= floor && share >= 3.0 * before_share + 0.05 {
            findings.push(Finding {
                anomaly_type: "reliability_decay",
                cause: "error_rate",
                severity: if share >= 0.9 { "high" } else { "medium" },
                description: format!(
                    "{:.0}% of the last hour's heartbeats report a failure, against {:.0}% in the day before",
                    share * 100.0,
                    before_share * 100.0
                ),
                details: json!({
                    "error_rate": share,
                    "baseline_error_rate": before_share,
                    "heartbeats_last_hour": beats.recent,
                    "window": { "from_ms": now - 3_600_000, "to_ms": now },
                    "explanation": format!("Alert at an unhealthy share of at least {floor} and 3 × the day's share + 0.05"),
                }),
            });
        }
    }
    findings
}

/// The model mix or the tokens per request of the last day unlike the week before.
pub fn behavioral_drift(signals: &Signals, t: &BehavioralDrift, now: i64) -> Vec<Finding> {
    let mut findings = Vec::new();
    let recent: i64 = signals.models.iter().map(|m| m.recent_requests).sum();
    let base: i64 = signals.models.iter().map(|m| m.base_requests).sum();
    let min = t.min_requests.unwrap_or(20);
    if recent < min || base < min {
        return findings;
    }
    #[allow(clippy::cast_precision_loss)]
    let (recent_f, base_f) = (recent as f64, base as f64);
    #[allow(clippy::cast_precision_loss)]
    let distance: f64 = signals
        .models
        .iter()
        .map(|m| (m.recent_requests as f64 / recent_f - m.base_requests as f64 / base_f).abs())
        .sum::<f64>()
        / 2.0;
    let limit = t.model_mix_shift.unwrap_or(0.5);
    if distance >= limit {
        #[allow(clippy::cast_precision_loss)]
        let mix = |pick: fn(&ModelUse) -> i64, total: f64| -> Value {
            signals
                .models
                .iter()
                .filter(|m| pick(m) > 0)
                .map(|m| {
                    (
                        m.model.clone(),
                        json!((pick(m) as f64 / total * 1000.0).round() / 1000.0),
                    )
                })
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        findings.push(Finding {
            anomaly_type: "behavioral_drift",
            cause: "model_mix",
            severity: if distance >= 0.8 { "high" } else { "medium" },
            description: format!(
                "The last day's requests went to other models than the week before (total variation distance {distance:.2})"
            ),
            details: json!({
                "distance": distance,
                "threshold": limit,
                "recent_mix": mix(|m| m.recent_requests, recent_f),
                "baseline_mix": mix(|m| m.base_requests, base_f),
                "window": { "from_ms": now - DAY_MS, "to_ms": now },
                "explanation": "Half the sum of the differences of each model's share of requests",
            }),
        });
    }
    let recent_tokens: i64 = signals.models.iter().map(|m| m.recent_tokens).sum();
    let base_tokens: i64 = signals.models.iter().map(|m| m.base_tokens).sum();
    #[allow(clippy::cast_precision_loss)]
    let (per_recent, per_base) = (recent_tokens as f64 / recent_f, base_tokens as f64 / base_f);
    let factor = t.token_ratio.unwrap_or(3.0);
    if per_base > 0.0 && per_recent > 0.0 {
        let ratio = per_recent / per_base;
        if ratio >= factor || ratio <= 1.0 / factor {
            findings.push(Finding {
                anomaly_type: "behavioral_drift",
                cause: "token_shift",
                severity: severity_of(ratio.max(1.0 / ratio)),
                description: format!(
                    "Tokens per request moved from {per_base:.0} to {per_recent:.0} in the last day"
                ),
                details: json!({
                    "tokens_per_request": per_recent.round(),
                    "baseline_tokens_per_request": per_base.round(),
                    "ratio": (ratio * 100.0).round() / 100.0,
                    "threshold_ratio": factor,
                    "window": { "from_ms": now - DAY_MS, "to_ms": now },
                }),
            });
        }
    }
    findings
}

/// A burst of policy refusals against the agent's usual rate.
pub fn security_threat(signals: &Signals, t: &SecurityThreat, now: i64) -> Option<Finding> {
    let floor = t.refusals_per_hour.unwrap_or(20);
    #[allow(clippy::cast_precision_loss)]
    let hourly = signals.refusals_before as f64 / (7.0 * 24.0);
    let multiplier = t.burst_multiplier.unwrap_or(5.0);
    #[allow(clippy::cast_precision_loss)]
    let observed = signals.refusals_recent as f64;
    if signals.refusals_recent < floor || observed < multiplier * hourly + 1.0 {
        return None;
    }
    let ratio = observed / hourly.max(1.0);
    Some(Finding {
        anomaly_type: "security_threat",
        cause: "policy_refusals",
        severity: severity_of(ratio),
        description: format!(
            "{} requests refused or held by policies in the last hour, against {hourly:.1} an hour over the week before",
            signals.refusals_recent
        ),
        details: json!({
            "refusals_last_hour": signals.refusals_recent,
            "baseline_refusals_per_hour": (hourly * 100.0).round() / 100.0,
            "threshold": floor,
            "window": { "from_ms": now - 3_600_000, "to_ms": now },
            "explanation": format!("Alert at {floor} or more and {multiplier} × the hourly average + 1"),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(values: &[i64]) -> Vec<Option<i64>> {
        values.iter().map(|v| Some(v * 1_000_000)).collect()
    }

    #[test]
    fn a_day_far_above_the_median_is_a_spike_and_noise_is_not() {
        let t = CostSpike::default();
        let mut signals = Signals {
            daily_cost: days(&[40, 10, 11, 9, 10, 12, 10, 9, 11]),
            ..Signals::default()
        };
        let found = cost_spike(&signals, &t, 0).unwrap();
        assert_eq!(found.details["baseline_cost_usd"], 10.0);
        assert_eq!(found.severity, "medium");
        signals.daily_cost[0] = Some(14_000_000);
        assert!(cost_spike(&signals, &t, 0).is_none());
        // Too little history: no judgement.
        signals.daily_cost = days(&[400, 10, 11, 9]);
        assert!(cost_spike(&signals, &t, 0).is_none());
    }

    #[test]
    fn a_daily_cost_the_tenant_set_is_crossed_history_or_not() {
        let t = CostSpike {
            daily_cost_usd: Some(1.0),
            ..CostSpike::default()
        };
        // A new agent's first day: $50, no history.
        let first_day = Signals {
            daily_cost: days(&[50]),
            ..Signals::default()
        };
        let found = cost_spike(&first_day, &t, 0).unwrap();
        assert_eq!(found.cause, "daily_cost");
        assert_eq!(found.details["threshold_usd"], 1.0);
        assert_eq!(found.severity, "critical");
        let under = Signals {
            daily_cost: days(&[0]),
            ..Signals::default()
        };
        assert!(cost_spike(&under, &t, 0).is_none());
        // With history and a spike, the baseline-relative finding is reported.
        let spiking = Signals {
            daily_cost: days(&[40, 10, 11, 9, 10, 12, 10, 9, 11]),
            ..Signals::default()
        };
        let found = cost_spike(&spiking, &t, 0).unwrap();
        assert_eq!(found.details["baseline_cost_usd"], 10.0);
        // Without a limit of its own, a first day is not judged.
        assert!(cost_spike(&first_day, &CostSpike::default(), 0).is_none());
    }

    #[test]
    fn silence_after_regular_heartbeats_is_a_loss() {
        let now = 10 * DAY_MS;
        let signals = Signals {
            heartbeats: Some(Heartbeats {
                count: 288,
                recent: 0,
                first_at: now - DAY_MS,
                last_at: now - 40 * MINUTE_MS,
                ..Heartbeats::default()
            }),
            ..Signals::default()
        };
        let found = reliability_decay(&signals, &ReliabilityDecay::default(), now);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].cause, "heartbeat_loss");
    }

    #[test]
    fn a_new_model_mix_is_drift() {
        let signals = Signals {
            models: vec![
                ModelUse {
                    model: "a".into(),
                    recent_requests: 5,
                    recent_tokens: 500,
                    base_requests: 700,
                    base_tokens: 70_000,
                },
                ModelUse {
                    model: "b".into(),
                    recent_requests: 95,
                    recent_tokens: 9_500,
                    base_requests: 0,
                    base_tokens: 0,
                },
            ],
            ..Signals::default()
        };
        let found = behavioral_drift(&signals, &BehavioralDrift::default(), 0);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].cause, "model_mix");
    }

    #[test]
    fn a_refusal_burst_is_a_threat() {
        let signals = Signals {
            refusals_recent: 60,
            refusals_before: 7 * 24,
            ..Signals::default()
        };
        assert!(security_threat(&signals, &SecurityThreat::default(), 0).is_some());
        let usual = Signals {
            refusals_recent: 3,
            ..signals
        };
        assert!(security_threat(&usual, &SecurityThreat::default(), 0).is_none());
    }
}
