//! SQL of teams. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::pricing::micros_to_usd;
use warden_shared::timestamp::Timestamp;

use super::Team;
use crate::api::envelope::Page;

/// `SELECT` of a team's columns followed by the given clauses, as one static string.
/// `$month` names the parameter holding the start of the month for the team's spend:
/// its closed days from `usage_daily`, its open days from `usage_daily_open`, and the
/// hours not yet rolled into them from `usage_hourly` (see `crate::ledger`).
macro_rules! select_teams {
    ($month:literal, $clauses:expr) => {
        concat!(
            "SELECT t.id, t.name, t.created_at, \
             (SELECT COUNT(*) FROM agents a \
              WHERE a.tenant_id = t.tenant_id AND a.team_id = t.id AND a.deleted_at IS NULL) \
              AS agent_count, \
             (SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage_daily u \
              WHERE u.tenant_id = t.tenant_id AND u.team_id = t.id AND u.day >= ",
            $month,
            ") + \
             (SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage_daily_open u \
              WHERE u.tenant_id = t.tenant_id AND u.team_id = t.id AND u.day >= ",
            $month,
            ") + \
             (SELECT CAST(COALESCE(SUM(u.cost_micros), 0) AS BIGINT) FROM usage_hourly u \
              WHERE u.tenant_id = t.tenant_id AND u.team_id = t.id AND u.hour >= ",
            crate::ledger::unrolled_from!("t.tenant_id", $month, "9223372036854775807"),
            ") AS monthly_cost_micros \
             FROM teams t ",
            $clauses
        )
    };
}

pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    page: Page,
    month_start: i64,
) -> Result<Vec<Team>, sqlx::Error> {
    sqlx::query(select_teams!(
        "$4",
        "WHERE t.tenant_id = $1 AND t.deleted_at IS NULL ORDER BY t.name, t.id LIMIT $2 OFFSET $3"
    ))
    .bind(tenant_id)
    .bind(page.limit)
    .bind(page.offset())
    .bind(month_start)
    .fetch_all(db)
    .await?
    .iter()
    .map(team_from_row)
    .collect()
}

pub async fn count<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM teams WHERE tenant_id = $1 AND deleted_at IS NULL")
        .bind(tenant_id)
        .fetch_one(db)
        .await
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    team_id: &str,
    month_start: i64,
) -> Result<Option<Team>, sqlx::Error> {
    sqlx::query(select_teams!(
        "$3",
        "WHERE t.tenant_id = $1 AND t.id = $2 AND t.deleted_at IS NULL"
    ))
    .bind(tenant_id)
    .bind(team_id)
    .bind(month_start)
    .fetch_optional(db)
    .await?
    .as_ref()
    .map(team_from_row)
    .transpose()
}

pub async fn find_id_by_name<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    name: &str,
) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM teams WHERE tenant_id = $1 AND name = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(name)
    .fetch_optional(db)
    .await
}

pub async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
    name: &str,
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO teams (id, tenant_id, name, created_at) VALUES ($1, $2, $3, $4)")
        .bind(id)
        .bind(tenant_id)
        .bind(name)
        .bind(now_ms)
        .execute(db)
        .await
        .map(|_| ())
}

pub async fn rename<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    team_id: &str,
    name: &str,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE teams SET name = $3 WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(team_id)
    .bind(name)
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

pub async fn live_agent_count<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    team_id: &str,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM agents WHERE tenant_id = $1 AND team_id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(team_id)
    .fetch_one(db)
    .await
}

pub async fn soft_delete<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    team_id: &str,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE teams SET deleted_at = $3 WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(team_id)
    .bind(now_ms)
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

fn team_from_row(row: &AnyRow) -> Result<Team, sqlx::Error> {
    Ok(Team {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        agent_count: row.try_get("agent_count")?,
        monthly_cost_usd: micros_to_usd(row.try_get("monthly_cost_micros")?),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
    })
}
