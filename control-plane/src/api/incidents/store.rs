//! SQL of incidents and their updates, and the records an evidence pack gathers. Every
//! statement filters by tenant.

use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::deadline::{self, Grounds};
use super::{Incident, IncidentUpdate};
use crate::api::envelope::Page;
use crate::db::{json_column, WriteTx};

const COLUMNS: &str = "id, agent_id, title, severity, description, impact, immediate_actions, \
    root_cause, affected_persons_count, involves_health_or_death, widespread_infringement, \
    critical_infrastructure, status, authority_notified_at, reported_at, report_due_at, \
    reported_by, updated_at";

pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    incident: &Incident,
) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO incidents (tenant_id, {COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, \
         $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
    ))
    .bind(tenant_id)
    .bind(&incident.id)
    .bind(&incident.agent_id)
    .bind(&incident.title)
    .bind(&incident.severity)
    .bind(&incident.description)
    .bind(&incident.impact)
    .bind(&incident.immediate_actions)
    .bind(&incident.root_cause)
    .bind(incident.affected_persons_count)
    .bind(i64::from(incident.involves_health_or_death))
    .bind(i64::from(incident.widespread_infringement))
    .bind(i64::from(incident.critical_infrastructure))
    .bind(&incident.status)
    .bind(incident.authority_notified_at.map(Timestamp::as_millis))
    .bind(incident.reported_at.as_millis())
    .bind(incident.reporting.due_at.as_millis())
    .bind(&incident.reported_by)
    .bind(incident.updated_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Writes an update's effect on the incident and the update itself.
pub async fn update(
    tx: &mut WriteTx,
    tenant_id: &str,
    incident: &Incident,
    update: &IncidentUpdate,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE incidents SET status = $1, authority_notified_at = $2, updated_at = $3 \
         WHERE tenant_id = $4 AND id = $5",
    )
    .bind(&incident.status)
    .bind(incident.authority_notified_at.map(Timestamp::as_millis))
    .bind(incident.updated_at.as_millis())
    .bind(tenant_id)
    .bind(&incident.id)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "INSERT INTO incident_updates (tenant_id, incident_id, status, note, authority_notified, \
         created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(tenant_id)
    .bind(&incident.id)
    .bind(&update.status)
    .bind(&update.note)
    .bind(i64::from(update.authority_notified))
    .bind(update.created_at.as_millis())
    .bind(&update.created_by)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
    now: Timestamp,
) -> Result<Option<Incident>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM incidents WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(db)
    .await?
    .map(|row| incident_from_row(&row, now))
    .transpose()
}

pub async fn updates(
    pool: &AnyPool,
    tenant_id: &str,
    id: &str,
) -> Result<Vec<IncidentUpdate>, sqlx::Error> {
    sqlx::query(
        "SELECT status, note, authority_notified, created_at, created_by FROM incident_updates \
         WHERE tenant_id = $1 AND incident_id = $2 ORDER BY id",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        Ok(IncidentUpdate {
            status: row.try_get("status")?,
            note: row.try_get("note")?,
            authority_notified: row.try_get::<i64, _>("authority_notified")? != 0,
            created_at: Timestamp::from_millis(row.try_get("created_at")?),
            created_by: row.try_get("created_by")?,
        })
    })
    .collect()
}

pub async fn list(
    pool: &AnyPool,
    tenant_id: &str,
    status: Option<&str>,
    agent_id: Option<&str>,
    page: Page,
    now: Timestamp,
) -> Result<(Vec<Incident>, i64), sqlx::Error> {
    let filter =
        "WHERE tenant_id = $1 AND ($2 IS NULL OR status = $2) AND ($3 IS NULL OR agent_id = $3)";
    let incidents = sqlx::query(&format!(
        "SELECT {COLUMNS} FROM incidents {filter} ORDER BY reported_at DESC, id DESC LIMIT $4 OFFSET $5"
    ))
    .bind(tenant_id)
    .bind(status)
    .bind(agent_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| incident_from_row(row, now))
    .collect::<Result<_, _>>()?;
    let total = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM incidents {filter}"))
        .bind(tenant_id)
        .bind(status)
        .bind(agent_id)
        .fetch_one(pool)
        .await?;
    Ok((incidents, total))
}

/// How many of the tenant's incidents are past their deadline without notification.
pub async fn overdue(pool: &AnyPool, tenant_id: &str, now: Timestamp) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM incidents WHERE tenant_id = $1 AND authority_notified_at IS NULL \
         AND report_due_at < $2",
    )
    .bind(tenant_id)
    .bind(now.as_millis())
    .fetch_one(pool)
    .await
}

