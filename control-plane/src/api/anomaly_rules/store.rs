//! SQL of anomaly rules. Every statement filters by tenant.

use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::timestamp::Timestamp;

use crate::db::{json_column, WriteTx};

/// A rule as stored: the webhook URL unmasked.
#[derive(Debug, Clone)]
pub struct RuleRow {
    pub id: i64,
    pub anomaly_type: String,
    pub enabled: bool,
    pub threshold_config: Value,
    pub notification_config: Value,
    pub signing_secret: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

const SELECT: &str = "SELECT id, anomaly_type, enabled, threshold_config, notification_config, \
    signing_secret, created_at, updated_at FROM anomaly_rules ";

pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
) -> Result<Vec<RuleRow>, sqlx::Error> {
    sqlx::query(&format!("{SELECT} WHERE tenant_id = $1 ORDER BY id"))
        .bind(tenant_id)
        .fetch_all(db)
        .await?
        .iter()
        .map(rule_from_row)
        .collect()
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: i64,
) -> Result<Option<RuleRow>, sqlx::Error> {
    sqlx::query(&format!("{SELECT} WHERE tenant_id = $1 AND id = $2"))
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(db)
        .await?
        .as_ref()
        .map(rule_from_row)
        .transpose()
}

/// Inserts the rule unless the type has one; returns its id.
pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    rule: &RuleRow,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO anomaly_rules (tenant_id, anomaly_type, enabled, threshold_config, \
         notification_config, signing_secret, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (tenant_id, anomaly_type) DO NOTHING RETURNING id",
    )
    .bind(tenant_id)
    .bind(&rule.anomaly_type)
    .bind(i64::from(rule.enabled))
    .bind(rule.threshold_config.to_string())
    .bind(rule.notification_config.to_string())
    .bind(&rule.signing_secret)
    .bind(rule.created_at.as_millis())
    .bind(rule.updated_at.as_millis())
    .fetch_optional(&mut **tx)
    .await
}

/// Writes the rule's fields; false when another rule has its (new) type.
pub async fn update(
    tx: &mut WriteTx,
    tenant_id: &str,
    rule: &RuleRow,
) -> Result<bool, sqlx::Error> {
    let taken: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM anomaly_rules WHERE tenant_id = $1 AND anomaly_type = $2 AND id <> $3",
    )
    .bind(tenant_id)
    .bind(&rule.anomaly_type)
    .bind(rule.id)
    .fetch_one(&mut **tx)
    .await?;
    if taken > 0 {
        return Ok(false);
    }
    sqlx::query(
        "UPDATE anomaly_rules SET anomaly_type = $1, enabled = $2, threshold_config = $3, \
         notification_config = $4, signing_secret = $5, updated_at = $6 \
         WHERE tenant_id = $7 AND id = $8",
    )
    .bind(&rule.anomaly_type)
    .bind(i64::from(rule.enabled))
    .bind(rule.threshold_config.to_string())
    .bind(rule.notification_config.to_string())
    .bind(&rule.signing_secret)
    .bind(rule.updated_at.as_millis())
    .bind(tenant_id)
    .bind(rule.id)
    .execute(&mut **tx)
    .await?;
    Ok(true)
}

pub async fn delete(tx: &mut WriteTx, tenant_id: &str, id: i64) -> Result<bool, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM anomaly_rules WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(id)
        .execute(&mut **tx)
        .await?
        .rows_affected();
    Ok(deleted > 0)
}

fn rule_from_row(row: &AnyRow) -> Result<RuleRow, sqlx::Error> {
    let thresholds: String = row.try_get("threshold_config")?;
    let notification: String = row.try_get("notification_config")?;
    Ok(RuleRow {
        id: row.try_get("id")?,
        anomaly_type: row.try_get("anomaly_type")?,
        enabled: row.try_get::<i64, _>("enabled")? != 0,
        threshold_config: json_column(&thresholds),
        notification_config: json_column(&notification),
        signing_secret: row.try_get("signing_secret")?,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}
