//! Relationships (spec 2.20, 4.3): what each agent calls over the last 30 days — the
//! models and their providers (from the ledger) and the MCP tools it called through the
//! gateway (from its tool-call records), with counts — per agent and as one graph of the
//! tenant. Agents an agent calls are not observed: that list stays empty.
//! `registry:read`.

mod store;

use std::collections::BTreeMap;

use axum::extract::State;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use warden_shared::mcp::prefixed;

use crate::api::agents::get_agent_for;
use crate::api::envelope::{self, Envelope};
use crate::api::extract::ApiPath;
use crate::auth::{require, Authorized};
use crate::error::ApiResult;
use crate::state::AppState;

const WINDOW_MS: i64 = 30 * 86_400_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(agent_relationships))
        .routes(routes!(relationship_graph))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ModelCall {
    pub provider: String,
    pub model: String,
    pub request_count: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProviderCall {
    pub provider: String,
    pub request_count: i64,
}

/// What one agent called in the last 30 days.
#[derive(Debug, Serialize, ToSchema)]
pub struct Relationships {
    pub agent_id: String,
    pub models: Vec<ModelCall>,
    pub providers: Vec<ProviderCall>,
    /// MCP tools the agent called through the gateway (`<server>__<tool>`), most
    /// called first; refused calls do not count.
    pub tools: Vec<String>,
    /// Agents the agent called (empty until reported).
    pub agents: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Node {
    /// The agent's id, `model:<model name>`, `provider:<provider>`,
    /// `tool:<server>__<tool>` or `mcp_server:<server>`.
    pub id: String,
    pub name: String,
    /// `agent`, `model`, `provider`, `tool` or `mcp_server`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Agents only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub framework: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Edge {
    pub source: String,
    pub target: String,
    /// `calls_model` (agent → model), `served_by` (model → provider), `calls_tool`
    /// (agent → tool) or `provided_by` (tool → MCP server).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Requests, or tool calls that reached their server.
    pub request_count: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

#[utoipa::path(get, path = "/agents/{agent_id}/relationships", tag = "security",
    params(("agent_id" = String, Path)), security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "The models, providers and MCP tools the agent called in the last 30 days", body = Envelope<Relationships>)))]
async fn agent_relationships(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
    ApiPath(agent_id): ApiPath<String>,
) -> ApiResult<Response> {
    let agent = get_agent_for(&state, &caller, &agent_id).await?;
    let since = state.clock.now().as_millis() - WINDOW_MS;
    let calls = store::calls(state.db.pool(), &caller.tenant_id, Some(&agent.id), since).await?;
    let tools = store::tool_uses(state.db.pool(), &caller.tenant_id, Some(&agent.id), since)
        .await?
        .into_iter()
        .map(|tool| prefixed(&tool.server, &tool.tool))
        .collect();
    let mut providers: BTreeMap<String, i64> = BTreeMap::new();
    for call in &calls {
        *providers.entry(call.provider.clone()).or_default() += call.requests;
    }
    let mut providers: Vec<ProviderCall> = providers
        .into_iter()
        .map(|(provider, request_count)| ProviderCall {
            provider,
            request_count,
        })
        .collect();
    providers.sort_by(|a, b| {
        b.request_count
            .cmp(&a.request_count)
            .then(a.provider.cmp(&b.provider))
    });
    Ok(envelope::ok(Relationships {
        agent_id: agent.id,
        models: calls
            .into_iter()
            .map(|c| ModelCall {
                provider: c.provider,
                model: c.model,
                request_count: c.requests,
            })
            .collect(),
        providers,
        tools,
        agents: Vec::new(),
    }))
}

#[utoipa::path(get, path = "/relationships/graph", tag = "security",
    security(("bearer" = ["registry:read"])),
    responses((status = 200, description = "Every live agent, the models and providers and the MCP tools and servers they called in the last 30 days, and edges weighted by requests or calls", body = Envelope<Graph>)))]
