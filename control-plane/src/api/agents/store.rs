//! SQL of the agent registry. Every statement filters by tenant and skips deleted agents.

use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};
use warden_shared::timestamp::Timestamp;

use super::Agent;
use crate::api::envelope::Page;

/// The writable columns of an agent.
#[derive(Debug)]
pub struct AgentRow {
    pub name: String,
    pub description: Option<String>,
    pub framework: Option<String>,
    pub model_provider: Option<String>,
    pub model_name: Option<String>,
    pub environment: String,
    pub team_id: Option<String>,
    pub tags: String,
}

/// Exact-match filters; `None` matches everything.
#[derive(Debug, Default)]
pub struct Filter<'a> {
    pub status: Option<&'a str>,
    pub framework: Option<&'a str>,
    pub team: Option<&'a str>,
    pub environment: Option<&'a str>,
    pub risk_level: Option<&'a str>,
    /// A `LIKE` pattern over the lower-cased name (`%text%`, its wildcards escaped).
    pub name_like: Option<String>,
    /// A security list's subset of agents.
    pub only: Only,
}

/// The agents a security list keeps (bound as `$7`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    #[default]
    All = 0,
    /// `/agents/quarantined`.
    Quarantined = 1,
    /// `/agents/expired`: `expires_at` has passed.
    Expired = 2,
    /// `/agents/due-review`: `review_date` has passed.
    DueReview = 3,
    /// Blocked by the kill switch (the console's overview).
    Blocked = 4,
}

/// An agent's status as of `$now` (spec 3.1), derived from the reported status and the
/// age of its last heartbeat, so reads never depend on a sweeper having run: no
/// heartbeat for 5 minutes or more is `down`; a `healthy` agent silent for 2 to 5
/// minutes is `degraded`; an agent that never sent one keeps its stored `unknown`.
#[macro_export]
macro_rules! effective_status {
    ($now:literal) => {
        concat!(
            "(CASE WHEN a.last_heartbeat IS NULL THEN a.status \
             WHEN ",
            $now,
            " - a.last_heartbeat >= 300000 THEN 'down' \
             WHEN ",
            $now,
            " - a.last_heartbeat >= 120000 AND a.status = 'healthy' \
             THEN 'degraded' ELSE a.status END)"
        )
    };
}

/// `SELECT` of an agent with its team's name, followed by the given clauses; `$now`
/// names the parameter that carries the current time.
macro_rules! select_agents {
    ($now:literal, $clauses:expr) => {
        concat!(
            "SELECT a.id, a.name, a.description, a.framework, a.model_provider, a.model_name, \
             a.environment, ", effective_status!($now), " AS status, a.team_id, tm.name AS team_name, a.tags, a.risk_level, \
             a.last_heartbeat, a.created_at, a.updated_at, a.expires_at, a.review_frequency, a.review_date, \
             a.sponsor_id, a.blocked, a.block_reason, a.quarantined, a.quarantine_reason \
             FROM agents a LEFT JOIN teams tm ON tm.id = a.team_id AND tm.tenant_id = a.tenant_id ",
            $clauses
        )
    };
}

/// The filter clause shared by the list and its count, with parameters $1 to $9 ($6 is
/// the current time, $7 the [`Only`] subset, $8 the risk level, $9 the name pattern).
macro_rules! filtered {
    ($rest:expr) => {
        concat!(
            "WHERE a.tenant_id = $1 AND a.deleted_at IS NULL \
             AND ($2 IS NULL OR ",
            effective_status!("$6"),
            " = $2) \
             AND ($3 IS NULL OR a.framework = $3) \
             AND ($4 IS NULL OR tm.name = $4) AND ($5 IS NULL OR a.environment = $5) \
             AND ($7 = 0 OR ($7 = 1 AND a.quarantined = 1) \
             OR ($7 = 2 AND a.expires_at <= $6) OR ($7 = 3 AND a.review_date <= $6) \
             OR ($7 = 4 AND a.blocked = 1)) \
             AND ($8 IS NULL OR a.risk_level = $8) \
             AND ($9 IS NULL OR LOWER(a.name) LIKE $9 ESCAPE '\\') ",
            $rest
        )
    };
}

