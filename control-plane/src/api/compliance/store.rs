//! SQL of the compliance views: the records readiness and transparency cards are
//! computed from. Every statement filters by tenant.

use sqlx::{AnyPool, Row};

use crate::api::oversight::AgentFacts;

/// Live agents alike in everything readiness scores them on, and how many there are.
#[derive(Debug)]
pub struct AgentGroup {
    /// Team, environment and risk level; the id only of an agent an enabled policy names
    /// (empty otherwise), so that agent-scoped policies match it and nothing else.
    pub facts: AgentFacts,
    /// It has at least one owner record.
    pub owned: bool,
    /// It has a submitted FRIA.
    pub submitted_fria: bool,
    pub agents: usize,
}

/// The tenant's live agents in [`AgentGroup`]s: a few hundred rows for 10,000 agents
/// instead of one each (readiness read every agent, its owners and FRIAs apart).
pub async fn agent_groups(pool: &AnyPool, tenant_id: &str) -> Result<Vec<AgentGroup>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT g.team_id, g.environment, g.risk_level, g.owned, g.submitted, g.named_id, \
         COUNT(*) AS agents FROM (SELECT a.team_id, a.environment, a.risk_level, \
         CAST(CASE WHEN EXISTS (SELECT 1 FROM agent_owners o \
           WHERE o.tenant_id = a.tenant_id AND o.agent_id = a.id) THEN 1 ELSE 0 END AS BIGINT) AS owned, \
         CAST(CASE WHEN EXISTS (SELECT 1 FROM frias f WHERE f.tenant_id = a.tenant_id \
           AND f.agent_id = a.id AND f.status = 'submitted') THEN 1 ELSE 0 END AS BIGINT) AS submitted, \
         CASE WHEN EXISTS (SELECT 1 FROM policies p WHERE p.tenant_id = a.tenant_id \
           AND p.enabled = 1 AND p.scope = 'agent:' || a.id) THEN a.id END AS named_id \
         FROM agents a WHERE a.tenant_id = $1 AND a.deleted_at IS NULL) g \
         GROUP BY g.team_id, g.environment, g.risk_level, g.owned, g.submitted, g.named_id",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(AgentGroup {
                facts: AgentFacts {
                    id: row
                        .try_get::<Option<String>, _>("named_id")?
                        .unwrap_or_default(),
                    name: String::new(),
                    team_id: row.try_get("team_id")?,
                    environment: row.try_get("environment")?,
                    risk_level: row.try_get("risk_level")?,
                    review_date: None,
                },
                owned: row.try_get::<i64, _>("owned")? == 1,
                submitted_fria: row.try_get::<i64, _>("submitted")? == 1,
                agents: usize::try_from(row.try_get::<i64, _>("agents")?).unwrap_or(0),
            })
        })
        .collect()
}

/// The `(scope, policy_type)` of each of the tenant's enabled policies.
pub async fn enabled_policy_scopes(
    pool: &AnyPool,
    tenant_id: &str,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    sqlx::query_as("SELECT scope, policy_type FROM policies WHERE tenant_id = $1 AND enabled = 1")
        .bind(tenant_id)
        .fetch_all(pool)
        .await
}

/// The `(name, policy_type, scope)` of each of the tenant's enabled policies, by id.
pub async fn enabled_policies(
    pool: &AnyPool,
    tenant_id: &str,
) -> Result<Vec<(String, String, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT name, policy_type, scope FROM policies WHERE tenant_id = $1 AND enabled = 1 ORDER BY id",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await
}

/// The `events` column (a JSON list of event names) of each enabled notification channel.
pub async fn enabled_channel_events(
    pool: &AnyPool,
    tenant_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT events FROM notification_channels WHERE tenant_id = $1 AND enabled = 1",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await
}

/// How many audit chain heads the tenant has: 1 once its first event was chained, else 0.
pub async fn audit_head_count(pool: &AnyPool, tenant_id: &str) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT COUNT(*) FROM audit_heads WHERE tenant_id = $1")
        .bind(tenant_id)
        .fetch_one(pool)
        .await
}

/// The agent's ten most called `(model_provider, model_name, requests)` in the hours
/// from `since_hour` (a whole hour, in Unix ms) on, most requests first.
pub async fn models_called_since(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: &str,
    since_hour: i64,
) -> Result<Vec<(String, String, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT model_provider, model_name, CAST(SUM(requests) AS BIGINT) AS requests FROM usage_hourly \
         WHERE tenant_id = $1 AND agent_id = $2 AND hour >= $3 \
         GROUP BY model_provider, model_name ORDER BY requests DESC, model_name LIMIT 10",
    )
    .bind(tenant_id)
    .bind(agent_id)
    .bind(since_hour)
    .fetch_all(pool)
    .await
}
