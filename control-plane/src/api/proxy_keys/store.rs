//! SQL of proxy keys. Every statement filters by tenant.

use std::collections::BTreeMap;

use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use super::{ProxyKey, RateLimitOverride};
use crate::api::envelope::Page;
use crate::db::{json_column, WriteTx};

pub async fn insert(
    tx: &mut WriteTx,
    tenant_id: &str,
    key: &ProxyKey,
    budget_limit_micros: Option<i64>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO proxy_keys (api_key_id, tenant_id, developer_label, agent_id, team_id, \
         allowed_providers, allowed_models, model_overrides, rate_limit_override, \
         budget_limit_micros, use_managed_key, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(&key.api_key_id)
    .bind(tenant_id)
    .bind(&key.developer_label)
    .bind(&key.agent_id)
    .bind(&key.team_id)
    .bind(to_json(&key.allowed_providers))
    .bind(to_json(&key.allowed_models))
    .bind(to_json(&key.model_overrides))
    .bind(key.rate_limit_override.as_ref().map(to_json))
    .bind(budget_limit_micros)
    .bind(i64::from(key.use_managed_key))
    .bind(key.created_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

fn to_json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

/// `SELECT` of a proxy key with its API key's prefix and expiry.
macro_rules! select_keys {
    ($clauses:expr) => {
        concat!(
            "SELECT p.api_key_id, k.key_prefix, p.developer_label, p.agent_id, p.team_id, \
             p.allowed_providers, p.allowed_models, p.model_overrides, p.rate_limit_override, \
             p.budget_limit_micros, p.use_managed_key, k.expires_at, p.created_at \
             FROM proxy_keys p JOIN api_keys k ON k.id = p.api_key_id AND k.tenant_id = p.tenant_id ",
            $clauses
        )
    };
}

pub async fn list(
    pool: &AnyPool,
    tenant_id: &str,
    page: Page,
) -> Result<Vec<ProxyKey>, sqlx::Error> {
    sqlx::query(select_keys!(
        "WHERE p.tenant_id = $1 ORDER BY p.created_at DESC, p.api_key_id DESC LIMIT $2 OFFSET $3"
    ))
    .bind(tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(key_from_row)
    .collect()
}

pub async fn count(pool: &AnyPool, tenant_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM proxy_keys WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(pool)
        .await
}

/// Deletes the proxy key and its API key; the developer label, or `None` when the tenant
/// has no such proxy key.
pub async fn delete(
    tx: &mut WriteTx,
    tenant_id: &str,
    api_key_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let label: Option<String> = sqlx::query_scalar(
        "DELETE FROM proxy_keys WHERE tenant_id = $1 AND api_key_id = $2 RETURNING developer_label",
    )
    .bind(tenant_id)
    .bind(api_key_id)
    .fetch_optional(&mut **tx)
    .await?;
    if label.is_some() {
        sqlx::query("DELETE FROM api_keys WHERE tenant_id = $1 AND id = $2")
            .bind(tenant_id)
            .bind(api_key_id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(label)
}

/// The name of a live team of the tenant.
pub async fn team_name(
    tx: &mut WriteTx,
    tenant_id: &str,
    team_id: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT name FROM teams WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(team_id)
    .fetch_optional(&mut **tx)
    .await
}

/// `Some(team_id)` when the tenant has this live agent (`Some(None)`: without a team).
pub async fn live_agent_team(
    tx: &mut WriteTx,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<Option<String>>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT team_id FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(|row| row.try_get("team_id")).transpose()
}

fn key_from_row(row: &AnyRow) -> Result<ProxyKey, sqlx::Error> {
    let overrides: String = row.try_get("model_overrides")?;
    let limits: Option<String> = row.try_get("rate_limit_override")?;
    Ok(ProxyKey {
        api_key_id: row.try_get("api_key_id")?,
        raw_key: None,
        key_prefix: row.try_get("key_prefix")?,
        developer_label: row.try_get("developer_label")?,
        agent_id: row.try_get("agent_id")?,
        team_id: row.try_get("team_id")?,
        allowed_providers: json_column(&row.try_get::<String, _>("allowed_providers")?),
        allowed_models: json_column(&row.try_get::<String, _>("allowed_models")?),
        model_overrides: json_column::<BTreeMap<String, String>>(&overrides),
        rate_limit_override: limits
            .and_then(|text| serde_json::from_str::<RateLimitOverride>(&text).ok()),
        budget_limit_usd: row
            .try_get::<Option<i64>, _>("budget_limit_micros")?
            .map(micros_to_usd),
        use_managed_key: row.try_get::<i64, _>("use_managed_key")? == 1,
        expires_at: row
            .try_get::<Option<i64>, _>("expires_at")?
            .map(Timestamp::from_millis),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
    })
}
