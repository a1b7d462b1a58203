//! SQL of platform administration: tenants with their spend and latest activity.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::Tenant;
use crate::api::envelope::Page;
use crate::db::WriteTx;

/// `$month` names the parameter holding the start of the month for the tenant's spend.
macro_rules! select_tenants {
    ($month:literal, $clauses:expr) => {
        concat!(
            "SELECT t.id, t.company_name, t.plan, t.active_agents, t.agent_limit, t.owner_email, \
             t.created_at, (SELECT MAX(e.occurred_at) FROM audit_events e \
             WHERE e.tenant_id = t.id) AS last_activity, \
             (SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage_model_hourly u \
              WHERE u.tenant_id = t.id AND u.hour >= ",
            $month,
            ") AS monthly_cost_micros \
             FROM tenants t ",
            $clauses
        )
    };
}

/// One page of tenants (never the platform's own), newest first, optionally of one plan.
pub async fn list(
    pool: &AnyPool,
    plan: Option<&str>,
    page: Page,
    month_start: i64,
) -> Result<Vec<Tenant>, sqlx::Error> {
    sqlx::query(select_tenants!(
        "$4",
        "WHERE t.is_platform = 0 AND ($1 IS NULL OR t.plan = $1) \
         ORDER BY t.created_at DESC, t.id DESC LIMIT $2 OFFSET $3"
    ))
    .bind(plan)
    .bind(page.limit)
    .bind(page.offset())
    .bind(month_start)
    .fetch_all(pool)
    .await?
    .iter()
    .map(tenant_from_row)
    .collect()
}

pub async fn count(pool: &AnyPool, plan: Option<&str>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM tenants WHERE is_platform = 0 AND ($1 IS NULL OR plan = $1)",
    )
    .bind(plan)
    .fetch_one(pool)
    .await
}

/// The tenant's company name and whether it is the platform operators' own.
pub async fn name_and_platform_flag(
    tx: &mut WriteTx,
    tenant_id: &str,
) -> Result<Option<(String, bool)>, sqlx::Error> {
    let Some(row) = sqlx::query("SELECT company_name, is_platform FROM tenants WHERE id = $1")
        .bind(tenant_id)
        .fetch_optional(&mut **tx)
        .await?
    else {
        return Ok(None);
    };
    Ok(Some((
        row.try_get("company_name")?,
        row.try_get::<i64, _>("is_platform")? == 1,
    )))
}

/// One tenant (never the platform's own), with its month-to-date spend from `month_start`.
pub async fn get(
    conn: impl Executor<'_, Database = Any>,
    tenant_id: &str,
    month_start: i64,
) -> Result<Option<Tenant>, sqlx::Error> {
    sqlx::query(select_tenants!(
        "$2",
        "WHERE t.id = $1 AND t.is_platform = 0"
    ))
    .bind(tenant_id)
    .bind(month_start)
    .fetch_optional(conn)
    .await?
    .as_ref()
    .map(tenant_from_row)
    .transpose()
}

fn tenant_from_row(row: &AnyRow) -> Result<Tenant, sqlx::Error> {
    Ok(Tenant {
        id: row.try_get("id")?,
        company_name: row.try_get("company_name")?,
        plan: row.try_get("plan")?,
        active_agents: row.try_get("active_agents")?,
        agent_limit: row.try_get("agent_limit")?,
        owner_email: row.try_get("owner_email")?,
        monthly_cost_usd: warden_shared::pricing::micros_to_usd(
            row.try_get("monthly_cost_micros")?,
        ),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        last_activity: row
            .try_get::<Option<i64>, _>("last_activity")?
            .map(Timestamp::from_millis),
    })
}
