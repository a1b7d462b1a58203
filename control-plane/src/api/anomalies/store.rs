//! SQL of anomalies. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::Anomaly;
use crate::api::envelope::Page;
use crate::db::{json_column, WriteTx};

const SELECT: &str = "SELECT n.id, n.agent_id, a.name AS agent_name, n.anomaly_type, n.severity, \
    n.status, n.description, n.details, n.detected_at, n.last_seen_at, n.occurrences, \
    n.acknowledged_at, n.acknowledged_by, n.note, n.resolved_at, n.resolved_by, n.resolution \
    FROM anomalies n LEFT JOIN agents a ON a.tenant_id = n.tenant_id AND a.id = n.agent_id \
    AND a.deleted_at IS NULL ";

const FILTER: &str = "WHERE n.tenant_id = $1 AND ($2 IS NULL OR n.status = $2) \
    AND ($3 IS NULL OR n.anomaly_type = $3) AND ($4 IS NULL OR n.agent_id = $4) \
    AND ($5 IS NULL OR n.severity = $5)";

/// The filters of a list, as stored strings.
pub struct Filter<'a> {
    pub status: Option<&'a str>,
    pub anomaly_type: Option<&'a str>,
    pub agent_id: Option<&'a str>,
    pub severity: Option<&'a str>,
}

pub async fn list(
    pool: &AnyPool,
    tenant_id: &str,
    filter: &Filter<'_>,
    page: Page,
) -> Result<(Vec<Anomaly>, i64), sqlx::Error> {
    let anomalies = sqlx::query(&format!(
        "{SELECT}{FILTER} ORDER BY n.detected_at DESC, n.id DESC LIMIT $6 OFFSET $7"
    ))
    .bind(tenant_id)
    .bind(filter.status)
    .bind(filter.anomaly_type)
    .bind(filter.agent_id)
    .bind(filter.severity)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(anomaly_from_row)
    .collect::<Result<_, _>>()?;
    let total = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM anomalies n {FILTER}"))
        .bind(tenant_id)
        .bind(filter.status)
        .bind(filter.anomaly_type)
        .bind(filter.agent_id)
        .bind(filter.severity)
        .fetch_one(pool)
        .await?;
    Ok((anomalies, total))
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
) -> Result<Option<Anomaly>, sqlx::Error> {
    sqlx::query(&format!("{SELECT} WHERE n.tenant_id = $1 AND n.id = $2"))
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(db)
        .await?
        .as_ref()
        .map(anomaly_from_row)
        .transpose()
}

/// Counts of the tenant's anomalies by (status, type).
pub async fn counts(
    pool: &AnyPool,
    tenant_id: &str,
) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT status, anomaly_type, COUNT(*) FROM anomalies WHERE tenant_id = $1 \
         GROUP BY status, anomaly_type",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await
}

pub async fn acknowledge(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: &str,
    at: Timestamp,
    by: &str,
    note: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let moved = sqlx::query(
        "UPDATE anomalies SET status = 'acknowledged', acknowledged_at = $1, acknowledged_by = $2, \
         note = $3 WHERE tenant_id = $4 AND id = $5 AND status = 'open'",
    )
    .bind(at.as_millis())
    .bind(by)
    .bind(note)
    .bind(tenant_id)
    .bind(id)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(moved > 0)
}

pub async fn resolve(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: &str,
    at: Timestamp,
    by: &str,
    resolution: Option<&str>,
) -> Result<bool, sqlx::Error> {
    let moved = sqlx::query(
        "UPDATE anomalies SET status = 'resolved', resolved_at = $1, resolved_by = $2, \
         resolution = $3 WHERE tenant_id = $4 AND id = $5 AND status <> 'resolved'",
    )
    .bind(at.as_millis())
    .bind(by)
    .bind(resolution)
    .bind(tenant_id)
    .bind(id)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(moved > 0)
}

fn anomaly_from_row(row: &AnyRow) -> Result<Anomaly, sqlx::Error> {
    let details: String = row.try_get("details")?;
    let at = |name: &str| -> Result<Option<Timestamp>, sqlx::Error> {
        Ok(row
            .try_get::<Option<i64>, _>(name)?
            .map(Timestamp::from_millis))
    };
    Ok(Anomaly {
        id: row.try_get("id")?,
        agent_id: row.try_get("agent_id")?,
        agent_name: row.try_get("agent_name")?,
        anomaly_type: row.try_get("anomaly_type")?,
        severity: row.try_get("severity")?,
        status: row.try_get("status")?,
        description: row.try_get("description")?,
        detected_at: Timestamp::from_millis(row.try_get("detected_at")?),
        details: json_column(&details),
        last_seen_at: Timestamp::from_millis(row.try_get("last_seen_at")?),
        occurrences: row.try_get("occurrences")?,
        acknowledged_at: at("acknowledged_at")?,
        acknowledged_by: row.try_get("acknowledged_by")?,
        note: row.try_get("note")?,
        resolved_at: at("resolved_at")?,
        resolved_by: row.try_get("resolved_by")?,
        resolution: row.try_get("resolution")?,
    })
}