pub async fn list<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    filter: &Filter<'_>,
    page: Page,
    now_ms: i64,
) -> Result<Vec<Agent>, sqlx::Error> {
    sqlx::query(select_agents!(
        "$6",
        filtered!("ORDER BY a.created_at DESC, a.id DESC LIMIT $10 OFFSET $11")
    ))
    .bind(tenant_id)
    .bind(filter.status)
    .bind(filter.framework)
    .bind(filter.team)
    .bind(filter.environment)
    .bind(now_ms)
    .bind(filter.only as i64)
    .bind(filter.risk_level)
    .bind(filter.name_like.as_deref())
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(db)
    .await?
    .iter()
    .map(agent_from_row)
    .collect()
}

pub async fn count<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    filter: &Filter<'_>,
    now_ms: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(concat!(
        "SELECT COUNT(*) FROM agents a \
         LEFT JOIN teams tm ON tm.id = a.team_id AND tm.tenant_id = a.tenant_id ",
        filtered!("")
    ))
    .bind(tenant_id)
    .bind(filter.status)
    .bind(filter.framework)
    .bind(filter.team)
    .bind(filter.environment)
    .bind(now_ms)
    .bind(filter.only as i64)
    .bind(filter.risk_level)
    .bind(filter.name_like.as_deref())
    .fetch_one(db)
    .await
}

pub async fn get<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    agent_id: &str,
    now_ms: i64,
) -> Result<Option<Agent>, sqlx::Error> {
    sqlx::query(select_agents!(
        "$3",
        "WHERE a.tenant_id = $1 AND a.id = $2 AND a.deleted_at IS NULL"
    ))
    .bind(tenant_id)
    .bind(agent_id)
    .bind(now_ms)
    .fetch_optional(db)
    .await?
    .as_ref()
    .map(agent_from_row)
    .transpose()
}

/// Whether the tenant has a live (not deleted) agent with this id.
pub async fn is_live<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    agent_id: &str,
) -> Result<bool, sqlx::Error> {
    let found: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM agents WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_one(db)
    .await?;
    Ok(found > 0)
}

/// The live agents `owner_id` owns, in the order they were given to it.
pub async fn owned_by(
    pool: &sqlx::AnyPool,
    tenant_id: &str,
    owner_id: &str,
    now_ms: i64,
) -> Result<Vec<Agent>, sqlx::Error> {
    sqlx::query(select_agents!(
        "$3",
        "JOIN (SELECT agent_id, MIN(id) AS first_owned FROM agent_owners \
         WHERE tenant_id = $1 AND owner_id = $2 GROUP BY agent_id) o ON o.agent_id = a.id \
         WHERE a.tenant_id = $1 AND a.deleted_at IS NULL ORDER BY o.first_owned"
    ))
    .bind(tenant_id)
    .bind(owner_id)
    .bind(now_ms)
    .fetch_all(pool)
    .await?
    .iter()
    .map(agent_from_row)
    .collect()
}

/// Takes one active-agent slot of the tenant's plan, atomically; false when full.
pub async fn reserve_agent_slot<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE tenants SET active_agents = active_agents + 1 \
         WHERE id = $1 AND active_agents < agent_limit",
    )
    .bind(tenant_id)
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

pub async fn insert<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
    row: &AgentRow,
    now_ms: i64,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO agents (id, tenant_id, name, description, framework, model_provider, \
         model_name, environment, team_id, tags, status, created_at, updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'unknown', $11, $11)",
    )
    .bind(id)
    .bind(tenant_id)
    .bind(&row.name)
    .bind(&row.description)
    .bind(&row.framework)
    .bind(&row.model_provider)
    .bind(&row.model_name)
    .bind(&row.environment)
    .bind(&row.team_id)
    .bind(&row.tags)
    .bind(now_ms)
    .execute(db)
    .await
    .map(|_| ())
}

pub async fn update<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    id: &str,
    row: &AgentRow,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE agents SET name = $3, description = $4, framework = $5, model_provider = $6, \
         model_name = $7, environment = $8, team_id = $9, tags = $10, updated_at = $11 \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(&row.name)
    .bind(&row.description)
    .bind(&row.framework)
    .bind(&row.model_provider)
    .bind(&row.model_name)
    .bind(&row.environment)
    .bind(&row.team_id)
    .bind(&row.tags)
    .bind(now_ms)
    .execute(db)
    .await?;
    Ok(result.rows_affected() == 1)
}

