//! SQL of incidents and their updates. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::deadline::{self, Grounds};
use super::{Incident, IncidentUpdate};
use crate::api::envelope::Page;
use crate::db::WriteTx;

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
