//! `tools/list`: the tools an agent may see, each server's listing asked at once and
//! filtered by the approved definitions and the policies that hide tools.

use futures_util::future::join_all;
use rmcp::model::Tool;
use warden_shared::mcp::prefixed;
use warden_shared::policy::{evaluate, Counters, Decision, PolicyType, RatePer, Scope};
use warden_shared::registry::Provider;
use warden_shared::snapshot::McpServerState;

use super::handler::{in_path, Caller, GatewayShared};
use super::upstream::ListedTool;
use crate::state::KeyView;

impl GatewayShared {
    /// The tools `caller` may see: every enabled server's (or the path's one server's)
    /// tools whose definitions are the approved ones, minus those an allowlist or block
    /// policy refuses the caller's agent. Tools a `require_approval` policy holds are
    /// listed: calling them asks for the approval.
    pub(super) async fn visible_tools(&self, caller: &Caller) -> Vec<Tool> {
        let tenant_id = &caller.view.key.tenant_id;
        let servers = self.state.mcp_servers(tenant_id).unwrap_or_default();
        let servers: Vec<&McpServerState> = servers.iter().filter(|s| in_path(caller, s)).collect();
        // Asked all at once: a listing takes as long as the slowest server, not the sum.
        let listings = join_all(
            servers
                .iter()
                .map(|server| self.upstreams.list_tools(server)),
        )
        .await;
        let mut visible = Vec::new();
        for (server, listed) in servers.into_iter().zip(listings) {
            let listed = match listed {
                Ok(listed) => listed,
                Err(error) => {
                    tracing::warn!(server = %server.name, tenant_id, %error, "MCP server's tools not listed");
                    continue;
                }
            };
            for ListedTool {
                mut tool,
                fingerprint,
            } in listed
            {
                if !self.drifts.is_pinned(server, &tool.name, &fingerprint) {
                    continue;
                }
                let name = prefixed(&server.name, &tool.name);
                if !self.listable(&caller.view, &name) {
                    continue;
                }
                if caller.server.is_none() {
                    tool.name = name.into();
                }
                visible.push(tool);
            }
        }
        visible
    }

    /// Whether the policies let the agent see the tool: no allowlist leaves it out, no
    /// block lists it. Rate limits and approvals are decided per call, not here.
    fn listable(&self, view: &KeyView, tool: &str) -> bool {
        let (Some(policies), Some(agent)) = (self.state.policies(&view.key.tenant_id), &view.agent)
        else {
            return true;
        };
        let facts = warden_shared::policy::RequestFacts {
            tenant_id: &view.key.tenant_id,
            agent_id: &agent.id,
            team_id: agent.team_id.as_deref(),
            environment: &agent.environment,
            api_key_id: Some(&view.key.id),
            provider: Provider::Mcp,
            model: tool,
            estimated_cost_micros: 0,
        };
        !matches!(
            evaluate(&policies, &facts, &Listing).decision,
            Decision::Refuse {
                policy_type: PolicyType::ToolAllowlist | PolicyType::BlockTool,
                ..
            }
        )
    }
}

/// Counters for deciding what a listing shows: no spend, empty rate windows, no
/// grants; only allowlists and blocks can hide a tool.
struct Listing;

impl Counters for Listing {
    fn month_spend_micros(&self, _scope: &Scope) -> i64 {
        0
    }
    fn minute_counts(&self, _policy_id: i64, _per: RatePer) -> (i64, i64) {
        (0, 0)
    }
    fn approval_granted(&self, _policy_id: i64) -> bool {
        false
    }
}
