//! SQL of risk classifications and of the facts the suggestion reads. Every statement
//! filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::RiskClassification;
use crate::api::envelope::Page;
use crate::db::WriteTx;

const COLUMNS: &str = "SELECT r.id, r.agent_id, a.name AS agent_name, r.risk_level, \
     r.previous_level, r.justification, r.assessed_by, r.assessed_at \
     FROM risk_classifications r JOIN agents a ON a.id = r.agent_id AND a.tenant_id = r.tenant_id";

/// An agent's current level and name, if it exists (not deleted) in the tenant.
pub async fn agent_level(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<(String, Option<String>)>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT name, risk_level FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(|row| Ok((row.try_get("name")?, row.try_get("risk_level")?)))
        .transpose()
}

/// The new classification row, and the agent's level kept in step.
pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    record: &RiskClassification,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO risk_classifications (id, tenant_id, agent_id, risk_level, previous_level, \
         justification, assessed_by, assessed_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&record.id)
    .bind(tenant_id)
    .bind(&record.agent_id)
    .bind(record.risk_level.as_str())
    .bind(record.previous_risk_level.map(|l| l.as_str()))
    .bind(&record.justification)
    .bind(&record.assessed_by)
    .bind(record.assessed_at.as_millis())
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "UPDATE agents SET risk_level = $3, updated_at = $4 WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant_id)
    .bind(&record.agent_id)
    .bind(record.risk_level.as_str())
    .bind(record.assessed_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// The agent's current classification: its newest.
pub async fn current<'e>(
    executor: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<RiskClassification>, sqlx::Error> {
    let sql = format!(
        "{COLUMNS} WHERE r.tenant_id = $1 AND r.agent_id = $2 AND a.deleted_at IS NULL \
         ORDER BY r.assessed_at DESC, r.id DESC LIMIT 1"
    );
    sqlx::query(&sql)
        .bind(tenant_id)
        .bind(agent_id)
        .fetch_optional(executor)
        .await?
        .as_ref()
        .map(from_row)
        .transpose()
}

/// Condition: `r` is its agent's newest classification.
const NEWEST: &str = "NOT EXISTS (SELECT 1 FROM risk_classifications n \
     WHERE n.tenant_id = r.tenant_id AND n.agent_id = r.agent_id \
     AND (n.assessed_at > r.assessed_at OR (n.assessed_at = r.assessed_at AND n.id > r.id)))";

/// One page of the agents' current classifications, newest first, at `level` if given.
pub async fn list(
    pool: &sqlx::AnyPool,
    tenant_id: &str,
    level: Option<&str>,
    page: Page,
) -> Result<(Vec<RiskClassification>, i64), sqlx::Error> {
    let filter = format!(
        " WHERE r.tenant_id = $1 AND a.deleted_at IS NULL AND {NEWEST} \
         AND ($2 IS NULL OR r.risk_level = $2)"
    );
    let rows = sqlx::query(&format!(
        "{COLUMNS}{filter} ORDER BY r.assessed_at DESC, r.id DESC LIMIT $3 OFFSET $4"
    ))
    .bind(tenant_id)
    .bind(level)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?;
    let total: i64 = sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM risk_classifications r JOIN agents a \
         ON a.id = r.agent_id AND a.tenant_id = r.tenant_id{filter}"
    ))
    .bind(tenant_id)
    .bind(level)
    .fetch_one(pool)
    .await?;
    let items = rows.iter().map(from_row).collect::<Result<_, _>>()?;
    Ok((items, total))
}

fn from_row(row: &AnyRow) -> Result<RiskClassification, sqlx::Error> {
    let level = |column: &str| -> Result<Option<super::RiskLevel>, sqlx::Error> {
        Ok(row
            .try_get::<Option<String>, _>(column)?
            .as_deref()
            .and_then(super::RiskLevel::parse))
    };
    Ok(RiskClassification {
        id: row.try_get("id")?,
        agent_id: row.try_get("agent_id")?,
        agent_name: row.try_get("agent_name")?,
        risk_level: level("risk_level")?.unwrap_or(super::RiskLevel::Minimal),
        previous_risk_level: level("previous_level")?,
        justification: row.try_get("justification")?,
        assessed_by: row.try_get("assessed_by")?,
        assessed_at: Timestamp::from_millis(row.try_get("assessed_at")?),
    })
}

/// What the suggestion reads of the agent's last 30 days (from `since`).
#[derive(Debug, Default)]
pub struct Activity {
    pub models_used: Vec<String>,
    pub requests: i64,
    pub blocks: i64,
    pub quarantines: i64,
    pub policy_refusals: i64,
}

pub async fn activity(
    pool: &sqlx::AnyPool,
    tenant_id: &str,
    agent_id: &str,
    since: i64,
) -> Result<Activity, sqlx::Error> {
    let models = sqlx::query(
        "SELECT model_provider, model_name, CAST(SUM(requests) AS BIGINT) AS requests FROM usage_hourly \
         WHERE tenant_id = $1 AND agent_id = $2 AND hour >= $3 \
         GROUP BY model_provider, model_name ORDER BY SUM(requests) DESC, model_provider, model_name",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(since)
    .fetch_all(pool)
    .await?;
    let mut activity = Activity::default();
    for row in &models {
        let provider: String = row.try_get("model_provider")?;
        let model: String = row.try_get("model_name")?;
        activity.requests += row.try_get::<i64, _>("requests")?;
        activity.models_used.push(format!("{provider}/{model}"));
    }
    let events = |event_type: &'static str| {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM audit_events WHERE tenant_id = $1 AND target_id = $2 \
             AND event_type = $3 AND occurred_at >= $4",
        )
        .bind(tenant_id)
        .bind(agent_id)
        .bind(event_type)
        .bind(since)
        .fetch_one(pool)
    };
    activity.blocks = events("agent.blocked").await?;
    activity.quarantines = events("agent.quarantined").await?;
    activity.policy_refusals = sqlx::query_scalar(
        "SELECT COUNT(*) FROM policy_decisions d WHERE d.tenant_id = $1 AND d.agent_id = $2 \
         AND d.evaluated_at >= $3 AND EXISTS (SELECT 1 FROM policy_result_set_members m \
         WHERE m.set_id = d.result_set_id AND m.result = 'fail')",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(since)
    .fetch_one(pool)
    .await?;
    Ok(activity)
}