async fn relationship_graph(
    caller: Authorized<require::RegistryRead>,
    State(state): State<AppState>,
) -> ApiResult<Response> {
    let now = state.clock.now().as_millis();
    let pool = state.db.pool();
    let agents = store::agents(pool, &caller.tenant_id, now).await?;
    let calls = store::calls(pool, &caller.tenant_id, None, now - WINDOW_MS).await?;
    let tools = store::tool_uses(pool, &caller.tenant_id, None, now - WINDOW_MS).await?;
    let mut graph = graph(agents, &calls);
    add_tools(&mut graph, &tools);
    Ok(envelope::ok(graph))
}

/// Adds the tools live agents called: a node per tool and per MCP server, `calls_tool`
/// edges from agents and `provided_by` edges to servers.
fn add_tools(graph: &mut Graph, uses: &[store::ToolUse]) {
    let live: std::collections::HashSet<String> = graph
        .nodes
        .iter()
        .filter(|node| node.kind == "agent")
        .map(|node| node.id.clone())
        .collect();
    // tool → (server, calls)
    let mut tools: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for tool_use in uses.iter().filter(|u| live.contains(&u.agent_id)) {
        let name = prefixed(&tool_use.server, &tool_use.tool);
        graph.edges.push(Edge {
            source: tool_use.agent_id.clone(),
            target: format!("tool:{name}"),
            kind: "calls_tool",
            request_count: tool_use.calls,
        });
        tools
            .entry(name)
            .or_insert_with(|| (tool_use.server.clone(), 0))
            .1 += tool_use.calls;
    }
    let mut servers: Vec<&String> = tools.values().map(|(server, _)| server).collect();
    servers.sort();
    servers.dedup();
    let server_nodes: Vec<Node> = servers
        .iter()
        .map(|s| plain_node(format!("mcp_server:{s}"), s, "mcp_server"))
        .collect();
    for (name, (server, calls)) in &tools {
        graph
            .nodes
            .push(plain_node(format!("tool:{name}"), name, "tool"));
        graph.edges.push(Edge {
            source: format!("tool:{name}"),
            target: format!("mcp_server:{server}"),
            kind: "provided_by",
            request_count: *calls,
        });
    }
    graph.nodes.extend(server_nodes);
}

fn graph(agents: Vec<store::AgentNode>, calls: &[store::Call]) -> Graph {
    let live: std::collections::HashSet<&str> = agents.iter().map(|a| a.id.as_str()).collect();
    let mut edges = Vec::new();
    // model → (provider → requests)
    let mut served: BTreeMap<(String, String), i64> = BTreeMap::new();
    for call in calls.iter().filter(|c| live.contains(c.agent_id.as_str())) {
        edges.push(Edge {
            source: call.agent_id.clone(),
            target: format!("model:{}", call.model),
            kind: "calls_model",
            request_count: call.requests,
        });
        *served
            .entry((call.model.clone(), call.provider.clone()))
            .or_default() += call.requests;
    }
    let mut nodes: Vec<Node> = agents
        .into_iter()
        .map(|agent| Node {
            id: agent.id,
            name: agent.name,
            kind: "agent",
            status: Some(agent.status),
            blocked: Some(agent.blocked),
            framework: agent.framework,
        })
        .collect();
    let mut models: Vec<&String> = served.keys().map(|(model, _)| model).collect();
    models.dedup();
    let mut providers: Vec<&String> = served.keys().map(|(_, provider)| provider).collect();
    providers.sort();
    providers.dedup();
    nodes.extend(
        models
            .iter()
            .map(|m| plain_node(format!("model:{m}"), m, "model")),
    );
    nodes.extend(
        providers
            .iter()
            .map(|p| plain_node(format!("provider:{p}"), p, "provider")),
    );
    edges.extend(served.iter().map(|((model, provider), requests)| Edge {
        source: format!("model:{model}"),
        target: format!("provider:{provider}"),
        kind: "served_by",
        request_count: *requests,
    }));
    Graph { nodes, edges }
}

/// A node that is not an agent: a model, provider, tool or MCP server.
fn plain_node(id: String, name: &str, kind: &'static str) -> Node {
    Node {
        id,
        name: name.to_owned(),
        kind,
        status: None,
        blocked: None,
        framework: None,
    }
}
