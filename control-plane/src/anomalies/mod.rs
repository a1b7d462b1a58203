//! Anomaly detection (spec 2.13, 3.3, 4.7): a background pass, on one replica at a time
//! (the `anomalies` lease), over each tenant's rollups, heartbeats and policy decisions.
//!
//! For each live agent the pass computes the signals (`signals.rs`, a few grouped
//! queries per tenant) and applies the rules (`detect.rs`) with the tenant's thresholds
//! (`thresholds.rs`; a disabled rule turns its type off). A finding opens an anomaly,
//! audited as `anomaly.detected` (actor `system`, announced to channels and to the rule's
//! webhook); a finding whose agent, type and cause already have an unresolved anomaly
//! updates it instead (`last_seen_at`, `occurrences`, the latest numbers, the higher
//! severity). Anomalies are never resolved automatically: a person acknowledges and
//! resolves them.

pub mod detect;
pub mod signals;
pub mod thresholds;

use serde_json::{json, Value};
use sqlx::Row;
use warden_shared::ids::{new_id, IdKind};
use warden_shared::timestamp::Timestamp;

use crate::changes::{self, AuditEvent, Author, Proxies};
use crate::db::{json_column, Db, WriteTx};
use detect::Finding;
use thresholds::Thresholds;

pub const LEASE_JOB: &str = "anomalies";

/// What one pass over a tenant did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassReport {
    pub agents: usize,
    pub opened: usize,
    pub updated: usize,
}

/// The tenant's thresholds: defaults, with its rules applied.
pub async fn thresholds(db: &Db, tenant_id: &str) -> Result<Thresholds, sqlx::Error> {
    let mut thresholds = Thresholds::default();
    let rows = sqlx::query(
        "SELECT anomaly_type, enabled, threshold_config FROM anomaly_rules WHERE tenant_id = $1",
    )
    .bind(tenant_id)
    .fetch_all(db.pool())
    .await?;
    for row in &rows {
        let anomaly_type: String = row.try_get("anomaly_type")?;
        let enabled: i64 = row.try_get("enabled")?;
        let config: String = row.try_get("threshold_config")?;
        thresholds.apply(&anomaly_type, enabled != 0, &json_column::<Value>(&config));
    }
    Ok(thresholds)
}

/// One pass over one tenant's agents at `now`.
pub async fn detect_tenant(
    db: &Db,
    tenant_id: &str,
    now: Timestamp,
) -> Result<PassReport, sqlx::Error> {
    let thresholds = thresholds(db, tenant_id).await?;
    let cost_days = thresholds
        .cost_spike
        .as_ref()
        .and_then(|t| t.baseline_days)
        .unwrap_or(14);
    let agents = signals::agents(db.pool(), tenant_id).await?;
    let mut signals = signals::read(db.pool(), tenant_id, now.as_millis(), cost_days).await?;
    let mut report = PassReport {
        agents: agents.len(),
        ..PassReport::default()
    };
    let mut findings = Vec::new();
    for (agent_id, agent_name) in &agents {
        let Some(signals) = signals.remove(agent_id) else {
            continue;
        };
        for finding in findings_of(&signals, &thresholds, now.as_millis()) {
            findings.push((agent_id.as_str(), agent_name.as_str(), finding));
        }
    }
    if findings.is_empty() {
        return Ok(report);
    }
    let mut tx = db.begin_write().await?;
    for (agent_id, agent_name, finding) in findings {
        if record(&mut tx, tenant_id, agent_id, agent_name, &finding, now).await? {
            report.opened += 1;
        } else {
            report.updated += 1;
        }
    }
    tx.commit().await?;
    Ok(report)
}

