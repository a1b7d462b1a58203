//! Tool calls (the MCP gateway): every call an agent made through `/mcp`, allowed or
//! refused, as the proxies recorded it: agent, key, server, tool, outcome, decision, the
//! policy that refused or held it, latency. Read with `governance:read`, newest first.
//! Records arrive with the proxies' usage batches (spooled, idempotent); they are not
//! cost-ledger entries.

pub(crate) mod service;
mod store;

use axum::extract::State;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_shared::timestamp::Timestamp;

use crate::api::envelope::{self, PageQuery, Paged};
use crate::api::extract::ApiQuery;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;
use crate::validate::Text;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_tool_calls))
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ToolCall {
    /// The proxy's record id.
    pub id: String,
    pub agent_id: String,
    pub api_key_id: Option<String>,
    /// The registered server's id; empty when the name matched no server.
    pub server_id: String,
    pub server: String,
    /// The tool's name on its server (agents see `<server>__<tool>` at `/mcp`).
    pub tool: String,
    /// `ok`, `tool_error` (the tool answered with an error), `upstream_error` (the
    /// server could not be reached or failed) or `refused` (by Warden).
    pub outcome: String,
    /// `allowed`, or the refusal's code (`approval_required`, `policy_violation`,
    /// `rate_limit_exceeded`, `agent_blocked`, `agent_quarantined`,
    /// `tool_not_approved`, `tool_not_found`, ...); `upstream_unreachable` with outcome
    /// `upstream_error` when the proxy could not list the server to check the tool.
    pub decision: String,
    /// The policy that refused or held the call.
    pub policy_id: Option<i64>,
    /// From the call's arrival at the proxy to its answer.
    pub latency_ms: i64,
    #[schema(value_type = String, format = DateTime)]
    pub recorded_at: Timestamp,
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ToolCallQuery {
    pub agent_id: Option<Text<1, 100>>,
    /// A server's name.
    pub server: Option<Text<1, 200>>,
    /// A tool's name on its server.
    pub tool: Option<Text<1, 200>>,
    pub decision: Option<Text<1, 64>>,
    pub outcome: Option<Text<1, 32>>,
    /// From this time on (ISO 8601).
    #[param(value_type = Option<String>, format = DateTime)]
    pub since: Option<Timestamp>,
    #[param(minimum = 1, maximum = 1000000, default = 1)]
    pub page: Option<i64>,
    #[param(minimum = 1, maximum = 100, default = 20)]
    pub limit: Option<i64>,
}

#[utoipa::path(get, path = "/tool-calls", tag = "mcp", params(ToolCallQuery),
    security(("bearer" = ["governance:read"])),
    responses((status = 200, description = "One page of the tenant's tool calls, newest first", body = Paged<ToolCall>)))]
async fn list_tool_calls(
    caller: Authorized<require::GovernanceRead>,
    State(state): State<AppState>,
    ApiQuery(query): ApiQuery<ToolCallQuery>,
) -> ApiResult<Response> {
    let page = PageQuery {
        page: query.page,
        limit: query.limit,
    }
    .try_into()?;
    let (calls, total) = service::list(&state, &caller, &query, page).await?;
    Ok(envelope::paged(calls, page, total))
}
