//! SQL of policies, of the teams and agents their scopes name, and of the ledger's
//! counters a dry run reads. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{Any, AnyPool, Executor, Row};
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

/// Whether the tenant has the team, not deleted: a `team:` scope must name one.
pub async fn live_team_exists<'e>(
    db: impl Executor<'e, Database = Any>,
    tenant_id: &str,
    team_id: &str,
) -> Result<bool, sqlx::Error> {
    let found: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM teams WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(team_id)
    .fetch_one(db)
    .await?;
    Ok(found > 0)
}

/// The live agent's `(team_id, environment)`, as stored; `None` when the tenant has no
/// such agent (or it was deleted).
pub async fn live_agent_placement(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
) -> Result<Option<(Option<String>, Option<String>)>, sqlx::Error> {
    sqlx::query(
        "SELECT team_id, environment FROM agents \
         WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .fetch_optional(pool)
    .await?
    .map(|row| Ok((row.try_get("team_id")?, row.try_get("environment")?)))
    .transpose()
}

/// The spend recorded for a budget scope (as `budget_scope` names it) in the month
/// starting at `month_start` (Unix ms); `None` when nothing was recorded.
pub async fn month_spend_micros(
    pool: &AnyPool,
    tenant_id: &str,
    scope: &str,
    month_start: i64,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT cost_micros FROM usage_spend_monthly \
         WHERE tenant_id = $1 AND scope = $2 AND month = $3",
    )
    .bind(tenant_id)
    .bind(scope)
    .bind(month_start)
    .fetch_optional(pool)
    .await
}

/// The `(requests, tokens)` recorded from `since` (Unix ms) on in a rate limit's
/// bucket: `tenant`, `agent:<id>` or `team:<id>` (as `rate_bucket` names it).
pub async fn bucket_counts_since(
    pool: &AnyPool,
    tenant_id: &str,
    since: i64,
    bucket: &str,
) -> Result<(i64, i64), sqlx::Error> {
    let row = sqlx::query(
        "SELECT COUNT(*) AS requests, \
         CAST(COALESCE(SUM(r.input_tokens + r.output_tokens), 0) AS BIGINT) AS tokens \
         FROM usage_records r LEFT JOIN agents a \
         ON a.tenant_id = r.tenant_id AND a.id = r.agent_id \
         WHERE r.tenant_id = $1 AND r.recorded_at >= $2 \
         AND ($3 = 'tenant' OR $3 = 'agent:' || r.agent_id \
         OR $3 = 'team:' || COALESCE(a.team_id, ''))",
    )
    .bind(tenant_id)
    .bind(since)
    .bind(bucket)
    .fetch_one(pool)
    .await?;
    Ok((row.try_get("requests")?, row.try_get("tokens")?))
}

/// How many approvals of the agent's calls of `provider` and `model` under the policy
/// are approved with a grant still running at `now_ms`. A dry run has no action to
/// match, so approvals bound to one do not count.
pub async fn live_grant_count(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    policy_id: i64,
    provider: &str,
    model: &str,
    now_ms: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM approvals WHERE tenant_id = $1 AND agent_id = $2 \
         AND policy_id = $3 AND provider = $4 AND model = $5 \
         AND status = 'approved' AND grant_until > $6 AND releases = 'scope'",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(policy_id)
    .bind(provider)
    .bind(model)
    .bind(now_ms)
    .fetch_one(pool)
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
