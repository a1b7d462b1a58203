//! SQL of the compliance views: the records readiness and transparency cards are
//! computed from. Every statement filters by tenant.

use sqlx::AnyPool;

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

/// The ids of the agents with at least one owner record.
pub async fn owned_agent_ids(pool: &AnyPool, tenant_id: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar("SELECT DISTINCT agent_id FROM agent_owners WHERE tenant_id = $1")
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