/// Every finding for one agent's signals.
pub fn findings_of(signals: &detect::Signals, thresholds: &Thresholds, now: i64) -> Vec<Finding> {
    let mut findings = Vec::new();
    if let Some(t) = &thresholds.cost_spike {
        findings.extend(detect::cost_spike(signals, t, now));
    }
    if let Some(t) = &thresholds.reliability_decay {
        findings.extend(detect::reliability_decay(signals, t, now));
    }
    if let Some(t) = &thresholds.behavioral_drift {
        findings.extend(detect::behavioral_drift(signals, t, now));
    }
    if let Some(t) = &thresholds.security_threat {
        findings.extend(detect::security_threat(signals, t, now));
    }
    findings
}

fn severity_rank(severity: &str) -> u8 {
    match severity {
        "critical" => 3,
        "high" => 2,
        "medium" => 1,
        _ => 0,
    }
}

/// Opens an anomaly for the finding or updates the unresolved one of its agent, type
/// and cause; true when it opened one.
async fn record(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
    agent_name: &str,
    finding: &Finding,
    now: Timestamp,
) -> Result<bool, sqlx::Error> {
    let existing = sqlx::query(
        "SELECT id, severity FROM anomalies WHERE tenant_id = $1 AND agent_id = $2 \
         AND anomaly_type = $3 AND cause = $4 AND status <> 'resolved'",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(finding.anomaly_type)
    .bind(finding.cause)
    .fetch_optional(&mut **tx)
    .await?;
    let mut details = finding.details.clone();
    details["cause"] = json!(finding.cause);
    if let Some(row) = existing {
        let id: String = row.try_get("id")?;
        let severity: String = row.try_get("severity")?;
        let severity = if severity_rank(finding.severity) > severity_rank(&severity) {
            finding.severity.to_owned()
        } else {
            severity
        };
        sqlx::query(
            "UPDATE anomalies SET last_seen_at = $1, occurrences = occurrences + 1, details = $2, \
             description = $3, severity = $4 WHERE tenant_id = $5 AND id = $6",
        )
        .bind(now.as_millis())
        .bind(details.to_string())
        .bind(&finding.description)
        .bind(&severity)
        .bind(tenant_id)
        .bind(&id)
        .execute(&mut **tx)
        .await?;
        return Ok(false);
    }
    let id = new_id(IdKind::Anomaly, now.as_millis());
    sqlx::query(
        "INSERT INTO anomalies (id, tenant_id, agent_id, anomaly_type, cause, severity, status, \
         description, details, detected_at, last_seen_at, occurrences) \
         VALUES ($1, $2, $3, $4, $5, $6, 'open', $7, $8, $9, $9, 1)",
    )
    .bind(&id)
    .bind(tenant_id)
    .bind(agent_id)
    .bind(finding.anomaly_type)
    .bind(finding.cause)
    .bind(finding.severity)
    .bind(&finding.description)
    .bind(details.to_string())
    .bind(now.as_millis())
    .execute(&mut **tx)
    .await?;
    changes::record(
        tx,
        Author {
            tenant_id,
            actor: "system",
        },
        now,
        AuditEvent {
            event_type: "anomaly.detected",
            target_type: "anomaly",
            target_id: &id,
            details: json!({
                "agent_id": agent_id,
                "name": agent_name,
                "anomaly_type": finding.anomaly_type,
                "severity": finding.severity,
                "reason": finding.description,
                "details": details,
            }),
        },
        Proxies::Unaffected,
    )
    .await?;
    Ok(true)
}

/// One pass over every tenant; returns the sum of their reports.
pub async fn detect_all(db: &Db, now: Timestamp) -> Result<PassReport, sqlx::Error> {
    let tenants: Vec<String> = sqlx::query_scalar("SELECT id FROM tenants ORDER BY id")
        .fetch_all(db.pool())
        .await?;
    let mut total = PassReport::default();
    for tenant in tenants {
        let report = detect_tenant(db, &tenant, now).await?;
        total.agents += report.agents;
        total.opened += report.opened;
        total.updated += report.updated;
    }
    Ok(total)
}
