//! SQL of policies. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::Policy;
use crate::db::{json_column, WriteTx};

const SELECT_POLICY: &str = "SELECT id, name, description, policy_type, config, scope, enabled, \
     priority, template_id, created_at, updated_at FROM policies";

/// The tenant's policies in evaluation order (priority descending, then id).
pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
) -> Result<Vec<Policy>, sqlx::Error> {
    let sql = format!("{SELECT_POLICY} WHERE tenant_id = $1 ORDER BY priority DESC, id");
    sqlx::query(&sql)
        .bind(tenant_id)
        .fetch_all(db)
        .await?
        .iter()
        .map(policy_from_row)
        .collect()
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: i64,
) -> Result<Option<Policy>, sqlx::Error> {
    let sql = format!("{SELECT_POLICY} WHERE tenant_id = $1 AND id = $2");
    sqlx::query(&sql)
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(db)
        .await?
        .as_ref()
        .map(policy_from_row)
        .transpose()
}

/// Inserts `policy` (its `id` is ignored) and returns the new id.
pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    policy: &Policy,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO policies (tenant_id, name, description, policy_type, config, scope, \
         enabled, priority, template_id, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
    )
    .bind(tenant_id)
    .bind(&policy.name)
    .bind(policy.description.as_deref())
    .bind(&policy.policy_type)
    .bind(policy.config.to_string())
    .bind(&policy.scope)
    .bind(i64::from(policy.enabled))
    .bind(policy.priority)
    .bind(policy.template_id.as_deref())
    .bind(policy.created_at.as_millis())
    .bind(policy.updated_at.as_millis())
    .fetch_one(&mut **tx)
    .await
}

/// Writes every field of `policy` but its id, tenant, template and creation time.
pub async fn update(tx: &mut WriteTx, tenant_id: &str, policy: &Policy) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE policies SET name = $3, description = $4, policy_type = $5, config = $6, \
         scope = $7, enabled = $8, priority = $9, updated_at = $10 \
         WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant_id)
    .bind(policy.id)
    .bind(&policy.name)
    .bind(policy.description.as_deref())
    .bind(&policy.policy_type)
    .bind(policy.config.to_string())
    .bind(&policy.scope)
    .bind(i64::from(policy.enabled))
    .bind(policy.priority)
    .bind(policy.updated_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Deletes the policy; returns its name, or `None` if the tenant has no such policy.
pub async fn delete(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: i64,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar("DELETE FROM policies WHERE tenant_id = $1 AND id = $2 RETURNING name")
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(&mut **tx)
        .await
}

fn policy_from_row(row: &AnyRow) -> Result<Policy, sqlx::Error> {
    let config: String = row.try_get("config")?;
    Ok(Policy {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        policy_type: row.try_get("policy_type")?,
        config: json_column(&config),
        scope: row.try_get("scope")?,
        enabled: row.try_get::<i64, _>("enabled")? == 1,
        priority: row.try_get("priority")?,
        template_id: row.try_get("template_id")?,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}
