//! SQL of the relationships: which models, on which providers, the tenant's agents
//! called in a window, from the ledger's hourly rollup; the MCP tools they called, from
//! the gateway's tool-call records; and the live agents.

use sqlx::{AnyPool, Row};

/// Requests of one agent to one model of one provider.
#[derive(Debug, Clone)]
pub struct Call {
    pub agent_id: String,
    pub provider: String,
    pub model: String,
    pub requests: i64,
}

/// An agent as a graph node.
#[derive(Debug, Clone)]
pub struct AgentNode {
    pub id: String,
    pub name: String,
    pub status: String,
    pub blocked: bool,
    pub framework: Option<String>,
}

/// Calls since `since`, of `agent_id` or of every agent, most requests first.
pub async fn calls(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: Option<&str>,
    since: i64,
) -> Result<Vec<Call>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT agent_id, model_provider, model_name, CAST(SUM(requests) AS BIGINT) AS requests FROM usage_hourly \
         WHERE tenant_id = $1 AND hour >= $2 AND ($3 IS NULL OR agent_id = $3) \
         GROUP BY agent_id, model_provider, model_name \
         ORDER BY SUM(requests) DESC, agent_id, model_provider, model_name",
    )
    .bind(tenant_id)
    .bind(since)
    .bind(agent_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(Call {
                agent_id: row.try_get("agent_id")?,
                provider: row.try_get("model_provider")?,
                model: row.try_get("model_name")?,
                requests: row.try_get("requests")?,
            })
        })
        .collect()
}

/// Tool calls through the MCP gateway that reached their server: one agent's tool.
#[derive(Debug, Clone)]
pub struct ToolUse {
    pub agent_id: String,
    pub server: String,
    pub tool: String,
    pub calls: i64,
}

/// Tool calls since `since` that reached their server (not refused), of `agent_id` or of
/// every agent, most calls first.
pub async fn tool_uses(
    pool: &AnyPool,
    tenant_id: &str,
    agent_id: Option<&str>,
    since: i64,
) -> Result<Vec<ToolUse>, sqlx::Error> {
    let rows = sqlx::query(
        "SELECT agent_id, server, tool, COUNT(*) AS calls FROM tool_calls \
         WHERE tenant_id = $1 AND recorded_at >= $2 AND ($3 IS NULL OR agent_id = $3) \
         AND outcome <> 'refused' \
         GROUP BY agent_id, server, tool ORDER BY COUNT(*) DESC, agent_id, server, tool",
    )
    .bind(tenant_id)
    .bind(since)
    .bind(agent_id)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(ToolUse {
                agent_id: row.try_get("agent_id")?,
                server: row.try_get("server")?,
                tool: row.try_get("tool")?,
                calls: row.try_get("calls")?,
            })
        })
        .collect()
}

pub async fn agents(
    pool: &AnyPool,
    tenant_id: &str,
    now: i64,
) -> Result<Vec<AgentNode>, sqlx::Error> {
    let rows = sqlx::query(concat!(
        "SELECT a.id, a.name, ",
        crate::effective_status!("$2"),
        " AS status, a.blocked, a.framework FROM agents a \
         WHERE a.tenant_id = $1 AND a.deleted_at IS NULL ORDER BY a.created_at, a.id"
    ))
    .bind(tenant_id)
    .bind(now)
    .fetch_all(pool)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(AgentNode {
                id: row.try_get("id")?,
                name: row.try_get("name")?,
                status: row.try_get("status")?,
                blocked: row.try_get::<i64, _>("blocked")? == 1,
                framework: row.try_get("framework")?,
            })
        })
        .collect()
}
