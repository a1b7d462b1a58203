//! SQL of the security posture: the facts of every live agent of a tenant.

use sqlx::{AnyPool, Row};

/// What the posture reads of one agent.
#[derive(Debug, Clone)]
pub struct AgentPosture {
    pub id: String,
    pub has_owner: bool,
    pub expires_at: Option<i64>,
    pub review_date: Option<i64>,
    pub quarantined: bool,
    pub blocked: bool,
    pub classified: bool,
}

pub async fn agents(pool: &AnyPool, tenant_id: &str) -> Result<Vec<AgentPosture>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT a.id, a.expires_at, a.review_date, a.quarantined, a.blocked, a.risk_level, \
         (SELECT COUNT(*) FROM agent_owners o WHERE o.tenant_id = a.tenant_id \
          AND o.agent_id = a.id) AS owners \
         FROM agents a WHERE a.tenant_id = $1 AND a.deleted_at IS NULL ORDER BY a.created_at, a.id",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(AgentPosture {
                id: row.try_get("id")?,
                has_owner: row.try_get::<i64, _>("owners")? > 0,
                expires_at: row.try_get("expires_at")?,
                review_date: row.try_get("review_date")?,
                quarantined: row.try_get::<i64, _>("quarantined")? == 1,
                blocked: row.try_get::<i64, _>("blocked")? == 1,
                classified: row.try_get::<Option<String>, _>("risk_level")?.is_some(),
            })
        })
        .collect()
}
