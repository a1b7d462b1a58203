//! SQL of agent ownership. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};
use warden_shared::timestamp::Timestamp;

use super::{Ownership, Permissions};
use crate::db::WriteTx;

const COLUMNS: &str = "SELECT id, agent_id, owner_type, owner_id, owner_name, can_invoke, \
     can_configure, can_delete, created_at FROM agent_owners";

/// Inserts the record and returns its id (a unique violation when that owner already
/// owns the agent).
pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    record: &Ownership,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO agent_owners (tenant_id, agent_id, owner_type, owner_id, owner_name, \
         can_invoke, can_configure, can_delete, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
    )
    .bind(tenant_id)
    .bind(&record.agent_id)
    .bind(record.owner_type.as_str())
    .bind(&record.owner_id)
    .bind(&record.owner_name)
    .bind(i64::from(record.permissions.can_invoke))
    .bind(i64::from(record.permissions.can_configure))
    .bind(i64::from(record.permissions.can_delete))
    .bind(record.created_at.as_millis())
    .fetch_one(&mut **tx)
    .await
}

/// The record removed, if it was one of the agent's.
pub async fn delete(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
    record_id: i64,
) -> Result<Option<Ownership>, sqlx::Error> {
    let sql = format!("{COLUMNS} WHERE tenant_id = $1 AND agent_id = $2 AND id = $3");
    let Some(row) = sqlx::query(&sql)
        .bind(tenant_id)
        .bind(agent_id)
        .bind(record_id)
        .fetch_optional(&mut **tx)
        .await?
    else {
        return Ok(None);
    };
    sqlx::query("DELETE FROM agent_owners WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(record_id)
        .execute(&mut **tx)
        .await?;
    from_row(&row).map(Some)
}

/// The agent's owners, oldest first.
pub async fn of_agent(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Vec<Ownership>, sqlx::Error> {
    let sql = format!("{COLUMNS} WHERE tenant_id = $1 AND agent_id = $2 ORDER BY id");
    let rows = sqlx::query(&sql)
        .bind(tenant_id)
        .bind(agent_id)
        .fetch_all(pool)
        .await?;
    rows.iter().map(from_row).collect()
}

fn from_row(row: &AnyRow) -> Result<Ownership, sqlx::Error> {
    let owner_type: String = row.try_get("owner_type")?;
    Ok(Ownership {
        id: row.try_get("id")?,
        agent_id: row.try_get("agent_id")?,
        owner_type: super::OwnerType::parse(&owner_type).unwrap_or(super::OwnerType::User),
        owner_id: row.try_get("owner_id")?,
        owner_name: row.try_get("owner_name")?,
        permissions: Permissions {
            can_invoke: row.try_get::<i64, _>("can_invoke")? == 1,
            can_configure: row.try_get::<i64, _>("can_configure")? == 1,
            can_delete: row.try_get::<i64, _>("can_delete")? == 1,
        },
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
    })
}
