//! SQL of budget limits, always filtered by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use super::BudgetLimit;
use crate::db::WriteTx;

macro_rules! select_limits {
    () => {
        "SELECT id, tenant_id, team_id, agent_id, scope, monthly_limit_micros, \
         warn_threshold_pct, block_threshold_pct, enabled, created_at, updated_at \
         FROM budget_limits WHERE tenant_id = $1"
    };
}

pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
) -> Result<Vec<BudgetLimit>, sqlx::Error> {
    sqlx::query(concat!(select_limits!(), " ORDER BY created_at, id"))
        .bind(tenant_id)
        .fetch_all(db)
        .await?
        .iter()
        .map(limit_from_row)
        .collect()
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
) -> Result<Option<BudgetLimit>, sqlx::Error> {
    sqlx::query(concat!(select_limits!(), " AND id = $2"))
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(db)
        .await?
        .as_ref()
        .map(limit_from_row)
        .transpose()
}

/// Inserts `limit`; false when the tenant already has a limit of that scope.
pub async fn insert(tx: &mut WriteTx, limit: &BudgetLimit) -> Result<bool, sqlx::Error> {
    let inserted = sqlx::query(
        "INSERT INTO budget_limits (id, tenant_id, team_id, agent_id, scope, \
         monthly_limit_micros, warn_threshold_pct, block_threshold_pct, enabled, created_at, \
         updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (tenant_id, scope) DO NOTHING",
    )
    .bind(&limit.id)
    .bind(&limit.tenant_id)
    .bind(limit.team_id.as_deref())
    .bind(limit.agent_id.as_deref())
    .bind(&limit.scope)
    .bind(limit.monthly_limit_micros)
    .bind(limit.warn_threshold_pct)
    .bind(limit.block_threshold_pct)
    .bind(i64::from(limit.enabled))
    .bind(limit.created_at.as_millis())
    .bind(limit.updated_at.as_millis())
    .execute(&mut **tx)
    .await?;
    Ok(inserted.rows_affected() == 1)
}

pub async fn update(tx: &mut WriteTx, limit: &BudgetLimit) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE budget_limits SET monthly_limit_micros = $3, warn_threshold_pct = $4, \
         block_threshold_pct = $5, enabled = $6, updated_at = $7 \
         WHERE tenant_id = $1 AND id = $2",
    )
    .bind(&limit.tenant_id)
    .bind(&limit.id)
    .bind(limit.monthly_limit_micros)
    .bind(limit.warn_threshold_pct)
    .bind(limit.block_threshold_pct)
    .bind(i64::from(limit.enabled))
    .bind(limit.updated_at.as_millis())
    .execute(&mut **tx)
    .await
    .map(|_| ())
}

/// Deletes the limit and its alerts; returns its scope, or `None` if there was none.
pub async fn delete(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: &str,
) -> Result<Option<String>, sqlx::Error> {
    let scope: Option<String> = sqlx::query_scalar(
        "DELETE FROM budget_limits WHERE tenant_id = $1 AND id = $2 RETURNING scope",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    if scope.is_some() {
        sqlx::query("DELETE FROM budget_alerts WHERE tenant_id = $1 AND limit_id = $2")
            .bind(tenant_id)
            .bind(id)
            .execute(&mut **tx)
            .await?;
    }
    Ok(scope)
}

/// Forgets the limit's recorded threshold crossings of `month`, so that changed
/// amounts are reported afresh.
pub async fn forget_alerts(
    tx: &mut WriteTx,
    tenant_id: &str,
    limit_id: &str,
    month: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM budget_alerts WHERE tenant_id = $1 AND limit_id = $2 AND month = $3")
        .bind(tenant_id)
        .bind(limit_id)
        .bind(month)
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// Whether the tenant has a live team (or agent, when `agent` is set) with this id.
pub async fn live_target_exists(
    tx: &mut WriteTx,
    tenant_id: &str,
    id: &str,
    agent: bool,
) -> Result<bool, sqlx::Error> {
    let sql = if agent {
        "SELECT COUNT(*) FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL"
    } else {
        "SELECT COUNT(*) FROM teams WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL"
    };
    let found: i64 = sqlx::query_scalar(sql)
        .bind(tenant_id)
        .bind(id)
        .fetch_one(&mut **tx)
        .await?;
    Ok(found > 0)
}

/// Month-to-date spend of each of the tenant's limits' scopes (limit id → micro-dollars).
pub async fn spend_of_limits<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    month: i64,
) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query(
        "SELECT b.id, COALESCE(s.cost_micros, 0) AS spent FROM budget_limits b \
         LEFT JOIN usage_spend_monthly s ON s.tenant_id = b.tenant_id AND s.scope = b.scope \
         AND s.month = $2 WHERE b.tenant_id = $1",
    )
    .bind(tenant_id)
    .bind(month)
    .fetch_all(db)
    .await?
    .iter()
    .map(|row| Ok((row.try_get("id")?, row.try_get("spent")?)))
    .collect()
}

fn limit_from_row(row: &AnyRow) -> Result<BudgetLimit, sqlx::Error> {
    let monthly_limit_micros: i64 = row.try_get("monthly_limit_micros")?;
    Ok(BudgetLimit {
        id: row.try_get("id")?,
        tenant_id: row.try_get("tenant_id")?,
        team_id: row.try_get("team_id")?,
        agent_id: row.try_get("agent_id")?,
        scope: row.try_get("scope")?,
        monthly_limit_usd: micros_to_usd(monthly_limit_micros),
        monthly_limit_micros,
        warn_threshold_pct: row.try_get("warn_threshold_pct")?,
        block_threshold_pct: row.try_get("block_threshold_pct")?,
        enabled: row.try_get::<i64, _>("enabled")? == 1,
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
    })
}