fn incident_from_row(row: &AnyRow, now: Timestamp) -> Result<Incident, sqlx::Error> {
    let flag = |name: &str| -> Result<bool, sqlx::Error> { Ok(row.try_get::<i64, _>(name)? != 0) };
    let grounds = Grounds {
        involves_health_or_death: flag("involves_health_or_death")?,
        widespread_infringement: flag("widespread_infringement")?,
        critical_infrastructure: flag("critical_infrastructure")?,
    };
    let reported_at = Timestamp::from_millis(row.try_get("reported_at")?);
    let notified_at = row
        .try_get::<Option<i64>, _>("authority_notified_at")?
        .map(Timestamp::from_millis);
    Ok(Incident {
        id: row.try_get("id")?,
        agent_id: row.try_get("agent_id")?,
        title: row.try_get("title")?,
        severity: row.try_get("severity")?,
        description: row.try_get("description")?,
        impact: row.try_get("impact")?,
        immediate_actions: row.try_get("immediate_actions")?,
        root_cause: row.try_get("root_cause")?,
        affected_persons_count: row.try_get("affected_persons_count")?,
        involves_health_or_death: grounds.involves_health_or_death,
        widespread_infringement: grounds.widespread_infringement,
        critical_infrastructure: grounds.critical_infrastructure,
        status: row.try_get("status")?,
        authority_notified: notified_at.is_some(),
        authority_notified_at: notified_at,
        reported_at,
        reported_by: row.try_get("reported_by")?,
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
        reporting: deadline::reporting(grounds, reported_at, notified_at, now),
        updates: None,
    })
}

/// The agent's current EU AI Act classification, as an evidence pack quotes it.
pub struct ClassificationRow {
    pub risk_level: String,
    pub justification: String,
    pub assessed_by: String,
    pub assessed_at: Timestamp,
}

/// An audit event with its place in the tenant's hash chain (none for events written
/// before the chain began).
pub struct AuditEventRow {
    pub id: String,
    pub seq: Option<i64>,
    pub hash: Option<String>,
    pub event_type: String,
    pub actor: String,
    pub target_type: String,
    pub target_id: String,
    pub details: Value,
    pub occurred_at: Timestamp,
}

/// An approval as stored: `status` is `pending` until decided, however late it is.
pub struct ApprovalRow {
    pub id: i64,
    pub policy_id: i64,
    pub provider: String,
    pub model: String,
    pub status: String,
    pub reviewer_id: Option<String>,
    pub reason: Option<String>,
    pub created_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    pub expires_at: Timestamp,
}

/// An anomaly detected for an agent.
pub struct AnomalyRow {
    pub id: String,
    pub anomaly_type: String,
    pub severity: String,
    pub status: String,
    pub description: String,
    pub details: Value,
    pub detected_at: Timestamp,
    pub last_seen_at: Timestamp,
}

/// An agent's usage over a window, summed.
pub struct UsageTotals {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_micros: i64,
}

/// The newest event of the tenant's audit chain: its `seq` and `hash`.
pub struct ChainHead {
    pub seq: i64,
    pub hash: String,
}

