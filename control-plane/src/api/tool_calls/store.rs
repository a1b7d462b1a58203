//! SQL of tool calls. Every statement filters by tenant.

use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};
use warden_shared::timestamp::Timestamp;

use super::ToolCall;
use crate::api::envelope::Page;

const SELECT: &str = "SELECT id, agent_id, api_key_id, server_id, server, tool, outcome, \
    decision, policy_id, latency_ms, recorded_at FROM tool_calls ";

const FILTER: &str = "WHERE tenant_id = $1 AND recorded_at >= $2 \
    AND ($3 IS NULL OR agent_id = $3) AND ($4 IS NULL OR server = $4) \
    AND ($5 IS NULL OR tool = $5) AND ($6 IS NULL OR decision = $6) \
    AND ($7 IS NULL OR outcome = $7)";

/// The filters of a list, as stored values.
pub struct Filter<'a> {
    pub agent_id: Option<&'a str>,
    pub server: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub decision: Option<&'a str>,
    pub outcome: Option<&'a str>,
    pub since: i64,
}

pub async fn list(
    pool: &AnyPool,
    tenant_id: &str,
    filter: &Filter<'_>,
    page: Page,
) -> Result<(Vec<ToolCall>, i64), sqlx::Error> {
    let calls = sqlx::query(&format!(
        "{SELECT}{FILTER} ORDER BY recorded_at DESC, id DESC LIMIT $8 OFFSET $9"
    ))
    .bind(tenant_id)
    .bind(filter.since)
    .bind(filter.agent_id)
    .bind(filter.server)
    .bind(filter.tool)
    .bind(filter.decision)
    .bind(filter.outcome)
    .bind(page.limit)
    .bind(page.offset())
    .fetch_all(pool)
    .await?
    .iter()
    .map(call_from_row)
    .collect::<Result<_, _>>()?;
    let total = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM tool_calls {FILTER}"))
        .bind(tenant_id)
        .bind(filter.since)
        .bind(filter.agent_id)
        .bind(filter.server)
        .bind(filter.tool)
        .bind(filter.decision)
        .bind(filter.outcome)
        .fetch_one(pool)
        .await?;
    Ok((calls, total))
}

fn call_from_row(row: &AnyRow) -> Result<ToolCall, sqlx::Error> {
    Ok(ToolCall {
        id: row.try_get("id")?,
        agent_id: row.try_get("agent_id")?,
        api_key_id: row.try_get("api_key_id")?,
        server_id: row.try_get("server_id")?,
        server: row.try_get("server")?,
        tool: row.try_get("tool")?,
        outcome: row.try_get("outcome")?,
        decision: row.try_get("decision")?,
        policy_id: row.try_get("policy_id")?,
        latency_ms: row.try_get("latency_ms")?,
        recorded_at: Timestamp::from_millis(row.try_get("recorded_at")?),
    })
}
