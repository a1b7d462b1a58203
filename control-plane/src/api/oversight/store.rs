//! SQL of the oversight scorecards: per agent of a tenant (one agent, or all), what
//! happened in a window. Every statement filters by tenant and groups by agent, so one
//! agent's card and the tenant's summary are the same queries.

use std::collections::HashMap;

use sqlx::{AnyPool, Row};

/// The window and whose activity: `agent_id` or every agent of the tenant.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    pub tenant_id: &'a str,
    pub agent_id: Option<&'a str>,
    pub start: i64,
    pub end: i64,
}

/// An agent as the card needs it.
#[derive(Debug, Clone)]
pub struct AgentFacts {
    pub id: String,
    pub name: String,
    pub team_id: Option<String>,
    pub environment: String,
    pub risk_level: Option<String>,
    /// When its next review is due (set with its review schedule).
    pub review_date: Option<i64>,
}

/// One approval raised in the window.
#[derive(Debug, Clone)]
pub struct ApprovalFacts {
    pub status: String,
    pub reviewer_id: Option<String>,
    pub created_at: i64,
    pub resolved_at: Option<i64>,
}

/// Counts per agent.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub evaluated: i64,
    pub failed: i64,
    pub human_reviews: i64,
    pub blocks: i64,
    pub quarantines: i64,
}

pub async fn agents(pool: &AnyPool, scope: Scope<'_>) -> Result<Vec<AgentFacts>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT id, name, team_id, environment, risk_level, review_date \
         FROM agents WHERE tenant_id = $1 AND deleted_at IS NULL AND ($2 IS NULL OR id = $2) \
         ORDER BY id",
    )
    .bind(scope.tenant_id)
    .bind(scope.agent_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(AgentFacts {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                team_id: row.try_get("team_id")?,
                environment: row.try_get("environment")?,
                risk_level: row.try_get("risk_level")?,
                review_date: row.try_get("review_date")?,
            })
        })
        .collect()
}

/// The approvals raised in the window, by agent, with their status as of `now`.
pub async fn approvals(
    pool: &AnyPool,
    scope: Scope<'_>,
    now: i64,
) -> Result<HashMap<String, Vec<ApprovalFacts>>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT agent_id, CASE WHEN status = 'pending' AND expires_at <= $5 THEN 'expired' \
         ELSE status END AS status, reviewer_id, created_at, resolved_at FROM approvals \
         WHERE tenant_id = $1 AND ($2 IS NULL OR agent_id = $2) \
         AND created_at >= $3 AND created_at < $4",
    )
    .bind(scope.tenant_id)
    .bind(scope.agent_id)
    .bind(scope.start)
    .bind(scope.end)
    .bind(now)
    .fetch_all(pool)
    .await?;
    let mut by_agent: HashMap<String, Vec<ApprovalFacts>> = HashMap::new();
    for row in &rows {
        by_agent
            .entry(row.try_get("agent_id")?)
            .or_default()
            .push(ApprovalFacts {
                status: row.try_get("status")?,
                reviewer_id: row.try_get("reviewer_id")?,
                created_at: row.try_get("created_at")?,
                resolved_at: row.try_get("resolved_at")?,
            });
    }
    Ok(by_agent)
}

/// Whether a decision's result set holds a failure, and a human-review flag.
const FAILED: &str = "EXISTS (SELECT 1 FROM policy_result_set_members m \
     WHERE m.set_id = {set} AND m.result = 'fail')";
const REVIEWED: &str = "EXISTS (SELECT 1 FROM policy_result_set_members m \
     WHERE m.set_id = {set} AND m.policy_type = 'require_human_review' \
     AND m.result = 'pass' AND m.reason = 'flagged for human review')";

/// Decisions (refused or held ones, and forwarded requests' on their usage records),
/// their failures and human-review flags, blocks and quarantines, by agent.
pub async fn counts(
    pool: &AnyPool,
    scope: Scope<'_>,
) -> Result<HashMap<String, Counts>, sqlx::Error> {
    let mut by_agent: HashMap<String, Counts> = HashMap::new();
    let refused_failed = FAILED.replace("{set}", "d.result_set_id");
    let refused_reviewed = REVIEWED.replace("{set}", "d.result_set_id");
    let decided = sqlx::query(&format!(
        "SELECT d.agent_id, COUNT(*) AS evaluated, \
         CAST(SUM(CASE WHEN {refused_failed} THEN 1 ELSE 0 END) AS BIGINT) AS failed, \
         CAST(SUM(CASE WHEN {refused_reviewed} THEN 1 ELSE 0 END) AS BIGINT) AS reviewed \
         FROM policy_decisions d WHERE d.tenant_id = $1 AND ($2 IS NULL OR d.agent_id = $2) \
         AND d.evaluated_at >= $3 AND d.evaluated_at < $4 GROUP BY d.agent_id"
    ))
    .bind(scope.tenant_id)
    .bind(scope.agent_id)
    .bind(scope.start)
    .bind(scope.end)
    .fetch_all(pool)
    .await?;
    let forwarded_reviewed = REVIEWED.replace("{set}", "u.decision_set_id");
    let forwarded = sqlx::query(&format!(
        "SELECT u.agent_id, COUNT(*) AS evaluated, 0 AS failed, \
         CAST(SUM(CASE WHEN {forwarded_reviewed} THEN 1 ELSE 0 END) AS BIGINT) AS reviewed \
         FROM usage_records u WHERE u.tenant_id = $1 AND ($2 IS NULL OR u.agent_id = $2) \
         AND u.recorded_at >= $3 AND u.recorded_at < $4 AND u.decision_set_id IS NOT NULL \
         GROUP BY u.agent_id"
    ))
    .bind(scope.tenant_id)
    .bind(scope.agent_id)
    .bind(scope.start)
    .bind(scope.end)
    .fetch_all(pool)
    .await?;
    for row in decided.iter().chain(&forwarded) {
        let counts = by_agent.entry(row.try_get("agent_id")?).or_default();
        counts.evaluated += row.try_get::<i64, _>("evaluated")?;
        counts.failed += row.try_get::<Option<i64>, _>("failed")?.unwrap_or(0);
        counts.human_reviews += row.try_get::<Option<i64>, _>("reviewed")?.unwrap_or(0);
    }
    let flags = sqlx::query(
        "SELECT target_id, event_type, COUNT(*) AS events FROM audit_events \
         WHERE tenant_id = $1 AND ($2 IS NULL OR target_id = $2) \
         AND event_type IN ('agent.blocked', 'agent.quarantined') \
         AND occurred_at >= $3 AND occurred_at < $4 GROUP BY target_id, event_type",
    )
    .bind(scope.tenant_id)
    .bind(scope.agent_id)
    .bind(scope.start)
    .bind(scope.end)
    .fetch_all(pool)
    .await?;
    for row in &flags {
        let counts = by_agent.entry(row.try_get("target_id")?).or_default();
        let events: i64 = row.try_get("events")?;
        match row.try_get::<String, _>("event_type")?.as_str() {
            "agent.blocked" => counts.blocks += events,
            _ => counts.quarantines += events,
        }
    }
    Ok(by_agent)
}

/// The tenant's enabled policies that defer to a person (`require_approval`,
/// `require_human_review`): their scopes.
pub async fn human_policy_scopes(
    pool: &AnyPool,
    tenant_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT scope FROM policies WHERE tenant_id = $1 AND enabled = 1 \
         AND policy_type IN ('require_approval', 'require_human_review')",
    )
    .bind(tenant_id)
    .fetch_all(pool)
    .await
}