/// The agent's newest classification, if it was ever classified.
pub async fn current_classification(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<ClassificationRow>, sqlx::Error> {
    sqlx::query(
        "SELECT risk_level, justification, assessed_by, assessed_at FROM risk_classifications \
         WHERE tenant_id = $1 AND agent_id = $2 ORDER BY assessed_at DESC, id DESC LIMIT 1",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_optional(pool)
    .await?
    .map(|row| {
        Ok(ClassificationRow {
            risk_level: row.try_get("risk_level")?,
            justification: row.try_get("justification")?,
            assessed_by: row.try_get("assessed_by")?,
            assessed_at: Timestamp::from_millis(row.try_get("assessed_at")?),
        })
    })
    .transpose()
}

/// The tenant's audit chain head, if any event was chained yet.
pub async fn audit_chain_head(
    pool: &AnyPool,
    tenant_id: &str,
) -> Result<Option<ChainHead>, sqlx::Error> {
    sqlx::query("SELECT seq, hash FROM audit_heads WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_optional(pool)
        .await?
        .map(|row| {
            Ok(ChainHead {
                seq: row.try_get("seq")?,
                hash: row.try_get("hash")?,
            })
        })
        .transpose()
}

/// The audit events about the agent between `from` and `to` (Unix ms, both included)
/// and every event about the incident: the newest `limit` of them, newest first.
pub async fn audit_events_about(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    incident_id: &str,
    from: i64,
    to: i64,
    limit: i64,
) -> Result<Vec<AuditEventRow>, sqlx::Error> {
    sqlx::query(
        "SELECT id, seq, hash, event_type, actor, target_type, target_id, details, occurred_at \
         FROM audit_events WHERE tenant_id = $1 AND ((target_id = $2 AND occurred_at >= $3 \
         AND occurred_at <= $4) OR target_id = $5) ORDER BY occurred_at DESC, seq DESC LIMIT $6",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .bind(incident_id)
    .bind(limit)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        let details: String = row.try_get("details")?;
        Ok(AuditEventRow {
            id: row.try_get("id")?,
            seq: row.try_get("seq")?,
            hash: row.try_get("hash")?,
            event_type: row.try_get("event_type")?,
            actor: row.try_get("actor")?,
            target_type: row.try_get("target_type")?,
            target_id: row.try_get("target_id")?,
            details: json_column::<Value>(&details),
            occurred_at: Timestamp::from_millis(row.try_get("occurred_at")?),
        })
    })
    .collect()
}

/// The approvals the agent's requests raised between `from` and `to` (Unix ms, both
/// included), the first `limit` by id.
pub async fn approvals_raised(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    from: i64,
    to: i64,
    limit: i64,
) -> Result<Vec<ApprovalRow>, sqlx::Error> {
    sqlx::query(
        "SELECT id, policy_id, provider, model, status, reviewer_id, reason, created_at, \
         resolved_at, expires_at FROM approvals WHERE tenant_id = $1 AND agent_id = $2 \
         AND created_at >= $3 AND created_at <= $4 ORDER BY id LIMIT $5",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .bind(limit)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        Ok(ApprovalRow {
            id: row.try_get("id")?,
            policy_id: row.try_get("policy_id")?,
            provider: row.try_get("provider")?,
            model: row.try_get("model")?,
            status: row.try_get("status")?,
            reviewer_id: row.try_get("reviewer_id")?,
            reason: row.try_get("reason")?,
            created_at: Timestamp::from_millis(row.try_get("created_at")?),
            resolved_at: row
                .try_get::<Option<i64>, _>("resolved_at")?
                .map(Timestamp::from_millis),
            expires_at: Timestamp::from_millis(row.try_get("expires_at")?),
        })
    })
    .collect()
}

/// The agent's anomalies open at some time between `from` and `to` (Unix ms): detected
/// by `to` and last seen from `from` on; the first `limit` detected.
pub async fn anomalies_seen(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    from: i64,
    to: i64,
    limit: i64,
) -> Result<Vec<AnomalyRow>, sqlx::Error> {
    sqlx::query(
        "SELECT id, anomaly_type, severity, status, description, details, detected_at, last_seen_at \
         FROM anomalies WHERE tenant_id = $1 AND agent_id = $2 AND detected_at <= $4 \
         AND last_seen_at >= $3 ORDER BY detected_at LIMIT $5",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .bind(limit)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|row| {
        let details: String = row.try_get("details")?;
        Ok(AnomalyRow {
            id: row.try_get("id")?,
            anomaly_type: row.try_get("anomaly_type")?,
            severity: row.try_get("severity")?,
            status: row.try_get("status")?,
            description: row.try_get("description")?,
            details: json_column::<Value>(&details),
            detected_at: Timestamp::from_millis(row.try_get("detected_at")?),
            last_seen_at: Timestamp::from_millis(row.try_get("last_seen_at")?),
        })
    })
    .collect()
}

/// The agent's usage records between `from` and `to` (Unix ms, both included), summed.
pub async fn usage_totals(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    from: i64,
    to: i64,
) -> Result<UsageTotals, sqlx::Error> {
    let row = sqlx::query(
        // PostgreSQL sums BIGINTs as NUMERIC: cast back.
        "SELECT COUNT(*) AS requests, CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT) AS input_tokens, \
         CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT) AS output_tokens, \
         CAST(COALESCE(SUM(cost_micros), 0) AS BIGINT) AS cost \
         FROM usage_records WHERE tenant_id = $1 AND agent_id = $2 AND recorded_at >= $3 \
         AND recorded_at <= $4",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(from)
    .bind(to)
    .fetch_one(pool)
    .await?;
    Ok(UsageTotals {
        requests: row.try_get("requests")?,
        input_tokens: row.try_get("input_tokens")?,
        output_tokens: row.try_get("output_tokens")?,
        cost_micros: row.try_get("cost")?,
    })
}
