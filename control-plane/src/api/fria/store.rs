//! SQL of assessments. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::{Fria, FriaVersion};
use crate::db::WriteTx;

const COLUMNS: &str = "id, agent_id, version, status, processes, frequency_and_scope, \
    categories_of_persons, specific_risks, human_oversight_measures, risk_mitigation_measures, \
    created_at, created_by, submitted_at, submitted_by";

/// Locks the live agent's row for the transaction (a no-op update, so that writers of
/// the same agent's assessments wait for each other on both backends); false when the
/// tenant has no such agent.
pub async fn lock_live_agent(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
) -> Result<bool, sqlx::Error> {
    let locked = sqlx::query(
        "UPDATE agents SET updated_at = updated_at \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(locked > 0)
}

pub async fn next_version(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
) -> Result<i64, sqlx::Error> {
    let newest: Option<i64> =
        sqlx::query_scalar("SELECT MAX(version) FROM frias WHERE tenant_id = $1 AND agent_id = $2")
            .bind(tenant_id)
            .bind(agent_id)
            .fetch_one(&mut **tx)
            .await?;
    Ok(newest.unwrap_or(0) + 1)
}

pub async fn insert(tx: &mut WriteTx, tenant_id: &str, fria: &Fria) -> Result<(), sqlx::Error> {
    sqlx::query(&format!(
        "INSERT INTO frias (tenant_id, {COLUMNS}) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
    ))
    .bind(tenant_id)
    .bind(&fria.id)
    .bind(&fria.agent_id)
    .bind(fria.version)
    .bind(&fria.status)
    .bind(&fria.processes)
    .bind(&fria.frequency_and_scope)
    .bind(&fria.categories_of_persons)
    .bind(&fria.specific_risks)
    .bind(&fria.human_oversight_measures)
    .bind(&fria.risk_mitigation_measures)
    .bind(fria.created_at.as_millis())
    .bind(&fria.created_by)
    .bind(fria.submitted_at.map(Timestamp::as_millis))
    .bind(&fria.submitted_by)
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
) -> Result<Option<Fria>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM frias WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(db)
    .await?
    .as_ref()
    .map(fria_from_row)
    .transpose()
}

/// Every version of the agent's assessment, newest first.
pub async fn versions<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Vec<Fria>, sqlx::Error> {
    sqlx::query(&format!(
        "SELECT {COLUMNS} FROM frias WHERE tenant_id = $1 AND agent_id = $2 ORDER BY version DESC"
    ))
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_all(db)
    .await?
    .iter()
    .map(fria_from_row)
    .collect()
}

/// Marks a draft submitted; false when it was not a draft (any more).
pub async fn submit(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: &str,
    at: Timestamp,
    by: &str,
) -> Result<bool, sqlx::Error> {
    let moved = sqlx::query(
        "UPDATE frias SET status = 'submitted', submitted_at = $1, submitted_by = $2 \
         WHERE tenant_id = $3 AND id = $4 AND status = 'draft'",
    )
    .bind(at.as_millis())
    .bind(by)
    .bind(tenant_id)
    .bind(id)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    Ok(moved > 0)
}

pub fn version_of(fria: &Fria) -> FriaVersion {
    FriaVersion {
        id: fria.id.clone(),
        version: fria.version,
        status: fria.status.clone(),
        created_at: fria.created_at,
        submitted_at: fria.submitted_at,
    }
}

fn fria_from_row(row: &AnyRow) -> Result<Fria, sqlx::Error> {
    Ok(Fria {
        id: row.try_get("id")?,
        agent_id: row.try_get("agent_id")?,
        version: row.try_get("version")?,
        status: row.try_get("status")?,
        processes: row.try_get("processes")?,
        frequency_and_scope: row.try_get("frequency_and_scope")?,
        categories_of_persons: row.try_get("categories_of_persons")?,
        specific_risks: row.try_get("specific_risks")?,
        human_oversight_measures: row.try_get("human_oversight_measures")?,
        risk_mitigation_measures: row.try_get("risk_mitigation_measures")?,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        created_by: row.try_get("created_by")?,
        submitted_at: row
            .try_get::<Option<i64>, _>("submitted_at")?
            .map(Timestamp::from_millis),
        submitted_by: row.try_get("submitted_by")?,
    })
}