/// Marks the agent deleted and gives its slot back to the plan, in one statement pair
/// run inside the caller's transaction.
pub async fn soft_delete(
    tx: &mut sqlx::AnyConnection,
    tenant_id: &str,
    id: &str,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE agents SET deleted_at = $3, updated_at = $3 \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(now_ms)
    .execute(&mut *tx)
    .await?;
    if result.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query(
        "UPDATE tenants SET active_agents = active_agents - 1 WHERE id = $1 AND active_agents > 0",
    )
    .bind(tenant_id)
    .execute(&mut *tx)
    .await?;
    Ok(true)
}

fn agent_from_row(row: &AnyRow) -> Result<Agent, sqlx::Error> {
    let tags: String = row.try_get("tags")?;
    Ok(Agent {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        framework: row.try_get("framework")?,
        model_provider: row.try_get("model_provider")?,
        model_name: row.try_get("model_name")?,
        environment: row.try_get("environment")?,
        status: row.try_get("status")?,
        team: row.try_get("team_name")?,
        team_id: row.try_get("team_id")?,
        tags: serde_json::from_str(&tags).unwrap_or_else(|_| serde_json::json!({})),
        risk_level: row.try_get("risk_level")?,
        last_heartbeat: row
            .try_get::<Option<i64>, _>("last_heartbeat")?
            .map(Timestamp::from_millis),
        created_at: Timestamp::from_millis(row.try_get("created_at")?),
        updated_at: Timestamp::from_millis(row.try_get("updated_at")?),
        expires_at: row
            .try_get::<Option<i64>, _>("expires_at")?
            .map(Timestamp::from_millis),
        review_frequency: row.try_get("review_frequency")?,
        review_date: row
            .try_get::<Option<i64>, _>("review_date")?
            .map(Timestamp::from_millis),
        sponsor_id: row.try_get("sponsor_id")?,
        blocked: row.try_get::<i64, _>("blocked")? == 1,
        block_reason: row.try_get("block_reason")?,
        quarantined: row.try_get::<i64, _>("quarantined")? == 1,
        quarantine_reason: row.try_get("quarantine_reason")?,
    })
}

/// One of an agent's enforcement flags, each with its reason and time columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnforcementFlag {
    Blocked,
    Quarantined,
}

/// Sets (`on`) or clears `flag` with its reason; false when the tenant has no such live
/// agent.
pub async fn set_flag(
    tx: &mut sqlx::AnyConnection,
    tenant_id: &str,
    id: &str,
    flag: EnforcementFlag,
    on: bool,
    reason: Option<&str>,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let sql = match flag {
        EnforcementFlag::Blocked => {
            "UPDATE agents SET blocked = $3, block_reason = $4, \
             blocked_at = CASE WHEN $3 = 1 THEN $5 ELSE NULL END, updated_at = $5 \
             WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL"
        }
        EnforcementFlag::Quarantined => {
            "UPDATE agents SET quarantined = $3, quarantine_reason = $4, \
             quarantined_at = CASE WHEN $3 = 1 THEN $5 ELSE NULL END, updated_at = $5 \
             WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL"
        }
    };
    let result = sqlx::query(sql)
        .bind(tenant_id)
        .bind(id)
        .bind(i64::from(on))
        .bind(reason)
        .bind(now_ms)
        .execute(tx)
        .await?;
    Ok(result.rows_affected() == 1)
}

/// An agent's lifecycle columns.
#[derive(Debug)]
pub struct Lifecycle<'a> {
    pub expires_at: Option<i64>,
    pub review_frequency: Option<&'a str>,
    pub review_date: Option<i64>,
    pub sponsor_id: Option<&'a str>,
}

/// False when the tenant has no such live agent.
pub async fn set_lifecycle(
    tx: &mut crate::db::WriteTx,
    tenant_id: &str,
    agent_id: &str,
    lifecycle: &Lifecycle<'_>,
    now_ms: i64,
) -> Result<bool, sqlx::Error> {
    let updated = sqlx::query(
        "UPDATE agents SET expires_at = $3, review_frequency = $4, review_date = $5, \
         sponsor_id = $6, updated_at = $7 \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(lifecycle.expires_at)
    .bind(lifecycle.review_frequency)
    .bind(lifecycle.review_date)
    .bind(lifecycle.sponsor_id)
    .bind(now_ms)
    .execute(&mut **tx)
    .await?;
    Ok(updated.rows_affected() == 1)
}
